"""A ResidualGPT as a TransformerLens model, on either major (the public names are interp's: interp.load_tl, ...).

    major.py           which TransformerLens major is installed; both majors' config fields (light)
    load.py            load_tl: the installed major's model of a checkpoint
    hooked/            TL 3.x: a HookedTransformer computing ResidualGPT's function (convert, rewire,
                       caches, exported, persist)
    bridge.py          TL 4.x: a TransformerBridge running ResidualGPT's own forward; save_bridge / load_bridge
    bridge_adapter.py  TL 4.x: the bridge's architecture adapter and its components
    saved.py           the saved-export format both majors' save / load share

Nothing is imported here: `import interp.tl.major` stays light, and interp.tl.hooked
refuses by name under TransformerLens 4.
"""

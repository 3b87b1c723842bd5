"""A ResidualGPT as a TransformerLens model, on either major (the public names are interp's: interp.load_tl, ...).

    major.py       which major is installed; tl_config_fields (both majors' config; light)
    load.py        load_tl: a HookedTransformer on TL 3.x, a TransformerBridge on 4.x
    guards.py      every guard both majors' exports share, written once (ExportGuards: to_tokens, to_string,
                   loss, tokens_to_residual_directions, the cache's stream reads, W_Q / W_K / QK), resolve_source
    hooked/        TL 3.x: a checkpoint as a HookedTransformer (refused by name on 4.x):
      convert.py     TL config, weights in TL's layout, to_hooked_transformer
      exactness.py   the export's logits against ResidualGPT's on a probe batch (after conversion and processing)
      rewire.py      the hook points that remove a residual path or route scores
      caches.py      caches that warn where the stream is not additive
      exported.py    ExportedHookedTransformer: the export's own class (warnings at the call, eval mode)
      generation.py  the export's generate (past n_ctx, no new tokens, empty prompts, padding)
      fold.py        LayerNorm folding in TL's layout (TL 3.9's own guesses square layouts wrong)
      persist.py     save_hooked / load_hooked (files only load_hooked reads)
      hooked_file.py a save_hooked file checked before the export is built (TL's config of its model_config)
      sae_methods.py SAELens's run_with_saes / add_sae on the export: a HookedSAETransformer from its first
                     SAE call (SAELens imported then), the rewiring kept where an SAE replaces a hook point
    bridge.py      TL 4.x: to_transformer_bridge, save_bridge / load_bridge (ResidualGPT's own forward)
    bridge_adapter.py  TL 4.x: the bridge's architecture adapter and its components
    bridge_generate.py TL 4.x: the bridge's generate (one prompt at a time, past n_ctx, no new tokens)
    bridge_hooks.py    TL 4.x: the bridge's hook names, hook returns and remove_batch_dim checked
    bridge_weights.py  TL 4.x: the bridge's weight properties, in-place edits written back or refused
    routing_words.py   HiddenRoutingWarning's text and routing_quiet, shared by both majors
    tokens.py      the exports' token boundary, both majors: untrained and special ids, padding, no tokenizer
    stream_reads.py  TL's cache methods that read the stream as a sum or through a LayerNorm's scale, checked
    bridge_cache.py    TL 4.x: the bridge's ActivationCache (TL's key shorthand, hooks a mixer lacks)
    saved.py       the saved-export format both save / load pairs share (schemas, tokenizer, strict load)
    saved_file.py  a save_bridge file checked before the bridge is built; the model_config both files record

Nothing is imported here: `import interp.tl.major` stays light, and interp.tl.hooked
refuses by name under TransformerLens 4.
"""

"""Reading the model: the residual stream's layout, exact decompositions, interventions, attention scores,
a cache against its model, reference levels, nnsight / circuitsvis and sparse autoencoders.

    stream_layout.py  a model's residual stream: its wiring, sites, and the terms that reach each site
    decompose.py   exact decompositions, direct logit attribution, logit lens, for every wiring
                   and every TransformerLens model kind (or a refusal that names what it cannot do)
    interventions.py  inference-time interventions as TransformerLens hooks (remove a residual path,
                   knock out / keep only the self path, uniform pattern, head ablation, patching)
    cache_origin.py  a cache against the model it is read with (another model, sizes or wiring)
    scores.py      attention scores rebuilt from hook_q / hook_k with the mixer's routing (self_bias)
    interop.py     nnsight and circuitsvis on a ResidualGPT itself (optional extra; no TL adapter)
    sae.py         sparse autoencoders (SAELens, the `sae` extra, TL 3): the export's weight processing as
                   SAELens records it, the check at a splice, the same SAE spliced into ResidualGPT
    levels.py      add-one unigram / pair reference levels (training and the identity probes)
"""

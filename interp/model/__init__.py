"""The model: ResidualGPT (gpt.py), its sublayers and mixers, its activation cache, its dropout streams, the next
token (next_token.py), the Python API's boundary checks (api.py) and a checkpoint's vocabulary (vocab.py).

    gpt.py         ResidualGPT (Block), a transformer_lens HookedRootModule;
                   from_checkpoint() is the one way from a checkpoint to a model
    sublayers.py   LayerNorm and MLP with TL's hooks; is_hooked (the explicit path runs only when read)
    mixers.py      the mixers (Mixer, PatternMixer; attention, uniform, position_blind), each
                   declaring pattern, heads, hook sites, TL export and decomposition beside forward
    activation_cache.py  ResidualActivationCache: TL's ActivationCache for it, refusing what assumes
                   an additive stream or TL's weight layout; NamedCache, the base of every export's cache too
    dropout.py     dropout masks from each run's own stream (seed, rank, micro-step, site): an ensemble
                   member draws its solo run's masks, a resume draws the same with nothing stored
    next_token.py  the next token from logits (greedy, or drawn at any finite temperature >= 0 among the top k)
                   and the temperature check; ResidualGPT.generate and interp.sample use it
    vocab.py       a checkpoint's vocabulary: codec (text <-> ids) for sample and plot_attention
    eval_mode.py   a model read in eval mode, its training flag restored after; passes over batches under hooks
    api.py         the Python API's boundary: tokens, ids, hook names and returns, batches, q / k,
                   an edited model.cfg (one error type per kind: ShapeError, TokenIdError, ...)
"""

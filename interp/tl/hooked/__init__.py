"""A ResidualGPT as a TransformerLens HookedTransformer that computes the same function.

The public face of the export; each concern has its module:

    convert    TL's config and the weights in TL's layout (the attention slot as the
               mixer declares, or refused by name); to_hooked_transformer
    rewire     hook points that do what TL's block cannot: a mixer's routing of the
               scores, a removed residual path, the n_ctx check
    exported   the class every export is: TL's HookedTransformer plus a word where a TL habit
               misleads (logit_attrs without fold_ln, prepend_bos, W_Q @ W_K under a routing)
               and nanoGPT's crop when generating past n_ctx
    caches     for residual != 'full': the export and its caches warn where TL's additive
               methods (decompose_resid, logit_attrs, ...) would answer wrongly
    persist    save_hooked / load_hooked, exact round trip, tokenizer included, in a layout
               no plain HookedTransformer loader takes in (the format both majors share: interp.tl.saved)
    hooked_file  a save_hooked file checked before the export is built
    generation   the export's generate (past n_ctx, no new tokens, empty prompts, padding)
    fold       LayerNorm folding in TL's layout
    exactness  the export's logits against ResidualGPT's on a probe batch
    sae_methods  SAELens's run_with_saes / add_sae on the export

The tokenizers live in interp.files.tokenizers (which one a checkpoint gets: interp.model.vocab).
The position embedding refuses positions past n_ctx (TL would index out of
range, or with to_tokens cut the prompt silently).

TransformerLens 3.x only: TL 4 removed HookedTransformer, so there importing this
package is a ToolkitError naming interp.to_transformer_bridge (interp.tl.bridge).
"""

from interp.tl.major import require_tl3

require_tl3()  # before anything below imports HookedTransformer

# ruff: noqa: E402

from interp.tl.hooked.caches import NonAdditiveCache, NonAdditiveHookedTransformer, NonAdditiveResidualWarning
from interp.tl.hooked.convert import hooked_config, tl_state_dict, to_hooked_transformer
from interp.tl.hooked.exported import ExportCache, ExportedHookedTransformer, logit_attrs_gap
from interp.tl.hooked.persist import HOOKED_SCHEMA, load_hooked, save_hooked
from interp.tl.hooked.rewire import (
    ContextCheckedPosEmbed,
    NoResidualHookPoint,
    RecordedHookPoint,
    RoutedScoresHookPoint,
)

__all__ = [
    "HOOKED_SCHEMA",
    "ExportCache",
    "ExportedHookedTransformer",
    "ContextCheckedPosEmbed",
    "NoResidualHookPoint",
    "NonAdditiveCache",
    "NonAdditiveHookedTransformer",
    "NonAdditiveResidualWarning",
    "RecordedHookPoint",
    "RoutedScoresHookPoint",
    "hooked_config",
    "load_hooked",
    "logit_attrs_gap",
    "save_hooked",
    "tl_state_dict",
    "to_hooked_transformer",
]

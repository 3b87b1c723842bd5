"""The caches of an export whose residual stream is not additive (a residual path removed).

TransformerLens's decompose_resid, get_full_resid_decomposition, stack_head_results,
stack_neuron_results, logit_attrs (and the model's own accumulated_bias) assume
resid = embeddings + every sublayer output (and every bias). With a residual path
removed that is false, so an export with residual != 'full' is built as a
NonAdditiveHookedTransformer, whose caches warn (NonAdditiveResidualWarning) at every
call of those methods, on a cache built by hand from the export's activations too
(interp.tl.stream_reads; the user's filters still decide: "ignore" silences it); so
does its accumulated_bias. The export itself warns once when made.
interp.reading.decompose follows the wiring and is exact.
"""

from __future__ import annotations

import warnings
from typing import Any

from transformer_lens import HookedTransformer, HookedTransformerConfig

from interp.config.model_config import ModelConfig
from interp.errors import ToolkitWarning, warn_each_call
from interp.tl import stream_reads
from interp.tl.hooked.exported import ExportCache, ExportedHookedTransformer
from interp.tl.stream_reads import ADDITIVE_METHODS, ADDITIVE_MODEL_METHODS
from interp.tl.tokens import warn_at_user


class NonAdditiveResidualWarning(ToolkitWarning):
    """A TransformerLens method that assumes resid = embeddings + every sublayer output, on a model where it is not."""


def _non_additive_message(residual: str, method: str, owner: str = "ActivationCache") -> str:
    return (
        f"residual={residual!r}: {owner}.{method} assumes the residual stream is the sum of the embeddings "
        "and every sublayer output (and every bias b_O, b_out), which a removed residual path breaks, so its stacks "
        "do not sum to the stream (and their logit attributions not to the logit). "
        "Use interp.reading.decompose.decompose / "
        "direct_logit_attribution, which follow this model's wiring. accumulated_resid and the logit lens read the "
        "stream itself and are right."
    )


class NonAdditiveCache(ExportCache):
    """The ActivationCache class of an export with a removed residual path. The additive methods warn at every
    call, as on any cache of such an export (a hand-built ActivationCache(store, export) too): the export's
    _check_stream_read does it (interp.tl.stream_reads)."""


class NonAdditiveHookedTransformer(ExportedHookedTransformer):
    """An export with a removed residual path: TL's additive cache methods warn at every call."""

    cache_class = NonAdditiveCache

    @property
    def residual_config(self) -> str:
        return getattr(self.cfg, "residual_gpt_config", {}).get("residual", "ablated")

    def _check_stream_read(self, method: str, args: dict[str, Any]) -> None:
        if method in ADDITIVE_METHODS:
            warn_each_call(_non_additive_message(self.residual_config, method), NonAdditiveResidualWarning)
        super()._check_stream_read(method, args)

    def accumulated_bias(self, *args: Any, **kwargs: Any) -> Any:
        """TL's sum of every b_O and b_out before the layer: warns at each call (only some of them reach the
        stream); once, at the outermost call, inside a cache method that reads it (get_full_resid_decomposition)."""
        with stream_reads.outermost() as first:
            if first:
                message = _non_additive_message(self.residual_config, "accumulated_bias", "HookedTransformer")
                warn_each_call(message, NonAdditiveResidualWarning)
            return super().accumulated_bias(*args, **kwargs)


def new_hooked_transformer(tl_cfg: HookedTransformerConfig, cfg: ModelConfig) -> HookedTransformer:
    """An empty export of the class cfg's wiring needs (NonAdditive... for residual != 'full')."""
    cls = ExportedHookedTransformer if cfg.residual == "full" else NonAdditiveHookedTransformer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TL 3.x nudges towards TransformerBridge
        return cls(tl_cfg)


def warn_non_additive(cfg: ModelConfig) -> None:
    """Warn, when the export is made, that its caches' additive methods will warn (residual != 'full')."""
    if cfg.residual == "full":
        return
    warn_at_user(
        f"residual={cfg.residual!r}: the residual stream is not the sum of the embeddings and every sublayer output; "
        f"TransformerLens's {', '.join(ADDITIVE_METHODS)} warn on this model's caches, and so does its "
        f"{', '.join(ADDITIVE_MODEL_METHODS)}. "
        "interp.reading.decompose gives the exact decomposition and direct logit attribution for this wiring",
        NonAdditiveResidualWarning,
    )

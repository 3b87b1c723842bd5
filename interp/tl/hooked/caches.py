"""The caches of an export whose residual stream is not additive (a residual path removed).

TransformerLens's decompose_resid, get_full_resid_decomposition,
stack_head_results and logit_attrs assume resid = embeddings + every sublayer
output. With a residual path removed that is false, so an export with
residual != 'full' is built as a NonAdditiveHookedTransformer, whose caches
warn (NonAdditiveResidualWarning) when those methods are called (Python's warning
filters decide how often it shows: by default once per calling line); the export
itself warns once when made. interp.decompose follows the wiring and is exact.
"""

from __future__ import annotations

import warnings
from typing import Any

from transformer_lens import ActivationCache, HookedTransformer, HookedTransformerConfig

from interp.config import ModelConfig
from interp.tl.hooked.exported import ExportCache, ExportedHookedTransformer


class NonAdditiveResidualWarning(UserWarning):
    """A TransformerLens method that assumes resid = embeddings + every sublayer output, on a model where it is not."""


_ADDITIVE_METHODS = ("decompose_resid", "get_full_resid_decomposition", "stack_head_results", "logit_attrs")


def _warn(message: str, stacklevel: int) -> None:
    """Warn, attributed to the caller's line; Python's filters (the user's) decide how often (never touched here)."""
    warnings.warn(message, NonAdditiveResidualWarning, stacklevel=stacklevel + 1)


def _non_additive_message(residual: str, method: str) -> str:
    return (
        f"residual={residual!r}: ActivationCache.{method} assumes the residual stream is the sum of the embeddings "
        "and every sublayer output, which a removed residual path breaks, so its stacks do not sum to the stream "
        "(and their logit attributions not to the logit). Use interp.decompose.decompose / "
        "direct_logit_attribution, which follow this model's wiring. accumulated_resid and the logit lens read the "
        "stream itself and are right."
    )


class NonAdditiveCache(ExportCache):
    """The ActivationCache of an export with a removed residual path: the additive methods warn when called."""

    _depth = 0  # nested calls (get_full_resid_decomposition -> stack_head_results) warn once

    def _warn_then(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._depth == 0:
            residual = getattr(self.model, "residual_config", "ablated")
            _warn(_non_additive_message(residual, method), stacklevel=3)
        self._depth += 1
        try:
            return getattr(ActivationCache, method)(self, *args, **kwargs)  # TL's, without a second word
        finally:
            self._depth -= 1

    def decompose_resid(self, *args: Any, **kwargs: Any) -> Any:
        return self._warn_then("decompose_resid", *args, **kwargs)

    def get_full_resid_decomposition(self, *args: Any, **kwargs: Any) -> Any:
        return self._warn_then("get_full_resid_decomposition", *args, **kwargs)

    def stack_head_results(self, *args: Any, **kwargs: Any) -> Any:
        return self._warn_then("stack_head_results", *args, **kwargs)

    def logit_attrs(self, *args: Any, **kwargs: Any) -> Any:
        return self._warn_then("logit_attrs", *args, **kwargs)


class NonAdditiveHookedTransformer(ExportedHookedTransformer):
    """An export with a removed residual path: run_with_cache returns a NonAdditiveCache."""

    cache_class = NonAdditiveCache

    @property
    def residual_config(self) -> str:
        return getattr(self.cfg, "residual_gpt_config", {}).get("residual", "ablated")


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
    _warn(
        f"residual={cfg.residual!r}: the residual stream is not the sum of the embeddings and every sublayer output; "
        f"TransformerLens's {', '.join(_ADDITIVE_METHODS)} warn on this model's caches. "
        "interp.decompose gives the exact decomposition and direct logit attribution for this wiring",
        stacklevel=3,
    )

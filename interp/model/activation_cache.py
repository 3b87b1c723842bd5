"""ResidualActivationCache: TransformerLens's ActivationCache for a ResidualGPT, and where it refuses; NamedCache,
what every cache the toolkit hands out (both TL majors' exports' too) does on a missing name and a batch slice.

A cache's methods that assume the stream is the sum of its terms refuse on a removed residual path; those that
need TL's weight layout refuse by name; logit_attrs warns (LOGIT_ATTRS_MESSAGE, shared with the TL 4 bridge).
"""

from __future__ import annotations

from typing import Any, cast

from transformer_lens import ActivationCache  # the top-level name on TL 3.9+ and 4.x

from interp.config.model_config import ModelConfig
from interp.errors import LogitAttrsWarning, ToolkitError, refuse_if_not_additive, warn
from interp.model.api import missing_cache_key


class NamedCache(ActivationCache):
    """TL's ActivationCache, a missing name named with the closest ones it holds, a batch slice of the same class."""

    @classmethod
    def of(cls, cache: Any, model: Any) -> Any:
        """TL's cache (run_with_cache's, a slice's) as this class, over model; anything else as it is."""
        if not isinstance(cache, ActivationCache):
            return cache
        return cls(cache.cache_dict, model, has_batch_dim=cache.has_batch_dim)

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError as e:  # a typo or a layer the model lacks: the closest names it holds
            raise missing_cache_key(e, self) from None

    def apply_slice_to_batch_dim(self, batch_slice: Any) -> ActivationCache:
        sliced = super().apply_slice_to_batch_dim(batch_slice)  # TL's returns a plain ActivationCache
        return type(self).of(sliced, sliced.model)


class ResidualActivationCache(NamedCache):
    """TransformerLens's ActivationCache for a ResidualGPT.

    Indexing (`cache["resid_pre", 0]`, `cache["pattern", 1, "attn"]`), keys(),
    to(), accumulated_resid (with apply_ln) and the rest work as on a
    HookedTransformer's cache. With a residual path removed the stream is not
    the sum of the embeddings and sublayer outputs, so the methods that assume
    it is refuse instead of answering wrongly. The per-head and per-neuron
    methods need TL's weight layout (W_O, W_out), which a ResidualGPT does not
    have: they refuse by name and point to interp.reading.decompose. logit_attrs (full
    wiring) leaves out ln_final.w, as on an export without fold_ln: it warns.
    """

    def _refuse_if_not_additive(self, method: str) -> None:
        residual = cast(ModelConfig, self.model.cfg).residual  # a ResidualGPT's cfg, typed as TL's config
        refuse_if_not_additive(method, residual, "interp.reading.decompose, which follows this model's wiring")

    def _refuse_tl_layout(self, method: str) -> None:
        raise ToolkitError(
            f"ActivationCache.{method} needs TransformerLens's weight layout (W_O, W_out), which a ResidualGPT does "
            "not have; use interp.reading.decompose.decompose(cache, site, per_head=True) (exact for every wiring), or "
            "run the cache on interp.to_hooked_transformer(model)"
        )

    def decompose_resid(self, *args, **kwargs):
        self._refuse_if_not_additive("decompose_resid")
        return super().decompose_resid(*args, **kwargs)

    def get_full_resid_decomposition(self, *args, **kwargs):
        self._refuse_if_not_additive("get_full_resid_decomposition")
        self._refuse_tl_layout("get_full_resid_decomposition")

    def stack_head_results(self, *args, **kwargs):
        self._refuse_tl_layout("stack_head_results")

    def compute_head_results(self, *args, **kwargs):
        self._refuse_tl_layout("compute_head_results")

    def get_neuron_results(self, *args, **kwargs):
        self._refuse_tl_layout("get_neuron_results")

    def stack_neuron_results(self, *args, **kwargs):
        self._refuse_tl_layout("stack_neuron_results")

    def logit_attrs(self, *args, **kwargs):
        self._refuse_if_not_additive("logit_attrs")
        warn(LOGIT_ATTRS_MESSAGE, LogitAttrsWarning, stacklevel=2)
        return super().logit_attrs(*args, **kwargs)


# The fix that works on both TransformerLens majors comes first; fold_ln is TransformerLens 3's only (TL 4's
# bridge never folds ln_final), so it is named second, as such.
LOGIT_ATTRS_MESSAGE = (
    "ActivationCache.logit_attrs centres the stack and divides by the final LayerNorm scale but never multiplies "
    "by ln_final.w (nor adds ln_final.b), so its attributions do not sum to the logit: use "
    "interp.reading.decompose.direct_logit_attribution, which is exact without folding (on TransformerLens 3 only, "
    "exporting with interp.to_hooked_transformer(..., fold_ln=True) folds ln_final.w in)"
)

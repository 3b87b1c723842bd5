"""The ActivationCache of a ResidualBridge (TransformerLens 4): TL's key shorthand (utilities.get_act_name), a
hook the model's token mixer lacks named as such, a missing key answered with the closest names it holds."""

from __future__ import annotations

from typing import Any, cast

from torch import Tensor

from interp.config.model_config import ModelConfig
from interp.config.registry import mixer_spec
from interp.errors import ToolkitError
from interp.model.activation_cache import NamedCache
from interp.tl.bridge_adapter import ATTN_NAMES, attn_sites


def lacks_hook(cfg: ModelConfig, name: str) -> bool:
    """Whether `name` is a TL 3 attention hook name that this model's mixer does not have."""
    site = name.rsplit(".", 1)[-1]
    return ".attn." in name and site in ATTN_NAMES and site not in attn_sites(cfg)


def lacks_hook_error(cfg: ModelConfig, name: str) -> ToolkitError:
    spec = mixer_spec(cfg.mixer)
    what = (
        ", ".join(w for w, has in (("no heads", spec.has_heads), ("no attention pattern", spec.has_pattern)) if not has)
        or "not this hook"
    )
    sites = " / ".join(attn_sites(cfg)) or "none of TL 3's"
    return ToolkitError(
        f"{name!r}: this model's token mixer, mixer={cfg.mixer!r}, has {what}, so it has no such hook; its hooks "
        f"under blocks.{{l}}.attn are {sites} (and hook_in / hook_out)"
    )


def _full_name(key: Any, n_layers: int) -> str | None:
    """The hook name a cache key means, by TL's own rule (utilities.get_act_name; a negative layer counts from
    the end, as ActivationCache does), or None where TL's rule does not apply to it."""
    from transformer_lens.utilities import get_act_name

    if isinstance(key, tuple) and len(key) > 1 and isinstance(key[1], int) and key[1] < 0:
        key = (key[0], n_layers + key[1], *key[2:])
    try:
        return get_act_name(*key) if isinstance(key, tuple) else get_act_name(key)
    except Exception:  # TL's own error for a malformed key comes from its __getitem__
        return None


class BridgeActivationCache(NamedCache):
    """The ActivationCache of a ResidualBridge.

    With a residual path removed the stream is not the sum of the embeddings and
    every sublayer output, so decompose_resid, get_full_resid_decomposition,
    stack_head_results and logit_attrs refuse at every call (use interp.reading.decompose,
    which follows the wiring and reads this cache); the bridge's LayerNorms are not
    folded, so apply_ln_to_stack and every apply_ln=True warn (UnfoldedLayerNormWarning).
    Both are the bridge's _check_stream_read, so a cache built by hand
    (ActivationCache(store, bridge)) answers the same. A head hook of a
    position-blind model is a ToolkitError rather than a KeyError.
    """

    def __getitem__(self, key: Any) -> Tensor:
        if isinstance(key, str) and key in self.cache_dict:
            return self.cache_dict[key]
        name = _full_name(key, self.model.cfg.n_layers)  # TL's shorthand: cache["post", 0], cache["pattern", 1]
        cfg = cast(Any, self.model).residual_gpt.cfg  # a ResidualBridge
        if name is not None and name not in self.cache_dict and lacks_hook(cfg, name):
            raise lacks_hook_error(cfg, name)
        return super().__getitem__(key)  # a typo or a layer the model lacks: the closest names (as the 3.x export)

"""A save_hooked file (interp.tl.saved's format) checked before load_hooked builds the export from it.

check_hooked: the record's model_config and tokenizer fields, tl_config with a known dtype and the shape fields
the model_config gives (TransformerLens builds its model from them), every tensor with save_hooked's extra
leading dimension, the constants TL's attention holds; check_tl_config: every saved TL field is the export's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from interp.config.model_config import ModelConfig
from interp.config.registry import mixer_spec
from interp.errors import ToolkitError
from interp.files.checks import Bad, want_dict, want_str_keys
from interp.files.checks.checkpoint_file import check_finite, check_tensor, check_vocab
from interp.tl.hooked.convert import hooked_config, tl_config_dict
from interp.tl.major import tl_config_fields
from interp.tl.saved_file import model_config_of

DTYPES = ("float32", "float16", "bfloat16", "float64")
_SHAPE_FIELDS = ("n_layers", "d_model", "n_ctx", "d_head", "n_heads", "d_mlp", "d_vocab_out")
MAX_SPECIAL = 8  # tokenizer specials (BOS, padding) a tokenizer may add to d_vocab


def _check_constants(state_dict: dict[str, Any], cfg: ModelConfig, leading: bool) -> set[str]:
    """The export's tensors that are not weights, checked against what they must hold: TL's causal mask
    (blocks.{l}.attn.mask), its attention mask constant (blocks.{l}.attn.IGNORE, -inf) and the mixer's routing
    record (the tl_routing_record buffers, e.g. routing_self_bias = inf), which the model_config gives. Their names."""
    routing = mixer_spec(cfg.mixer).tl_routing_record(cfg)
    names = set()
    for name, value in state_dict.items():
        value = value[0] if leading else value
        prefix, _, leaf = name.rpartition(".")
        if leaf == "IGNORE" and prefix.endswith(".attn"):
            if not bool(torch.isneginf(value).all()):
                raise Bad(f"{name!r}", "is not -inf (TransformerLens's attention mask constant)")
        elif leaf == "mask" and prefix.endswith(".attn"):  # unused by TL 3.9 (built per forward), still the file's
            n = cfg.n_ctx
            causal = torch.ones(n, n, dtype=torch.bool).tril()  # what TransformerLens before 3.9 registered
            if value.dtype != torch.bool or not (
                tuple(value.shape) == (0, 0) or (value.shape == causal.shape and torch.equal(value, causal))
            ):
                raise Bad(f"{name!r}", f"is not TransformerLens's causal mask (empty, or lower-triangular {n}x{n})")
        elif prefix.endswith(".hook_attn_scores") and leaf in routing:
            want = routing[leaf]
            if value.shape != want.shape or not torch.equal(value.to(want.dtype), want):
                raise Bad(f"{name!r}", f"is {value.tolist()!r:.40}; the model_config gives {want.tolist()!r}")
        else:
            continue
        names.add(name)
    return names


# Fields a save_hooked file may hold apart from its export's: where the export sits (load_hooked's
# device argument overrides it), a display name (rebuilt; an older exporter spelled it otherwise), and
# what set_tokenizer sets from the tokenizer (load_hooked sets the tokenizer the record names again).
_TL_FREE = ("device", "model_name", "tokenizer_prepends_bos")
# Fields the export's processing changes, and the values it gives (fold_ln=True: LayerNorm weights folded into
# the next layer's, LNPre); load_hooked builds with the saved one.
PROCESSED = {"normalization_type": ("LN", "LNPre")}


def export_tl_config(
    cfg: ModelConfig, dtype: str, n_special: int, device: str = "cpu", normalization_type: str = "LN"
) -> Any:
    """The HookedTransformerConfig interp.to_hooked_transformer makes for cfg (normalization_type: 'LNPre'
    after fold_ln). What load_hooked builds from: never the file's own tl_config, only compared with this."""
    try:
        export = hooked_config(cfg, device, getattr(torch, dtype), n_special)
    except ToolkitError as e:  # a mixer TransformerLens cannot express: no save_hooked file holds one
        raise Bad("model_config", f"cannot be exported to a HookedTransformer ({e})") from None
    return dataclasses.replace(export, normalization_type=normalization_type)


def check_tl_config(tl: dict[str, Any], export: Any) -> None:
    """Bad unless every field of a saved tl_config is one save_hooked writes, with the value the export of the
    model_config has (_TL_FREE aside): an unknown field, another act_fn, positional_embedding_type or
    n_devices would reach HookedTransformerConfig and fail there (TypeError, AssertionError, AttributeError)
    or build a model other than the one the weights are for."""
    want = tl_config_dict(export)
    try:
        torch.device(tl.get("device") or "cpu")
    except (RuntimeError, TypeError, ValueError):
        raise Bad("tl_config.device", f"is {tl.get('device')!r:.40}, not a device name") from None
    if not isinstance(tl.get("tokenizer_prepends_bos"), (bool, type(None))):
        raise Bad("tl_config.tokenizer_prepends_bos", f"is {tl['tokenizer_prepends_bos']!r:.40}, not true or false")
    for key, value in tl.items():
        if key in _TL_FREE:
            continue
        if key not in want:
            raise Bad(f"tl_config.{key}", "is not a field save_hooked writes (an unknown TransformerLens field)")
        if key in PROCESSED:
            if value not in PROCESSED[key]:
                raise Bad(f"tl_config.{key}", f"is {value!r:.40}, not one of the export's {list(PROCESSED[key])}")
            continue
        if type(value) is not type(want[key]) or value != want[key]:
            raise Bad(f"tl_config.{key}", f"is {value!r:.40}; the export of the model_config has {want[key]!r:.40}")


def check_hooked(record: Any, state_dict: Any, device: str = "cpu", leading: bool = True) -> ModelConfig:
    """record: the file's residual_gpt_hooked record (or the legacy file); state_dict: its tensors by TL name
    (leading: each with save_hooked's extra leading dimension of 1)."""
    cfg = model_config_of(record, device, "the record")
    tl = want_dict(record.get("tl_config"), "tl_config")
    want_str_keys(tl, "tl_config")
    if tl.get("dtype") not in DTYPES:
        raise Bad("tl_config.dtype", f"is {tl.get('dtype')!r:.40}, not one of {list(DTYPES)}")
    if not isinstance(tl.get("device", "cpu"), (str, type(None))):
        raise Bad("tl_config.device", f"is not a device name ({tl.get('device')!r:.40})")
    want = tl_config_fields(cfg)
    for key in _SHAPE_FIELDS:
        if tl.get(key) != want[key]:
            raise Bad(f"tl_config.{key}", f"is {tl.get(key)!r:.40}; the model_config gives {want[key]}")
    d_vocab = tl.get("d_vocab")
    if not (isinstance(d_vocab, int) and cfg.d_vocab <= d_vocab <= cfg.d_vocab + MAX_SPECIAL):
        raise Bad(
            "tl_config.d_vocab",
            f"is {d_vocab!r:.40}; the model_config gives {cfg.d_vocab} (+ at most {MAX_SPECIAL} tokenizer specials)",
        )
    check_tl_config(tl, export_tl_config(cfg, tl["dtype"], d_vocab - cfg.d_vocab))
    want_str_keys(want_dict(state_dict, "the weights"), "the weights")
    for name, value in state_dict.items():
        check_tensor(value, f"{name!r}")
        if leading and (value.dim() == 0 or value.shape[0] != 1):
            raise Bad(f"{name!r}", f"has shape {list(value.shape)}, without save_hooked's leading dimension of 1")
    check_finite({k: v for k, v in state_dict.items() if k not in _check_constants(state_dict, cfg, leading)})
    if not cfg.bias:  # the export writes zeros for the biases TransformerLens has and the model lacks
        for name, value in state_dict.items():
            leaf = name.rpartition(".")[2]
            if (leaf == "b" or leaf.startswith("b_")) and value.is_floating_point() and bool(value.any()):
                raise Bad(f"{name!r}", "is not zero, but the model_config has bias=False (its export's biases are 0)")
    check_vocab(record, cfg.d_vocab)
    return cfg


__all__ = ["DTYPES", "check_hooked", "check_tl_config", "export_tl_config"]

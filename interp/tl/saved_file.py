"""A saved export (interp.tl.saved's format): save_bridge's file checked before the export is built, and the
model_config every saved export records (save_hooked's record: interp.tl.hooked.hooked_file).

check_bridge: schema, model_config (a valid ModelConfig that fits the device), state_dict (ResidualGPT's
weights of that config, by name and shape), the tokenizer fields.
"""

from __future__ import annotations

from typing import Any

from interp.config.model_config import ModelConfig
from interp.files.checks import Bad, walk_limits, want_dict, want_str_keys
from interp.files.checks.checkpoint_file import check_finite, check_model_config, check_vocab, check_weights


def model_config_of(record: Any, device: str, what: str) -> ModelConfig:
    """The record's model_config (the ResidualGPT configuration it was exported from), checked for device."""
    want_str_keys(want_dict(record, what), what)  # the record itself first (`what`: "the file", "the record")
    walk_limits({k: v for k, v in record.items() if k != "state_dict"})
    if "model_config" not in record:
        raise Bad("", "has no model_config (the ResidualGPT configuration it was exported from)")
    return check_model_config(record["model_config"], device=device)


def check_bridge(payload: Any, device: str = "cpu") -> ModelConfig:
    cfg = model_config_of(payload, device, "the file")
    if not isinstance(payload.get("state_dict"), dict):
        raise Bad("", "has no state_dict (the weights, a dict of tensors)")
    check_weights(payload["state_dict"], cfg, "state_dict")
    check_finite(payload["state_dict"], "state_dict")
    check_vocab(payload, cfg.d_vocab)
    return cfg


__all__ = ["check_bridge", "model_config_of"]

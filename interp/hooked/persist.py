"""save_hooked / load_hooked: an export round-tripped exactly, wiring and tokenizer included.

Plain data only (read back with torch.load(weights_only=True)), written atomically.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from transformer_lens import HookedTransformer, HookedTransformerConfig

from interp.checkpoint import SCHEMA
from interp.config import ModelConfig
from interp.errors import CheckpointError, ToolkitError
from interp.hooked.caches import new_hooked_transformer, warn_non_additive
from interp.hooked.rewire import install
from interp.io import atomic_write
from interp.tokenizers import char_tokenizer, gpt2_tokenizer
from interp.vocab import GPT2_VOCAB_SIZE, gpt2_files

HOOKED_SCHEMA = "residual-gpt-hooked/1"


def _tl_config_dict(cfg: HookedTransformerConfig) -> dict[str, Any]:
    """TL's config as plain data: its __init__ fields, dtype and device as strings, numpy scalars as Python's."""
    import dataclasses

    out = {}
    for f in dataclasses.fields(HookedTransformerConfig):
        if f.init and hasattr(cfg, f.name):
            value = getattr(cfg, f.name)
            if f.name in ("dtype", "device"):
                value = str(value).removeprefix("torch.")
            elif hasattr(value, "item") and not isinstance(value, Tensor):  # numpy scalars (initializer_range)
                value = value.item()
            out[f.name] = value
    return out


def save_hooked(model: HookedTransformer, path: str | os.PathLike) -> None:
    """Save an export from to_hooked_transformer (weights, TL config, wiring, tokenizer) for load_hooked.

    Plain data only (read back with weights_only=True), written atomically.
    """
    record = getattr(model.cfg, "residual_gpt_config", None)
    if record is None:
        raise ToolkitError("save_hooked takes a model made by interp.to_hooked_transformer (no residual_gpt_config)")
    tokenizer = model.tokenizer
    chars = getattr(tokenizer, "chars", None)
    payload = {
        "schema": HOOKED_SCHEMA,
        "model_config": dict(record),
        "tl_config": _tl_config_dict(model.cfg),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "vocab": list(chars) if chars else None,
        "encoding": "gpt2" if tokenizer is not None and not chars and len(tokenizer) == GPT2_VOCAB_SIZE else None,
    }
    atomic_write(path, lambda tmp: torch.save(payload, tmp))


def load_hooked(path: str | os.PathLike, device: str | torch.device | None = None) -> HookedTransformer:
    """The HookedTransformer that save_hooked wrote, wiring and tokenizer included (strict: every key must fit)."""
    import pickle

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no saved HookedTransformer at {path}")
    try:
        payload = torch.load(path, map_location=device or "cpu", weights_only=True)
    except (pickle.UnpicklingError, EOFError, RuntimeError, OSError, ValueError) as e:
        raise CheckpointError(f"{path} is not a readable save_hooked file: {str(e).splitlines()[0]}") from None
    schema = payload.get("schema") if isinstance(payload, dict) else None
    if schema != HOOKED_SCHEMA:
        hint = " (a ResidualGPT checkpoint: use to_hooked_transformer)" if schema == SCHEMA else ""
        raise CheckpointError(f"{path} has schema {schema!r}; load_hooked reads {HOOKED_SCHEMA!r}{hint}")
    cfg = ModelConfig.from_dict(payload["model_config"])
    fields = dict(payload["tl_config"])
    fields["dtype"] = getattr(torch, fields["dtype"])
    if device is not None:
        fields["device"] = str(device)
    hooked = new_hooked_transformer(HookedTransformerConfig(**fields), cfg)
    install(hooked, cfg)
    try:
        hooked.load_state_dict(payload["state_dict"], strict=True)
    except RuntimeError as e:
        detail = " ".join(line.strip() for line in str(e).splitlines()[1:])
        raise CheckpointError(f"{path}: weights do not match the saved configuration: {detail}") from None
    if payload.get("vocab") is not None:
        hooked.set_tokenizer(char_tokenizer(payload["vocab"]), default_padding_side="right")
    elif payload.get("encoding") == "gpt2" and gpt2_files() is not None:
        hooked.set_tokenizer(gpt2_tokenizer(), default_padding_side="right")
    warn_non_additive(cfg)
    return hooked.eval()

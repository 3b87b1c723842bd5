"""A ResidualGPT checkpoint (schema residual-gpt/1), and what every checkpoint schema shares: its model
config against the device's memory, its weights against that config, its vocabulary.

Called by interp.files.checkpoint.load_checkpoint on what torch.load returned, before the content hash is
computed (a walk over the data) and before any model is built; nanoGPT's and the saved exports' checks
(interp.files.checks.nanogpt_file, interp.tl.saved_file) reuse check_model_config, check_weights and check_vocab.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from interp.config.memory import device_memory, gib, model_bytes
from interp.config.model_config import ModelConfig
from interp.errors import ConfigError
from interp.files.checks import Bad, walk_limits, want_dict, want_int, want_number, want_str, want_str_keys
from interp.files.gpt2 import GPT2_VOCAB_SIZE

ENCODINGS = ("char", "gpt2")
_BLOCK = re.compile(r"blocks\.(\d+)\.")


def check_model_config(d: Any, field: str = "model_config", device: str = "cpu") -> ModelConfig:
    """A ModelConfig from a file's plain data; the memory it would take is compared with the device's first."""
    want_str_keys(want_dict(d, field), field)
    try:
        cfg = ModelConfig.from_dict(d)
    except (ConfigError, TypeError, ValueError, OverflowError) as e:
        raise Bad(field, f"is an invalid model config ({e})") from None
    check_size(cfg, field, device)
    return cfg


def check_size(cfg: ModelConfig, field: str, device: str = "cpu") -> None:
    """Bad when a model of cfg needs more than the device's whole memory (interp.config.memory's estimate)."""
    need = model_bytes(cfg)
    total, what = device_memory(str(device))
    if total is not None and need > total:
        raise Bad(
            field,
            f"asks for a model of about {gib(need)} (n_layers={cfg.n_layers}, d_model={cfg.d_model}, "
            f"d_vocab={cfg.d_vocab}, n_ctx={cfg.n_ctx}) but the machine has {gib(total)} of {what}",
        )


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The weights every ResidualGPT of cfg has, whatever its mixer, and their shapes: every size in the config
    (n_layers, d_model, d_mlp, n_ctx, d_vocab) shows in one of them. The attention slot's own weights are its
    mixer's (strict load_state_dict checks those); interp.model.gpt is not imported (it imports this module's
    callers)."""
    d = cfg.d_model
    out = {
        "embed.weight": (cfg.d_vocab, d),
        "pos_embed.weight": (cfg.n_ctx, d),
        "ln_final.w": (d,),
        "unembed.weight": (cfg.d_vocab, d),
    }
    for layer in range(cfg.n_layers):
        out.update(
            {
                f"blocks.{layer}.ln1.w": (d,),
                f"blocks.{layer}.ln2.w": (d,),
                f"blocks.{layer}.mlp.in_proj.weight": (cfg.d_mlp, d),
                f"blocks.{layer}.mlp.out_proj.weight": (d, cfg.d_mlp),
            }
        )
    return out


FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_tensor(value: Any, field: str) -> torch.Tensor:
    """A tensor that holds its data: dense (strided), not on the meta device (no data), not complex."""
    if not isinstance(value, torch.Tensor):
        raise Bad(field, f"is not a tensor (a {type(value).__name__})")
    if value.layout != torch.strided:
        raise Bad(field, f"is a {str(value.layout).removeprefix('torch.')} tensor, not a dense one")
    if value.device.type == "meta":
        raise Bad(field, "is a meta tensor (a shape with no data)")
    if value.is_complex():
        raise Bad(field, f"has dtype {value.dtype}, not a real one")
    if value.is_floating_point() and value.dtype not in FLOAT_DTYPES:  # float8: no abs, no max, no matmul on CPU
        raise Bad(field, f"has dtype {value.dtype}, not one of float16, bfloat16, float32, float64")
    return value


def check_weights(weights: Any, cfg: ModelConfig, field: str = "weights") -> dict[str, torch.Tensor]:
    """A state dict for a ResidualGPT of cfg: string names, floating tensors, n_layers blocks, and the shapes
    every ResidualGPT of cfg has (so no model larger than the file's own tensors is ever built for it)."""
    want_str_keys(want_dict(weights, field), field)
    for name, value in weights.items():
        check_tensor(value, f"{field}[{name!r}]")
        if not value.is_floating_point():
            raise Bad(f"{field}[{name!r}]", f"has dtype {value.dtype}, not a floating point one")
    blocks = {int(m.group(1)) for k in weights if (m := _BLOCK.match(k))}
    if blocks != set(range(cfg.n_layers)):  # before n_layers names are made
        raise Bad(field, f"hold {len(blocks)} block(s) but the model config says n_layers={cfg.n_layers}")
    want = expected_shapes(cfg)
    missing = sorted(set(want) - set(weights))
    if missing:
        raise Bad(field, f"lack {', '.join(missing[:4])}{', ...' * (len(missing) > 4)}, which the model config has")
    for name, shape in want.items():
        if tuple(weights[name].shape) != shape:
            raise Bad(
                f"{field}[{name!r}]", f"has shape {list(weights[name].shape)}; the model config gives {list(shape)}"
            )
    return weights


# Past this a weight is no trained model's (trained weights are O(1); GPT-2's largest is in the tens), and a
# single one this large already overflows float32 in the forward. It is a bound on each weight, not a proof of
# a finite forward: weights under it can still multiply past float32 (three chained at 9e7 do).
MAX_ABS_WEIGHT = 1e8


def check_finite(weights: dict[str, Any], field: str = "") -> None:
    """Bad when a floating tensor holds NaN or inf, or (float64) a value past float32's range, which the model's
    float32 weights would hold as inf, or a magnitude past MAX_ABS_WEIGHT, which overflows in the forward: the
    one finite check every import path runs (own checkpoints, nanoGPT imports, save_hooked and save_bridge files)."""
    floats = {
        k: check_tensor(v, f"{field}[{k!r}]" if field else repr(k))
        for k, v in weights.items()
        if isinstance(v, torch.Tensor) and v.is_floating_point()
    }
    bad = [k for k, v in floats.items() if not bool(torch.isfinite(v.float()).all())]
    if bad:
        wide = any(weights[k].dtype == torch.float64 for k in bad)
        raise Bad(
            field,
            f"holds non-finite weights ({', '.join(bad[:3])}{', ...' * (len(bad) > 3)})"
            + (" (float64 values past float32's range: the float32 model would hold them as inf)" if wide else ""),
        )
    big = {k: float(v.abs().max()) for k, v in floats.items() if v.numel() and float(v.abs().max()) > MAX_ABS_WEIGHT}
    if big:
        name = max(big, key=big.__getitem__)
        raise Bad(
            field,
            f"holds a weight of magnitude {big[name]:.3g} ({name}{', ...' * (len(big) > 1)}), "
            f"past {MAX_ABS_WEIGHT:.0e}: no trained model holds one, and its forward overflows float32 to NaN",
        )


def want_characters(vocab: Any, field: str, repeats: str = "repeats a character") -> None:
    """A character vocabulary's entries (a checkpoint's vocab, a meta.pkl's itos): each one character, none twice."""
    bad = next((c for c in vocab if not (isinstance(c, str) and len(c) == 1)), None)
    if bad is not None:
        raise Bad(field, f"holds {bad!r:.40}, not one character")
    if len(set(vocab)) != len(vocab):
        raise Bad(field, repeats)


def check_vocab(state: dict[str, Any], d_vocab: int, field: str = "") -> None:
    """A checkpoint's vocabulary: 'vocab' d_vocab distinct single characters (id = index), and/or 'encoding'
    'char' (with a vocab) or 'gpt2' (GPT-2's BPE, which needs d_vocab >= its 50257 ids)."""
    prefix = f"{field}." if field else ""
    vocab, encoding = state.get("vocab"), state.get("encoding")
    if vocab is not None:
        if not isinstance(vocab, (list, tuple)):
            raise Bad(f"{prefix}vocab", f"is not a list of characters (a {type(vocab).__name__})")
        want_characters(vocab, f"{prefix}vocab", "repeats a character (ids would not decode back)")
        if len(vocab) != d_vocab:
            raise Bad(f"{prefix}vocab", f"has {len(vocab)} characters; the model's d_vocab is {d_vocab}")
    if encoding is not None:
        want_str(encoding, f"{prefix}encoding", ENCODINGS)
        if encoding == "char" and vocab is None:
            raise Bad(f"{prefix}encoding", "is 'char' but there is no vocab (the characters)")
        if encoding == "gpt2" and vocab is not None:
            raise Bad(f"{prefix}encoding", "is 'gpt2' but a character vocab is recorded too")
        if encoding == "gpt2" and d_vocab < GPT2_VOCAB_SIZE:
            raise Bad(f"{prefix}encoding", f"is 'gpt2' ({GPT2_VOCAB_SIZE} ids) but the model's d_vocab is {d_vocab}")


# Training state a reader other than a resume uses (training.checkstate checks the rest on resume).
_STATE = {
    "step": "int",
    "best": "dict",
    "totals": "dict",
    "train_config": "dict",
    "data": "dict",
    "final_record": "dict",
    "logs_sha256": "dict",
    "final_val_loss": "number",
    "model_init": "str?",
    "meta": "dict",
    "logs_before_step": "dict",
    "sealed_files": "dict",
    "stacked": "dict",
    "steps_by": "list",
}


def check_state(payload: dict[str, Any]) -> None:
    for key, kind in _STATE.items():
        if key not in payload:
            continue
        value = payload[key]
        if kind == "int":
            want_int(value, key, 0)
        elif kind == "dict":
            want_str_keys(want_dict(value, key), key)
        elif kind == "number":
            want_number(value, key)
        elif kind == "list":  # training.steps_by reads its items on resume
            if not isinstance(value, list):
                raise Bad(key, f"is not a list (a {type(value).__name__})")
        elif value is not None:
            want_str(value, key)
    data = payload.get("data")
    if isinstance(data, dict) and "sha256" in data:
        want_str(data["sha256"], "data.sha256")
    for name, digest in (payload.get("sealed_files") or {}).items():
        if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
            raise Bad(f"sealed_files[{name!r:.60}]", f"is not a sha256 ({digest!r:.60})")


def check_forward_finite(forward: Any, d_vocab: int, n_ctx: int, device: Any = "cpu") -> None:
    """Bad when a forward on a probe sequence of n_ctx tokens gives non-finite logits: weights each under
    check_finite's bound can still chain into an overflow (three of 1e7 in a row pass float32's 3.4e38). Run by
    every loader once the model is built, so a model that answers NaN is refused with its file, not met in a
    plot. Other inputs may still overflow: generate refuses non-finite logits at every step too."""
    # Every position (an overflow may start past the first few), once: a load at GPT-2 size pays one forward.
    tokens = (torch.arange(n_ctx, device=device) % d_vocab)[None]
    with torch.no_grad():
        out = forward(tokens)
    logits = out[0] if isinstance(out, tuple) else out
    if not bool(torch.isfinite(logits).all()):
        raise Bad(
            "",
            "has weights whose forward overflows: a probe sequence's logits are not finite (each weight is in "
            "range, but their product in a chain passes float32's)",
        )


def check_checkpoint_payload(payload: Any, schema: str, hash_key: str, device: str = "cpu") -> ModelConfig:
    """A residual-gpt/1 payload: every field's type and range, its weights against its config; its config."""
    want_str_keys(want_dict(payload, "the file"), "the file")
    walk_limits({k: v for k, v in payload.items() if k != "weights"})
    if payload.get("schema") != schema:
        raise Bad("", f"has schema {payload.get('schema')!r:.60}; this version reads {schema!r}")
    if "model_config" not in payload:
        raise Bad("", "holds an invalid model config (there is no 'model_config')")
    if not isinstance(payload.get("weights"), dict):
        raise Bad("", "has no weights (a dict of tensors under 'weights')")
    cfg = check_model_config(payload["model_config"], device=device)
    check_weights(payload["weights"], cfg)
    check_vocab(payload, cfg.d_vocab)
    check_state(payload)
    recorded = payload.get(hash_key)
    if recorded is not None and not (isinstance(recorded, str) and re.fullmatch(r"[0-9a-f]{64}", recorded)):
        raise Bad(hash_key, f"is not a sha256 ({recorded!r:.60})")
    return cfg


__all__ = [
    "ENCODINGS",
    "check_model_config",
    "check_finite",
    "check_forward_finite",
    "check_checkpoint_payload",
    "check_size",
    "check_state",
    "check_vocab",
    "check_weights",
    "expected_shapes",
    "want_characters",
]

"""Checkpoints are data, not code (docs/DESIGN.md contract 4).

A checkpoint is a dict {schema, model_config, weights, **training state,
content_sha256}, written atomically and read back with
torch.load(weights_only=True), so a file that would run code on unpickling is
refused, never executed. content_sha256 is a hash of everything else in it
(every tensor's dtype, shape and bytes; every other value's repr): torch does
not check its archive's CRCs, so without it one flipped bit in a weight loads
without a word. load_checkpoint recomputes it (a mismatch is an error naming
the file) and refuses non-finite weights. A file written before the field
existed has none and loads unchecked.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from interp.config.model_config import ModelConfig
from interp.errors import CheckpointError
from interp.files.io import atomic_write, load_plain

SCHEMA = "residual-gpt/1"


def _first_line(e: BaseException) -> str:
    """An exception's first line, or its type when it has no message (EOFError on an empty file)."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


HASH_KEY = "content_sha256"


def content_hash(payload: Any) -> str:
    """sha256 of a checkpoint payload's content (less HASH_KEY): tensors by dtype, shape and bytes, in key order."""
    h = hashlib.sha256()

    def feed(obj: Any) -> None:
        if isinstance(obj, torch.Tensor):
            t = obj.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            if t.numel():
                h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(obj, dict):
            keys = sorted((k for k in obj if k != HASH_KEY), key=repr)
            h.update(f"D{len(keys)}".encode())
            for k in keys:
                h.update(f"K{k!r}".encode())
                feed(obj[k])
        elif isinstance(obj, (list, tuple)):
            h.update(f"L{type(obj).__name__}{len(obj)}".encode())
            for v in obj:
                feed(v)
        else:
            h.update(f"V{type(obj).__name__}:{obj!r}".encode())

    feed(payload)
    return h.hexdigest()


@dataclass
class Checkpoint:
    config: ModelConfig
    weights: dict[str, torch.Tensor]
    state: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def content_sha256(self) -> str | None:
        """The hash recorded in the file (verified on load), None for a file written before it existed."""
        return self.state.get(HASH_KEY)


def save_checkpoint(path: str | Path, model: nn.Module, **state: Any) -> str:
    """Save model config + weights + any training state (plain data and tensors only); returns its content hash."""
    reserved = {"schema", "model_config", "weights"} & set(state)
    if reserved:
        raise CheckpointError(f"state keys {sorted(reserved)} are reserved")
    module = getattr(model, "module", model)  # unwrap DDP
    if not isinstance(getattr(module, "cfg", None), ModelConfig):  # an export's TL config: a file nothing loads
        raise CheckpointError(
            f"model: save_checkpoint saves a ResidualGPT, not a {type(module).__name__}; save a TransformerLens "
            "export with interp.save_hooked (or the ResidualGPT it came from)"
        )
    for key, value in getattr(module, "vocab_state", {}).items():  # the vocabulary from_checkpoint attached
        state.setdefault(key, value)
    payload = {
        "schema": SCHEMA,
        "model_config": cast(ModelConfig, module.cfg).to_dict(),  # a ResidualGPT's config
        "weights": {k: v.detach().cpu() for k, v in module.state_dict().items()},
        **state,
    }
    payload[HASH_KEY] = content_hash(payload)

    def write(tmp: str) -> None:
        try:
            torch.save(payload, tmp)
        except RuntimeError as e:  # torch's zip writer reports a full disk or an I/O error this way
            raise CheckpointError(f"cannot write {path}: {_first_line(e)}; the previous checkpoint is kept") from None

    atomic_write(path, write)
    return payload[HASH_KEY]


def _is_save_hooked(payload: Any) -> bool:
    """A file interp.save_hooked wrote (its record under one key; the legacy format at the top)."""
    if not isinstance(payload, dict):
        return False
    records = [payload] + [v for v in payload.values() if isinstance(v, dict)]
    return any(str(r.get("schema", "")).startswith("residual-gpt-hooked") for r in records)


def _refuse_non_finite(path: Path, weights: dict[str, torch.Tensor]) -> None:
    from interp.files.checks import checked
    from interp.files.checks.checkpoint_file import check_finite  # the one finite check; the saved exports' run it too

    with checked(path, CheckpointError, "it cannot be used - train the run again or resume from an earlier checkpoint"):
        check_finite(weights)


def refuse_non_finite_forward(path: Any, model: Any, d_vocab: int, n_ctx: int) -> None:
    """A CheckpointError naming path when the built model's forward overflows on a probe sequence (every loader
    runs it once the weights are in: ResidualGPT.from_checkpoint, load_hooked, load_bridge)."""
    from interp.files.checks import checked
    from interp.files.checks.checkpoint_file import check_forward_finite

    device = next((p.device for p in model.parameters()), "cpu")
    with checked(path, CheckpointError, "it cannot be used"):
        check_forward_finite(model, d_vocab, n_ctx, device)


def load_checkpoint(
    path: str | os.PathLike, map_location: str | torch.device = "cpu", meta: str | os.PathLike | None = None
) -> Checkpoint:
    """A ResidualGPT checkpoint, or a nanoGPT train.py one (interp.files.nanogpt_format; meta: its meta.pkl, else
    found)."""
    from interp.files.checks import checked, regular_file

    path = regular_file(path, CheckpointError, "checkpoint")
    try:
        payload = load_plain(path, map_location)
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            f"{path} is not a plain-data checkpoint (refused by weights_only loading): {_first_line(e)}"
        ) from None
    except PermissionError as e:
        raise CheckpointError(f"cannot read {path}: {e.strerror or e}") from None
    except RecursionError:
        raise CheckpointError(f"{path} is nested too deeply to be a checkpoint; it cannot be loaded") from None
    except Exception as e:  # noqa: BLE001 - a damaged file raises EOFError, RuntimeError, IndexError, ...
        detail = type(e).__name__ + (f": {str(e).strip().splitlines()[0]}" if str(e).strip() else "")
        raise CheckpointError(f"{path} is truncated or corrupt ({detail}); it cannot be loaded") from None
    import interp.files.nanogpt_format as nanogpt
    from interp.files.checks.checkpoint_file import check_checkpoint_payload

    device = str(map_location) if isinstance(map_location, (str, torch.device)) else "cpu"
    if nanogpt.is_nanogpt(payload):
        ckpt = Checkpoint(**nanogpt.from_nanogpt(payload, path, meta, device=device))
        _refuse_non_finite(path, ckpt.weights)  # every import path, not only the own schema
        return ckpt
    if meta is not None:  # never silently passed over
        raise CheckpointError(
            f"{path} is a ResidualGPT checkpoint, which carries its own vocabulary: a meta.pkl (--meta) is read "
            "only for a nanoGPT checkpoint"
        )
    if _is_save_hooked(payload):
        raise CheckpointError(
            f"{path} is a save_hooked file (a HookedTransformer, not a checkpoint): read it with "
            "interp.load_hooked(path)"
        )
    if not isinstance(payload, dict) or "schema" not in payload:
        keys = sorted(map(str, payload))[:6] if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(
            f"{path} is not a ResidualGPT checkpoint (no schema field) nor a nanoGPT one (no model_args and model); "
            f"it holds {keys}"
        )
    with checked(path, CheckpointError, "it cannot be loaded"):  # every field, before the hash walks the data
        config = check_checkpoint_payload(payload, SCHEMA, HASH_KEY, device)
    weights = payload["weights"]
    recorded = payload.get(HASH_KEY)
    if recorded is not None and recorded != content_hash(payload):
        raise CheckpointError(
            f"{path} is damaged: its content does not match the hash recorded in it "
            "(a changed bit, or an edit); it cannot be loaded - restore it or train the run again"
        )
    _refuse_non_finite(path, weights)
    state = {k: v for k, v in payload.items() if k not in ("schema", "model_config", "weights")}
    return Checkpoint(config=config, weights=weights, state=state, path=path)

"""The saved-export format both majors share: save_hooked / load_hooked (TL 3.x, interp.tl.hooked.persist)
and save_bridge / load_bridge (TL 4.x, interp.tl.bridge).

A saved export is plain data (torch.save, read back with weights_only=True), written atomically: the weights,
ResidualGPT's ModelConfig ("model_config") and the tokenizer as tokenizer_fields records it (the characters as
"vocab", or "encoding": "gpt2"), under the export's own schema. Where each major puts them in the file is its own.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from interp.errors import CheckpointError, state_dict_detail
from interp.files.gpt2 import GPT2_VOCAB_SIZE
from interp.files.io import atomic_write, load_plain

BRIDGE_SCHEMA = "residual-gpt-bridge/1"
HOOKED_SCHEMA = "residual-gpt-hooked/2"


def tokenizer_fields(tokenizer: Any) -> dict[str, Any]:
    """{"vocab": the characters or None, "encoding": "gpt2" or None}: how the export's tokenizer is saved."""
    chars = getattr(tokenizer, "chars", None)
    return {
        "vocab": list(chars) if chars else None,
        "encoding": "gpt2" if tokenizer is not None and not chars and _is_gpt2(tokenizer) else None,
    }


def _is_gpt2(tokenizer: Any) -> bool:
    """GPT-2's BPE: its 50257 ids, and the export's <|pad|> after them where it has one (tokenizers.PAD)."""
    from interp.files.tokenizers import PAD

    extra = len(tokenizer) - GPT2_VOCAB_SIZE
    return extra == 0 or (extra == 1 and tokenizer.convert_ids_to_tokens(GPT2_VOCAB_SIZE) == PAD)


def write_saved(path: str | os.PathLike, payload: dict[str, Any]) -> None:
    atomic_write(path, lambda tmp: torch.save(payload, tmp))


def read_saved(path: str | os.PathLike, device: str | torch.device | None, what: str, writer: str) -> Any:
    """The saved file's contents (weights_only); a missing or unreadable file is a CheckpointError naming
    `what` was expected (e.g. "bridge") and the `writer` that writes it (e.g. "save_bridge")."""
    import pickle

    from interp.files.checks import regular_file

    path = regular_file(path, CheckpointError, f"saved {what}")
    try:
        return load_plain(path, device or "cpu")
    except (
        pickle.UnpicklingError,
        EOFError,
        RuntimeError,
        OSError,
        ValueError,
        RecursionError,
        IndexError,
        KeyError,
        TypeError,
        AttributeError,
    ) as e:
        detail = (str(e).splitlines() or [type(e).__name__])[0]
        raise CheckpointError(f"{path} is not a readable {writer} file: {detail}") from None


def load_weights(model: torch.nn.Module, state_dict: dict[str, Any], path: str | os.PathLike) -> None:
    """Load a saved export's weights strictly: every key must fit, else a CheckpointError naming the file."""
    try:
        model.load_state_dict(state_dict, strict=True)
    except RuntimeError as e:
        raise CheckpointError(f"{path}: weights do not match the saved configuration: {state_dict_detail(e)}") from None


__all__ = ["BRIDGE_SCHEMA", "HOOKED_SCHEMA", "load_weights", "read_saved", "tokenizer_fields", "write_saved"]

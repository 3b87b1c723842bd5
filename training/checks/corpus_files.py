"""A prepared BPE corpus: meta.json's fields and the token files it describes.

check_corpus_meta: {"encoding": "gpt2", "train_tokens", "val_tokens" (whole numbers a uint16 file of the
directory's size could hold), "name"?}; a meta.json saying 1e999 tokens, or "12" as a string, is
refused by name. check_tokens: every id of train.bin / val.bin is inside GPT-2's vocabulary (a
uint16 can hold ids up to 65535; an id past 50256 would index past the embedding).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interp.files.checks import Bad, walk_limits, want_int, want_object, want_str

MAX_TOKENS = 2**40  # far past any corpus; a bigger count is damage, whatever the file sizes say


def check_corpus_meta(meta: Any) -> dict[str, Any]:
    want_object(meta)
    walk_limits(meta)
    for key in ("train_tokens", "val_tokens"):
        if key not in meta:
            raise Bad("", f"has no {key!r}")
        want_int(meta[key], key, 1, MAX_TOKENS)
    want_str(meta.get("encoding"), "encoding", ("gpt2",))
    if "name" in meta:
        want_str(meta["name"], "name")
    return meta


def check_tokens(tokens: np.ndarray, vocab_size: int, field: str, chunk: int = 1 << 24) -> None:
    """Bad when a token id is vocab_size or more (read in chunks: a memmap is never loaded whole)."""
    for start in range(0, len(tokens), chunk):
        top = int(np.max(tokens[start : start + chunk]))
        if top >= vocab_size:
            at = start + int(np.argmax(tokens[start : start + chunk] >= vocab_size))
            raise Bad(
                field,
                f"holds token id {top} (first past the vocabulary at index {at}); GPT-2's vocabulary "
                f"has {vocab_size} ids",
            )


__all__ = ["MAX_TOKENS", "check_corpus_meta", "check_tokens"]

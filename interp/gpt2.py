"""GPT-2 BPE facts every layer shares: its vocabulary size and where its tokenizer files lie (no heavy imports)."""

from __future__ import annotations

import os
from pathlib import Path

GPT2_VOCAB_SIZE = 50257  # GPT-2's BPE: 50256 merges and bytes, then <|endoftext|>


def gpt2_files(data_dir: str | os.PathLike | None = None) -> tuple[Path, Path] | None:
    """(encoder.json, vocab.bpe) under data_dir or $RESIDUAL_DATA_DIR /gpt2, if both exist."""
    root = data_dir or os.environ.get("RESIDUAL_DATA_DIR")
    if not root:
        return None
    encoder, merges = Path(root) / "gpt2" / "encoder.json", Path(root) / "gpt2" / "vocab.bpe"
    return (encoder, merges) if encoder.is_file() and merges.is_file() else None


__all__ = ["GPT2_VOCAB_SIZE", "gpt2_files"]

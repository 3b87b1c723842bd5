"""GPT-2 BPE facts every layer shares: its vocabulary size and where its tokenizer files lie (no heavy imports)."""

from __future__ import annotations

import os
from pathlib import Path

GPT2_VOCAB_SIZE = 50257  # GPT-2's BPE: 50256 merges and bytes, then <|endoftext|>
GPT2_EOT = GPT2_VOCAB_SIZE - 1  # <|endoftext|>, 50256
GPT2_FILES = {  # file name -> sha256 (the files tiktoken itself downloads)
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
}


def gpt2_files(data_dir: str | os.PathLike | None = None) -> tuple[Path, Path] | None:
    """(encoder.json, vocab.bpe) under data_dir or $RESIDUAL_DATA_DIR /gpt2, if both exist."""
    root = data_dir or os.environ.get("RESIDUAL_DATA_DIR")
    if not root:
        return None
    encoder, merges = Path(root) / "gpt2" / "encoder.json", Path(root) / "gpt2" / "vocab.bpe"
    return (encoder, merges) if encoder.is_file() and merges.is_file() else None


__all__ = ["GPT2_EOT", "GPT2_FILES", "GPT2_VOCAB_SIZE", "gpt2_files"]

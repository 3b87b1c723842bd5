"""A checkpoint's vocabulary: which one it has, and text to token ids and back.

A checkpoint names its vocabulary in its state: state["vocab"], a list of
characters (id = index), or state["encoding"] == "gpt2", GPT-2's byte-level BPE
from local files ($RESIDUAL_DATA_DIR/gpt2: encoder.json and vocab.bpe, the files
tiktoken's "gpt2" uses). `codec` encodes and decodes with it (interp.sample,
interp.plot_attention); `tokenizer_for` picks the Hugging Face tokenizer that
interp.hooked attaches to an export (interp.tokenizers builds it).

Light: nothing heavy is imported until a GPT-2 tokenizer is built, so a
command line with a bad prompt answers at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from interp.errors import CheckpointError, ConfigError, DataError

GPT2_VOCAB_SIZE = 50257  # GPT-2's BPE: 50256 merges and bytes, then <|endoftext|>


def gpt2_files(data_dir: str | os.PathLike | None = None) -> tuple[Path, Path] | None:
    """(encoder.json, vocab.bpe) under data_dir or $RESIDUAL_DATA_DIR /gpt2, if both exist."""
    root = data_dir or os.environ.get("RESIDUAL_DATA_DIR")
    if not root:
        return None
    encoder, merges = Path(root) / "gpt2" / "encoder.json", Path(root) / "gpt2" / "vocab.bpe"
    return (encoder, merges) if encoder.is_file() and merges.is_file() else None


class Codec(NamedTuple):
    """encode(text) -> ids and decode(ids) -> text in one vocabulary."""

    encode: Callable[[str], list[int]]
    decode: Callable[[Iterable[int]], str]

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Each token's own text (axis labels)."""
        return [self.decode([i]) for i in ids]


def char_codec(vocab: list[str], what: str = "the text") -> Codec:
    """One token per character of vocab (id = index); a character outside it is a DataError naming `what`."""
    vocab = list(vocab)
    index = {c: i for i, c in enumerate(vocab)}

    def encode(text: str) -> list[int]:
        missing = sorted(set(text) - set(index))
        if missing:
            raise DataError(
                f"{what} has character(s) the checkpoint's {len(vocab)}-character vocabulary lacks: "
                f"{''.join(missing)!r}; use only these: {''.join(vocab)!r}"
            )
        return [index[c] for c in text]

    return Codec(encode, lambda ids: "".join(vocab[i] for i in ids))


def codec(state: dict[str, Any], what: str = "the text") -> Codec:
    """The codec of a checkpoint's vocabulary (its state["vocab"] or encoding "gpt2")."""
    if state.get("vocab") is not None:
        return char_codec(state["vocab"], what)
    if state.get("encoding") == "gpt2":
        from interp.tokenizers import gpt2_tokenizer

        tokenizer = gpt2_tokenizer()
        return Codec(lambda text: tokenizer(text)["input_ids"], tokenizer.decode)
    raise CheckpointError("the checkpoint has no vocabulary (state 'vocab' or encoding 'gpt2'); "
                          "save it with interp.save_checkpoint(path, model, vocab=itos)")


def tokenizer_for(d_vocab: int, vocab: list[str] | None, state: dict[str, Any]) -> tuple[Any, str | None]:
    """(the Hugging Face tokenizer for an export, None) or (None, why there is none).

    vocab (characters) wins, then the checkpoint's state["vocab"], then GPT-2 BPE
    for encoding "gpt2" (or a GPT-2-sized model that names no encoding).
    """
    from interp.tokenizers import char_tokenizer, gpt2_tokenizer

    vocab = vocab if vocab is not None else state.get("vocab")
    if vocab is not None:
        vocab = list(vocab)
        if len(vocab) != d_vocab:
            raise ConfigError(f"vocab has {len(vocab)} entries but the model's d_vocab is {d_vocab}")
        return char_tokenizer(vocab), None
    if state.get("encoding") == "gpt2" or (d_vocab == GPT2_VOCAB_SIZE and "encoding" not in state):
        if gpt2_files() is None:
            return None, "GPT-2 BPE files not found (set RESIDUAL_DATA_DIR to a folder holding gpt2/vocab.bpe)"
        return gpt2_tokenizer(), None
    if "encoding" in state:
        return None, f"unknown encoding {state['encoding']!r} in the checkpoint"
    return None, "no vocab given and none in the checkpoint (pass vocab=[...characters...])"


__all__ = ["GPT2_VOCAB_SIZE", "Codec", "char_codec", "codec", "gpt2_files", "tokenizer_for"]

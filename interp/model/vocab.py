"""A checkpoint's vocabulary: which one it has, and text to token ids and back.

A checkpoint names its vocabulary in its state: state["vocab"], a list of
characters (id = index), or state["encoding"] == "gpt2", GPT-2's byte-level BPE
from local files ($RESIDUAL_DATA_DIR/gpt2: encoder.json and vocab.bpe, the files
tiktoken's "gpt2" uses). `codec` encodes and decodes with it (interp.sample,
interp.plot_attention); interp.files.tokenizers.tokenizer_for picks the Hugging Face tokenizer that
interp.tl.hooked attaches to an export.

Light: nothing heavy is imported until a GPT-2 tokenizer is built, so a
command line with a bad prompt answers at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from interp.errors import ArgumentError, CheckpointError, DataError
from interp.files.gpt2 import GPT2_VOCAB_SIZE, gpt2_files
from interp.model.api import id_list


class Codec(NamedTuple):
    """encode(text) -> ids and decode(ids) -> text in one vocabulary."""

    encode: Callable[[str], list[int]]
    decode: Callable[[Iterable[int]], str]

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Each token's own text (axis labels)."""
        return [self.decode([i]) for i in ids]


def checkpoint_char_codec(vocab: list[str], what: str = "the text") -> Codec:
    """One token per character of vocab (id = index); a character outside it is a DataError naming `what`."""
    vocab = list(vocab)
    index = {c: i for i, c in enumerate(vocab)}

    def encode(text: str) -> list[int]:
        if not isinstance(text, str):
            raise ArgumentError(f"text: encode takes a string, not {type(text).__name__}")
        missing = sorted(set(text) - set(index))
        if missing:
            raise DataError(
                f"{what} has character(s) the checkpoint's {len(vocab)}-character vocabulary lacks: "
                f"{''.join(missing)!r}; use only these: {''.join(vocab)!r}"
            )
        return [index[c] for c in text]

    return Codec(encode, lambda ids: "".join(vocab[i] for i in id_list(ids, len(vocab))))


def codec(state: dict[str, Any], what: str = "the text") -> Codec:
    """The codec of a checkpoint's vocabulary (its state["vocab"] or encoding "gpt2")."""
    if state.get("vocab") is not None:
        return checkpoint_char_codec(state["vocab"], what)
    if state.get("encoding") == "gpt2":
        from interp.files.tokenizers import gpt2_tokenizer

        tokenizer = gpt2_tokenizer(pad=False)  # ResidualGPT's codec: no padding

        def encode_bpe(text: str) -> list[int]:
            if not isinstance(text, str):
                raise ArgumentError(f"text: encode takes a string, not {type(text).__name__}")
            return tokenizer(text)["input_ids"]

        return Codec(encode_bpe, lambda ids: tokenizer.decode(id_list(ids, GPT2_VOCAB_SIZE)))
    raise CheckpointError(
        "the checkpoint has no vocabulary (state 'vocab' or encoding 'gpt2'); save it with "
        "interp.save_checkpoint(path, model, vocab=itos), or for a nanoGPT checkpoint give its meta.pkl "
        "(--meta, or load_checkpoint(path, meta=...); python -m interp.nanogpt writes one with --dataset and "
        "--meta-out)"
    )


__all__ = ["GPT2_VOCAB_SIZE", "Codec", "checkpoint_char_codec", "codec", "gpt2_files"]

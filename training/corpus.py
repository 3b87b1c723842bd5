"""A tokenised corpus: the type every loader returns, its names, and which data a run read.

training.data loads the real corpora and training.synthetic generates one; both
build a `Corpus` here, so neither imports the other's module for it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from interp.errors import DataError

CORPORA = ("shakespeare_char", "bpe", "openwebtext", "synthetic")  # the names training.data.load_corpus knows


@dataclass(eq=False)  # eq on arrays is ambiguous; identity is what matters
class Corpus:
    """A tokenised corpus: train/val id arrays and the codec that made them."""

    name: str
    vocab_size: int
    train: np.ndarray
    val: np.ndarray
    encode: Callable[[str], list[int]]
    decode: Callable[[list[int]], str]
    vocab: list[str] | None  # the characters, for char corpora; None for BPE
    encoding: str  # "char" or "gpt2"


def char_codec(chars: list[str]) -> tuple[Callable[[str], list[int]], Callable[[Iterable[int]], str]]:
    """encode / decode between text and ids, id i being chars[i]; unknown input is a DataError."""
    stoi = {c: i for i, c in enumerate(chars)}

    def encode(s: str) -> list[int]:
        try:
            return [stoi[c] for c in s]
        except KeyError as e:
            raise DataError(f"character {e.args[0]!r} is not in the {len(chars)}-character vocabulary") from None

    def decode(ids: Iterable[int]) -> str:
        try:
            return "".join(chars[int(i)] for i in ids)
        except IndexError:
            raise DataError(f"a token id is outside the {len(chars)}-character vocabulary") from None

    return encode, decode


def vocab_sha256(vocab: list[str] | None, encoding: str | None) -> str:
    """sha256 of what a corpus's token ids mean: its characters (id = index) and its encoding. A checkpoint
    records both (state "vocab", "encoding"), so a run's is recomputed from its checkpoint too."""
    text = json.dumps({"encoding": encoding, "vocab": list(vocab) if vocab is not None else None})
    return hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=4)  # a sweep hashes its corpus once
def data_provenance(corpus: Corpus) -> dict[str, Any]:
    """Which data a run read: the corpus, its token counts, the sha256 of its token ids and the sha256 of
    their meaning (vocab_sha256: the same ids in another vocabulary are another text)."""
    h = hashlib.sha256()
    for split in (corpus.train, corpus.val):
        h.update(np.ascontiguousarray(split, dtype=np.uint16).tobytes())
    return {
        "corpus": corpus.name,
        "encoding": corpus.encoding,
        "train_tokens": int(len(corpus.train)),
        "val_tokens": int(len(corpus.val)),
        "sha256": h.hexdigest(),
        "vocab_sha256": vocab_sha256(corpus.vocab, corpus.encoding),
    }

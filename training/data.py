"""Corpora to token arrays: where their files come from, and each corpus loaded as a Corpus.

The paper's two corpora:
    shakespeare_char  TinyShakespeare, 65 characters, first 90% train / last 10% val (the 10M setting)
    bpe / openwebtext GPT-2 BPE tokens in nanoGPT's train.bin / val.bin uint16 layout (the 124M setting)
and, for tests and machines without data, "synthetic": a generated character Markov chain (training.synthetic).

Where files come from (first hit wins): an explicit path, then $RESIDUAL_DATA_DIR (a directory holding
tinyshakespeare/input.txt and gpt2/), then the cache ($RESIDUAL_CACHE_DIR, default
~/.cache/residual-interp), then a one-time download that is checksummed before it is written.

Batches are training.batches; the reference levels every result is read against, training.reference_levels.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import urllib.request
from collections.abc import Iterable, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from interp.errors import DataError
from interp.files.checks import checked, not_regular, regular_file
from interp.files.gpt2 import GPT2_EOT, GPT2_FILES, GPT2_VOCAB_SIZE, gpt2_files
from interp.files.io import DataFileError, atomic_write, read_json
from training.checks.corpus_files import check_corpus_meta, check_tokens
from training.corpus import CORPORA, Corpus, char_codec
from training.synthetic import synthetic_corpus

SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SHAKESPEARE_REL = Path("tinyshakespeare") / "input.txt"
OPENWEBTEXT_DATASET = "Skylion007/openwebtext"


# ----------------------------------------------------------------------------------------------------------
# Where files live


def cache_dir() -> Path:
    """$RESIDUAL_CACHE_DIR, else ~/.cache/residual-interp (not created here)."""
    return Path(os.environ.get("RESIDUAL_CACHE_DIR") or Path.home() / ".cache" / "residual-interp")


def data_dir() -> Path | None:
    """$RESIDUAL_DATA_DIR when set (a directory holding tinyshakespeare/, gpt2/), else None."""
    value = os.environ.get("RESIDUAL_DATA_DIR")
    return Path(value) if value else None


def _check_sha256(data: bytes, what: str, remedy: str) -> None:
    """TinyShakespeare from the network (or a cached copy of it) must be the file it was checksummed as."""
    if (digest := hashlib.sha256(data).hexdigest()) != SHAKESPEARE_SHA256:
        raise DataError(f"{what} has sha256 {digest[:12]}..., expected {SHAKESPEARE_SHA256[:12]}...; {remedy}")


def _check_text(path: Path, data: bytes) -> None:
    """A trusted file must still be usable: non-empty UTF-8 text."""
    if not data:
        raise DataError(f"{path} is empty")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def _read_bytes(path: Path, what: str) -> bytes:
    regular_file(path, DataError, f"{what} file")  # missing, or a FIFO / device / directory named as what it is
    try:
        return path.read_bytes()
    except OSError as e:
        raise DataError(f"{what}: cannot read {path} ({e.strerror})") from None


def _download(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.read()
    except Exception as e:  # URLError, HTTPError, timeouts, ...: all mean "no file from the network"
        raise DataError(
            f"could not download {url} ({type(e).__name__}: {e}); "
            f"set RESIDUAL_DATA_DIR to a directory holding {SHAKESPEARE_REL} or pass a path"
        ) from None


def _locate_shakespeare(path: str | Path | None) -> tuple[Path, bytes]:
    """Resolve TinyShakespeare (see the module docstring for the order) and return (path, its bytes)."""
    root = data_dir()
    if path is not None or root is not None:  # an explicit path is trusted, but must be text (RESIDUAL_DATA_DIR's too)
        what = "TinyShakespeare" if path is not None else f"RESIDUAL_DATA_DIR={root}"
        path = Path(path) if path is not None else root / SHAKESPEARE_REL
        data = _read_bytes(path, what)
        _check_text(path, data)
        return path, data
    cached = cache_dir() / SHAKESPEARE_REL
    if cached.is_file():  # a cached copy came from the network: verify it like a download
        data = _read_bytes(cached, "cached TinyShakespeare")
        _check_sha256(data, f"cached {cached}", "delete it to download again, or set RESIDUAL_DATA_DIR")
        return cached, data
    data = _download(SHAKESPEARE_URL)
    remedy = f"retry, or set RESIDUAL_DATA_DIR to a directory holding {SHAKESPEARE_REL}"
    _check_sha256(data, f"download from {SHAKESPEARE_URL}", remedy)
    atomic_write(cached, lambda tmp: Path(tmp).write_bytes(data))  # a kill never leaves half a file
    return cached, data


def shakespeare_path(path: str | Path | None = None) -> Path:
    """The TinyShakespeare input.txt: explicit path, $RESIDUAL_DATA_DIR, cache, else download once."""
    return _locate_shakespeare(path)[0]


# ----------------------------------------------------------------------------------------------------------
# Corpora


def load_char_corpus(path: str | Path | None = None) -> Corpus:
    """TinyShakespeare (or any text file) as characters, laid out as nanoGPT's shakespeare_char."""
    path, data = _locate_shakespeare(path)
    text = data.decode("utf-8")
    chars = sorted(set(text))
    if len(chars) > np.iinfo(np.uint16).max + 1:
        raise DataError(f"{path} has {len(chars)} distinct characters; at most 65536 fit uint16 ids")
    encode, decode = char_codec(chars)
    # Split the text, then encode: the val split starts exactly where nanoGPT's does.
    n_train = int(len(text) * 0.9)
    return Corpus(
        name="shakespeare_char",
        vocab_size=len(chars),
        train=np.array(encode(text[:n_train]), dtype=np.uint16),
        val=np.array(encode(text[n_train:]), dtype=np.uint16),
        encode=encode,
        decode=decode,
        vocab=chars,
        encoding="char",
    )


@functools.lru_cache(maxsize=4)
def _local_gpt2_encoding(encoder_json: str, vocab_bpe: str) -> Any:
    import tiktoken
    import tiktoken.load
    from tiktoken_ext.openai_public import r50k_pat_str

    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=vocab_bpe,
        encoder_json_file=encoder_json,
        vocab_bpe_hash=GPT2_FILES["vocab.bpe"],
        encoder_json_hash=GPT2_FILES["encoder.json"],
    )
    return tiktoken.Encoding(
        name="gpt2",
        pat_str=r50k_pat_str,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": GPT2_EOT},
        explicit_n_vocab=GPT2_VOCAB_SIZE,
    )


def gpt2_encoding() -> Any:
    """tiktoken's "gpt2" Encoding; built from $RESIDUAL_DATA_DIR/gpt2/ (interp.files.gpt2.gpt2_files) when present (no
    network attempt)."""
    try:
        if (files := gpt2_files()) is not None:
            return _local_gpt2_encoding(str(files[0]), str(files[1]))
        import tiktoken

        return tiktoken.get_encoding("gpt2")
    except Exception as e:  # hash mismatch, inconsistent files, no network: one clear line either way
        root = data_dir()
        local = root / "gpt2" if root is not None else None
        where = f"from {local}" if local is not None and local.is_dir() else "via tiktoken (network)"
        raise DataError(
            f"cannot load the GPT-2 BPE {where} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            "set RESIDUAL_DATA_DIR to a directory holding gpt2/vocab.bpe and gpt2/encoder.json"
        ) from None


def _text_files(source: Path) -> list[Path]:
    if source.is_file():
        return [source]
    if source.is_dir():
        files = sorted(p for p in source.rglob("*.txt") if p.is_file())  # sorted: the same order everywhere
        if not files:
            raise DataError(f"{source} holds no .txt files")
        return files
    raise DataError(f"no text file or directory at {source}")


def _read_documents(files: Sequence[Path]) -> Iterable[str]:
    for path in files:
        if data := _read_bytes(path, "BPE source"):
            _check_text(path, data)
            yield data.decode("utf-8")


def _encode_documents(docs: Iterable[str], enc: Any, chunk: int = 256) -> tuple[np.ndarray, int]:
    """Every document's tokens followed by <|endoftext|>, as one uint16 stream; also the document count."""
    parts: list[np.ndarray] = []
    n_docs = 0
    docs = iter(docs)
    while chunk_docs := list(islice(docs, chunk)):
        batch = [d for d in chunk_docs if d]  # an empty document would be a bare separator
        # encode_ordinary: a literal "<|endoftext|>" inside a document is text, not a separator
        parts += [np.array([*ids, GPT2_EOT], dtype=np.uint16) for ids in enc.encode_ordinary_batch(batch)]
        n_docs += len(batch)
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint16)), n_docs


def _write_bpe_corpus(tokens: np.ndarray, n_docs: int, out_dir: Path, val_fraction: float, meta: dict) -> Path:
    n_train = int(len(tokens) * (1 - val_fraction))
    if n_train == 0 or n_train == len(tokens):
        raise DataError(f"{meta['source']}: {len(tokens)} tokens are too few to split with val_fraction={val_fraction}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "meta.json").unlink(missing_ok=True)  # meta.json marks a complete corpus: absent while writing
    for split, arr in (("train", tokens[:n_train]), ("val", tokens[n_train:])):
        atomic_write(out_dir / f"{split}.bin", lambda tmp, arr=arr: arr.tofile(tmp))
    meta = {
        **meta,
        "encoding": "gpt2",
        "vocab_size": GPT2_VOCAB_SIZE,
        "dtype": "uint16",
        "n_docs": n_docs,
        "train_tokens": n_train,
        "val_tokens": len(tokens) - n_train,
        "val_fraction": val_fraction,
    }
    atomic_write(out_dir / "meta.json", lambda tmp: Path(tmp).write_text(json.dumps(meta, indent=2) + "\n"))
    return out_dir


def _check_val_fraction(val_fraction: float) -> None:
    if not 0 < val_fraction < 1:
        raise DataError(f"val_fraction must be in (0, 1), got {val_fraction!r}")


def prepare_bpe_corpus(source: str | Path, out_dir: str | Path, val_fraction: float = 0.1) -> Path:
    """Tokenise a text file (one document) or a directory of .txt files (one each) into nanoGPT's layout.

    Writes out_dir/train.bin and val.bin (uint16) and then meta.json; the first (1 - val_fraction) of the
    token stream is train. Returns out_dir.
    """
    _check_val_fraction(val_fraction)
    source = Path(source)
    enc = gpt2_encoding()
    tokens, n_docs = _encode_documents(_read_documents(_text_files(source)), enc)
    if n_docs == 0:
        raise DataError(f"{source} holds only empty files")
    return _write_bpe_corpus(tokens, n_docs, Path(out_dir), val_fraction, {"name": "bpe", "source": str(source)})


def prepare_openwebtext(
    out_dir: str | Path, num_docs: int = 100_000, val_fraction: float = 0.1, dataset: str = OPENWEBTEXT_DATASET
) -> Path:
    """The first num_docs OpenWebText documents (streamed with the optional `datasets` package) as BPE."""
    _check_val_fraction(val_fraction)
    if isinstance(num_docs, bool) or not isinstance(num_docs, int) or num_docs <= 0:
        raise DataError(f"num_docs must be a positive integer, got {num_docs!r}")
    try:
        import datasets
    except ImportError:
        raise DataError(
            "OpenWebText needs the optional `datasets` package: pip install 'residual-interp[data]'"
        ) from None
    enc = gpt2_encoding()
    try:  # streaming: the first num_docs without downloading all 8M documents
        stream = datasets.load_dataset(dataset, split="train", streaming=True)
        tokens, n_docs = _encode_documents((row["text"] for row in islice(stream, num_docs)), enc)
    except Exception as e:  # offline, unknown dataset, changed schema
        raise DataError(
            f"cannot stream {dataset} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            "needs network access, or prepare a local text directory with prepare_bpe_corpus"
        ) from None
    meta = {"name": "openwebtext", "source": f"{dataset}[:{num_docs}]"}
    return _write_bpe_corpus(tokens, n_docs, Path(out_dir), val_fraction, meta)


def _open_split(path: Path, expected: int) -> np.ndarray:
    if path.exists() and not path.is_file():
        raise DataError(f"{path} is not a regular file (a FIFO, device or directory); prepare the corpus again")
    if not path.is_file():
        raise DataError(f"no {path.name} in {path.parent}; prepare the corpus again")
    if path.stat().st_size != 2 * expected:
        raise DataError(f"{path} does not match meta.json ({expected} tokens); prepare the corpus again")
    return np.memmap(path, dtype=np.uint16, mode="r")


def load_bpe_corpus(directory: str | Path) -> Corpus:
    """A prepared BPE corpus, its splits opened as read-only uint16 memmaps."""
    directory = Path(directory)
    meta_path = directory / "meta.json"
    if not meta_path.exists():
        raise DataError(f"{directory} is not a prepared BPE corpus (no meta.json); run prepare_bpe_corpus")
    try:
        meta = read_json(meta_path)  # strict JSON, a regular file: 1e999 or a FIFO is refused here
    except DataFileError as e:
        raise DataError(f"{e}; prepare the corpus again") from None
    with checked(meta_path, DataError, "prepare the corpus again"):
        check_corpus_meta(meta)
    train, val = (_open_split(directory / f"{split}.bin", meta[f"{split}_tokens"]) for split in ("train", "val"))
    for name, split in (("train.bin", train), ("val.bin", val)):
        with checked(directory / name, DataError, "prepare the corpus again"):
            check_tokens(split, GPT2_VOCAB_SIZE, "it")
    enc = gpt2_encoding()
    return Corpus(
        name=str(meta.get("name", "bpe")),
        vocab_size=GPT2_VOCAB_SIZE,
        train=train,
        val=val,
        encode=enc.encode_ordinary,  # plain text stays plain text, as in preparation
        decode=lambda ids: enc.decode([int(i) for i in ids]),
        vocab=None,
        encoding="gpt2",
    )


def _source_key(source: Path) -> str:
    """A short hash of a source's resolved path and its files' sizes and mtimes: a changed file re-prepares."""
    source = source.resolve()
    files = _text_files(source)
    stats = [(str(p.relative_to(source)) if p != source else "", p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    return hashlib.sha256(json.dumps([str(source), stats]).encode()).hexdigest()[:16]


def _is_prepared(path: Path) -> bool:
    """A prepared corpus directory (its meta.json there); a meta.json that is there but is not a regular file
    (a directory, a FIFO, a device, a dangling link) is damage, a DataError naming what it is - never read as
    "not prepared yet" (which would prepare over it, or call the directory half-prepared)."""
    if not path.is_dir():
        return False
    if (kind := not_regular(path / "meta.json")) is not None:
        raise DataError(
            f"{path / 'meta.json'} is {kind}, not a regular file; the prepared corpus is damaged - "
            "delete that directory and prepare it again"
        )
    return (path / "meta.json").is_file()


def load_corpus(name: str, path: str | Path | None = None) -> Corpus:
    """A corpus by name.

    shakespeare_char  path: the input.txt (default: see shakespeare_path)
    bpe               path: a prepared directory, or a text file / directory of .txt files, which is
                      prepared once into the cache, keyed by its path, sizes and mtimes
    openwebtext       path: the prepared directory (default: <cache>/openwebtext), prepared on first use
    synthetic         no path: a seeded Markov chain with closed-form reference levels (training.synthetic)
    """
    if name == "shakespeare_char":
        return load_char_corpus(path)
    if name == "bpe":
        if path is None:
            raise DataError("corpus 'bpe' needs a path: a prepared directory, a text file or a directory of .txt")
        path = Path(path)
        if _is_prepared(path):
            return load_bpe_corpus(path)
        if path.is_dir() and (path / "train.bin").exists():
            raise DataError(f"{path} is a half-prepared corpus (no meta.json); delete it and prepare again")
        out = cache_dir() / "bpe" / f"{path.resolve().name}-{_source_key(path)}"
        if not _is_prepared(out):
            prepare_bpe_corpus(path, out)
        return load_bpe_corpus(out)
    if name == "synthetic":
        if path is not None:
            raise DataError("corpus 'synthetic' is generated (training.synthetic); it takes no path")
        return synthetic_corpus()
    if name == "openwebtext":
        out = Path(path) if path is not None else cache_dir() / "openwebtext"
        if not _is_prepared(out):
            prepare_openwebtext(out)
        return load_bpe_corpus(out)
    raise DataError(f"unknown corpus {name!r}; known: {', '.join(CORPORA)}")

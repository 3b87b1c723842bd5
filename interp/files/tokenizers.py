"""Hugging Face tokenizers for an export: one token per character, or GPT-2's BPE from local files.

The character tokenizer adds one special token, <|endoftext|>, after the
characters (EOS, PAD and BOS; its embedding row is zero and the model never
predicts it), so newlines stay ordinary text for generate, to_string and
padding. Which tokenizer a checkpoint gets is tokenizer_for, below.
"""

from __future__ import annotations

import os
from typing import Any

from transformers import PreTrainedTokenizerFast  # imported by transformer_lens already

from interp.errors import ConfigError, DataError
from interp.files.gpt2 import GPT2_VOCAB_SIZE, gpt2_files

SPECIAL = "<|endoftext|>"  # the char tokenizer's only special token, id len(vocab)


class CharTokenizer(PreTrainedTokenizerFast):
    """One token per character (see char_tokenizer); unknown characters and silent truncation are errors."""

    chars: list[str] = []  # set per instance by char_tokenizer

    def _check(self, text: Any, kwargs: dict[str, Any]) -> None:
        texts = [text] if isinstance(text, str) else text if isinstance(text, (list, tuple)) else []
        texts = [t.replace(SPECIAL, "") if isinstance(t, str) else "" for t in texts]
        unknown = sorted({c for t in texts for c in t} - set(self.chars))
        if unknown:
            raise DataError(f"character(s) {unknown} not in the model's {len(self.chars)}-character vocabulary")
        limit = kwargs.get("max_length")
        if kwargs.get("truncation") and limit is not None:
            longest = max((len(t) for t in texts), default=0)  # SPECIAL removed: it is one token
            if longest > limit:
                raise ConfigError(
                    f"prompt of {longest} characters exceeds the context of {limit} tokens (TransformerLens "
                    "would cut it silently); shorten it"
                )

    def __call__(self, text=None, *args, **kwargs):
        self._check(text if text is not None else kwargs.get("text"), kwargs)
        return super().__call__(text, *args, **kwargs)

    def encode(self, text, *args, **kwargs):
        self._check(text, kwargs)
        return super().encode(text, *args, **kwargs)


def char_tokenizer(vocab: list[str]):
    """A Hugging Face fast tokenizer with one token per character of `vocab` (id = index).

    No normalizer. One special token, <|endoftext|>, takes id len(vocab): it is
    EOS and PAD (and BOS, which TL sets to EOS), so no character of the corpus,
    newline included, is ever stripped, masked or stopped at. The model never
    predicts it, so generate runs max_new_tokens; the model never saw a BOS,
    so prepend_bos stays off by default. An unknown character raises
    DataError; a prompt that TL would truncate raises ConfigError.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    if len(set(vocab)) != len(vocab) or not all(isinstance(c, str) and len(c) == 1 for c in vocab):
        raise ConfigError("vocab must be a list of distinct single characters (index = token id)")
    tok = Tokenizer(models.WordLevel(vocab={c: i for i, c in enumerate(vocab)}, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every char, \n included
    tok.decoder = decoders.Fuse()  # concatenate, no spaces between characters
    tok.add_special_tokens([AddedToken(SPECIAL, special=True)])  # id len(vocab)
    # No bos_token here: TL sets BOS to EOS itself (given one, it would try to re-download the tokenizer).
    out = CharTokenizer(tokenizer_object=tok, eos_token=SPECIAL, pad_token=SPECIAL)
    out.chars = list(vocab)
    return out


PAD = "<|pad|>"  # the GPT-2 export's padding: an id past the trained ones (50257), as the char tokenizer's


def gpt2_tokenizer(data_dir: str | os.PathLike | None = None, pad: bool = True):
    """GPT-2's byte-level BPE from local files (the ones tiktoken's "gpt2" uses), as a fast tokenizer.

    GPT-2 pads with <|endoftext|> (50256), a trained id, so nothing can tell its padding from text: a padded
    batch's loss scored the pads (8.06 against 5.49 on a smoke model), generate went on after them and left
    padding was taken unmasked, without a word. With pad (an export's tokenizer) padding is <|pad|>, id 50257,
    past the trained ids: it embeds as zeros and the exports' padding rules hold as for characters.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    files = gpt2_files(data_dir)
    if files is None:
        raise ConfigError(
            "GPT-2 BPE files not found: set RESIDUAL_DATA_DIR to a folder holding gpt2/encoder.json and gpt2/vocab.bpe"
        )
    tok = Tokenizer(models.BPE.from_file(str(files[0]), str(files[1])))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    if not pad:  # No bos_token: TL then uses <|endoftext|> for BOS (and PAD) without trying to download anything.
        return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    tok.add_special_tokens([AddedToken(PAD, special=True)])  # id 50257
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token=PAD)


def tokenizer_for(d_vocab: int, vocab: list[str] | None, state: dict[str, Any]) -> tuple[Any, str | None]:
    """(the Hugging Face tokenizer for an export, None) or (None, why there is none).

    vocab (characters) wins, then the checkpoint's state["vocab"], then GPT-2 BPE
    for encoding "gpt2" (or a GPT-2-sized model that names no encoding).
    """
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

"""SAELens's training runner on an export: the toolkit's corpus as its dataset, and a config safe for the export.

    sae_dataset(tl)                    the corpus the model was trained on, as the datasets.Dataset SAELens takes
                                       (a "tokens" column of n_ctx ids each: already tokenized, so no BOS is added)
    sae_runner_config(tl, hook, ...)   LanguageModelSAERunnerConfig with what the export needs: no BOS or separator
                                       token (the char tokenizer's id, 65 on TinyShakespeare, was never trained),
                                       the export's weight processing recorded in the SAE's cfg.json, the hook's
                                       width as d_in, an activation buffer at least twice the training batch,
                                       no Weights & Biases, no checkpoints unless asked

    from sae_lens import LanguageModelSAETrainingRunner
    cfg = sae_runner_config(tl, "blocks.1.hook_resid_post", d_sae=256, training_tokens=200_000, output_path="sae")
    sae = LanguageModelSAETrainingRunner(cfg, override_model=tl, override_dataset=sae_dataset(tl)).run()

SAELens 6 needs TransformerLens 3 (the `sae` extra: `make setup` installs it). Imports of SAELens and datasets
happen inside the functions.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from interp.errors import ConfigError, DataError
from interp.reading.sae import export_processing


def _model_vocab(model: Any) -> tuple[list[str] | None, str | None]:
    """The characters (id = index) and encoding of a ResidualGPT's or an export's vocabulary, where known."""
    state = getattr(model, "vocab_state", None)
    if isinstance(state, dict):  # ResidualGPT
        return state.get("vocab"), state.get("encoding") or ("char" if state.get("vocab") else None)
    tokenizer = getattr(model, "tokenizer", None)
    if chars := getattr(tokenizer, "chars", None):
        return list(chars), "char"
    return None, "gpt2" if tokenizer is not None else None


def sae_dataset(
    model: Any,
    corpus: str = "shakespeare_char",
    path: str | Path | None = None,
    *,
    context_size: int | None = None,
    split: str = "train",
) -> Any:
    """The corpus as a Hugging Face datasets.Dataset for SAELens: column "tokens", rows of context_size ids.

    model (an export or a ResidualGPT) gives the context (its n_ctx unless context_size is smaller) and the
    vocabulary the corpus must have (a DataError where the corpus's characters are not the model's: another
    text's ids would mean other characters). corpus and path as training.data.load_corpus takes them
    ($RESIDUAL_DATA_DIR offline); split "train" or "val". The rows are consecutive, non-overlapping windows of
    the split, every id one the model was trained on: SAELens reads a tokenized dataset as it is, adding no BOS.
    """
    import datasets

    from training.data import load_corpus

    if split not in ("train", "val"):
        raise ConfigError(f"split must be 'train' or 'val', not {split!r}")
    n_ctx = int(model.cfg.n_ctx)
    size = n_ctx if context_size is None else context_size
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= n_ctx:
        raise ConfigError(f"context_size must be an integer in 1..{n_ctx} (the model's n_ctx), not {size!r}")
    data = load_corpus(corpus, path)
    what = f"corpus {corpus!r}" if path is None else f"{path} (read as corpus {corpus!r})"
    vocab, encoding = _model_vocab(model)
    if (vocab is not None and data.vocab != vocab) or (encoding is not None and data.encoding != encoding):
        raise DataError(
            f"{what} ({data.encoding}, {data.vocab_size} tokens) is not the vocabulary the model was "
            f"trained on ({encoding}, {len(vocab) if vocab else 'GPT-2'} tokens): its ids would mean other text; "
            "name the model's corpus (corpus=, path=)"
        )
    d_vocab = int(getattr(model.cfg, "d_vocab_out", model.cfg.d_vocab))
    if data.vocab_size > d_vocab:
        raise DataError(f"{what} has {data.vocab_size} token ids, the model {d_vocab}")
    ids = data.train if split == "train" else data.val
    rows = len(ids) // size
    if rows == 0:
        raise DataError(f"{what}: its {split} split has {len(ids)} tokens, fewer than one row of {size}")
    windows = ids[: rows * size].reshape(rows, size).astype("int64")
    return datasets.Dataset.from_dict({"tokens": windows})


def _site_width(tl: Any, hook_name: str) -> int:
    """The width SAELens reads at hook_name (heads flattened): one forward of one token, the name checked."""
    from interp.model.api import check_hook_name

    check_hook_name(tl, hook_name, "hook_name")  # named as the caller gave it (run_with_cache would say names_filter)
    _, cache = tl.run_with_cache(torch.zeros(1, 1, dtype=torch.long, device=tl.cfg.device), names_filter=[hook_name])
    return int(math.prod(cache[hook_name].shape[2:]))


def _count_option(options: dict[str, Any], name: str, default: int) -> int:
    """A count sae_runner_config computes with: a positive int (not a bool, a float or a string), else ConfigError."""
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


def sae_runner_config(
    tl: Any, hook_name: str, *, d_sae: int, training_tokens: int, sae: Any = None, **options: Any
) -> Any:
    """SAELens's LanguageModelSAERunnerConfig for training an SAE at hook_name of the export `tl`.

    sae: an SAELens training-SAE config (default: StandardTrainingSAEConfig with d_in the hook's width and
    d_sae). options: any other LanguageModelSAERunnerConfig field, taken over the defaults here:
    prepend_bos=False and sequence_separator_token=None (a text dataset gets no untrained id either),
    model_from_pretrained_kwargs the export's processing (interp.reading.sae.export_processing: what the SAE's cfg.json
    records, and what splicing checks), context_size the model's n_ctx, model_name the export's, device and
    dtype the export's, n_batches_in_buffer large enough for train_batch_size_tokens (SAELens's buffer holds
    n_batches_in_buffer x context_size activations and must exceed a batch), no Weights & Biases logging,
    checkpoint_path and output_path None (pass output_path to save the SAE).
    """
    from sae_lens import LanguageModelSAERunnerConfig, LoggingConfig, StandardTrainingSAEConfig

    processing = export_processing(tl)  # first: anything but a TransformerLens 3 export is refused by name here
    if sae is None:
        sae = StandardTrainingSAEConfig(d_in=_site_width(tl, hook_name), d_sae=d_sae)
    context = _count_option(options, "context_size", tl.cfg.n_ctx)
    batch = _count_option(options, "train_batch_size_tokens", 4096)
    defaults: dict[str, Any] = {
        "model_name": tl.cfg.model_name,
        "context_size": context,
        "prepend_bos": False,
        "sequence_separator_token": None,
        "exclude_special_tokens": False,
        "model_from_pretrained_kwargs": processing,
        "device": str(tl.cfg.device),
        "dtype": str(tl.cfg.dtype).removeprefix("torch."),
        "train_batch_size_tokens": batch,
        "n_batches_in_buffer": max(20, math.ceil(2 * batch / context)),
        "logger": LoggingConfig(log_to_wandb=False),
        "checkpoint_path": None,
        "output_path": None,
    }
    buffer = _count_option(options, "n_batches_in_buffer", defaults["n_batches_in_buffer"]) * context
    if buffer < batch:
        raise ConfigError(
            f"n_batches_in_buffer x context_size = {buffer} activations, fewer than train_batch_size_tokens "
            f"{batch}: SAELens's buffer must hold a batch; give n_batches_in_buffer >= {math.ceil(batch / context)}"
        )
    return LanguageModelSAERunnerConfig(
        sae=sae, hook_name=hook_name, training_tokens=training_tokens, **{**defaults, **options}
    )


__all__ = ["sae_dataset", "sae_runner_config"]

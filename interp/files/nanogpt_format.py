"""nanoGPT's checkpoint format: its names, its model_args, its meta.pkl, and reading a train.py checkpoint.

Light (config, errors and the file checks only) and below interp.files.checkpoint, which reads nanoGPT files through
it; interp.nanogpt (above the model) writes them and holds the command line.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

from interp.config.model_config import ModelConfig
from interp.errors import CheckpointError, ConfigError

# nanoGPT's GPTConfig field (model_args, in its order) -> the ModelConfig field it is
GPT_CONFIG_FIELDS = {
    "n_layer": "n_layers",
    "n_head": "n_heads",
    "n_embd": "d_model",
    "block_size": "n_ctx",
    "bias": "bias",
    "vocab_size": "d_vocab",
    "dropout": "dropout",
}
MODEL_ARGS = tuple(GPT_CONFIG_FIELDS)
GPT2_SIZES = (50257, 50304)  # GPT-2's BPE, and nanoGPT's padding of it to a multiple of 64
_PREFIX = "_orig_mod."  # torch.compile's wrapper, as nanoGPT's sample.py strips it

# ResidualGPT name -> nanoGPT name, per block (weight, and bias where cfg.bias)
_BLOCK = {
    "ln1.w": "ln_1.weight",
    "ln1.b": "ln_1.bias",
    "attn.in_proj.weight": "attn.c_attn.weight",
    "attn.in_proj.bias": "attn.c_attn.bias",
    "attn.out_proj.weight": "attn.c_proj.weight",
    "attn.out_proj.bias": "attn.c_proj.bias",
    "ln2.w": "ln_2.weight",
    "ln2.b": "ln_2.bias",
    "mlp.in_proj.weight": "mlp.c_fc.weight",
    "mlp.in_proj.bias": "mlp.c_fc.bias",
    "mlp.out_proj.weight": "mlp.c_proj.weight",
    "mlp.out_proj.bias": "mlp.c_proj.bias",
}
_TOP = {
    "embed.weight": "transformer.wte.weight",
    "pos_embed.weight": "transformer.wpe.weight",
    "ln_final.w": "transformer.ln_f.weight",
    "ln_final.b": "transformer.ln_f.bias",
    "unembed.weight": "lm_head.weight",
}


def is_nanogpt(payload: Any) -> bool:
    """Whether a loaded checkpoint dict is nanoGPT's (train.py's keys, no ResidualGPT schema)."""
    return isinstance(payload, dict) and "schema" not in payload and {"model", "model_args"} <= set(payload)


def name_map(n_layers: int) -> dict[str, str]:
    """Every ResidualGPT weight name -> its nanoGPT name."""
    out = dict(_TOP)
    for layer in range(n_layers):
        out.update({f"blocks.{layer}.{ours}": f"transformer.h.{layer}.{theirs}" for ours, theirs in _BLOCK.items()})
    return out


class _PlainUnpickler(pickle.Unpickler):
    """meta.pkl holds dicts, ints and strings only: anything that names a class or function is refused."""

    def find_class(self, module: str, name: str):
        raise CheckpointError(f"meta.pkl refers to {module}.{name}; only plain data (dicts, strings, ints) is read")


def read_meta(path: str | os.PathLike) -> list[str]:
    """The characters of a nanoGPT meta.pkl ({"vocab_size", "itos", "stoi"}), id = index; plain data only."""
    from interp.files.checks import checked, regular_file
    from interp.files.checks.nanogpt_file import check_meta_pkl

    path = regular_file(path, CheckpointError, "meta.pkl")  # a FIFO or /dev/zero given as --meta: refused
    try:
        meta = _PlainUnpickler(io.BytesIO(path.read_bytes())).load()
    except OSError as e:
        raise CheckpointError(f"cannot read {path}: {e.strerror or e}") from None
    except CheckpointError as e:  # a global named inside it (find_class): name the file too
        raise CheckpointError(f"{path}: {e}") from None
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        RecursionError,
        MemoryError,
        AttributeError,
        UnicodeDecodeError,
    ) as e:
        raise CheckpointError(f"{path} is not a nanoGPT meta.pkl: {e or type(e).__name__}") from None
    with checked(path, CheckpointError, "it is not a nanoGPT character meta.pkl"):
        return check_meta_pkl(meta)


def meta_bytes(vocab: list[str]) -> bytes:
    """A nanoGPT meta.pkl's bytes for a character vocabulary (what nanoGPT's sample.py reads from data/<dataset>/)."""
    meta = {"vocab_size": len(vocab), "itos": dict(enumerate(vocab)), "stoi": {c: i for i, c in enumerate(vocab)}}
    return pickle.dumps(meta)


def vocab_digest(vocab: list[str]) -> str:
    """sha256 of a character vocabulary in id order: an export records it (config['vocab_sha256']), so a meta.pkl
    of the same size from another model is refused rather than decoding its text wrong."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(vocab).encode()).hexdigest()


def _find_meta(path: Path | None, dataset: Any) -> Path | None:
    candidates = []
    if path is not None:
        candidates.append(path.parent / "meta.pkl")
        if isinstance(dataset, str) and dataset:
            candidates.append(path.parent.parent / "data" / dataset / "meta.pkl")
    if isinstance(dataset, str) and dataset:
        candidates.append(Path("data") / dataset / "meta.pkl")
    return next((c for c in candidates if c.exists()), None)  # read_meta refuses one that is not a regular file


def config_of(model_args: dict[str, Any], tied: bool) -> ModelConfig:
    """The ModelConfig of nanoGPT's GPTConfig fields (residual 'full', attention, 4x GELU MLP)."""
    if not isinstance(model_args, dict):
        raise CheckpointError("model_args is not a dict of GPTConfig fields")
    unknown = sorted(set(model_args) - set(MODEL_ARGS))
    missing = sorted(set(MODEL_ARGS) - set(model_args) - {"dropout", "bias"})
    if unknown or missing:
        raise CheckpointError(
            f"model_args has fields ResidualGPT cannot map (unknown {unknown}, missing {missing}); "
            f"nanoGPT's GPTConfig has {list(MODEL_ARGS)}"
        )
    fields = {GPT_CONFIG_FIELDS[k]: v for k, v in model_args.items()}
    try:
        return ModelConfig(**{"bias": True, **fields}, tie_embeddings=tied)  # GPTConfig's bias defaults to True
    except ConfigError as e:
        raise CheckpointError(f"model_args do not make a valid model: {e}") from None


def from_nanogpt(
    payload: dict[str, Any], path: Path | None = None, meta: str | os.PathLike | None = None, device: str = "cpu"
):
    """The fields of an interp.files.checkpoint.Checkpoint for a nanoGPT train.py checkpoint (see interp.nanogpt)."""
    import torch

    from interp.files.checks import Bad, checked
    from interp.files.checks.checkpoint_file import check_size, check_weights
    from interp.files.checks.nanogpt_file import check_nanogpt_payload

    where = path or "checkpoint"
    with checked(where, CheckpointError, "it cannot be loaded"):
        check_nanogpt_payload(payload)
    weights = {k.removeprefix(_PREFIX): v for k, v in payload["model"].items()}
    # nanoGPT without flash attention registers its causal mask as attn.bias: a constant, not a weight.
    weights = {k: v for k, v in weights.items() if not (k.endswith(".attn.bias") and v.dim() == 4)}
    wte, lm_head = weights.get("transformer.wte.weight"), weights.get("lm_head.weight")
    tied = wte is None or lm_head is None or wte is lm_head or torch.equal(wte, lm_head)
    try:
        cfg = config_of(payload["model_args"], tied)
    except CheckpointError as e:
        raise CheckpointError(f"{where}: {e}") from None
    with checked(where, CheckpointError, "it cannot be loaded"):
        check_size(cfg, "model_args", device)
        blocks = {k.split(".")[2] for k in weights if k.startswith("transformer.h.")}
        if len(blocks) != cfg.n_layers:  # before n_layers names are made
            raise Bad("model", f"holds {len(blocks)} block(s) but model_args says n_layer={cfg.n_layers}")
    names = {theirs: ours for ours, theirs in name_map(cfg.n_layers).items()}
    unknown = sorted(set(weights) - set(names))
    if unknown:
        raise CheckpointError(f"{where}: nanoGPT weight(s) {unknown[:4]} have no place in a ResidualGPT")
    ours = {names[k]: v for k, v in weights.items()}
    if tied:
        ours.setdefault("unembed.weight", ours.get("embed.weight"))
        ours.setdefault("embed.weight", ours.get("unembed.weight"))
        ours = {k: v for k, v in ours.items() if v is not None}
    with checked(where, CheckpointError, "it cannot be loaded"):
        check_weights(ours, cfg, "model")
    config = payload["config"] if isinstance(payload.get("config"), dict) else {}
    state = {k: v for k, v in payload.items() if k not in ("model", "model_args")}
    state["source"] = "nanogpt"
    meta_path = Path(meta) if meta is not None else _find_meta(path, config.get("dataset"))
    if meta_path is not None:
        vocab = read_meta(meta_path)
        if len(vocab) != cfg.d_vocab:
            raise CheckpointError(f"{meta_path} has {len(vocab)} characters; the model's vocab_size is {cfg.d_vocab}")
        recorded = config.get("vocab_sha256")  # an export of ours says whose vocabulary it decodes with
        if recorded is not None and recorded != vocab_digest(vocab):
            raise CheckpointError(
                f"{meta_path} is another model's vocabulary: {path} was exported with a meta.pkl of the same size "
                "but other characters (config['vocab_sha256']); give the meta.pkl written beside it"
            )
        state["vocab"] = vocab
    elif cfg.d_vocab in GPT2_SIZES:
        state["encoding"] = "gpt2"  # nanoGPT's sample.py falls back to GPT-2 BPE when there is no meta.pkl
    return {"config": cfg, "weights": ours, "state": state, "path": path}  # interp.files.checkpoint.Checkpoint's fields

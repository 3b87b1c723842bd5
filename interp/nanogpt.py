"""nanoGPT checkpoints in and out.

In: a checkpoint that nanoGPT's train.py wrote ({"model", "model_args", "iter_num",
"best_val_loss", "config", "optimizer"}; weight names possibly prefixed
"_orig_mod." by torch.compile) is read by interp.load_checkpoint, so
ResidualGPT.from_checkpoint, to_hooked_transformer, `python -m interp.sample` and
`python -m interp.plot_attention` take it as they take their own. nanoGPT's block is
ResidualGPT's with residual='full' and mixer='attention' (Pre-LN, LayerNorm eps
1e-5, exact GELU, 4x MLP, tied embeddings): twelve names per layer change, no weight.
Its vocabulary is not in the checkpoint: a character model's meta.pkl (itos) is
found next to the checkpoint, in ../data/<dataset>/ or ./data/<dataset>/ (where
nanoGPT's sample.py looks), or given; a 50257/50304-token model reads as GPT-2 BPE.

Out: to_nanogpt(model) is the {"model_args", "model", ...} dict that nanoGPT's
sample.py loads (GPT(GPTConfig(**model_args)), load_state_dict strict); only what
nanoGPT's GPT can express: residual='full', mixer='attention', self_bias 0, tied
embeddings, d_mlp 4 * d_model (runtime_gain is folded into the c_proj weights).
Anything else is refused by name: nanoGPT would load it silently as another model.

    python -m interp.nanogpt --ckpt runs/.../ckpt.pt --out out-nanogpt/ckpt.pt [--meta-out data/x/meta.pkl]
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import sys
from pathlib import Path
from typing import Any

from interp.cli import Parser, one_line_errors
from interp.config import ModelConfig
from interp.errors import CheckpointError, ConfigError

MODEL_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size", "dropout")
GPT2_SIZES = (50257, 50304)  # GPT-2's BPE, and nanoGPT's padding of it to a multiple of 64
_PREFIX = "_orig_mod."  # torch.compile's wrapper, as nanoGPT's sample.py strips it

# ResidualGPT name -> nanoGPT name, per block (weight, and bias where cfg.bias)
_BLOCK = {
    "ln1.w": "ln_1.weight", "ln1.b": "ln_1.bias",
    "attn.in_proj.weight": "attn.c_attn.weight", "attn.in_proj.bias": "attn.c_attn.bias",
    "attn.out_proj.weight": "attn.c_proj.weight", "attn.out_proj.bias": "attn.c_proj.bias",
    "ln2.w": "ln_2.weight", "ln2.b": "ln_2.bias",
    "mlp.in_proj.weight": "mlp.c_fc.weight", "mlp.in_proj.bias": "mlp.c_fc.bias",
    "mlp.out_proj.weight": "mlp.c_proj.weight", "mlp.out_proj.bias": "mlp.c_proj.bias",
}
_TOP = {
    "embed.weight": "transformer.wte.weight", "pos_embed.weight": "transformer.wpe.weight",
    "ln_final.w": "transformer.ln_f.weight", "ln_final.b": "transformer.ln_f.bias",
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
    path = Path(path)
    try:
        meta = _PlainUnpickler(io.BytesIO(path.read_bytes())).load()
    except OSError as e:
        raise CheckpointError(f"cannot read {path}: {e.strerror or e}") from None
    except (pickle.UnpicklingError, EOFError, ValueError) as e:
        raise CheckpointError(f"{path} is not a nanoGPT meta.pkl: {e}") from None
    itos = meta.get("itos") if isinstance(meta, dict) else None
    if not isinstance(itos, dict) or sorted(itos) != list(range(len(itos))):
        raise CheckpointError(f"{path} has no itos {{0: char, 1: char, ...}}; it is not a nanoGPT character meta.pkl")
    vocab = [itos[i] for i in range(len(itos))]
    if not all(isinstance(c, str) and len(c) == 1 for c in vocab) or len(set(vocab)) != len(vocab):
        raise CheckpointError(f"{path}: itos is not a list of distinct single characters")
    return vocab


def write_meta(path: str | os.PathLike, vocab: list[str]) -> None:
    """A nanoGPT meta.pkl for a character vocabulary (what nanoGPT's sample.py reads from data/<dataset>/)."""
    from interp.io import atomic_write

    meta = {"vocab_size": len(vocab), "itos": dict(enumerate(vocab)), "stoi": {c: i for i, c in enumerate(vocab)}}
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(pickle.dumps(meta)))


def _find_meta(path: Path | None, dataset: Any) -> Path | None:
    candidates = []
    if path is not None:
        candidates.append(path.parent / "meta.pkl")
        if isinstance(dataset, str) and dataset:
            candidates.append(path.parent.parent / "data" / dataset / "meta.pkl")
    if isinstance(dataset, str) and dataset:
        candidates.append(Path("data") / dataset / "meta.pkl")
    return next((c for c in candidates if c.is_file()), None)


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
    try:
        return ModelConfig(
            n_layers=model_args["n_layer"], d_model=model_args["n_embd"], n_heads=model_args["n_head"],
            n_ctx=model_args["block_size"], d_vocab=model_args["vocab_size"],
            dropout=model_args.get("dropout", 0.0), bias=model_args.get("bias", True), tie_embeddings=tied,
        )
    except ConfigError as e:
        raise CheckpointError(f"model_args do not make a valid model: {e}") from None


def from_nanogpt(payload: dict[str, Any], path: Path | None = None, meta: str | os.PathLike | None = None):
    """An interp.checkpoint.Checkpoint of a nanoGPT train.py checkpoint (see the module docstring)."""
    import torch

    from interp.checkpoint import Checkpoint

    where = path or "checkpoint"
    weights = payload["model"]
    if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
        raise CheckpointError(f"{where}: 'model' is not a state dict of tensors")
    weights = {k.removeprefix(_PREFIX): v for k, v in weights.items()}
    # nanoGPT without flash attention registers its causal mask as attn.bias: a constant, not a weight.
    weights = {k: v for k, v in weights.items() if not (k.endswith(".attn.bias") and v.dim() == 4)}
    wte, lm_head = weights.get("transformer.wte.weight"), weights.get("lm_head.weight")
    tied = wte is None or lm_head is None or wte is lm_head or torch.equal(wte, lm_head)
    try:
        cfg = config_of(payload["model_args"], tied)
    except CheckpointError as e:
        raise CheckpointError(f"{where}: {e}") from None
    names = {theirs: ours for ours, theirs in name_map(cfg.n_layers).items()}
    unknown = sorted(set(weights) - set(names))
    if unknown:
        raise CheckpointError(f"{where}: nanoGPT weight(s) {unknown[:4]} have no place in a ResidualGPT")
    ours = {names[k]: v for k, v in weights.items()}
    if tied:
        ours.setdefault("unembed.weight", ours.get("embed.weight"))
        ours.setdefault("embed.weight", ours.get("unembed.weight"))
        ours = {k: v for k, v in ours.items() if v is not None}
    config = payload.get("config") if isinstance(payload.get("config"), dict) else {}
    state = {k: v for k, v in payload.items() if k not in ("model", "model_args")}
    state["source"] = "nanogpt"
    meta_path = Path(meta) if meta is not None else _find_meta(path, config.get("dataset"))
    if meta_path is not None:
        vocab = read_meta(meta_path)
        if len(vocab) != cfg.d_vocab:
            raise CheckpointError(f"{meta_path} has {len(vocab)} characters; the model's vocab_size is {cfg.d_vocab}")
        state["vocab"] = vocab
    elif cfg.d_vocab in GPT2_SIZES:
        state["encoding"] = "gpt2"  # nanoGPT's sample.py falls back to GPT-2 BPE when there is no meta.pkl
    return Checkpoint(config=cfg, weights=ours, state=state, path=path)


def refusal(cfg: ModelConfig) -> str | None:
    """Why nanoGPT's GPT cannot express this ResidualGPT, or None."""
    if cfg.residual != "full":
        return f"residual={cfg.residual!r}: nanoGPT's Block always adds both residual paths"
    if cfg.mixer != "attention":
        return f"mixer={cfg.mixer!r}: nanoGPT's Block has causal softmax attention only"
    if cfg.self_bias != 0.0:
        return f"self_bias={cfg.self_bias:g}: nanoGPT's attention adds no bias to the self score"
    if not cfg.tie_embeddings:
        return "tie_embeddings=False: nanoGPT ties lm_head to wte (loading would overwrite one with the other)"
    if cfg.d_mlp != 4 * cfg.d_model:
        return f"d_mlp={cfg.d_mlp}: nanoGPT's MLP is 4 * n_embd = {4 * cfg.d_model} wide"
    return None


def to_nanogpt(source: Any, **extra: Any) -> dict[str, Any]:
    """The checkpoint dict nanoGPT's sample.py loads: {"model_args", "model", "iter_num", "best_val_loss", "config"}.

    source: a ResidualGPT, a Checkpoint or a checkpoint path. extra keys are added
    (e.g. config={"dataset": "shakespeare_char"}, which sample.py reads to find meta.pkl).
    """
    from interp.model import ResidualGPT

    model = source if isinstance(source, ResidualGPT) else ResidualGPT.from_checkpoint(source)
    cfg = model.cfg
    why = refusal(cfg)
    if why:
        raise ConfigError(f"nanoGPT cannot express this model ({why}); only residual='full' attention models export")
    gain = cfg.runtime_gain  # every sublayer output is scaled: fold it into the weights that write it
    names = name_map(cfg.n_layers)
    weights = {}
    for ours, tensor in model.state_dict().items():
        tensor = tensor.detach().cpu().clone()
        if ours.endswith(("attn.out_proj.weight", "attn.out_proj.bias", "mlp.out_proj.weight", "mlp.out_proj.bias")):
            tensor = tensor * gain
        weights[names[ours]] = tensor
    weights["lm_head.weight"] = weights["transformer.wte.weight"]  # tied, as GPT's state_dict holds it
    model_args = dict(n_layer=cfg.n_layers, n_head=cfg.n_heads, n_embd=cfg.d_model, block_size=cfg.n_ctx,
                      bias=cfg.bias, vocab_size=cfg.d_vocab, dropout=cfg.dropout)
    return {"model_args": model_args, "model": weights, "iter_num": 0, "best_val_loss": None, "config": {}, **extra}


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m interp.nanogpt",
               description="Write a ResidualGPT checkpoint as a nanoGPT checkpoint that nanoGPT's sample.py loads.")
    p.add_argument("--ckpt", required=True, type=Path, help="a ResidualGPT checkpoint (interp.save_checkpoint)")
    p.add_argument("--out", required=True, type=Path, help="nanoGPT checkpoint to write (e.g. out-x/ckpt.pt)")
    p.add_argument("--dataset", default=None, help="config['dataset'], where sample.py looks for meta.pkl")
    p.add_argument("--meta-out", type=Path, default=None,
                   help="also write the character vocabulary as nanoGPT's meta.pkl here (data/<dataset>/meta.pkl)")
    return p


def run(args: argparse.Namespace) -> Path:
    from interp.checkpoint import load_checkpoint
    from interp.io import atomic_write

    ckpt = load_checkpoint(args.ckpt)
    why = refusal(ckpt.config)
    if why:
        raise ConfigError(f"{args.ckpt}: nanoGPT cannot express this model ({why})")
    if args.meta_out is not None and ckpt.state.get("vocab") is None:
        raise ConfigError(f"{args.ckpt} has no character vocabulary to write as --meta-out")
    import torch

    step = ckpt.state.get("step", 0)
    extra = {"iter_num": step if isinstance(step, int) else 0,
             "config": {"dataset": args.dataset} if args.dataset else {}}
    payload = to_nanogpt(ckpt, **extra)
    atomic_write(args.out, lambda tmp: torch.save(payload, tmp))
    if args.meta_out is not None:
        write_meta(args.meta_out, ckpt.state["vocab"])
    return args.out


def main(argv: list[str] | None = None) -> int:
    code, out = one_line_errors(lambda: run(parser().parse_args(argv)))
    if code == 0:
        print(f"wrote {out}")
    return code


if __name__ == "__main__":
    sys.exit(main())

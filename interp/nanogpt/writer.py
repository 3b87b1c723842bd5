"""nanoGPT checkpoints out: to_nanogpt (refused by name where nanoGPT cannot express the model) and
`python -m interp.nanogpt`. Reading nanoGPT checkpoints in is interp.files.nanogpt_format, below the checkpoint loader.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from interp.command.cli import DocParser, run_writing_command
from interp.config.model_config import ModelConfig
from interp.errors import ConfigError
from interp.files.nanogpt_format import GPT_CONFIG_FIELDS, meta_bytes, name_map, vocab_digest


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
    from interp.model.gpt import ResidualGPT

    model = source if isinstance(source, ResidualGPT) else ResidualGPT.from_checkpoint(source)
    cfg = model.cfg
    if why := refusal(cfg):
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
    model_args = {theirs: getattr(cfg, ours) for theirs, ours in GPT_CONFIG_FIELDS.items()}
    return {"model_args": model_args, "model": weights, "iter_num": 0, "best_val_loss": None, "config": {}, **extra}


def parser() -> argparse.ArgumentParser:
    p = DocParser(
        prog="python -m interp.nanogpt",
        description="Write a ResidualGPT checkpoint as a nanoGPT checkpoint that nanoGPT's sample.py loads.",
        epilog="example:\n  python -m interp.nanogpt --ckpt runs/routing_test/cpu-quick/full/seed1337/ckpt.pt "
        "--out out-x/ckpt.pt --dataset shakespeare_char --meta-out data/shakespeare_char/meta.pkl\n\n"
        "A character model's vocabulary goes in meta.pkl, where readers look: beside --out (interp.sample) or "
        "data/<dataset>/meta.pkl (nanoGPT's sample.py too).\n\nOnly residual='full' with softmax attention and no "
        "self_bias is nanoGPT's block; any other wiring is refused with its reason.",
    )
    p.add_argument("--ckpt", required=True, type=Path, help="a ResidualGPT checkpoint (interp.save_checkpoint)")
    p.add_argument("--out", required=True, type=Path, help="nanoGPT checkpoint to write (e.g. out-x/ckpt.pt)")
    p.add_argument("--dataset", default=None, help="config['dataset'], where sample.py looks for meta.pkl")
    p.add_argument(
        "--meta-out",
        type=Path,
        default=None,
        help="also write the character vocabulary as nanoGPT's meta.pkl here (data/<dataset>/meta.pkl)",
    )
    return p


def run(args: argparse.Namespace) -> Path:
    from interp.command.cli import refuse_overwriting_inputs
    from interp.files.checkpoint import load_checkpoint
    from interp.files.io import atomic_write

    refuse_overwriting_inputs("--out", args.out, {"--ckpt": args.ckpt})
    if args.meta_out is not None:
        refuse_overwriting_inputs("--meta-out", args.meta_out, {"--ckpt": args.ckpt, "--out": args.out})
    ckpt = load_checkpoint(args.ckpt)
    if why := refusal(ckpt.config):
        raise ConfigError(f"{args.ckpt}: nanoGPT cannot express this model ({why})")
    if args.meta_out is not None and ckpt.state.get("vocab") is None:
        raise ConfigError(f"{args.ckpt} has no character vocabulary to write as --meta-out")
    meta = None if args.meta_out is None else _meta_to_write(args, ckpt.state["vocab"])
    import torch

    step = ckpt.state.get("step", 0)
    config = {"dataset": args.dataset} if args.dataset else {}
    if ckpt.state.get("vocab") is not None:
        config["vocab_sha256"] = vocab_digest(ckpt.state["vocab"])
    payload = to_nanogpt(ckpt, iter_num=step if isinstance(step, int) else 0, config=config)
    if meta is not None:  # first, where nothing else stood: a failed write leaves --out as it was
        atomic_write(args.meta_out, lambda tmp: Path(tmp).write_bytes(meta))
    atomic_write(args.out, lambda tmp: torch.save(payload, tmp))
    if args.meta_out is not None and not args.dataset:
        print(
            f"note: {args.meta_out} is found by interp.sample beside {args.out}; nanoGPT's sample.py looks only at "
            "data/<dataset>/meta.pkl (add --dataset NAME --meta-out data/NAME/meta.pkl for it)",
            file=sys.stderr,
        )
    elif ckpt.state.get("vocab") is not None and args.meta_out is None:  # nanoGPT keeps them in meta.pkl
        print(
            f"note: {args.out} holds no vocabulary; without its meta.pkl, sample.py decodes with GPT-2 BPE and "
            "interp.sample refuses text: add --dataset NAME --meta-out data/NAME/meta.pkl",
            file=sys.stderr,
        )
    return args.out


def _meta_to_write(args: argparse.Namespace, vocab: list[str]) -> bytes | None:
    """--meta-out's bytes, or None where the same file stands there already; refused (before anything is written)
    where no reader would find it, or where another vocabulary stands."""
    where = args.meta_out.resolve()
    found = {args.out.resolve().parent / "meta.pkl"}
    if args.dataset:  # where nanoGPT's sample.py (from here) and interp.sample look for data/<dataset>/meta.pkl
        found |= {(Path("data") / args.dataset / "meta.pkl").resolve()}
        found |= {args.out.resolve().parent.parent / "data" / args.dataset / "meta.pkl"}
    if where not in found:
        need = "" if args.dataset else " (give --dataset NAME for data/NAME/meta.pkl)"
        raise ConfigError(
            f"--meta-out {args.meta_out}: no reader looks there{need}; interp.sample finds meta.pkl beside --out "
            "or at data/<dataset>/meta.pkl, nanoGPT's sample.py at data/<dataset>/meta.pkl from where it runs"
        )
    data = meta_bytes(vocab)
    if args.meta_out.is_dir():
        raise ConfigError(f"--meta-out {args.meta_out} is a folder, not a meta.pkl to write")
    if args.meta_out.is_file():
        if args.meta_out.read_bytes() == data:
            return None
        raise ConfigError(
            f"--meta-out {args.meta_out} holds another vocabulary: never overwritten (another model's text would "
            "decode wrong); move it aside, or write this one beside --out"
        )
    return data  # written before --out (run): where it cannot be, --out is left as it was


def main(argv: list[str] | None = None) -> int:
    return run_writing_command(parser, run, argv)

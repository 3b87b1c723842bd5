"""python -m training: train one configuration into a run directory, or a product of them as ensembles.

    python -m training --preset cpu-quick --residual attn_only --seed 1337 --out runs/demo
    python -m training --preset phase-cell --seeds 1,2,3,4 --residual ffn_only,attn_only   # 8 runs, one ensemble

The run lands in <out>/<preset>/<variant>/seed<seed>/ (training.rundir), named
by the same rule as the experiments' runs ("attn_only + uniform" ->
attn_only_uniform), so a run trained here is reused by an experiment with the
same --out and the other way round. Running the same command again resumes an
interrupted run, and does nothing for a finished one; Ctrl-C exits 130 and
SIGTERM 143 (SIGHUP 129), each with one line and the command that resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from interp.command.cli import DocParser, directory_option, guarded_output, one_line_errors, seed_option, seeds_option
from interp.command.signals import interrupt_line, interrupts, signal_name
from interp.config.model_config import MIXERS, RESIDUALS
from interp.errors import ToolkitError
from training import steps_by
from training.presets import MODEL_FIELDS, PRESETS, TRAIN_FIELDS, check_asked_vocab, parse_overrides, resolve
from training.run_config import cli_labels, variant_name
from training.rundir import RunDir


def _fields_help() -> str:
    lines = ["presets:"]
    for name, p in PRESETS.items():
        m, t = p["model"], resolve(name).train
        shape = f"{m.get('n_layers')}L d{m.get('d_model')} ctx{m.get('n_ctx')}"
        lines.append(
            f"  {name:12s} {shape}, batch {t.batch_size}, {t.max_steps} steps, "
            f"evaluated every {t.eval_interval} from step {t.eval_steps()[0]}"
        )
    lines += ["model fields (--set): " + ", ".join(MODEL_FIELDS), "train fields (--set): " + ", ".join(TRAIN_FIELDS)]
    return "\n".join(lines)


def _residuals(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",")]
    bad = [n for n in names if n not in RESIDUALS]
    if bad or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected distinct names from {', '.join(RESIDUALS)}, got {text!r}")
    return names


def training_parser() -> argparse.ArgumentParser:
    p = DocParser(  # an unknown or malformed option: one `error:` line, exit 2 (--help prints the usage)
        prog="python -m training",
        description="Train a ResidualGPT into a resumable run directory. With --seeds and/or a --residual list, "
        "train every combination; runs of the same shape (depth, width, n_ctx, mixer, every training "
        "field but seed, lr, min_lr, weight_decay) train together as ensembles: one batched step "
        "advances up to --ensemble-size models, and each member writes the same run directory, "
        "checkpoint and logs its solo run would (training/ensemble.py), dropout masks included, and a "
        "record of its stacked steps (final.json's steps_by where a run mixed solo and stacked steps). Runs of "
        "another mixer, DDP or random validation batches train alone.",
        epilog=_fields_help(),
    )
    p.add_argument("--preset", default="cpu-quick", help="named configuration (default: cpu-quick)")
    p.add_argument(
        "--residual",
        type=_residuals,
        help=f"which residual paths to keep: one of {', '.join(RESIDUALS)}, or a comma list (each trains its own run)",
    )
    p.add_argument("--mixer", choices=MIXERS, help="token mixer in the attention slot")
    p.add_argument("--seed", type=seed_option, help="seed for init, data order and dropout, in [0, 2**63)")
    p.add_argument(
        "--seeds",
        type=seeds_option,
        help="a comma list of seeds (each trains its own run); with a --residual list, every pair",
    )
    p.add_argument(
        "--ensemble-size",
        type=int,
        default=16,
        metavar="K",
        help="train up to K same-shape runs of the product as one ensemble: one batched step advances them all, "
        "each still writes its own run directory exactly as alone (default 16; 1: one at a time)",
    )
    p.add_argument(
        "--out", default="runs/train", type=directory_option, help="experiment directory (default: runs/train)"
    )
    p.add_argument(
        "--variant",
        help="variant name (default: from residual/mixer/self_bias, as the experiments "
        "name it, e.g. 'attn_only + uniform')",
    )
    p.add_argument("--data", help="corpus file or prepared directory (default: $RESIDUAL_DATA_DIR, cache, download)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override any field (repeatable)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _logged(run_dir: RunDir) -> dict | None:
    """The run directory's config.json as far as its labels go; a damaged one is the Trainer's to name (None)."""
    try:
        return run_dir.read_config()
    except (ToolkitError, OSError):
        return None


def main(argv: list[str] | None = None) -> int:
    with interrupts():  # SIGTERM is handled like Ctrl-C (interp.command.signals)
        return guarded_output(lambda: _main(argv))


def _main(argv: list[str] | None = None) -> int:
    code, done = one_line_errors(lambda: _run(argv), lambda code, e: _interrupted(code, e, argv))
    if code != 0:
        return code
    trainers, finals = done
    if int(os.environ.get("RANK", "0")) == 0:
        _print_finals(trainers, finals)
    return 0


def _run(argv: list[str] | None) -> tuple[list, list]:
    args = _checked_args(argv)
    trainers = _trainers(args)
    return trainers, _train(trainers, args)


def _interrupted(code: int, e: BaseException, argv: list[str] | None) -> str:
    """The line a signal ends the command with: during training (TrainingInterrupted) the command that resumes."""
    if isinstance(e, ToolkitError):  # Ctrl-C (130) or SIGTERM (143) during training
        command = shlex.join([sys.executable, "-m", "training", *(sys.argv[1:] if argv is None else argv)])
        return f"\n{e}; resume with: {command}"
    if isinstance(e, KeyboardInterrupt):  # before training started: nothing to resume
        return interrupt_line(f"interrupted ({signal_name(code)}) before training started; nothing was written")
    # a library turned the interrupt into another exception (interp.command.signals.fired_code)
    return interrupt_line(
        f"interrupted ({signal_name(code)}); the run resumes from its last checkpoint, if any: rerun the same command"
    )


def _checked_args(argv: list[str] | None) -> argparse.Namespace:
    """The parsed options, with the combinations the parser cannot refuse refused."""
    args = training_parser().parse_args(argv)
    if args.seed is not None and args.seeds is not None:
        raise ToolkitError("give --seed or --seeds, not both")
    if args.ensemble_size < 1:
        raise ToolkitError(f"--ensemble-size must be >= 1, got {args.ensemble_size}")
    if args.variant and len(args.residual or [None]) > 1:
        raise ToolkitError("--variant names one configuration; drop it with a --residual list")
    return args


def _trainers(args: argparse.Namespace) -> list:
    """One Trainer per (residual, seed) of the product, in order, all handed one corpus loaded once (after the
    first configuration resolves, so a bad --set is refused before any data is read)."""
    from training.data import load_corpus

    base = parse_overrides(args.set)
    given = {
        "seed": (args.seeds, "--seeds") if args.seeds is not None else (args.seed, "--seed"),
        "residual": (args.residual, "--residual"),
        "mixer": (args.mixer, "--mixer"),
        "data_path": (args.data, "--data"),
    }
    for key, (value, option) in given.items():
        if key in base and value is not None:  # the option would win without a word
            raise ToolkitError(f"--set {key}=... and {option} both give the {key}; give it with {option} only")
    if args.mixer is not None:
        base["mixer"] = args.mixer
    if args.data:
        base["data_path"] = args.data
    corpus = None
    trainers = []
    for residual in args.residual or [None]:
        for seed in args.seeds or ([args.seed] if args.seed is not None else [None]):
            per_run = {k: v for k, v in (("residual", residual), ("seed", seed)) if v is not None}
            spec = resolve(args.preset, {**base, **per_run})
            variant = args.variant or variant_name(spec.model.to_dict())
            run_dir = RunDir.of(args.out, args.preset, variant, spec.train.seed)
            if corpus is None:
                corpus = load_corpus(spec.train.corpus, spec.train.data_path)
                check_asked_vocab(base, corpus.vocab_size)
            spec = spec.fit_vocab(corpus.vocab_size)  # the data decides the vocabulary
            from training.trainer import Trainer  # transformer_lens is slow to import: only once input is checked

            trainer = Trainer(
                spec.model,
                spec.train,
                run_dir,
                corpus=corpus,
                meta=cli_labels(args.preset, variant, spec.train.seed, _logged(run_dir)),
                progress=not args.no_progress,
            )
            if spec.train.probes:
                from probes import default_callbacks

                trainer.callbacks.extend(default_callbacks(spec.train))
            trainers.append(trainer)
    return trainers


def _train(trainers: list, args: argparse.Namespace) -> list[dict]:
    """Each run's final record: one run alone, a product grouped into ensembles (training.ensemble.train_groups)."""
    if len(trainers) == 1:
        return [trainers[0].run()]
    from training.ensemble import train_groups

    return train_groups(trainers, args.ensemble_size, not args.no_progress)


def _print_finals(trainers: list, finals: list[dict]) -> None:
    if len(trainers) == 1:
        print(f"run: {trainers[0].run_dir.path}")
        print(json.dumps(finals[0], indent=2))
        return
    for trainer, final in zip(trainers, finals, strict=True):
        how = f"ensemble of {final['ensemble']['size']}" if "ensemble" in final else "alone"
        if "steps_by" in final:  # its steps taken by both the solo and the stacked step
            how += f" ({steps_by.text(final['steps_by'])})"
        print(f"run: {trainer.run_dir.path}  final val {final['final_val_loss']:.4f}  ({how})")


if __name__ == "__main__":
    sys.exit(main())

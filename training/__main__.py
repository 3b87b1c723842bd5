"""python -m training: train one configuration into a run directory.

    python -m training --preset cpu-quick --residual attn_only --seed 1337 --out runs/demo

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

from interp.config import MIXERS, RESIDUALS
from interp.errors import ToolkitError, one_line
from interp.signals import exit_code, fired_code, interrupts, signal_name
from training.presets import MODEL_FIELDS, PRESETS, TRAIN_FIELDS, parse_overrides, resolve
from training.rundir import RunDir, variant_name


def _fields_help() -> str:
    lines = ["presets:"]
    for name, p in PRESETS.items():
        m, t = p["model"], resolve(name).train
        shape = f"{m.get('n_layers')}L d{m.get('d_model')} ctx{m.get('n_ctx')}"
        first = t.eval_steps()[0]
        lines.append(f"  {name:12s} {shape}, batch {t.batch_size}, {t.max_steps} steps, "
                     f"evaluated every {t.eval_interval} from step {first}")
    lines.append("model fields (--set): " + ", ".join(MODEL_FIELDS))
    lines.append("train fields (--set): " + ", ".join(TRAIN_FIELDS))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training",
        description="Train a ResidualGPT into a resumable run directory.",
        epilog=_fields_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default="cpu-quick", help="named configuration (default: cpu-quick)")
    p.add_argument("--residual", choices=RESIDUALS, help="which residual paths to keep")
    p.add_argument("--mixer", choices=MIXERS, help="token mixer in the attention slot")
    p.add_argument("--seed", type=int, help="seed for init, data order and dropout")
    p.add_argument("--out", default="runs/train", help="experiment directory (default: runs/train)")
    p.add_argument("--variant", help="variant name (default: from residual/mixer/self_bias, as the experiments "
                   "name it, e.g. 'attn_only + uniform')")
    p.add_argument("--data", help="corpus file or prepared directory (default: $RESIDUAL_DATA_DIR, cache, download)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override any field (repeatable)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    with interrupts():  # SIGTERM is handled like Ctrl-C (interp.signals)
        return _main(argv)


def _main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        overrides = parse_overrides(args.set)
        for key in ("residual", "mixer", "seed"):
            if getattr(args, key) is not None:
                overrides[key] = getattr(args, key)
        if args.data:
            overrides["data_path"] = args.data
        spec = resolve(args.preset, overrides)
        variant = args.variant or variant_name(spec.model.to_dict())
        run_dir = RunDir.of(args.out, args.preset, variant, spec.train.seed)
        from training.data import load_corpus

        corpus = load_corpus(spec.train.corpus, spec.train.data_path)
        spec = spec.fit_vocab(corpus.vocab_size)  # the data decides the vocabulary
        from training.trainer import Trainer  # transformer_lens is slow to import: only once input is checked

        trainer = Trainer(spec.model, spec.train, run_dir, corpus=corpus,
                          meta={"preset": args.preset, "variant": variant}, progress=not args.no_progress)
        if spec.train.probes:
            from probes import default_callbacks

            trainer.callbacks.extend(default_callbacks(spec.train))
        final = trainer.run()
    except ToolkitError as e:
        code = getattr(e, "exit_code", 2)
        if code != 2:  # Ctrl-C (130) or SIGTERM (143) during training
            command = shlex.join([sys.executable, "-m", "training", *(sys.argv[1:] if argv is None else argv)])
            print(f"\n{e}; resume with: {command}", file=sys.stderr)
            return code
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # before training started: nothing to resume
        code = exit_code(e)
        print(f"\ninterrupted ({signal_name(code)}) before training started; nothing was written", file=sys.stderr)
        return code
    except OSError as e:  # an I/O error no layer below turned into a ToolkitError
        where = f" {e.filename}" if e.filename else ""
        print(f"error: cannot read or write{where}: {e.strerror or e}", file=sys.stderr)
        return 2
    except Exception:  # a library turned the interrupt into another exception (interp.signals.fired_code)
        code = fired_code()
        if code is None:
            raise
        print(f"\ninterrupted ({signal_name(code)}); the run resumes from its last checkpoint, if any: "
              f"rerun the same command", file=sys.stderr)
        return code
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"run: {run_dir.path}")
        print(json.dumps(final, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

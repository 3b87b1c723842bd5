"""python -m experiments: the experiments there are, one line each (each is python -m experiments.<name>)."""

import sys

from experiments.shared.options import COMMANDS
from interp.command.cli import guarded_output  # a closed pipe or a full stdout: one line, not a traceback


def main(argv: list[str]) -> int:
    if argv and argv != ["--help"] and argv != ["-h"]:
        print("error: python -m experiments takes no options; run python -m experiments.<name> --help", file=sys.stderr)
        return 2
    import importlib

    print("experiments (python -m experiments.<name> --help explains each):")
    for name in COMMANDS:
        doc = (importlib.import_module(f"experiments.{name}.run").__doc__ or "").strip().splitlines()
        first = doc[0].split(":", 1)[-1].strip() if doc else ""
        print(f"  {name:<16} {first}")
    return 0


raise SystemExit(guarded_output(lambda: main(sys.argv[1:])))

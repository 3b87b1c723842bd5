"""What every command line shares: argparse errors and library errors as one `error:` line, exit 2.

    from interp.cli import Parser, one_line_errors

    def main(argv=None) -> int:
        code, out = one_line_errors(lambda: run(Parser(prog="python -m x").parse_args(argv)))
        ...

Parser raises UsageError (a ToolkitError) instead of printing argparse's usage
block, so one_line_errors prints `error: <message> (see --help)` and returns 2
(docs/DESIGN.md contract 7).
"""

from __future__ import annotations

import argparse

from interp.errors import ToolkitError, one_line_errors


class UsageError(ToolkitError):
    """A command line argparse refused."""


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose errors are one line, no usage block (--help still prints it)."""

    def error(self, message: str):
        raise UsageError(f"{message} (see --help)")


def directory_option(text: str) -> str:
    """An argparse type for an output directory: an empty or blank value (`--out ''`, which would mean the
    working directory) is refused, not taken."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty directory name; give a path (use . for this directory)")
    return text


__all__ = ["Parser", "UsageError", "directory_option", "one_line_errors"]


def refuse_overwriting_inputs(option: str, out, inputs: dict) -> None:
    """An output path that is one of the command's input files (--out the same as --ckpt) would destroy the
    input it was made from: refused with one line before any work. inputs: option -> path (None: not given)."""
    import os

    for name, path in inputs.items():
        if path is None:
            continue
        both = os.path.exists(path) and os.path.exists(out)
        if os.path.samefile(path, out) if both else os.path.abspath(path) == os.path.abspath(out):
            raise UsageError(f"{option} {out} is the {name} file it is made from; choose another {option}")

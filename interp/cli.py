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


def run_writing_command(parser, run, argv: list[str] | None) -> int:
    """main() of a command whose run(args) writes one file and returns its path: `wrote PATH` and 0, or one
    `error:` line and 2 (an interrupt: its own status). parser: what builds the command's ArgumentParser."""
    code, out = one_line_errors(lambda: run(parser().parse_args(argv)))
    if code == 0:
        print(f"wrote {out}")
    return code


EXIT_PIPE = 141  # 128 + SIGPIPE: what a Unix tool's status is when its reader went away


def guarded_output(run) -> int:
    """Run a command's main and flush its output: a reader that went away (`| head`) ends it quietly with
    EXIT_PIPE; a full disk or an encoding that cannot print ends it with one `error:` line on stderr and 2.
    The command's files are whole either way: every file is written atomically before anything is printed."""
    import os
    import sys

    try:
        code = run()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        try:  # the interpreter flushes stdout again at exit: point it at /dev/null so that is quiet too
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return EXIT_PIPE
    except UnicodeEncodeError as e:
        bad = e.object[e.start : e.end] if isinstance(e.object, str) else ""
        print(
            f"error: standard output's encoding ({sys.stdout.encoding}) cannot print {bad!r}; set "
            "PYTHONIOENCODING=utf-8 (the command's files are written)",
            file=sys.stderr,
        )
        return 2
    except OSError as e:
        if e.filename is not None:
            raise
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        print(
            f"error: cannot write to standard output: {e.strerror or e} (the command's files are written)",
            file=sys.stderr,
        )
        return 2


__all__ = [
    "EXIT_PIPE",
    "Parser",
    "UsageError",
    "directory_option",
    "guarded_output",
    "one_line_errors",
    "run_writing_command",
]


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

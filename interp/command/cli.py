"""What every command line shares: argparse errors and library errors as one `error:` line, exit 2.

    from interp.command.cli import Parser, one_line_errors

    def main(argv=None) -> int:
        code, out = one_line_errors(lambda: run(Parser(prog="python -m x").parse_args(argv)))
        ...

Parser raises UsageError (a ToolkitError) instead of printing argparse's usage
block, so one_line_errors prints `error: <message> (see --help)` and returns 2
(docs/DESIGN.md contract 7).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from interp.errors import ToolkitError, io_error_line, one_line


class UsageError(ToolkitError):
    """A command line argparse refused."""


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose errors are one line, no usage block (--help still prints it)."""

    def error(self, message: str):
        raise UsageError(f"{message} (see --help)")


class DocParser(Parser):
    """A Parser whose --help prints the description as written: a module docstring's tables and lists."""

    def __init__(self, **kwargs: Any):
        super().__init__(formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)


def directory_option(text: str) -> str:
    """An argparse type for an output directory: an empty or blank value (`--out ''`, which would mean the
    working directory) is refused, not taken."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty directory name; give a path (use . for this directory)")
    for place in (Path(text), *Path(text).parents):  # the deepest part that exists must be a directory
        if place.exists() or place.is_symlink():
            if not place.is_dir():
                raise argparse.ArgumentTypeError(f"{place} is there and is not a directory")
            break
    return text


def default_option(p: Any, name: str, default: Any, help: str, **kwargs: Any) -> None:
    """Option `name` of the default's type (int, float or str), its --help ending "(default X)"."""
    p.add_argument(name, type=type(default), default=default, help=f"{help} (default {default})", **kwargs)


def checkpoint_options(p: argparse.ArgumentParser) -> None:
    """--ckpt and --meta, as every command that reads one checkpoint takes them."""
    p.add_argument("--ckpt", required=True, type=Path, help="checkpoint (interp.save_checkpoint or nanoGPT train.py)")
    p.add_argument(
        "--meta",
        type=Path,
        default=None,
        help="a nanoGPT checkpoint's meta.pkl (default: found as nanoGPT's sample.py finds it)",
    )


def seed_option(text: str) -> int:
    """An argparse type for a seed: an integer in [0, 2**63), what torch's generators take (training's range)."""
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not 0 <= seed < 2**63:
        raise argparse.ArgumentTypeError(f"a seed must be in [0, 2**63), got {text!r:.40}")
    return seed


def seed_list(text: str, option: str = "--seeds") -> list[int]:
    """Comma-separated seeds, distinct, each in [0, 2**63); one ToolkitError naming `option` otherwise."""
    items = [s.strip() for s in text.split(",")]
    if "" in items:
        raise ToolkitError(f"{option} {text!r} has an empty entry; give comma-separated integers, e.g. 1337,1338")
    try:
        seeds = [int(s) for s in items]
    except ValueError:
        raise ToolkitError(f"{option} expects comma-separated integers, got {text!r}") from None
    if len(set(seeds)) != len(seeds) or min(seeds) < 0 or max(seeds) >= 2**63:
        raise ToolkitError(f"{option} needs distinct integers in [0, 2**63), got {text!r}")
    return seeds


def seeds_option(text: str) -> list[int]:
    """seed_list as an argparse type (python -m training --seeds)."""
    try:
        return seed_list(text)
    except ToolkitError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--seeds ")) from None


def one_line_errors(
    run: Callable[[], Any], interrupted: str | Callable[[int, BaseException], str] = "nothing was written"
) -> tuple[int, Any]:
    """(0, run()) or, for a ToolkitError or OSError, (2, None) after one `error:` line on stderr.

    Ctrl-C, SIGTERM and SIGHUP (interp.command.signals) end it too: one line (`interrupted (SIGNAL);
    <interrupted>`), exit 130, 143 or 129. A command that says more passes a function instead: given the status and
    the exception, it returns the whole line; it is also asked for a ToolkitError carrying an exit_code other than 2
    (training's TrainingInterrupted, an experiment's SweepIncomplete), whose status is that exit_code.
    """
    from interp.command.signals import interrupt_code, interrupt_line, interrupts, signal_name

    try:
        with interrupts():
            return 0, run()
    except ToolkitError as e:
        code = getattr(e, "exit_code", 2)
        if code == 2 or not callable(interrupted):
            print(f"error: {one_line(e)}", file=sys.stderr)
            return 2, None
        print(interrupted(code, e), file=sys.stderr)
        return code, None
    except OSError as e:  # an I/O error no layer below turned into a ToolkitError
        print(io_error_line(e), file=sys.stderr)
        return 2, None
    except (KeyboardInterrupt, Exception) as e:  # a library may turn the interrupt into another exception
        code = interrupt_code(e)
        if code is None:  # no signal fired: a bug, shown as one
            raise
        if callable(interrupted):
            print(interrupted(code, e), file=sys.stderr)
        else:
            print(interrupt_line(f"interrupted ({signal_name(code)}); {interrupted}"), file=sys.stderr)
        return code, None


def command_main(run: Callable[[], int], interrupted: str | Callable[[int, BaseException], str]) -> int:
    """main() of a command that returns its own status: run()'s, or one_line_errors' for an error or a signal."""
    code, rc = one_line_errors(run, interrupted)
    return rc if code == 0 else code


def run_writing_command(parser, run, argv: list[str] | None, show: Callable[[Any], str] = "wrote {}".format) -> int:
    """main() of a command whose run(args) writes one file and returns its path: `wrote PATH` and 0, or one
    `error:` line and 2 (an interrupt: its own status). parser: what builds the command's ArgumentParser.
    show: the line printed of run's result instead (interp.sample: the samples it drew)."""

    def body() -> int:
        code, out = one_line_errors(lambda: run(parser().parse_args(argv)))
        if code == 0:
            print(show(out))
        return code

    return guarded_output(body)


EXIT_PIPE = 141  # 128 + SIGPIPE: what a Unix tool's status is when its reader went away


class _Stdout:
    """sys.stdout that survives its reader: the first write or flush that fails (a closed pipe, a full disk) is
    kept, the descriptor is pointed at /dev/null, and the command goes on to finish its files."""

    def __init__(self, real):
        self.real, self.error = real, None

    def _guard(self, op, *args):
        if self.error is None:
            try:
                return op(*args)
            except OSError as e:
                self.error = e
                _silence_stdout()
        return len(args[0]) if args else None

    def write(self, text: str):
        return self._guard(self.real.write, text)

    def flush(self):
        return self._guard(self.real.flush)

    def __getattr__(self, name: str):
        return getattr(self.real, name)


def _silence_stdout() -> None:
    """Point descriptor 1 at /dev/null, so the interpreter's flush at exit has nothing left to fail on."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno() if sys.__stdout__ else 1)
    except (OSError, ValueError):
        pass


def guarded_output(run) -> int:
    """Run a command (its main, --help included) with its output guarded: a reader that went away (`| head`)
    ends it quietly with EXIT_PIPE; a full disk or an encoding that cannot print ends it with one `error:` line
    on stderr and 2. Either way the command finishes its work first, so its files are whole."""
    proxy = _Stdout(sys.stdout)
    sys.stdout = proxy
    try:
        try:
            code = run()
        except SystemExit as e:  # argparse's --help, printed into the proxy
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        proxy.flush()
    except UnicodeEncodeError as e:
        bad = e.object[e.start : e.end] if isinstance(e.object, str) else ""
        print(
            f"error: standard output's encoding ({sys.stdout.encoding}) cannot print {bad!r}; set "
            "PYTHONIOENCODING=utf-8 (the command's files are written)",
            file=sys.stderr,
        )
        return 2
    finally:
        sys.stdout = proxy.real
    if isinstance(proxy.error, BrokenPipeError):
        return EXIT_PIPE
    if proxy.error is not None:
        why = proxy.error.strerror or proxy.error
        print(f"error: cannot write to standard output: {why} (the command's files are written)", file=sys.stderr)
        return 2
    return code


__all__ = [
    "EXIT_PIPE",
    "Parser",
    "UsageError",
    "directory_option",
    "guarded_output",
    "one_line_errors",
    "run_writing_command",
    "seed_option",
]


def refuse_overwriting_inputs(option: str, out, inputs: dict) -> None:
    """An output path that is one of the command's input files (--out the same as --ckpt) would destroy the
    input it was made from: refused with one line before any work. inputs: option -> path (None: not given)."""
    for name, path in inputs.items():
        if path is None:
            continue
        both = os.path.exists(path) and os.path.exists(out)
        if os.path.samefile(path, out) if both else os.path.abspath(path) == os.path.abspath(out):
            raise UsageError(f"{option} {out} is the {name} file it is made from; choose another {option}")

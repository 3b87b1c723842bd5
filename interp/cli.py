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


__all__ = ["Parser", "UsageError", "one_line_errors"]

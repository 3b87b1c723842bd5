"""The toolkit's error hierarchy: every bad input raises a ToolkitError subclass.

Command-line entry points catch ToolkitError and print one `error:` line.
"""

import sys
from collections.abc import Callable
from typing import Any


class ToolkitError(Exception):
    """Base class for every error the toolkit raises on bad input."""


class ConfigError(ToolkitError, ValueError):
    """A configuration field has a value that is not allowed."""


class CheckpointError(ToolkitError):
    """A checkpoint file is missing, corrupt, unsafe or of an unknown schema."""


class DataError(ToolkitError):
    """A corpus is missing, corrupt or too short for the requested context."""


def one_line_errors(run: Callable[[], Any]) -> tuple[int, Any]:
    """(0, run()) or, for a ToolkitError or OSError, (2, None) after one `error:` line on stderr.

    Ctrl-C and SIGTERM (interp.signals) end it too: one line, exit 130 or 143.
    """
    from interp.signals import exit_code, interrupts, signal_name

    try:
        with interrupts():
            return 0, run()
    except (ToolkitError, OSError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2, None
    except KeyboardInterrupt as e:
        code = exit_code(e)
        print(f"\ninterrupted ({signal_name(code)}); nothing was written", file=sys.stderr)
        return code, None


def one_line(e: BaseException) -> str:
    """An error's message on one line (torch's and numpy's messages span several)."""
    return " ".join(str(e).split("\n")).strip() or type(e).__name__

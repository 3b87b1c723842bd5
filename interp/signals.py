"""SIGTERM handled like Ctrl-C by every command line (docs/DESIGN.md contract 7).

Schedulers, `timeout` and `kill` send SIGTERM; left alone, Python dies at once
with exit 143, no message, and whatever `finally` blocks would have cleaned up
(a lock's holder line, a temporary file) is left behind. Inside
`interrupts()` SIGTERM raises `Terminated`, a KeyboardInterrupt, so the one
path that handles Ctrl-C handles both: files stay whole, the lock is released,
one line says where the run resumes. The exit status tells them apart:

    Ctrl-C (SIGINT)   130      SIGTERM   143      (128 + the signal's number, as a shell reports it)

A second signal while the first is being handled is ignored, so the cleanup
finishes instead of ending in a traceback; SIGKILL still stops anything.
"""

from __future__ import annotations

import contextlib
import signal
import threading

EXIT_INTERRUPT = 128 + signal.SIGINT  # 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process was, as Ctrl-C raises KeyboardInterrupt."""


def exit_code(interrupt: BaseException) -> int:
    """130 for Ctrl-C, 143 for SIGTERM (an exception that carries its own exit_code keeps it)."""
    code = getattr(interrupt, "exit_code", None)
    if isinstance(code, int):
        return code
    return EXIT_TERMINATED if isinstance(interrupt, Terminated) else EXIT_INTERRUPT


def signal_name(code: int) -> str:
    return "SIGTERM" if code == EXIT_TERMINATED else "Ctrl-C"


@contextlib.contextmanager
def interrupts():
    """SIGINT raises KeyboardInterrupt and SIGTERM raises Terminated, once; the previous handlers come back after.

    Only the main thread can set handlers; elsewhere (a thread, some embedders) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum, frame):
        for s in previous:  # the first signal is being handled: let its cleanup finish
            signal.signal(s, signal.SIG_IGN)
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    try:
        for s in previous:
            signal.signal(s, handler)
    except (ValueError, OSError):  # not allowed here: leave the process's handlers as they are
        yield
        return
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)

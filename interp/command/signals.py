"""SIGTERM handled like Ctrl-C by every command line (docs/DESIGN.md contract 7).

Schedulers, `timeout` and `kill` send SIGTERM; left alone, Python dies at once
with exit 143, no message, and whatever `finally` blocks would have cleaned up
(a lock's holder line, a temporary file) is left behind. Inside
`interrupts()` SIGTERM raises `Terminated`, a KeyboardInterrupt, so the one
path that handles Ctrl-C handles both: files stay whole, the lock is released,
one line says where the run resumes. The exit status tells them apart:

    Ctrl-C (SIGINT)   130      SIGTERM   143      SIGHUP   129
    (128 + the signal's number, as a shell reports it)

SIGHUP (a closed terminal or ssh session) is handled the same way where the
process has not been told to ignore it (nohup), so no lock holder line is left.
Once a signal has fired the process is ending: every later one, even after
the `with` block has closed and before the process exits, is ignored, so the
cleanup and the closing line finish instead of ending in a traceback (two
Ctrl-C 50 ms apart); SIGKILL still stops anything. Two different signals that land while the
process is inside one long C call are handled in CPython's order (lowest number first), so Ctrl-C
then wins over a SIGTERM sent just before it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

EXIT_INTERRUPT = 128 + signal.SIGINT  # 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143
_HANGUP = getattr(signal, "SIGHUP", None)  # not on Windows
EXIT_HANGUP = 128 + (_HANGUP or 1)  # 129
HANDLED = tuple(s for s in (signal.SIGINT, signal.SIGTERM, _HANGUP) if s is not None)
_fired: list[int] = []  # the signal that is ending this process, once one has
_left: dict = {}  # the handlers from before, while a fired signal leaves them ignored
_depth: list[int] = []  # non-empty inside interrupts()
_guarded: dict = {}  # the handlers guard_startup() replaced: interrupts() hands these back, not the guard
COMMANDS = ("experiments", "training", "interp", "benchmarks")  # packages whose modules run with -m


class _AsKeyboardInterrupt(type):
    """Terminated's class compares equal to KeyboardInterrupt: subprocess.Popen.__exit__ tests
    `exc_type == KeyboardInterrupt` to leave a child after a short wait, and waits for it to exit otherwise, so a
    SIGTERM inside a child's call (sbatch through submitit) waited out the child where Ctrl-C does not."""

    def __eq__(cls, other: object) -> bool:
        return other is KeyboardInterrupt or type.__eq__(cls, other) is True

    __hash__ = type.__hash__


class Terminated(KeyboardInterrupt, metaclass=_AsKeyboardInterrupt):
    """SIGTERM (or SIGHUP), raised where the process was, as Ctrl-C raises KeyboardInterrupt."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__()
        self.signum = signum


def exit_code(interrupt: BaseException) -> int:
    """130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP (an exception carrying its own exit_code keeps it)."""
    code = getattr(interrupt, "exit_code", None)
    if isinstance(code, int):
        return code
    if isinstance(interrupt, Terminated):
        return 128 + int(interrupt.signum)
    return EXIT_INTERRUPT


def fired_code() -> int | None:
    """128 + the signal that is ending this process, or None while none has fired.

    A signal raises its interrupt wherever the process is; a library that catches it there (transformers'
    lazy importer turns it into ModuleNotFoundError) hands on another exception. The command lines ask this
    before treating an unexpected exception as a bug, so such an exception is still reported as the
    interrupt it was, with its exit status and no traceback.
    """
    return 128 + int(_fired[0]) if _fired else None


def interrupt_code(e: BaseException) -> int | None:
    """The exit status of a command that e ends because a signal fired: exit_code(e) for an interrupt, and for
    another exception (a library may turn the interrupt into one) the fired signal's; None when none fired (a bug:
    raise it)."""
    return exit_code(e) if isinstance(e, KeyboardInterrupt) else fired_code()


def interrupt_line(text: str) -> str:
    """The interrupt's one line; on a terminal it starts on a fresh line (a progress bar may hold the cursor),
    elsewhere (a log, a pipe) it is exactly one line."""
    return ("\n" if sys.stderr.isatty() else "") + text


def signal_name(code: int) -> str:
    return {EXIT_TERMINATED: "SIGTERM", EXIT_HANGUP: "SIGHUP"}.get(code, "Ctrl-C")


def restore() -> None:
    """Put back the handlers from before a fired signal (for a process that goes on: a test runner)."""
    for s, h in _left.items():
        signal.signal(s, h if h is not None else signal.SIG_DFL)
    _left.clear()
    _fired.clear()


def _importing(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _startup(signum, frame):
    code = 128 + int(signum)
    os.write(2, f"interrupted ({signal_name(code)}) while starting up; nothing was run\n".encode())
    os._exit(code)  # only modules were importing: nothing to clean up, no traceback to print


def guard_startup() -> None:
    """Under `python -m <a module of ours>`, a signal while modules still import (torch: most of a second,
    before a command's interrupts() is in place) ends the process with one line and its exit status
    instead of a traceback. Each package's __init__ calls it; elsewhere (a notebook, pytest, another
    program's -m) it does nothing. interrupts() replaces it and hands back the handlers from before; a package
    first imported inside interrupts() (a command's lazy import) leaves its handler in place: left there, the
    guard would end the process at once long after the import, past the command's cleanup (a child process
    left running). interrupts()'s handler looks after imports itself."""
    if _depth:
        return
    argv = getattr(sys, "orig_argv", [])
    try:
        module = argv[argv.index("-m") + 1]
    except (ValueError, IndexError):
        return
    if module.split(".")[0] not in COMMANDS or threading.current_thread() is not threading.main_thread():
        return
    for s in HANDLED:
        h = signal.getsignal(s)
        if h is _startup or (h is signal.SIG_IGN and s != signal.SIGINT):  # nohup's SIGHUP stays ignored
            continue
        _guarded[s] = h
        signal.signal(s, _startup)


@contextlib.contextmanager
def interrupts():
    """SIGINT raises KeyboardInterrupt, SIGTERM and SIGHUP raise Terminated, once; afterwards the previous
    handlers come back, unless a signal fired (then the process is ending and further ones stay ignored;
    restore() puts them back for a process that goes on).

    Only the main thread can set handlers; elsewhere (a thread, some embedders) this does nothing. A signal
    the process already ignores (SIGHUP under nohup) stays ignored. Nested uses share the outermost one.
    """
    if threading.current_thread() is not threading.main_thread() or _depth:
        yield
        return
    restore()  # a signal that fired in an earlier use in this process left its handlers ignored
    previous = {s: _guarded.get(s) if signal.getsignal(s) is _startup else signal.getsignal(s) for s in HANDLED}

    def handler(signum, frame):
        if _fired:  # a second signal while the first one's cleanup runs: let it finish
            return
        _fired.append(signum)  # from here every signal lands above; setting SIG_IGN instead would make
        # CPython print "Signal 15 ignored due to race condition" for one already on its way
        if _importing(frame):  # a C extension's initialisation (torch._C, numpy's) can swallow the exception
            code = 128 + int(signum)  # raised there, and the command would go on as if no signal came
            os.write(2, f"interrupted ({signal_name(code)}) while modules were importing\n".encode())
            os._exit(code)
        raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)

    try:
        for s, h in previous.items():
            if h is not signal.SIG_IGN or s == signal.SIGINT:
                signal.signal(s, handler)
    except (ValueError, OSError):  # not allowed here: leave the process's handlers as they are
        yield
        return
    _depth.append(1)
    try:
        yield
    finally:
        _depth.clear()
        if _fired:  # the process is ending: a late signal must not cut its last line short, nor kill it while
            _left.update(previous)  # Python shuts down (which puts the default back for a Python handler)
            for s in previous:
                signal.signal(s, signal.SIG_IGN)
        else:
            for s, h in previous.items():
                signal.signal(s, h if h is not None else signal.SIG_DFL)

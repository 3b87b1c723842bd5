"""Every file a command reads is checked before anything uses it: one module per file kind.

    file kind                                         checked by
    ckpt.pt (residual-gpt/1)                          interp.files.checks.checkpoint_file.check_checkpoint_payload
    nanoGPT ckpt.pt, meta.pkl                         interp.files.checks.nanogpt_file.check_nanogpt_payload,
                                                      interp.files.checks.nanogpt_file.check_meta_pkl
    save_hooked / save_bridge files                   interp.tl.hooked.hooked_file, interp.tl.saved_file
    weights against their config (every schema)       interp.files.checks.checkpoint_file.check_weights
    a checkpoint's vocabulary (vocab / encoding)      interp.files.checks.checkpoint_file.check_vocab
    config.json, final.json, a run dir's file kinds  training.checks.rundir_files
    a prepared BPE corpus (meta.json, *.bin)          training.checks.corpus_files

The Python API's arguments (tokens, hook names and returns, batches, q / k) are checked the same way, at the
call: interp.model.api; a cache against the model it is read with: interp.reading.cache_origin.

A checker takes what was read (plain data: dicts, lists, strings, numbers, tensors) and raises
the file kind's error (CheckpointError, DataFileError, DataError) naming the file, the field
and what is wrong; it allocates nothing the file asks for (the sizes a config would allocate
pass interp.config.memory's estimate first). The helpers here are what every checker shares:
`Bad` (a field's problem, turned into the file's error by `checked`), the type and range
tests, a nesting limit, and `regular_file` (a FIFO or a device is never opened for reading).
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from interp.errors import ToolkitError

MAX_DEPTH = 32  # the deepest plain data the project writes (an optimizer's state) is about 5 levels
MAX_ITEMS = 10_000_000  # containers and scalars walked in one file's plain data, tensors aside


class Bad(Exception):
    """A field's problem: `checked` turns it into the file kind's error, '<file>: <field> <problem>'."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field} {problem}" if field else problem)
        self.field = field


@contextlib.contextmanager
def checked(path: Any, error: type[ToolkitError], advice: str = "") -> Iterator[None]:
    """Run checks; a Bad becomes error('<path>: <field> <problem>[; advice]') ('<path> <problem>' for the
    file as a whole)."""
    try:
        yield
    except Bad as e:
        raise error(f"{path}{': ' if e.field else ' '}{e}{'; ' + advice if advice else ''}") from None


def regular_file(path: str | os.PathLike, error: type[ToolkitError], what: str = "file") -> Path:
    """path, when it is a regular file (or a link to one); a FIFO, device, socket or directory is refused by
    name before anything opens it (opening a FIFO waits for a writer; reading /dev/zero never ends)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error(f"no {what} at {path}") from None
    except OSError as e:
        raise error(f"cannot read {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(mode):
        raise error(f"{path} is {kind_of(mode)}, not a regular file; only regular files are read as a {what}")
    return path


def kind_of(mode: int) -> str:
    """What a stat mode names, in words: "a directory", "a FIFO", "a device", "a socket", "a regular file"."""
    tests = [(stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO")]
    tests += [(stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")]
    return next((what for test, what in tests if test(mode)), "not a regular file")


def not_regular(path: str | os.PathLike) -> str | None:
    """None when nothing is at path or it is a regular file (or a link to one); else what it is, in words
    (a link to nothing is "a dangling link"). Never opens it."""
    try:
        return None if stat.S_ISREG(mode := os.stat(path).st_mode) else kind_of(mode)
    except FileNotFoundError:
        return "a dangling link" if os.path.islink(path) else None
    except OSError as e:
        return f"unreadable ({e.strerror or e})"


def walk_limits(obj: Any, field: str = "the data", depth: int = MAX_DEPTH, items: int = MAX_ITEMS) -> None:
    """Bad when plain data nests deeper than `depth` or holds more than `items` values (no recursion here:
    a file nested 100,000 levels deep is refused, not a RecursionError)."""
    stack = [(obj, 0)]
    seen = 0
    while stack:
        value, level = stack.pop()
        seen += 1
        if seen > items:
            raise Bad(field, f"holds more than {items:,} values")
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        if level >= depth:
            raise Bad(field, f"is nested more than {depth} levels deep")
        stack.extend((child, level + 1) for child in children)


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def want_dict(d: Any, field: str) -> dict:
    if not isinstance(d, dict):
        raise Bad(field, f"is not a dict (a {type(d).__name__})")
    return d


def want_object(d: Any) -> dict:
    """A JSON file's top level: an object (string keys, as JSON's always are)."""
    if not isinstance(d, dict):
        raise Bad("", f"is damaged (not a JSON object); it holds a {type(d).__name__}")
    return d


def want_str_keys(d: dict, field: str) -> dict:
    bad = [k for k in d if not isinstance(k, str)]
    if bad:
        raise Bad(field, f"has a key that is not a string ({bad[0]!r})")
    return d


def want_int(x: Any, field: str, lo: int | None = None, hi: int | None = None) -> int:
    if not is_int(x):
        raise Bad(field, f"is not an integer ({x!r:.60})")
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        span = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise Bad(field, f"is {x}, outside {span}")
    return x


def want_number(x: Any, field: str) -> float:
    if not is_number(x):
        raise Bad(field, f"is not a number ({x!r:.60})")
    if not math.isfinite(x):
        raise Bad(field, f"is {x}, not a finite number")
    return x


def want_str(x: Any, field: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(x, str):
        raise Bad(field, f"is not a string ({x!r:.60})")
    if choices is not None and x not in choices:
        raise Bad(field, f"is {x!r:.60}, not one of {list(choices)}")
    return x


__all__ = [
    "MAX_DEPTH",
    "Bad",
    "checked",
    "is_int",
    "is_number",
    "kind_of",
    "not_regular",
    "regular_file",
    "walk_limits",
    "want_dict",
    "want_int",
    "want_number",
    "want_object",
    "want_str",
    "want_str_keys",
]

"""Durable file I/O for run directories and results (docs/DESIGN.md contract 3).

Every file is written to a temporary name beside its target, fsynced, renamed
over the target, and the directory fsynced, so a kill leaves either the old or
the new file, never half of one. Temporary names start with "." and end with
".tmp" so a restarted run can remove what a killed writer left behind.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from interp.errors import ToolkitError

TMP_SUFFIX = ".tmp"
KILL_ENV = "RESIDUAL_KILL_AT"
_kill_counts: dict[str, int] = {}


def kill_point(phase: str) -> None:
    """Test hook: with RESIDUAL_KILL_AT="phase:n" this process SIGKILLs itself the n-th time it reaches phase.

    Phases: "step" (after an optimizer step, training.loop) and the name of a file that
    atomic_write is about to rename into place ("ckpt.pt", "metrics.jsonl", "final.json", ...),
    i.e. its temporary file is complete but not yet renamed. tests/test_crash.py kills there.
    """
    spec = os.environ.get(KILL_ENV)
    if not spec or spec.rpartition(":")[0] != phase:
        return
    _kill_counts[phase] = _kill_counts.get(phase, 0) + 1
    if _kill_counts[phase] == int(spec.rpartition(":")[2]):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


class DataFileError(ToolkitError):
    """A results or log file that cannot be read or written (damaged, missing, no permission, disk full)."""


def fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load_plain(path: str | os.PathLike, map_location: Any = "cpu") -> Any:
    """torch.load(path, weights_only=True): plain data only, for every reader of a torch file (checkpoints,
    saved exports). torch's UserWarning about a plain pickle's protocol (a file torch.save did not write) is
    silenced: the caller's one error line says what the file is."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
        return torch.load(path, map_location=map_location, weights_only=True)


def atomic_write(path: str | os.PathLike, write: Callable[[str], Any]) -> None:
    """Call write(tmp_path) on a temporary name beside path, then rename over it. A path that is there and is
    not a regular file (a device such as /dev/full, a FIFO, a directory) is refused: renaming over it would
    replace it."""
    path = Path(path)
    if os.path.lexists(path) and not os.path.isfile(path):
        tests = [(path.is_dir, "a directory"), (path.is_fifo, "a FIFO")]
        tests += [(path.is_char_device, "a device"), (path.is_block_device, "a device")]
        kind = next((what for test, what in tests if test()), "not a regular file")
        raise DataFileError(f"cannot write {path}: it is {kind}; give a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    except OSError as e:
        raise DataFileError(f"cannot write {path}: {e.strerror or e}") from None
    os.close(fd)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are meant to be shared
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        kill_point(path.name)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise DataFileError(f"cannot write {path}: {e.strerror or e}") from None
        raise


def remove_stale_temps(directory: Path, names: tuple[str, ...] = ()) -> list[Path]:
    """Delete temporary files a killed writer left in directory; return what was removed.

    names: only the temporaries of these files (atomic_write's ".<name>.*.tmp"); default: every one.
    """
    removed = []
    patterns = [f".{n}.*{TMP_SUFFIX}" for n in names] or [f".*{TMP_SUFFIX}"]
    if directory.is_dir():
        for tmp in (t for p in patterns for t in directory.glob(p)):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def replace_non_finite(obj: Any, replace: Callable[[float], Any]) -> Any:
    """obj with each non-finite float as replace(it), through dicts (keys as str), lists and tuples (as lists)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return replace(obj)
    if isinstance(obj, dict):
        return {str(k): replace_non_finite(v, replace) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [replace_non_finite(v, replace) for v in obj]
    return obj


def json_safe(obj: Any) -> Any:
    """Non-finite floats become strings ("inf", "-inf", "nan") so the file is strict JSON."""
    return replace_non_finite(obj, lambda x: "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))


class NonFiniteError(DataFileError, ValueError):
    """A NaN or infinity about to be written as a number: strict JSON has none, and a result must be finite."""


def dumps(obj: Any, path: str | Path, **kwargs: Any) -> str:
    """json.dumps that refuses NaN and infinities (allow_nan=False): every file the project writes is strict JSON.

    A caller with a legitimately infinite value (a config's self_bias) encodes it first (json_safe, to_dict).
    """
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:
        where = ", ".join(non_finite_keys(obj)[:5]) or "a value"
        raise NonFiniteError(f"refusing to write {path}: {where} is not a finite number") from None


def non_finite_keys(obj: Any, prefix: str = "") -> list[str]:
    """Where in a JSON-like object the non-finite floats are ("final_val_loss", "runs[2].best_val_loss")."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return [prefix or "the value"]
    if isinstance(obj, dict):
        return [k for key, v in obj.items() for k in non_finite_keys(v, f"{prefix}.{key}" if prefix else str(key))]
    if isinstance(obj, (list, tuple)):
        return [k for i, v in enumerate(obj) for k in non_finite_keys(v, f"{prefix}[{i}]")]
    return []


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: a number json reads as inf, which no writer here ever writes
        raise ValueError(f"{text[:40]} is past a float's range")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # json keeps the last of two equal keys: one reader would see another value
        names = [k for k, _ in pairs]
        twice = next(k for i, k in enumerate(names) if k in names[:i])
        raise ValueError(f"key {twice[:40]!r} appears twice in one object")
    return out


def loads(text: str) -> Any:
    """json.loads that refuses what no writer here writes: the NaN / Infinity extensions, numbers past a float's
    range (1e999), a key twice in one object; as every reader of the project's files does.

    JSON nested deeper than Python's recursion allows is a ValueError too, like any other damage."""
    try:
        return json.loads(
            text, parse_constant=_refuse_constant, parse_float=_finite_float, object_pairs_hook=_unique_keys
        )
    except RecursionError:
        raise ValueError("nested too deeply") from None


def read_regular_text(path: Path) -> str:
    """A regular file's text; anything else (a FIFO, a device, a directory) is an OSError naming what it is,
    found without waiting on it (opened non-blocking, checked with fstat before a byte is read)."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
            raise OSError(0, f"it is {kind}, not a regular file", str(path))
        return f.read().decode()


def write_json(path: str | Path, obj: Any) -> None:
    text = dumps(obj, path, indent=2) + "\n"  # refused before the temporary file exists
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))


# The largest JSON document the toolkit writes is an experiment's results file (a few MB); a bigger one is not
# ours, and parsing it would take memory many times its size before any check could look at it.
MAX_JSON_BYTES = 256 * 2**20


def read_json(path: str | Path) -> Any:
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise DataFileError(
                f"{path} is {size / 2**20:.0f} MiB, past the {MAX_JSON_BYTES // 2**20} MiB a JSON file of this "
                "toolkit can be; move it aside to recover"
            )
        return loads(read_regular_text(path))
    except FileNotFoundError:
        raise DataFileError(f"{path} does not exist") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, or a NaN / Infinity constant
        raise DataFileError(f"{path} is damaged (not valid JSON: {e}); move it aside to recover") from None
    except OSError as e:
        raise DataFileError(f"cannot read {path}: {e.strerror or e}") from None


def read_jsonl(path: str | Path, torn_tail_ok: bool = False, required: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every record of a JSON-lines log; a damaged line is an error naming the file and line.

    required: keys every record must hold (a record without one is damaged too).

    torn_tail_ok: a last line without its newline is what a kill mid-append leaves; when
    True it is dropped (the caller is about to rewrite the file from a checkpoint).
    """
    path = Path(path)
    if not path.exists():
        return []
    try:
        text = read_regular_text(path)
    except OSError as e:
        raise DataFileError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise DataFileError(f"cannot read {path}: {e}") from None
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = loads(line)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            missing = [k for k in required if k not in record]
            if missing:
                raise ValueError(f"no {', '.join(map(repr, missing))}")
        except ValueError as e:
            if torn_tail_ok and number == len(lines) and not text.endswith("\n"):
                break
            raise DataFileError(
                f"{path}, line {number} is damaged ({e}); nothing was changed: "
                "repair or remove that line, or move the file aside"
            ) from None
        records.append(record)
    return records


def write_jsonl(path: str | Path, records: list[dict[str, Any]]) -> None:
    text = "".join(dumps(r, path) + "\n" for r in records)
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    line = dumps(record, path) + "\n"
    try:
        with open(path, "a") as f:
            f.write(line)
    except OSError as e:
        raise DataFileError(f"cannot append to {path}: {e.strerror or e}") from None

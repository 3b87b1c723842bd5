"""What `python -m` may run: a library module named there says so in one line (exit 2) before it runs.

Each top package's __init__ (interp, training, probes, experiments, benchmarks) calls refuse_library_module
while `python -m` is still locating the module it names, so a module with no main block (`if __name__ == ...`)
(a package without __main__.py) is refused, with the package's commands, instead of exiting 0 having done nothing
(docs/DESIGN.md contract 7). Elsewhere (imports, a notebook, pytest, another package's -m) it does nothing.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_RUNS = re.compile(r"^if __name__ == ['\"]__main__['\"]:", re.MULTILINE)  # a main block, either quote
_WITH_VALUE = ("-W", "-X")  # python's options that take the next argument as their value


def requested_module() -> str | None:
    """The NAME of `python [options] -m NAME` while Python is still locating it (sys.argv[0] is "-m"), else None."""
    if sys.argv[:1] != ["-m"]:
        return None
    args = getattr(sys, "orig_argv", [])[1:]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m":
            return args[i + 1] if i + 1 < len(args) else None
        if arg.startswith("-m"):
            return arg[2:]
        if not arg.startswith("-") or arg == "-c":
            return None
        i += 2 if arg in _WITH_VALUE else 1
    return None


def _runs(path: Path) -> bool:
    """Whether module `path` (a file, or a package folder) does something when run."""
    if path.is_dir():
        return (path / "__main__.py").is_file()
    return bool(_RUNS.search(path.read_text(encoding="utf-8", errors="replace")))


def commands_under(package: Path) -> list[str]:
    """The dotted names `python -m` runs under `package` (its parent holds it): packages with a __main__.py and
    modules that run themselves."""
    names = []
    for file in sorted(package.rglob("*.py")):
        if "__pycache__" in file.parts:
            continue
        if file.name == "__main__.py" or (file.name != "__init__.py" and _runs(file)):
            module = file.parent if file.name == "__main__.py" else file.with_suffix("")
            names.append(".".join(module.relative_to(package.parent).parts))
    # a module its runnable package stands for (experiments.floor.run beside experiments.floor) is not repeated
    return [n for n in names if n.rpartition(".")[0] not in names or "." not in n.rpartition(".")[0]]


def refuse_library_module(package_init: str) -> None:
    """Called by the package whose __init__.py is `package_init`: exit 2 with one line where `python -m` names
    one of its modules that does not run."""
    name = requested_module()
    package = Path(package_init).resolve().parent
    if not name or name.split(".")[0] != package.name:
        return
    path = package.parent.joinpath(*name.split("."))
    target = path if path.is_dir() else path.with_suffix(".py")
    if not target.exists() or _runs(target):  # a name that does not exist: Python's own error says so
        return
    commands = ", ".join(commands_under(package)) or "none"
    print(f"error: {name} is a library module, not a command; python -m runs: {commands}", file=sys.stderr)
    raise SystemExit(2)

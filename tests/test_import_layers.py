"""docs/DESIGN.md's layers, read from the source: no import runs back up, no import circle - at the top and in every
folder - counting imports inside functions and those made through importlib with a name fixed in the source."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYER = {"interp": 0, "probes": 1, "training": 2, "experiments": 3, "benchmarks": 4}
GROUND = (
    "interp.errors",
    "interp.command.signals",
    "interp.config.model_config",
    "interp.config.registry",
)  # interp's bottom: light, no torch
# importlib calls whose module name is made as the program runs: a lookup by name, never a fixed dependency.
# Each is named here with why; a new one joins only with a reason.
LOOKUPS_BY_NAME = {
    "interp": "the package hands out its own modules by attribute (interp.reading.decompose without importing it)",
    "experiments.__main__": "python -m experiments lists each experiment's first docstring line",
    "experiments.cluster.launch": "a cluster job re-plans the experiment its command line names",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _constants(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level names bound to a string, or to a dict, tuple or list of strings: what import_module may be
    handed by name (`_BUILTIN = "interp.model.mixers"`, `_LAZY[name]`)."""
    found: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            value = node.value
            items = value.values if isinstance(value, ast.Dict) else getattr(value, "elts", [value])
            strings = [v.value for v in items if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            if strings and len(strings) == len(items):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found.update({t.id: strings for t in targets if isinstance(t, ast.Name)})
    return found


def _dynamic_targets(arg: ast.expr, consts: dict[str, list[str]], name: str, known: set[str]) -> list[str] | None:
    """The modules an import_module / __import__ argument names, or None where the name is made at run time."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.Name) and arg.id in consts:
        return consts[arg.id]
    if isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name) and arg.value.id in consts:
        return consts[arg.value.id]
    if isinstance(arg, ast.JoinedStr):  # f"{__name__}.run" is fixed; f"experiments.{name}.run" is not
        parts = []
        for v in arg.values:
            if isinstance(v, ast.Constant):
                parts.append(re.escape(str(v.value)))
            elif isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name) and v.value.id == "__name__":
                parts.append(re.escape(name))
            else:
                return None
        return [m for m in known if re.fullmatch("".join(parts), m)]
    return None


def _is_import_call(node: ast.Call) -> bool:
    if not node.args:
        return False
    func = node.func
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id in ("import_module", "__import__")
    )


def imports_of(source: str, name: str, known: set[str], is_package: bool = False) -> tuple[set[str], list[int]]:
    """(every project module this source imports - at the top, inside a function, or through importlib with a
    name fixed in the source -, the lines of importlib calls whose name is made at run time)."""
    tree = ast.parse(source)
    package = name if is_package else name.rpartition(".")[0]
    consts = _constants(tree)
    found: set[str] = set()
    by_name: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and _is_import_call(node):
            dynamic = _dynamic_targets(node.args[0], consts, name, known)
            if dynamic is None:
                by_name.append(node.lineno)
                continue
            targets = dynamic
        else:
            continue
        found |= {t for t in targets if t in known and t != name}
    return found, by_name


def _files() -> dict[str, Path]:
    return {_module_name(p): p for top in LAYER for p in (REPO / top).rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    files = _files()
    known = set(files)
    return {n: imports_of(p.read_text(), n, known, p.name == "__init__.py")[0] for n, p in files.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in list(graph):
        if v not in index:
            visit(v)
    return groups


def room_circles(graph: dict[str, set[str]]) -> dict[str, list[list[str]]]:
    """For every package, its rooms (each module or sub-package directly in it) that import each other round,
    through any module inside them: a room stands above all it imports, or an import runs back up a floor."""
    packages = {".".join(m.split(".")[:i]) for m in graph for i in range(1, m.count(".") + 1)}
    found = {}
    for package in sorted(packages):
        prefix = package + "."

        def room(m: str) -> str | None:
            return prefix + m[len(prefix) :].split(".")[0] if m.startswith(prefix) else None

        rooms: dict[str, set[str]] = {}
        for a, deps in graph.items():
            for b in deps:
                ra, rb = room(a), room(b)
                if ra and rb and ra != rb:
                    rooms.setdefault(ra, set()).add(rb)
        if circles := _cycles(rooms):
            found[package] = circles
    return found


def test_no_import_runs_back_up_a_layer():
    graph = import_graph()
    upward = sorted(
        (a, b) for a, deps in graph.items() for b in deps if LAYER[b.split(".")[0]] > LAYER[a.split(".")[0]]
    )
    assert upward == []


def test_no_import_circles():
    assert _cycles(import_graph()) == []


def test_no_room_imports_another_round_in_any_folder():
    """interp's wings (checks, tl, nanogpt) and its modules, tl's hooked and the rest, each experiment and shared:
    rooms side by side import one way only."""
    assert room_circles(import_graph()) == {}


def test_the_ground_imports_only_the_ground():
    graph = import_graph()
    assert {m: sorted(graph[m] - set(GROUND)) for m in GROUND} == {m: [] for m in GROUND}


def test_every_import_by_a_name_made_at_run_time_is_a_known_lookup():
    files = _files()
    known = set(files)
    by_name = {n for n, p in files.items() if imports_of(p.read_text(), n, known, p.name == "__init__.py")[1]}
    assert by_name == set(LOOKUPS_BY_NAME)


def test_the_checker_sees_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_checker_follows_importlib_and_function_level_imports():
    """The circle the layer test missed before it followed importlib (registry -> mixers -> model -> registry)."""
    known = {"p", "p.registry", "p.mixers", "p.model", "p.rooms", "p.rooms.a", "p.other"}
    sources = {
        "p.registry": '_BUILTIN = "p.mixers"\ndef spec():\n    importlib.import_module(_BUILTIN)\n',
        "p.mixers": "from p.model import MLP\n",
        "p.model": "def build():\n    from p.registry import spec\n",
        "p.rooms.a": "def f(name):\n    importlib.import_module(f'p.{name}')\n    import_module(f'{__name__}.b')\n",
    }
    graph = {n: imports_of(s, n, known)[0] for n, s in sources.items()}
    assert _cycles(graph) == [["p.mixers", "p.model", "p.registry"]]
    assert imports_of(sources["p.rooms.a"], "p.rooms.a", known) == (set(), [2])  # made at run time: a lookup
    assert room_circles({"p.a.x": {"p.b"}, "p.b": {"p.a.y"}, "p.a.y": set()}) == {"p": [["p.a", "p.b"]]}


def private_imports(source: str, known: set[str]) -> list[str]:
    """`from a.b import _c` (at any depth) where a.b is one of ours: another module's private name."""
    return [
        f"{node.module}.{alias.name}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module in known
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]


def test_no_module_imports_another_modules_private_name():
    """A name one module lends another is public (no leading underscore): what a file keeps to itself is safe
    to change without reading the rest of the house."""
    files = _files()
    found = {n: hits for n, p in files.items() if (hits := private_imports(p.read_text(), set(files)))}
    assert not found, found
    assert private_imports("def f():\n    from p.q import _r, s\n", {"p.q"}) == ["p.q._r"]


def _importable(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent package is gone too
        return False


def test_the_moved_table_points_at_modules_that_import():
    """docs/moved.md: every module on the right imports; none on the left does (no shim serves an old path),
    but for the two old modules that are packages now."""
    import importlib

    rows = re.findall(r"^\| `([\w.]+)` \| `([\w.]+)` \|$", (REPO / "docs" / "moved.md").read_text(), re.M)
    assert len(rows) > 60
    for old, new in rows:
        importlib.import_module(new)
        assert _importable(old) == (old in {"interp.config", "interp.model"}), old

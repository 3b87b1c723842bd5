"""The layer rules of docs/DESIGN.md, read from the source: no import runs back up, no import circle."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYER = {"interp": 0, "probes": 1, "training": 2, "experiments": 3, "benchmarks": 3}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Every project module this file imports, at the top or inside a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in known and t != name}
    return found


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for top in LAYER for p in (REPO / top).rglob("*.py")}
    known = set(files)
    return {name: _imports(path, name, known) for name, path in files.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
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

    for v in graph:
        if v not in index:
            visit(v)
    return groups


def test_no_import_runs_back_up_a_layer():
    graph = import_graph()
    upward = sorted(
        (a, b) for a, deps in graph.items() for b in deps if LAYER[b.split(".")[0]] > LAYER[a.split(".")[0]]
    )
    assert upward == []


def test_no_import_circles():
    assert _cycles(import_graph()) == []


def test_the_checker_sees_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_interp_hands_out_its_modules_without_importing_them_first():
    import importlib

    import interp

    assert interp.interventions is importlib.import_module("interp.interventions")
    assert interp.ResidualGPT is importlib.import_module("interp.model").ResidualGPT


def test_no_module_is_over_500_lines():
    """docs/DESIGN.md: one readable idea per module; a module past 500 lines is split where its pieces have names."""
    long = {
        str(p.relative_to(REPO)): n
        for top in LAYER
        for p in (REPO / top).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 500
    }
    assert not long, long


MAX_FUNCTION_LINES = 80
# Written before the rule was checked (issue 50); each is split when next changed, and none may join the list.
LONG_FUNCTIONS = {
    "training/__main__.py:_main",
    "experiments/floor/run.py:analyse",
    "experiments/escape_time/survival.py:fit_law",
    "experiments/routing_test/report.py:sections",
    "experiments/interventions/run.py:analyse",
    "experiments/phase_diagram/run.py:analyse",
}


def test_no_function_is_over_80_lines():
    """A function past 80 lines (its def to its last line) is split into pieces whose names say what each does."""
    long = {
        f"{p.relative_to(REPO)}:{node.name}": n
        for top in LAYER
        for p in (REPO / top).rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES
    }
    assert not {name: n for name, n in long.items() if name not in LONG_FUNCTIONS}, long


# A package's parts by role: each experiment package has its entry point, run, report and rules.
ROLE_NAMES = {"__init__.py", "__main__.py", "run.py", "report.py", "rules.py"}


def test_no_two_modules_share_a_name():
    """Issue 34: a module's name says what it holds, once in the project (a checker of checkpoints is
    checkpoint_file.py, not a second checkpoint.py); only the per-package role names repeat."""
    seen: dict[str, list[str]] = {}
    for top in LAYER:
        for p in (REPO / top).rglob("*.py"):
            if p.name not in ROLE_NAMES:
                seen.setdefault(p.name, []).append(str(p.relative_to(REPO)))
    assert not {name: paths for name, paths in seen.items() if len(paths) > 1}


def _protocol_names() -> set[str]:
    """Names every experiment or command defines on purpose: the frame's Experiment hooks, and a command's
    main / parser / run (interp.cli.run_writing_command takes the last two)."""
    import dataclasses
    import typing

    from experiments.shared.frame import Experiment

    hints = typing.get_type_hints(Experiment)
    hooks = {f.name for f in dataclasses.fields(Experiment) if "Callable" in str(hints[f.name])}
    return hooks | {"main", "parser", "run"}


def test_no_two_public_functions_share_a_name():
    """Issue 34: a public function or class name means one thing in the project; only the hooks a frame or
    a command calls by name repeat (each experiment's plan, each command's main)."""
    protocol = _protocol_names()
    assert {"plan", "analyse", "table", "preface"} <= protocol
    seen: dict[str, list[str]] = {}
    for top in LAYER:
        for p in (REPO / top).rglob("*.py"):
            for node in ast.parse(p.read_text()).body:
                if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_"):
                    seen.setdefault(node.name, []).append(str(p.relative_to(REPO)))
    twice = {name: paths for name, paths in seen.items() if len(paths) > 1 and name not in protocol}
    assert not twice

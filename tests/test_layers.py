"""The shape rules of docs/DESIGN.md, read from the source: module and function sizes, one meaning per name.

The import layers (no import runs back up, no circle) are tests/test_import_layers.py's.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYER = ("interp", "probes", "training", "experiments", "benchmarks")  # the packages these rules read


def test_interp_hands_out_its_modules_without_importing_them_first():
    import importlib

    import interp

    assert interp.sample is importlib.import_module("interp.sample")  # a command: at the top in any layout
    assert interp.ResidualGPT is importlib.import_module("interp.model.gpt").ResidualGPT


def _first_line(path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.splitlines()[0] if doc else ""


def test_no_module_is_over_500_lines_unless_it_says_it_holds_one_idea():
    """docs/DESIGN.md: one readable idea per module. Past 500 lines a module is split where its pieces have names,
    unless its first docstring line says it holds one idea; then it may run to 600 (and no further)."""
    long = {
        str(p.relative_to(REPO)): n
        for top in LAYER
        for p in (REPO / top).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 600 or (n > 500 and "one idea" not in _first_line(p))
    }
    assert not long, long


MAX_FUNCTION_LINES = 80


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
    assert not long, long


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
    main / parser / run (interp.command.cli.run_writing_command takes the last two)."""
    import dataclasses
    import typing

    from experiments.runner.frame import Experiment

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

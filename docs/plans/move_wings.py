#!/usr/bin/env python3
"""Issue 57 step 2: interp/ in wings - the moves, the import rewrite and the new map, in one go.

Run from the repository root (a checkout whose interp/ nobody is editing):

    python docs/plans/move_wings.py            # moves with git mv, rewrites, ruff --fix / format what it touched
    python docs/plans/move_wings.py --check    # only says what it would move and whether every source is there

Plan and reasons: docs/plans/wings.md. What it does, in order:
  1. git mv every module of MOVES to its wing (a file git does not track yet is renamed as it is), and writes each
     new wing's __init__.py (its docstring only: nothing imported, so `import interp.config.model_config` stays light);
  2. carves one_line_errors out of interp/errors.py into interp/command/cli.py (it prints an interrupt's line, so
     errors.py, the ground, would import signals; the command wing holds both);
  3. rewrites every text file git knows (code, tests, docs, README, Makefile, pyproject; not docs/results/data):
     dotted names (interp.decompose -> interp.reading.decompose), paths (interp/checks/api.py -> interp/model/api.py),
     `from interp import plots` (-> from interp.figures import plots), and the carved name's imports;
  4. rebuilds docs/DESIGN.md's interp/ map from its own entries, wing by wing (tl/ kept as it stands);
  5. ruff check --fix (imports: order, unused) and ruff format on every Python file it changed.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path.cwd()

# old module -> new module. A package maps every module under it unless a longer entry says otherwise.
WINGS = {
    "command": ["cli", "signals"],
    "config": ["registry", "memory"],  # and config.py itself, as config/model_config.py (below)
    "files": ["io", "checkpoint", "nanogpt_format", "gpt2", "tokenizers"],
    "model": ["sublayers", "mixers", "activation_cache", "dropout", "next_token", "vocab"],
    "reading": ["stream_layout", "decompose", "interventions", "scores", "interop", "sae", "levels"],
    "figures": ["plots", "plot_page"],
}
MOVES = {f"interp.{m}": f"interp.{wing}.{m}" for wing, mods in WINGS.items() for m in mods}
MOVES.update(
    {
        "interp.config": "interp.config.model_config",  # config.py becomes the config wing; ModelConfig's module
        "interp.model": "interp.model.gpt",  # model.py becomes the model wing; ResidualGPT's module is gpt.py
        "interp.checks.api": "interp.model.api",  # the Python API's boundary: the model's, not a file's
        "interp.checks.cache_origin": "interp.reading.cache_origin",  # a cache against its model: reading
        "interp.checks": "interp.files.checks",  # the file checks (checkpoint_file, nanogpt_file) and helpers
    }
)
PACKAGES = {"interp.checks"}  # moved as a folder (after the modules that leave it)
NAME_MOVES = {("interp.errors", "one_line_errors"): "interp.command.cli"}
STAY = ("errors", "sample", "plot_attention", "tl", "nanogpt")  # what stays at interp/'s top, beside __init__.py

WING_DOCS = {
    "command": "What every command line shares: the parser and one-line errors (cli.py),\nsignals as interrupts "
    "(signals.py).",
    "config": "A model's configuration, before torch: ModelConfig (model_config.py), the mixer registry its mixer "
    "names\ncome from (registry.py), and what a config takes in memory (memory.py). Nothing here imports torch.",
    "files": "What is written and read: durable file I/O (io.py), checkpoints (checkpoint.py) and nanoGPT's "
    "(nanogpt_format.py),\nGPT-2's files (gpt2.py), tokenizers (tokenizers.py), and every file kind checked before "
    "use (checks/).",
    "model": "The model: ResidualGPT (gpt.py), its sublayers and mixers, its activation cache, its dropout streams, "
    "the next\ntoken (next_token.py), the Python API's boundary checks (api.py) and a checkpoint's vocabulary "
    "(vocab.py).",
    "reading": "Reading the model: the residual stream's layout, exact decompositions, interventions, attention "
    "scores,\na cache against its model, reference levels, nnsight / circuitsvis and sparse autoencoders.",
    "figures": "Plotly figures of the toolkit's measurements (plots.py)\nand the self-contained page they are saved "
    "in (plot_page.py).",
}
WING_HEADS = {  # the DESIGN map's line for each wing (its files follow, two spaces in)
    "command": "the plumbing of every command",
    "config": "a model's configuration, before torch (light: no torch)",
    "files": "what is written and read, checked before use",
    "model": "the model",
    "reading": "reading the model",
    "figures": "plotly figures and the page they are saved in",
}
RENAMED = {"model.py": "gpt.py", "config.py": "model_config.py"}  # in the map: the module's new file name
TEXT_SUFFIXES = {".py", ".md", ".toml", ".cfg", ".ini", ".yaml", ".yml", ".txt"}
SKIP = ("docs/results/data/",)


def run(*cmd: str, check: bool = True) -> str:
    return subprocess.run(cmd, check=check, capture_output=True, text=True, cwd=ROOT).stdout


def module_path(module: str) -> Path:
    """interp.checks -> interp/checks (a folder); interp.config -> interp/config.py."""
    base = ROOT / Path(*module.split("."))
    return base if base.is_dir() else base.with_suffix(".py")


def new_path(old: str, new: str) -> Path:
    return Path(*new.split(".")) if old in PACKAGES else Path(*new.split(".")).with_suffix(".py")


# ----- 1. moves --------------------------------------------------------------------------------------------


def file_moves() -> list[tuple[Path, Path]]:
    """(old, new) relative paths, the modules leaving a package before the package."""
    moves = [(module_path(o).relative_to(ROOT), new_path(o, n)) for o, n in MOVES.items() if o not in PACKAGES]
    moves += [(module_path(o).relative_to(ROOT), new_path(o, n)) for o, n in MOVES.items() if o in PACKAGES]
    return moves


def move(old: Path, new: Path) -> None:
    (ROOT / new.parent).mkdir(parents=True, exist_ok=True)
    if run("git", "ls-files", str(old)).strip():
        run("git", "mv", str(old), str(new))
    else:  # not tracked yet (someone's new module): renamed as it is, and left untracked
        (ROOT / old).rename(ROOT / new)
        print(f"  {old} is not tracked: renamed, not git mv'd")


def write_wings() -> None:
    for wing, doc in WING_DOCS.items():
        path = ROOT / "interp" / wing / "__init__.py"
        path.write_text(f'"""{doc}\n"""\n')
        run("git", "add", str(path.relative_to(ROOT)))


# ----- 2. the carve ----------------------------------------------------------------------------------------


def carve(name: str, source: Path, dest: Path, dest_module: str, source_module: str) -> None:
    """Move the top-level function `name` from source to dest (before the first function that calls it, else at
    the end), with the imports it needs: source's own top-level imports it uses, and source's names it uses."""
    text = source.read_text()
    tree = ast.parse(text)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = text.splitlines(keepends=True)
    start = (node.decorator_list[0].lineno if node.decorator_list else node.lineno) - 1
    block = "".join(lines[start : node.end_lineno])
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.value.id for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
    }
    needed = []
    for top in tree.body:
        if isinstance(top, ast.Import) and any((a.asname or a.name) in used for a in top.names):
            needed.append(ast.get_source_segment(text, top))
        elif isinstance(top, ast.ImportFrom) and top.module != "__future__":
            names = [a for a in top.names if (a.asname or a.name) in used]
            if names:
                needed.append(f"from {top.module} import {', '.join(a.name for a in names)}")
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name != name} | {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }
    own = sorted(used & defined)
    if own:
        needed.append(f"from {source_module} import {', '.join(own)}")
    before, after = "".join(lines[:start]).rstrip("\n"), "".join(lines[node.end_lineno :]).lstrip("\n")
    source.write_text(before + "\n\n\n" + after if after else before + "\n")

    dest_text = dest.read_text()
    dest_tree = ast.parse(dest_text)
    callers = [n for n in dest_tree.body if isinstance(n, ast.FunctionDef) and name in ast.unparse(n)]
    dest_lines = dest_text.splitlines(keepends=True)
    at = (callers[0].lineno - 1) if callers else len(dest_lines)
    dest_lines.insert(at, block + "\n\n")
    imports_end = max(n.end_lineno for n in dest_tree.body if isinstance(n, ast.Import | ast.ImportFrom))
    dest_lines.insert(imports_end, "".join(f"{imp}\n" for imp in needed))
    dest.write_text("".join(dest_lines))
    print(f"  carved {name}: {source.relative_to(ROOT)} -> {dest.relative_to(ROOT)} ({dest_module})")


# ----- 3. the rewrite --------------------------------------------------------------------------------------


def _alternation(keys: list[str]) -> str:
    return "|".join(re.escape(k) for k in sorted(keys, key=len, reverse=True))


DOTTED = re.compile(rf"(?<![\w.])({_alternation(list(MOVES))})(?!\w)")
PATHS = {}
for _old, _new in MOVES.items():
    _o, _n = _old.replace(".", "/"), _new.replace(".", "/")
    if _old in PACKAGES:
        PATHS[_o] = _n
    else:
        PATHS[_o + ".py"] = _n + ".py"
SLASHED = re.compile(rf"(?<![\w/])({_alternation(list(PATHS))})(?!\w)")


def rewrite_names(text: str) -> str:
    text = DOTTED.sub(lambda m: MOVES[m.group(1)], text)
    return SLASHED.sub(lambda m: PATHS[m.group(1)], text)


def _statement(indent: str, module: str, names: list[tuple[str, str | None]]) -> str:
    parts = [n if a is None or a == n else f"{n} as {a}" for n, a in names]
    return f"{indent}from {module} import {', '.join(parts)}\n"


def rewrite_imports(text: str, module: str) -> str:
    """`from interp import <moved module>` and the carved names' imports, statement by statement."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level:
            continue
        keep, out = [], []
        for a in node.names:
            moved = f"{node.module}.{a.name}"
            if node.module == "interp" and moved in MOVES:
                parent, _, leaf = MOVES[moved].rpartition(".")
                out.append(_statement("", parent, [(leaf, a.asname or a.name)]))
            elif (node.module, a.name) in NAME_MOVES:
                target = NAME_MOVES[(node.module, a.name)]
                if target != module:  # in the module that now defines it, no import at all
                    out.append(_statement("", target, [(a.name, a.asname)]))
            else:
                keep.append((a.name, a.asname))
        if not out and len(keep) == len(node.names):
            continue
        indent = re.match(r"\s*", lines[node.lineno - 1]).group(0)
        new = (_statement(indent, node.module, keep) if keep else "") + "".join(indent + s for s in out)
        edits.append((node.lineno - 1, node.end_lineno, new))
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = [new]
    return "".join(lines)


def text_files() -> list[Path]:
    listed = run("git", "ls-files", "-co", "--exclude-standard").splitlines()
    return [
        ROOT / p
        for p in listed
        if (Path(p).suffix in TEXT_SUFFIXES or Path(p).name == "Makefile")
        and not p.startswith(SKIP)
        and (ROOT / p).is_file()
    ]


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def rewrite_all() -> list[Path]:
    changed = []
    for path in text_files():
        text = path.read_text()
        new = rewrite_names(text)
        if path.suffix == ".py":
            new = rewrite_imports(new, module_of(path))
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


# ----- 4. the map ------------------------------------------------------------------------------------------

ENTRY = re.compile(r"^( {6}| {8})([\w.]+\.py|[\w]+/)(\s|$)")


def _entries(block: list[str], indent: int) -> dict[str, list[str]]:
    """name -> its lines (the entry's line and its continuation lines) at one indentation."""
    out: dict[str, list[str]] = {}
    current = None
    for line in block:
        m = ENTRY.match(line)
        if m and len(m.group(1)) == indent:
            current = m.group(2)
            out[current] = [line]
        elif current is not None and (line.startswith(" " * (indent + 2)) or not line.strip()):
            out[current].append(line)
        else:
            current = None
    return out


def _renamed(line: str, was: str, now: str) -> str:
    m = re.search(rf"{re.escape(was)}( +)", line)
    if m is None:
        return line
    pad = " " * max(1, len(was) + len(m.group(1)) - len(now))
    return line[: m.start()] + now + pad + line[m.end() :]


def _realign(lines: list[str], indent: int) -> list[str]:
    """An entry at `indent`: its name padded to 15 columns (two spaces past a longer one), its continuation lines
    at indent + 15, as the map writes every entry."""
    name, _, desc = lines[0].strip().partition(" ")
    head = " " * indent + (name.ljust(15) if len(name) < 15 else name + "  ") + desc.strip() + "\n"
    rest = [(" " * (indent + 15) + line.strip() + "\n") if line.strip() else line for line in lines[1:]]
    return [head, *rest]


def _shift(lines: list[str], by: int) -> list[str]:
    return [(" " * by + line) if line.strip() else line for line in lines]


def rebuild_map(design: Path) -> None:
    lines = design.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("    interp/ "))
    end = next(i for i, line in enumerate(lines) if line.startswith("    probes/ "))
    section = lines[start + 1 : end]
    top = _entries(section, 6)
    checks = _entries(top.get("checks/", [])[1:], 8)
    for entry in ("errors.py", "cli.py"):  # one_line_errors moved with the carve
        if entry in top:
            top[entry] = [
                line.replace("; one_line_errors, io_error_line", "; io_error_line").replace(
                    "what every command line shares: Parser (one-line usage errors), run_writing_command",
                    "Parser (one-line usage errors), run_writing_command, one_line_errors",
                )
                for line in top[entry]
            ]
    placed = {"checks/"}
    out = [lines[start].replace("the model and what reads it" + " " * 10, "the model and what reads it, in wings")]
    out += [
        "      __init__.py    the face: ResidualGPT, ModelConfig, load_checkpoint, to_hooked_transformer, load_tl, ...\n",  # noqa: E501
        "                     by name, each imported on first use; it hands the registry the built-in mixers' loader\n",
    ]
    for name in ("errors.py", "sample.py", "plot_attention.py"):
        out += top.get(name, [])
        placed.add(name)
    for wing, mods in WINGS.items():
        out.append(f"      {wing + '/':<15}{WING_HEADS[wing]}:\n")
        members = [f"{m}.py" for m in mods]
        if wing == "config":
            members = ["config.py", *members]
        if wing == "model":
            members = ["model.py", *members, "api.py"]
        if wing == "reading":
            members = members[:3] + ["cache_origin.py"] + members[3:]
        for member in members:
            entry = top.get(member) or checks.get(member)
            if entry is None:
                print(f"  map: no entry for {member}; write one by hand")
                continue
            entry = _realign(entry, 8)
            if member in RENAMED:  # the new file name, the description kept in its column where it fits
                entry = [_renamed(entry[0], member, RENAMED[member]), *entry[1:]]
            out += entry
            placed.add(member)
        if wing == "files" and "checks/" in top:
            out += _shift([top["checks/"][0]], 2)
            elsewhere = {"api.py", "cache_origin.py"}  # the model's and reading's
            for member, entry in checks.items():
                if member not in elsewhere:
                    out += _realign(entry, 10)
                    placed.add(member)
    for name in ("tl/", "nanogpt/"):
        out += top.get(name, [])
        placed.add(name)
    out.append(
        "      Wings import downward only (tests/test_import_layers.py): errors < command/, config/ < files/ < model/\n"
        "      < reading/ < tl/; figures/ above files/; nanogpt/, sample.py and plot_attention.py on top.\n"
    )
    left = [name for name in top if name not in placed]
    for name in left:
        print(f"  map: {name} has no wing in this script; its entry is kept at the end of interp/")
        out += top[name]
    design.write_text("".join(lines[:start] + out + lines[end:]))


# ----- main ------------------------------------------------------------------------------------------------


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="say what would move; change nothing")
    p.add_argument("--force", action="store_true", help="move even where interp/ has uncommitted changes")
    args = p.parse_args()
    moves = file_moves()
    missing = [str(o) for o, _ in moves if not (ROOT / o).exists()]
    busy = [line for line in run("git", "status", "--porcelain", "--", "interp").splitlines() if line[:2] != "??"]
    for old, new in moves:
        print(f"  {old} -> {new}")
    if missing or args.check:
        print(f"missing: {missing}" if missing else "every source is there")
        if busy:
            print("interp/ has uncommitted changes:\n  " + "\n  ".join(busy))
        return 1 if missing else 0
    if busy and not args.force:
        print("interp/ has uncommitted changes (commit them, or --force):\n  " + "\n  ".join(busy))
        return 1
    for old, new in moves:
        move(old, new)
    write_wings()
    carve(
        "one_line_errors",
        ROOT / "interp/errors.py",
        ROOT / "interp/command/cli.py",
        "interp.command.cli",
        "interp.errors",
    )
    changed = rewrite_all() + [ROOT / "interp/errors.py", ROOT / "interp/command/cli.py"]
    changed += [ROOT / "interp" / wing / "__init__.py" for wing in WING_DOCS]
    rebuild_map(ROOT / "docs/DESIGN.md")
    py = sorted({str(p.relative_to(ROOT)) for p in changed if p.suffix == ".py" and p.exists()})
    ruff = str(ROOT / ".venv/bin/ruff") if (ROOT / ".venv/bin/ruff").exists() else "ruff"
    run(ruff, "check", "--fix", "--select", "I001,F401", *py, check=False)
    run(ruff, "format", *py, check=False)
    print(f"moved {len(moves)} modules into {len(WINGS)} new wings; rewrote {len(changed)} files ({len(py)} Python)")
    long = run(ruff, "check", "--select", "E501", "--output-format", "concise", *py, check=False).strip()
    if long:
        print("lines the longer names pushed past 120 characters (comments, docstrings: wrap them by hand):")
        print(long)
    pinned = re.findall(
        r"^    (benchmarks/\S+\.py)\s+sha256 [0-9a-f]{64}$", (ROOT / "docs/results/bench.md").read_text(), re.MULTILINE
    )
    touched = [f for f in pinned if f in py]
    if touched:
        print(
            "docs/results/bench.md pins these files' bytes and the move changed their imports (tests/test_bench_page.py"
        )
        print("fails until `make bench` measures again, or the page's digests are renewed with a line saying only")
        print("import paths changed): " + " ".join(touched))
    print("next: ruff check, mypy, the layer tests (tests/test_import_layers.py, tests/test_layers.py), then the rest")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The main job's published numbers re-derive from its shipped logs (issue 50, part 1).

docs/results/data/routing_test-default holds the logs of `make routing-test` (cpu-quick, seed 1337, nine runs).
`--analyse-only` of that folder trains nothing and reads no checkpoint; its console must print the README's
table and docs/results/routing_test.md's console record line for line. A page edited by hand, or a shipped
folder whose numbers moved, fails here. tests/test_shipped.py checks the results file key by key.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex

import pytest
from conftest import REPO, data_root, has_shared_data

from experiments.cluster.launch import without
from experiments.routing_test.run import EXPERIMENT

FOLDER = REPO / "docs" / "results" / "data" / "routing_test-default"
README_LEAD = "tests/test_routing_test_shipped.py checks it line for line):"
PAGE_LEAD = "P2-P7 shown without their detail lines):"

pytestmark = pytest.mark.skipif(
    not has_shared_data(), reason="the shipped runs were trained on TinyShakespeare (../shared/data)"
)


def indented_block(text: str, lead: str) -> list[str]:
    """The four-space indented block that follows the line ending in `lead` (indent removed)."""
    lines = text.splitlines()
    [start] = [i for i, line in enumerate(lines) if line.endswith(lead)]
    block, i = [], start + 1
    while i < len(lines) and (not lines[i].strip() or lines[i].startswith("    ")):
        block.append(lines[i][4:])
        i += 1
    while block and not block[-1].strip():
        block.pop()
    assert len(block) > 5, f"no table after {lead!r}"
    return [line for line in block if line.strip()]


@pytest.fixture(scope="module")
def console(tmp_path_factory, data_dir_env) -> list[str]:
    command = json.loads((FOLDER / "MANIFEST.json").read_text())["command"]
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "experiments.routing_test"], command
    out = tmp_path_factory.mktemp("rt")
    argv = [*without(words[3:], "--out"), "--out", str(out), "--analyse-only", str(FOLDER), "--no-report"]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert EXPERIMENT.main(argv) == 0
    assert not list(out.rglob("ckpt.pt")), "--analyse-only wrote a checkpoint"
    return buffer.getvalue().splitlines()


@pytest.fixture(scope="module")
def data_dir_env():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RESIDUAL_DATA_DIR", str(data_root()))
        yield


def in_order(expected: list[str], printed: list[str]) -> list[str]:
    """The expected lines missing from `printed`, or printed out of order."""
    missing, at = [], 0
    for line in expected:
        try:
            at = printed.index(line, at) + 1
        except ValueError:
            missing.append(line)
    return missing


def test_the_readme_table_is_the_shipped_runs_table_line_for_line(console):
    table = indented_block((REPO / "README.md").read_text(), README_LEAD)
    assert table[0].startswith("variant ") and len(table) == 11  # header, rule, nine variants
    start = console.index(table[0])
    assert console[start : start + len(table)] == table


def test_the_routing_test_page_is_the_shipped_runs_console_line_for_line(console):
    record = indented_block((REPO / "docs" / "results" / "routing_test.md").read_text(), PAGE_LEAD)
    assert any(line.startswith("P7 ") for line in record)
    assert not in_order(record, console), in_order(record, console)


def test_what_needs_the_checkpoints_is_named_not_recomputed(console):
    assert any(line.startswith("identity: not recomputable without checkpoints") for line in console)

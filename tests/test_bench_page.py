"""docs/results/bench.md is `make bench`'s latest run on the timing code the repository holds (issue 50, part 7).

The page records the sha256 of the benchmark code it ran (the timing loop, shapes.py's steps and rounds, the
variants, the reference, the report): a change to any fails here until `make bench` is re-run and the page
rewritten. Its console record must be exactly what benchmarks.report prints from the shipped JSON, so no number on
the page is typed by hand, and the summary table's ratios must be the JSON's.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re

from conftest import REPO

from benchmarks.report import print_report

PAGE = REPO / "docs" / "results" / "bench.md"
DATA = REPO / "docs" / "results" / "data" / "bench"


def section(text: str, heading: str) -> list[str]:
    """The indented lines under a `## heading`, indent removed."""
    body = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return [line[4:] for line in body.splitlines() if line.startswith("    ")]


def test_the_page_was_measured_on_the_timing_code_of_this_checkout():
    recorded = dict(re.findall(r"^    (benchmarks/\S+\.py)\s+sha256 ([0-9a-f]{64})$", PAGE.read_text(), re.M))
    # the timing loop and everything that sets what it times: steps, rounds and warm-up (shapes.py), the variants,
    # the reference, the child processes, the report that prints it
    shaping = {f"benchmarks/{n}.py" for n in ("timing", "ensemble_speed", "shapes", "step", "variants", "children")}
    assert set(recorded) == shaping | {"benchmarks/reference.py", "benchmarks/report.py"}
    for path, digest in recorded.items():
        now = hashlib.sha256((REPO / path).read_bytes()).hexdigest()
        assert now == digest, f"{path} changed since docs/results/bench.md was measured: re-run make bench"


def test_the_step_record_is_what_the_report_prints_from_the_shipped_json():
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print_report(json.loads((DATA / "step.json").read_text()))
    printed = [line.rstrip() for line in buffer.getvalue().splitlines() if line.strip()]
    on_page = [
        line.rstrip() for line in section(PAGE.read_text(), "`python -m benchmarks.step` (cpu-quick, paper-10m)")
    ]
    assert on_page == printed


def test_the_ensemble_record_is_the_shipped_output():
    shipped = [line for line in (DATA / "ensemble_speed.txt").read_text().splitlines() if line.strip()]
    assert section(PAGE.read_text(), "`python -m benchmarks.ensemble_speed`") == shipped


def test_the_summary_table_is_the_jsons():
    shipped = json.loads((DATA / "step.json").read_text())
    quick = shipped["shapes"]["cpu-quick"]
    bare = ", ".join(f"{quick['variants'][v]['ratio']:.3f}" for v in ("full", "attn_only", "ffn_only", "none"))
    trainer = quick["trainer"]
    page = PAGE.read_text()
    assert f"| {bare}x |" in page
    assert f"| {trainer['steady_ratio']:.3f}x |" in page
    assert f"| {trainer['whole_run_ratio']:.3f}x ({trainer['steps_per_minute']:.0f} steps/min) |" in page
    assert f"{shipped['machine']['peak_matmul_flops'] / 1e9:.0f} GFLOP/s (step benchmark" in page

"""The GPU check's table: each stage's output read into rows, against the paper, the shipped H200 logs and
issue 49's targets; and the shipped H200 logs themselves read back (Table 1, attn_only's alpha_tt per layer).

A row is {stage, check, result, against}; nothing is filled in for a stage that did not run or did not finish:
the row says so.
"""

from __future__ import annotations

import json
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "docs" / "results" / "data" / "residual_sweep-paper_10m-h200"
CONFIGS = ("full", "attn_only", "ffn_only", "none")
CPU_QUICK_ALPHA = "cpu-quick (README) 0.09 0.25 0.15 0.09"  # make routing-test, attn_only, seed 1337
TABLE1_TARGET_S = 360.0  # issue 49 part 3: 32 runs x 3000 steps, evaluation included, as one command


def _row(stage: str, check: str, result: str, against: str = "") -> dict[str, str]:
    return {"stage": stage, "check": check, "result": result, "against": against}


def _fmt(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} +/- {statistics.stdev(values):.3f}"


# ----- the shipped H200 logs ------------------------------------------------------------------------------


def h200_results(folder: Path = H200) -> dict[str, Any] | None:
    """The shipped H200 sweep's results file (checked against its MANIFEST), or None where it is not there."""
    from experiments.shipping.ship import read_shipped

    if not (folder / "MANIFEST.json").is_file():
        return None
    return json.loads(read_shipped(folder).results_path.read_text())


def h200_finals(results: dict[str, Any]) -> dict[str, dict[int, float]]:
    """config -> {seed: final val loss} of a residual sweep's results."""
    out: dict[str, dict[int, float]] = {}
    for r in results["runs"]:
        out.setdefault(r["variant"], {})[r["seed"]] = r["final_val_loss"]
    return out


def shipped_alpha_tt(folder: Path = H200, variant: str = "attn_only") -> dict[int, dict[str, Any]]:
    """seed -> {step, alpha_tt per layer (mean over heads), uniform baseline}: the last attention probe record
    in each shipped run's probes.jsonl (what the routing test reads as a run's final alpha_tt)."""
    from experiments.shipping.ship import read_shipped

    shipped = read_shipped(folder)
    out = {}
    for name, data in sorted(shipped.members.items()):
        parts = name.split("/")  # <preset>/<variant>/seed<k>/probes.jsonl
        if parts[1] != variant or parts[-1] != "probes.jsonl":
            continue
        records = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
        last = [r for r in records if r.get("probe") == "attention" and "alpha_tt" in r][-1]
        per_layer = [statistics.fmean(heads) for heads in last["alpha_tt"]]
        out[int(parts[2].removeprefix("seed"))] = {
            "step": last["step"],
            "alpha_tt_layer_mean": per_layer,
            "uniform_baseline": last["uniform_baseline"],
        }
    return out


# ----- the stages ---------------------------------------------------------------------------------------------


def pytest_rows(stage, out: Path) -> list[dict[str, str]]:
    junit = out / "logs" / "pytest-cuda.xml"
    if not junit.is_file():
        return [_row("a", "pytest -m cuda", f"did not report (exit {stage.rc}); see {stage.log}")]
    rows, counts = [], {"passed": 0, "failed": 0, "skipped": 0}
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, detail = "passed", ""
        for tag, name in (("failure", "failed"), ("error", "failed"), ("skipped", "skipped")):
            found = case.find(tag)
            if found is not None:
                message = found.get("message")
                outcome, detail = name, message.splitlines()[0][:90] if message else ""
        counts[outcome] += 1
        rows.append(_row("a", case.get("name", "?").removeprefix("test_"), f"{outcome} {detail}".strip()))
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    return [_row("a", "pytest -m cuda", f"{summary} in {stage.seconds:.0f} s"), *rows]


def step_rows(stage, out: Path, dry_run: bool) -> list[dict[str, str]]:
    path = out / "gpu_step.json"
    if not path.is_file():
        return [_row("b", "step benchmark", f"did not report (exit {stage.rc}); see {stage.log}")]
    report = json.loads(path.read_text())
    peaks = ", ".join(f"{k} {v / 1e12:.3g}" for k, v in report["peaks"].items())
    rows = [_row("b", "matmul peak (TFLOP/s)", peaks, report["device"])]
    by_mode: dict[str, dict[str, dict]] = {}
    for r in report["rows"]:
        by_mode.setdefault(r["mode"], {})[r["model"]] = r
    of = "bf16 peak" if "bf16" in report["peaks"] else "fp32 peak"
    for mode, models in by_mode.items():
        ref, full = models["reference"], models["full"]
        others = ", ".join(f"{k} {r['ms']:.1f}" for k, r in models.items() if k not in ("reference", "full"))
        mfu = full.get("mfu_bf16_peak") if full.get("mfu_bf16_peak") is not None else full["mfu"]
        result = f"full {full['ms']:.1f} ms" + (f", {others}" if others else "") + f"; MFU {100 * mfu:.1f}% of {of}"
        rows.append(
            _row("b", f"step {mode}", result, f"reference {ref['ms']:.1f} ms ({full['ratio_to_reference']:.2f}x)")
        )
    targets = "issue 49's H200 targets; not compared on a CPU" if dry_run else ""
    if by_mode:
        best = min((m["full"] for m in by_mode.values()), key=lambda r: r["ms"])
        met = "met" if best["ms"] <= report["targets"]["solo_ms"] else "not met"
        rows.append(_row("b", "best solo step", f"{best['ms']:.1f} ms ({best['mode']})", targets or f"<= 5 ms: {met}"))
    rows.append(_ensemble_row(report.get("ensemble"), report["targets"]["ensemble_mfu_bf16"], targets))
    rows += [_row("b", "skipped", s) for s in report["skipped"]]
    if stage.stopped:
        rows.append(_row("b", "stopped", f"at its budget ({stage.budget_s:.0f} s); the rows above are what it had"))
    return rows


def _ensemble_row(e: dict | None, target: float, targets: str) -> dict[str, str]:
    if not e:
        return _row("b", "ensemble step", "not measured (stopped before it)")
    if "ms" not in e:
        return _row(
            "b", f"ensemble of {e['k']}", f"not measured: {e.get('refused') or e.get('skipped') or e['failed']}"
        )
    mfu = e["mfu_bf16_peak"] if e.get("mfu_bf16_peak") is not None else e["mfu"]
    result = f"{e['ms']:.1f} ms ({e['ms_per_member']:.2f} a member), MFU {100 * mfu:.1f}%"
    if e.get("refused"):
        result += f" at dropout {e['dropout']:g}: the preset's was refused ({e['refused'][:80]})"
    met = "met" if mfu >= target else "not met"
    return _row("b", f"ensemble of {e['k']} ({e['mode']})", result, targets or f">= {100 * target:.0f}%: {met}")


def _sweep_results(stage, out: Path, experiment: str) -> tuple[dict | None, str]:
    """The results file the stage wrote (only when it finished: a stopped stage's folder may hold an older one)."""
    if stage.key == "e":
        out = out / "constant-lr"
    found = sorted(out.glob(f"*/results-{experiment}.json"))
    if stage.rc != 0 or stage.stopped or not found:
        return None, f"exit {stage.rc}" + (f", stopped at its budget ({stage.budget_s:.0f} s)" if stage.stopped else "")
    return json.loads(found[0].read_text()), ""


def run_dirs(out: Path) -> list[Path]:
    """Table 1's run folders under out/<preset>/<config>/seed<k>, finished or not."""
    return [p for c in CONFIGS for p in out.glob(f"*/{c}/seed*") if p.is_dir()]


def table1_rows(stage, out: Path, dry_run: bool) -> list[dict[str, str]]:
    results, why = _sweep_results(stage, out, "residual_sweep")
    done = sum((run / "final.json").is_file() for run in run_dirs(out))
    if results is None:
        resumes = f"{done} runs finished, the same command resumes the rest; see {stage.log}"
        return [_row("c", "Table 1", f"no results ({why}); {resumes}")]
    h200 = h200_results()
    shipped = h200_finals(h200) if h200 and h200["preset"] == results["preset"] else None
    here = h200_finals(results)
    rows = []
    for name, c in results["configs"].items():
        against = []
        if c.get("paper"):
            against.append(f"paper {c['paper']['text']} ({c['delta_vs_paper']:+.3f})")
        if shipped and name in shipped:
            same = sorted(set(shipped[name]) & set(here[name]))
            diffs = " ".join(f"{here[name][s] - shipped[name][s]:+.3f}" for s in same)
            against.append(
                f"H200 logs {_fmt(list(shipped[name].values()))}" + (f", seeds {same} {diffs}" if same else "")
            )
        elif not shipped:
            against.append(f"H200 logs are paper-10m; not compared at {results['preset']}")
        f = c["final_val_loss"]
        spread = f" +/- {f['std']:.3f} ({f['n']} seeds)" if f["n"] > 1 else " (1 seed: no spread)"
        result = f"{f['mean']:.3f}{spread}, {c['classification']}"
        rows.append(_row("c", name, result, "; ".join(against)))
    n, before = len(results["runs"]), stage.extra.get("runs_before")
    if dry_run or n != 32:
        target = ""
    elif before != 0:  # a reused or resumed run took part of its time in another command
        target = f"not judged: {before if before is not None else 'an unknown number'} of the runs were there before"
    else:
        target = f"32 runs <= {TABLE1_TARGET_S:.0f} s: " + ("met" if stage.seconds <= TABLE1_TARGET_S else "not met")
    finals = [out / results["preset"] / r["run_dir"] / "final.json" for r in results["runs"]]
    stacked = sum(1 for p in finals if p.is_file() and json.loads(p.read_text()).get("ensemble"))  # these runs only
    wall = f"{n} runs ({stacked} trained in ensembles) in {stage.seconds:.0f} s, the command start to end"
    return [*rows, _row("c", "wall time", wall, target)]


def routing_rows(stage, out: Path) -> list[dict[str, str]]:
    results, why = _sweep_results(stage, out, "routing_test")
    if results is None:
        return [_row("d", "routing test", f"no results ({why}); the same command resumes it")]
    verdicts = ", ".join(
        f"{v['id']} {v['verdict']}" + (" (provisional)" if v.get("provisional") else "") for v in results["verdicts"]
    )
    rows = [_row("d", "verdicts", verdicts, f"seed {results['seeds'][0]}, {results['preset']}")]
    alpha = (results["variants"].get("attn_only") or {}).get("alpha_tt_layer_mean")
    if alpha:
        shipped = shipped_alpha_tt() if h200_results() and results["preset"] == "paper-10m" else {}
        there = shipped.get(results["seeds"][0])
        against = CPU_QUICK_ALPHA
        if there:
            against += "; H200 logs " + " ".join(f"{a:.2f}" for a in there["alpha_tt_layer_mean"])
        rows.append(_row("d", "attn_only alpha_tt/layer", " ".join(f"{a:.2f}" for a in alpha), against))
    return rows


def constant_rows(stage, out: Path) -> list[dict[str, str]]:
    results, why = _sweep_results(stage, out, "residual_sweep")
    if results is None:
        return [_row("e", "constant lr", f"no results ({why}); the same command resumes it")]
    rows = []
    for name, c in results["configs"].items():
        f = c["final_val_loss"]
        seeds = f"{f['n']} seeds" if f["n"] > 1 else "1 seed"
        rows.append(_row("e", f"{name}, constant lr", f"{f['mean']:.3f} ({seeds}), {c['classification']}"))
    return rows


def stage_rows(stages, out: Path, dry_run: bool) -> list[dict[str, str]]:
    readers = {
        "a": lambda s: pytest_rows(s, out),
        "b": lambda s: step_rows(s, out, dry_run),
        "c": lambda s: table1_rows(s, out, dry_run),
        "d": lambda s: routing_rows(s, out),
        "e": lambda s: constant_rows(s, out),
    }
    rows = []
    for s in stages:
        if s.skipped:
            rows.append(_row(s.key, s.title, f"skipped: {s.skipped}"))
            continue
        try:
            rows += readers[s.key](s)
        except (OSError, ValueError, KeyError, TypeError, ET.ParseError) as e:  # a stage's output unreadable
            rows.append(_row(s.key, s.title, f"output not readable ({type(e).__name__}: {e}); see {s.log}"))
    return rows + prediction_rows(stages, out, dry_run)


def prediction_rows(stages, out: Path, dry_run: bool) -> list[dict[str, str]]:
    """The newest paper-scale prediction file beside what stages c and d measured (experiments.floor.paper_scale)."""
    from experiments.floor import paper_scale

    try:
        path, doc = paper_scale.newest()
    except paper_scale.PredictionFileError as e:
        return [_row("p", "predictions", f"not scored: {e}")]
    by_key = {s.key: s for s in stages}
    sweeps = [_sweep_results(by_key[k], out, "residual_sweep")[0] for k in "ce" if k in by_key]
    routing = _sweep_results(by_key["d"], out, "routing_test")[0] if "d" in by_key else None
    head = _row("p", "predictions", f"{path.relative_to(REPO)} (version {doc['version']}, written {doc['written']})")
    scored = paper_scale.score_arms(doc, [s for s in sweeps if s], dry_run)
    scored += paper_scale.score_routing(doc, routing, dry_run)
    return [head, *(_row("p", r["check"], r["result"], r["against"]) for r in scored)]


def gpu_check_table(rows: list[dict[str, str]]) -> str:
    from experiments.runner.text import format_table

    return format_table(["stage", "check", "result", "against"], [list(r.values()) for r in rows])


def write_summary(out: Path, header: str, table: str, stages, rows, env: dict[str, Any]) -> None:
    from interp.files.io import atomic_write, write_json

    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "gpu_check.txt", lambda tmp: Path(tmp).write_text(header + "\n" + table + "\n"))
    runs = [
        {k: getattr(s, k) for k in ("key", "title", "argv", "budget_s", "rc", "seconds", "stopped", "skipped", "log")}
        for s in stages
    ]
    write_json(out / "gpu_check.json", {"schema": "gpu-check/1", **env, "stages": runs, "rows": rows})

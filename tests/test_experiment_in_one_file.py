"""docs/DESIGN.md "Adding an experiment": an experiment declared in this file alone runs through the frame.

`toy_in_one_file` is an experiments.runner.frame.Experiment with a plan of two tiny variants (full and
attn_only) on the smoke preset cut to 8 steps (its `defaults`), an analysis, a table, a summary and a
report section. Through Experiment.main, in this process and with the local launcher: its runs train
into run directories, results-toy_in_one_file.json is written with the frame's keys and its own, the
report is written; a second invocation trains nothing (every final.json and metrics.jsonl untouched);
and a run interrupted by Ctrl-C resumes on the next invocation, ending on the numbers of a run that
was never interrupted (to float order: that one trained in an ensemble, docs/DESIGN.md contract 5).
What needs the experiment to be the module experiments.<name>.run - a cluster job re-plans it by
importing it - is refused with that reason.
"""

from __future__ import annotations

import json
import math

import pytest
from conftest import InterruptAt

from experiments.runner.frame import Context, Experiment, Group, Variant, run_summary

SCHEMA = "toy-in-one-file/1"
INTERRUPT: dict[str, int] = {}  # variant name -> the step at which its trainer is pressed Ctrl-C (a test sets it)


def plan(ctx: Context) -> list[Group]:
    def callbacks(variant: Variant, seed: int) -> list:  # asked more than once per run: reads, never consumes
        step = INTERRUPT.get(variant.name)
        return [InterruptAt(step)] if step is not None else []

    return [Group(ctx.spec, [Variant.of(residual="full"), Variant.of(residual="attn_only")], callbacks=callbacks)]


def analyse(ctx: Context, records: list[dict]) -> dict:
    runs = [run_summary(r) for r in records]
    return {"runs": runs, "best": min(runs, key=lambda r: r["final_val_loss"])["variant"]}


def table(results: dict) -> tuple[list[str], list[list[str]]]:
    return ["variant", "seed", "final val"], [
        [r["variant"], str(r["seed"]), f"{r['final_val_loss']:.3f}"] for r in results["runs"]
    ]


EXPERIMENT = Experiment(
    name="toy_in_one_file",
    schema=SCHEMA,
    doc="A toy experiment: two residual wirings for a few smoke steps.\n\nresults.json schema: ...",
    plan=plan,
    analyse=analyse,
    table=table,
    summary=lambda results: f"lowest final val: {results['best']}",
    sections=lambda results, ctx: [f"The lowest final validation loss: {results['best']}."],
    defaults=lambda spec: {
        "max_steps": 8,
        "eval_interval": 4,
        "ckpt_interval": 2,
        "log_interval": 2,
        "eval_batches": 2,
    },
    default_preset="smoke",
)


def argv(out) -> list[str]:
    return ["--out", str(out), "--seeds", "0", "--no-progress"]


def files(out, name: str) -> dict:
    return {p: p.stat().st_mtime_ns for p in sorted(out.rglob(name))}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One invocation, everything trained: (out, its console output)."""
    from conftest import data_root

    out = tmp_path_factory.mktemp("toy_experiment")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESIDUAL_DATA_DIR", str(data_root()))
        assert EXPERIMENT.main(argv(out)) == 0
    return out


def test_runs_train_and_results_and_report_are_written(finished):
    results = json.loads((finished / "smoke" / "results-toy_in_one_file.json").read_text())
    frame_keys = {
        "schema",
        "experiment",
        "preset",
        "seeds",
        "config",
        "reference_levels",
        "runs",
        "software",
        "train_wall_time_s",
        "wall_time_s",
        "created",
        "command",
    }
    assert frame_keys | {"best"} == set(results)
    assert (results["schema"], results["experiment"], results["preset"], results["seeds"]) == (
        SCHEMA,
        "toy_in_one_file",
        "smoke",
        [0],
    )
    assert results["config"]["variants"] == {"full": {"residual": "full"}, "attn_only": {"residual": "attn_only"}}
    assert results["config"]["train"]["max_steps"] == 8  # the experiment's defaults
    assert {r["variant"] for r in results["runs"]} == {"full", "attn_only"}
    assert all(r["steps"] == 8 and math.isfinite(r["final_val_loss"]) for r in results["runs"])
    assert {"unigram", "bigram"} <= set(results["reference_levels"])
    assert len(files(finished, "final.json")) == 2
    assert (finished / "smoke" / "full" / "seed0" / "ckpt.pt").exists()
    report = (finished / "smoke" / "report-toy_in_one_file.html").read_text()
    assert "The lowest final validation loss" in report and "attn_only" in report


def test_a_second_invocation_trains_nothing(finished, data, capsys):
    finals, metrics = files(finished, "final.json"), files(finished, "metrics.jsonl")
    texts = {p: p.read_bytes() for p in finals}
    assert EXPERIMENT.main(argv(finished)) == 0
    assert files(finished, "final.json") == finals and files(finished, "metrics.jsonl") == metrics
    assert all(p.read_bytes() == text for p, text in texts.items())
    out = capsys.readouterr().out
    assert "lowest final val:" in out and "results:" in out


def test_an_interrupted_run_resumes_on_the_next_invocation(finished, data, tmp_path, capsys):
    INTERRUPT["attn_only"] = 5
    try:
        assert EXPERIMENT.main(argv(tmp_path)) == 130
    finally:
        INTERRUPT.clear()
    err = capsys.readouterr().err
    assert "resumes from its checkpoint: run this experiment again with the same options" in err
    run = tmp_path / "smoke" / "attn_only" / "seed0"
    assert (run / "ckpt.pt").exists() and not (run / "final.json").exists()
    done = files(tmp_path, "final.json")  # the run that finished before the interrupt
    assert EXPERIMENT.main(argv(tmp_path)) == 0
    assert all(files(tmp_path, "final.json")[p] == t for p, t in done.items())  # not trained again
    resumed = json.loads((run / "final.json").read_text())
    clean = json.loads((finished / "smoke" / "attn_only" / "seed0" / "final.json").read_text())
    # as if never interrupted: the clean run trained in a stacked ensemble, this one alone, so they agree to
    # float order (docs/DESIGN.md contract 5; tests/test_crash.py checks bitwise equality solo against solo)
    assert math.isclose(resumed["final_val_loss"], clean["final_val_loss"], rel_tol=1e-5)
    assert resumed["steps"] == 8


def test_a_cluster_launcher_is_refused_naming_why(data, tmp_path, capsys):
    assert EXPERIMENT.main([*argv(tmp_path), "--launcher", "slurm-local"]) == 2
    assert "is not there (declared in a notebook or a test file?); use --launcher local" in capsys.readouterr().err
    assert not files(tmp_path, "final.json")


def test_a_run_that_vanishes_before_its_results_are_read_stops_the_command(
    finished, data, tmp_path, monkeypatch, capsys
):
    """A run directory removed after its run was trained (here: after the launcher is done, before the results are
    read): one error line naming it, exit 2, no results or report written over the old ones, nothing recreated."""
    import shutil

    import experiments.runner.frame as frame

    out = tmp_path / "copy"
    shutil.copytree(finished, out)
    gone = out / "smoke" / "attn_only" / "seed0"
    old = {p: p.read_bytes() for p in (out / "smoke").glob("*-toy_in_one_file.*")}
    real = frame.launch

    def launch_then_remove(*args, **kwargs):
        done = real(*args, **kwargs)
        shutil.rmtree(gone)
        return done

    monkeypatch.setattr(frame, "launch", launch_then_remove)
    assert EXPERIMENT.main(argv(out)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and str(gone) in err and "is gone" in err
    assert not gone.exists()
    assert {p: p.read_bytes() for p in (out / "smoke").glob("*-toy_in_one_file.*")} == old

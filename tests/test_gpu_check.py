"""`make gpu-check` (benchmarks.gpu_check) on this CPU: its dry run end to end, and the parts a GPU machine leans on.

The dry run is the same command on tiny shapes: every stage runs as it would on a GPU (pytest -m cuda skips
its tests here, the step benchmark times the smoke shape on the CPU, the sweep and the routing test train a few
steps) and the one table comes out, with a folder `experiments.shipping.ship` publishes. Without CUDA the real
command refuses in one line; the wheels a bare machine lacks install from a folder with no package index; a
stage past its budget is stopped, not waited for.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import run_module

from benchmarks import gpu_check
from experiments.shipping.ship import ship


def test_the_dry_run_runs_every_stage_and_writes_a_folder_ship_publishes(tmp_path, data):
    out = tmp_path / "check"
    start = time.perf_counter()
    # a budget with room: this checks that every stage runs, not how fast a shared 2-core machine is
    done = run_module("benchmarks.gpu_check", "--dry-run", "--budget-s", "400", "--out", str(out), timeout=480)
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "gpu_check.json").read_text())
    assert [(s["key"], s["rc"], s["stopped"], s["skipped"]) for s in summary["stages"]] == [
        (k, 0, False, "") for k in "abced"
    ]
    rows = {(r["stage"], r["check"]): r for r in summary["rows"]}
    a = rows[("a", "pytest -m cuda")]["result"]
    assert a.startswith("0 passed, 0 failed, ") and "skipped" in a  # no CUDA here: every test skips
    tests = [r["result"] for (stage, check), r in rows.items() if stage == "a" and check != "pytest -m cuda"]
    assert tests and all(t.startswith("skipped") for t in tests)
    assert "full " in rows[("b", "step fp32-det")]["result"] and "MFU" in rows[("b", "step fp32-det")]["result"]
    assert "a member), MFU" in rows[("b", "ensemble of 2 (fp32)")]["result"]
    for config in ("full", "attn_only", "ffn_only", "none"):
        assert "(2 seeds)" in rows[("c", config)]["result"], rows[("c", config)]
        assert "not compared at smoke" in rows[("c", config)]["against"]
    assert rows[("d", "verdicts")]["result"].startswith("P1 ")
    assert "(1 seed)" in rows[("e", "attn_only, constant lr")]["result"]
    # the newest paper-scale prediction file, scored against the tiny runs as plumbing only (never as a test)
    assert rows[("p", "predictions")]["result"].startswith("docs/results/predictions/paper_scale-v")
    for arm, n in (("p10-attn_only", 2), ("p10-attn_only-constant", 1)):
        result = rows[("p", arm)]["result"]
        assert result.endswith("on the floor: dry run (smoke shapes): plumbing, not a test") and f"of {n} " in result
    assert rows[("p", "p124-attn_only")]["result"] == "not run by this check"
    assert rows[("p", "P1")]["result"].endswith("dry run (smoke shapes): plumbing, not a test")
    table = (out / "gpu_check.txt").read_text()
    assert table.splitlines()[0].startswith("gpu check: dry run on this CPU") and table in done.stdout
    manifest = ship(out, tmp_path / "shipped", experiment="residual_sweep")
    assert manifest["experiment"] == "residual_sweep" and len(manifest["runs"]) == 8
    print(f"dry run: {seconds:.1f} s")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_says_so_in_one_line(tmp_path, capsys):
    assert gpu_check.main(["--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no CUDA device here") and err.count("\n") == 1, err
    assert "--dry-run" in err and not (tmp_path / "o").exists()


def test_the_wheels_command_names_every_wheel(capsys):
    assert gpu_check.main(["--wheels-command", "--wheels", "W"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("pip download --no-deps --only-binary=:all: --python-version 3.12") and " -d W " in line
    assert all(w in line.split() for w in gpu_check.WHEELS) and "transformer-lens==3.9.0" in line


def _wheel(folder: Path, name: str) -> Path:
    """A minimal pure-Python wheel holding the module `name`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-0.1-py3-none-any.whl"
    info = f"{name}-0.1.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/__init__.py", "VALUE = 42\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def test_only_what_is_missing_installs_from_the_wheels_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # install_wheels puts the target first
    wheels = tmp_path / "wheels"
    _wheel(wheels, "gpucheckprobe")
    _wheel(wheels, "filelock")  # a distribution this Python has: never installed over it
    monkeypatch.setattr(gpu_check, "NEEDED", ("torch",))
    assert gpu_check.install_wheels(wheels, tmp_path / "site") == "every dependency installed; no wheel needed"
    assert not (tmp_path / "site").exists()
    monkeypatch.setattr(gpu_check, "NEEDED", ("torch", "gpucheckprobe"))
    said = gpu_check.install_wheels(wheels, tmp_path / "site")
    assert said == "installed 1 wheels for gpucheckprobe" and (tmp_path / "site" / "gpucheckprobe").is_dir()
    assert not (tmp_path / "site" / "filelock").exists()
    import gpucheckprobe

    assert gpucheckprobe.VALUE == 42


def test_a_missing_dependency_without_its_wheel_is_one_error_naming_the_download(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "NEEDED", ("torch", "no_such_module_gpu_check"))
    with pytest.raises(gpu_check.GpuCheckError, match="lacks no_such_module_gpu_check .*`pip download"):
        gpu_check.install_wheels(tmp_path / "none", tmp_path / "site")


def test_a_stage_past_its_budget_is_stopped(tmp_path):
    stage = gpu_check.StageRun("x", "sleeps", [sys.executable, "-c", "import time; time.sleep(60)"], budget_s=1.0)
    start = time.perf_counter()
    gpu_check.run_stage(stage, {}, tmp_path / "x.log")
    assert stage.stopped and stage.rc == -signal.SIGINT and time.perf_counter() - start < 15


def test_a_pytest_stage_stopped_at_its_budget_still_reports_the_tests_that_ran(tmp_path):
    # stage a on a slow machine: the tests that finished before the budget must reach the table
    (tmp_path / "test_slow.py").write_text(
        "import time\ndef test_quick():\n    assert True\ndef test_slow():\n    time.sleep(60)\n"
    )
    junit = tmp_path / "out.xml"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "test_slow.py"]
    stage = gpu_check.StageRun("a", "pytest", argv, budget_s=8.0)
    gpu_check.run_stage(stage, {**os.environ, "PYTHONPATH": str(tmp_path)}, tmp_path / "a.log", cwd=tmp_path)
    assert stage.stopped, (tmp_path / "a.log").read_text()
    report = junit.read_text()
    assert 'name="test_quick"' in report and "KeyboardInterrupt" not in report.split('name="test_quick"')[0]


def _fake_table1(out: Path, runs: int) -> None:
    from benchmarks.gpu_rows import h200_results

    shipped = h200_results()
    template = shipped["runs"][0]
    configs = ("full", "attn_only", "ffn_only", "none")
    shipped["runs"] = [{**template, "variant": c, "seed": s} for c in configs for s in range(1, runs // 4 + 1)]
    (out / "paper-10m").mkdir(parents=True)
    (out / "paper-10m" / "results-residual_sweep.json").write_text(json.dumps(shipped))


@pytest.mark.parametrize(
    "before, target",
    [(0, "32 runs <= 360 s: met"), (5, "not judged: 5 of the runs"), (None, "not judged: an unknown number")],
)
def test_table1s_time_target_is_judged_only_when_the_command_trained_every_run(tmp_path, before, target):
    from benchmarks.gpu_rows import table1_rows

    _fake_table1(tmp_path, 32)
    stage = gpu_check.StageRun("c", "Table 1", [], 300.0, rc=0, seconds=200.0)
    if before is not None:
        stage.extra["runs_before"] = before
    row = table1_rows(stage, tmp_path, dry_run=False)[-1]
    assert row["check"] == "wall time" and row["against"].startswith(target), row


def test_table1s_budget_at_the_caps_still_holds_its_time_target():
    from benchmarks.gpu_rows import TABLE1_TARGET_S

    stage = gpu_check.StageRun("c", "Table 1", [], 0.0)
    left = gpu_check.DEFAULT_BUDGET_S - sum(gpu_check.CAPS.values())  # a and b ran to their caps
    assert gpu_check._budgets(stage, left) == "" and stage.budget_s >= TABLE1_TARGET_S


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--stages", "abx"], "--stages"),
        (["--budget-s", "5"], "--budget-s"),
        (["--budget-s", "nan"], "--budget-s"),
        (["--budget-s", "inf"], "--budget-s"),
        (["--budget-s", "1e308"], "at most 86400"),
    ],
)
def test_bad_options_are_one_line(argv, match, capsys):
    assert gpu_check.main(["--dry-run", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and match in err and err.count("\n") == 1, err


def test_the_data_folder_is_looked_for_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDUAL_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setattr(gpu_check, "REPO", tmp_path)  # no .gpu-data, no ../shared/data there
    with pytest.raises(gpu_check.GpuCheckError, match="no TinyShakespeare .*copy ../shared/data/tinyshakespeare"):
        gpu_check.find_data_dir(None)


def test_a_sigterm_during_a_stage_stops_the_stage_then_ends(tmp_path, data):
    # --seeds makes the command import experiments lazily, inside its signal handling: the stage's child (its
    # own session) must still be stopped, not left training after the command has ended (audit 49b case 8)
    out = tmp_path / "term"
    seeds = ",".join(str(s) for s in range(1, 41))
    argv = [sys.executable, "-m", "benchmarks.gpu_check", "--dry-run", "--stages", "c", "--seeds", seeds]
    proc = subprocess.Popen([*argv, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = out / "logs" / "stage-c.log"
    start = time.perf_counter()
    while "ensembles of" not in (log.read_text() if log.exists() else ""):  # the sweep is training
        assert proc.poll() is None and time.perf_counter() - start < 120, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 143 and err.strip().splitlines()[-1].startswith("interrupted (SIGTERM)"), err
    time.sleep(1)
    alive = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.split()
    assert not alive and "results:" not in log.read_text()  # the stage ended with the command


def test_the_step_benchmark_times_the_step_training_runs_with_each_runs_dropout_stream(monkeypatch, capsys):
    # the trainer's forward draws every dropout mask from the run's stream (a graph break per site when
    # compiled); a benchmark without it would time a faster step than any run takes (audit 49c case 50)
    from benchmarks import gpu_step
    from interp.model.dropout import DropoutStream

    drawn: list[tuple[int, int, int]] = []
    keep = DropoutStream.keep

    def recording(self, site, shape, p, device):
        drawn.append((self.seed, self.counter, site))
        return keep(self, site, shape, p, device)

    monkeypatch.setattr(DropoutStream, "keep", recording)
    argv = ["--device", "cpu", "--shape", "smoke", "--set", "dropout=0.2", "--modes", "fp32", "--ensemble", "2"]
    assert gpu_step.main([*argv, "--steps", "2", "--rounds", "1", "--warmup", "1"]) == 0
    assert "ensemble of 2" in capsys.readouterr().out
    seeds = {s for s, _, _ in drawn}
    counters = {c for _, c, _ in drawn}
    assert seeds == {0, 1} and len(counters) >= 3  # both members' streams, moved on at every step


def test_an_out_that_cannot_be_a_folder_or_is_in_use_is_one_line(tmp_path, data, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert gpu_check.main(["--dry-run", "--out", str(afile)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out ") and "cannot make the folder" in err and err.count("\n") == 1, err
    from filelock import FileLock

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / ".gpu_check.holder").write_text("pid 4242\n")
    with FileLock(busy / ".gpu_check.lock"):  # another gpu check into the same folder
        assert gpu_check.main(["--dry-run", "--out", str(busy)]) == 2
    err = capsys.readouterr().err
    assert "in use by another gpu check (pid 4242)" in err and err.count("\n") == 1, err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_stage_ends_when_the_command_is_killed_outright(tmp_path):
    # SIGKILL of gpu_check (an OOM killer, a lost ssh with kill -9): its stage must not train on unseen
    child_pid = tmp_path / "child.pid"
    (tmp_path / "child.py").write_text(
        f"import os, time\nopen({str(child_pid)!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n"
    )
    code = (
        "import sys; from pathlib import Path; from benchmarks import gpu_check as g\n"
        f"s = g.StageRun('x', 'sleeps', [sys.executable, {str(tmp_path / 'child.py')!r}], 100.0)\n"
        f"g.run_stage(s, {{}}, Path({str(tmp_path / 'x.log')!r}))\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code])
    start = time.perf_counter()
    while not child_pid.exists() or not child_pid.read_text():
        assert time.perf_counter() - start < 60
        time.sleep(0.1)
    parent.kill()
    parent.wait()
    pid = int(child_pid.read_text())
    while time.perf_counter() - start < 60:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{pid}/status") as status:  # a zombie has ended too
            if "State:\tZ" in status.read():
                break
        time.sleep(0.1)
    else:
        pytest.fail("the stage's child outlived the killed command")


def test_an_unknown_compile_backend_is_one_line_not_a_skipped_mode(capsys):
    # it was: the compiled mode 'failed' into the skipped list and the command exited 0
    from benchmarks import gpu_step

    argv = ["--device", "cpu", "--shape", "smoke", "--modes", "fp32,fp32-compiled", "--compile-backend", "nosuch"]
    assert gpu_step.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --compile-backend 'nosuch'") and "inductor" in err and err.count("\n") == 1, err


def test_the_prediction_rows_score_the_committed_file_and_say_why_not_for_an_edited_or_damaged_one(
    tmp_path, monkeypatch
):
    """The p rows: the committed newest version is scored (here against no runs); a copy whose arm holds a
    qk_scale that is no number, or whose bytes are not the committed ones, is one "not scored" row naming why,
    not a traceback in place of the table."""
    from benchmarks import gpu_rows
    from experiments.floor import paper_scale

    newest = max(paper_scale.PINNED)
    rows = gpu_rows.prediction_rows([], tmp_path, True)
    assert rows[0]["check"] == "predictions" and rows[0]["result"].startswith(
        f"docs/results/predictions/paper_scale-v{newest}.json (version {newest}, written "
    )
    assert {r["check"] for r in rows} >= {"p10-attn_only", "p124-none", "P1", "P7"}
    assert all(r["result"] == "not run by this check" for r in rows[1:])
    committed = (paper_scale.FOLDER / f"paper_scale-v{newest}.json").read_text()
    damaged = committed.replace('"qk_scale": 12.0', '"qk_scale": "abc"')
    edited = committed.replace('"mid": 0.85', '"mid": 0.8')
    for name, text, words in [
        ("damaged", damaged, "arm p10-ffn_only-qk12's qk_scale 'abc'"),
        ("edited", edited, f"is not the committed version {newest} (sha256"),
    ]:
        folder = tmp_path / name
        folder.mkdir()
        for older in paper_scale.versions()[:-1]:
            (folder / older.name).write_bytes(older.read_bytes())
        (folder / f"paper_scale-v{newest}.json").write_text(text)
        monkeypatch.setattr(paper_scale, "FOLDER", folder)
        rows = gpu_rows.prediction_rows([], tmp_path, True)
        assert len(rows) == 1 and rows[0]["check"] == "predictions", rows
        assert rows[0]["result"].startswith("not scored: ") and words in rows[0]["result"], rows[0]["result"]
        assert f"paper_scale-v{newest}.json" in rows[0]["result"]


def test_a_prediction_file_that_cannot_be_scored_fails_the_check(tmp_path, monkeypatch, capsys, data):
    """An edited newest version is one 'not scored' row and exit 1 (with one error line): a GPU run is never
    reported green beside predictions nobody can score."""
    from benchmarks import gpu_check
    from experiments.floor import paper_scale

    folder = tmp_path / "predictions"
    folder.mkdir()
    for path in paper_scale.versions():
        (folder / path.name).write_bytes(path.read_bytes())
    newest = paper_scale.versions()[-1].name
    (folder / newest).write_text((folder / newest).read_text().replace('"mid": 0.85', '"mid": 0.8', 1))
    monkeypatch.setattr(paper_scale, "FOLDER", folder)
    argv = ["--dry-run", "--stages", "b", "--budget-s", "16", "--out", str(tmp_path / "out")]
    assert gpu_check.main(argv) == 1
    out = capsys.readouterr().out
    assert "error: the paper-scale predictions were not scored: " in out and "is not the committed version" in out

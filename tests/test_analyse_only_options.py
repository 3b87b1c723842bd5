"""--analyse-only takes the options recorded with the runs it reads (issue 58, item 4).

It planned the default preset's runs and refused a smoke folder until `--preset smoke` was repeated, and a folder
trained with `--margin 0.1` re-analysed without it was analysed at 0.05 without a word (a published verdict could
change silently). The recorded command (a shipped folder's MANIFEST.json, an --out's results file) gives the
options; one given on the command line wins, with a line saying so; a recorded option the parser does not know
is refused in one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO, has_shared_data

from experiments.routing_test.run import EXPERIMENT
from experiments.runner.analyse_only import with_recorded_options
from experiments.shipping.ship import MANIFEST, sha256

SMOKE = REPO / "docs" / "results" / "data" / "routing_test-smoke"
RECORDED = json.loads((SMOKE / MANIFEST).read_text())["command"]  # ... --preset smoke --out runs/ship_smoke ...


def shipped_with(tmp_path: Path, command: str) -> Path:
    """A copy of the routing test's smoke folder whose results and MANIFEST.json record `command`."""
    folder = tmp_path / "shipped"
    shutil.copytree(SMOKE, folder)
    results = folder / "results-routing_test.json"
    data = json.loads(results.read_text())
    results.write_text(json.dumps({**data, "command": command}, indent=2) + "\n")
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["command"] = command
    manifest["files"][results.name] = {"sha256": sha256(results.read_bytes()), "bytes": results.stat().st_size}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return folder


@pytest.mark.skipif(not has_shared_data(), reason="the shipped runs were trained on TinyShakespeare (../shared/data)")
def test_a_smoke_folder_is_analysed_as_smoke_without_repeating_its_options(data, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--analyse-only", str(SMOKE), "--out", str(out), "--no-progress", "--no-report"]
    assert EXPERIMENT.main(argv) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == (
        f"--analyse-only {SMOKE}: the options recorded with its runs ({SMOKE / MANIFEST}): --preset smoke"
    )
    results = json.loads((out / "smoke" / "results-routing_test.json").read_text())
    assert results["preset"] == "smoke" and len(results["runs"]) == 9 and results["margin"] == 0.05
    # the analysis's own record names the options it ran with (so the folder ships with them: ship.the_command)
    assert results["command"].startswith("python -m experiments.routing_test --preset smoke --out ")


def test_a_recorded_margin_is_kept_and_a_given_one_wins_with_a_line(data, tmp_path, capsys):
    folder = shipped_with(tmp_path, RECORDED.replace("--preset smoke", "--preset smoke --margin 0.1"))
    base = ["--analyse-only", str(folder), "--out", str(tmp_path / "out")]
    ctx, jobs = EXPERIMENT.context(base)
    assert ctx.args.margin == 0.1 and ctx.spec.preset == "smoke" and len(jobs) == 9
    assert capsys.readouterr().out.splitlines()[0].endswith(f"({folder / MANIFEST}): --preset smoke --margin 0.1")
    ctx, _ = EXPERIMENT.context([*base, "--margin", "0.05"])
    assert ctx.args.margin == 0.05
    said = [line for line in capsys.readouterr().out.splitlines() if "given" in line]
    assert said == [
        f"--analyse-only {folder}: --margin 0.05 given, 0.1 recorded ({folder / MANIFEST}); the given one is used"
    ]
    ctx, _ = EXPERIMENT.context([*base, "--margin", "0.1", "--preset", "smoke"])  # the same values: no line
    assert ctx.args.margin == 0.1 and "given" not in capsys.readouterr().out


def test_an_option_recorded_that_the_parser_does_not_know_is_refused_in_one_line(data, tmp_path, capsys):
    folder = shipped_with(tmp_path, f"{RECORDED} --margins 0.1")
    argv = ["--analyse-only", str(folder), "--out", str(tmp_path / "out"), "--no-progress", "--no-report"]
    assert EXPERIMENT.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {folder / MANIFEST} records `{RECORDED} --margins 0.1`")
    assert "whose --margins python -m experiments.routing_test does not take" in err
    assert not (tmp_path / "out").exists()  # nothing copied, nothing analysed


def test_an_outs_results_file_records_the_options_too(data, tmp_path, capsys):
    """An --out whose checkpoints are gone: its results-<name>.json records the command."""
    source = tmp_path / "runs"
    (source / "smoke").mkdir(parents=True)
    command = "python -m experiments.routing_test --preset smoke --margin 0.2 --out runs/x --launcher slurm"
    (source / "smoke" / "results-routing_test.json").write_text(json.dumps({"command": command}))
    ctx, _ = EXPERIMENT.context(["--analyse-only", str(source), "--out", str(tmp_path / "out")])
    # the launcher's options and --out say where and how the runs trained, not what is analysed: not taken
    assert (ctx.args.margin, ctx.spec.preset, ctx.args.launcher, ctx.out) == (0.2, "smoke", "local", tmp_path / "out")
    assert capsys.readouterr().out.splitlines()[0].endswith("): --preset smoke --margin 0.2")


def test_a_given_set_replaces_the_recorded_one_of_its_key_only(monkeypatch, capsys):
    from experiments.runner import analyse_only

    recorded = "python -m experiments.routing_test --preset smoke --set lr=0.5 --set=max_steps=7 --out o --no-pro"
    monkeypatch.setattr(analyse_only, "recorded_command", lambda *a: (recorded, "rec.json"))
    argv = ["--out", "x", "--set", "lr=0.1", "--seeds", "3", "--analyse-only", str(REPO)]
    effective = with_recorded_options(EXPERIMENT.parser(), argv, REPO, "routing_test")
    assert effective == [
        "--preset", "smoke", "--set", "lr=0.1", "--set=max_steps=7", "--out", "x", "--seeds", "3", "--analyse-only",
        str(REPO),
    ]  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"--analyse-only {REPO}: the options recorded with its runs (rec.json): --preset smoke --set=max_steps=7",
        f"--analyse-only {REPO}: --set lr=0.1 given, --set lr=0.5 recorded (rec.json); the given one is used",
        f"--analyse-only {REPO}: --seeds 3 given; the recorded command leaves it at its default, the command's own "
        "(see --help) (rec.json); the given one is used",
    ]


# ----- a difference is said only where the effective value differs (after the defaults and the preset) ----------


def test_a_given_value_equal_to_the_recorded_effective_one_says_nothing(data, tmp_path, capsys):
    """--seeds 1337 is the default seed, max_steps and lr the smoke preset's own, all nine variants the default
    plan: the same runs and analysis as the record's, so no line says they differ."""
    from experiments.routing_test.run import DEFAULT_SELF_BIAS, make_variants
    from training.presets import resolve

    smoke = resolve("smoke").train
    every = ",".join(v.name for v in make_variants(DEFAULT_SELF_BIAS))
    base = ["--analyse-only", str(SMOKE), "--out", str(tmp_path / "out")]
    for given in (
        ["--seeds", str(smoke.seed)],
        ["--set", f"max_steps={smoke.max_steps}"],
        ["--set", f"lr={smoke.lr:.0e}"],  # 3e-3: another spelling of the preset's 0.003
        ["--variants", every],
        ["--preset", "smoke", "--margin", "0.05"],
    ):
        ctx, jobs = EXPERIMENT.context([*base, *given])
        assert len(jobs) == 9 and ctx.spec.preset == "smoke"
        printed = capsys.readouterr().out
        assert "given" not in printed, (given, printed)
    EXPERIMENT.context([*base, "--seeds", "1,2", "--set", "lr=1e-3", "--variants", "full"])
    said = [line.split(": ", 1)[1] for line in capsys.readouterr().out.splitlines() if "given" in line]
    where = f"({SMOKE / MANIFEST}); the given one is used"
    assert said == [
        f"--seeds 1,2 given; the recorded command leaves it at its default, {smoke.seed} {where}",
        f"--set lr=1e-3 given, no --set lr recorded, so lr={smoke.lr} {where}",
        f"--variants full given; the recorded command leaves it at its default, '{every}' {where}",
    ]


# ----- a recorded value the experiment refuses is traced to the file that records it --------------------------


def recorded_out(tmp_path: Path, command: str) -> Path:
    """An --out whose smoke/results-routing_test.json records `command` (its runs are not read before the options)."""
    source = tmp_path / "runs"
    (source / "smoke").mkdir(parents=True)
    (source / "smoke" / "results-routing_test.json").write_text(json.dumps({"command": command}))
    return source


@pytest.mark.parametrize(
    "recorded, refusal",
    [
        ("--margin -5", "--margin must be a finite number > 0, got -5.0"),
        ("--set n_ctx=2", "the routing test needs n_ctx >= 3, got --set n_ctx=2"),
        ("--variants fulll", "unknown variant(s) ['fulll']"),
        ("--set lr=fast", "lr expects a number, got 'fast'"),
    ],
)
def test_a_recorded_value_the_experiment_refuses_is_one_line_naming_its_file(data, tmp_path, capsys, recorded, refusal):
    command = f"python -m experiments.routing_test --preset smoke {recorded} --out runs/x"
    source = recorded_out(tmp_path, command)
    argv = ["--analyse-only", str(source), "--out", str(tmp_path / "out"), "--no-progress", "--no-report"]
    assert EXPERIMENT.main(argv) == 2
    err = capsys.readouterr().err
    where = source / "smoke" / "results-routing_test.json"
    assert err.count("\n") == 1 and err.startswith(f"error: {where} records `{command}`"), err
    assert refusal in err and "recorded there" in err
    assert not (tmp_path / "out").exists()


def test_a_refused_recorded_value_replaced_by_a_given_one_is_analysed_with_the_given(data, tmp_path, capsys):
    source = recorded_out(tmp_path, "python -m experiments.routing_test --preset smoke --margin -5 --out runs/x")
    ctx, _ = EXPERIMENT.context(["--analyse-only", str(source), "--out", str(tmp_path / "out"), "--margin", "0.2"])
    assert ctx.args.margin == 0.2 and ctx.spec.preset == "smoke"
    assert "--margin 0.2 given, -5.0 recorded" in capsys.readouterr().out


# ----- a `python -m training` --out: no command recorded, but every run's config.json records its preset -------


def trainer_out(tmp_path: Path, *presets: str) -> Path:
    """A folder laid out as `python -m training --out` writes it: <preset>/<variant>/seed<k>/config.json."""
    folder = tmp_path / "train"
    for preset in presets:
        run = folder / preset / "full" / "seed1337"
        run.mkdir(parents=True)
        (run / "config.json").write_text(json.dumps({"meta": {"preset": preset, "variant": "full", "seed": 1337}}))
    return folder


def test_a_trainer_out_is_analysed_at_the_preset_its_runs_record(data, tmp_path, capsys):
    folder = trainer_out(tmp_path, "smoke")
    ctx, jobs = EXPERIMENT.context(
        ["--analyse-only", str(folder), "--out", str(tmp_path / "out"), "--variants", "full"]
    )
    assert ctx.spec.preset == "smoke" and [j.group.spec.preset for j in jobs] == ["smoke"]
    assert capsys.readouterr().out.splitlines()[0] == (
        f"--analyse-only {folder}: the preset recorded with its runs ({folder}/*/*/seed*/config.json): --preset smoke"
    )
    ctx, _ = EXPERIMENT.context(["--analyse-only", str(folder), "--out", str(tmp_path / "out"), "--preset", "smoke"])
    assert ctx.spec.preset == "smoke" and "given" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "presets, refusal",
    [(("smoke", "phase-cell"), "holds runs of the presets phase-cell, smoke"), ((), "no run's config.json there")],
)
def test_a_folder_recording_no_single_preset_is_refused_naming_what_to_pass(data, tmp_path, capsys, presets, refusal):
    folder = trainer_out(tmp_path, *presets)
    folder.mkdir(exist_ok=True)
    argv = ["--analyse-only", str(folder), "--out", str(tmp_path / "out"), "--no-progress", "--no-report"]
    assert EXPERIMENT.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: --analyse-only {folder} records no command"), err
    assert refusal in err and "--preset" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage", ["", '{"schema": ', "[1, 2]"], ids=["empty", "truncated", "not-an-object"])
def test_a_damaged_manifest_is_named_as_damaged_not_as_missing(tmp_path, capsys, damage):
    """Without --preset the recorded command is read first; a MANIFEST.json it cannot read is said to be damaged."""
    folder = tmp_path / "shipped"
    shutil.copytree(SMOKE, folder)
    (folder / MANIFEST).write_text(damage)
    argv = ["--analyse-only", str(folder), "--out", str(tmp_path / "out"), "--no-progress", "--no-report"]
    assert EXPERIMENT.main(argv) == 2
    err = capsys.readouterr().err
    assert f"{folder / MANIFEST} is damaged" in err and "records no command" not in err

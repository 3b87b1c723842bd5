"""Shipped results (docs/results/data/) and --analyse-only (issue 45, parts 1 and 2).

Every folder under docs/results/data/ that holds a MANIFEST.json is re-analysed from its shipped logs alone,
with the command its MANIFEST records (--out elsewhere, --analyse-only the folder), and the recomputed results
must equal the shipped results file on every analysis key: all but software, wall_time_s, created, command and
what --analyse-only says it could not recompute (which must be left empty, never filled in). Equal exactly, but
for the floating-point computations another CPU rounds differently, each within the tolerance tests/shipped_compare.py
measures and justifies; and every digit the console and report print of them equal as printed. A folder the lead
ships is tested here without a line of test added. The folders are kept small: under 40 MiB in all (each folder
under docs/results/data with a manifest, written by `python -m experiments.shipping.ship`; `du -sh
docs/results/data` says how much they hold now).

The ship command and --analyse-only themselves are tested on a toy experiment declared here (one smoke run of
8 steps): shipping twice writes the same bytes and never a checkpoint or lock; a run the command plans that the
folder lacks is refused by name and nothing trains; an edited shipped file, a run of another configuration and
an analysis that reads the weights without declaring it are refused.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import math
import shlex
import tarfile
from pathlib import Path

import pytest
from conftest import REPO, data_root, has_shared_data
from offline import external_references
from shipped_compare import TOLERANCES, differences, printed

from experiments.cluster.launch import without
from experiments.runner.frame import Context, Experiment, Group, Variant, run_summary
from experiments.shipping.ship import ARCHIVE, MANIFEST, RUN_FILES, ShipError, main, read_shipped, run_path, ship

DATA = REPO / "docs" / "results" / "data"
LIMIT = 40 * 2**20
SHIPPED = sorted(p for p in DATA.iterdir() if (p / MANIFEST).is_file()) if DATA.is_dir() else []
# Keys that say when and how the analysis ran, not what it found.
NOT_ANALYSIS = {"software", "wall_time_s", "created", "command", "analysed_from", "not_recomputed"}


def test_shipped_folders_stay_small():
    total = sum(p.stat().st_size for p in DATA.rglob("*") if p.is_file())
    assert SHIPPED, "no shipped folder under docs/results/data"
    assert total < LIMIT, f"docs/results/data holds {total / 2**20:.1f} MiB, past {LIMIT // 2**20} MiB"


# Experiments whose analysis reads the logged losses and probes only: seconds at any preset.
FAST_ANALYSES = {"residual_sweep", "routing_test"}  # routing_test-default: 5 s


def _param(folder: Path):
    """A smoke folder, or a residual sweep at any preset (the paper-10m H200 logs: its 8 runs' final losses and
    curves), re-analyses in seconds; a full one of another experiment (floor-default recomputes its
    initialisation table: minutes on 2 cores) runs with the slow tests (`make test-slow`)."""
    manifest = json.loads((folder / MANIFEST).read_text())
    fast = manifest.get("preset") == "smoke" or manifest.get("experiment") in FAST_ANALYSES
    return pytest.param(folder, id=folder.name, marks=() if fast else pytest.mark.slow)


@pytest.mark.skipif(not has_shared_data(), reason="the shipped runs were trained on TinyShakespeare (../shared/data)")
@pytest.mark.parametrize("folder", [_param(p) for p in SHIPPED])
def test_shipped_folder_reanalyses_to_its_published_numbers(folder, data, tmp_path, capsys):
    manifest = json.loads((folder / MANIFEST).read_text())
    words = shlex.split(manifest["command"])
    assert words[:2] == ["python", "-m"] and words[2].startswith("experiments."), manifest["command"]
    name = words[2].split(".", 1)[1]
    experiment = importlib.import_module(f"experiments.{name}.run").EXPERIMENT
    # --collect (the H200 sweep's: its runs were trained by `python -m training`, then collected) trains nothing
    # either; --analyse-only takes its place
    argv = [*without(words[3:], "--out", "--collect"), "--out", str(tmp_path), "--analyse-only", str(folder)]
    assert experiment.main(argv) == 0, capsys.readouterr().err
    for report in tmp_path.glob(f"*/report-{name}.html"):  # where one is written without the weights: offline
        assert external_references(report.read_text(encoding="utf-8")) == []  # (issue 50; tests/offline.py)

    shipped = json.loads((folder / f"results-{name}.json").read_text())
    [written] = tmp_path.glob(f"*/results-{name}.json")
    recomputed = json.loads(written.read_text())
    assert recomputed["analysed_from"] == str(folder)
    left = recomputed["not_recomputed"]
    for key, why in left.items():  # named and left empty, never filled in
        assert why.startswith("not recomputable without checkpoints") and recomputed[key] is None
    skip = NOT_ANALYSIS | set(left)
    diff = differences(
        {k: v for k, v in shipped.items() if k not in skip},
        {k: v for k, v in recomputed.items() if k not in skip},
        TOLERANCES.get(name, {}),
    )
    assert not diff, f"{len(diff)} differ, first: {diff[:3]}"
    # and every digit printed of them (the console's table and summary): a number within its tolerance that
    # rounds the other way at a printed digit is a published number that changed
    as_shipped = {**shipped, **{k: recomputed[k] for k in left}}  # what is not recomputed is printed as such
    lines = printed(experiment, recomputed)
    assert printed(experiment, as_shipped) == lines, [
        (a, b) for a, b in zip(printed(experiment, as_shipped), lines, strict=False) if a != b
    ][:3]
    # every run_dir names the copy of its logs beside the recomputed results
    assert all((run_path(written.parent, r["run_dir"]) / "final.json").is_file() for r in recomputed["runs"])


def test_a_reanalysis_differs_only_where_another_cpu_rounds_and_only_that_much():
    """tests/shipped_compare.py: a count, a step, a word or a logged number moved by one ulp is a difference; a
    fitted parameter within 1e-6, an initialisation interval's end within 1e-4 of its cell's scale, are another
    CPU's rounding; past that they differ."""
    shipped = json.loads((DATA / "floor-smoke" / "results-floor.json").read_text())
    tolerances = TOLERANCES["floor"]

    def moved(path: str, change) -> list[str]:
        changed = copy.deepcopy(shipped)
        *keys, last = path.strip("/").split("/")
        parent = functools.reduce(lambda d, k: d[int(k)] if isinstance(d, list) else d[k], keys, changed)
        last = int(last) if isinstance(parent, list) else last
        parent[last] = change(parent[last])
        return differences(shipped, changed, tolerances)

    assert differences(shipped, copy.deepcopy(shipped), tolerances) == []
    assert moved("/runs/0/final_val_loss", lambda v: math.nextafter(v, math.inf))  # read from the logs
    assert moved("/runs/0/u", lambda v: math.nextafter(v, math.inf))
    assert moved("/runs/0/last_step", lambda v: v + 1) and moved("/runs/0/last_step", float)  # a step, not 240.0
    assert moved("/cells/0/n_escaped", lambda v: v + 1) and moved("/relation/n_refits", lambda v: v - 1)
    assert moved("/knob/ffn_only L1 240 steps qk8/held/held", lambda v: not v)  # a verdict
    assert not moved("/relation/b/value", lambda v: v * (1 + 5e-7))  # a fit: L-BFGS-B's stopping point
    assert moved("/relation/b/value", lambda v: v * (1 + 5e-6))
    assert not moved("/init/cells/4/cosine/lower", lambda v: v + 5e-5 * 0.26)  # of the cell's scale (its upper)
    assert moved("/init/cells/4/cosine/lower", lambda v: v + 5e-4 * 0.26)
    assert moved("/init/cells/4/depth", lambda v: v + 1)


def test_a_printed_digit_that_rounds_the_other_way_is_a_difference():
    """A fitted number within its tolerance can still print another digit: the console's and report's text of
    the recomputed results must be the shipped results' text (tests/shipped_compare.printed)."""
    from experiments.floor.run import EXPERIMENT

    shipped = json.loads((DATA / "floor-smoke" / "results-floor.json").read_text())
    edge = copy.deepcopy(shipped)
    edge["relation"]["b"]["value"] = 1.825  # printed 1.82 (shipped: 1.8202...) or 1.83, a hair apart
    below, above = copy.deepcopy(edge), copy.deepcopy(edge)
    below["relation"]["b"]["value"] = 1.825 * (1 - 1e-7)
    above["relation"]["b"]["value"] = 1.825 * (1 + 1e-7)
    assert differences(below, above, TOLERANCES["floor"]) == []
    assert printed(EXPERIMENT, below) != printed(EXPERIMENT, above)
    assert printed(EXPERIMENT, shipped) == printed(EXPERIMENT, copy.deepcopy(shipped))
    assert any(line.startswith("relation (controls") for line in printed(EXPERIMENT, shipped))
    assert any("residual [95%]" in line for line in printed(EXPERIMENT, shipped))  # the report's init table


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda p: p.name)
def test_a_shipped_folder_holds_one_command(folder):
    """Issue 50: escape_time-smoke's results recorded one --out and its MANIFEST.json named another."""
    [results] = folder.glob("results-*.json")
    assert json.loads(results.read_text())["command"] == json.loads((folder / MANIFEST).read_text())["command"]
    assert read_shipped(folder).manifest["command"]  # the reader checks the same


def test_the_routing_tests_identity_probes_are_named_as_not_recomputed():
    folder = DATA / "routing_test-smoke"
    shipped = json.loads((folder / "results-routing_test.json").read_text())
    assert shipped["identity"] is not None  # the shipped file has them; the re-analysis above must leave them out
    assert "--no-identity" not in json.loads((folder / MANIFEST).read_text())["command"]


# ----- the ship command and --analyse-only on a toy experiment ---------------------------------------------------

READS_WEIGHTS = {"on": False}


def analyse(ctx: Context, records: list[dict]) -> dict:
    if READS_WEIGHTS["on"]:  # an analysis that opens the checkpoint without declaring it (without_weights)
        from interp.model.gpt import ResidualGPT

        ResidualGPT.from_checkpoint(Path(records[0]["run_dir"]) / "ckpt.pt")
    runs = [run_summary(r) for r in records]
    return {"runs": runs, "mean": sum(r["final_val_loss"] for r in runs) / len(runs)}


TOY = Experiment(
    name="toy_shipped",
    schema="toy-shipped/1",
    doc="A toy experiment: one smoke run of a few steps.\n\nresults.json schema: ...",
    plan=lambda ctx: [Group(ctx.spec, [Variant.of(residual="full")])],
    analyse=analyse,
    table=lambda results: (["variant", "seed"], [[r["variant"], str(r["seed"])] for r in results["runs"]]),
    defaults=lambda spec: {
        "max_steps": 8,
        "eval_interval": 4,
        "ckpt_interval": 4,
        "log_interval": 2,
        "eval_batches": 2,
    },
    default_preset="smoke",
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The toy's --out: one finished run (seed 0) with its checkpoint, and its results."""
    out = tmp_path_factory.mktemp("toy_out")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESIDUAL_DATA_DIR", str(data_root()))
        assert TOY.main(["--out", str(out), "--seeds", "0", "--no-progress", "--no-report"]) == 0
    return out


@pytest.fixture
def shipped(trained, tmp_path) -> Path:
    dest = tmp_path / "shipped"
    ship(trained, dest)
    return dest


def no_training(monkeypatch):
    from training.trainer import Trainer

    def refuse(*args, **kwargs):
        raise AssertionError("--analyse-only trained")

    monkeypatch.setattr(Trainer, "run", refuse)
    monkeypatch.setattr("experiments.cluster.launch.train_local", refuse)


def test_ship_is_deterministic_and_ships_no_checkpoint(trained, tmp_path, capsys):
    assert (trained / "smoke" / "full" / "seed0" / "ckpt.pt").is_file()
    results = json.loads((trained / "smoke" / "results-toy_shipped.json").read_text())
    assert results["runs"][0]["run_dir"] == "full/seed0"  # relative to the results file's folder
    assert main([str(trained), str(tmp_path / "a")]) == 0
    assert "1 runs of toy_shipped (1 checked against their checkpoint" in capsys.readouterr().out
    ship(trained / "smoke", tmp_path / "b")  # the result folder itself is a source too
    names = {p.name for p in (tmp_path / "a").iterdir()}
    assert names == {"results-toy_shipped.json", ARCHIVE, MANIFEST}
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    with tarfile.open(tmp_path / "a" / ARCHIVE) as tar:
        members = tar.getmembers()
    assert sorted(m.name for m in members) == sorted(f"smoke/full/seed0/{n}" for n in RUN_FILES)
    assert all(m.mtime == 0 and m.uid == 0 and m.mode == 0o644 for m in members)
    manifest = json.loads((tmp_path / "a" / MANIFEST).read_text())
    assert manifest["command"] == results["command"] and manifest["runs"] == {"smoke/full/seed0": "checkpoint"}


def test_analyse_only_recomputes_the_results_from_the_logs(trained, shipped, tmp_path, monkeypatch, data):
    no_training(monkeypatch)
    out = tmp_path / "again"
    assert TOY.main(["--out", str(out), "--seeds", "0", "--no-progress", "--analyse-only", str(shipped)]) == 0
    before = json.loads((trained / "smoke" / "results-toy_shipped.json").read_text())
    after = json.loads((out / "smoke" / "results-toy_shipped.json").read_text())
    assert {k: v for k, v in after.items() if k not in NOT_ANALYSIS} == {
        k: v for k, v in before.items() if k not in NOT_ANALYSIS
    }
    assert after["not_recomputed"] == {} and not list(out.rglob("ckpt.pt"))
    # the same again into the same --out: the copies are the same files, and the shipped folder is untouched
    files = {p: p.read_bytes() for p in shipped.iterdir()}
    assert TOY.main(["--out", str(out), "--seeds", "0", "--no-progress", "--analyse-only", str(shipped)]) == 0
    assert files == {p: p.read_bytes() for p in shipped.iterdir()}


def test_an_analysed_folder_ships_only_with_the_command_that_trained_it(shipped, tmp_path, monkeypatch, data, capsys):
    # the analysed results' "command" names the analysing --out, a command that never trained these runs
    no_training(monkeypatch)
    out = tmp_path / "analysed"
    assert TOY.main(["--out", str(out), "--seeds", "0", "--no-progress", "--analyse-only", str(shipped)]) == 0
    capsys.readouterr()
    assert main([str(out), str(tmp_path / "again")]) == 2
    assert "was analysed with --analyse-only" in capsys.readouterr().err and not (tmp_path / "again").exists()
    command = json.loads((shipped / MANIFEST).read_text())["command"]
    # a command with other options than the analysis ran is not the one that trained these runs (issue 50)
    assert main([str(out), str(tmp_path / "again"), "--command", f"{command} --set lr=0.5"]) == 2
    assert "not the options" in capsys.readouterr().err and not (tmp_path / "again").exists()
    assert main([str(out), str(tmp_path / "again"), "--command", command]) == 0
    assert (tmp_path / "again" / ARCHIVE).read_bytes() == (shipped / ARCHIVE).read_bytes()  # the same runs
    assert json.loads((tmp_path / "again" / MANIFEST).read_text())["command"] == command
    # one command in the folder: the shipped results name it too, and still say they were analysed
    again = json.loads((tmp_path / "again" / "results-toy_shipped.json").read_text())
    assert again["command"] == command and again["analysed_from"] == str(shipped)
    read_shipped(tmp_path / "again")
    # its run is the one shipped, byte for byte: it keeps the check it was shipped with (its checkpoint stayed
    # where it trained); a copy whose logs differ from the listed ones is shipped as checked here, from its logs
    assert json.loads((tmp_path / "again" / MANIFEST).read_text())["runs"] == {"smoke/full/seed0": "checkpoint"}
    manifest = json.loads((shipped / MANIFEST).read_text())
    manifest["members"]["smoke/full/seed0/metrics.jsonl"]["sha256"] = "0" * 64
    (shipped / MANIFEST).write_text(json.dumps(manifest))
    assert main([str(out), str(tmp_path / "third"), "--command", command]) == 0
    assert json.loads((tmp_path / "third" / MANIFEST).read_text())["runs"] == {"smoke/full/seed0": "logs"}


def test_ship_refuses_a_command_other_than_the_one_its_results_record(trained, tmp_path, capsys):
    """Issue 50: a shipped folder holds one command; --command may not rename the --out the results record."""
    recorded = json.loads((trained / "smoke" / "results-toy_shipped.json").read_text())["command"]
    other = recorded.replace(str(trained), "runs/elsewhere")
    assert other != recorded
    assert main([str(trained), str(tmp_path / "a"), "--command", other]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "one command" in err and recorded in err and not (tmp_path / "a").exists()
    assert main([str(trained), str(tmp_path / "a"), "--command", recorded]) == 0  # the same one is no change


def test_a_shipped_folder_naming_two_commands_is_refused(shipped, tmp_path, monkeypatch, data, capsys):
    no_training(monkeypatch)
    manifest = json.loads((shipped / MANIFEST).read_text())
    manifest["command"] = manifest["command"].replace("--out ", "--out runs/elsewhere/", 1)
    (shipped / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ShipError, match="two commands"):
        read_shipped(shipped)
    argv = ["--out", str(tmp_path / "o"), "--seeds", "0", "--no-progress", "--analyse-only", str(shipped)]
    assert TOY.main(argv) == 2
    assert "two commands" in capsys.readouterr().err


def test_analyse_only_reads_a_runs_folder_whose_checkpoints_are_gone(trained, tmp_path, monkeypatch, data):
    import shutil

    no_training(monkeypatch)
    source = tmp_path / "kept"
    shutil.copytree(trained, source)
    (source / "smoke" / "full" / "seed0" / "ckpt.pt").unlink()
    out = tmp_path / "again"
    assert TOY.main(["--out", str(out), "--seeds", "0", "--no-progress", "--analyse-only", str(source)]) == 0
    before = json.loads((trained / "smoke" / "results-toy_shipped.json").read_text())
    after = json.loads((out / "smoke" / "results-toy_shipped.json").read_text())
    assert after["mean"] == before["mean"] and after["runs"] == before["runs"]


def test_an_older_results_file_with_absolute_run_dirs_ships_relative(trained, tmp_path):
    import shutil

    source = tmp_path / "old"
    shutil.copytree(trained, source)
    path = source / "smoke" / "results-toy_shipped.json"
    results = json.loads(path.read_text())
    results["runs"][0]["run_dir"] = str((source / "smoke" / "full" / "seed0").resolve())  # as files before issue 45
    path.write_text(json.dumps(results))
    ship(source, tmp_path / "dest")
    shipped = json.loads((tmp_path / "dest" / "results-toy_shipped.json").read_text())
    assert shipped["runs"][0]["run_dir"] == "full/seed0"


def test_analyse_only_refuses_a_missing_run_and_trains_nothing(shipped, tmp_path, monkeypatch, data, capsys):
    no_training(monkeypatch)
    out = tmp_path / "again"
    assert TOY.main(["--out", str(out), "--seeds", "0,1", "--no-progress", "--analyse-only", str(shipped)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "full seed 1 (smoke/full/seed1)" in err[0] and "trains nothing" in err[0], err
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()]


def test_analyse_only_refuses_another_configuration(shipped, tmp_path, monkeypatch, data, capsys):
    no_training(monkeypatch)
    argv = ["--out", str(tmp_path / "o"), "--seeds", "0", "--no-progress", "--analyse-only", str(shipped)]
    assert TOY.main([*argv, "--set", "lr=0.5"]) == 2
    err = capsys.readouterr().err
    # the logged run is not what the options ask for; another --out would not help, so the message names neither
    assert "trained with other options than this command asks for (train.lr" in err and "--out" not in err


def test_analyse_only_refuses_an_edited_shipped_file(shipped, tmp_path, monkeypatch, data, capsys):
    no_training(monkeypatch)
    results = shipped / "results-toy_shipped.json"
    results.write_text(results.read_text().replace('"mean": ', '"mean": 1', 1))
    argv = ["--out", str(tmp_path / "o"), "--seeds", "0", "--no-progress", "--analyse-only", str(shipped)]
    assert TOY.main(argv) == 2
    assert "results-toy_shipped.json is not the file shipped (sha256)" in capsys.readouterr().err


def test_analyse_only_never_fills_in_what_needs_the_weights(shipped, tmp_path, monkeypatch, data, capsys):
    no_training(monkeypatch)
    monkeypatch.setitem(READS_WEIGHTS, "on", True)
    out = tmp_path / "o"
    assert TOY.main(["--out", str(out), "--seeds", "0", "--no-progress", "--analyse-only", str(shipped)]) == 2
    err = capsys.readouterr().err
    assert "reads the weights" in err and "not recomputable without checkpoints" in err
    assert not (out / "smoke" / "results-toy_shipped.json").exists()


def test_analyse_only_never_writes_into_the_folder_it_reads(shipped, monkeypatch, data, capsys):
    no_training(monkeypatch)
    argv = ["--out", str(shipped / "x"), "--seeds", "0", "--no-progress", "--analyse-only", str(shipped)]
    assert TOY.main(argv) == 2
    assert "is inside --analyse-only" in capsys.readouterr().err


def test_interventions_are_refused_without_checkpoints(tmp_path, capsys):
    from experiments.interventions.run import EXPERIMENT

    argv = ["--preset", "smoke", "--out", str(tmp_path / "o"), "--analyse-only", str(tmp_path)]
    assert EXPERIMENT.main(argv) == 2
    assert "not recomputable without checkpoints" in capsys.readouterr().err


# ----- docs/results/paper_10m.md: the page of the shipped H200 logs (issue 49 part 5) ------------------------------

H200 = DATA / "residual_sweep-paper_10m-h200"
PAPER_10M_PAGE = REPO / "docs" / "results" / "paper_10m.md"


def test_the_paper_10m_page_is_the_shipped_h200_logs():
    """The page's Table 1 rows are the shipped results file's (which the re-analysis above recomputes from the
    logs), and its alpha_tt rows each run's last attention probe in the shipped probes.jsonl: re-derived, never
    copied by hand."""
    from benchmarks.gpu_rows import h200_finals, h200_results, shipped_alpha_tt

    page = PAPER_10M_PAGE.read_text()
    results = h200_results(H200)
    assert results["preset"] == "paper-10m" and results["seeds"] == [1337, 1338]
    finals = h200_finals(results)
    for name, c in results["configs"].items():
        f, b = c["final_val_loss"], c["best_val_loss"]
        cells = [
            f"`{name}`",
            f"{f['mean']:.3f} +/- {f['std']:.3f}",
            *(f"{finals[name][s]:.4f}" for s in (1337, 1338)),
            f"{b['mean']:.3f} +/- {b['std']:.3f}",
            c["classification"],
            c["paper"]["text"],
            f"{c['delta_vs_paper']:+.3f}",
        ]
        row = "| " + " | ".join(cells) + " |"
        assert row in page, row
    for variant in ("attn_only", "full"):
        alpha = shipped_alpha_tt(H200, variant)
        assert sorted(alpha) == [1337, 1338]
        for seed, a in alpha.items():
            assert a["step"] == 3000 and len(a["alpha_tt_layer_mean"]) == 6
            row = f"| {variant} seed {seed} | " + " | ".join(f"{x:.2f}" for x in a["alpha_tt_layer_mean"]) + " |"
            assert row in page, row


def test_a_run_the_trainer_cli_labelled_is_read_as_the_experiments_and_nothing_else():
    """The H200 runs' config.json says meta {preset, variant} (`python -m training` writes no seed label; an
    experiment's runs do): --analyse-only reads them with their own labels, and refuses any other difference."""
    from experiments.runner.analyse_only import labels_as_logged

    asked = {"train": {"seed": 7}, "meta": {"preset": "smoke", "variant": "full", "seed": 7}}
    cli = {"train": {"seed": 7}, "meta": {"preset": "smoke", "variant": "full"}}
    assert labels_as_logged(cli, asked) == {**asked, "meta": cli["meta"]}
    for meta in ({"preset": "smoke", "variant": "attn_only"}, {"preset": "cpu-quick", "variant": "full"}, {}):
        assert labels_as_logged({**cli, "meta": meta}, asked) is asked  # another run's labels: still refused
    assert labels_as_logged({**cli, "train": {"seed": 8}}, asked) is asked  # another seed's run
    assert labels_as_logged(asked, asked) is asked


def test_shipping_again_replaces_its_own_folder_and_nothing_else(trained, shipped, tmp_path):
    """A folder holds one command: shipping into an earlier shipment of the same experiment replaces it (a file
    the new one does not write goes); another experiment's shipment, or files no MANIFEST lists, are refused
    and left as they were."""
    (shipped / "predictions-old.json").write_text("{}")
    manifest = json.loads((shipped / MANIFEST).read_text())
    manifest["files"]["predictions-old.json"] = {"sha256": "0" * 64, "bytes": 2}
    (shipped / MANIFEST).write_text(json.dumps(manifest))
    ship(trained, shipped)
    assert {p.name for p in shipped.iterdir()} == {"results-toy_shipped.json", ARCHIVE, MANIFEST}
    read_shipped(shipped)

    other = tmp_path / "other"
    other.mkdir()
    (other / MANIFEST).write_text(json.dumps({**manifest, "experiment": "floor"}))
    (other / "results-floor.json").write_text("{}")
    with pytest.raises(ShipError, match="a shipment of 'floor', not 'toy_shipped'"):
        ship(trained, other)
    assert {p.name for p in other.iterdir()} == {MANIFEST, "results-floor.json"}

    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "notes.txt").write_text("mine")
    with pytest.raises(ShipError, match="notes.txt, not an earlier shipment's"):
        ship(trained, loose)
    assert (loose / "notes.txt").read_text() == "mine"


def test_a_shipped_folder_holding_a_file_its_manifest_does_not_list_is_refused(shipped):
    (shipped / "results-floor.json").write_text("{}")  # a second command's results beside the listed one
    with pytest.raises(ShipError, match="results-floor.json, which MANIFEST.json does not list"):
        read_shipped(shipped)

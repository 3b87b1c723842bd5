"""Regression tests from the audit of issue 45 (/tmp/audit45): shipping refuses a run directory that holds
another run's files, and the survival statistics' edge cases read as their rules say."""

from pathlib import Path

import pytest

from experiments.escape_time import survival
from experiments.shipping.ship import ShipError, read_shipped, ship

SHIPPED = Path(__file__).resolve().parents[1] / "docs/results/data/routing_test-smoke"


def _unpack(out: Path) -> Path:
    """The shipped routing test as an experiment's --out (logs only): <out>/smoke/<variant>/seed<k>/..."""
    shipped = read_shipped(SHIPPED)
    for name, data in shipped.members.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    (out / "smoke" / shipped.results_path.name).write_bytes(shipped.results_path.read_bytes())
    return out


def test_ship_refuses_a_run_dir_holding_another_runs_files(tmp_path: Path) -> None:
    out = _unpack(tmp_path / "out")
    ship(out, tmp_path / "ok")  # as unpacked, it ships
    runs = sorted(p for p in (out / "smoke").glob("*/seed*") if p.is_dir())
    first, other = runs[0], next(p for p in runs if p.parent != runs[0].parent)
    for f in other.iterdir():  # another variant's run, copied over the first one's files
        (first / f.name).write_bytes(f.read_bytes())
    with pytest.raises(ShipError, match="is not the run the results list there"):
        ship(out, tmp_path / "bad")


@pytest.mark.parametrize("n", [4, 16])
@pytest.mark.parametrize("spread", [False, True])
def test_every_run_escaped_upper_bound_is_exact(n: int, spread: bool) -> None:
    times = [100 + 25 * i * spread for i in range(n)]
    km = survival.kaplan_meier(times, [True] * n)
    assert km["survival"][-1] == 0.0
    assert km["upper"][-1] == pytest.approx({4: 0.6024, 16: 0.2059}[n], abs=1e-4)


def test_median_lands_on_a_step_where_survival_is_exactly_half_after_censoring() -> None:
    # 9 runs: 3 escape at 100 (S = 2/3), 2 censored at 150, 1 of the 4 left escapes at 200 (S = 2/3 * 3/4 = 1/2)
    times = [100] * 3 + [150] * 2 + [200, 300, 400, 500]
    escaped = [True] * 3 + [False] * 2 + [True] * 4
    assert survival.median_escape(survival.kaplan_meier(times, escaped))["median"] == 200


def _damaged(tmp_path: Path, damage: str) -> Path:
    """A copy of the shipped routing test whose MANIFEST.json or archive is damaged as `damage` says."""
    import json
    import shutil

    from experiments.shipping.ship import sha256

    folder = tmp_path / damage
    shutil.copytree(SHIPPED, folder)
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    if damage == "files_a_list":
        manifest["files"] = list(manifest["files"])
    elif damage == "member_a_string":
        manifest["members"][sorted(manifest["members"])[0]] = "0" * 64
    elif damage == "archive_not_xz":  # listed with its own sha256: only reading it finds it out
        (folder / "runs.tar.xz").write_bytes(b"not an xz archive")
        manifest["files"]["runs.tar.xz"] = {"sha256": sha256(b"not an xz archive"), "bytes": 17}
    (folder / "MANIFEST.json").write_text(json.dumps(manifest))
    return folder


@pytest.mark.parametrize("damage", ["files_a_list", "member_a_string", "archive_not_xz"])
def test_a_damaged_manifest_or_archive_is_refused_by_name_not_a_traceback(tmp_path: Path, damage: str) -> None:
    folder = _damaged(tmp_path, damage)
    with pytest.raises(ShipError, match="MANIFEST.json is damaged|runs.tar.xz is not a readable"):
        read_shipped(folder)


def test_the_notebook_names_no_command_that_writes_into_a_shipped_folder() -> None:
    # it said `--out docs/results/data/escape_time-smoke` wrote that folder; ship did (MANIFEST.json's command)
    notebook = (Path(__file__).resolve().parents[1] / "docs/notebook.py").read_text()
    assert "--out docs/results/data" not in notebook
    assert 'MANIFEST.json").read_text())["command"]' in notebook


def test_a_probed_run_without_its_probes_is_neither_shipped_nor_analysed(tmp_path: Path, monkeypatch, capsys) -> None:
    # shipped without probes.jsonl, a probed run dropped out of the probe-reading analyses unsaid (the
    # escape-time mechanism read 6 escaped runs instead of 7: 270 numbers moved)
    from conftest import data_root

    from experiments.routing_test.run import EXPERIMENT

    out = _unpack(tmp_path / "out")
    probed = next(p for p in sorted((out / "smoke").glob("*/seed*")) if (p / "probes.jsonl").is_file())
    (probed / "probes.jsonl").unlink()
    with pytest.raises(ShipError, match="lacks probes.jsonl"):
        ship(out, tmp_path / "bad")
    monkeypatch.setenv("RESIDUAL_DATA_DIR", str(data_root()))
    argv = ["--preset", "smoke", "--no-progress", "--out", str(tmp_path / "again"), "--analyse-only", str(out)]
    assert EXPERIMENT.main(argv) == 2
    assert "probes.jsonl where probed" in capsys.readouterr().err

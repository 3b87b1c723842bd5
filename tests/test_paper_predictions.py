"""The paper-scale prediction files: each version reads, and a run's seeds are scored against it as promised."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest

from experiments.floor import paper_scale as ps


def _results(preset: str, finals: dict[str, list[float]], unigram: float = 3.35, **train) -> dict:
    runs = [{"variant": v, "seed": i, "final_val_loss": f} for v, fs in finals.items() for i, f in enumerate(fs)]
    train = {"lr_schedule": "cosine", "warmup_steps": 100, "lr": 3e-4, "min_lr": 3e-5, **train}
    return {"preset": preset, "reference_levels": {"unigram": unigram}, "config": {"train": train}, "runs": runs}


def test_every_committed_version_loads_and_the_newest_is_the_highest_number():
    found = ps.versions()
    assert found and found[0].name == "paper_scale-v1.json"
    for path in found:
        doc = ps.load(path)
        assert doc["arms"] and doc["routing"] and doc["written"]
    assert ps.newest()[0] == found[-1]


def test_each_revision_names_every_arm_whose_band_or_refutation_it_changed():
    """A reader of version N sees what moved since the version it revises: the arms whose p_floor or refuted_if
    differ are exactly those its revises.changed names, with the old and new values as the files hold them."""
    docs = {ps.load(p)["version"]: ps.load(p) for p in ps.versions()}
    for version, doc in docs.items():
        if "revises" not in doc:
            continue
        before = {a["id"]: a for a in docs[doc["revises"]["version"]]["arms"]}
        moved = {a["id"] for a in doc["arms"] if any(a[k] != before[a["id"]][k] for k in ("p_floor", "refuted_if"))}
        named = {c["arm"]: c for c in doc["revises"]["changed"]}
        assert set(named) == moved, (version, sorted(named), sorted(moved))
        for arm_id, change in named.items():
            now = next(a for a in doc["arms"] if a["id"] == arm_id)
            for k in ("p_floor", "refuted_if"):
                assert change[k] == {"from": before[arm_id][k], "to": now[k]}, (version, arm_id, k)


def test_versions_sort_by_number_not_by_name(tmp_path):
    for v in (1, 2, 10):
        (tmp_path / f"paper_scale-v{v}.json").write_text("{}")
    assert [p.name for p in ps.versions(tmp_path)] == [f"paper_scale-v{v}.json" for v in (1, 2, 10)]


def test_the_count_on_the_floor_is_held_inside_the_binomial_interval_and_failed_outside():
    doc = ps.load(ps.versions()[0])
    # attn_only at paper-10m, preset schedule: p_floor at most 0.12, binomial 95% quantile 3 of 8: 5 of 8 fails
    ok = ps.score_arms(doc, [_results("paper-10m", {"attn_only": [1.58] * 8})])
    bad = ps.score_arms(doc, [_results("paper-10m", {"attn_only": [3.34] * 5 + [1.58] * 3})])
    row = {r["check"]: r for r in ok}["p10-attn_only"]
    assert row["result"] == "0 of 8 on the floor: held" and row["against"].endswith("0-3 of 8")
    assert {r["check"]: r for r in bad}["p10-attn_only"]["result"] == "5 of 8 on the floor: failed"


def test_a_run_is_on_the_floor_within_the_margin_of_the_unigram_level_of_its_own_batches():
    doc = ps.load(ps.versions()[0])
    # 3.31 is within 0.05 of a 3.35 unigram level: on the floor; 3.29 is not
    rows = {r["check"]: r for r in ps.score_arms(doc, [_results("paper-10m", {"ffn_only": [3.31, 3.29]})])}
    assert rows["p10-ffn_only"]["result"].startswith("1 of 2 on the floor")


def test_the_schedule_decides_which_arm_a_run_scores():
    doc = ps.load(ps.versions()[0])
    constant = _results("paper-10m", {"attn_only": [3.34] * 4}, lr_schedule="constant", warmup_steps=0)
    other = _results("paper-10m", {"attn_only": [3.34] * 4}, warmup_steps=50)  # neither the preset's nor constant
    rows = {r["check"]: r for r in ps.score_arms(doc, [constant])}
    assert rows["p10-attn_only-constant"]["result"].startswith("4 of 4 on the floor")
    assert rows["p10-attn_only"]["result"] == "not run by this check"
    assert all(r["result"] == "not run by this check" for r in ps.score_arms(doc, [other]))


def test_an_interval_that_holds_every_count_says_it_tests_nothing():
    doc = ps.load(ps.versions()[0])
    rows = {
        r["check"]: r
        for r in ps.score_arms(
            doc, [_results("paper-10m", {"attn_only": [1.5, 3.34]}, lr_schedule="constant", warmup_steps=0)]
        )
    }
    assert "no test" in rows["p10-attn_only-constant"]["result"]


def test_routing_verdicts_are_compared_one_by_one():
    doc = ps.load(ps.versions()[0])
    rows = {r["check"]: r for r in ps.score_routing(doc, {"verdicts": [{"id": "P2", "verdict": "supports"}]})}
    assert rows["P2"]["result"] == "supports: not as predicted" and rows["P1"]["result"] == "not run by this check"


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda d: d.update(schema="other/1"), "schema"),
        (lambda d: d["arms"][0]["p_floor"].update(low=0.5, mid=0.1), "low <= mid <= high"),
        (lambda d: d["arms"][0].update(schedule="warmup"), "schedule"),
        (lambda d: d["arms"][0].update(extra=1), "exactly the fields"),
        (lambda d: d["floor_rule"].update(margin=float("nan")), "margin"),
        (lambda d: d["routing"][0].update(verdict="maybe"), "verdict"),
    ],
)
def test_a_malformed_prediction_file_is_one_error(tmp_path, edit, words):
    doc = json.loads(ps.versions()[0].read_text())
    edit(doc)
    path = tmp_path / "paper_scale-v1.json"  # its version field says 1
    path.write_text(json.dumps(doc))
    with pytest.raises(ps.PredictionFileError, match=words):
        ps.load(path)


def _v2() -> dict:
    return json.loads((ps.FOLDER / "paper_scale-v2.json").read_text())


def _write(folder, version: int, doc: dict | str):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"paper_scale-v{version}.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=1))
    return path


def test_every_file_in_the_predictions_folder_is_a_committed_version_matching_its_pinned_sha256():
    files = sorted(ps.FOLDER.iterdir())
    assert files and {int(p.name[len("paper_scale-v") : -len(".json")]) for p in files} == set(ps.PINNED)
    for path in files:
        version = int(path.name[len("paper_scale-v") : -len(".json")])
        assert hashlib.sha256(path.read_bytes()).hexdigest() == ps.PINNED[version], path.name
        assert ps.load(path)["version"] == version


def test_the_pins_are_the_bytes_git_holds_for_each_committed_version():
    for version, pin in ps.PINNED.items():
        name = f"docs/results/predictions/paper_scale-v{version}.json"
        try:
            held = subprocess.run(["git", "show", f"HEAD:{name}"], cwd=ps.REPO, capture_output=True, check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            pytest.skip(f"no git history here ({e})")
        assert hashlib.sha256(held.stdout).hexdigest() == pin, name


@pytest.mark.parametrize("value", ["abc", 0, -1.0, True, False, None, [12.0]])
def test_an_arm_whose_qk_scale_is_no_positive_number_is_refused_by_load_naming_the_file_and_the_arm(tmp_path, value):
    doc = _v2()
    doc["arms"][7]["qk_scale"] = value  # p10-ffn_only-qk12
    with pytest.raises(ps.PredictionFileError, match=r"paper_scale-v2\.json: arm p10-ffn_only-qk12's qk_scale"):
        ps.load(_write(tmp_path, 2, doc))


def _routing(doc: dict, i: int, **change) -> None:
    doc["routing"][i].update(change)


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda d: d.update(version=7), "version field is 7, not the 2 its name says"),
        (lambda d: d.update(version="2"), "version field is '2'"),
        (lambda d: d.update(version=2.0), "version field is 2.0"),
        (lambda d: d.pop("version"), "no version"),
        (lambda d: d["arms"][0]["p_floor"].update(low=False), "arm p10-full's p_floor"),
        (lambda d: d["arms"][3]["p_floor"].update(high=True), "arm p10-none's p_floor"),
        (lambda d: d["arms"][0]["p_floor"].update(mode=0.01), "arm p10-full's p_floor"),
        (lambda d: d["arms"][0]["p_floor"].pop("mid"), "arm p10-full's p_floor"),
        (lambda d: d["floor_rule"].update(margin=True), "margin"),
        (lambda d: d.update(floor_rule=[0.05]), "margin"),
        (lambda d: _routing(d, 0, p=True), "routing P1's p True should be a valid number"),
        (lambda d: _routing(d, 0, p="0.9"), "routing P1's p '0.9' should be a valid number"),
        (lambda d: d["arms"][0].update(preset="paper-1b"), "arm p10-full's preset 'paper-1b'"),
        (lambda d: d["arms"][1].update(residual="attn"), "arm p10-attn_only's residual 'attn'"),
        (lambda d: d["arms"][1].update(id="p10-full"), "arm id.s. p10-full appear more than once"),
        (lambda d: d["arms"][1].update(id=""), "arm 1's id '' is not a non-empty string"),
        (lambda d: d["arms"][1].update(id=5), "arm 1's id 5"),
        (lambda d: d["arms"][2].update(why="  "), "arm p10-ffn_only's why"),
        (lambda d: d["arms"][2].update(refuted_if=3), "arm p10-ffn_only's refuted_if"),
        (lambda d: _routing(d, 6, id="P8"), "routing 6's id 'P8' should match pattern"),
        (lambda d: _routing(d, 6, id="p7"), "routing 6's id 'p7'"),
        (lambda d: _routing(d, 6, id="P1"), "routing id.s. P1 appear more than once"),
        (lambda d: _routing(d, 2, preset="tiny"), "routing P3's preset 'tiny'"),
        (lambda d: _routing(d, 2, why=""), "routing P3's why"),
        (lambda d: _routing(d, 2, extra=1), "routing 2 .'P3'. has exactly the fields"),
        (lambda d: d.update(written=""), "written '' is not an ISO 8601 time"),
        (lambda d: d.update(written="yesterday"), "written 'yesterday'"),
        (lambda d: d.update(what=""), "what '' is not a non-empty string"),
        (lambda d: d.update(basis=None), "basis None"),
        (lambda d: d.pop("arms"), "no arms"),
        (lambda d: d.update(arms=[]), "arms is a list of at least one arm"),
        (lambda d: d.update(routing={}), "routing is a list"),
        (lambda d: d["revises"].update(version=2), "revises.version 2 is not an earlier version"),
    ],
)
def test_a_field_that_is_not_what_the_schema_says_is_refused_naming_the_file_and_where(tmp_path, edit, words):
    doc = _v2()
    edit(doc)
    with pytest.raises(ps.PredictionFileError, match=r"paper_scale-v2\.json.*" + words):
        ps.load(_write(tmp_path, 2, doc))


@pytest.mark.parametrize(
    "old, new, words",
    [
        ('"qk_scale": 12.0', '"qk_scale": NaN', r"arms\[7\]\.qk_scale is NaN"),
        ('"qk_scale": 12.0', '"qk_scale": Infinity', r"arms\[7\]\.qk_scale is Infinity"),
        ('"p": 0.95', '"p": -Infinity', r"routing\[0\]\.p is -Infinity"),
        ('"version": 1,\n  "changed"', '"version": NaN,\n  "changed"', r"revises\.version is NaN"),
        ('"margin": 0.05', '"margin": NaN', r"floor_rule\.margin is NaN"),
        ('"version": 2,', '"version": 2,\n "version": 7,', "repeats the key"),  # json would keep the last
    ],
)
def test_nan_infinity_or_a_repeated_key_anywhere_in_the_file_is_refused_saying_where(tmp_path, old, new, words):
    text = (ps.FOLDER / "paper_scale-v2.json").read_text()
    assert old in text
    with pytest.raises(ps.PredictionFileError, match=r"paper_scale-v2\.json: .*" + words):
        ps.load(_write(tmp_path, 2, text.replace(old, new, 1)))


def test_an_edited_committed_version_is_refused_as_not_the_committed_one(tmp_path):
    text = (ps.FOLDER / "paper_scale-v2.json").read_text()
    edited = text.replace('"mid": 0.85', '"mid": 0.8', 1)  # a valid file, one band moved
    assert edited != text
    with pytest.raises(ps.PredictionFileError, match=r"paper_scale-v2\.json is not the committed version 2 \(sha256"):
        ps.load(_write(tmp_path, 2, edited))
    with pytest.raises(ps.PredictionFileError, match="a revision is a new version file, and its sha256 is pinned in"):
        ps.load(_write(tmp_path, 2, text + "\n"))  # a byte added
    assert ps.load(_write(tmp_path, 2, text))["version"] == 2  # the committed bytes, wherever they lie
    assert ps.load(_write(tmp_path, 2, edited), pins=None)["arms"][7]["p_floor"]["mid"] == 0.8  # a draft, not pinned


def test_a_version_with_no_pin_is_refused_until_its_sha256_is_pinned(tmp_path):
    doc, new = _v2(), max(ps.PINNED) + 1
    doc["version"] = new
    path = _write(tmp_path, new, doc)
    with pytest.raises(ps.PredictionFileError, match=f"version {new} has no sha256 pinned in experiments/floor/paper"):
        ps.load(path)
    pins = {**ps.PINNED, new: hashlib.sha256(path.read_bytes()).hexdigest()}
    assert ps.load(path, pins)["version"] == new


def _committed(folder) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for path in ps.versions():
        shutil.copyfile(path, folder / path.name)


def test_newest_refuses_a_folder_where_any_version_was_edited_removed_or_left_unpinned(tmp_path):
    _committed(tmp_path / "ok")
    path, doc = ps.newest(tmp_path / "ok")
    newest = max(ps.PINNED)
    assert path.name == f"paper_scale-v{newest}.json" and doc["version"] == newest
    _committed(tmp_path / "old-edited")
    (tmp_path / "old-edited" / "paper_scale-v1.json").write_text(
        (ps.FOLDER / "paper_scale-v1.json").read_text().replace('"mid": 0.6', '"mid": 0.7', 1)
    )
    with pytest.raises(ps.PredictionFileError, match=r"paper_scale-v1\.json is not the committed version 1"):
        ps.newest(tmp_path / "old-edited")
    _committed(tmp_path / "new-unpinned")
    doc = _v2()
    doc["version"] = newest + 1
    _write(tmp_path / "new-unpinned", newest + 1, doc)
    with pytest.raises(ps.PredictionFileError, match=f"version {newest + 1} has no sha256 pinned"):
        ps.newest(tmp_path / "new-unpinned")
    _committed(tmp_path / "removed")
    (tmp_path / "removed" / "paper_scale-v2.json").unlink()  # v1 would be scored as the newest
    with pytest.raises(ps.PredictionFileError, match=r"paper_scale-v2\.json pinned but missing"):
        ps.newest(tmp_path / "removed")


def test_a_version_file_not_named_by_its_number_is_refused(tmp_path):
    _committed(tmp_path)
    shutil.copyfile(tmp_path / "paper_scale-v2.json", tmp_path / "paper_scale-v02.json")
    with pytest.raises(ps.PredictionFileError, match=r"paper_scale-v02\.json: a prediction file is named"):
        ps.versions(tmp_path)


@pytest.mark.parametrize(
    "written, words",
    [
        ("2999-01-01T00:00:00+00:00", "is in the future"),
        ("2026-12-06T11:24:00", "needs a time of day and its zone"),
        ("2026-12-06", "needs a time of day and its zone"),
    ],
)
def test_a_prediction_written_in_the_future_or_at_no_zoned_time_is_refused(tmp_path, written, words):
    doc = _v2()
    doc["written"] = written
    with pytest.raises(ps.PredictionFileError, match=r"written .* is not an ISO 8601 time with its zone"):
        ps.load(_write(tmp_path, 2, doc), pins=None)

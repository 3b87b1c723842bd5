"""The paper-scale prediction files: each version reads, and a run's seeds are scored against it as promised."""

from __future__ import annotations

import json

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
    path = tmp_path / "paper_scale-v9.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ps.PredictionFileError, match=words):
        ps.load(path)

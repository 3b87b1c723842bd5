"""The main job on the smoke preset: results.json schema, every verdict, a self-contained report, resume."""

import json
import math
import re
import shutil

import pytest
from conftest import SHARED_DATA

from experiments import routing_test

PREDICTIONS = ["P1", "P2", "P3", "P4", "P5", "P6", "P7"]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    if not (SHARED_DATA / "tinyshakespeare" / "input.txt").is_file():
        pytest.skip(f"offline data not found at {SHARED_DATA}")
    mp = pytest.MonkeyPatch()
    mp.setenv("RESIDUAL_DATA_DIR", str(SHARED_DATA))
    out = tmp_path_factory.mktemp("routing")
    assert routing_test.run(["--preset", "smoke", "--out", str(out), "--no-progress"]) == 0
    yield out
    mp.undo()


def test_results_schema_and_every_verdict(smoke_run, capsys):
    results = json.loads((smoke_run / "smoke" / "results.json").read_text())
    for key in ("schema", "experiment", "preset", "seeds", "margin", "self_bias", "config", "reference_levels",
                "runs", "variants", "verdicts", "software", "wall_time_s", "train_wall_time_s", "created"):
        assert key in results, key
    assert results["schema"] == "routing-test/1" and results["preset"] == "smoke"
    names = [v.name for v in routing_test.make_variants()]
    assert list(results["variants"]) == names and len(results["runs"]) == 9
    levels = results["reference_levels"]
    assert 3.2 < levels["unigram"] < 3.45 and 2.4 < levels["bigram"] < 2.55
    for run in results["runs"]:
        assert math.isfinite(run["final_val_loss"]) and run["wall_time_s"] > 0
        assert run["val_curve"]["steps"][-1] == 40
        assert run["block0_grad"]["steps"][0] == 0
        assert (run["alpha_tt"] is None) == (run["variant"] == "attn_only + position_blind")
    assert results["variants"]["ffn_only + self_only"]["alpha_tt_layer_mean"] == [1.0, 1.0]
    assert results["variants"]["attn_only + no_self"]["alpha_tt_layer_mean"] == [0.0, 0.0]
    assert [v["id"] for v in results["verdicts"]] == PREDICTIONS
    for v in results["verdicts"]:
        assert v["verdict"] in ("supports", "contradicts", "inconclusive")
        assert v["measured"] and v["rule"] and v["separation"]
    assert results["config"]["variants"]["attn_only + no_self"]["self_bias"] == "-inf"  # strict JSON


def test_report_is_self_contained(smoke_run):
    page = (smoke_run / "smoke" / "report.html").read_text()
    assert not re.search(r"<script[^>]+src=[\"']?https?:", page)
    assert page.count("Plotly.newPlot") >= 10 and len(page) > 3_000_000  # plotly.js is inline
    for heading in ("Verdicts", "Validation loss", "alpha_tt", "Gradient flow", "Hidden-norm", "Attention patterns"):
        assert heading in page


def test_rerun_after_a_kill_retrains_only_what_is_missing(smoke_run):
    first = json.loads((smoke_run / "smoke" / "results.json").read_text())
    victim = smoke_run / "smoke" / "attn_only_uniform" / "seed1337"
    finals = (smoke_run / "smoke").glob("*/seed1337/final.json")
    kept = {p: p.stat().st_mtime_ns for p in finals if victim not in p.parents}
    shutil.rmtree(victim)  # as if killed before this run started
    assert routing_test.run(["--preset", "smoke", "--out", str(smoke_run), "--no-progress", "--no-report"]) == 0
    assert {p: p.stat().st_mtime_ns for p in kept} == kept
    again = json.loads((smoke_run / "smoke" / "results.json").read_text())
    numbers = lambda r: [(x["variant"], x["final_val_loss"], x["alpha_tt"], x["growth"]) for x in r["runs"]]  # noqa: E731
    assert numbers(again) == numbers(first)
    assert again["verdicts"] == first["verdicts"]


def test_bad_variant_is_one_error_line(capsys):
    assert routing_test.run(["--variants", "attn_only,bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown variant(s) ['bogus']") and err.count("\n") == 1


def test_place_rule():
    levels = {"unigram": 3.35, "bigram": 2.48}
    assert routing_test.place(3.34, levels, 1.7, 0.05) == "at the unigram floor"
    assert routing_test.place(2.50, levels, 1.7, 0.05) == "at the bigram level"
    assert routing_test.place(2.90, levels, 1.7, 0.05) == "between bigram and floor"
    assert routing_test.place(1.74, levels, 1.7, 0.05) == "near full"
    assert routing_test.place(2.10, levels, 1.7, 0.05) == "below bigram (uses context)"


def _v(mean, alpha=None, std=0.0, n=1):
    loss = {"mean": mean, "std": std, "min": mean, "max": mean, "n": n}
    return {"final_val_loss": loss, "alpha_tt_layer_mean": alpha, "uniform_baseline": 0.04}


def test_verdicts_follow_the_numbers():
    """Constructed outcomes: the routing story holding everywhere, then failing everywhere."""
    levels = {"unigram": 3.35, "bigram": 2.48}
    holds = {
        "full": _v(1.9, [0.2] * 4), "attn_only": _v(2.0, [0.9] * 4), "ffn_only": _v(3.34), "none": _v(3.35),
        "attn_only + position_blind": _v(3.34), "attn_only + uniform": _v(2.3),
        "attn_only + no_self": _v(2.9), "ffn_only + self_only": _v(2.49), "ffn_only + self_bias": _v(2.2),
    }
    assert [v["verdict"] for v in routing_test.verdicts(holds, levels, 0.05)] == ["supports"] * 7
    fails = {
        **holds, "attn_only": _v(2.0, [0.1] * 4), "ffn_only": _v(2.9), "attn_only + position_blind": _v(2.49),
        "attn_only + uniform": _v(2.01), "attn_only + no_self": _v(2.02), "ffn_only + self_only": _v(3.34),
        "ffn_only + self_bias": _v(3.34),
    }
    got = {v["id"]: v["verdict"] for v in routing_test.verdicts(fails, levels, 0.05)}
    assert got == {"P1": "contradicts", "P2": "contradicts", "P3": "inconclusive", "P4": "contradicts",
                   "P5": "contradicts", "P6": "contradicts", "P7": "contradicts"}
    two_seeds = routing_test.verdicts({**holds, "attn_only": _v(2.0, [0.9] * 4, std=0.01, n=2),
                                       "ffn_only": _v(3.34, std=0.01, n=2)}, levels, 0.05)
    assert "seed-std" in two_seeds[0]["separation"]

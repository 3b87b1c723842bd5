"""python -m experiments.floor (issue 44): the knob, the relation and its predictions, the plateau rule, and the
command end to end on the smoke preset - predictions written before the knob trains and never rewritten."""

import datetime
import functools
import json
import math

import numpy as np
import pytest
import torch

from experiments.floor.init_measure import init_model, init_uniformity
from experiments.floor.knob import scale_qk
from experiments.floor.plateau import cell_plateau, plateau
from experiments.floor.predictions import (
    PREDICTIONS,
    edited,
    entry_digest,
    find_prediction,
    load_predictions,
    stored_predictions,
    written_before_training,
)
from experiments.floor.relation import fit_relation, held, observe, predict
from experiments.floor.report import knob_line
from experiments.floor.run import EXPERIMENT
from interp.config.model_config import ModelConfig
from interp.errors import ToolkitError

CFG = ModelConfig(n_layers=2, n_heads=2, d_model=32, n_ctx=16, d_vocab=20, residual="ffn_only")


def test_the_knob_multiplies_every_score_by_its_square():
    tokens = torch.randint(0, 20, (2, 16), generator=torch.Generator().manual_seed(0))
    plain, scaled = init_model(CFG, 5), init_model(CFG, 5, functools.partial(scale_qk, 3.0))
    _, a = plain.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_attn_scores"))
    _, b = scaled.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_attn_scores"))
    first = "blocks.0.attn.hook_attn_scores"  # layer 0 reads the same stream in both: exactly 9x
    finite = torch.isfinite(a[first])
    torch.testing.assert_close(b[first][finite], 9 * a[first][finite], rtol=1e-5, atol=1e-6)
    for name, p in plain.named_parameters():  # nothing but W_Q and W_K moved
        q = scaled.get_parameter(name)
        if name.endswith("attn.in_proj.weight"):
            torch.testing.assert_close(q[64:], p[64:], rtol=0, atol=0)  # values: rows [2d, 3d)
        else:
            torch.testing.assert_close(q, p, rtol=0, atol=0)


def test_the_knob_refuses_a_scale_or_mixer_it_cannot_apply():
    with pytest.raises(ToolkitError, match="finite number > 0"):
        scale_qk(0.0, init_model(CFG, 0))
    with pytest.raises(ToolkitError, match="softmax attention"):
        scale_qk(2.0, init_model(CFG.replace(mixer="position_blind"), 0))


def test_a_larger_scale_slows_collapse_at_init():
    tokens = torch.randint(0, 20, (8, 17), generator=torch.Generator().manual_seed(1))
    us = [init_uniformity(CFG, 3, tokens, functools.partial(scale_qk, s))["u"] for s in (1.0, 16.0)]
    assert us[1] < us[0]


def _synthetic(a: float, b: float, sigma: float, n: int, last: int, seed: int = 0, every: int = 1):
    rng = np.random.default_rng(seed)
    runs = []
    for u in rng.uniform(0.5, 1.5, n):
        t = math.exp(a + b * u + sigma * rng.standard_normal())
        escape = int(math.ceil(t / every) * every)
        runs.append({"u": float(u), "escape": escape if escape <= last else None, "last_step": last})
    return runs


def test_the_relation_recovers_a_known_slope_through_censoring():
    runs = _synthetic(3.0, 3.0, 0.3, 200, 2000)
    assert any(r["escape"] is None for r in runs)
    rel = fit_relation(runs)
    assert rel["fitted"]
    assert rel["b"]["lower"] < 3.0 < rel["b"]["upper"]
    assert rel["b"]["upper"] - rel["b"]["lower"] < 1.0


def test_a_prediction_holds_on_its_own_model_and_fails_on_a_faster_one():
    rel = fit_relation(_synthetic(3.0, 3.0, 0.3, 120, 3000, every=25))
    us = [1.0] * 16  # the model's median wait at u = 1 is exp(6) = 403 steps
    p = predict(rel, us, 3000, 25)
    assert p["predicted"] and p["median"]["lower"] < 403 < p["median"]["upper"]
    same = observe(_synthetic_at(1.0, 3.0, 3.0, 0.3, 16, 3000, seed=9), 3000)
    fast = observe([{"escape": 25}] * 16, 3000)
    assert held(p, same)["held"]
    assert not held(p, fast)["held"] and held(p, fast)["floor"]  # the floor fraction (0) still fits


def _synthetic_at(u, a, b, sigma, n, last, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        step = int(math.ceil(math.exp(a + b * u + sigma * rng.standard_normal()) / 25) * 25)
        out.append({"escape": step if step <= last else None})
    return out


def test_the_relation_refuses_one_u_or_too_few_escapes():
    flat = [{"u": 1.0, "escape": 100, "last_step": 200}] * 6
    assert not fit_relation(flat)["fitted"]
    none = [{"u": u, "escape": None, "last_step": 200} for u in (0.5, 1.0, 1.5, 2.0)]
    rel = fit_relation(none)
    assert not rel["fitted"] and "escape" in rel["why"]
    assert predict(rel, [1.0], 200, 25) == {"predicted": False, "why": rel["why"]}


def test_plateau_counts_steps_in_the_band_and_tells_a_wait_from_a_descent():
    unigram = 3.3
    wait = [4.0, 3.6, 3.31, 3.29, 3.30, 3.32, 3.28, 3.0, 2.8]
    descent = [4.0, 3.5, 3.31, 3.1, 2.9, 2.8, float("nan"), 2.7]
    w, d = plateau(wait, unigram, 0.05, 25), plateau(descent, unigram, 0.05, 25)
    assert w == {"time": 125, "longest": 125, "waits": True}
    assert d == {"time": 25, "longest": 25, "waits": False}
    c = cell_plateau([{"plateau": {"0.05": w}}, {"plateau": {"0.05": d}}], "0.05")
    assert c["n_waits"] == 1 and c["word"] == "waits"  # half the runs wait


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--parts", "knob"], "needs control"),
        (["--parts", "confirm,schedule"], "needs control"),
        (["--parts", "control,bogus"], "distinct parts"),
        (["--qk-scales", "1"], "control itself"),
        (["--qk-scales", "4,nan"], "finite number"),
        (["--qk-scales", "4,4"], "twice"),
        (["--set", "max_steps=100"], "arms set max_steps"),
        (["--set", "lr=0.01"], "the arms"),
        (["--init-seeds", "1"], ">= 2"),
        (["--margin", "0"], "finite number"),
    ],
)
def test_bad_options_are_one_error_line_before_any_work(tmp_path, capsys, data, argv, message):
    assert EXPERIMENT.main(["--preset", "smoke", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_smoke_predicts_the_knob_before_it_trains_and_never_rewrites_the_prediction(tmp_path, capsys, data):
    argv = ["--preset", "smoke", "--out", str(tmp_path), "--no-progress", "--seeds", "1,2,3,4"]
    assert EXPERIMENT.main(argv) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "smoke"
    stored = json.loads((folder / PREDICTIONS).read_text())
    results = json.loads((folder / "results-floor.json").read_text())
    assert out.index("predicted (") < out.index("predictions written")
    assert set(stored["arms"]) == set(results["knob"]) == {"ffn_only L1 240 steps qk8", "ffn_only L2 240 steps qk8"}
    for name, k in results["knob"].items():
        entry = stored["arms"][name]
        assert all(entry["trained_after"]) and entry["created"]
        assert k["written_before_training"] and k["prediction"] == entry["prediction"]
        assert k["u_match"] < 1e-6  # the runs started from the models the prediction measured
        assert k["held"]["held"] in (True, False)
    assert results["init_check_max_diff"] < 1e-6
    # 16 control + knob, 6 knob at 3x, 3 attn_only at 3x, 6 schedule
    assert len(results["runs"]) == 31 and results["relation"]["fitted"]
    assert {c["name"] for c in results["cells"]} >= {"attn_only L4 240 steps warmup-cosine", "attn_only L4 720 steps"}
    assert "attn_only L4 720 steps (at 3x, 3 seeds): " in out and "ffn_only L1 720 steps qk8 (the knob at 3x" in out
    # the early predictor against two outcomes: escaped by the end, and by the shallowest control's length
    assert results["early_horizon"] == 240 and set(results["early_by_horizon"]) == set(results["early"])
    assert "of escape by the end (" in out and "of escape by step 240 (" in out
    for r in results["runs"]:
        assert set(r["plateau"]) == set(results["margins_text"]) and math.isfinite(r["u"])
    cells = {c["sweep"] for c in results["init"]["cells"]}
    assert cells == {"depth", "qk_scale"} and set(results["init"]["rates"]) >= {"full", "ffn_only"}
    dose = {c["scale"]: c["residual"]["mean"] for c in results["init"]["cells"] if c["sweep"] == "qk_scale"}
    assert dose[8.0] > dose[1.0]  # the knob slows collapse at init, as the command measured it
    assert (folder / "report-floor.html").stat().st_size > 10_000
    # Again with the seeds in another order: every run reused, the stored predictions found (not a new slot
    # predicted after the runs), the predictions file byte for byte the same
    before, mtime = (folder / PREDICTIONS).read_bytes(), (folder / PREDICTIONS).stat().st_mtime_ns
    capsys.readouterr()
    assert EXPERIMENT.main([*argv[:-1], "4,3,2,1"]) == 0
    assert (folder / PREDICTIONS).read_bytes() == before and (folder / PREDICTIONS).stat().st_mtime_ns == mtime
    assert "predictions read from" in capsys.readouterr().out  # found, not written again
    assert json.loads((folder / "results-floor.json").read_text())["knob"] == results["knob"]
    # Other seeds: the first predictions stay as written, the new ones go beside them, and runs that existed
    # before their prediction are never called predicted in advance
    capsys.readouterr()
    assert EXPERIMENT.main([*argv[:-1], "1,2,3"]) == 0
    said = capsys.readouterr().out
    assert "predictions written to" in said and "not written before their arms' runs (not a test)" in said
    now = json.loads((folder / PREDICTIONS).read_text())["arms"]
    assert {k: now[k] for k in stored["arms"]} == stored["arms"] and len(now) == 4
    later = json.loads((folder / "results-floor.json").read_text())["knob"]
    assert not any(k["written_before_training"] for k in later.values())


def test_a_run_without_its_step_zero_probe_is_refused_by_name(tmp_path, capsys, data):
    argv = ["--preset", "smoke", "--out", str(tmp_path), "--no-progress", "--seeds", "1,2,3,4", "--parts", "control"]
    assert EXPERIMENT.main(argv) == 0
    run = next((tmp_path / "smoke").glob("ffn_only_L1_*/seed1"))
    lines = (run / "probes.jsonl").read_text().splitlines()
    (run / "probes.jsonl").write_text(
        "".join(x + "\n" for x in lines if '"uniformity"' not in x or '"step": 0,' not in x)
    )
    capsys.readouterr()
    assert EXPERIMENT.main(argv) == 2
    err = capsys.readouterr().err
    assert "step-0 uniformity" in err or "probes.jsonl" in err


def test_a_stored_prediction_is_found_whatever_the_order_of_the_seeds():
    stored = {"a": {"seeds": [1, 2, 3], "margin": "0.05"}}
    assert find_prediction(stored, "a", [3, 1, 2], "0.05") == ("a", stored["a"])
    assert find_prediction(stored, "a", [1, 2], "0.05")[1] is None
    assert find_prediction(stored, "a", [1, 2, 3], "0.1")[1] is None


def test_a_prediction_edited_after_it_was_written_is_not_trusted():
    entry = {"created": "2026-01-01T00:00:00+00:00", "prediction": {"floor_interval": [0.0, 0.75]}}
    entry["digest"] = entry_digest(entry)
    assert not edited(json.loads(json.dumps(entry)))  # a JSON round trip is not an edit
    entry["prediction"]["floor_interval"] = [0.5, 1.0]
    assert edited(entry)
    entry["prediction"]["floor_interval"] = [0.0, 0.75]
    entry["created"] = "2099-01-01T00:00:00+00:00"
    assert edited(entry)
    # Without a digest, an entry must be one of the three written before digests, as committed
    assert edited({"created": "x", "prediction": {}})
    from pathlib import Path

    legacy = json.loads(Path("docs/results/data/floor-default/predictions-floor.json").read_text())["arms"]
    assert len(legacy) == 3 and not any(edited(e) for e in legacy.values())
    moved = json.loads(json.dumps(legacy["ffn_only L3 1200 steps qk12"]))
    moved["prediction"]["median"] = {"lower": 200.0, "upper": 400.0}
    assert edited(moved)
    assert "EDITED" in knob_line("a", _knob_verdict(written_before_training=False, edited=True))


def _knob_verdict(**changes) -> dict:
    """A knob verdict as the analysis stores it (run.py), held, with `changes`."""
    return {
        "prediction": {"predicted": True, "median": {"lower": 10.0, "upper": 70.0}, "floor_interval": [0.0, 0.0]},
        "observed": {"median": 30.0, "floor_at_last": 0.0, "n": 4},
        "held": {"held": True},
        "written_before_training": True,
        "logrank_p": None,
        "control": "c",
        **changes,
    }


@pytest.mark.parametrize("text", ['{"arms": {', "{}", '{"arms": []}', "[]"])
def test_a_predictions_file_that_is_not_one_is_refused_by_name(tmp_path, text):
    path = tmp_path / PREDICTIONS
    path.write_text(text)
    with pytest.raises(ToolkitError, match=PREDICTIONS):
        load_predictions(path)
    assert load_predictions(tmp_path / "absent.json") == {}


def test_analyse_only_reads_the_predictions_of_the_folder_it_analyses(tmp_path):
    from types import SimpleNamespace

    source, out = tmp_path / "source", tmp_path / "out"
    (source / "smoke").mkdir(parents=True)
    entry = {"created": "x", "margin": "0.05", "seeds": [1], "us": [0.5], "trained_after": [True], "prediction": {}}
    (source / "smoke" / PREDICTIONS).write_text(json.dumps({"arms": {"a": entry}}))
    ctx = SimpleNamespace(args=SimpleNamespace(analyse_only=str(source)), spec=SimpleNamespace(preset="smoke"))
    assert stored_predictions(ctx) == {"a": entry}
    ctx.args.analyse_only = str(out)
    out.mkdir()
    assert stored_predictions(ctx) == {}  # none there: every knob prediction reads as made after training


def test_a_prediction_counts_as_written_before_training_only_at_a_real_past_time():
    entry = {"created": "2026-01-01T00:00:00+00:00", "seeds": [1, 2], "trained_after": [True, True], "prediction": {}}
    entry["digest"] = entry_digest(entry)
    assert written_before_training(entry)
    for after in ([], [True], [True, False], [1, 1], None):  # one True a seed, no fewer, no other value
        changed = {**entry, "trained_after": after}
        changed["digest"] = entry_digest(changed)
        assert not written_before_training(changed)
    started = datetime.datetime(2025, 12, 31, tzinfo=datetime.UTC).timestamp()
    assert not written_before_training(entry, started)  # its runs started before it was written
    for when in ("2099-01-01T00:00:00+00:00", "not a time", None, "2026-01-01T00:00:00"):  # future, junk, no zone
        forged = {**entry, "created": when}
        forged["digest"] = entry_digest(forged)  # anyone can recompute a digest: the time itself is checked
        assert not written_before_training(forged)


def test_a_file_with_two_predictions_for_one_arm_is_refused():
    from experiments.floor.law_predictions import stored_entry

    one = {"seeds": [1, 2], "margin": "0.05"}
    stored = {"a": one, "a [margin 0.05]": dict(one)}
    with pytest.raises(ToolkitError, match="2 predictions for a at margin 0.05"):
        find_prediction(stored, "a", [1, 2], "0.05")
    with pytest.raises(ToolkitError, match="2 predictions for a at margin 0.05"):
        stored_entry(stored, "a", "0.05")
    assert stored_entry({"a": one, "a [margin 0.1]": {**one, "margin": "0.1"}}, "a", "0.1")["margin"] == "0.1"


def test_two_writers_of_one_prediction_file_keep_each_others_entries(tmp_path):
    import threading
    import time
    from types import SimpleNamespace

    from experiments.floor.predictions import load_predictions, save_predictions, writing

    path = tmp_path / "predictions-law.json"
    ctx = SimpleNamespace(result_dir=tmp_path)

    def writer(name):
        with writing(path):
            stored = load_predictions(path)
            time.sleep(0.3)  # both have read before either writes, were there no lock
            stored[name] = {"created": "x", "margin": name, "seeds": [1], "us": [0.5], "trained_after": [True]}
            stored[name]["prediction"] = {}
            save_predictions(ctx, path, stored)

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("0.05", "0.1")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(load_predictions(path)) == {"0.05", "0.1"}


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"arms": {"A": {"seeds": [1]}, "A": {"seeds": [2]}}}', "a key is written twice"),
        ('{"arms": {"A": 5}}', "valid dictionary"),
        (
            '{"arms": {"A": {"created": "x", "margin": "0.05", "seeds": [1], "us": [0.5], "trained_after": [], '
            '"prediction": {}}}}',
            "differ in length",
        ),
        (
            '{"arms": {"A": {"created": "x", "margin": "0.05", "seeds": [1], "us": [NaN], "trained_after": [true], '
            '"prediction": {}}}}',
            "NaN is no number",
        ),
        (
            '{"arms": {"A": {"created": "x", "margin": "0.05", "seeds": [1], "us": [0.5], "prediction": {}}}}',
            "trained_after",
        ),
    ],
)
def test_a_prediction_file_that_is_not_one_entry_by_entry_is_refused(tmp_path, text, words):
    path = tmp_path / PREDICTIONS
    path.write_text(text)
    with pytest.raises(ToolkitError, match=words):
        load_predictions(path)


def _entry(**extra) -> dict:
    return {"created": "x", "margin": "0.05", "seeds": [1], "us": [0.5], "trained_after": [True], "prediction": {}}


@pytest.mark.parametrize(
    "doc, words",
    [
        ({"arms": {"A": {**_entry(), "us": ["1e400"]}}}, "past a float's range"),  # json reads 1e400 as inf
        ({"arms": {"A": {**_entry(), "prediction": {"median": "1e400"}}}}, "past a float's range"),
        ({"arms": {"A": {**_entry(), "note": "x"}}}, "note: Extra inputs are not permitted"),
        ({"arms": {"A": _entry()}, "extra": {}}, "holds no 'arms' object, or more than it"),
    ],
)
def test_a_number_past_floats_range_or_a_field_no_entry_holds_is_refused(tmp_path, doc, words):
    path = tmp_path / PREDICTIONS
    path.write_text(json.dumps(doc).replace('"1e400"', "1e400"))
    with pytest.raises(ToolkitError, match=words):
        load_predictions(path)


def test_an_entry_filed_under_another_arms_name_is_refused():
    """A renamed entry (two swapped by hand) would be read as the other arm's prediction: its own "arm", the name
    its pin was committed under, or its depth, width, scale and last step must be the arm's it is filed under."""
    from experiments.floor.predictions import UNDIGESTED, arm_entries, new_entry

    mine = new_entry("0.05", arm="ffn_only L2 240 steps qk4", seeds=[1], us=[0.5], trained_after=[True], prediction={})
    assert arm_entries({"ffn_only L2 240 steps qk4": mine}, "ffn_only L2 240 steps qk4", "0.05")
    with pytest.raises(ToolkitError, match="describes another arm \\(arm 'ffn_only L2 240 steps qk4'\\)"):
        arm_entries({"ffn_only L1 d64 240 steps": mine}, "ffn_only L1 d64 240 steps", "0.05")
    moved = {**mine, "arm": "ffn_only L1 d64 240 steps"}  # renamed with its "arm": its depth and scale still say
    with pytest.raises(ToolkitError, match="describes another arm \\(depth 2, scale 4.0\\)"):
        arm_entries(
            {"ffn_only L1 d64 240 steps": {**moved, "depth": 2, "scale": 4.0}}, "ffn_only L1 d64 240 steps", "0.05"
        )
    law = json.loads(open("docs/results/floor/predictions-law.json").read())["arms"]  # written before "arm"
    with pytest.raises(ToolkitError, match="depth 4, last_step 4800, scale 16.0"):
        arm_entries({"ffn_only L2 1200 steps": law["ffn_only L4 4800 steps qk16"]}, "ffn_only L2 1200 steps", "0.05")
    knob = json.loads(open("docs/results/floor/predictions-floor.json").read())["arms"]
    assert set(UNDIGESTED.values()) == set(knob)
    swapped = {"ffn_only L2 1200 steps qk12": knob["ffn_only L2 1200 steps qk8"]}
    with pytest.raises(ToolkitError, match="committed as 'ffn_only L2 1200 steps qk8'"):
        arm_entries(swapped, "ffn_only L2 1200 steps qk12", "0.05")


def test_a_verdict_on_runs_that_are_not_the_ones_predicted_says_so():
    """A prediction file copied from another --out or configuration: its us at init are not the runs' (the
    verdict's u_match), and the console line says so beside the verdict rather than pass it as a test."""
    assert "NOT the runs" not in knob_line("A", _knob_verdict(u_match=0.0))
    assert "NOT the runs it predicted (their u at init differ from its by up to 0.036" in knob_line(
        "A", _knob_verdict(u_match=0.036)
    )

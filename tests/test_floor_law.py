"""The floor's law in collapse and depth (issue 59 item 1): the fit through interval and right censoring, its
predictions and their factor-3 rule, the held rule, the runs it is fitted on, and the shipped runs it reads."""

import json
import math

import numpy as np
import pytest
from conftest import has_shared_data

import experiments.floor.law as law_module
from experiments.floor.law import HELD_FACTOR, fit_wait_law, held_law, law_runs, predict_arm
from experiments.floor.law_predictions import seed_candidates, shipped_summaries
from experiments.shared.plan import extend_seeds
from interp.errors import ToolkitError

TRUE = (1.0, 1.5, 1.4, -1.8, 0.5)  # a, b, c, g0, g1: sigma 0.27 at depth 1, 0.45 at 2, 0.74 at 3


def _runs(cells, every=25, seed=0, params=TRUE):
    """Runs drawn from the law: cells of (depth, u mean, n, last step); escapes on the evaluation grid."""
    a, b, c, g0, g1 = params
    rng = np.random.default_rng(seed)
    out = []
    for depth, u0, n, last in cells:
        for k in range(n):
            u = u0 + 0.05 * rng.standard_normal()
            t = math.exp(a + b * u + c * depth + math.exp(g0 + g1 * depth) * rng.standard_normal())
            step = max(every, math.ceil(t / every) * every)
            out.append(
                {
                    "u": u,
                    "depth": depth,
                    "cell": (depth, 64, u0),
                    "seed": k,
                    "escape": step if step <= last else None,
                    "last_step": last,
                }
            )
    return out


CELLS = [(1, 0.6, 40, 600), (1, 0.1, 40, 600), (2, 1.0, 40, 1200), (2, 0.2, 40, 1200), (3, 1.3, 40, 3600)]
CELLS += [(3, 0.4, 40, 1200)]


@pytest.fixture(scope="module")
def few_refits():
    """100 bootstrap refits instead of 400: the tests' intervals are wider, and a few times quicker."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(law_module, "BOOTSTRAP", 100)
        yield


@pytest.fixture(scope="module")
def law(few_refits):
    return fit_wait_law(_runs(CELLS), 25)


def test_the_law_recovers_its_parameters_through_grid_and_right_censoring(law):
    runs = _runs(CELLS)
    assert any(r["escape"] is None for r in runs) and any(r["escape"] == 25 for r in runs)  # both censorings
    assert law["fitted"] and law["n_refits"] > 90
    for name, value in zip(("a", "b", "c", "g0", "g1"), TRUE, strict=True):
        assert law[name]["lower"] < value < law[name]["upper"], name
    assert law["c"]["upper"] - law["c"]["lower"] < 0.6
    assert set(law["sigma_by_depth"]) == {"1", "2", "3"}
    assert law["sigma_by_depth"]["1"]["value"] < law["sigma_by_depth"]["3"]["value"]


def test_a_grid_escape_is_read_as_the_interval_it_stands_for(few_refits):
    """Depth 1 escapes within two evaluations (25 or 50): read as exact steps, its waits come out long and the
    depth term too flat; read as (t - 25, t], the law finds the depth term it was drawn with."""
    runs = _runs([(1, 0.3, 100, 600), (2, 0.3, 100, 1200), (3, 0.3, 60, 3600)], params=(1.5, 1.0, 1.6, -1.2, 0.0))
    assert {r["escape"] for r in runs if r["depth"] == 1} <= {25, 50, 75}
    grid = fit_wait_law(runs, 25)
    exact = fit_wait_law([{**r, "every": 0.001} for r in runs], 25)  # each escape read at its evaluation step
    assert grid["c"]["lower"] < 1.6 < grid["c"]["upper"]
    assert exact["c"]["upper"] < 1.6


def test_a_prediction_holds_on_its_own_law_and_fails_on_a_slower_arm(law):
    us = [0.4] * 32
    p = predict_arm(law, us, 3, 3600, 25)
    truth = math.exp(1.0 + 1.5 * 0.4 + 1.4 * 3)  # 121 steps
    assert p["predicted"] and p["interval"][0] <= truth <= p["interval"][1]
    assert p["is_prediction"] and p["factor"] <= 3.0
    own = [r["escape"] for r in _runs([(3, 0.4, 32, 3600)], seed=8)]
    median = sorted(own)[15]
    assert held_law(p, median)["held"]
    assert not held_law(p, 4 * p["median"])["held"]
    inside = p["interval"][1]  # at the interval's edge but more than 1.5x from the median: not held
    if inside > HELD_FACTOR * p["median"]:
        h = held_law(p, inside)
        assert h["inside"] and not h["within"] and not h["held"]
    assert held_law(p, None) == {"inside": False, "within": False, "held": False}  # on the floor past the end


def test_a_median_whose_interval_spans_more_than_three_times_is_not_a_prediction(law):
    deep = predict_arm(law, [0.4] * 8, 4, 10**6, 25)  # sigma about 1.2 at depth 4, eight runs
    assert deep["predicted"] and not deep["is_prediction"]
    assert deep["factor"] > 3.0 and "x3" in deep["why_not"]
    short = predict_arm(law, [1.3] * 16, 3, 200, 25)  # the median lies past the last step
    assert not short["is_prediction"] and "past the last step" in short["why_not"]
    assert predict_arm({"fitted": False, "why": "w"}, [1.0], 2, 100, 25) == {"predicted": False, "why": "w"}


def test_the_law_refuses_runs_that_cannot_fix_it(few_refits):
    one_depth = _runs([(2, 1.0, 20, 1200), (2, 0.3, 20, 1200)])
    law = fit_wait_law(one_depth, 25)
    assert not law["fitted"] and "1 depth" in law["why"]


def test_the_fit_takes_each_ffn_only_constant_run_once_at_its_longest():
    def run(depth, seed, last, escape, residual="ffn_only", schedule="constant", scale=1.0):
        return {
            "residual": residual,
            "schedule": schedule,
            "n_layers": depth,
            "d_model": 64,
            "scale": scale,
            "seed": seed,
            "u": 1.0,
            "escape": {"0.05": escape},
            "last_step": last,
        }

    runs = [run(2, 1, 1200, None), run(2, 1, 3600, 1500), run(2, 2, 1200, 300), run(6, 1, 1200, None, "attn_only")]
    runs += [run(3, 1, 3600, 1000, schedule="cosine"), run(2, 1, 1200, 100, scale=8.0)]
    picked = law_runs(runs, "0.05")
    assert sorted((r["cell"], r["seed"], r["last_step"]) for r in picked) == [
        ((2, 64, 1.0), 1, 3600),
        ((2, 64, 1.0), 2, 1200),
        ((2, 64, 8.0), 1, 1200),
    ]


def test_held_out_seeds_continue_past_the_given_ones_and_the_candidates_step_by_sixteen():
    assert extend_seeds([3, 1, 2], 2) == [1, 2]
    assert extend_seeds([1337, 1338], 4) == [1337, 1338, 1339, 1340]
    assert seed_candidates(64, 16) == [16, 32, 48, 64]
    assert seed_candidates(16, 16) == [16]
    assert seed_candidates(6, 4) == [4, 6]


needs_corpus = pytest.mark.skipif(
    not has_shared_data(),
    reason="the shipped runs trained on TinyShakespeare (../shared/data): on another corpus --law-from refuses "
    "them, as it should",
)


def _floor_ctx(tmp_path, *argv):
    from experiments.floor.run import EXPERIMENT

    return EXPERIMENT.context(["--out", str(tmp_path / "out"), "--no-progress", *argv])[0]


def _forge(source, dest, edit):
    """A copy of a shipped folder whose results file `edit` changed, its MANIFEST.json updated to match."""
    import shutil

    from experiments.shipping.ship import sha256

    shutil.copytree(source, dest)
    results = json.loads((dest / "results-floor.json").read_text())
    edit(results)
    data = json.dumps(results).encode()
    (dest / "results-floor.json").write_bytes(data)
    manifest = json.loads((dest / "MANIFEST.json").read_text())
    manifest["files"]["results-floor.json"].update(sha256=sha256(data), bytes=len(data))
    (dest / "MANIFEST.json").write_text(json.dumps(manifest))
    return dest


@needs_corpus
def test_the_law_reads_shipped_runs_from_their_archived_logs_and_never_their_held_out_arms(tmp_path, data):
    from pathlib import Path

    ctx = _floor_ctx(tmp_path, "--preset", "phase-cell", "--parts", "law,heldout")
    shipped = Path("docs/results/data/floor-law")
    got = shipped_summaries(ctx, shipped)
    results = json.loads((shipped / "results-floor.json").read_text())
    said = {(r["variant"], r["seed"]): r for r in results["runs"]}
    assert got["n_shipped"] == len(results["runs"]) == 64
    assert {r["part"] for r in got["runs"]} == {"law"} and len(got["runs"]) == 48  # not the 16 held-out runs
    for r in got["runs"]:
        assert r["u"] == pytest.approx(said[(r["variant"], r["seed"])]["u"], abs=1e-12)
        assert r["escape"]["0.05"] == said[(r["variant"], r["seed"])]["escape"]["0.05"]
    # a margin the results file never computed is read from the logs, not refused or guessed
    other = shipped_summaries(_floor_ctx(tmp_path, "--preset", "phase-cell", "--margin", "0.07"), shipped)
    assert all(set(r["escape"]) == {"0.07"} for r in other["runs"])


@needs_corpus
def test_the_law_refuses_shipped_runs_it_cannot_vouch_for(tmp_path, data):
    import shutil
    from pathlib import Path

    ctx = _floor_ctx(tmp_path, "--preset", "phase-cell")
    shipped = Path("docs/results/data/floor-law")

    def relabel(results):  # the held-out runs called fit runs, half the list dropped, one u edited
        for r in results["runs"]:
            r["part"] = "law"
        results["runs"] = results["runs"][::2]
        results["runs"][0]["u"] = 9.0

    # a results file edited, its MANIFEST made to match: the runs and their parts come from the archive and the
    # code's arms, never from it
    forged = shipped_summaries(ctx, _forge(shipped, tmp_path / "forged", relabel))
    assert forged["runs"] == shipped_summaries(ctx, shipped)["runs"]
    bare = tmp_path / "bare"  # the MANIFEST and results file, no runs
    bare.mkdir()
    for name in ("MANIFEST.json", "results-floor.json"):
        shutil.copy(shipped / name, bare / name)
    with pytest.raises(ToolkitError, match="missing"):
        shipped_summaries(ctx, bare)
    with pytest.raises(ToolkitError, match="no MANIFEST.json"):
        shipped_summaries(ctx, tmp_path / "absent")
    smoke = _floor_ctx(tmp_path, "--preset", "smoke")  # phase-cell's runs trained at another lr, width, batch
    with pytest.raises(ToolkitError, match="preset phase-cell"):
        shipped_summaries(smoke, shipped)
    batch = _floor_ctx(tmp_path, "--preset", "phase-cell", "--set", "batch_size=8")
    with pytest.raises(ToolkitError, match="different configuration"):
        shipped_summaries(batch, shipped)


@needs_corpus
def test_the_shipped_floor_runs_give_the_law_its_depth_term(tmp_path, data, few_refits):
    """On the shipped floor runs alone (depths 2 and 3): depth has its own term, and sigma grows with depth."""
    from pathlib import Path

    ctx = _floor_ctx(tmp_path, "--preset", "phase-cell")
    shipped = shipped_summaries(ctx, Path("docs/results/data/floor-default"))
    law = fit_wait_law(law_runs(shipped["runs"], "0.05"), 25)
    assert law["fitted"] and law["n_runs"] == 80  # 5 cells of 16; the 3x confirmations count once
    assert law["c"]["lower"] > 1.0 and law["b"]["lower"] > 1.0
    assert law["g1"]["lower"] > 0


@pytest.mark.skipif(
    not has_shared_data(),
    reason="smoke's law runs escape on TinyShakespeare (../shared/data); on the synthetic corpus the held-out "
    "arms' predicted intervals reach past their last step, so no arm has a prediction to train against",
)
def test_smoke_writes_the_law_predictions_before_the_held_out_arms_train_and_never_rewrites_them(
    tmp_path, capsys, data, few_refits
):
    from experiments.floor.law_predictions import LAW_PREDICTIONS
    from experiments.floor.run import EXPERIMENT

    argv = ["--preset", "smoke", "--out", str(tmp_path), "--no-progress", "--no-report", "--seeds", "1,2,3,4"]
    argv += ["--parts", "control,law,heldout", "--law-from", "none"]
    assert EXPERIMENT.main([*argv, "--predict-only"]) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "smoke"
    stored = json.loads((folder / LAW_PREDICTIONS).read_text())["arms"]
    held = {"ffn_only L2 240 steps qk4", "ffn_only L1 d64 240 steps"}
    assert set(stored) == held
    assert not any((folder / name.replace(" ", "_")).exists() for name in held)  # none of them trained
    assert (folder / "ffn_only_L1_240_steps_qk16_eval5").is_dir()  # the law's own runs did
    for name, entry in stored.items():
        assert entry["created"] and all(entry["trained_after"]) and entry["law"]["fitted"]
        assert len(entry["seeds"]) in (4, 6) and entry["seeds"][:4] == [1, 2, 3, 4]
        assert len(entry["us"]) == len(entry["seeds"]) and "draws" not in entry["law"]
        assert set(entry["factor_by_seeds"]) <= {"4", "6"} and entry["prediction"]["is_prediction"]
        assert f"{name}: predicted by the law (" in out and "not trained yet" in out
    results = json.loads((folder / "results-floor.json").read_text())
    assert results["law"]["fitted"] and results["law"]["fitted_on"]["shipped"] is None
    assert {c["depth"] for c in results["law"]["cells"]} == {1, 2}
    assert all(r["eval_every"] == (5 if "eval5" in r["variant"] else 10) for r in results["runs"])
    assert all(entry["arm"] == name for name, entry in stored.items())  # a renamed entry is seen
    # An --out of --predict-only: its fit analyses; its held-out arms, never trained there, are named, not missed
    ao = ["--preset", "smoke", "--no-progress", "--no-report", "--analyse-only", str(tmp_path)]
    assert EXPERIMENT.main([*ao, "--out", str(tmp_path.with_name(tmp_path.name + "-ao"))]) == 2
    assert "none of its runs trained (an --out written by --predict-only): give --parts law" in (
        capsys.readouterr().err
    )
    assert (
        EXPERIMENT.main([*ao, "--parts", "control,law", "--out", str(tmp_path.with_name(tmp_path.name + "-ao2"))]) == 0
    )
    capsys.readouterr()
    # An arm added later (a new held-out test, committed before it trains): its entry joins, the others stay
    import experiments.floor.arms as arms_module

    first = json.loads((folder / LAW_PREDICTIONS).read_text())["arms"]
    with pytest.MonkeyPatch.context() as m:
        fit, held_arms = arms_module.PRESET_LAW["smoke"]
        m.setitem(arms_module.PRESET_LAW, "smoke", (fit, (*held_arms, (2, None, 4.0, 3, 4))))
        assert EXPERIMENT.main([*argv, "--predict-only"]) == 0  # every fit run finished before this plan
    capsys.readouterr()
    both = json.loads((folder / LAW_PREDICTIONS).read_text())["arms"]
    assert set(both) == held | {"ffn_only L2 120 steps qk4"} and all(both[k] == first[k] for k in held)
    assert both["ffn_only L2 120 steps qk4"]["prediction"]["spread"]["sigma"] is not None
    before = (folder / LAW_PREDICTIONS).read_bytes()
    # Again without --predict-only: the held-out arms train the seeds their entries name, and the file is read
    assert EXPERIMENT.main(argv) == 0
    out = capsys.readouterr().out
    assert (folder / LAW_PREDICTIONS).read_bytes() == before
    assert "law predictions read from" in out and "all made before their arms trained" in out
    results = json.loads((folder / "results-floor.json").read_text())
    assert set(results["heldout"]) == held
    for name, h in results["heldout"].items():
        assert h["written_before_training"] and h["seeds_match"] and h["u_match"] < 1e-6
        assert h["held"]["held"] in (True, False) and h["observed"]["n"] == len(stored[name]["seeds"])
        assert f"{name}: law prediction " in out
    # the width arm against the fit's cell at its depth and scale and the preset's width (smoke: d_model 32)
    assert results["heldout"]["ffn_only L1 d64 240 steps"]["control"] == "ffn_only L1 d32 qk1"
    wide = [r for r in results["runs"] if r["variant"] == "ffn_only L1 d64 240 steps"]
    assert wide and all(r["d_model"] == 64 for r in wide)
    assert results["law"]["n_runs"] == 16  # the held-out runs are not fitted on
    # Analysed without the file their predictions are in: refused, never judged against a prediction made now
    (folder / LAW_PREDICTIONS).rename(tmp_path / "kept.json")
    again = ["--preset", "smoke", "--no-progress", "--no-report", "--analyse-only", str(tmp_path)]
    assert EXPERIMENT.main([*again, "--out", str(tmp_path.with_name(tmp_path.name + "-again"))]) == 2
    assert f"no prediction of ffn_only L2 240 steps qk4 at margin 0.05 ({LAW_PREDICTIONS} is missing" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--parts", "heldout"], "needs law"),
        (["--parts", "control,law", "--predict-only"], "--parts ...,law,heldout"),
        (["--parts", "law,heldout", "--law-from", "/nonexistent"], "no MANIFEST.json"),
    ],
)
def test_the_law_parts_refuse_what_they_cannot_do_in_one_line(tmp_path, capsys, data, argv, message):
    from experiments.floor.run import EXPERIMENT

    assert EXPERIMENT.main(["--preset", "smoke", "--out", str(tmp_path / "o"), "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def _arm_steps(mu: float, sigma: float, n: int, last: int, every: int = 25, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.exp(mu + sigma * rng.standard_normal(n))
    steps = np.maximum(every, np.ceil(t / every) * every)
    return np.where(steps > last, np.inf, steps)


def test_an_arms_own_sigma_is_recovered_through_its_grid_and_its_censoring():
    from experiments.floor.law import arm_columns, fit_spread

    steps = _arm_steps(math.log(1000), 1.5, 400, 2400)
    assert 0.2 < np.isinf(steps).mean() < 0.35  # about 0.28 on the floor at the end: right-censored
    assert fit_spread(*arm_columns(steps, 25, 2400)) == pytest.approx(1.5, rel=0.1)
    few = _arm_steps(math.log(1000), 1.5, 16, 30)  # two escapes at most by step 30
    assert fit_spread(*arm_columns(few, 25, 30)) is None


def test_a_spread_prediction_holds_on_its_own_law_and_fails_on_another_sigma(law):
    from experiments.floor.law import held_spread, tests_something

    p = predict_arm(law, [0.4] * 32, 3, 3600, 25, spread=True)
    s = p["spread"]
    truth = math.exp(-1.8 + 0.5 * 3)  # sigma 0.74 at depth 3
    assert s["interval"][0] <= truth <= s["interval"][1] and s["is_prediction"] and tests_something(p)
    assert held_spread(p, truth)["held"]
    assert not held_spread(p, 3 * truth)["held"] and not held_spread(p, None)["held"]
    assert "spread" not in predict_arm(law, [0.4] * 32, 3, 3600, 25)  # only where asked: a fit per simulated arm
    few = predict_arm(law, [0.4] * 4, 3, 3600, 25, spread=True)["spread"]  # four runs cannot pin a sigma
    assert not few["is_prediction"] and "x3" in few["why_not"]
    assert held_spread(few, truth) is None
    blind = predict_arm(law, [0.4] * 16, 3, 60, 25, spread=True)["spread"]  # almost no arm has 3 escapes by 60
    assert not blind["is_prediction"] and "fewer than 3 escapes" in blind["why_not"]


def test_a_law_that_cannot_give_a_finite_wait_is_refused_not_a_prediction(law):
    """NaN refits, or a depth or u so large that the median wait is past any float, are named refusals: never a
    raw OverflowError, and never a prediction read from NaN escape steps."""
    from experiments.floor.law import predict_arm
    from interp.errors import ToolkitError

    nan = {**law, "draws": [[math.nan] * len(law["draws"][0])] * 3}
    with pytest.raises(ToolkitError, match="is not a table of finite refits"):
        predict_arm(nan, [0.5] * 4, 2, 600, 25)
    for us, depth in (([0.5] * 4, 1e6), ([1e300] * 4, 2)):
        with pytest.raises(ToolkitError, match="is past any step"):
            predict_arm(law, us, depth, 600, 25)

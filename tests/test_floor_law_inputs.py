"""The floor's law (experiments.floor.law) refuses what it cannot read before any numerical work: a u, depth,
escape step, last step or evaluation interval that is not a finite number is a ToolkitError naming the run and
the field (NaN was a numpy LinAlgError in the fit, and a "prediction" with u_mean nan); a fit the data allow but
the optimiser does not find says the optimiser failed, apart from data that cannot fix the law."""

import math

import numpy as np
import pytest

from experiments.floor.law import fit_wait_law, predict_arm
from interp.errors import ToolkitError

# a law as fit_wait_law returns one, with a single refit: enough for predict_arm's arithmetic
LAW = {"fitted": True, "params": [1.0, 1.5, 1.4, -1.8, 0.5], "draws": [[1.0, 1.5, 1.4, -1.8, 0.5]]}


def _run(u, depth, seed, escape, last):
    return {"u": u, "depth": depth, "cell": (depth, 64, 1.0), "seed": seed, "escape": escape, "last_step": last}


def _four():
    """Four runs at two depths, three escaped, four values of u: the data the law needs, but five parameters on
    four runs let sigma at depth 2 run off to zero, so BFGS finds no maximum."""
    return [_run(0.3, 1, 0, 100, 600), _run(0.5, 1, 1, 200, 600), _run(0.4, 2, 0, 400, 1200)] + [
        _run(0.6, 2, 1, None, 1200)
    ]


def _many():
    rng = np.random.default_rng(0)
    runs = []
    for depth, last in ((1, 600), (2, 1200), (3, 3600)):
        for k in range(12):
            u = 0.2 + 0.8 * rng.random()
            t = math.exp(1.0 + 1.5 * u + 1.4 * depth + 0.4 * rng.standard_normal())
            step = max(25, math.ceil(t / 25) * 25)
            runs.append(_run(u, depth, k, step if step <= last else None, last))
    return runs


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("u", math.nan, r"run 0 \(cell \(1, 64, 1\.0\), seed 0\): u is nan"),
        ("u", math.inf, "run 0 .*: u is inf"),
        ("u", -math.inf, "run 0 .*: u is -inf"),
        ("u", "0.3", "run 0 .*: u is '0.3'"),
        ("u", True, "run 0 .*: u is True"),
        ("u", None, "run 0 .*: u is None"),
        ("depth", math.nan, "run 0 .*: depth is nan"),
        ("depth", 0, "run 0 .*: depth is 0"),
        ("escape", math.nan, "run 0 .*: escape step is nan"),
        ("escape", math.inf, "run 0 .*: escape step is inf"),  # still on the floor is None, not inf
        ("escape", 0, "run 0 .*: escape step is 0"),
        ("last_step", math.nan, "run 0 .*: last_step is nan"),
        ("last_step", math.inf, "run 0 .*: last_step is inf"),
        ("every", math.nan, "run 0 .*: every is nan"),
        ("every", 0, "run 0 .*: every is 0"),
    ],
)
def test_fit_wait_law_refuses_a_run_with_a_field_it_cannot_read(field, value, words):
    runs = _many()
    runs[0] = {**runs[0], field: value}
    with pytest.raises(ToolkitError, match=words):
        fit_wait_law(runs, 25)


def test_fit_wait_law_refuses_a_missing_field_and_an_evaluation_interval_that_is_no_number():
    runs = _many()
    with pytest.raises(ToolkitError, match="run 3 .* has no last_step"):
        fit_wait_law([*runs[:3], {k: v for k, v in runs[3].items() if k != "last_step"}], 25)
    for every in (math.nan, math.inf, 0, -25, "25", True):
        with pytest.raises(ToolkitError, match="evaluation interval every is"):
            fit_wait_law(runs, every)


def test_a_fit_the_optimiser_cannot_find_says_so_rather_than_blaming_the_counts():
    law = fit_wait_law(_four(), 25)
    assert not law["fitted"]
    assert law["why"].startswith("no fit: the optimiser failed: sigma ran off to no maximum"), law["why"]
    assert "scipy BFGS:" in law["why"] and "4 runs, 3 escaped, 2 depth(s)" in law["why"]
    assert predict_arm(law, [0.5] * 4, 2, 1200, 25) == {"predicted": False, "why": law["why"]}


def test_data_that_cannot_fix_the_law_say_what_they_lack():
    one_depth = [r for r in _many() if r["depth"] == 2]
    why = fit_wait_law(one_depth, 25)["why"]
    assert why.startswith("no fit: the data cannot fix the law (one depth;") and "optimiser" not in why
    floor = [{**r, "escape": None} for r in _many()]
    why = fit_wait_law(floor, 25)["why"]
    assert "fewer than 3 escapes" in why and "one depth" not in why
    same_u = [{**r, "u": 0.5} for r in _many()]
    assert "one value of u" in fit_wait_law(same_u, 25)["why"]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "1.0", None, True])
def test_predict_arm_refuses_a_u_that_is_no_finite_number(bad):
    us = [1.0] * 15 + [bad]
    with pytest.raises(ToolkitError, match=r"us\[15\] \(the u of the arm's run 15\) is"):
        predict_arm(LAW, us, 2, 1200, 25)
    with pytest.raises(ToolkitError, match=r"us\[15\]"):  # before it looks at the law
        predict_arm({"fitted": False, "why": "w"}, us, 2, 1200, 25)


@pytest.mark.parametrize(
    "depth, last, every, words",
    [
        (math.nan, 1200, 25, "depth is nan"),
        (0, 1200, 25, "depth is 0"),
        (2, math.inf, 25, r"last \(the arm's last step\) is inf"),
        (2, math.nan, 25, "last .* is nan"),
        (2, 1200, math.nan, r"every \(the evaluation interval\) is nan"),
        (2, 1200, 0, "every .* is 0"),
        (2, 1200, True, "every .* is True"),
    ],
)
def test_predict_arm_refuses_a_depth_last_step_or_interval_that_is_no_finite_number(depth, last, every, words):
    with pytest.raises(ToolkitError, match=words):
        predict_arm(LAW, [1.0] * 16, depth, last, every)


def test_predict_arm_refuses_an_arm_of_no_runs_and_still_predicts_a_finite_one():
    with pytest.raises(ToolkitError, match="at least one"):
        predict_arm(LAW, [], 2, 1200, 25)
    with pytest.raises(ToolkitError, match="max_factor"):
        predict_arm(LAW, [1.0] * 4, 2, 1200, 25, max_factor=math.nan)
    p = predict_arm(LAW, [1.0] * 16, 2, 1200, 25)
    assert p["predicted"] and p["u_mean"] == 1.0 and p["median"] is not None and math.isfinite(p["median"])
    assert predict_arm(LAW, np.full(16, 1.0), 2, 1200, 25, max_factor=math.inf)["u_mean"] == 1.0

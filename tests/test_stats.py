"""experiments.statistics.stats: the seed, curve and paired statistics every experiment reads its numbers with
(and experiments.runner.text's formatter for them)."""

import math

import pytest

from experiments.statistics.stats import log_pace, mean_columns, paired_gap, settle_step, slope, stats, tail


def test_stats_over_seeds():
    assert stats([2.0, 2.2, 2.4]) == {
        "mean": pytest.approx(2.2),
        "std": pytest.approx(0.2),
        "min": 2.0,
        "max": 2.4,
        "n": 3,
    }
    one = stats([3])
    assert one == {"mean": 3.0, "std": 0.0, "min": 3.0, "max": 3.0, "n": 1}  # one seed: no spread
    assert isinstance(one["mean"], float)


def test_slope_is_least_squares_and_zero_without_spread_in_x():
    assert slope((0.0, 1.0, 2.0), (1.0, 3.0, 5.0)) == pytest.approx(2.0)
    assert slope((0.0, 1.0, 2.0, 3.0), (0.0, 1.0, 0.0, 1.0)) == pytest.approx(0.2)
    assert slope((4.0, 4.0), (1.0, 2.0)) == 0.0


def test_log_pace_reads_the_second_half_in_log_steps():
    steps = [0, 100, 200, 300, 400, 500, 600]
    values = [9.0, 9.0, 9.0] + [1.0 - 0.5 * math.log(s) for s in steps[3:]]  # the first half is ignored
    assert log_pace(steps, values) == pytest.approx(-0.5)
    assert log_pace([0, 50, 100], [3.0, 2.0, 1.0]) == pytest.approx(-1 / math.log(2))  # two points from step > 0
    assert log_pace([0, 100], [3.0, 2.0]) == 0.0  # one point after step 0: no pace


def test_tail_drop_slope_and_pace():
    got = tail([0, 100, 200, 300, 400], [3.0, 2.6, 2.4, 2.3, 2.1])
    assert got["from_step"] == 300 and got["drop"] == pytest.approx(0.2) and got["slope_per_1k"] == pytest.approx(-2.0)
    flat = tail([0, 10, 20, 30, 40], [3.3, 3.3, 3.3, 3.3, 3.3])
    assert flat["drop"] == 0.0 and flat["slope_per_1k"] == 0.0 and flat["projected"] == 3.3
    # straight in log-steps over the second half: the pace is exact, and 3x the steps adds pace * ln 3
    steps = [0, 100, 200, 300, 400, 500, 600]
    losses = [4.0, 3.0, 2.9] + [2.5 - 0.2 * math.log(s / 300) for s in steps[3:]]
    got = tail(steps, losses)
    assert got["log_pace"] == pytest.approx(-0.2)
    assert got["projected"] == pytest.approx(losses[-1] - 0.2 * math.log(3))
    assert tail(steps, losses, factor=10)["projected"] == pytest.approx(losses[-1] - 0.2 * math.log(10))


def test_tail_of_a_short_curve_uses_its_last_two_points():
    got = tail([0, 10], [3.0, 2.0])
    assert got["from_step"] == 0 and got["drop"] == 1.0 and got["slope_per_1k"] == pytest.approx(-100.0)


def test_paired_gap_pairs_by_seed():
    runs = [
        {"variant": v, "seed": s, "final_val_loss": x}
        for v, s, x in [
            ("full", 1, 2.0),
            ("full", 2, 2.2),
            ("full", 3, 2.1),
            ("attn_only", 1, 2.1),
            ("attn_only", 2, 2.4),
            ("attn_only", 3, 2.1),
            ("attn_only", 4, 9.9),
        ]
    ]
    gap = paired_gap(runs, "attn_only", "full")
    assert gap["seeds"] == [1, 2, 3] and gap["mean"] == pytest.approx(0.1) and gap["std"] == pytest.approx(0.1)
    assert paired_gap(runs[:3], "attn_only", "full") is None  # no seed ran both
    best = [{**r, "best_val_loss": r["final_val_loss"] - 1} for r in runs]
    assert paired_gap(best, "attn_only", "full", key="best_val_loss")["mean"] == pytest.approx(0.1)


def test_mean_columns():
    assert mean_columns([[1.0, 2.0], [3.0, 6.0]]) == [2.0, 4.0]
    assert mean_columns([]) is None


def test_settle_step():
    steps = [0, 10, 20, 30, 40]
    assert settle_step(steps, [0.1, 0.001, 0.01, 0.001, 0.0], 0.002) == 30
    assert settle_step(steps, [0.001] * 5, 0.002) == 0
    assert settle_step(steps, [0.0, 0.0, 0.0, 0.0, 0.01], 0.002) is None
    assert settle_step(steps, [0.0, 0.0, 0.0, 0.0, math.nan], 0.002) is None  # nan never counts as settled


def test_one_formatter_for_table_cells():
    from experiments.runner.text import fmt_number, fmt_stats

    assert fmt_number(2.34567) == "2.3457" and fmt_number(-0.01, "+.3f") == "-0.010" and fmt_number(2.0, "g") == "2"
    assert fmt_number(None) == fmt_number(math.nan) == fmt_number(math.inf) == "-"
    assert fmt_stats(stats([2.0])) == "2.000"
    assert fmt_stats(stats([2.0, 2.2, 2.4]), 2) == "2.20 +/- 0.20 [2.00, 2.40]"


def test_a_one_evaluation_spike_does_not_read_as_a_fall():
    """A floor run that jumps to 9.46 for one evaluation at the start of the pace window (a deep ffn_only run
    did) projected to -0.99 nats at 3x with a least-squares pace through the spike; it stays on the floor."""
    from experiments.statistics.stats import spikes, tail

    steps = list(range(0, 625, 25))
    floor = [4.2, 3.6] + [3.32 + 0.001 * ((i * 7) % 5) for i in range(len(steps) - 2)]
    spiked = list(floor)
    spiked[steps.index(300)] = 9.46
    assert spikes(spiked) == {steps.index(300)} and spikes(floor) == set()
    assert abs(tail(steps, spiked)["projected"] - tail(steps, floor)["projected"]) < 0.01
    falling = [4.2 - 0.05 * i for i in range(len(steps))]  # a steady fall is no spike and keeps its pace
    assert spikes(falling) == set() and tail(steps, falling)["projected"] < falling[-1] - 0.1

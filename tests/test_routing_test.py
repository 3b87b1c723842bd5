"""The main job on the smoke preset: results.json schema, the verdict rules branch by branch, a
self-contained report, resume, option checks, and run directories shared with the trainer CLI."""

import json
import math
import shutil

import pytest
from conftest import data_root, run_module
from offline import external_references

from experiments.routing_test import report as routing_report
from experiments.routing_test import rules as routing_rules
from experiments.routing_test import run as routing_test
from experiments.routing_test.rules import PREDICTIONS, Outcome, separation, verdicts

main = routing_test.EXPERIMENT.main
IDS = ["P1", "P2", "P3", "P4", "P5", "P6", "P7"]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One routing test on the smoke preset, shared read-only by the tests below."""
    out = tmp_path_factory.mktemp("routing")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESIDUAL_DATA_DIR", str(data_root()))
        assert main(["--preset", "smoke", "--out", str(out), "--no-progress"]) == 0
        yield out


def test_results_schema(smoke_run):
    results = json.loads((smoke_run / "smoke" / "results-routing_test.json").read_text())
    for key in (
        "schema",
        "experiment",
        "preset",
        "seeds",
        "margin",
        "self_bias",
        "config",
        "reference_levels",
        "runs",
        "variants",
        "verdicts",
        "software",
        "wall_time_s",
        "train_wall_time_s",
        "created",
    ):
        assert key in results, key
    assert results["schema"] == "routing-test/3" and results["preset"] == "smoke"
    names = [v.name for v in routing_test.make_variants()]
    assert list(results["variants"]) == names and len(results["runs"]) == 9
    for run in results["runs"]:
        assert math.isfinite(run["final_val_loss"]) and run["wall_time_s"] > 0
        assert run["val_curve"]["steps"][-1] == 40
        assert run["block0_grad"]["steps"][0] == 0
        assert (run["alpha_tt"] is None) == (run["variant"] == "attn_only + position_blind")
    assert results["variants"]["ffn_only + self_only"]["alpha_tt_layer_mean"] == [1.0, 1.0]
    assert results["variants"]["attn_only + no_self"]["alpha_tt_layer_mean"] == [0.0, 0.0]
    assert [v["id"] for v in results["verdicts"]] == IDS
    # the verdicts in the file are the rules applied to the file's own numbers
    assert results["verdicts"] == verdicts(results["variants"], results["reference_levels"], results["margin"])
    assert results["config"]["variants"]["attn_only + no_self"]["self_bias"] == "-inf"  # strict JSON
    assert results["config"]["overrides"] == {}
    # smoke: even full sits at the floor, so nothing is decided
    assert {v["verdict"] for v in results["verdicts"]} == {"inconclusive"}
    assert all("the reference model did not learn" in v["measured"] for v in results["verdicts"])
    assert results["gaps"]["attn_only - full"]["n"] == 1
    # identity probes on every variant's checkpoint: the embedding holds the current token
    assert list(results["identity"]) == names
    for name, rec in results["identity"].items():
        ident = rec["identity"]
        assert ident["labels"][0] == "embed" and ident["offsets"] == [0, -1, -2]
        assert ident["accuracy"][0][0] > 0.95, name  # the embedding site holds the current token
        assert len(rec["logit_lens"]["ce"]) == 3  # embed + 2 blocks


def test_report_is_self_contained(smoke_run):
    page = (smoke_run / "smoke" / "report-routing_test.html").read_text()
    # the tables are HTML tables (selectable text, as tall as their rows), not plotly tables in a fixed height
    assert page.count("<table>") == 2  # the results and the verdicts
    verdicts_table = page.split("<h2>Verdicts</h2>")[1].split("</table>")[0]
    assert all(f"<td>{p}</td>" in verdicts_table for p in IDS)  # every prediction's row, P6 and P7 too
    # smoke: full does not learn, so each status says that guard, not "not run"
    assert verdicts_table.count("not decided: the reference model did not learn") == 7
    assert "not run" not in verdicts_table
    assert external_references(page) == []  # nothing fetched from the network (tests/offline.py)
    assert page.count("Plotly.newPlot") >= 10 and len(page) > 3_000_000  # plotly.js is inline
    for heading in (
        "Results",
        "Verdicts",
        "Validation loss",
        "alpha_tt",
        "Gradient flow",
        "Hidden-norm",
        "Where is the current token?",
        "Logit lens",
        "Attention patterns",
    ):
        assert heading in page


def test_rerun_after_a_kill_retrains_only_what_is_missing(smoke_run, tmp_path, shared_data, capsys):
    out = tmp_path / "copy"
    shutil.copytree(smoke_run, out)  # the shared run stays untouched
    first = json.loads((out / "smoke" / "results-routing_test.json").read_text())
    victim = out / "smoke" / "attn_only_uniform" / "seed1337"
    kept = {p: p.stat().st_mtime_ns for p in (out / "smoke").glob("*/seed1337/final.json") if victim not in p.parents}
    shutil.rmtree(victim)  # as if killed before this run started
    capsys.readouterr()
    assert main(["--preset", "smoke", "--out", str(out), "--no-progress", "--no-report"]) == 0
    assert {p: p.stat().st_mtime_ns for p in kept} == kept
    # the cost of what is left to train is said before it trains (the finished eight are not counted)
    printed = capsys.readouterr().out
    line = next(x for x in printed.splitlines() if x.startswith("estimated cost:"))
    assert "for 9 runs" in line and " of training here" in line and not line.endswith("every run finished, reused")
    assert printed.index("estimated cost:") < printed.index("reference levels")
    again = json.loads((out / "smoke" / "results-routing_test.json").read_text())
    numbers = lambda r: [(x["variant"], x["final_val_loss"], x["alpha_tt"], x["growth"]) for x in r["runs"]]  # noqa: E731
    assert numbers(again) == numbers(first)
    assert again["verdicts"] == first["verdicts"]


def test_half_trained_run_resumes_through_the_experiment(smoke_run, tmp_path, shared_data):
    out = tmp_path / "copy"
    shutil.copytree(smoke_run, out)
    run = out / "smoke" / "ffn_only" / "seed1337"
    final = json.loads((run / "final.json").read_text())
    (run / "final.json").unlink()  # a run that stopped after its last checkpoint
    assert main(["--preset", "smoke", "--out", str(out), "--no-progress", "--no-report", "--variants", "ffn_only"]) == 0
    again = json.loads((run / "final.json").read_text())
    assert again["resumed_from_step"] == 40 and again["final_val_loss"] == final["final_val_loss"]


# ----- options: one error line, exit 2, nothing written ------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--set", "residual=full"], "--set residual=... would be overridden by this experiment's variants"),
        (["--set", "self_bias=2"], "--set self_bias=... would be overridden"),
        (["--margin", "nan"], "--margin must be a finite number > 0, got nan"),
        (["--margin", "-0.1"], "--margin must be a finite number > 0"),
        (["--self-bias", "inf"], "--self-bias must be a finite number > 0"),
        (["--variants", "attn_only,bogus"], "unknown variant(s) ['bogus']"),
        (["--seeds", "1,1"], "--seeds needs distinct integers in [0, 2**63)"),
        (["--no-wait"], "--no-wait, --slurm-set and --slurm-partition need --launcher slurm"),
        (["--launcher", "slurm-local", "--slurm-set", "oops"], "--slurm-set expects KEY=VALUE"),
        # options only a Slurm launcher reads were ignored under the local one
        (["--slurm-time", "5"], "--slurm-time: only --launcher slurm (or slurm-local) reads it"),
        (["--slurm-partition="], "--no-wait, --slurm-set and --slurm-partition need --launcher slurm"),  # empty
        (["--gpus-per-run", "0"], "--gpus-per-run: only --launcher slurm"),
        (["--slurm-array-parallelism", "4"], "--slurm-array-parallelism: only --launcher slurm"),
        (["--launcher", "slurm-local", "--ensemble-size", "4"], "--ensemble-size is the local launcher's"),
    ],
)
def test_bad_options_are_one_error_line(argv, message, smoke_run, capsys):
    results = smoke_run / "smoke" / "results-routing_test.json"
    before = results.read_bytes()
    assert main(["--preset", "smoke", "--out", str(smoke_run), "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert results.read_bytes() == before


# ----- run directories shared with `python -m training` -------------------------------------------------


def test_trainer_cli_reuses_the_routing_runs_and_the_other_way_round(smoke_run, tmp_path, shared_data):
    out = tmp_path / "shared"
    shutil.copytree(smoke_run, out)
    final = out / "smoke" / "attn_only_uniform" / "seed1337" / "final.json"
    stamp = final.stat().st_mtime_ns
    done = run_module(
        "training",
        "--preset",
        "smoke",
        "--residual",
        "attn_only",
        "--mixer",
        "uniform",
        "--out",
        str(out),
        "--no-progress",
    )
    assert done.returncode == 0, done.stderr
    assert f"run: {final.parent}" in done.stdout and final.stat().st_mtime_ns == stamp  # found, not retrained

    fresh = tmp_path / "fresh"
    trained = run_module(
        "training",
        "--preset",
        "smoke",
        "--residual",
        "ffn_only",
        "--set",
        "self_bias=inf",
        "--out",
        str(fresh),
        "--no-progress",
    )
    assert trained.returncode == 0, trained.stderr
    cli_final = fresh / "smoke" / "ffn_only_self_only" / "seed1337" / "final.json"
    stamp = cli_final.stat().st_mtime_ns
    assert (
        main(
            [
                "--preset",
                "smoke",
                "--out",
                str(fresh),
                "--no-progress",
                "--no-report",
                "--variants",
                "ffn_only + self_only",
            ]
        )
        == 0
    )
    assert cli_final.stat().st_mtime_ns == stamp
    results = json.loads((fresh / "smoke" / "results-routing_test.json").read_text())
    assert results["runs"][0]["final_val_loss"] == json.loads(cli_final.read_text())["final_val_loss"]


# ----- the rules, branch by branch -----------------------------------------------------------------------

U, B, M = 3.35, 2.48, 0.05


def loss(mean, std=0.0, n=1):
    return {"mean": mean, "std": std, "min": mean, "max": mean, "n": n}


def variant(mean, alpha=None, std=0.0, n=1, drop=0.0, later=None, alpha_later=None):
    """A variant summary; `later` is its projected loss at 3x the steps (default: settled at `mean`)."""
    return {
        "final_val_loss": loss(mean, std, n),
        "alpha_tt_layer_mean": alpha,
        "uniform_baseline": 0.04,
        "tail_drop": loss(drop),
        "projected_val_loss": loss(mean if later is None else later, std, n),
        "alpha_tt_projected": alpha_later,
    }


def decide(pid, **variants):
    p = next(p for p in PREDICTIONS if p.id == pid)
    return p.decide(Outcome(variants, U, B, M))[0]


@pytest.mark.parametrize(
    "ffn, attn, expected",
    [
        (U - M, B - M - 0.001, "supports"),  # both just inside
        (U - M - 0.001, 2.0, "contradicts"),  # ffn_only just off the floor
        (3.34, B - M, "inconclusive"),  # attn_only exactly at bigram - m: not below it
        (3.34, 2.9, "inconclusive"),  # attn_only between bigram and floor
        (3.34, U - M, "contradicts"),  # attn_only collapses too
    ],
)
def test_p1(ffn, attn, expected):
    assert decide("P1", ffn_only=variant(ffn), attn_only=variant(attn)) == expected


@pytest.mark.parametrize(
    "alpha, expected",
    [
        ([0.8, 0.8], "supports"),
        ([0.79, 0.81], "supports"),
        ([0.7, 0.8], "inconclusive"),
        ([0.49, 0.1], "contradicts"),
        ([0.5, 0.1], "inconclusive"),
    ],
)
def test_p2(alpha, expected):
    assert decide("P2", attn_only=variant(2.0, alpha)) == expected


@pytest.mark.parametrize(
    "blind, expected",
    [
        (U - M, "supports"),
        (U - M - 0.001, "inconclusive"),  # between bigram and floor
        (B + M, "inconclusive"),
        (B - M, "inconclusive"),  # at the bigram level, both edges
        (B - M - 0.001, "contradicts"),
    ],
)
def test_p3(blind, expected):
    assert decide("P3", **{"attn_only + position_blind": variant(blind)}) == expected


@pytest.mark.parametrize(
    "no_self, attn, std, n, expected",
    [
        (B - M, 2.0, 0.0, 1, "supports"),
        (2.05, 2.0, 0.0, 1, "contradicts"),  # within the margin of attn_only
        (2.051, 2.0, 0.0, 1, "inconclusive"),
        (2.10, 2.0, 0.02, 3, "inconclusive"),  # 0.10 above: beyond the margin and 3 seed std (0.06)
        (2.055, 2.0, 0.02, 3, "contradicts"),  # beyond the margin but within 3 seed std: kept
    ],
)
def test_p4(no_self, attn, std, n, expected):
    outcome = {"attn_only + no_self": variant(no_self, std=std, n=n), "attn_only": variant(attn, std=std, n=n)}
    assert decide("P4", **outcome) == expected


@pytest.mark.parametrize(
    "self_only, expected",
    [
        (B + M, "supports"),
        (B - M, "supports"),
        (B + M + 0.001, "inconclusive"),
        (U - M, "contradicts"),
        (B - M - 0.001, "inconclusive"),
    ],
)
def test_p5(self_only, expected):
    assert decide("P5", **{"ffn_only + self_only": variant(self_only)}) == expected


@pytest.mark.parametrize(
    "biased, std, n, expected",
    [
        (B - M - 0.001, 0.0, 1, "supports"),
        (B - M, 0.0, 1, "contradicts"),
        (3.34, 0.0, 1, "contradicts"),
        (B - 0.10, 0.04, 3, "inconclusive"),  # below by 0.10 > m, but not by 3 std (0.12)
        (B - 0.13, 0.04, 3, "supports"),
    ],
)
def test_p6(biased, std, n, expected):
    assert decide("P6", **{"ffn_only + self_bias": variant(biased, std=std, n=n)}) == expected


@pytest.mark.parametrize(
    "uniform, expected",
    [
        (2.051, "supports"),
        (2.05, "contradicts"),
        (B - M, "contradicts"),
        (B - M - 0.001, "supports"),
    ],
)
def test_p7(uniform, expected):
    assert decide("P7", **{"attn_only + uniform": variant(uniform), "attn_only": variant(2.0)}) == expected


def test_separation_in_nats_and_seed_std():
    assert separation(loss(2.0), 2.5) == "-0.500 nats (1 seed: no seed std)"
    assert separation(loss(2.0, 0.1, 3), loss(2.5, 0.1, 3)) == "-0.500 nats = -5.0 seed-std"
    assert separation(loss(2.0, 0.3, 3), loss(2.3, 0.4, 3)) == f"-0.300 nats = {-0.3 / math.sqrt(0.125):+.1f} seed-std"
    assert separation(loss(2.0, 0.0, 2), 2.0) == "+0.000 nats (seed std 0)"


def test_a_prediction_without_its_variants_is_not_run():
    got = verdicts({"full": variant(2.0)}, {"unigram": U, "bigram": B}, M)
    assert [(v["measured"], v["verdict"]) for v in got] == [("not run", "inconclusive")] * 7


def test_place_rule():
    levels = {"unigram": 3.35, "bigram": 2.48}
    assert routing_rules.place(3.301, levels, 1.7, 0.05) == "at the unigram floor"
    assert routing_rules.place(3.299, levels, 1.7, 0.05) == "between bigram and floor"
    assert routing_rules.place(2.53, levels, 1.7, 0.05) == "at the bigram level"
    assert routing_rules.place(2.43, levels, 1.7, 0.05) == "at the bigram level"
    assert routing_rules.place(1.75, levels, 1.7, 0.05) == "near full"
    assert routing_rules.place(2.10, levels, 1.7, 0.05) == "below bigram (uses context)"


def test_p1_p3_p7_need_three_seed_std_with_three_seeds():
    wide = dict(std=0.05, n=3)  # 3 std = 0.15
    assert decide("P1", ffn_only=variant(3.34), attn_only=variant(B - 0.10, **wide)) == "inconclusive"
    assert decide("P1", ffn_only=variant(3.34), attn_only=variant(B - 0.16, **wide)) == "supports"
    assert decide("P3", **{"attn_only + position_blind": variant(B - 0.10, **wide)}) == "inconclusive"
    assert decide("P3", **{"attn_only + position_blind": variant(B - 0.16, **wide)}) == "contradicts"
    assert decide("P7", **{"attn_only + uniform": variant(2.2, **wide), "attn_only": variant(2.1)}) == "contradicts"
    assert decide("P7", **{"attn_only + uniform": variant(2.26, **wide), "attn_only": variant(2.1)}) == "supports"


LEARNED = {"full": variant(1.9), "attn_only": variant(2.0, [0.9] * 4), "ffn_only": variant(3.34)}


def test_nothing_is_decided_unless_the_reference_learned():
    levels = {"unigram": U, "bigram": B}
    decided = verdicts(LEARNED, levels, M)[0]
    assert decided["verdict"] == "supports" and not decided["provisional"]
    for full in (variant(B - M), None):  # at bigram - m: not below it; or not run at all
        variants = {**LEARNED, "full": full} if full else {k: v for k, v in LEARNED.items() if k != "full"}
        got = verdicts(variants, levels, M)
        assert {v["verdict"] for v in got} == {"inconclusive"}
        assert "reference model" in got[0]["measured"]


LEVELS = {"unigram": U, "bigram": B}


def test_a_verdict_a_longer_run_would_change_is_provisional_with_its_direction():
    # P6 as cpu-quick left it at 450 steps: just above bigram - m, still falling at a pace that crosses it
    trap = {**LEARNED, "ffn_only + self_bias": variant(2.473, later=2.375)}
    trap["full"] = variant(1.9, [0.2] * 4, later=1.6, alpha_later=[0.3] * 4)  # full moves, but P6 does not rest on it
    p6 = next(v for v in verdicts(trap, LEVELS, M) if v["id"] == "P6")
    assert p6["verdict"] == "contradicts" and p6["provisional"] and p6["heading"] == "supports"
    assert p6["still_moving"] == ["ffn_only + self_bias falling: 2.473 now, 2.375 at 3x the steps"]
    assert routing_report.verdict_label(p6) == "CONTRADICTS (provisional: heading to SUPPORTS in a longer run)"


@pytest.mark.parametrize(
    "later, provisional",
    [
        (1.6, False),  # attn_only falls away from its threshold: the verdict only gets firmer
        (2.0, False),  # settled
        (2.6, True),  # rising back across bigram - m
    ],
)
def test_only_a_move_across_a_threshold_makes_a_verdict_provisional(later, provisional):
    got = verdicts({**LEARNED, "attn_only": variant(2.0, [0.9] * 4, later=later)}, LEVELS, M)[0]
    assert got["verdict"] == "supports" and got["provisional"] == provisional
    assert got["heading"] == ("inconclusive" if provisional else None)


def test_a_move_within_the_margin_does_not_make_a_verdict_provisional():
    # 0.04 nats across the P6 threshold: less than the margin, so the run counts as settled
    edge = {**LEARNED, "ffn_only + self_bias": variant(B - M + 0.01, later=B - M - 0.03)}
    p6 = next(v for v in verdicts(edge, LEVELS, M) if v["id"] == "P6")
    assert p6["verdict"] == "contradicts" and not p6["provisional"] and p6["still_moving"] == []


def test_a_reference_that_would_learn_in_a_longer_run_makes_the_guard_provisional():
    late = {**LEARNED, "full": variant(B, later=2.2)}
    got = verdicts(late, LEVELS, M)
    assert {v["verdict"] for v in got} == {"inconclusive"}
    p1 = got[0]
    assert p1["provisional"] and p1["heading"] == "supports"
    assert "full falling: 2.480 now, 2.200 at 3x the steps" in p1["still_moving"]


def test_alpha_tt_heading_toward_one_makes_p2_provisional():
    rising = {**LEARNED, "attn_only": variant(2.0, [0.6] * 4, alpha_later=[0.9] * 4)}
    p2 = verdicts(rising, LEVELS, M)[1]
    assert (p2["verdict"], p2["heading"]) == ("inconclusive", "supports")
    assert p2["still_moving"] == ["attn_only mean alpha_tt 0.60 now, 0.90 at 3x the steps"]


def test_alpha_projection_stays_a_weight():
    rows = [{"step": s, "alpha_tt_layer_mean": [a, 0.5]} for s, a in [(0, 0.1), (100, 0.5), (200, 0.9)]]
    assert routing_test.project_alpha(rows) == [1.0, 0.5]
    assert routing_test.project_alpha([]) is None


def test_needs_longer_names_runs_that_would_move_by_more_than_the_margin():
    results = {"margin": M, "variants": {"full": variant(2.0, later=1.8), "ffn_only": variant(3.3, later=3.29)}}
    assert routing_report.needs_longer(results) == ["full"]


def test_console_table_fits_120_columns():
    from experiments.runner.text import format_table

    names = [v.name for v in routing_test.make_variants()]
    variants = {
        n: {
            **variant(2.2345, [0.04, 0.08, 0.11, 0.05], std=0.0123, n=3, drop=-0.012),
            "place": "below bigram (uses context)",
            "block0_grad_at": {"0": 7.18, "100": 1.0, "end": 1.18e-07},
            "growth": 75.8,
        }
        for n in names
    }
    text = format_table(*routing_report.table({"variants": variants}))
    assert max(len(line) for line in text.splitlines()) <= 120, text


def test_each_verdict_is_also_decided_at_half_and_twice_the_margin():
    # ffn_only + self_bias 0.07 below bigram: supports at 0.05 and 0.025, contradicts at 0.1
    edge = {**LEARNED, "ffn_only + self_bias": variant(B - 0.07)}
    p6 = next(v for v in verdicts(edge, LEVELS, M) if v["id"] == "P6")
    assert p6["verdict"] == "supports" and p6["at_margins"] == {"0.025": "supports", "0.1": "contradicts"}
    assert routing_report.margin_sensitive(p6)
    assert routing_report.margin_text(p6) == "SUPPORTS at margin 0.025; CONTRADICTS at margin 0.1"
    firm = next(v for v in verdicts({**LEARNED, "ffn_only + self_bias": variant(2.0)}, LEVELS, M) if v["id"] == "P6")
    assert not routing_report.margin_sensitive(firm)


def test_the_verdicts_are_one_table_row_each_with_separation_rule_and_status():
    trap = {**LEARNED, "ffn_only + self_bias": variant(2.473, later=2.375)}
    results = {"verdicts": verdicts(trap, LEVELS, M)}
    headers, rows = routing_report.verdict_table(results)
    assert headers == ["id", "prediction", "verdict", "separation", "rule", "status"]
    assert [r[0] for r in rows] == [p.id for p in PREDICTIONS]
    by_id = {r[0]: dict(zip(headers, r, strict=True)) for r in rows}
    assert by_id["P6"]["verdict"] == "contradicts" and by_id["P6"]["status"] == "provisional: heading to supports at 3x"
    assert by_id["P1"]["status"] == "decided by its rule, unchanged at 3x" and "nats" in by_id["P1"]["separation"]
    # attn_only + no_self is not among the variants
    assert by_id["P4"]["status"] == "not run: a variant it needs is not in --variants"
    narrow, short = routing_report.verdict_table(results, console=True)
    assert narrow == ["id", "verdict", "status", "separation"] and short[5][:3] == [
        "P6",
        "contradicts",
        "provisional -> supports",
    ]
    assert short[0][2] == "decided" and short[3][2] == "not run"


def test_a_guarded_verdict_says_why_it_was_not_decided():
    """full on the floor: every prediction was evaluated, none decided; the status says so, not "not run"."""
    unlearned = {**{v.name: variant(3.0, [0.3, 0.3]) for v in routing_test.make_variants()}, "full": variant(U - 0.01)}
    results = {"verdicts": verdicts(unlearned, LEVELS, M)}
    statuses = [r[-1] for r in routing_report.verdict_table(results)[1]]
    assert all(s.startswith("not decided: the reference model did not learn: full") for s in statuses), statuses
    assert {r[2] for r in routing_report.verdict_table(results, console=True)[1]} == {"not decided"}
    # the rule ran and took no side (P2: alpha_tt between 0.5 and 0.8 at some layer, mean below 0.8)
    middling = {**LEARNED, "attn_only": variant(2.0, [0.6, 0.6])}
    p2 = next(v for v in verdicts(middling, LEVELS, M) if v["id"] == "P2")
    assert p2["verdict"] == "inconclusive" and routing_report.status(p2).startswith("evaluated: its rule takes no side")

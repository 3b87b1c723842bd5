"""Interventions as hooks: the same numbers on ResidualGPT and its export, each intervention equal to the wiring
it imitates, no-ops where a path is absent, the patching ends, the prediction rules branch by branch, and the
experiment end to end on the smoke preset."""

import json
import math
import warnings

import numpy as np
import pytest
import torch
from offline import external_references

from experiments.interventions import effects as fx
from experiments.interventions import rules
from experiments.interventions import run as interventions
from interp.config.model_config import ModelConfig
from interp.model.gpt import ResidualGPT
from interp.reading import interventions as iv

WIRINGS = [
    dict(residual="full"),
    dict(residual="attn_only"),
    dict(residual="ffn_only"),
    dict(residual="none"),
    dict(residual="attn_only", mixer="uniform"),
    dict(residual="attn_only", self_bias=-math.inf),
    dict(residual="ffn_only", self_bias=math.inf),
    dict(residual="ffn_only", self_bias=3.0),
]


def tiny(seed=0, **kw):
    torch.manual_seed(seed)
    model = ResidualGPT(ModelConfig(n_layers=2, n_heads=2, d_model=16, n_ctx=8, d_vocab=11, **kw)).eval()
    model.set_explicit_attention(True)
    return model


def batch(seed=1, n=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 11, (n, 8), generator=g), torch.randint(0, 11, (n, 8), generator=g)


def all_hooks(model):
    """Every intervention of the library on this model, by label."""
    out = {f"{name} {layer}": iv.layer_hooks(name, layer) for name in iv.LAYER_INTERVENTIONS for layer in range(2)}
    if iv.applicable(model, "zero_head"):
        out["zero head 1.0"] = iv.ablate_heads(1, 0)
        out["mean head 0.1"] = iv.ablate_heads(0, 1, torch.ones(2, 8))
    return out


@pytest.mark.parametrize("wiring", WIRINGS, ids=lambda w: "-".join(f"{v}" for v in w.values()))
def test_same_numbers_on_residualgpt_and_its_export(wiring):
    from interp.tl.load import load_tl

    model = tiny(**wiring)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no tokenizer; a non-additive stream: neither is what is compared
        tl = load_tl(model)
    x, y = batch()
    worst = 0.0
    for hooks in all_hooks(model).values():
        a = iv.per_sequence_loss(model, x, y, hooks)[0]
        b = iv.per_sequence_loss(tl, x, y, hooks)[0]
        worst = max(worst, float((a - b).abs().max()))
    # patching a clean cache into a corrupted run, at one position
    _, cache = iv.per_sequence_loss(model, x, y, keep=["blocks.0.hook_resid_post"])
    at = torch.full((len(x),), 5)
    bad = fx.corrupt_previous(x, 5, np.ones(11) / 11)
    hooks = iv.patch("blocks.0.hook_resid_post", cache["blocks.0.hook_resid_post"], None, at)
    a = iv.per_sequence_loss(model, bad, y, hooks, positions=at)[0]
    b = iv.per_sequence_loss(tl, bad, y, hooks, positions=at)[0]
    worst = max(worst, float((a - b).abs().max()))
    print(f"largest |loss difference| ResidualGPT vs export: {worst:.2e}")
    assert worst < 1e-5


def _same_weights(model, **changes):
    twin = ResidualGPT(model.cfg.replace(**changes)).eval()
    twin.load_state_dict(model.state_dict())
    twin.set_explicit_attention(True)
    return twin


def test_each_intervention_is_the_wiring_it_imitates():
    model, (x, y) = tiny(), batch()
    every = [h for layer in range(2) for h in iv.remove_attn_residual(layer)]
    assert torch.equal(
        iv.per_sequence_loss(model, x, y, every)[0],
        iv.per_sequence_loss(_same_weights(model, residual="ffn_only"), x, y)[0],
    )
    every = [h for layer in range(2) for h in iv.remove_ffn_residual(layer)]
    assert torch.equal(
        iv.per_sequence_loss(model, x, y, every)[0],
        iv.per_sequence_loss(_same_weights(model, residual="attn_only"), x, y)[0],
    )
    every = [h for layer in range(2) for h in iv.knock_out_self(layer)]
    torch.testing.assert_close(
        iv.per_sequence_loss(model, x, y, every)[0],
        iv.per_sequence_loss(_same_weights(model, self_bias=-math.inf), x, y)[0],
    )
    every = [h for layer in range(2) for h in iv.self_only(layer)]
    torch.testing.assert_close(
        iv.per_sequence_loss(model, x, y, every)[0],
        iv.per_sequence_loss(_same_weights(model, self_bias=math.inf), x, y)[0],
    )


def test_an_absent_path_makes_its_intervention_a_no_op():
    x, y = batch()
    cases = [
        (dict(residual="ffn_only"), "remove_attn_residual", 0.0),
        (dict(residual="none"), "remove_attn_residual", 0.0),
        (dict(residual="attn_only"), "remove_ffn_residual", 0.0),
        (dict(self_bias=math.inf), "self_only", 0.0),
        (dict(self_bias=-math.inf), "knock_out_self", 1e-6),
        (dict(mixer="uniform"), "uniform_pattern", 1e-6),
    ]
    for wiring, name, tol in cases:
        model = tiny(**wiring)
        clean = iv.per_sequence_loss(model, x, y)[0]
        for layer in range(2):
            moved = float((iv.per_sequence_loss(model, x, y, iv.layer_hooks(name, layer))[0] - clean).abs().max())
            assert moved <= tol, (wiring, name, moved)
    model = tiny()
    noop = iv.no_op([n for n in model.hook_dict if not n.endswith("hook_scale")])
    assert torch.equal(iv.per_sequence_loss(model, x, y, noop)[0], iv.per_sequence_loss(model, x, y)[0])


def test_a_model_without_the_hook_is_refused_by_name():
    model = tiny(mixer="position_blind")
    assert not iv.applicable(model, "knock_out_self") and iv.applicable(model, "remove_attn_residual")
    with pytest.raises(iv.InterventionError, match="hook_pattern"):
        iv.per_sequence_loss(model, *batch(), iv.knock_out_self(0))
    with pytest.raises(iv.InterventionError, match="unknown"):
        iv.layer_hooks("remove_everything", 0)


def test_patching_ends_and_sanity_checks():
    model = tiny()
    batches = [batch(1), batch(2)]
    raw = fx.measure_model(model, batches, patch_pos=5, unigram=np.ones(11) / 11)
    p = raw["patching"]
    assert np.array_equal(p["first_resid_pre"], p["corrupt"])  # the previous token has not reached T yet
    assert np.array_equal(p["sites"]["resid_post"][-1], p["clean"])  # everything T knows
    checks = fx.sanity_checks("full", model.cfg, raw, {"unigram": 2.4, "bigram": 2.3}, 0.05)
    assert all(c["ok"] for c in checks), [c for c in checks if not c["ok"]]
    summary = fx.summarise(raw, fx.bootstrap_index(8), {"unigram": 2.4, "bigram": 2.3}, 0.05)
    assert len(summary["heads"]["zero_head"]) == 2 and len(summary["layers"]["self_only"]) == 2


def test_knocking_out_the_only_path_of_a_self_only_model_cuts_the_stream():
    model = tiny(residual="ffn_only", self_bias=math.inf)
    x, y = batch()
    # with every row of the pattern empty, the stream after the layer is the same for every input and position
    for layer in range(2):
        name = f"blocks.{layer}.hook_resid_mid"
        mid = iv.per_sequence_loss(model, x, y, iv.knock_out_self(layer), keep=[name])[1][name]
        assert torch.allclose(mid, mid[:1, :1].expand_as(mid))
        clean = iv.per_sequence_loss(model, x, y, keep=[name])[1][name]
        assert not torch.allclose(clean, clean[:1, :1].expand_as(clean))  # unhooked, it depends on the input


def test_decoders_fitted_once_score_other_activations():
    from probes.decoders import fit_decoders

    model = tiny()
    sites = ["blocks.0.hook_resid_post"]
    decoders = fit_decoders(model, np.random.default_rng(0).integers(0, 11, 2000), sites, n_train_windows=16)
    x, y = batch()
    _, acts = iv.per_sequence_loss(model, x, y, keep=sites)
    ce = decoders.per_sequence_ce(sites[0], acts[sites[0]], x)
    assert ce.shape == (4, 2) and bool((ce[:, 0] < math.log(11)).all())  # the current token reads off its site
    noise = decoders.per_sequence_ce(sites[0], torch.randn_like(acts[sites[0]]), x)
    assert float(noise[:, 0].mean()) > float(ce[:, 0].mean())


def test_bootstrap_intervals():
    idx = fx.bootstrap_index(50)
    values = np.random.default_rng(0).normal(1.0, 0.1, 50)
    i = fx.interval(values, idx)
    assert i["lo"] < i["mean"] < i["hi"] and i["hi"] - i["lo"] < 0.1
    assert fx.ratio_interval(values, np.zeros(50), idx) is None
    assert fx.ratio_interval(values, values, idx) == {"mean": 1.0, "lo": 1.0, "hi": 1.0}


# ----- the rules, branch by branch (synthetic outcomes) ------------------------------------------------------


def row(delta, spread=0.01, loss=None, probe=None):
    d = {"mean": delta, "lo": delta - spread, "hi": delta + spread}
    r = {
        "delta": d,
        "loss": {
            "mean": loss or 1.5 + delta,
            "lo": (loss or 1.5 + delta) - spread,
            "hi": (loss or 1.5 + delta) + spread,
        },
    }
    if probe is not None:
        r["identity"] = {
            "clean_ce": [0.1, 2.0],
            "ce": [0.1 + probe, 2.0],
            "delta_ce": [{"mean": probe, "lo": probe - spread, "hi": probe + spread}, d],
        }
    return r


def variant(clean=1.5, **layers):
    return {"clean_loss": {"mean": clean, "lo": clean, "hi": clean}, "layers": layers}


def outcome(**variants):
    return rules.InterventionOutcome(
        {k.replace("__", " + "): v for k, v in variants.items()}, unigram=3.3, bigram=2.5, margin=0.05
    )


@pytest.mark.parametrize(
    "deltas,expected", [([0.0, 0.3], "supports"), ([0.0, 0.01], "contradicts"), ([0.0, 0.05], "inconclusive")]
)
def test_raises_rule(deltas, expected):
    for decide, (name, iv_name) in [
        (rules.decide_i1, ("full", "remove_attn_residual")),
        (rules.decide_i3, ("attn_only", "knock_out_self")),
        (rules.decide_i5, ("attn_only", "uniform_pattern")),
    ]:
        o = outcome(**{name: variant(**{iv_name: [row(d) for d in deltas]})})
        verdict, measured, interval = decide(o)
        assert verdict == expected and "peak layer 1" in interval
    assert (
        rules.raises(outcome(full=variant(remove_attn_residual=None)), "full", "remove_attn_residual")[0]
        == "inconclusive"
    )


def test_with_three_seeds_an_effect_must_also_clear_three_seed_std():
    effect = {"remove_attn_residual": [row(0.0), row(0.3)], "knock_out_self": [row(0.0), row(0.1)]}
    for spread, n_seeds, expected in ((0.03, 3, "supports"), (0.2, 3, "inconclusive"), (0.2, 2, "supports")):
        full = {
            **variant(**effect),
            "n_seeds": n_seeds,
            "seed_spread": {"remove_attn_residual": [0.0, spread], "knock_out_self": [0.0, spread]},
        }
        assert rules.decide_i1(outcome(full=full))[0] == expected, (spread, n_seeds)
        assert rules.decide_i2(outcome(full=full))[0] == expected, (spread, n_seeds)


@pytest.mark.parametrize(
    "small,large,expected", [(0.1, 0.5, "supports"), (0.5, 0.1, "contradicts"), (0.3, 0.31, "inconclusive")]
)
def test_smaller_rule(small, large, expected):
    o = outcome(
        full=variant(knock_out_self=[row(small)], remove_attn_residual=[row(large)]),
        attn_only=variant(self_only=[row(small)], knock_out_self=[row(large)], remove_attn_residual=[row(small)]),
        attn_only__no_self=variant(remove_attn_residual=[row(large)]),
    )
    for decide in (rules.decide_i2, rules.decide_i4, rules.decide_i6):
        assert decide(o)[0] == expected
    assert (
        rules.decide_i2(outcome(full=variant(knock_out_self=None, remove_attn_residual=[row(0.1)])))[0]
        == "inconclusive"
    )


@pytest.mark.parametrize(
    "losses,expected", [([3.4, 3.5], "supports"), ([3.4, 2.0], "contradicts"), ([3.4, 3.255], "inconclusive")]
)
def test_floor_rule(losses, expected):
    o = outcome(ffn_only__self_bias=variant(knock_out_self=[row(0.5, loss=v) for v in losses]))
    assert rules.decide_i7(o)[0] == expected
    assert rules.decide_i7(outcome(ffn_only__self_bias=variant(knock_out_self=None)))[0] == "inconclusive"


@pytest.mark.parametrize(
    "rises,expected", [([1.0, 2.0], "supports"), ([1.0, 0.0], "contradicts"), ([1.0, 0.05], "inconclusive")]
)
def test_identity_rule(rises, expected):
    o = outcome(ffn_only__self_bias=variant(knock_out_self=[row(0.5, probe=r) for r in rises]))
    assert rules.decide_i8(o)[0] == expected
    no_probes = outcome(ffn_only__self_bias=variant(knock_out_self=[row(0.5)]))
    assert rules.decide_i8(no_probes)[0] == "inconclusive"


def test_verdicts_guard_missing_and_floored_models():
    levels = {"unigram": 3.3, "bigram": 2.5}
    out = rules.intervention_verdicts({"full": variant(clean=3.3, remove_attn_residual=[row(1.0)])}, levels, 0.05)
    assert [v["id"] for v in out] == [f"I{i}" for i in range(1, 9)]
    assert "unigram floor" in out[0]["measured"] and out[0]["verdict"] == "inconclusive"
    assert out[2]["measured"] == "not run"
    decided = rules.intervention_verdicts(
        {"full": variant(remove_attn_residual=[row(1.0)], knock_out_self=[row(0.0)])}, levels, 0.05
    )
    assert decided[0]["verdict"] == "supports" and rules.bearing(decided[0]) == "refines P1 at inference"
    assert all(p.bears_on in {f"P{i}" for i in range(1, 8)} for p in rules.PREDICTIONS)


# ----- the experiment --------------------------------------------------------------------------------------


def test_smoke_end_to_end(tmp_path, data, capsys):
    out = tmp_path / "out"
    argv = [
        "--preset",
        "smoke",
        "--out",
        str(out),
        "--no-progress",
        "--val-batches",
        "1",
        "--variants",
        "full,ffn_only + self_only",
    ]
    assert interventions.EXPERIMENT.main(argv) == 0
    # what it must train, and its cost, is said before anything trains
    printed = capsys.readouterr().out
    assert "0 of 2 finished and reused; 2 to train first" in printed and " of training here" in printed
    assert printed.index("to train first") < printed.index("reference levels")
    results = json.loads((out / "smoke" / "results-interventions.json").read_text())
    assert results["schema"] == "interventions/1" and results["n_sequences"] == 8
    assert list(results["variants"]) == ["full", "ffn_only + self_only"]
    assert [v["id"] for v in results["verdicts"]] == [f"I{i}" for i in range(1, 9)]
    assert all(c["ok"] for c in results["sanity"]), [c for c in results["sanity"] if not c["ok"]]
    assert max(e["max_abs_diff"] for e in results["export"].values()) < 1e-5
    levels = results["variants"]["full"]["effects"]["probe_levels"]
    assert levels["offsets"] == [0, -1] and levels["current_token_ce"][0] == 0.0
    assert 0 < levels["current_token_ce"][1] < levels["unigram_ce"][1]  # the current token tells about the last
    effects = results["variants"]["ffn_only + self_only"]["effects"]
    assert effects["layers"]["remove_attn_residual"][0]["delta"]["mean"] == 0.0  # no attention residual to remove
    assert effects["layers"]["self_only"][1]["delta"] == {"mean": 0.0, "lo": 0.0, "hi": 0.0}
    # the runs are the routing test's: same directories
    assert (out / "smoke" / "ffn_only_self_only" / "seed1337" / "final.json").exists()
    page = (out / "smoke" / "report-interventions.html").read_text()
    assert external_references(page) == []  # nothing fetched from the network (tests/offline.py)
    for heading in ("Verdicts", "Sanity checks", "full: effects", "full: patching", "Identity flow"):
        assert heading in page
    # a second look reuses every run
    assert interventions.EXPERIMENT.main([*argv[:-2], "--variants", "full", "--no-identity", "--no-report"]) == 0
    assert "all 1 finished, reused; nothing to train" in capsys.readouterr().out


def test_the_default_out_is_the_routing_tests_so_its_runs_are_reused():
    from experiments.routing_test import run as routing_test

    assert interventions.EXPERIMENT.default_out == routing_test.EXPERIMENT.default_out == "runs/routing_test"
    assert interventions.EXPERIMENT.parser().parse_args([]).out == "runs/routing_test"


def test_bad_options_are_one_error_line(capsys, data):
    assert interventions.EXPERIMENT.main(["--preset", "smoke", "--val-batches", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --val-batches")
    assert interventions.EXPERIMENT.main(["--preset", "smoke", "--patch-pos", "0", "--out", "/tmp/x-none"]) == 2


def test_a_head_index_outside_the_layer_is_refused():
    from interp.reading.interventions import InterventionError, ablate_heads

    model = ResidualGPT(ModelConfig(n_layers=1, n_heads=2, d_model=16, n_ctx=8, d_vocab=5)).eval()
    x = torch.randint(0, 5, (2, 8))
    for head in (-1, 2):
        with pytest.raises(InterventionError, match="heads 0..1"):
            model.run_with_hooks(x, fwd_hooks=ablate_heads(0, head))

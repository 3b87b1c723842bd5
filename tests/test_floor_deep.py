"""python -m experiments.floor --parts deep (issue 59 item 2): the paper-124m depth in miniature - its arms, the
dense gradient probe of the first steps (which reads and changes no run), and the part end to end on smoke."""

import json
from types import SimpleNamespace

import pytest
import torch

from experiments.floor.arms import Arms
from experiments.floor.run import EXPERIMENT
from interp.errors import ToolkitError
from probes import GradientProbe
from training.data import load_corpus
from training.ensemble import EnsembleTrainer
from training.presets import resolve
from training.rundir import RunDir
from training.trainer import Trainer


def test_the_deep_arms_are_paper_124m_depth_with_its_warmup_fraction_at_phase_cell_width():
    spec = resolve("phase-cell", {"lr_schedule": "constant", "eval_from": 0.0})
    arms = Arms(SimpleNamespace(args=SimpleNamespace(parts="deep", qk_scales=None), spec=spec))
    by = {arms.name(a): a for a in arms.arms}
    assert set(by) == {
        "attn_only L12 600 steps warmup0.1-cosine",
        "attn_only L12 600 steps",
        "full L12 600 steps",
        "ffn_only L12 600 steps",
        "attn_only L12 1800 steps warmup0.1-cosine",
        "attn_only L12 1800 steps",
    }
    warm = arms.variant(by["attn_only L12 600 steps warmup0.1-cosine"]).overrides
    assert warm["warmup_steps"] == 60 and warm["lr_schedule"] == "cosine" and warm["lr"] == 1e-3
    assert arms.variant(by["attn_only L12 1800 steps warmup0.1-cosine"]).overrides["warmup_steps"] == 180
    const = arms.variant(by["attn_only L12 600 steps"]).overrides
    assert const["lr_schedule"] == "constant" and "warmup_steps" not in const and const["n_layers"] == 12
    assert {a.seeds for a in arms.arms if a.length == 3 * arms.deep_length} == {3}
    assert all(a.seeds is None for a in arms.arms if a.length == arms.deep_length)  # every --seed


def test_deep_refuses_a_warmup_it_sets_itself(tmp_path, capsys, data):
    argv = ["--preset", "smoke", "--parts", "deep", "--out", str(tmp_path / "o"), "--set", "warmup_steps=3"]
    assert EXPERIMENT.main(argv) == 2
    err = capsys.readouterr().err
    assert "arms set warmup_steps" in err and err.count("\n") == 1


def _trainer(out, dense: int) -> Trainer:
    spec = resolve("smoke", {"n_layers": 3, "residual": "attn_only", "max_steps": 20, "seed": 7})
    corpus = load_corpus(spec.train.corpus, spec.train.data_path)
    spec = spec.fit_vocab(corpus.vocab_size)
    probe = GradientProbe(spec.train.log_interval, dense_until=dense)
    return Trainer(spec.model, spec.train, RunDir(out), callbacks=[probe], corpus=corpus, progress=False)


@pytest.mark.parametrize("stacked", [False, True])
def test_the_dense_gradient_probe_logs_every_early_step_and_changes_no_number(tmp_path, data, stacked):
    runs = {}
    for dense in (-1, 8):
        t = _trainer(tmp_path / f"{stacked}{dense}", dense)
        final = EnsembleTrainer([t], progress=False).run()[0] if stacked else t.run()
        steps = [json.loads(x)["step"] for x in (t.run_dir.path / "probes.jsonl").read_text().splitlines()]
        runs[dense] = (final, torch.load(t.run_dir.ckpt, weights_only=False)["weights"], steps)
    (plain, w_plain, s_plain), (dense, w_dense, s_dense) = runs[-1], runs[8]
    assert s_plain == [0, 5, 10, 15, 19] and s_dense == [*range(9), 10, 15, 19]
    assert plain["final_val_loss"] == dense["final_val_loss"]
    assert w_plain.keys() == w_dense.keys() and all(torch.equal(w_plain[k], w_dense[k]) for k in w_plain)


def test_smoke_deep_part_reads_the_floor_and_the_first_steps_gradients(tmp_path, capsys, data):
    argv = ["--preset", "smoke", "--parts", "deep", "--out", str(tmp_path), "--no-progress", "--seeds", "1,2,3"]
    assert EXPERIMENT.main(argv) == 0
    out = capsys.readouterr().out
    results = json.loads((tmp_path / "smoke" / "results-floor.json").read_text())
    deep = results["deep"]
    names = {c["name"]: c for c in results["cells"]}
    assert set(names) == {
        "attn_only L3 40 steps warmup0.1-cosine",
        "attn_only L3 40 steps",
        "full L3 40 steps",
        "ffn_only L3 40 steps",
        "attn_only L3 120 steps warmup0.1-cosine",
        "attn_only L3 120 steps",
    }
    for c in names.values():  # the fraction on the floor at the end, with its interval, as every arm's
        s = c["survival_at_last"]
        assert c["n"] == 3 and s[1] <= s[0] <= s[2]
    assert deep["warmup_arm"] == "attn_only L3 40 steps warmup0.1-cosine" and deep["warmup_steps"] == 4
    assert sorted(deep["confirm_arms"]) == ["attn_only L3 120 steps", "attn_only L3 120 steps warmup0.1-cosine"]
    assert deep["steps"] == [0, 1, 2, 5, 10]
    # every arm at every table step, 3 layers, 3 runs; the lr the schedule gives there
    table = {(r["arm"], r["step"]): r for r in deep["grad_table"]}
    assert set(table) == {(a, s) for a in names for s in deep["steps"]}
    assert all(len(r["mlp"]) == len(r["attn"]) == 3 and len(r["resid"]) == 4 and r["n"] == 3 for r in table.values())
    assert table[(deep["warmup_arm"], 0)]["lr"] == pytest.approx(6e-3 / 4)  # smoke lr 3e-3 x 2, a quarter
    assert table[(deep["constant_arm"], 0)]["lr"] == pytest.approx(6e-3)
    # step 0: same weights, same first batch, only the lr differs - the same gradients to the bit
    assert deep["step0_gap"] == 0.0
    assert table[(deep["warmup_arm"], 0)]["mlp"] == table[(deep["constant_arm"], 0)]["mlp"]
    assert table[(deep["warmup_arm"], 5)]["mlp"] != table[(deep["constant_arm"], 5)]["mlp"]
    for r in results["runs"]:
        assert set(r["grads"]) == {"0", "1", "2", "5", "10"}
    assert "deep (3 layers): on the floor at step 40, attn_only with a constant lr " in out
    assert "attn_only L3 120 steps (at 3x, 3 seeds): " in out
    assert "gradient norm of the MLP parameters before clipping" in out
    assert "early predictor" not in out  # no control runs: nothing to say, so nothing said
    assert "attn_only L3 120 steps  " not in out.split("per layer, gradient norm")[1]  # 3x arms: the report's
    assert results["transfer"] == {}  # the ffn_only relation is not applied to the deep arms


def test_a_gradients_record_cut_or_written_twice_is_refused_by_run():
    from experiments.floor.deep import early_grads

    whole = {"step": 5, "attn": [1.0], "mlp": [2.0], "resid": [3.0, 4.0], "total": 5.0}
    assert early_grads({"gradients": [whole]}, [0, 5], "r")["5"]["mlp"] == [2.0]
    cut = {k: v for k, v in whole.items() if k != "mlp"}
    with pytest.raises(ToolkitError, match="r/probes.jsonl: the gradients record at step 5 lacks mlp"):
        early_grads({"gradients": [cut]}, [5], "r")
    with pytest.raises(ToolkitError, match="is the second one at that step"):
        early_grads({"gradients": [whole, {**whole, "attn": [1000.0]}]}, [5], "r")
    # a list cut short, one step's layers against another's, or a norm that is no number: one line, no traceback
    later = {**whole, "step": 6}
    for bad in (
        {**whole, "mlp": []},
        {**whole, "attn": [1.0, 2.0]},
        {**whole, "mlp": ["2.0"]},
        {**whole, "total": True},
    ):
        with pytest.raises(ToolkitError, match="is not one list of numbers a layer for each part"):
            early_grads({"gradients": [bad]}, [5], "r")
    with pytest.raises(ToolkitError, match="at step 6 is not one list of numbers a layer"):
        early_grads({"gradients": [whole, {**later, "resid": [3.0]}]}, [5, 6], "r")

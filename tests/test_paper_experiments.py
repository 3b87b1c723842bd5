"""The paper's experiments as commands: residual sweep, gain confound, evaluation noise.

Each command runs in-process on the smoke preset (seconds per run); the tests check the documented
results.json keys, finite numbers, a self-contained report.html, resumption, and the Adam-invariance figure.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import run_module
from offline import external_references

from experiments.eval_noise import run as eval_noise
from experiments.gain_confound import run as gain_confound
from experiments.residual_sweep import run as residual_sweep
from interp.files.checkpoint import HASH_KEY, content_hash
from training.presets import TrainConfig

CONFIGS = ("full", "attn_only", "ffn_only", "none")


def finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_report(path: Path) -> None:
    """report.html exists, carries plotly.js inline once and loads no script from the network."""
    assert path.is_file()
    text = path.read_text(encoding="utf-8")
    assert "Plotly" in text and len(text) > 1_000_000  # plotly.js itself, embedded
    scripts = re.findall(r"<script[^>]*>", text)
    assert not [s for s in scripts if "src=" in s], scripts
    assert external_references(text) == []  # nor a style sheet, image or module import (tests/offline.py)
    assert len(re.findall(r"/\*! For license information please see plotly", text)) <= 1


def check_common(results: dict, experiment: str, preset: str = "smoke") -> None:
    for key in (
        "schema",
        "experiment",
        "preset",
        "seeds",
        "config",
        "reference_levels",
        "runs",
        "software",
        "train_wall_time_s",
        "wall_time_s",
        "created",
    ):
        assert key in results, key
    assert results["experiment"] == experiment and results["preset"] == preset
    levels = results["reference_levels"]
    assert finite(levels["unigram"]) and finite(levels["bigram"]) and levels["bigram"] < levels["unigram"]
    assert {"model", "train"} <= set(results["config"])
    assert finite(results["wall_time_s"]) and finite(results["train_wall_time_s"])
    assert "torch" in results["software"]
    for run in results["runs"]:
        for key in (
            "variant",
            "seed",
            "run_dir",
            "final_val_loss",
            "best_val_loss",
            "best_step",
            "wall_time_s",
            "val_curve",
        ):
            assert key in run, key
        assert finite(run["final_val_loss"]) and finite(run["best_val_loss"]) and finite(run["wall_time_s"])
        assert len(run["val_curve"]["steps"]) == len(run["val_curve"]["loss"]) > 1
        assert all(finite(v) for v in run["val_curve"]["loss"])


def final_mtimes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("final.json")}


# ----- residual sweep --------------------------------------------------------------------------------------


def test_residual_sweep_smoke_schema_and_resume(tmp_path, shared_data, capsys):
    out = tmp_path / "sweep"
    argv = ["--preset", "smoke", "--out", str(out), "--no-progress", "--seeds", "1337"]
    assert residual_sweep.EXPERIMENT.main(argv) == 0
    printed = capsys.readouterr().out
    assert "rule: collapses" in printed and "unigram" in printed and "bigram" in printed

    result_dir = out / "smoke"
    first = json.loads((result_dir / "results-residual_sweep.json").read_text())
    check_common(first, "residual_sweep")
    assert first["schema"] == residual_sweep.SCHEMA and first["seeds"] == [1337]
    assert first["paper"] is None  # smoke is not a paper setting
    assert set(first["configs"]) == set(CONFIGS)
    assert first["config"]["variants"] == {c: {"residual": c} for c in CONFIGS}
    # every derived number recomputed from the runs it summarises
    final = {r["variant"]: r["final_val_loss"] for r in first["runs"]}
    floor = min(first["reference_levels"]["unigram"], final["none"])
    for name, c in first["configs"].items():
        assert c["final_val_loss"]["mean"] == final[name] and c["final_val_loss"]["n"] == 1
        assert c["ratio_to_full"] == pytest.approx(final[name] / final["full"])
        assert c["gap_to_none"] == pytest.approx(final[name] - final["none"])
        assert c["floor"] == floor and c["margin"] == 0.05  # one seed: no 3-std widening
        expected = "collapses" if final[name] >= floor - 0.05 else "recovers"
        assert c["classification"] == expected, name
    # contract 3: <out>/<preset>/<variant>/seed<k>/
    assert sorted(p.parent.name for p in result_dir.glob("*/seed1337")) == sorted(CONFIGS)
    check_report(result_dir / "report-residual_sweep.html")

    # an interrupted sweep: one run directory gone; the rerun trains only that one
    before = final_mtimes(result_dir)
    shutil.rmtree(result_dir / "ffn_only")
    assert residual_sweep.EXPERIMENT.main(argv) == 0
    after = final_mtimes(result_dir)
    assert set(after) == set(before)
    assert {k: v for k, v in after.items() if not k.startswith("ffn_only")} == {
        k: v for k, v in before.items() if not k.startswith("ffn_only")
    }
    assert after["ffn_only/seed1337/final.json"] != before["ffn_only/seed1337/final.json"]
    second = json.loads((result_dir / "results-residual_sweep.json").read_text())
    for a, b in zip(first["runs"], second["runs"], strict=True):
        assert (a["variant"], a["final_val_loss"], a["best_val_loss"], a["val_curve"]) == (
            b["variant"],
            b["final_val_loss"],
            b["best_val_loss"],
            b["val_curve"],
        )
    assert {k: v["final_val_loss"] for k, v in first["configs"].items()} == {
        k: v["final_val_loss"] for k, v in second["configs"].items()
    }

    # finished runs of another configuration are refused, not silently reported as this one
    written = (result_dir / "results-residual_sweep.json").read_bytes()
    capsys.readouterr()
    assert residual_sweep.EXPERIMENT.main([*argv, "--set", "max_steps=30"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "different configuration" in err[0]
    assert (result_dir / "results-residual_sweep.json").read_bytes() == written


def test_residual_sweep_classification_and_paper_column():
    levels = {"unigram": 3.347, "bigram": 2.482}
    values = {"full": [1.50], "attn_only": [1.578, 1.582], "ffn_only": [3.349, 3.351], "none": [3.356]}
    runs = [
        {"variant": name, "seed": i, "final_val_loss": v, "best_val_loss": v}
        for name, vs in values.items()
        for i, v in enumerate(vs)
    ]
    paper = residual_sweep.PAPER["paper-10m"]
    configs = residual_sweep.summarise_configs(runs, levels, 0.05, paper)
    assert {k: v["classification"] for k, v in configs.items()} == {
        "full": "recovers",
        "attn_only": "recovers",
        "ffn_only": "collapses",
        "none": "collapses",
    }
    assert configs["attn_only"]["delta_vs_paper"] == pytest.approx(0.0, abs=1e-9)
    assert configs["ffn_only"]["gap_to_none"] == pytest.approx(-0.006)
    assert configs["ffn_only"]["collapsed_seeds"] == [0, 1]
    headers, rows = residual_sweep.table_rows(configs, with_paper=True)
    assert "paper" in headers
    assert rows[1][headers.index("paper")] == "1.580 +/- 0.003 (8 seeds)"
    # the paper column's text is formatted from its numbers
    assert residual_sweep._paper(6.037, 0.355, 5)["text"] == "6.037 +/- 0.355 (5 seeds)"
    assert residual_sweep._paper(1.502, None, 1)["text"] == "1.502 (1 seed)"
    assert residual_sweep._paper(3.356, None, None)["text"] == "3.356"


# ----- gain confound ---------------------------------------------------------------------------------------


def test_adam_ignores_a_constant_gradient_scale():
    """The claim itself, checked without the helper: AdamW's update for G and 4G is the same (eps -> 0)."""
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(5, 3, generator=g) for _ in range(3)]
    steps = []
    for scale in (1.0, 4.0):
        p = torch.nn.Parameter(torch.ones(5, 3))
        opt = torch.optim.AdamW([p], lr=0.1, eps=1e-30, weight_decay=0.0)
        for grad in grads:
            p.grad = scale * grad
            opt.step()
        steps.append(p.detach().clone())
    assert torch.allclose(steps[0], steps[1], rtol=1e-6, atol=1e-7)
    sgd = [torch.ones(5, 3) - 0.1 * scale * sum(grads) for scale in (1.0, 4.0)]
    assert not torch.allclose(*sgd)  # a scale-sensitive optimizer does see it


def test_runtime_gain_equals_scaled_output_weights():
    """Way (a) at weights W computes the same function as way (b) at g*W (no helper involved)."""
    from interp.config.model_config import ModelConfig
    from interp.model.gpt import ResidualGPT

    cfg = ModelConfig(n_layers=2, d_model=16, n_heads=2, n_ctx=8, d_vocab=11, residual="attn_only")
    torch.manual_seed(1)
    runtime = ResidualGPT(cfg.replace(runtime_gain=2.0)).eval()
    weights = ResidualGPT(cfg).eval()
    weights.load_state_dict(runtime.state_dict())
    gain_confound.scale_output_projections(weights, 2.0)
    x = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(2))
    assert torch.allclose(runtime(x), weights(x), atol=1e-5)
    unscaled = ResidualGPT(cfg).eval()
    unscaled.load_state_dict(runtime.state_dict())
    assert not torch.allclose(runtime(x), unscaled(x), atol=1e-3)  # the gain does change attn_only's function


def test_adam_invariance_check_reports_the_algebra():
    from experiments.gain_confound.adam_invariance import adam_invariance_check

    check = adam_invariance_check(gain_confound.scale_output_projections)
    assert check["max_rel_update_diff"] < 1e-4  # eps -> 0: the algebra, up to float rounding
    assert check["model"]["function_max_abs_diff"] < 1e-5  # runtime g at W == weights g*W: the same function
    # with PyTorch's eps = 1e-8 the invariance is approximate (gradient entries near eps), but still close
    assert check["max_rel_update_diff_eps_default"] < 0.05
    assert 0 <= check["optimizer"]["small_gradient_fraction"] < 0.1


def test_scale_output_projections_touches_only_out_proj():
    from interp.config.model_config import ModelConfig
    from interp.model.gpt import ResidualGPT

    torch.manual_seed(0)
    model = ResidualGPT(ModelConfig(n_layers=2, d_model=16, n_heads=2, n_ctx=8, d_vocab=11))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    gain_confound.scale_output_projections(model, 0.5)
    for name, value in model.state_dict().items():
        scaled = name.endswith(("attn.out_proj.weight", "mlp.out_proj.weight"))
        expected = before[name] * 0.5 if scaled else before[name]
        assert torch.equal(value, expected), name


def test_gain_confound_smoke(tmp_path, shared_data, capsys):
    out = tmp_path / "gain"
    argv = ["--preset", "smoke", "--out", str(out), "--no-progress", "--gains", "0.5,1,2"]
    assert gain_confound.EXPERIMENT.main(argv) == 0
    printed = capsys.readouterr().out
    assert "Adam invariance" in printed and "m_hat/(sqrt(v_hat)+eps)" in printed

    result_dir = out / "smoke"
    results = json.loads((result_dir / "results-gain_confound.json").read_text())
    check_common(results, "gain_confound")
    assert results["schema"] == gain_confound.SCHEMA
    assert results["configs"] == ["attn_only", "ffn_only"] and results["gains"] == [0.5, 1.0, 2.0]
    # smoke is shorter; the curves are read from step 0 whatever the preset's eval_from
    assert results["defaults"] == {"max_steps": 40, "eval_interval": 10, "eval_from": 0.0, "probes": False}
    # g = 1 trained once per config, used by both ways: 2 configs x (1 + 2 runtime + 2 weights)
    assert len(results["runs"]) == 10
    names = {r["variant"] for r in results["runs"]}
    assert {"attn_only g=1", "attn_only runtime g=0.5", "attn_only weights g=2", "ffn_only runtime g=2"} <= names
    assert len(list(result_dir.glob("*/seed1337/final.json"))) == 10
    runtime = [r for r in results["runs"] if r["way"] == "runtime"]
    assert all(
        json.loads((result_dir / r["run_dir"] / "config.json").read_text())["model"]["runtime_gain"] == r["gain"]
        for r in runtime
    )
    for config in results["configs"]:
        for way in ("runtime", "weights"):
            s = results["spread"][config][way]["1337"]
            assert s["gains"] == [0.5, 1.0, 2.0]
            assert len(s["spread"]) == len(s["steps"]) == 5 and all(finite(v) and v >= 0 for v in s["spread"])
            assert s["settle_step"] is None or s["settle_step"] in s["steps"]
            assert way in results["settle_step"][config]
        rescue = results["rescue"][config]
        g1 = [r for r in results["runs"] if r["config"] == config and r["gain"] == 1.0]
        assert [r["way"] for r in g1] == ["both"]  # g = 1 trained once, shared by both ways
        assert rescue["g1_final"] == g1[0]["final_val_loss"]
        floor = results["reference_levels"]["unigram"] - results["margin"]
        for gain, v in rescue["by_gain"].items():
            run = next(
                r
                for r in results["runs"]
                if r["config"] == config and r["way"] == "weights" and gain_confound.gain_label(r["gain"]) == gain
            )
            assert v["delta_vs_g1"] == pytest.approx(run["final_val_loss"] - g1[0]["final_val_loss"])
            assert v["rescued"] == (run["final_val_loss"] < floor <= g1[0]["final_val_loss"])
        assert rescue["rescued_gains"] == [g for g, v in rescue["by_gain"].items() if v["rescued"]]
        assert set(results["finals"][config]["runtime"]) == {"0.5", "1", "2"}
    check = results["adam_invariance"]
    assert check["max_rel_update_diff"] < 1e-4 and finite(check["max_rel_update_diff_eps_default"])
    assert "LayerNorm" in results["explanation"]
    report = (result_dir / "report-gain_confound.html").read_text(encoding="utf-8")
    assert "Adam" in report and "LayerNorm" in report
    check_report(result_dir / "report-gain_confound.html")


# ----- evaluation noise ------------------------------------------------------------------------------------


def test_snapshot_steps():
    def cfg(max_steps, eval_interval, eval_from=0.0):
        return TrainConfig(max_steps=max_steps, eval_interval=eval_interval, eval_from=eval_from)

    assert eval_noise.snapshot_steps(cfg(40, 10), 5) == [10, 20, 30, 40]
    assert eval_noise.snapshot_steps(cfg(450, 75), 5) == [75, 150, 300, 375, 450]
    assert eval_noise.snapshot_steps(cfg(900, 100, 0.5), 9) == [500, 600, 700, 800, 900]  # only steps it evaluates
    steps = eval_noise.snapshot_steps(cfg(3000, 100), 5)
    assert len(steps) == 5 and steps[-1] == 3000 and steps == sorted(steps)
    assert eval_noise.snapshot_steps(cfg(45, 10), 3)[-1] == 45


def test_eval_noise_smoke(tmp_path, shared_data, capsys):
    out = tmp_path / "noise"
    argv = ["--preset", "smoke", "--out", str(out), "--no-progress", "--repeats", "8"]
    assert eval_noise.EXPERIMENT.main(argv) == 0
    printed = capsys.readouterr().out
    assert "fixed batches evaluated twice: max |diff| = 0.0e+00" in printed

    result_dir = out / "smoke"
    results = json.loads((result_dir / "results-eval_noise.json").read_text())
    check_common(results, "eval_noise")
    assert results["schema"] == eval_noise.SCHEMA and results["repeats"] == 8
    assert results["config"]["comparison"]["overrides"] == {
        "residual": "attn_only",
        "tie_embeddings": False,
        "val_mode": "random",
        "lr_schedule": "constant",
        "min_lr": 3e-3,
        "warmup_steps": 0,
        "eval_from": 0.0,
    }  # eval_from: this experiment's default
    assert [r["setting"] for r in results["runs"]] == ["preset", "nanogpt"]
    preset_run, nano_run = results["runs"]
    assert (preset_run["val_mode"], preset_run["tie_embeddings"]) == ("fixed", True)
    assert (nano_run["val_mode"], nano_run["lr_schedule"], nano_run["tie_embeddings"]) == ("random", "constant", False)
    for run in results["runs"]:
        steps = [s["step"] for s in run["snapshots"]]
        assert steps == [10, 20, 30, 40]
        assert all((result_dir / run["run_dir"] / "snapshots" / f"step{k}.pt").is_file() for k in steps)
        for s in run["snapshots"]:
            assert s["fixed_repeat_diff"] == 0.0  # identical batches, identical number
            assert len(s["random_losses"]) == 8 and all(finite(v) for v in s["random_losses"])
            assert s["random"]["std"] > 0  # fresh random batches do move the number
        best = run["best"]
        assert best["fixed_step"] in steps and all(k in steps for k in best["random_steps"])
        assert 0.0 <= best["fraction_different"] <= 1.0 and finite(best["random_loss"]["mean"])
    # the last snapshot on the fixed batches is exactly what the trainer measured there
    assert preset_run["fixed_matches_training"] == 0.0 and nano_run["fixed_matches_training"] is None
    assert set(results["summary"]) == {"preset", "nanogpt"}
    check_report(result_dir / "report-eval_noise.html")

    # a snapshot copied from another step, or from another run, is named and never evaluated (it was: exit 0,
    # results rewritten with the other weights' numbers)
    written = (result_dir / "results-eval_noise.json").read_bytes()
    nano, preset = result_dir / nano_run["run_dir"] / "snapshots", result_dir / preset_run["run_dir"] / "snapshots"
    for source, target in [(nano / "step40.pt", nano / "step10.pt"), (preset / "step30.pt", nano / "step30.pt")]:
        kept = target.read_bytes()
        shutil.copyfile(source, target)
        assert eval_noise.EXPERIMENT.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{target} is not this run's snapshot" in err[0], err
        assert (result_dir / "results-eval_noise.json").read_bytes() == written
        target.write_bytes(kept)

    # a snapshot's weights edited and its own content hash recomputed, as a forger would: the run sealed the hash
    # it wrote, so the edit is named (it was evaluated, exit 0)
    target = nano / "step20.pt"
    kept = target.read_bytes()
    payload = torch.load(target, weights_only=True)
    name = next(k for k, v in payload["weights"].items() if v.dim() == 2)
    payload["weights"][name] = payload["weights"][name] * 1.01
    payload[HASH_KEY] = content_hash({k: v for k, v in payload.items() if k != HASH_KEY})
    torch.save(payload, target)
    assert eval_noise.EXPERIMENT.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{target} is not the snapshot this run wrote at step 20" in err[0], err
    assert (result_dir / "results-eval_noise.json").read_bytes() == written
    target.write_bytes(kept)

    # a finished run without snapshots is refused with one line, exit 2, results untouched
    shutil.rmtree(result_dir / preset_run["run_dir"] / "snapshots")
    assert eval_noise.EXPERIMENT.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "snapshots" in err[0]
    assert (result_dir / "results-eval_noise.json").read_bytes() == written


# ----- command lines ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["residual_sweep", "gain_confound", "eval_noise"])
def test_help(module):
    proc = run_module(f"experiments.{module}", "--help", timeout=120)
    assert proc.returncode == 0
    assert "--preset" in proc.stdout and "--seeds" in proc.stdout and "--out" in proc.stdout


def test_gain_confound_help_documents_the_step_default():
    proc = run_module("experiments.gain_confound", "--help", timeout=120)
    assert "max_steps = min(preset's, 250)" in proc.stdout and "--set max_steps=N" in proc.stdout


@pytest.mark.parametrize(
    "module, args, needle",
    [
        ("residual_sweep", ["--preset", "nope"], "unknown preset"),
        ("residual_sweep", ["--seeds", "1,1"], "--seeds"),
        ("gain_confound", ["--gains", "0,1"], "--gains"),
        ("gain_confound", ["--configs", "attn_only,bogus"], "--configs"),
        ("eval_noise", ["--config", "bogus"], "--config"),
        ("eval_noise", ["--set", "max_steps=-1"], "max_steps"),
        ("eval_noise", ["--set", "residual=full"], "--config"),
        ("gain_confound", ["--set", "runtime_gain=2"], "--gains"),
    ],
)
def test_bad_input_is_one_error_line(module, args, needle, tmp_path):
    proc = run_module(f"experiments.{module}", *args, "--out", str(tmp_path), timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], proc.stderr
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("module", [residual_sweep, eval_noise])
def test_every_spec_holds_the_vocabulary_that_is_trained(module, tmp_path):
    """The synthetic corpus has 32 characters, the smoke preset says 65: results.json's config.model, every
    job and the config.json the launcher compares all hold 32, the trained value."""
    from experiments.cluster.launch import run_config

    ctx, jobs = module.EXPERIMENT.context(["--preset", "smoke", "--set", "corpus=synthetic", "--out", str(tmp_path)])
    assert ctx.corpus.vocab_size == 32 and ctx.spec.model.d_vocab == 32
    assert jobs and {job.spec.model.d_vocab for job in jobs} == {32}
    assert {run_config(job, ctx.corpus)["model"]["d_vocab"] for job in jobs} == {32}

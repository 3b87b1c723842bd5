"""Ensembles (training.ensemble): K same-shape runs trained as one, each member an ordinary run directory."""

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from interp.errors import ConfigError
from probes import default_callbacks
from training.data import load_corpus
from training.ensemble import EnsembleTrainer
from training.grouping import check_ensemble_fits, group
from training.loop import FAILED, TrainingError, TrainingInterrupted
from training.presets import resolve
from training.rundir import RunDir
from training.trainer import Trainer

REPO = Path(__file__).resolve().parents[1]
MEMBERS = [
    dict(residual="ffn_only", seed=1),
    dict(residual="attn_only", seed=2),
    dict(residual="full", seed=3, self_bias=4.0, lr=5e-3, weight_decay=0.0),
    dict(residual="none", seed=4, self_bias=float("-inf")),
]


def member(out: Path, overrides: dict, preset: str = "smoke", model_init=None, **extra) -> Trainer:
    spec = resolve(preset, {**overrides, **extra})
    corpus = load_corpus(spec.train.corpus, spec.train.data_path)
    spec = spec.fit_vocab(corpus.vocab_size)
    name = "_".join(f"{k}{v}" for k, v in overrides.items())
    t = Trainer(
        spec.model,
        spec.train,
        RunDir(out / name),
        corpus=corpus,
        progress=False,
        meta={"variant": name},
        model_init=model_init,
    )
    t.callbacks.extend(default_callbacks(spec.train))
    return t


def numbers(record) -> list[float]:
    """Every number in a probe record, in order (nested lists flattened; strings and bools skipped)."""
    if isinstance(record, dict):
        return [x for v in record.values() for x in numbers(v)]
    if isinstance(record, list):
        return [x for v in record for x in numbers(v)]
    return [float(record)] if isinstance(record, (int, float)) and not isinstance(record, bool) else []


def records(run: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (run / name).read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The same four runs trained alone and as one ensemble."""
    from conftest import data_root

    mp = pytest.MonkeyPatch()
    mp.setenv("RESIDUAL_DATA_DIR", str(data_root()))
    out = tmp_path_factory.mktemp("ensemble")
    solo = [member(out / "solo", m).run() for m in MEMBERS]
    ens = EnsembleTrainer([member(out / "ens", m) for m in MEMBERS], progress=False).run()
    yield out, solo, ens
    mp.undo()


def test_members_match_their_solo_runs(trained):
    out, solo, ens = trained
    for m, a, b in zip(MEMBERS, solo, ens, strict=True):
        name = "_".join(f"{k}{v}" for k, v in m.items())
        la = [r for r in records(out / "solo" / name, "metrics.jsonl") if "train_loss" in r]
        lb = [r for r in records(out / "ens" / name, "metrics.jsonl") if "train_loss" in r]
        assert [r["step"] for r in la] == [r["step"] for r in lb]
        for ra, rb in zip(la, lb, strict=True):
            assert set(ra) == set(rb)
            assert abs(ra["train_loss"] - rb["train_loss"]) <= 1e-5 * ra["train_loss"], (name, ra, rb)
        assert abs(a["final_val_loss"] - b["final_val_loss"]) < 1e-4
        assert b["ensemble"]["size"] == len(MEMBERS) and "ensemble" not in a
        pa, pb = records(out / "solo" / name, "probes.jsonl"), records(out / "ens" / name, "probes.jsonl")
        assert [(r["step"], r["probe"]) for r in pa] == [(r["step"], r["probe"]) for r in pb]
        for ra, rb in zip(pa, pb, strict=True):
            assert set(ra) == set(rb)
            na, nb = numbers(ra), numbers(rb)
            assert len(na) == len(nb) and na, ra
            # float order alone: at a gradient spike (none, step 25: grad norm 2.08) layer norms differ by 0.7%
            torch.testing.assert_close(torch.tensor(nb), torch.tensor(na), rtol=2e-2, atol=1e-6)
        cfg_a = json.loads((out / "solo" / name / "config.json").read_text())
        cfg_b = json.loads((out / "ens" / name / "config.json").read_text())
        assert cfg_a == cfg_b  # the same run to every reader


def test_a_member_is_an_ordinary_run(trained, data):
    out, _, ens = trained
    from interp import ResidualGPT

    m = MEMBERS[1]
    name = "_".join(f"{k}{v}" for k, v in m.items())
    model = ResidualGPT.from_checkpoint(out / "ens" / name / "ckpt.pt")
    assert model.cfg.residual == "attn_only"
    again = member(out / "ens", m).run()  # a solo Trainer reuses it, checked against its checkpoint
    assert again == ens[1]
    before = (out / "ens" / name / "ckpt.pt").stat().st_mtime_ns
    EnsembleTrainer([member(out / "ens", x) for x in MEMBERS], progress=False).run()  # nothing retrained
    assert (out / "ens" / name / "ckpt.pt").stat().st_mtime_ns == before


class _StopAt:
    """Ctrl-C at an evaluation (an ensemble takes no per-step callback)."""

    def __init__(self, step: int):
        self.step = step

    def on_eval(self, trainer, step, loss):
        if step == self.step:
            raise KeyboardInterrupt


def _stopped(members, at: int, stacked: bool) -> None:
    """Train until Ctrl-C at the evaluation of step `at` (the checkpoint before it kept)."""
    members[0].callbacks.append(_StopAt(at))
    with pytest.raises(TrainingInterrupted):
        EnsembleTrainer(members, progress=False).run() if stacked else members[0].run()


def test_a_member_resumed_alone_says_which_steps_were_stacked(tmp_path, data):
    _stopped([member(tmp_path, m) for m in MEMBERS[:2]], 20, stacked=True)
    alone = member(tmp_path, MEMBERS[0]).run()  # the solo command on the member's run directory
    first, rest = alone["steps_by"]
    assert alone["resumed_from_step"] == first["to"] in (10, 20) and "ensemble" not in alone
    assert first == {
        "to": first["to"],
        "by": "stacked",
        "size": 2,
        "members": [f"{tmp_path.name}/residualffn_only_seed1", f"{tmp_path.name}/residualattn_only_seed2"],
    }
    assert rest == {"to": 40, "by": "solo"}
    # and a solo run's final.json is what it always was: nothing about stacking
    solo = member(tmp_path / "solo", MEMBERS[0]).run()
    assert "steps_by" not in solo and "ensemble" not in solo


def test_every_stretch_of_a_run_says_which_step_took_it(tmp_path, data):
    """Solo then stacked, and stacked then solo then stacked: the record keeps each stretch in order, so no mix
    of the two steps (equal to float order, not bit for bit) ends as an unlabelled run."""
    _stopped([member(tmp_path / "a", MEMBERS[0])], 20, stacked=False)  # solo to its checkpoint, then stacked
    mixed = EnsembleTrainer([member(tmp_path / "a", m) for m in MEMBERS[:2]], progress=False).run()[0]
    assert [(s["by"], s["to"]) for s in mixed["steps_by"]] == [("solo", mixed["resumed_from_step"]), ("stacked", 40)]
    assert "ensemble" in mixed  # the two stand at different steps: each trains stacked, an ensemble of one

    _stopped([member(tmp_path / "b", m) for m in MEMBERS[:2]], 10, stacked=True)  # stacked to step 10
    _stopped([member(tmp_path / "b", MEMBERS[0])], 30, stacked=False)  # solo from 10 to where Ctrl-C saved it
    final = EnsembleTrainer([member(tmp_path / "b", m) for m in MEMBERS[:2]], progress=False).run()[0]
    solo_to = final["resumed_from_step"]
    assert 10 < solo_to < 40
    assert [(s["by"], s["to"]) for s in final["steps_by"]] == [("stacked", 10), ("solo", solo_to), ("stacked", 40)]
    # the other member only ever trained stacked, in one stretch: its final.json is an ensemble member's as always
    other = json.loads((tmp_path / "b" / "residualattn_only_seed2" / "final.json").read_text())
    assert "steps_by" not in other and "ensemble" in other


@pytest.mark.parametrize(
    "record, words",
    [
        ({}, "stacked {} is not {size, members, step}"),
        ({"size": "four", "members": ["a"] * 4, "step": 10}, "stacked .* is not {size, members, step}"),
        ({"size": 2, "members": ["a"], "step": 10}, "does not fit an ensemble stacked to a step <= "),
        ({"size": 2, "members": ["a", "b"], "step": 9999}, "does not fit an ensemble stacked to a step <= "),
    ],
)
def test_a_forged_stacking_record_is_refused_in_one_line_before_training(tmp_path, data, record, words):
    """A checkpoint's record of its stacked steps is checked on resume like the rest of its state: a record
    of the wrong shape, or past the checkpoint's own step, is a CheckpointError naming it, never a traceback
    after training or a record copied into final.json."""
    from interp import ResidualGPT
    from interp.errors import CheckpointError
    from interp.files.checkpoint import load_checkpoint, save_checkpoint

    _stopped([member(tmp_path, m) for m in MEMBERS[:2]], 20, stacked=True)
    path = tmp_path / "residualffn_only_seed1" / "ckpt.pt"
    ckpt = load_checkpoint(path)
    state = {k: v for k, v in ckpt.state.items() if k != "steps_by"}
    save_checkpoint(
        path, ResidualGPT.from_checkpoint(path), **state, stacked=record
    )  # re-sealed: only the record is wrong
    with pytest.raises(CheckpointError, match=words):
        member(tmp_path, MEMBERS[0]).run()
    assert not (path.parent / "final.json").exists()


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda seg, step: [{**seg, "members": ["x/seed7", "x/seed8"]}], "without this run"),
        (lambda seg, step: [{**seg, "members": [seg["members"][0]] * 2}], "names a member twice"),
        (lambda seg, step: [{"to": step, "by": "solo"}], "records no stacked stretch"),
        (lambda seg, step: [{**seg, "to": step - 5}], "the last at the checkpoint's"),
    ],
)
def test_a_stacking_record_that_does_not_fit_its_run_is_refused(tmp_path, data, edit, words):
    """A record is written at every save: it ends at the checkpoint's step, holds a stacked stretch, and each
    stacked stretch names this run once among its members. One that does not is refused on resume."""
    from interp import ResidualGPT
    from interp.errors import CheckpointError
    from interp.files.checkpoint import load_checkpoint, save_checkpoint

    _stopped([member(tmp_path, m) for m in MEMBERS[:2]], 20, stacked=True)
    path = tmp_path / "residualffn_only_seed1" / "ckpt.pt"
    state = dict(load_checkpoint(path).state)
    state["steps_by"] = edit(state["steps_by"][0], state["step"])
    save_checkpoint(path, ResidualGPT.from_checkpoint(path), **state)
    with pytest.raises(CheckpointError, match=words):
        member(tmp_path, MEMBERS[0]).run()
    both = {**state, "stacked": {"size": 2, "members": ["a", "b"], "step": state["step"]}}
    save_checkpoint(path, ResidualGPT.from_checkpoint(path), **both)
    with pytest.raises(CheckpointError, match="holds both a stacked record and steps_by"):
        member(tmp_path, MEMBERS[0]).run()


def test_a_first_fix_stacking_record_reads_as_the_same_history(tmp_path, data):
    """A checkpoint written with 57's first record (stacked: {size, members, step}) resumes, and its final.json
    gives the same stretches in the new record."""
    from interp import ResidualGPT
    from interp.files.checkpoint import load_checkpoint, save_checkpoint

    _stopped([member(tmp_path, m) for m in MEMBERS[:2]], 20, stacked=True)
    path = tmp_path / "residualffn_only_seed1" / "ckpt.pt"
    ckpt = load_checkpoint(path)
    (segment,) = ckpt.state["steps_by"]
    state = {k: v for k, v in ckpt.state.items() if k != "steps_by"}
    old = {"size": segment["size"], "members": segment["members"], "step": segment["to"]}
    save_checkpoint(path, ResidualGPT.from_checkpoint(path), **state, stacked=old)
    final = member(tmp_path, MEMBERS[0]).run()
    assert final["steps_by"] == [segment, {"to": 40, "by": "solo"}]


def test_grouping_by_shape_and_what_must_train_alone(tmp_path, data):
    a = member(tmp_path, dict(seed=1))
    b = member(tmp_path, dict(seed=2, lr=1e-3, residual="ffn_only"))
    wide = member(tmp_path, dict(seed=3, d_model=48))
    dropout = member(tmp_path, dict(seed=4, dropout=0.1))
    longer = member(tmp_path, dict(seed=5, max_steps=50))
    uniform = member(tmp_path, dict(seed=6, mixer="uniform"))
    groups = group([a, wide, b, dropout, longer, uniform], 16)
    assert [len(g) for g in groups] == [2, 1, 1, 1, 1]
    assert groups[0] == [a, b]
    assert all(len(g) == 1 for g in group([a, b], 1))
    assert [len(g) for g in group([member(tmp_path, dict(seed=s)) for s in range(5)], 2)] == [2, 2, 1]
    with pytest.raises(ConfigError, match="must share"):
        EnsembleTrainer([a, wide])
    with pytest.raises(ConfigError, match="must share"):  # dropout is a shape field: members share its rate
        EnsembleTrainer([a, dropout])
    with pytest.raises(ConfigError, match="mixer 'uniform' has no stacked forward"):
        EnsembleTrainer([uniform])


def test_a_k_that_cannot_fit_is_refused_with_the_largest_that_does(tmp_path, data):
    t = member(tmp_path, dict(seed=1), d_model=1024, n_ctx=1024, batch_size=64)
    with pytest.raises(ConfigError, match=r"largest ensemble that fits is \d+ \(--ensemble-size \d+\)"):
        check_ensemble_fits(t, 10**6)
    trainers = [member(tmp_path, dict(seed=s), d_model=1024, n_ctx=1024, batch_size=64) for s in range(200)]
    with pytest.raises(ConfigError, match="largest ensemble"):
        EnsembleTrainer(trainers, progress=False).run()
    assert not any(tmp_path.rglob("config.json"))  # refused before any work


def _blow_up(model):
    with torch.no_grad():
        model.embed.weight.fill_(3e38)  # the first forward overflows: a non-finite loss at step 0


def test_a_member_that_goes_non_finite_stops_alone(tmp_path, data):
    good = [member(tmp_path, dict(seed=s)) for s in (1, 2)]
    bad = member(tmp_path, dict(seed=3), model_init=_blow_up)
    with pytest.raises(TrainingError, match=r"1 of 3 ensemble members stopped .*seed3.*became (nan|inf)"):
        EnsembleTrainer([good[0], bad, good[1]], progress=False).run()
    for t in good:
        assert t.run_dir.finished
        assert math.isfinite(t.run_dir.read_final()["final_val_loss"])
    assert not bad.run_dir.finished
    failed = json.loads((bad.run_dir.path / FAILED).read_text())
    assert failed["step"] == 0 and "became" in failed["error"]
    for path in tmp_path.rglob("*.json*"):
        assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()


def _cli(out: Path, *extra: str, kill_at: str | None = None) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("RESIDUAL_KILL_AT", None)
    if kill_at:
        env["RESIDUAL_KILL_AT"] = kill_at
    cmd = [
        sys.executable,
        "-m",
        "training",
        "--preset",
        "smoke",
        "--seeds",
        "1,2",
        "--residual",
        "ffn_only,attn_only",
        "--out",
        str(out),
        "--no-progress",
        "--set",
        "max_steps=30",
        "--set",
        "dropout=0.2",  # each member's dropout stream resumes bitwise too (interp.model.dropout)
        *extra,
    ]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _state(out: Path) -> dict:
    result = {}
    for run in sorted(out.rglob("final.json")):
        d = run.parent
        final = json.loads(run.read_text())
        weights = torch.load(d / "ckpt.pt", weights_only=True)["weights"]
        result[str(d.relative_to(out))] = (
            final["final_val_loss"],
            {k: v.clone() for k, v in weights.items()},
            (d / "metrics.jsonl").read_text(),
            (d / "probes.jsonl").read_text(),
        )
    return result


def test_cli_product_sigkill_and_resume_end_bitwise_equal(tmp_path, data):
    p = _cli(tmp_path / "whole")
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    whole = _state(tmp_path / "whole")
    assert len(whole) == 4
    finals = [json.loads(f.read_text()) for f in (tmp_path / "whole").rglob("final.json")]
    assert all(f["ensemble"]["size"] == 4 for f in finals)
    p = _cli(tmp_path / "killed", kill_at="step:15")  # after step 14, past the checkpoint at step 10
    p.communicate(timeout=300)
    assert p.returncode == -signal.SIGKILL
    assert not list((tmp_path / "killed").rglob("final.json"))
    p = _cli(tmp_path / "killed")
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    resumed = _state(tmp_path / "killed")
    assert resumed.keys() == whole.keys()
    for key, (val, weights, metrics, probes) in whole.items():
        rval, rweights, rmetrics, rprobes = resumed[key]
        assert val == rval, key
        assert all(torch.equal(weights[n], rweights[n]) for n in weights), key
        strip = lambda text: [  # noqa: E731
            {k: v for k, v in json.loads(x).items() if k != "tokens_per_s"} for x in text.splitlines()
        ]
        assert strip(metrics) == strip(rmetrics), key
        assert probes == rprobes, key


def test_cli_refuses_bad_product_options(tmp_path, data):
    for extra, pattern in ((["--seed", "3"], "not both"), (["--ensemble-size", "0"], "ensemble-size")):
        p = _cli(tmp_path, *extra)
        _, err = p.communicate(timeout=120)
        assert p.returncode == 2 and pattern in err, err
    env = dict(os.environ)
    for bad in ("1,1", "1,x", "-1"):
        r = subprocess.run(
            [sys.executable, "-m", "training", "--seeds", bad, "--out", str(tmp_path)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 2 and "--seeds" in r.stderr, r.stderr


def test_cpu_ensembles_stay_within_the_cache(tmp_path, data, monkeypatch):
    import training.grouping as ens

    monkeypatch.setattr(ens, "last_level_cache", lambda: 32 * 2**20)
    cell = member(tmp_path, dict(seed=1), preset="phase-cell", device="cpu")  # 1 MiB per member: 8 fit
    quick = member(tmp_path, dict(seed=2), preset="cpu-quick", device="cpu")  # 4 MiB: 2 would, too few to pay
    assert ens.size_for(cell, 16) == 8 and ens.size_for(cell, 3) == 3 and ens.size_for(cell, 1) == 1
    assert ens.size_for(quick, 16) == 1
    assert [
        len(g)
        for g in group([member(tmp_path, dict(seed=s), preset="phase-cell", device="cpu") for s in range(10)], 16)
    ] == [8, 2]
    assert not ens.trains_stacked([quick], 16) and ens.trains_stacked([cell], 16)


def test_estimate_times_the_runs_without_touching_anything(tmp_path, data):
    from training.estimate import estimate_seconds

    trainers = [member(tmp_path, dict(seed=s)) for s in range(3)]
    rng = torch.get_rng_state()
    seconds = estimate_seconds(trainers, 16)
    assert math.isfinite(seconds) and seconds > 0
    assert torch.equal(torch.get_rng_state(), rng)
    assert not any(tmp_path.rglob("*.json"))
    assert estimate_seconds([], 16) == 0.0


def test_benchmark_runs_and_refuses_bad_cases(data, capsys):
    from benchmarks import ensemble_speed as bench

    assert bench.main(["--cases", "smoke:2", "--rounds", "1", "--steps", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    case = out["cases"][0]
    assert case["members"] == 2 and case["speedup"] > 0 and out["peak_matmul_gflops"] > 0
    for bad in ("nope:2", "smoke:0", "smoke:x"):
        assert bench.main(["--cases", bad]) == 2
        assert "--cases" in capsys.readouterr().err


def test_a_member_does_not_depend_on_the_other_members(trained, tmp_path):
    """The same member retrained alone through the stacked step ends bitwise equal to it inside the ensemble
    of four: weights, losses and probes (an embedding's backward or a row-wise norm over all members used
    to move the last bits)."""
    out, _, _ = trained
    m = MEMBERS[3]
    name = "_".join(f"{k}{v}" for k, v in m.items())
    from conftest import data_root

    mp = pytest.MonkeyPatch()
    mp.setenv("RESIDUAL_DATA_DIR", str(data_root()))
    try:
        EnsembleTrainer([member(tmp_path, m)], progress=False).run()
    finally:
        mp.undo()
    a = torch.load(out / "ens" / name / "ckpt.pt", weights_only=True)["weights"]
    b = torch.load(tmp_path / name / "ckpt.pt", weights_only=True)["weights"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    strip = lambda p: [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in records(p, "metrics.jsonl")]  # noqa: E731
    assert strip(out / "ens" / name) == strip(tmp_path / name)
    assert (out / "ens" / name / "probes.jsonl").read_text() == (tmp_path / name / "probes.jsonl").read_text()

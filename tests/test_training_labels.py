"""`python -m training` labels config.json's meta with the seed, as an experiment's runs are labelled (issue 58), and
a run directory an older trainer labelled without it still resumes and is reused."""

from __future__ import annotations

import json

import pytest
from conftest import InterruptAt

from interp import load_checkpoint
from training.__main__ import main
from training.presets import resolve
from training.rundir import RunDir
from training.trainer import Trainer, TrainingInterrupted

ARGS = ["--preset", "smoke", "--no-progress", "--set", "probes=false"]


def labels(run: RunDir) -> tuple[dict, dict]:
    """(config.json's meta, the meta the checkpoint sealed)."""
    return json.loads(run.config.read_text())["meta"], load_checkpoint(run.ckpt).state["meta"]


def test_the_trainer_cli_records_the_seed_in_config_json_meta(data, tmp_path):
    assert main([*ARGS, "--out", str(tmp_path), "--seed", "7"]) == 0
    want = {"preset": "smoke", "variant": "full", "seed": 7}
    assert labels(RunDir.of(tmp_path, "smoke", "full", 7)) == (want, want)


def test_a_run_an_older_trainer_labelled_without_the_seed_resumes_and_is_reused(data, tmp_path):
    """What the trainer CLI wrote before issue 58: meta {preset, variant}, sealed in the checkpoint. Resumed by
    today's CLI it keeps those labels (sealing others would refuse the next reuse), and it is reused after."""
    spec = resolve("smoke", {"probes": False})
    run = RunDir.of(tmp_path, "smoke", "full", spec.train.seed)
    old = {"preset": "smoke", "variant": "full"}
    with pytest.raises(TrainingInterrupted):
        Trainer(spec.model, spec.train, run, meta=old, callbacks=[InterruptAt(15)], progress=False).run()
    assert labels(run) == (old, old)
    assert main([*ARGS, "--out", str(tmp_path)]) == 0  # resumed from its checkpoint
    final = json.loads(run.final.read_text())
    assert final["resumed_from_step"] == 10 and labels(run) == (old, old)
    stamp = run.final.stat().st_mtime_ns
    assert main([*ARGS, "--out", str(tmp_path)]) == 0  # finished: reused, not trained again
    assert run.final.stat().st_mtime_ns == stamp


def test_the_seed_label_is_no_identity_key():
    """config_diff compares what a run computes; a record without the seed label is the same run."""
    from training.run_config import cli_labels, config_diff

    record = {"model": {"d_model": 8}, "train": {"seed": 7}, "model_init": None}
    with_seed = {**record, "meta": cli_labels("smoke", "full", 7, None)}
    assert with_seed["meta"] == {"preset": "smoke", "variant": "full", "seed": 7}
    assert config_diff({**record, "meta": {"preset": "smoke", "variant": "full"}}, with_seed) == []
    older = {**record, "meta": {"preset": "smoke", "variant": "full"}}
    assert cli_labels("smoke", "full", 7, older) == older["meta"]  # its own labels kept
    for other in ({**older, "train": {"seed": 8}}, {**older, "meta": {"preset": "smoke", "variant": "none"}}):
        assert cli_labels("smoke", "full", 7, other) == with_seed["meta"]  # another run's: today's labels


@pytest.mark.parametrize(
    ("given", "option"),
    [
        (["--seed", "1", "--set", "seed=2"], "--seed"),
        (["--seed", "0", "--set", "seed=3"], "--seed"),  # seed 0 is a seed
        (["--seeds", "8,9", "--set", "seed=2"], "--seeds"),
        (["--residual", "full", "--set", "residual=none"], "--residual"),
        (["--mixer", "uniform", "--set", "mixer=attention"], "--mixer"),
    ],
)
def test_a_set_key_that_an_option_also_gives_is_refused(tmp_path, capsys, given, option):
    """python -m training gave the option's value and dropped --set's without a word (audit case D20)."""
    from training.__main__ import main

    assert main(["--preset", "smoke", *given, "--set", "max_steps=2", "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --set ") and f"give it with {option} only" in err and err.count("\n") == 1
    assert not any(tmp_path.iterdir())

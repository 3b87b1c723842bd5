"""The run-directory type: one name rule, confinement under --out, config identity, the lock probe."""

import math

import pytest
from filelock import FileLock

from interp.errors import ConfigError
from training.presets import resolve
from training.run_config import config_diff, config_record, differing_fields, slug, variant_name
from training.rundir import RunDir, RunDirError


@pytest.mark.parametrize(
    "overrides, name, directory",
    [
        ({"residual": "full"}, "full", "full"),
        ({"residual": "attn_only", "mixer": "uniform"}, "attn_only + uniform", "attn_only_uniform"),
        (
            {"residual": "attn_only", "mixer": "position_blind"},
            "attn_only + position_blind",
            "attn_only_position_blind",
        ),
        ({"residual": "attn_only", "self_bias": -math.inf}, "attn_only + no_self", "attn_only_no_self"),
        ({"residual": "ffn_only", "self_bias": math.inf}, "ffn_only + self_only", "ffn_only_self_only"),
        ({"residual": "ffn_only", "self_bias": 4.0}, "ffn_only + self_bias", "ffn_only_self_bias"),
    ],
)
def test_one_name_rule(overrides, name, directory):
    assert variant_name(overrides) == name and slug(name) == directory


@pytest.mark.parametrize("variant", ["../../x", "/etc/passwd", "a/../../b", ".hidden"])
def test_a_variant_never_leaves_out(tmp_path, variant):
    path = RunDir.of(tmp_path / "out", "smoke", variant, 1).path
    assert path.resolve().is_relative_to((tmp_path / "out").resolve())
    assert len(path.relative_to(tmp_path / "out").parts) == 3


@pytest.mark.parametrize("variant", ["", "..", "...", "//"])
def test_a_name_without_characters_is_refused(tmp_path, variant):
    with pytest.raises(ConfigError, match="no usable directory name"):
        RunDir.of(tmp_path, "smoke", variant, 1)


def test_a_field_added_later_with_its_default_keeps_old_runs():
    spec = resolve("smoke")
    new = {"model": spec.model.to_dict(), "train": spec.train.to_dict(), "model_init": None}
    old = {**new, "train": {k: v for k, v in new["train"].items() if k != "probe_interval"}}  # written before
    assert config_diff(old, new) == []
    changed = {**new, "train": {**new["train"], "probe_interval": 7}}
    assert config_diff(old, changed) == ["train"]
    assert config_diff(new, {**new, "model_init": "x.f"}) == ["model_init"]


def test_a_run_that_evaluated_from_earlier_on_is_the_same_run():
    """Runs trained before cpu-quick evaluated only its second half are reused; the other way round is not."""
    spec = resolve("cpu-quick")
    new = {"model": spec.model.to_dict(), "train": spec.train.to_dict(), "model_init": None}
    assert new["train"]["eval_from"] == 0.5
    before = {**new, "train": {k: v for k, v in new["train"].items() if k != "eval_from"}}  # evaluated from 0
    assert config_diff(before, new) == []
    assert config_diff(new, before) == ["train"]  # it lacks the first half's evaluations
    assert config_diff({**new, "train": {**new["train"], "eval_from": "x"}}, new) == ["train"]
    assert config_diff(before, {**new, "train": {**new["train"], "lr": 1.0}}) == ["train"]
    assert differing_fields(new, before) == ["train.eval_from 0.5 -> 0.0"]


def test_with_random_validation_batches_the_evaluation_schedule_is_part_of_the_run():
    """Each evaluation draws fresh batches from one generator: skipping early ones changes the later draws."""
    spec = resolve("cpu-quick", {"val_mode": "random"})
    new = {"model": spec.model.to_dict(), "train": spec.train.to_dict(), "model_init": None}
    before = {**new, "train": {**new["train"], "eval_from": 0.0}}
    assert config_diff(before, new) == ["train"]


def test_busy_while_another_holder_has_the_lock(tmp_path):
    run = RunDir(tmp_path)
    assert not run.busy()
    with FileLock(run.lock):
        assert run.busy()
    assert not run.busy()


def test_every_file_of_a_run_lives_inside_it(tmp_path):
    run = RunDir.of(tmp_path, "smoke", "full", 1)
    files = [
        run.config,
        run.metrics,
        run.probes,
        run.ckpt,
        run.final,
        run.lock,
        run.holder,
        run.identity,
        run.snapshot(20),
    ]
    assert all(f.parent == run.path for f in files[:-1]) and run.snapshot(20) == run.path / "snapshots/step20.pt"
    assert len({f.name for f in files}) == len(files)


def _record(spec, corpus):
    return config_record(spec.model.replace(d_vocab=corpus.vocab_size), spec.train, corpus, meta={"seed": 1})


def test_check_refuses_another_config_or_other_data_without_a_trainer(tmp_path):
    """What the launcher asks before it trains or submits anything."""
    from interp.files.io import write_json
    from training.presets import resolve
    from training.synthetic import synthetic_corpus

    corpus, other = synthetic_corpus(5_000, seed=1), synthetic_corpus(5_000, seed=2)
    spec = resolve("smoke")
    run = RunDir(tmp_path / "run")
    run.check(_record(spec, corpus))  # nothing there yet
    run.path.mkdir()
    write_json(run.config, _record(spec, corpus))
    run.check(_record(spec, corpus))
    with pytest.raises(RunDirError, match=r"different configuration \(train\.lr 0\.003 -> 0\.01\)"):
        run.check(_record(resolve("smoke", {"lr": 1e-2}), corpus))
    with pytest.raises(RunDirError, match="trained on other data"):
        run.check(_record(spec, other))
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirError, match="not a directory"):
        RunDir(tmp_path / "file").check(_record(spec, corpus))


def test_hold_names_the_holder_and_leaves_no_holder_line(tmp_path):
    run = RunDir(tmp_path / "run")
    with run.hold():
        assert run.busy() and run.read_holder().startswith("pid ")
        with pytest.raises(RunDirError, match=r"is being trained by pid \d+ on "):
            with run.hold():
                pass
    assert not run.busy() and not run.holder.exists()


@pytest.mark.parametrize(
    "key, value",
    [
        ("final_val_loss", 0.123456),
        ("best_val_loss", 0.5),
        ("best_step", 1),
        ("wall_time_s", 99999.5),
        ("tokens_per_s", 1.5),
        ("threads", 16),
    ],
)
def test_an_edited_number_in_final_json_is_never_reported(tmp_path, key, value):
    import json

    from conftest import run_module

    args = ("training", "--preset", "smoke", "--out", str(tmp_path), "--no-progress")
    assert run_module(*args).returncode == 0
    final = tmp_path / "smoke" / "full" / "seed1337" / "final.json"
    record = json.loads(final.read_text())
    record[key] = value
    final.write_text(json.dumps(record))
    edited = final.read_bytes()
    again = run_module(*args)
    assert again.returncode == 2 and f"final.json's {key}" in again.stderr.strip().splitlines()[-1]
    assert str(value) not in again.stdout and final.read_bytes() == edited


def test_an_edited_meta_label_in_config_json_is_never_reused(tmp_path):
    """config.json's meta labels (preset, variant, seed) are sealed in the checkpoint: an edit after the run is
    named on reuse, not carried into a report."""
    import json

    from conftest import run_module

    args = ("training", "--preset", "smoke", "--out", str(tmp_path), "--no-progress")
    assert run_module(*args).returncode == 0
    config = tmp_path / "smoke" / "full" / "seed1337" / "config.json"
    written = config.read_text()
    for key, value in [("variant", "attn_only"), ("seed", 7), ("extra", 1)]:
        record = json.loads(written)
        record["meta"][key] = value
        config.write_text(json.dumps(record))
        again = run_module(*args)
        last = again.stderr.strip().splitlines()[-1]
        assert again.returncode == 2 and "meta labels" in last and key in last, again.stderr
    config.write_text(written)
    assert run_module(*args).returncode == 0  # as written: reused

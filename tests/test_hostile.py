"""Hostile input at every entry point: one `error:` line, exit 2, and nothing that existed is changed.

Entry points are called in process (main(argv), the library functions) so the suite stays fast:
`python -m training`, the four experiments, `python -m interp.plot_attention`, `load_checkpoint`
and `to_hooked_transformer`. Read-only directories and a full disk are simulated by failing the
system call where it fails for real (the table in the issue-11 note ran them on real mounts).
"""

import errno
import json
import os
import pickle
import re
import shutil
import threading
from pathlib import Path

import pytest
import torch
from conftest import InterruptAt, data_root
from filelock import FileLock

import training.__main__ as training_cli
from experiments.eval_noise import run as eval_noise
from experiments.gain_confound import run as gain_confound
from experiments.residual_sweep import run as residual_sweep
from experiments.routing_test import run as routing_test
from interp import load_checkpoint
from interp import plot_attention as plot_cli
from interp.errors import CheckpointError, ToolkitError
from interp.files.checkpoint import HASH_KEY, content_hash
from interp.files.io import DataFileError
from training.rundir import RunDir

ARGS = ["--preset", "smoke", "--no-progress", "--set", "max_steps=10", "--set", "ckpt_interval=5"]
RUN = "smoke/full/seed1337"
EXPERIMENTS = {
    "routing_test": (routing_test, ["--variants", "full"]),
    "residual_sweep": (residual_sweep, []),
    "gain_confound": (gain_confound, []),
    "eval_noise": (eval_noise, ["--no-comparison"]),
}


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory):
    """Built once: a finished smoke run (full), an attn_only one, and routing_test's results over them."""
    root = tmp_path_factory.mktemp("fix")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESIDUAL_DATA_DIR", str(data_root()))
        assert training_cli.main(["--out", str(root), *ARGS]) == 0
        assert training_cli.main(["--out", str(root), *ARGS, "--residual", "attn_only"]) == 0
        assert routing_test.EXPERIMENT.main(["--out", str(root), *ARGS, "--no-report", "--variants", "full"]) == 0
    return root


@pytest.fixture
def out(fixture_dir, tmp_path, shared_data):
    """A private copy of the fixture runs: tmp_path/o."""
    shutil.copytree(fixture_dir, tmp_path / "o")
    return tmp_path / "o"


def snapshot(root: Path) -> dict[str, bytes]:
    # .lock / .lock.holder are the lock's bookkeeping (truncated by every opener), not results
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(".lock")
    }


def refused(capsys, root: Path, call, match: str, code: int = 2) -> str:
    """call() returns `code`, stderr is one `error:` line matching `match`, every file under root is unchanged."""
    before = snapshot(root)
    capsys.readouterr()
    rc = call()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == code, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert re.search(match, lines[0]), lines[0]
    after = snapshot(root)
    changed = [name for name, data in before.items() if after.get(name) != data]
    assert not changed, f"changed: {changed}"
    assert not [p for p in root.rglob("*.tmp")], "a temporary file was left behind"
    return lines[0]


def train(out: Path, *extra: str) -> int:
    return training_cli.main(["--out", str(out), *ARGS, *extra])


def interrupted(out: Path) -> Path:
    """The full run as a kill after its last checkpoint leaves it: no final.json."""
    (out / RUN / "final.json").unlink()
    return out / RUN


def damage_line(path: Path, number: int, text: str = '{"step": 5, "train_lo') -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[number - 1] = text + "\n"
    path.write_text("".join(lines))


def rewrite_ckpt(path: Path, drop: str | None = None, rehash: bool = True, **replace) -> None:
    """Edit a checkpoint; rehash: record the new content hash, as a deliberate forger would (so the checks
    behind the hash are what refuses it)."""
    payload = torch.load(path, weights_only=True)
    if drop:
        del payload[drop]
    payload.update(replace)
    if rehash:
        payload[HASH_KEY] = content_hash(payload)
    torch.save(payload, path)


def short_data_dir(tmp_path: Path, chars: int = 900_000) -> Path:
    """A RESIDUAL_DATA_DIR holding a truncated copy of the corpus: the same command, other data.

    900,000 characters keep all 65 of the vocabulary (so the model config is the same); 200,000 do not.
    """
    corpus = tmp_path / "short" / "tinyshakespeare" / "input.txt"
    corpus.parent.mkdir(parents=True)
    corpus.write_text((data_root() / "tinyshakespeare" / "input.txt").read_text()[:chars])
    return tmp_path / "short"


class Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def fail_under(root: Path, err: int):
    """os.open / mkdir failing with `err` for anything created under root (a read-only mount)."""
    real_open, real_mkdir = os.open, Path.mkdir

    def fake_open(path, flags, *a, **k):
        if str(path).startswith(str(root)) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise OSError(err, os.strerror(err), str(path))
        return real_open(path, flags, *a, **k)

    def fake_mkdir(self, *a, **k):
        if str(self).startswith(str(root)) and not self.is_dir():
            raise OSError(err, os.strerror(err), str(self))
        return real_mkdir(self, *a, **k)

    return fake_open, fake_mkdir


# ----- python -m training --------------------------------------------------------------------------------


def test_training_out_names_a_file(out, capsys):
    (out / "f").write_text("x")
    refused(capsys, out, lambda: train(out / "f"), r"argument --out: .*/f is there and is not a directory")  # up front


def test_training_run_dir_is_a_file(out, capsys):
    (out / "smoke/ffn_only").mkdir()
    (out / "smoke/ffn_only/seed1337").write_text("x")
    refused(capsys, out, lambda: train(out, "--residual", "ffn_only"), "exists and is not a directory")


@pytest.mark.parametrize("err", [errno.EROFS, errno.EACCES])
def test_training_read_only_out(out, capsys, monkeypatch, err):
    fake_open, fake_mkdir = fail_under(out, err)
    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(Path, "mkdir", fake_mkdir)
    refused(capsys, out, lambda: train(out / "new"), re.escape(os.strerror(err)))


def test_training_read_only_interrupted_run(out, capsys, monkeypatch):
    interrupted(out)
    fake_open, fake_mkdir = fail_under(out, errno.EROFS)
    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(Path, "mkdir", fake_mkdir)
    refused(capsys, out, lambda: train(out), "Read-only file system")


def test_training_full_disk_at_checkpoint(out, capsys, monkeypatch):
    def full(payload, f, *a, **k):  # the disk fills at the first checkpoint (torch's own message)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 104384 vs 104272")

    monkeypatch.setattr(torch, "save", full)
    refused(
        capsys, out, lambda: train(out / "new", "--set", "probes=false"), r"cannot write .*ckpt\.pt.*unexpected pos"
    )
    assert not (out / "new" / RUN / "ckpt.pt").exists()


def test_training_full_disk_at_json_write(out, capsys, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    refused(capsys, out, lambda: train(out, "--residual", "none"), r"config\.json: No space left on device")


def test_training_full_disk_at_metrics_append(out, capsys, monkeypatch):
    import interp.files.io

    def full(path, mode="r", *a, **k):
        if mode == "a":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return open(path, mode, *a, **k)

    monkeypatch.setattr(interp.files.io, "open", full, raising=False)
    refused(
        capsys,
        out,
        lambda: train(out, "--residual", "none"),
        r"cannot append to .*(metrics|probes)\.jsonl: No space left on device",
    )


@pytest.mark.parametrize("name,finished", [("config.json", False), ("final.json", True), ("config.json", True)])
def test_training_truncated_json(out, capsys, name, finished):
    if not finished:
        interrupted(out)
    path = out / RUN / name
    path.write_bytes(path.read_bytes()[:20])
    refused(capsys, out, lambda: train(out), rf"{name} is damaged \(not valid JSON")


@pytest.mark.parametrize("kind", ["FIFO", "directory"])
@pytest.mark.parametrize(
    "name",
    ["ckpt.pt", "final.json", "config.json", "metrics.jsonl", "probes.jsonl", "identity.json", "failed.json", ".lock"],
)
def test_run_dir_file_that_is_not_a_regular_file_is_refused_by_name(out, capsys, name, kind):
    """A run-directory file that is there but is not a regular file is damage: refused by name before anything
    is written (a FIFO final.json used to read as "not finished" and the run was trained again over it; a
    directory final.json let ckpt.pt be rewritten before the error)."""
    path = out / RUN / name
    path.unlink(missing_ok=True)
    os.mkfifo(path) if kind == "FIFO" else path.mkdir()
    refused(capsys, out, lambda: train(out), rf"{re.escape(str(path))} is a {kind}, not a regular file")
    refused(capsys, out, experiment("routing_test", out, "--collect"), rf"{re.escape(name)} is a {kind}")


def test_identity_json_with_a_recomputed_seal_is_never_read_as_the_result(out):
    """identity.json's seal (sha256 of the checkpoint hash and the summary) could be recomputed by anyone, so a
    forged cache was reported as the routing test's identity numbers; they are computed from the checkpoint."""
    import hashlib

    from interp.files.checkpoint import load_checkpoint

    results = out / "smoke/results-routing_test.json"
    real = json.loads(results.read_text())["identity"]["full"]
    ckpt_sha256 = load_checkpoint(out / RUN / "ckpt.pt").content_sha256
    forged = json.loads(json.dumps(real))
    forged["logit_lens"]["ce"] = [0.125 for _ in forged["logit_lens"]["ce"]]
    text = json.dumps({"ckpt_sha256": ckpt_sha256, "summary": forged}, sort_keys=True)
    seal = hashlib.sha256(text.encode()).hexdigest()
    (out / RUN / "identity.json").write_text(json.dumps({"ckpt_sha256": ckpt_sha256, "seal": seal, "summary": forged}))
    assert experiment("routing_test", out, "--collect")() == 0
    got = json.loads(results.read_text())["identity"]["full"]
    assert got["logit_lens"]["ce"] == real["logit_lens"]["ce"] != forged["logit_lens"]["ce"]


def test_training_config_not_an_object(out, capsys):
    (out / RUN / "config.json").write_text("[1, 2]\n")
    refused(capsys, out, lambda: train(out), r"config\.json is damaged \(not a JSON object\)")


@pytest.mark.parametrize(
    "content,match",
    [
        (b"", r"truncated or corrupt \(EOFError"),
        (b"PK\x03\x04garbage", "truncated or corrupt"),
        (b"abc", "truncated or corrupt"),
    ],
)
def test_training_damaged_checkpoint(out, capsys, content, match):
    run = interrupted(out)
    (run / "ckpt.pt").write_bytes(content)
    refused(capsys, out, lambda: train(out), rf"ckpt\.pt.*{match}")


def test_training_truncated_checkpoint(out, capsys):
    run = interrupted(out)
    data = (run / "ckpt.pt").read_bytes()
    (run / "ckpt.pt").write_bytes(data[: len(data) // 2])
    refused(capsys, out, lambda: train(out), r"ckpt\.pt is truncated or corrupt")


@pytest.mark.parametrize(
    "key,match",
    [
        ("optimizer", r"lacks the training state \['optimizer'\]"),
        ("weights", "has no weights"),
        ("model_config", "invalid model config"),
    ],
)
def test_training_checkpoint_without_a_key(out, capsys, key, match):
    run = interrupted(out)
    rewrite_ckpt(run / "ckpt.pt", drop=key)
    refused(capsys, out, lambda: train(out), match)


def test_training_code_running_checkpoint_is_not_run(out, capsys, monkeypatch):
    run = interrupted(out)
    (run / "ckpt.pt").write_bytes(pickle.dumps({"schema": Evil()}))
    monkeypatch.chdir(out)
    refused(capsys, out, lambda: train(out), "not a plain-data checkpoint")
    assert not (out / "pwned").exists()


def test_training_foreign_checkpoint_is_refused(out, capsys):
    """An attn_only checkpoint copied into the full run's directory does not resume it."""
    shutil.copy(out / "smoke/attn_only/seed1337/ckpt.pt", interrupted(out) / "ckpt.pt")
    refused(capsys, out, lambda: train(out), r"belongs to another run \(model\.residual 'attn_only' -> 'full'")


def test_training_checkpoint_without_config_is_refused(out, capsys):
    """A checkpoint alone in a directory (no config.json) is nobody's run: refused, even one that would fit."""
    (out / "smoke/ffn_only/seed1337").mkdir(parents=True)
    shutil.copy(out / "smoke/attn_only/seed1337/ckpt.pt", out / "smoke/ffn_only/seed1337/ckpt.pt")
    refused(capsys, out, lambda: train(out, "--residual", "ffn_only"), r"holds ckpt\.pt but no config\.json")


@pytest.mark.parametrize("finished,chars", [(True, 900_000), (False, 900_000), (True, 200_000)])
def test_training_changed_data_is_refused_naming_both_hashes(out, tmp_path, capsys, monkeypatch, finished, chars):
    if not finished:
        interrupted(out)
    monkeypatch.setenv("RESIDUAL_DATA_DIR", str(short_data_dir(tmp_path, chars)))
    line = refused(capsys, out, lambda: train(out), "trained on other data")
    assert len(re.findall(r"\b[0-9a-f]{64}\b", line)) == 2, line


def test_training_checkpoint_of_other_data_is_refused(out, tmp_path, capsys, monkeypatch):
    """config.json edited to claim the new data: the checkpoint still says which data it was trained on."""
    run = interrupted(out)
    monkeypatch.setenv("RESIDUAL_DATA_DIR", str(short_data_dir(tmp_path)))
    from training.corpus import data_provenance
    from training.data import load_corpus

    config = json.loads((run / "config.json").read_text())
    config["data"] = dict(data_provenance(load_corpus("shakespeare_char")))
    (run / "config.json").write_text(json.dumps(config, indent=2))
    line = refused(capsys, out, lambda: train(out), r"belongs to another run .*data \(checkpoint sha256")
    assert len(re.findall(r"\b[0-9a-f]{64}\b", line)) == 2, line


@pytest.mark.parametrize(
    "name,line,text",
    [
        ("metrics.jsonl", 1, '{"step": 0, "val_lo'),
        ("metrics.jsonl", 2, "[1, 2]"),
        ("metrics.jsonl", 2, "\udcff"),
        ("probes.jsonl", 3, "not json"),
    ],
)
def test_training_corrupt_log_line_in_interrupted_run(out, capsys, name, line, text):
    """A damaged record is an error naming file and line; nothing is rewritten or deleted."""
    run = interrupted(out)
    if text == "\udcff":
        data = (run / name).read_bytes().split(b"\n")
        data[line - 1] = b"\xff\xfe"
        (run / name).write_bytes(b"\n".join(data))
        match = rf"cannot read .*{name}"
    else:
        damage_line(run / name, line, text)
        match = rf"{name}, line {line} is damaged"
    refused(capsys, out, lambda: train(out), match)


def test_training_lock_held_names_the_holder(out, capsys):
    run = interrupted(out)
    (run / ".lock.holder").write_text("pid 4242 on elsewhere\n")
    lock = FileLock(run / ".lock", timeout=0)
    with lock:
        refused(capsys, out, lambda: train(out), r"is being trained by pid 4242 on elsewhere")


def test_training_lock_just_taken_still_names_the_holder(out, capsys):
    """Two starts at once: the loser can look before the winner has written who it is; it waits for the line."""
    run = interrupted(out)
    (run / ".lock.holder").unlink(missing_ok=True)
    with FileLock(run / ".lock", timeout=0):
        writer = threading.Timer(0.3, lambda: (run / ".lock.holder").write_text("pid 4343 on here\n"))
        writer.start()
        try:
            refused(capsys, out, lambda: train(out), r"is being trained by pid 4343 on here")
        finally:
            writer.join()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_training_impossible_device(out, capsys, device):
    refused(capsys, out, lambda: train(out / "new", "--set", f"device={device}"), "no CUDA device")
    assert not (out / "new").exists()


def test_training_impossible_device_mps(out, capsys):
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    refused(capsys, out, lambda: train(out / "new", "--set", "device=mps"), "MPS is not available")


@pytest.mark.parametrize("variant", ["..", "/", "../..", "  "])
def test_training_variant_without_a_name(out, capsys, variant):
    refused(capsys, out, lambda: train(out, "--variant", variant), "gives no usable directory name")


@pytest.mark.parametrize("variant", ["../../x", "/etc/x", "a/../../../b", "..\\..\\x", "~/x"])
def test_variant_never_leaves_out(tmp_path, variant):
    path = RunDir.of(tmp_path / "o", "smoke", variant, 1).path.resolve()
    assert path.parent.parent.parent == (tmp_path / "o").resolve() and len(path.parent.name) > 0


def test_training_variant_dotdot_writes_inside_out(out, tmp_path, capsys):
    """--variant ../../x trains into <out>/smoke/x/seed1337 and nowhere else."""
    outside = {p for p in tmp_path.rglob("*") if not p.is_relative_to(out)}
    assert train(out / "new", "--variant", "../../x", "--set", "max_steps=2", "--set", "probes=false") == 0
    assert (out / "new/smoke/x/seed1337/final.json").is_file()
    assert {p for p in tmp_path.rglob("*") if not p.is_relative_to(out)} == outside
    assert sorted(p.name for p in (out / "new").rglob("*") if p.is_dir()) == ["seed1337", "smoke", "x"]


def test_training_ctrl_c_one_line_with_step_and_resume_command(out, capsys, monkeypatch):
    import probes

    monkeypatch.setattr(probes, "default_callbacks", lambda cfg: [InterruptAt(7)])
    capsys.readouterr()
    assert train(out / "new", "--set", "probes=true") == 130
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert re.search(
        r"interrupted at step 7; the run resumes from its checkpoint .*ckpt\.pt; resume with: .* -m "
        r"training --out",
        lines[0],
    ), lines[0]
    run = out / "new" / RUN
    assert load_checkpoint(run / "ckpt.pt").state["step"] == 5 and not (run / "final.json").exists()
    assert not list(run.glob(".*.tmp")) and not (run / ".lock.holder").exists()


def test_training_stale_lock_and_temps_of_a_killed_run_do_not_block(out, capsys):
    run = interrupted(out)
    (run / ".lock.holder").write_text("pid 1 on gone\n")
    (run / ".ckpt.pt.abc123.tmp").write_bytes(b"\0" * 1000)
    assert train(out) == 0, capsys.readouterr().err
    assert (run / "final.json").is_file() and not list(run.glob(".*.tmp"))


# ----- the four experiments ------------------------------------------------------------------------------


def experiment(name: str, out: Path, *extra: str):
    module, own = EXPERIMENTS[name]
    return lambda: module.EXPERIMENT.main(["--out", str(out), *ARGS, "--no-report", *own, *extra])


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_out_names_a_file(out, capsys, name):
    (out / "f").write_text("x")
    refused(capsys, out, experiment(name, out / "f"), "(Not a directory|not a directory)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_impossible_device(out, capsys, name):
    refused(capsys, out, experiment(name, out / "new", "--set", "device=cuda"), "no CUDA device")
    assert not (out / "new").exists()


@pytest.mark.parametrize(
    "name,line,text",
    [
        ("metrics.jsonl", 2, '{"step": 5, "tr'),
        ("metrics.jsonl", 1, '{"val_loss": 3.0}'),
        ("probes.jsonl", 2, '{"step": 0}'),
    ],
)
def test_experiment_reading_a_run_with_a_damaged_line(out, capsys, name, line, text):
    """A finished run's damaged record stops the experiment (file and line named); results.json is kept."""
    damage_line(out / RUN / name, line, text)
    refused(capsys, out, experiment("routing_test", out), rf"{name}, line {line} is damaged")


@pytest.mark.parametrize(
    "content,match",
    [(b'{"final_val_', "not valid JSON"), (b"{}", "no final_val_loss"), (b"[]", r"not a JSON object\)")],
)
def test_experiment_reading_a_damaged_final_json(out, capsys, content, match):
    (out / RUN / "final.json").write_bytes(content)
    refused(capsys, out, experiment("routing_test", out), rf"final\.json is damaged.*{match}")


def test_experiment_finished_run_on_other_data(out, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RESIDUAL_DATA_DIR", str(short_data_dir(tmp_path)))
    line = refused(capsys, out, experiment("routing_test", out), "trained on other data")
    assert len(re.findall(r"\b[0-9a-f]{64}\b", line)) == 2, line


def test_experiment_full_disk_keeps_results_json(out, capsys, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    assert (out / "smoke/results-routing_test.json").is_file()
    refused(capsys, out, experiment("routing_test", out), r"results-routing_test\.json: No space left on device")


# ----- python -m interp.plot_attention -------------------------------------------------------------------


def plot(ckpt: Path, html: Path, *extra: str):
    return lambda: plot_cli.main(["--ckpt", str(ckpt), "--text", "to", "--out", str(html), *extra])  # in both corpora


@pytest.mark.parametrize(
    "content,match",
    [(b"", r"truncated or corrupt \(EOFError"), (b"abc", "truncated or corrupt"), (None, "no checkpoint at")],
)
def test_plot_attention_damaged_checkpoint(tmp_path, capsys, content, match):
    if content is not None:
        (tmp_path / "c.pt").write_bytes(content)
    refused(capsys, tmp_path, plot(tmp_path / "c.pt", tmp_path / "a.html"), match)
    assert not (tmp_path / "a.html").exists()


@pytest.mark.parametrize("key,match", [("weights", "has no weights"), ("schema", "no schema field")])
def test_plot_attention_checkpoint_without_a_key(out, capsys, key, match):
    ckpt = out / RUN / "ckpt.pt"
    rewrite_ckpt(ckpt, drop=key)
    refused(capsys, out, plot(ckpt, out / "a.html"), match)


def test_plot_attention_out_under_a_file_keeps_it(out, capsys):
    (out / "f").write_text("x")
    refused(capsys, out, plot(out / RUN / "ckpt.pt", out / "f" / "a.html"), r"cannot write .*f/a\.html")


# ----- the library: load_checkpoint and to_hooked_transformer ----------------------------------------------


def damaged_checkpoints(out: Path) -> dict[str, Path]:
    good = out / RUN / "ckpt.pt"
    cases = {}

    def variant(name, **kw):
        path = out / f"{name}.pt"
        shutil.copy(good, path)
        rewrite_ckpt(path, **kw)
        cases[name] = path

    (out / "empty.pt").write_bytes(b"")
    cases["empty"] = out / "empty.pt"
    (out / "half.pt").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    cases["half"] = out / "half.pt"
    variant("no_weights", drop="weights")
    variant("weights_not_tensors", weights={"x": [1, 2]})
    variant("bad_config", model_config={"n_layers": "two"})
    torch.save([1, 2], out / "list.pt")
    cases["list"] = out / "list.pt"
    cases["directory"] = out / RUN
    return cases


LIBRARY_CASES = ["empty", "half", "no_weights", "weights_not_tensors", "bad_config", "list", "directory"]


@pytest.mark.parametrize("case", LIBRARY_CASES)
def test_load_checkpoint_refuses(out, case):
    path = damaged_checkpoints(out)[case]
    before = snapshot(out)
    with pytest.raises(CheckpointError, match=re.escape(str(path))):
        load_checkpoint(path)
    assert snapshot(out) == before


@pytest.mark.parametrize("case", ["empty", "no_weights", "weights_not_tensors", "wrong_shape"])
def test_to_hooked_transformer_refuses(out, case):
    from interp.tl.hooked import to_hooked_transformer

    if case == "wrong_shape":
        path = out / "shape.pt"
        shutil.copy(out / RUN / "ckpt.pt", path)
        payload = torch.load(path, weights_only=True)
        payload["model_config"]["d_model"] = 64
        torch.save(payload, path)
    else:
        path = damaged_checkpoints(out)[case]
    before = snapshot(out)
    with pytest.raises(CheckpointError):
        to_hooked_transformer(path)
    assert snapshot(out) == before


def test_to_hooked_transformer_refuses_other_things():
    from interp.tl.hooked import to_hooked_transformer

    with pytest.raises(ToolkitError, match="takes a ResidualGPT"):
        to_hooked_transformer(42)


def test_damaged_json_is_a_data_file_error(tmp_path):
    from interp.files.io import read_json, read_jsonl

    (tmp_path / "a.json").write_text('{"a": ')
    (tmp_path / "b.jsonl").write_text('{"step": 1}\n{"step": 2, \n{"step": 3}\n')
    with pytest.raises(DataFileError, match=r"a\.json is damaged"):
        read_json(tmp_path / "a.json")
    with pytest.raises(DataFileError, match=r"b\.jsonl, line 2 is damaged"):
        read_jsonl(tmp_path / "b.jsonl", torn_tail_ok=True)  # only a torn LAST line is forgiven


# ----- issue 26: faults nobody rehearsed (the fault x entry-point table is tests/test_faults.py) -----------


def test_training_non_finite_loss_fails_naming_step_and_checkpoint(out, capsys):
    """lr=1e30: the training loss stays finite at step 0 but validation is NaN at the last step: exit 2, no
    final.json, and nothing non-finite written anywhere."""
    line = refused(
        capsys,
        out,
        lambda: train(out / "new", "--set", "lr=1e30", "--set", "min_lr=0", "--set", "max_steps=1"),
        r"became nan at step \d",
    )
    assert "checkpoint" in line
    assert not list((out / "new").rglob("final.json"))
    for path in (out / "new").rglob("*.json*"):
        assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()


def test_experiment_non_finite_run_writes_no_result(out, capsys):
    line = refused(
        capsys,
        out / "new",
        experiment("residual_sweep", out / "new", "--set", "lr=1e30", "--set", "min_lr=0", "--set", "max_steps=1"),
        r"became nan at step",
    )
    assert not list((out / "new").rglob("results*.json"))
    assert re.match(r"error: \S+, seed \d+ \(.*new.*\): ", line), line  # which run of the sweep diverged


def test_training_run_dir_removed_under_a_live_trainer_stops_it(out, capsys, monkeypatch):
    import probes

    class RemoveDir:
        def on_step(self, trainer, step, loss):
            if step == 6:  # after the checkpoint at 5
                shutil.rmtree(trainer.run_dir.path)

    monkeypatch.setattr(probes, "default_callbacks", lambda cfg: [RemoveDir()])
    capsys.readouterr()
    assert train(out / "new", "--set", "probes=true") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(r"was removed or replaced while this run trained", err[0]), err
    assert not (out / "new" / RUN).exists(), "the trainer recreated the directory it lost"


def test_training_check_is_repeated_under_the_lock(out, capsys, monkeypatch):
    """Another process changes the run directory between the first check and the lock: refused, not trained."""
    run = interrupted(out)
    hold = RunDir.hold

    def hold_after_a_change(self):
        config = json.loads(self.config.read_text())
        config["train"]["lr"] = 0.5
        self.config.write_text(json.dumps(config))
        return hold(self)

    monkeypatch.setattr(RunDir, "hold", hold_after_a_change)
    capsys.readouterr()
    assert train(out) == 2
    assert re.search(r"different configuration \(train\.lr 0\.5 -> 0\.003\)", capsys.readouterr().err)
    assert not (run / "final.json").exists()


@pytest.mark.parametrize(
    "option,value,match",
    [
        ("--variants", "full,full", "more than once"),
        ("--variants", "", "empty entry"),
        ("--variants", ",", "empty entry"),
        ("--variants", "full,,attn_only", "empty entry"),
        ("--seeds", "1,,2", "empty entry"),
        ("--seeds", "1, 1", "distinct"),
        ("--seeds", str(2**64), "distinct"),
    ],
)
def test_experiment_list_options_refuse_empty_and_repeated_entries(out, capsys, option, value, match):
    refused(capsys, out, experiment("routing_test", out / "new", option, value), match)
    assert not (out / "new").exists()


@pytest.mark.parametrize(
    "key,value",
    [("d_model", "1048576"), ("batch_size", "100000000"), ("eval_batches", "1000000000"), ("n_layers", "10000000")],
)
def test_sizes_that_cannot_fit_are_refused_with_the_estimate(out, capsys, key, value):
    extra = ["--set", f"{key}={value}"] + (["--set", "n_heads=1"] if key == "d_model" else [])
    refused(capsys, out, experiment("routing_test", out / "new", *extra), r"needs about .* GiB \(parameters")
    refused(capsys, out, lambda: train(out / "new", *extra), r"needs about .* GiB")
    assert not (out / "new").exists()


def test_routing_test_refuses_a_context_of_one(out, capsys):
    refused(capsys, out, experiment("routing_test", out / "new", "--set", "n_ctx=1"), r"n_ctx >= 3")


def test_each_experiment_writes_its_own_results_and_cleans_its_own_temporaries(out, capsys):
    from experiments.shared.plan import Context
    from training.presets import resolve

    ctx = Context(args=None, spec=resolve("smoke"), seeds=[1], out=out)
    paths = [
        p for m, _ in EXPERIMENTS.values() for p in (m.EXPERIMENT.results_path(ctx), m.EXPERIMENT.report_path(ctx))
    ]
    assert len(set(paths)) == 8
    folder = out / "smoke"
    ours = [
        folder / ".results-routing_test.json.abc.tmp",
        folder / ".report-routing_test.html.def.tmp",
        folder / ".results.json.jkl.tmp",
    ]  # the last: a killed writer of the old, shared name
    theirs = folder / ".results-residual_sweep.json.ghi.tmp"
    for p in [*ours, theirs]:
        p.write_text("what a killed writer left")
    assert experiment("routing_test", out, "--no-identity")() == 0
    assert not any(p.exists() for p in ours) and theirs.exists()


def test_eval_steps_of_a_huge_run_are_computed_not_listed():
    from training.presets import TrainConfig

    steps = TrainConfig(max_steps=10**12, eval_interval=100, eval_from=0.5).eval_steps()
    assert len(steps) == 5 * 10**9 + 1 and steps[0] == 5 * 10**11 and steps[-1] == 10**12


def test_identity_probes_are_sized_for_the_vocabulary():
    from interp.config.model_config import ModelConfig
    from probes.identity import too_costly
    from probes.softmax_fit import _fit

    assert too_costly(ModelConfig(n_layers=4, d_model=128, n_heads=4, n_ctx=128, d_vocab=65)) is None
    assert "50257 tokens" in too_costly(ModelConfig(n_layers=2, d_model=32, n_heads=2, n_ctx=32, d_vocab=50257))
    # a held-out set with no valid target (NaN loss) keeps a fit instead of crashing
    w, b, _ = _fit(
        torch.randn(8, 3), torch.randint(0, 4, (8, 1)), torch.randn(4, 3), torch.full((4, 1), -100), 4, (1e-2,), 2
    )
    assert w.shape == (1, 3, 4)


def test_training_probes_refuse_a_context_of_one(out, capsys):
    """alpha_tt is measured from position 1 on: with n_ctx=1 every probe record would be NaN."""
    refused(capsys, out, lambda: train(out / "new", "--set", "n_ctx=1"), r"probes need n_ctx >= 2")
    assert not (out / "new").exists()


def test_training_optimizer_overflow_is_one_line(out, capsys):
    """lr=1e38: AdamW's step size overflows float32 inside torch; exit 2 naming the step, no traceback."""
    refused(
        capsys,
        out,
        lambda: train(
            out / "new", "--set", "lr=1e38", "--set", "min_lr=0", "--set", "max_steps=3", "--set", "warmup_steps=0"
        ),
        r"optimizer step failed at step 0",
    )

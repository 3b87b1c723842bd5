"""The run directory: its layout, its name, its safety and reading it back (docs/DESIGN.md contract 3).

    <out>/<preset>/<slug(variant)>/seed<k>/
        config.json     what was trained (model, train, model_init, data, meta)  - written first
        metrics.jsonl   one record per logged step
        probes.jsonl    probe records {"step", "probe", ...}
        ckpt.pt         the last checkpoint (weights, optimizer, samplers, RNG)
        final.json      the final record - written last: its presence means "finished"
        .lock           held (flock) by whoever trains into the directory
        .lock.holder    "pid <pid> on <host>" of that holder, while it holds the lock
        identity.json   an earlier version's cache of the routing test's identity probes (no longer read)
        snapshots/      step<k>.pt: eval_noise's weight snapshots (absent otherwise)

The trainer CLI and every experiment name directories by the same rule, so a
run trained one way is found and reused by the other. Whether a directory may
be trained into (or reused) is decided here, for the trainer and the launcher
alike: `check` (its config and data), `busy`, `finished`, `hold` (the lock).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout

from interp.errors import CheckpointError, ToolkitError
from interp.files.checks import Bad, checked
from interp.files.io import TMP_SUFFIX, DataFileError, read_json, read_jsonl, remove_stale_temps
from training.checks import rundir_files
from training.run_config import differing_fields, slug

if TYPE_CHECKING:
    from interp.files.checkpoint import Checkpoint


class RunDirError(ToolkitError):
    """A run directory that cannot be trained into: it holds another run, or another process trains it."""


@dataclass(frozen=True)
class RunDir:
    path: Path

    @classmethod
    def of(cls, out: str | Path, preset: str, variant: str, seed: int) -> RunDir:
        return cls(Path(out) / slug(preset) / slug(variant) / f"seed{int(seed)}")

    config = property(lambda self: self.path / "config.json")
    metrics = property(lambda self: self.path / "metrics.jsonl")
    probes = property(lambda self: self.path / "probes.jsonl")
    ckpt = property(lambda self: self.path / "ckpt.pt")
    final = property(lambda self: self.path / "final.json")
    lock = property(lambda self: self.path / ".lock")
    # Who holds the lock (pid, host), beside it: the lock file itself is truncated by every opener.
    holder = property(lambda self: self.path / ".lock.holder")
    identity = property(lambda self: self.path / "identity.json")  # an earlier version's cache; never read
    snapshots = property(lambda self: self.path / "snapshots")  # eval_noise's weight snapshots
    failed = property(lambda self: self.path / "failed.json")  # why an ensemble member stopped (training.ensemble)
    logs = property(lambda self: [self.metrics, self.probes])  # what a resume cuts back to its checkpoint

    # Trainer.run_dir was a Path before it was a RunDir: callbacks doing run_dir / "x.json" keep working
    def __truediv__(self, name: str | os.PathLike) -> Path:
        return self.path / name

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def snapshot(self, step: int) -> Path:
        """eval_noise's copy of the weights at one evaluation step."""
        return self.snapshots / f"step{int(step)}.pt"

    def files(self) -> list[Path]:
        """Every file a run directory may hold (snapshots/ aside, a directory)."""
        return [self.config, *(p for p in self.records() if p != self.snapshots), self.failed, self.lock, self.holder]

    def refuse_damage(self) -> None:
        """A file of the run directory that exists but is not a regular file (training.checks.rundir_files.
        damaged_files) is refused by name: nothing is trained, read or written into such a directory."""
        if bad := rundir_files.damaged_files(self.files()):
            path, kind = bad[0]
            raise RunDirError(
                f"{path} is {kind}, not a regular file: the run directory is damaged and is never trained "
                "into or reused - move that directory aside and run again"
            )

    @property
    def finished(self) -> bool:
        """final.json is there (a final.json that is not a regular file is damage: RunDirError)."""
        if self.final.exists() or os.path.islink(self.final):
            self.refuse_damage()
            return True
        return False

    # ----- safety: is this the run asked for, and who trains it -------------------------------------
    def check(self, record: dict[str, Any]) -> None:
        """Refuse a directory that holds another configuration or was trained on other data.

        record: what config.json would hold for the run asked for (config_record).
        """
        if self.path.exists() and not self.path.is_dir():
            raise RunDirError(f"{self.path} exists and is not a directory; choose another --out")
        self.refuse_damage()
        old = self.read_config()
        if old is None:
            records = [p.name for p in self.records() if p.exists()]
            if records:  # its config is gone: nothing says what it holds, so it is nobody's run
                raise RunDirError(
                    f"{self.path} holds {', '.join(records)} but no config.json, so what it trained "
                    "is unknown; it is never reused - move that directory aside and run again"
                )
            return
        if self.finished and not self.ckpt.is_file():
            raise RunDirError(
                f"{self.path} has final.json but no ckpt.pt to check it against; it is never reused - "
                "move that directory aside and run again"
            )
        self._check_config(old, record)

    def _check_config(self, old: dict[str, Any], record: dict[str, Any]) -> None:
        """config.json (old) is the run asked for (record): same data, vocabulary and configuration."""
        # Data first: other data can change the vocabulary, and so the model config, too.
        old_data, new_data = (old.get("data") or {}).get("sha256"), record["data"]["sha256"]
        if old_data != new_data:
            raise RunDirError(
                f"{self.path} was trained on other data (sha256 {old_data}, this data {new_data}); "
                "use the same corpus, or choose another --out"
            )
        old_vocab, new_vocab = (old.get("data") or {}).get("vocab_sha256"), record["data"].get("vocab_sha256")
        if old_vocab is not None and old_vocab != new_vocab:  # older records lack it: the checkpoint's is compared
            raise RunDirError(
                f"{self.path} was trained on the same token ids in another vocabulary or encoding "
                f"(vocab_sha256 {old_vocab}, this data {new_vocab}), so its text is other text; use "
                "the same corpus, or choose another --out"
            )
        if fields := differing_fields(old, record):
            raise RunDirError(
                f"{self.path} holds a run of a different configuration ({'; '.join(fields)}); "
                "choose another --out or delete that directory"
            )

    def records(self) -> list[Path]:
        """The files that only a run writes (config.json aside): one of them without config.json is refused."""
        return [self.metrics, self.probes, self.ckpt, self.final, self.identity, self.snapshots]

    def verify_finished(self, record: dict[str, Any]) -> dict[str, Any]:
        """A finished run as a fact checked against its own checkpoint; returns its final record.

        config.json (checked by `check`) is one editable file; the checkpoint records the model and
        training config and the data hash it was trained with, and final.json the checkpoint's content
        hash. Reused only when all of them agree with the run asked for.
        """
        from interp.files.checkpoint import load_checkpoint

        final = self.read_final()
        ckpt = load_checkpoint(self.ckpt)  # its content hash is verified there
        try:
            self.check_checkpoint(ckpt, record)
        except CheckpointError as e:
            raise RunDirError(f"{self.path} is not the finished run it claims to be: {e}") from None
        written, recorded = ckpt.content_sha256, final.get("ckpt_sha256")
        if written != recorded or ckpt.state.get("step") != record["train"]["max_steps"]:
            raise RunDirError(
                f"{self.path}: final.json and ckpt.pt are not the same run (checkpoint hash {str(written)[:12]}, "
                f"final.json names {str(recorded)[:12]}; step {ckpt.state.get('step')!r}); it is never reused - move "
                "that directory aside and run again"
            )
        self._check_numbers(final, ckpt.state)
        self._check_logs(final, ckpt.state.get("logs_sha256"))
        self.check_labels(ckpt.state.get("meta"), "after the run finished")
        return final

    def check_labels(self, sealed: dict[str, Any] | None, when: str) -> None:
        """config.json's meta labels (preset, variant, seed) as the checkpoint recorded them (older ones did not);
        checked on reuse and on resume."""
        labels = (self.read_config() or {}).get("meta")
        if sealed is not None and labels != sealed:
            keys = sorted(k for k in set(sealed) | set(labels or {}) if (labels or {}).get(k) != sealed.get(k))
            raise RunDirError(
                f"{self.config}: its meta labels ({', '.join(keys)}) were changed {when} (the checkpoint records "
                f"{sealed!r:.200}); it is never used - move that directory aside and run again"
            )

    def logs_sha256(self) -> dict[str, str | None]:
        """sha256 of metrics.jsonl and probes.jsonl as they are now (None: not there)."""
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None for p in self.logs}

    def _check_logs(self, final: dict[str, Any], recorded: dict[str, Any] | None = None) -> None:
        """The logs of a finished run are whole (a torn or damaged line is an error naming it) and end with
        the final evaluation, so the curves an experiment reads from them are the run's."""
        records = self.read_metrics()
        evals = [r for r in records if "val_loss" in r]
        steps = [r.get("step") for r in records]
        if any(b < a for a, b in zip(steps, steps[1:], strict=False) if isinstance(a, int) and isinstance(b, int)):
            raise RunDirError(
                f"{self.metrics} goes back in step (a record after a later one: a resume cuts the logs to its "
                "checkpoint, so a line was pasted or edited in); the run is never reused - move that directory "
                "aside and run again"
            )
        self.read_probes()
        now = self.logs_sha256()
        if isinstance(recorded, dict) and recorded != now:  # runs from before this record: not checked
            changed = sorted(k for k, v in now.items() if recorded.get(k) != v)
            raise RunDirError(
                f"{self.path}: {', '.join(changed)} changed after the run finished (its sha256 is not "
                "the one ckpt.pt records), so its curves are not the run's; it is never reused - move "
                "that directory aside and run again"
            )
        last = evals[-1] if evals else {}
        if last.get("step") != final["steps"] or last.get("val_loss") != final["final_val_loss"]:
            raise RunDirError(
                f"{self.metrics} does not end with the run's final evaluation (step {final['steps']}, "
                f"val_loss {final['final_val_loss']}); it was cut or edited, so the run is never "
                "reused - move that directory aside and run again"
            )

    def _check_numbers(self, final: dict[str, Any], state: dict[str, Any]) -> None:
        """final.json is the checkpoint's: an edited number is never reported as the result.

        A final checkpoint records final.json less its own hash (final_record); older ones record the losses."""
        sealed = state.get("final_record")
        keys = sorted((set(sealed) | set(final)) - {"ckpt_sha256"}) if isinstance(sealed, dict) else []
        best = state.get("best") if isinstance(state.get("best"), dict) else {}
        pairs = [("best_val_loss", best.get("val_loss")), ("best_step", best.get("step"))]
        if "final_val_loss" in state:  # checkpoints written before this record lack it
            pairs.append(("final_val_loss", state["final_val_loss"]))
        differ = [k for k in keys if final.get(k) != sealed.get(k)] or [
            k for k, want in pairs if want is not None and final.get(k) != want
        ]
        if differ:
            raise RunDirError(
                f"{self.path}: final.json's {', '.join(differ)} differ from what ckpt.pt records; "
                "it is never reused - move that directory aside and run again"
            )

    def read_final(self) -> dict[str, Any]:
        """final.json, checked field by field (training.checks.rundir_files.check_final)."""
        final = read_json(self.final)
        with checked(self.final, DataFileError, "move the run directory aside and train it again"):
            return rundir_files.check_final(final)

    def check_checkpoint(self, ckpt: Checkpoint, record: dict[str, Any]) -> None:
        """A checkpoint resumes only the run it was written by: same model, training config and data."""
        written = {
            "model": ckpt.config.to_dict(),
            "train": ckpt.state.get("train_config"),
            "model_init": ckpt.state.get("model_init"),
        }
        problems = differing_fields(written, record)
        old = (ckpt.state.get("data") or {}).get("sha256")
        if old != record["data"]["sha256"]:
            problems.append(f"data (checkpoint sha256 {old}, this data {record['data']['sha256']})")
        if record["data"].get("vocab_sha256") is not None:  # the ids mean the checkpoint's vocabulary's text
            from training.corpus import vocab_sha256

            written = vocab_sha256(ckpt.state.get("vocab"), ckpt.state.get("encoding"))
            if written != record["data"]["vocab_sha256"]:
                problems.append(
                    "vocabulary (the checkpoint's characters or encoding are not this corpus's: the "
                    "same token ids are other text)"
                )
        if missing := [k for k in ("optimizer", "sampler", "step", "best", "totals") if k not in ckpt.state]:
            raise CheckpointError(
                f"{self.ckpt} lacks the training state {missing} a resume needs; move it aside to start this run again"
            )
        if problems:
            raise CheckpointError(
                f"{self.ckpt} belongs to another run ({'; '.join(problems)}); move it aside to start this run again"
            )

    @contextlib.contextmanager
    def hold(self):
        """The lock, held while training; a killed holder's lock is free again (flock)."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunDirError(f"cannot create {self.path}: {e.strerror or e}") from None
        lock = FileLock(self.lock, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            who = self.read_holder() or "another process"
            raise RunDirError(
                f"{self.path} is being trained by {who}; wait for it to finish (or stop it) and run again"
            ) from None
        except OSError as e:
            raise RunDirError(f"cannot lock {self.path}: {e.strerror or e}") from None
        try:
            try:
                # Renamed into place, so a loser of the lock race never reads it half-written; no fsync:
                # it is bookkeeping, and a stale one is overwritten by the next holder.
                tmp = self.holder.with_name(f"{self.holder.name}.{os.getpid()}{TMP_SUFFIX}")
                tmp.write_text(f"pid {os.getpid()} on {os.uname().nodename}\n")
                os.replace(tmp, self.holder)
                remove_stale_temps(self.path)  # what a killed writer left; nobody else writes here now
            except OSError as e:
                raise RunDirError(f"cannot write in {self.path}: {e.strerror or e}") from None
            yield
        finally:
            self.holder.unlink(missing_ok=True)  # a killed holder leaves it; the next holder overwrites it
            lock.release()

    def inode(self) -> tuple[int, int] | None:
        """(device, inode) of the directory: a directory deleted and made again has another."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def check_still_there(self, inode: tuple[int, int] | None, step: int) -> None:
        """Refuse to write into a directory removed (or replaced) under a live trainer: it is no longer this run."""
        if inode is None or self.inode() != inode or not self.config.is_file():
            raise RunDirError(
                f"{self.path} was removed or replaced while this run trained (step {step}); stopped "
                "without writing there again - run the command again to start it afresh"
            )

    def read_holder(self, wait: float = 2.0) -> str:
        """The holder's line; a holder that has just taken the lock writes it a moment later, so wait a little."""
        deadline = time.monotonic() + wait
        while True:
            try:
                text = self.holder.read_text().strip()
            except OSError:
                text = ""
            if text or time.monotonic() >= deadline:
                return text
            time.sleep(0.05)

    def busy(self) -> bool:
        """True while another process holds this directory's lock (is training into it)."""
        if not self.lock.exists():
            return False
        lock = FileLock(self.lock, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            return True
        lock.release()
        return False

    def read_config(self) -> dict[str, Any] | None:
        if not self.config.exists():
            return None
        config = read_json(self.config)
        with checked(self.config, DataFileError, "move it aside to recover"):
            return rundir_files.check_run_config(config)

    def read_metrics(self) -> list[dict[str, Any]]:
        """metrics.jsonl, every record checked (training.checks.rundir_files.check_metric_record)."""
        return self._read_log(self.metrics, ("step",), rundir_files.check_metric_record)

    def read_probes(self) -> list[dict[str, Any]]:
        """probes.jsonl, every record checked (training.checks.rundir_files.check_probe_record)."""
        return self._read_log(self.probes, ("step", "probe"), rundir_files.check_probe_record)

    @staticmethod
    def _read_log(path: Path, required: tuple[str, ...], check: Any) -> list[dict[str, Any]]:
        records = read_jsonl(path, required=required)
        for number, record in enumerate(records, start=1):
            try:
                check(record)
            except Bad as e:
                raise DataFileError(
                    f"{path}, record {number} (step {str(record.get('step'))[:20]}): {e}; "
                    "move the run directory aside and train it again"
                ) from None
        return records

    def load_logs(self, record: dict[str, Any]) -> dict[str, Any]:
        """A finished run read from its logged files alone, without ckpt.pt (what --analyse-only reads; a shipped
        run has no checkpoint): config.json is the run asked for (record, as `check` compares it, its meta labels
        too), final.json is whole, metrics.jsonl and probes.jsonl are whole and end with the final evaluation.
        Nothing here vouches that the logs are the ones the run wrote (verify_finished compares their sha256 with
        the checkpoint's record); a shipped folder's MANIFEST.json does that for what it ships.
        """
        if not self.path.is_dir():
            raise RunDirError(f"{self.path} is not there; nothing is trained to fill it in")
        self.refuse_damage()
        old = self.read_config()
        if old is None or not self.finished:
            missing = "config.json" if old is None else "final.json (it never finished)"
            raise RunDirError(f"{self.path} has no {missing}; it is not a finished run and is never analysed")
        self._check_config(old, record)
        if old.get("meta") != record.get("meta"):
            raise RunDirError(
                f"{self.config}: its meta labels {old.get('meta')!r:.200} are not this run's "
                f"{record.get('meta')!r:.200} (moved from another run's directory?); it is never analysed"
            )
        self._check_logs(self.read_final())
        return self.load()

    def load(self) -> dict[str, Any]:
        """A finished run as plain data: final record, metric curves, probe records by kind."""
        if not self.path.is_dir():  # finished earlier in this command (or planned as finished), gone now
            raise RunDirError(
                f"{self.path} is gone (removed after it was trained?); no results are written from a run that "
                "vanished - run the command again to train it afresh"
            )
        final = self.read_final()
        metrics = self.read_metrics()
        probes: dict[str, list[dict[str, Any]]] = {}
        for record in self.read_probes():
            probes.setdefault(record["probe"], []).append(record)
        val = [(r["step"], r["val_loss"]) for r in metrics if "val_loss" in r]
        train = [(r["step"], r["train_loss"]) for r in metrics if "train_loss" in r]
        return {
            "run_dir": str(self.path),
            "final": final,
            "val_curve": {"steps": [s for s, _ in val], "loss": [v for _, v in val]},
            "train_curve": {"steps": [s for s, _ in train], "loss": [v for _, v in train]},
            "probes": probes,
        }

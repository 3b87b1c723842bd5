"""A run directory's trainer: one run set up, resumed and saved; train_runs checks, locks and trains runs.

A run directory (training.rundir, docs/DESIGN.md contract 3) holds config.json,
metrics.jsonl, probes.jsonl, ckpt.pt and, written last, final.json. A run with
final.json is done and never retrained; one without it resumes from ckpt.pt.
Whoever trains a run holds its directory's lock for the whole run (RunDir.hold)
and lets RunDir decide whether the directory holds this run (RunDir.check).

A Trainer is handed its corpus, loaded once by whoever builds it (python -m training, the
experiments' launcher); without one it loads train_cfg's, a convenience for a notebook or a test.
It builds the model, optimizer, sampler and validation batches (setup), resumes from or starts its
run directory (resume_or_start), and saves it (save; the final record, closing_record). The steps
themselves are training.loop's, one loop for a solo run and for an ensemble's members alike;
callbacks are plain objects the loop calls (training.loop lists the events).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from interp.command.signals import exit_code
from interp.config.model_config import ModelConfig
from interp.errors import CheckpointError, ConfigError, ToolkitError, one_line
from interp.files.checkpoint import load_checkpoint, save_checkpoint
from interp.files.io import append_jsonl, read_jsonl, write_json, write_jsonl
from interp.model.dropout import DropoutStream
from interp.model.eval_mode import eval_mode
from interp.model.gpt import ResidualGPT
from training import steps_by
from training.batches import BatchSampler, fixed_batches, random_batches
from training.budget import check_runnable
from training.checkstate import check_logs_before, check_training_state, logs_before
from training.compile import maybe_compile
from training.corpus import Corpus
from training.data import load_corpus
from training.flops import flops_per_token, peak_matmul_flops
from training.loop import FAILED, MembersStopped, TrainingInterrupted, advance
from training.numerics import apply_settings, autocast_context, pick_device, process_settings, resolve_dtype, what_ran
from training.optimizer import make_optimizer
from training.presets import TrainConfig, concrete_dtype
from training.run_config import config_record
from training.rundir import RunDir
from training.steps import SoloStep, StackedStep

# ----- what every evaluation shares -----------------------------------------------------


@torch.no_grad()
def mean_loss(model: torch.nn.Module, batches, device: torch.device, autocast=None) -> float:
    """Mean cross-entropy over batches, eval mode (dropout off); the model's mode is restored."""
    total = 0.0
    with eval_mode(model):
        for x, y in batches:
            with autocast if autocast is not None else contextlib.nullcontext():
                _, loss = model(x.to(device), y.to(device))
            total += loss.item()
    return total / len(batches)


# ----- the trainer --------------------------------------------------------------------------------------


class Trainer:
    """Train one (ModelConfig, TrainConfig) on a corpus into a run directory. `run()` returns the final record.

    model_cfg's d_vocab is the corpus's (RunSpec.fit_vocab); one that differs is fitted to the corpus here,
    and config.json records the trained value. corpus None loads train_cfg.corpus.
    """

    def __init__(
        self,
        model_cfg: ModelConfig,
        train_cfg: TrainConfig,
        run_dir: str | Path | RunDir,
        callbacks: list | tuple = (),
        corpus: Corpus | None = None,
        meta: dict[str, Any] | None = None,
        progress: bool = True,
        model_init=None,
    ):
        train_cfg = resolve_dtype(train_cfg)  # config.json records the dtype that runs here
        self.train_cfg = train_cfg
        self.run_dir = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
        self.callbacks = list(callbacks)
        self.meta = dict(meta or {})
        self.progress = progress
        self.model_init = model_init  # optional fn(model) run once before the optimizer is built
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.is_main = self.rank == 0
        self.corpus = corpus if corpus is not None else load_corpus(train_cfg.corpus, train_cfg.data_path)
        if model_cfg.d_vocab != self.corpus.vocab_size:
            model_cfg = model_cfg.replace(d_vocab=self.corpus.vocab_size)
        self.model_cfg = model_cfg
        shortest = min(len(self.corpus.train), len(self.corpus.val))
        if model_cfg.n_ctx + 1 >= shortest:
            where = train_cfg.data_path or "found through RESIDUAL_DATA_DIR or the cache"
            raise ConfigError(
                f"n_ctx {model_cfg.n_ctx} is longer than the data ({shortest} tokens in a split of corpus "
                f"{self.corpus.name}, {where})"
            )
        if train_cfg.batch_size % self.world_size:
            raise ConfigError(f"batch_size {train_cfg.batch_size} is not divisible by {self.world_size} ranks")
        self.config_record = config_record(model_cfg, train_cfg, self.corpus, model_init, self.meta)
        self.dir_inode: int | None = None  # the run directory's, once held (check_dir)
        self.rng: torch.Tensor | None = None  # the global RNG state after setup: an ensemble member saves with it

    def call(self, event: str, *args) -> None:
        for cb in self.callbacks:
            if (fn := getattr(cb, event, None)) is not None:
                fn(self, *args)

    def append(self, name: str, record: dict[str, Any]) -> None:
        """Append one JSON line to a run-directory log (main rank only)."""
        if self.is_main:
            self.check_dir()
            append_jsonl(self.run_dir.path / name, record)

    def check_dir(self) -> None:
        """Stop, not recreate, when the run directory was removed under this trainer (RunDir.check_still_there)."""
        if self.dir_inode is not None:
            self.run_dir.check_still_there(self.dir_inode, getattr(self, "step", 0))

    def run(self) -> dict[str, Any]:
        """Train this run by its solo step (or reuse it, finished); returns the final record (train_runs)."""
        return train_runs([self], progress=self.progress)[0]

    def setup(self) -> None:
        """Device, determinism, DDP, model, optimizer, samplers: everything a step needs."""
        cfg = self.train_cfg
        device = pick_device(cfg.device)
        apply_settings(cfg, device)
        self.ddp = self.world_size > 1
        if self.ddp and not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
            if device.type == "cuda":
                device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
                torch.cuda.set_device(device)
        self.device = device
        torch.manual_seed(cfg.seed)
        model = ResidualGPT(self.model_cfg)
        if self.model_init is not None:
            self.model_init(model)
        # every dropout mask from the run's own stream (interp.model.dropout): an ensemble member draws the same ones
        model.set_dropout_stream(DropoutStream(cfg.seed, self.rank))
        # opt-in; state_dict keys unchanged
        self.model = maybe_compile(model.to(device), cfg.compile, cfg.compile_mode, device)
        self.optimizer = make_optimizer(self.model, cfg, device)
        self.sampler = BatchSampler(self.corpus.train, self.model_cfg.n_ctx, cfg.batch_size, seed=cfg.seed)
        self.val_generator = torch.Generator().manual_seed(cfg.seed + 1)  # only for val_mode="random"
        self.val_batches = fixed_batches(self.corpus.val, self.model_cfg.n_ctx, cfg.batch_size, cfg.eval_batches)
        self.autocast = autocast_context(cfg.dtype, device)
        self.train_model = torch.nn.parallel.DistributedDataParallel(self.model) if self.ddp else self.model
        self.step = 0
        self.best = {"val_loss": math.inf, "step": None}
        self.totals = {"train_time": 0.0, "train_tokens": 0, "wall_time": 0.0}  # across resumes
        self.sealed: dict[str, str] = {}  # run-dir file a callback wrote -> its content sha256, in every ckpt
        self.steps_by: list[dict[str, Any]] = []  # how its steps were taken, once any were stacked (training.steps_by)
        self.wall_start = time.perf_counter()

    # ----- one state for checkpointing and resuming --------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        elapsed = self.totals["wall_time"] + time.perf_counter() - self.wall_start
        state = dict(
            step=self.step,
            best=self.best,
            totals={**self.totals, "wall_time": elapsed},
            optimizer=self.optimizer.state_dict(),
            sampler=self.sampler.state_dict(),
            val_generator=self.val_generator.get_state(),
            torch_rng=torch.get_rng_state(),
            train_config=self.train_cfg.to_dict(),
            model_init=self.config_record["model_init"],
            meta=self.config_record["meta"],  # config.json's labels, so an edit of them is seen on reuse
            sealed_files=dict(self.sealed),
            data=self.config_record["data"],
            vocab=self.corpus.vocab,
            encoding=self.corpus.encoding,
        )
        if self.is_main:  # the logs a resume from here keeps, sealed (training.checkstate.check_logs_before)
            state["logs_before_step"] = logs_before(self.step, self.run_dir.logs)
        if getattr(self, "last_val", None) is not None:  # the finished run's last validation loss
            state["final_val_loss"] = self.last_val
            state["logs_sha256"] = self.run_dir.logs_sha256()  # the finished logs, checked on reuse
        if getattr(self, "final_record", None) is not None:
            state["final_record"] = self.final_record
        if self.steps_by:  # only once a step was stacked: a solo run's checkpoint is as it always was
            state["steps_by"] = self.steps_by
        if self.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.sampler.load_state_dict(state["sampler"])
        self.val_generator.set_state(state["val_generator"])
        torch.set_rng_state(state["torch_rng"])
        if self.device.type == "cuda" and "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"], self.device)
        self.step, self.best, self.totals = state["step"], state["best"], state["totals"]
        self.sealed = dict(state.get("sealed_files") or {})
        self.steps_by = steps_by.read(state)  # checked with the rest of the state on resume

    def save(self) -> None:
        if self.is_main:
            self.check_dir()
            self.ckpt_sha256 = save_checkpoint(self.run_dir.ckpt, self.model, **self.state_dict())
        self.saved_step = self.step

    def resume_or_start(self) -> None:
        if self.is_main:  # an ensemble member that stopped on a non-finite number said why here; it trains again
            (self.run_dir.path / FAILED).unlink(missing_ok=True)
        if not self.run_dir.ckpt.exists():
            if self.is_main:
                for path in self.run_dir.logs:
                    path.unlink(missing_ok=True)
                write_json(self.run_dir.config, self.config_record)
            return
        ckpt = load_checkpoint(self.run_dir.ckpt)
        self.run_dir.check_checkpoint(ckpt, self.config_record)
        self.run_dir.check_labels(ckpt.state.get("meta"), "since the checkpoint was written")
        # Every field checked before anything is loaded or any log rewritten (training.checkstate).
        check_training_state(ckpt, self.model, self.optimizer, self.train_cfg, self.run_dir.ckpt)
        if self.is_main:
            check_logs_before(ckpt.state, self.run_dir.logs, self.run_dir.ckpt)
        try:
            self.model.load_state_dict(ckpt.weights)
            self.load_state_dict(ckpt.state)
        except (KeyError, RuntimeError, ValueError, TypeError, ToolkitError) as e:
            raise CheckpointError(
                f"{self.run_dir.ckpt} cannot be resumed ({type(e).__name__}: {one_line(e)}); "
                "move it aside to start this run again"
            ) from None
        self.saved_step, self.ckpt_sha256 = self.step, ckpt.content_sha256
        if self.is_main:
            # Drop what was logged after the checkpoint. Both logs are read (strictly: a damaged
            # line is an error naming file and line) before either is rewritten.
            logs = [(path, read_jsonl(path, torn_tail_ok=True)) for path in self.run_dir.logs if path.exists()]
            for path, records in logs:
                write_jsonl(path, [r for r in records if r.get("step", 0) < self.step])
        self._record_eval_from()  # only once the checkpoint has loaded: a refused resume changes nothing

    def _record_eval_from(self) -> None:
        """Resumed evaluating later than it started: config.json keeps the later eval_from, since
        from now on the run lacks the evaluations before it (training/rundir.py: config_diff)."""
        config = self.run_dir.read_config() if self.is_main else None
        ours = self.train_cfg.eval_from
        if config is not None and (config.get("train") or {}).get("eval_from", 0.0) != ours:
            write_json(self.run_dir.config, {**config, "train": {**config["train"], "eval_from": ours}})

    def remedy(self) -> str:  # lr_schedule=constant has no warm-up to raise
        return "Lower lr" + ("" if self.train_cfg.lr_schedule == "constant" else " or raise warmup_steps")

    def kept(self) -> str:
        """Where the run stands after a failed step: its last good checkpoint, or none."""
        if (saved := getattr(self, "saved_step", None)) is not None and self.run_dir.ckpt.exists():
            return f"the last good checkpoint is {self.run_dir.ckpt} (step {saved})"
        return "no checkpoint was written yet"

    def val_loss(self, batches=None) -> float:
        """Validation loss: the fixed batches, or fresh random ones with val_mode="random"."""
        cfg = self.train_cfg
        if batches is None and cfg.val_mode == "random":
            batches = random_batches(
                self.corpus.val, self.model_cfg.n_ctx, cfg.batch_size, cfg.eval_batches, self.val_generator
            )
        return mean_loss(self.model, self.val_batches if batches is None else batches, self.device, self.autocast)

    def closing_record(self, last_val: float, start_step: int) -> dict[str, Any]:
        cfg = self.train_cfg
        wall_time = self.totals["wall_time"] + time.perf_counter() - self.wall_start  # before the peak measurement
        tokens_per_s = self.totals["train_tokens"] / max(self.totals["train_time"], 1e-9)
        bf16 = concrete_dtype(cfg.dtype, self.device.type) == "bfloat16"
        peak = peak_matmul_flops(self.device, torch.bfloat16 if bf16 else torch.float32)
        n_params = self.model.num_params()
        return {
            "final_val_loss": last_val,
            "best_val_loss": self.best["val_loss"],
            "best_step": self.best["step"],
            "steps": cfg.max_steps,
            "tokens_per_s": tokens_per_s,
            "mfu": flops_per_token(self.model_cfg, n_params) * tokens_per_s * self.world_size / peak,
            "peak_matmul_flops": peak,
            "wall_time_s": wall_time,
            "resumed_from_step": start_step,
            "device": str(self.device),
            "world_size": self.world_size,
            # float sums reorder with the thread count: at a collapse boundary that alone can move a run
            "threads": torch.get_num_threads(),
            "n_params": n_params,
            **what_ran(cfg, self.device),
        }


# ----- runs checked, locked, resumed and trained ----------------------------------------------------------


def train_runs(members: Sequence[Trainer], stacked: bool = False, progress: bool = True) -> list[dict[str, Any]]:
    """Train runs into their run directories; returns their final records in order.

    Each run is checked first (RunDir.check); a finished one is reused once checked against its own checkpoint
    (RunDir.verify_finished). The others are locked, checked again under the lock, set up and resumed, then
    advanced by the one loop (training.loop.advance): each run by its solo step, or with stacked, the members
    that stand at the same step as one ensemble (training.steps.StackedStep). A solo run that goes non-finite
    raises TrainingError; stacked members that do stop alone and MembersStopped names them once the others
    finished."""
    for t in members:
        check_runnable(t.model_cfg, t.train_cfg, t.train_cfg.device)  # a size that cannot fit, at once
        t.run_dir.check(t.config_record)  # a finished run of another config is refused too, not reused
    if not all(t.run_dir.finished for t in members):
        pick_device(members[0].train_cfg.device)  # an impossible device is refused before anything is written
    finals: dict[int, dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        todo = []
        for i, t in enumerate(members):
            if not t.run_dir.finished:
                if t.is_main:
                    stack.enter_context(t.run_dir.hold())
                t.run_dir.check(t.config_record)  # again under the lock: another holder may have finished it since
            if t.run_dir.finished:
                finals[i] = t.run_dir.verify_finished(t.config_record)  # checked against its own checkpoint
            else:
                todo.append(i)
        try:
            with process_settings():  # leave a notebook's process as it was
                failed = _resume_and_advance([(i, members[i]) for i in todo], stacked, progress, finals)
        except KeyboardInterrupt as e:  # setting up or finishing: files are whole (atomic writes), each run resumes
            step = min((getattr(members[i], "step", 0) for i in todo), default=0)
            raise TrainingInterrupted(step, members[todo[0]].run_dir.ckpt, exit_code(e)) from None
    if failed:
        raise MembersStopped(failed, len(members))
    return [finals[i] for i in range(len(members))]


def _resume_and_advance(todo: list[tuple[int, Trainer]], stacked: bool, progress: bool, finals: dict) -> list:
    """Set every run up and resume it, then advance them: alone, or stacked by the step they stand at."""
    by_step: dict[int, list[tuple[int, Trainer]]] = {}
    for i, t in todo:
        t.dir_inode = t.run_dir.inode()
        t.setup()
        t.resume_or_start()  # removes a failed.json left by an earlier attempt
        t.rng = torch.get_rng_state()
        by_step.setdefault(t.step, []).append((i, t))
    failed = []
    for _, pairs in sorted(by_step.items()):
        loops = [[t for _, t in pairs]] if stacked else [[t] for _, t in pairs]
        for members in loops:
            done, stopped = advance(StackedStep(members) if stacked else SoloStep(members[0]), progress)
            failed += stopped
            finals.update({i: done[t] for i, t in pairs if t in done})
    return failed

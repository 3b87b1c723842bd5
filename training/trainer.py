"""The lean training loop: deterministic, resumable, fixed validation, probes as callbacks.

A run directory (DESIGN.md contract 3) holds config.json, metrics.jsonl,
probes.jsonl, ckpt.pt and, written last, final.json. A run with final.json is
done and never retrained; one without it resumes from ckpt.pt.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from interp.checkpoint import atomic_write, load_checkpoint, save_checkpoint
from interp.config import ModelConfig
from interp.errors import ConfigError, ToolkitError
from interp.model import ResidualGPT
from training.data import BatchSampler, Corpus, fixed_batches, load_corpus, random_batches
from training.presets import TrainConfig


class TrainingError(ToolkitError):
    """Training cannot go on (a non-finite loss, a run directory that holds another config)."""


class Callback:
    """Probe hooks into the loop. `interval` steps apart; the trainer calls only what is defined."""

    interval: int = 0

    def on_train_start(self, trainer: Trainer) -> None: ...
    def on_step_begin(self, trainer: Trainer, step: int) -> None: ...
    def on_backward(self, trainer: Trainer, step: int) -> None: ...  # grads ready, before clipping
    def on_step(self, trainer: Trainer, step: int, loss: float) -> None: ...  # after the optimizer step
    def on_eval(self, trainer: Trainer, step: int, val_loss: float) -> None: ...
    def on_train_end(self, trainer: Trainer) -> None: ...


def pick_device(name: str) -> torch.device:
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup, then cosine from lr to min_lr at max_steps (or constant)."""
    if cfg.lr_schedule == "constant":
        return cfg.lr
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.lr - cfg.min_lr)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    # Weight decay only on matrices and embeddings (tensors with >= 2 dims), as in the paper.
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    fused = device.type == "cuda"
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused)


_PEAK_FLOPS: dict[str, float] = {}


def peak_matmul_flops(device: torch.device, dtype: torch.dtype = torch.float32) -> float:
    """FLOP/s of a large matmul on this device, measured once per process (the MFU denominator)."""
    key = f"{device}:{dtype}"
    if key not in _PEAK_FLOPS:
        n = 2048 if device.type == "cpu" else 8192
        a = torch.randn(n, n, device=device, dtype=dtype, generator=None)
        b = torch.randn(n, n, device=device, dtype=dtype)
        a @ b  # warm up
        reps = 3
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        sync()
        start = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync()
        _PEAK_FLOPS[key] = 2 * n**3 * reps / (time.perf_counter() - start)
    return _PEAK_FLOPS[key]


def flops_per_token(cfg: ModelConfig, n_params: int) -> float:
    # nanoGPT / PaLM estimate: 6N for the matmuls plus the attention scores.
    return 6 * n_params + 12 * cfg.n_layers * cfg.d_model * cfg.n_ctx


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line (a kill can leave a torn last line; it is skipped)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(obj, indent=2) + "\n"))


def _rewrite_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text("".join(json.dumps(r) + "\n" for r in records)))


def describe(fn) -> str | None:
    """A stable name for a model_init function (recorded in config.json, compared on resume)."""
    if fn is None:
        return None
    if isinstance(fn, functools.partial):
        args = ", ".join([*map(repr, fn.args), *(f"{k}={v!r}" for k, v in sorted(fn.keywords.items()))])
        return f"{describe(fn.func)}({args})"
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


class Trainer:
    """Train one (ModelConfig, TrainConfig) into run_dir. `run()` returns the final record."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        train_cfg: TrainConfig,
        run_dir: str | Path,
        callbacks: list[Callback] | tuple = (),
        corpus: Corpus | None = None,
        meta: dict[str, Any] | None = None,
        progress: bool = True,
        model_init=None,
    ):
        self.train_cfg = train_cfg
        self.run_dir = Path(run_dir)
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
            raise ConfigError(f"n_ctx {model_cfg.n_ctx} is longer than the data ({shortest} tokens in a split)")
        if train_cfg.batch_size % self.world_size:
            raise ConfigError(f"batch_size {train_cfg.batch_size} is not divisible by {self.world_size} ranks")
        self.config_record = {
            "model": model_cfg.to_dict(),
            "train": train_cfg.to_dict(),
            "model_init": describe(model_init),
            "meta": self.meta,
        }

    # ----- run-directory bookkeeping -------------------------------------------------
    @property
    def final_path(self) -> Path:
        return self.run_dir / "final.json"

    @property
    def ckpt_path(self) -> Path:
        return self.run_dir / "ckpt.pt"

    def _check_run_dir(self) -> None:
        cfg_path = self.run_dir / "config.json"
        if cfg_path.exists():
            old = json.loads(cfg_path.read_text())
            keys = ("model", "train", "model_init")
            if {k: old.get(k) for k in keys} != {k: self.config_record[k] for k in keys}:
                raise TrainingError(
                    f"{self.run_dir} holds a run of a different configuration; "
                    "choose another --out or delete that directory"
                )

    def _call(self, event: str, *args) -> None:
        for cb in self.callbacks:
            fn = getattr(cb, event, None)
            if fn is not None:
                fn(self, *args)

    def append(self, name: str, record: dict[str, Any]) -> None:
        """Append one JSON line to a run-directory log (main rank only)."""
        if self.is_main:
            with open(self.run_dir / name, "a") as f:
                f.write(json.dumps(record) + "\n")

    # ----- the loop --------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self._check_run_dir()  # a finished run of another config is refused too, not silently reused
        if self.final_path.exists():
            return json.loads(self.final_path.read_text())
        previous = torch.are_deterministic_algorithms_enabled()
        try:
            return self._train()
        finally:
            torch.use_deterministic_algorithms(previous)  # leave a notebook's process as it was

    def _train(self) -> dict[str, Any]:
        cfg = self.train_cfg
        device = pick_device(cfg.device)
        if cfg.deterministic:
            if device.type == "cuda":
                os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
        ddp = self.world_size > 1
        if ddp and not dist.is_initialized():
            backend = "nccl" if device.type == "cuda" else "gloo"
            dist.init_process_group(backend)
            if device.type == "cuda":
                device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
                torch.cuda.set_device(device)
        self.device = device

        torch.manual_seed(cfg.seed)
        model = ResidualGPT(self.model_cfg)
        if self.model_init is not None:
            self.model_init(model)
        model.to(device)
        self.model = model
        optimizer = make_optimizer(model, cfg, device)
        sampler = BatchSampler(self.corpus.train, self.model_cfg.n_ctx, cfg.batch_size, seed=cfg.seed)
        val_gen = torch.Generator().manual_seed(cfg.seed + 1)  # only for val_mode="random"
        self.val_batches = fixed_batches(self.corpus.val, self.model_cfg.n_ctx, cfg.batch_size, cfg.eval_batches)
        start_step, best = 0, {"val_loss": math.inf, "step": None}
        totals = {"train_time": 0.0, "train_tokens": 0, "wall_time": 0.0}  # across resumes
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.ckpt_path.exists():
            ckpt = load_checkpoint(self.ckpt_path)
            model.load_state_dict(ckpt.weights)
            optimizer.load_state_dict(ckpt.state["optimizer"])
            sampler.load_state_dict(ckpt.state["sampler"])
            val_gen.set_state(ckpt.state["val_generator"])
            torch.set_rng_state(ckpt.state["torch_rng"])
            if device.type == "cuda" and "cuda_rng" in ckpt.state:
                torch.cuda.set_rng_state(ckpt.state["cuda_rng"], device)
            start_step, best, totals = ckpt.state["step"], ckpt.state["best"], ckpt.state["totals"]
            for name in ("metrics.jsonl", "probes.jsonl"):  # drop what was logged after the checkpoint
                path = self.run_dir / name
                if self.is_main and path.exists():
                    _rewrite_jsonl(path, [r for r in read_jsonl(path) if r.get("step", 0) < start_step])
        elif self.is_main:
            for name in ("metrics.jsonl", "probes.jsonl"):
                (self.run_dir / name).unlink(missing_ok=True)
            write_json(self.run_dir / "config.json", self.config_record)

        train_model = torch.nn.parallel.DistributedDataParallel(model) if ddp else model
        autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16)
            if cfg.dtype == "bfloat16" and device.type == "cuda"
            else contextlib.nullcontext()
        )
        self.autocast = autocast
        n_params = model.num_params()
        tokens_per_step = cfg.batch_size * cfg.grad_accum * self.model_cfg.n_ctx

        def save(step: int) -> None:
            if not self.is_main:
                return
            elapsed = totals["wall_time"] + time.perf_counter() - wall_start
            state = dict(
                step=step, best=best, totals={**totals, "wall_time": elapsed},
                optimizer=optimizer.state_dict(), sampler=sampler.state_dict(),
                val_generator=val_gen.get_state(), torch_rng=torch.get_rng_state(),
                train_config=cfg.to_dict(), vocab=self.corpus.vocab, encoding=self.corpus.encoding,
            )
            if device.type == "cuda":
                state["cuda_rng"] = torch.cuda.get_rng_state(device)
            save_checkpoint(self.ckpt_path, model, **state)

        def evaluate() -> float:
            batches = self.val_batches
            if cfg.val_mode == "random":
                batches = random_batches(
                    self.corpus.val, self.model_cfg.n_ctx, cfg.batch_size, cfg.eval_batches, val_gen
                )
            return self.evaluate(batches)

        self._call("on_train_start")
        bar = tqdm(total=cfg.max_steps, initial=start_step, desc=str(self.run_dir.name), unit="step",
                   disable=not (self.progress and self.is_main), leave=False, dynamic_ncols=True)
        wall_start = time.perf_counter()
        window_time, window_tokens = 0.0, 0
        record: dict[str, Any] = {}
        last_val = math.nan
        for step in range(start_step, cfg.max_steps + 1):
            if step % cfg.eval_interval == 0 or step == cfg.max_steps:
                val_loss = last_val = evaluate()
                record["val_loss"] = val_loss
                if val_loss < best["val_loss"]:
                    best = {"val_loss": val_loss, "step": step}
                self._call("on_eval", step, val_loss)
            if step == cfg.max_steps:
                if record:
                    self.append("metrics.jsonl", {"step": step, **record})
                break
            t0 = time.perf_counter()
            lr = lr_at(step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            model.train()
            self._call("on_step_begin", step)
            loss_sum = torch.zeros((), device=device)
            for micro in range(cfg.grad_accum):
                x, y = sampler.next_batch(self.rank, self.world_size)
                x, y = x.to(device), y.to(device)
                last = not ddp or micro == cfg.grad_accum - 1
                sync = contextlib.nullcontext() if last else train_model.no_sync()
                with sync, autocast:
                    _, loss = train_model(x, y)
                (loss / cfg.grad_accum).backward()
                loss_sum += loss.detach()
            loss = loss_sum / cfg.grad_accum
            if ddp:
                dist.all_reduce(loss, op=dist.ReduceOp.AVG)
            loss_value = loss.item()
            if not math.isfinite(loss_value):
                bar.close()
                kept = (f"the last good checkpoint ({self.ckpt_path}) is kept" if self.ckpt_path.exists()
                        else "no checkpoint was written yet")
                raise TrainingError(f"loss became {loss_value} at step {step}; {kept}. Lower lr or raise warmup_steps")
            self._call("on_backward", step)
            clip = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            dt = time.perf_counter() - t0
            totals["train_time"] += dt
            totals["train_tokens"] += tokens_per_step
            window_time += dt
            window_tokens += tokens_per_step
            self._call("on_step", step, loss_value)
            if step % cfg.log_interval == 0 or "val_loss" in record:
                record.update(step=step, lr=lr, train_loss=loss_value, grad_norm=grad_norm,
                              tokens_per_s=window_tokens / max(window_time, 1e-9))
                self.append("metrics.jsonl", record)
                window_time, window_tokens = 0.0, 0
                bar.set_postfix(loss=f"{loss_value:.3f}", val=f"{best['val_loss']:.3f}",
                                tok_s=f"{record['tokens_per_s']:.0f}")
                record = {}
            bar.update(1)
            if (step + 1) % cfg.ckpt_interval == 0 and step + 1 < cfg.max_steps:
                save(step + 1)
        bar.close()
        self._call("on_train_end")
        save(cfg.max_steps)
        wall_time = totals["wall_time"] + time.perf_counter() - wall_start  # before the one-off peak measurement
        tokens_per_s = totals["train_tokens"] / max(totals["train_time"], 1e-9)
        bf16 = cfg.dtype == "bfloat16" and device.type == "cuda"
        peak = peak_matmul_flops(device, torch.bfloat16 if bf16 else torch.float32)
        final = {
            "final_val_loss": last_val,
            "best_val_loss": best["val_loss"],
            "best_step": best["step"],
            "steps": cfg.max_steps,
            "tokens_per_s": tokens_per_s,
            "mfu": flops_per_token(self.model_cfg, n_params) * tokens_per_s * self.world_size / peak,
            "peak_matmul_flops": peak,
            "wall_time_s": wall_time,
            "resumed_from_step": start_step,
            "device": str(device),
            "world_size": self.world_size,
            "n_params": n_params,
        }
        if self.is_main:
            write_json(self.final_path, final)
        return final

    @torch.no_grad()
    def evaluate(self, batches) -> float:
        """Mean cross-entropy over batches, eval mode (dropout off)."""
        model = self.model
        was_training = model.training
        model.eval()
        total = 0.0
        for x, y in batches:
            with self.autocast:
                _, loss = model(x.to(self.device), y.to(self.device))
            total += loss.item()
        model.train(was_training)
        return total / len(batches)

"""Train K same-shape runs as one: a StackedGPT step per step, every member an ordinary run directory.

Each member is a solo Trainer that never runs its own loop: it builds its model (same seed, same
initialisation, same model_init), its optimizer, sampler and validation batches, resumes from its
own checkpoint and writes its own config.json, metrics.jsonl, probes.jsonl, ckpt.pt and final.json
in exactly the solo format. The ensemble stacks the members' weights and AdamW moments, advances
them together, and unstacks them into each member before anything reads its model (callbacks,
checkpoints), so a member resumes alone or in another ensemble, and every reader sees a run.

Which runs train together, and how many, is training.grouping's (group, trains_stacked). A member
whose loss or gradient goes non-finite stops alone (failed.json in its run directory says why; its
last checkpoint is kept) while the others finish; run() then raises TrainingError naming it.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

import training.trainer as trainer_module
from interp.errors import ConfigError
from interp.io import write_json
from interp.signals import exit_code
from probes import GradientProbe
from probes.gradients import grouped_norms, resid_grad_sites
from training.compile import mark_step, maybe_compile
from training.flops import flops_per_token, peak_matmul_flops
from training.grouping import PER_MEMBER_TRAIN, check_ensemble_fits, group_key, why_alone
from training.optimizer import lr_at
from training.presets import concrete_dtype
from training.stacked import StackedAdamW, StackedGPT
from training.trainer import Trainer, TrainingError, TrainingInterrupted

CALLBACK_EVENTS = ("on_train_start", "on_eval", "on_train_end")  # what a member's callbacks may define
FAILED = "failed.json"


class MembersStopped(TrainingError):
    """Members that stopped on a non-finite number while the rest of their ensemble finished."""

    def __init__(self, failed: list[tuple[Trainer, str]], size: int):
        self.failed = failed
        lines = "; ".join(f"{t.run_dir.path}: {e}" for t, e in failed)
        rest = "the others finished" if len(failed) < size else "none finished"
        super().__init__(f"{len(failed)} of {size} ensemble members stopped ({lines}); {rest}")


class EnsembleTrainer:
    """Train member Trainers (built but not run) as one. run() returns their final records in order."""

    def __init__(self, members: Sequence[Trainer], progress: bool = True):
        self.members = list(members)
        if not self.members:
            raise ConfigError("an ensemble needs at least one member")
        for t in self.members:
            why = why_alone(t)
            if why:
                raise ConfigError(f"{t.run_dir.path} cannot train in an ensemble: {why}")
        if len({group_key(t) for t in self.members}) != 1:
            raise ConfigError(
                "ensemble members must share the model shape, the mixer and every training field but "
                + ", ".join(PER_MEMBER_TRAIN)
            )
        if len({t.run_dir.path.resolve() for t in self.members}) != len(self.members):
            raise ConfigError("two ensemble members share a run directory")
        self.progress = progress

    # ----- run: check every member, lock them all, train those unfinished ------------------------------
    def run(self) -> list[dict[str, Any]]:
        from training.budget import check_runnable
        from training.trainer import pick_device

        first = self.members[0]
        for t in self.members:
            check_runnable(t.model_cfg, t.train_cfg, t.train_cfg.device)
            t.run_dir.check(t.config_record)
        check_ensemble_fits(first, len(self.members))
        pick_device(first.train_cfg.device)  # an impossible device is refused before any directory is made
        finals: dict[int, dict[str, Any]] = {}
        with contextlib.ExitStack() as stack:
            todo = []
            for i, t in enumerate(self.members):
                if not t.run_dir.finished:
                    stack.enter_context(t.run_dir.hold())
                    t.run_dir.check(t.config_record)  # again under the lock
                if t.run_dir.finished:
                    finals[i] = t.run_dir.verify_finished(t.config_record)
                else:
                    todo.append(i)
            try:
                with trainer_module.process_settings():
                    failed = self._train_all([self.members[i] for i in todo], finals, todo)
            except KeyboardInterrupt as e:  # setting members up or writing their final records: each resumes
                step = min((getattr(self.members[i], "step", 0) for i in todo), default=0)
                raise TrainingInterrupted(step, self.members[todo[0]].run_dir.ckpt, exit_code(e)) from None
        if failed:
            raise MembersStopped(failed, len(self.members))
        return [finals[i] for i in range(len(self.members))]

    def _train_all(self, todo: list[Trainer], finals: dict, index: list[int]) -> list:
        """Set every member up and resume it; members at different steps train as separate ensembles."""
        by_step: dict[int, list[tuple[int, Trainer]]] = {}
        for i, t in zip(index, todo, strict=True):
            t._dir_inode = t.run_dir.inode()
            t._setup()
            t._resume_or_start()  # removes a failed.json left by an earlier attempt
            t._rng = torch.get_rng_state()
            by_step.setdefault(t.step, []).append((i, t))
        failed = []
        for _, pairs in sorted(by_step.items()):
            done, stopped = _Loop([t for _, t in pairs], self.progress).train()
            failed += stopped
            for i, t in pairs:
                if t in done:
                    finals[i] = done[t]
        return failed


class _Loop:
    """One ensemble of members that all stand at the same step."""

    def __init__(self, members: list[Trainer], progress: bool):
        self.members = members
        self.k = len(members)
        self.progress = progress
        self.cfg = members[0].train_cfg
        self.device = members[0].device
        self.stacked = StackedGPT([t.model for t in members]).to(self.device)
        self.autocast = members[0].autocast  # bfloat16 autocast where the members' dtype says so
        self.compile_mode = self.cfg.compile_mode if self.cfg.compile else "default"
        # the stacked step compiled as the members' solo models would be (a gradient-probe step runs eager)
        maybe_compile(self.stacked, self.cfg.compile, self.cfg.compile_mode, self.device)
        self.param_of = [dict(t.model.named_parameters()) for t in members]
        names = self.stacked.names
        self.opt = StackedAdamW(
            {n: self.stacked.p(n) for n in names},
            {n: self.stacked.p(n).dim() >= 3 for n in names},
            (self.cfg.beta1, self.cfg.beta2),
        )
        self._load_optimizer_states()
        self.alive = [True] * self.k
        self.errors: dict[int, str] = {}
        self.grad_probes = [next((cb for cb in t.callbacks if isinstance(cb, GradientProbe)), None) for t in members]
        for t in members:  # the ensemble measures gradients itself; other callbacks see the member's model
            t.callbacks = [cb for cb in t.callbacks if not isinstance(cb, GradientProbe)]
        self.synced_step = -1

    def _load_optimizer_states(self) -> None:
        steps = set()
        for k, t in enumerate(self.members):
            for n in self.stacked.names:
                state = t.optimizer.state.get(self.param_of[k][n], {})
                if state:
                    self.opt.exp_avg[n][k].copy_(state["exp_avg"])
                    self.opt.exp_avg_sq[n][k].copy_(state["exp_avg_sq"])
                    steps.add(int(state["step"]))
                else:
                    steps.add(0)
        if len(steps) != 1:
            raise TrainingError(f"ensemble members' optimizers stand at different steps {sorted(steps)}")
        self.opt.steps = steps.pop()

    def sync(self, optimizer: bool = False) -> None:
        """Unstack the weights into each member's model, and with optimizer=True the AdamW moments into its
        optimizer (the solo format its checkpoint stores)."""
        if self.synced_step != self.step:
            with torch.no_grad():
                for k in range(self.k):
                    params = self.param_of[k]
                    for n in self.stacked.names:
                        params[n].copy_(self.stacked.p(n)[k])
            self.synced_step = self.step
        if not optimizer:
            return
        for k, t in enumerate(self.members):
            lr = lr_at(max(self.step - 1, 0), t.train_cfg)
            for group in t.optimizer.param_groups:
                group["lr"] = lr
            if self.opt.steps:
                for n in self.stacked.names:
                    t.optimizer.state[self.param_of[k][n]] = {
                        "step": torch.tensor(float(self.opt.steps), dtype=torch.float32),
                        "exp_avg": self.opt.exp_avg[n][k].detach().clone(),
                        "exp_avg_sq": self.opt.exp_avg_sq[n][k].detach().clone(),
                    }

    def _stop(self, k: int, message: str) -> None:
        t = self.members[k]
        self.alive[k] = False
        self.errors[k] = message
        write_json(t.run_dir.path / FAILED, {"step": self.step, "error": message})

    # ----- one step ---------------------------------------------------------------------------------------
    def _lrs(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        lr = [lr_at(step, t.train_cfg) if a else 0.0 for t, a in zip(self.members, self.alive, strict=True)]
        wd = [t.train_cfg.weight_decay for t in self.members]
        return torch.tensor(lr, device=self.device), torch.tensor(wd, device=self.device)

    def _grad_probe_due(self, step: int) -> bool:
        return any(p is not None and p._due(self.members[0], step) for p in self.grad_probes)

    def train_step(self, step: int) -> tuple[list[float], list[float]]:
        cfg = self.cfg
        resid: dict[str, torch.Tensor] = {}
        probe = self._grad_probe_due(step)
        if probe:

            def record(site: str, tensor: torch.Tensor) -> None:
                if tensor.requires_grad:
                    tensor.register_hook(
                        lambda g: resid.__setitem__(site, [g[m].detach().double().norm() for m in range(self.k)])
                    )

            self.stacked.resid_hook = record
        self.stacked.train()
        loss_sum = torch.zeros(self.k, device=self.device)
        alive = torch.tensor(self.alive, device=self.device)
        try:
            for micro in range(cfg.grad_accum):
                for t in self.members:  # each member's dropout masks: its solo run's at this micro-step
                    t.model.dropout_stream.at(step * cfg.grad_accum + micro)
                mark_step(self.compile_mode, self.device)
                xs, ys = zip(*(t.sampler.next_batch() for t in self.members), strict=True)
                x, y = torch.stack(xs).to(self.device), torch.stack(ys).to(self.device)
                with self.autocast:
                    # a gradient probe's tensor hooks run on the eager forward (forward() skips the compiled call)
                    losses = self.stacked.forward(x, y) if probe else self.stacked(x, y)
                (torch.where(alive, losses, 0.0).sum() / cfg.grad_accum).backward()
                loss_sum += losses.detach()
        finally:
            self.stacked.resid_hook = None
        losses = (loss_sum / cfg.grad_accum).tolist()
        for k, value in enumerate(losses):
            if self.alive[k] and not math.isfinite(value):
                self._stop(
                    k,
                    f"training loss became {value} at step {step}; nothing was recorded for that step "
                    f"and {self.members[k].kept()}. {self.members[k].remedy()}",
                )
        names = self.stacked.names
        grads = [self.stacked.p(n).grad for n in names]
        if probe:
            self._record_grad_probe(step, names, grads, resid)
        # per member, as the solo step takes it (a row-wise reduction's order may depend on the row count)
        norms = torch.stack(
            [
                torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g[m]) for g in grads]))
                for m in range(self.k)
            ]
        )
        norm_list = norms.tolist()
        for k, value in enumerate(norm_list):
            if self.alive[k] and not math.isfinite(value):
                self._stop(
                    k,
                    f"gradient norm became {value} at step {step}; nothing was recorded for that step and "
                    f"{self.members[k].kept()}. {self.members[k].remedy()}",
                )
        clip = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
        coef = torch.clamp(clip / (norms + 1e-6), max=1.0)
        keep = None if all(self.alive) else torch.tensor(self.alive, device=self.device)
        with torch.no_grad():
            for g in grads:
                shape = (-1,) + (1,) * (g.dim() - 1)
                g.mul_(coef.view(shape))
                if keep is not None:  # a stopped member's (maybe non-finite) gradient is zeroed: its weights stay
                    g.copy_(torch.where(keep.view(shape), g, 0.0))
        lr, wd = self._lrs(step)
        self.opt.step(lr, wd)
        for n in names:
            self.stacked.p(n).grad = None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return losses, norm_list

    def _record_grad_probe(self, step, names, grads, resid) -> None:
        n_layers = self.stacked.cfg.n_layers
        squares = {
            n: [g[m].detach().double().pow(2).sum().item() for m in range(self.k)]
            for n, g in zip(names, grads, strict=True)
        }
        sites = resid_grad_sites(n_layers)
        for k, t in enumerate(self.members):
            if not self.alive[k] or self.grad_probes[k] is None or not self.grad_probes[k]._due(t, step):
                continue
            record = grouped_norms(n_layers, {n: squares[n][k] for n in names})
            record["resid"] = [float(resid[s][k]) if s in resid else 0.0 for s in sites]
            t.append("probes.jsonl", {"step": step, "probe": "gradients", **record})

    def val_losses(self) -> list[float]:
        """Each member evaluated by its own solo model: the number any reader recomputes from its checkpoint
        (the stacked forward agrees to ~1e-7, not bit for bit)."""
        self.sync()
        return [t.val_loss() if self.alive[k] else math.nan for k, t in enumerate(self.members)]

    # ----- the loop -----------------------------------------------------------------------------------------
    def train(self) -> tuple[dict[Trainer, dict[str, Any]], list[tuple[Trainer, str]]]:
        cfg = self.cfg
        members = self.members
        start = members[0].step
        self.step = start
        self.synced_step = start  # the members' models hold the resumed weights
        for t in members:
            t._call("on_train_start")
        bar = tqdm(
            total=cfg.max_steps,
            initial=start,
            desc=f"ensemble of {self.k}",
            unit="step",
            disable=not self.progress,
            leave=False,
            dynamic_ncols=True,
        )
        wall_start = time.perf_counter()
        for t in members:
            t._wall_start = wall_start
        tokens_per_step = cfg.batch_size * cfg.grad_accum * members[0].model_cfg.n_ctx
        window_time, window_tokens = 0.0, 0
        records: list[dict[str, Any]] = [{} for _ in members]
        last_val = [math.nan] * self.k
        try:
            for step in range(start, cfg.max_steps + 1):
                self.step = step
                for t in members:
                    t.step = step
                if cfg.is_eval_step(step):
                    self._evaluate(step, records, last_val)
                if step == cfg.max_steps:
                    for k, t in enumerate(members):
                        if self.alive[k] and records[k]:
                            t.append("metrics.jsonl", {"step": step, **records[k]})
                    break
                if not any(self.alive):
                    break
                t0 = time.perf_counter()
                losses, norms = self.train_step(step)
                dt = time.perf_counter() - t0
                window_time += dt
                window_tokens += tokens_per_step
                for k, t in enumerate(members):
                    if self.alive[k]:
                        t.totals["train_time"] += dt
                        t.totals["train_tokens"] += tokens_per_step
                trainer_module.kill_point("step")  # the trainer's test hook (interp.io.kill_point), looked up late
                if step % cfg.log_interval == 0 or cfg.is_eval_step(step):
                    for k, t in enumerate(members):
                        if self.alive[k]:
                            records[k].update(
                                step=step,
                                lr=lr_at(step, t.train_cfg),
                                train_loss=losses[k],
                                grad_norm=norms[k],
                                tokens_per_s=window_tokens / max(window_time, 1e-9),
                            )
                            t.append("metrics.jsonl", records[k])
                        records[k] = {}
                    window_time, window_tokens = 0.0, 0
                    live = [v for v, a in zip(losses, self.alive, strict=True) if a]
                    bar.set_postfix(alive=f"{len(live)}/{self.k}", best=f"{min(live, default=math.nan):.3f}")
                bar.update(1)
                if (step + 1) % cfg.ckpt_interval == 0 and step + 1 < cfg.max_steps:
                    self.step = step + 1
                    self._save_all()
        except KeyboardInterrupt as e:
            raise TrainingInterrupted(self.step, members[0].run_dir.ckpt, exit_code(e)) from None
        finally:
            bar.close()
        return self._finish(last_val, start), [(members[k], e) for k, e in self.errors.items()]

    def _evaluate(self, step: int, records: list[dict[str, Any]], last_val: list[float]) -> None:
        vals = self.val_losses()
        for k, t in enumerate(self.members):
            if not self.alive[k]:
                continue
            if not math.isfinite(vals[k]):
                self._stop(
                    k,
                    f"validation loss became {vals[k]} at step {step}; nothing was recorded for that step "
                    f"and {t.kept()}. {t.remedy()}",
                )
                continue
            records[k]["val_loss"] = last_val[k] = vals[k]
            if vals[k] < t.best["val_loss"]:
                t.best = {"val_loss": vals[k], "step": step}
        if any(hasattr(cb, "on_eval") for t in self.members for cb in t.callbacks):
            for k, t in enumerate(self.members):
                if self.alive[k]:
                    t._call("on_eval", step, last_val[k])
        for k in range(self.k):
            if not self.alive[k]:
                records[k] = {}

    def _save_all(self) -> None:
        self.synced_step = -1
        self.sync(optimizer=True)
        for k, t in enumerate(self.members):
            if self.alive[k]:
                t.step = self.step  # the step the saved weights stand at (the next one to train)
                with _member_rng(t):
                    t.save()

    def _finish(self, last_val: list[float], start: int) -> dict[Trainer, dict[str, Any]]:
        cfg = self.cfg
        self.step = cfg.max_steps
        self.synced_step = -1
        self.sync(optimizer=True)
        done = {}
        names = [
            t.run_dir.path.name
            if t.run_dir.path.parent.name == ""
            else f"{t.run_dir.path.parent.name}/{t.run_dir.path.name}"
            for t in self.members
        ]
        bf16 = concrete_dtype(cfg.dtype, self.device.type) == "bfloat16"
        peak = peak_matmul_flops(self.device, torch.bfloat16 if bf16 else torch.float32)
        for k, t in enumerate(self.members):
            if not self.alive[k]:
                continue
            t._call("on_train_end")
            t.step = cfg.max_steps
            t.last_val = last_val[k]
            record = t._final_record(last_val[k], start)
            tokens_per_s = t.totals["train_tokens"] / max(t.totals["train_time"], 1e-9)
            flops = flops_per_token(t.model_cfg, record["n_params"])
            record.update(peak_matmul_flops=peak, mfu=flops * tokens_per_s / peak)
            record["ensemble"] = {
                "size": self.k,
                "members": names,
                "alive_at_end": sum(self.alive),
                "tokens_per_s": tokens_per_s * sum(self.alive),
                "mfu": flops * tokens_per_s * sum(self.alive) / peak,
            }
            t.final_record = record
            with _member_rng(t):
                t.save()
            final = {**record, "ckpt_sha256": getattr(t, "ckpt_sha256", None)}
            t._check_dir()
            write_json(t.run_dir.final, final)
            done[t] = final
        return done


@contextlib.contextmanager
def _member_rng(t: Trainer):
    """Save a member with its own global RNG state (what its solo run would hold; training draws none)."""
    outer = torch.get_rng_state()
    torch.set_rng_state(t._rng)
    try:
        yield
    finally:
        torch.set_rng_state(outer)

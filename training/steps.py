"""The two steps the training loop (training.loop.advance) takes, side by side: one member's own, K members' stacked.

SoloStep is one Trainer's own model and AdamW (DDP and gradient accumulation included): the bits every
solo run directory holds. StackedStep advances K same-shape members by one StackedGPT step and
StackedAdamW, and copies each member's weights and AdamW moments back into its own model and optimizer
before anything reads them (evaluations, callbacks, checkpoints), so each member's run directory is the
one its solo run would write and resumes alone or in another ensemble; its numbers agree with the solo
step's to float order (docs/DESIGN.md contract 5).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
import torch.distributed as dist

from interp.errors import one_line
from interp.model.gpt import train_mode_hooks_expected
from probes import GradientProbe
from probes.gradients import grouped_norms, resid_grad_sites
from training.compile import mark_step, maybe_compile
from training.flops import flops_per_token, peak_matmul_flops
from training.loop import Step, TrainingError
from training.optimizer import lr_at
from training.presets import concrete_dtype
from training.stacked import StackedAdamW, StackedGPT


class SoloStep(Step):
    """One Trainer's step: its model (DDP-wrapped where it runs on several ranks) and its AdamW."""

    def __init__(self, trainer):
        super().__init__([trainer])

    def train(self, step: int) -> tuple[list[float], list[float]]:
        """One optimizer step (with gradient accumulation): ([loss], [grad norm before clipping])."""
        t, cfg = self.members[0], self.cfg
        lr = lr_at(step, cfg)
        for group in t.optimizer.param_groups:
            group["lr"] = lr
        t.model.train()
        t.call("on_step_begin", step)
        loss_sum = torch.zeros((), device=self.device)
        stream = t.model.dropout_stream
        for micro in range(cfg.grad_accum):
            if stream is not None:
                stream.at(step * cfg.grad_accum + micro)
            mark_step(cfg.compile_mode if cfg.compile else "default", self.device)
            x, y = t.sampler.next_batch(t.rank, t.world_size)
            x, y = x.to(self.device), y.to(self.device)
            last = not t.ddp or micro == cfg.grad_accum - 1
            # train_mode_hooks_expected: this forward trains on purpose, so the model skips its per-forward
            # search for analysis hooks (the TrainModeWarning's), which costs ~0.25 ms a step at 12 layers
            with contextlib.nullcontext() if last else t.train_model.no_sync(), t.autocast, train_mode_hooks_expected():
                _, loss = t.train_model(x, y)
            (loss / cfg.grad_accum).backward()
            loss_sum += loss.detach()
        loss = loss_sum / cfg.grad_accum
        if t.ddp:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            self.fail(0, "training loss", loss_value)
        t.call("on_backward", step)
        clip = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(t.model.parameters(), clip).item()
        if not math.isfinite(grad_norm):  # the step would make every weight NaN
            self.fail(0, "gradient norm", grad_norm)
        try:
            t.optimizer.step()
        except RuntimeError as e:  # an lr so large that AdamW's step size overflows float32
            raise TrainingError(
                f"the optimizer step failed at step {step} (lr {lr:g}: {one_line(e)}); {t.kept()}. Lower lr"
            ) from None
        t.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return [loss_value], [grad_norm]


class StackedStep(Step):
    """K same-shape members (Trainers set up and resumed at the same step) advanced by one StackedGPT step and
    StackedAdamW; each member's weights and AdamW moments are copied back into its own model and optimizer
    (the solo format its checkpoint stores) before anything reads them."""

    stops_alone = True

    def __init__(self, members: list):
        super().__init__(members)
        cfg = self.cfg
        self.stacked = StackedGPT([t.model for t in members]).to(self.device)
        self.autocast = members[0].autocast  # bfloat16 autocast where the members' dtype says so
        self.compile_mode = cfg.compile_mode if cfg.compile else "default"
        # the stacked step compiled as the members' solo models would be (a gradient-probe step runs eager)
        maybe_compile(self.stacked, cfg.compile, cfg.compile_mode, self.device)
        self.param_of = [dict(t.model.named_parameters()) for t in members]
        names = self.stacked.names
        self.opt = StackedAdamW(
            {n: self.stacked.p(n) for n in names},
            {n: self.stacked.p(n).dim() >= 3 for n in names},
            (cfg.beta1, cfg.beta2),
        )
        self._load_optimizer_states()
        self.grad_probes = [next((cb for cb in t.callbacks if isinstance(cb, GradientProbe)), None) for t in members]
        for t in members:  # the stacked step measures gradients itself; other callbacks see the member's model
            t.callbacks = [cb for cb in t.callbacks if not isinstance(cb, GradientProbe)]
        self.synced_step = self.step  # the members' models hold the resumed weights

    def _load_optimizer_states(self) -> None:
        steps = set()
        for k, t in enumerate(self.members):
            for n in self.stacked.names:
                if state := t.optimizer.state.get(self.param_of[k][n], {}):
                    self.opt.exp_avg[n][k].copy_(state["exp_avg"])
                    self.opt.exp_avg_sq[n][k].copy_(state["exp_avg_sq"])
                steps.add(int(state["step"]) if state else 0)
        if len(steps) != 1:
            raise TrainingError(f"ensemble members' optimizers stand at different steps {sorted(steps)}")
        self.opt.steps = steps.pop()

    def sync(self, optimizer: bool = False) -> None:
        """Unstack the weights into each member's model, and with optimizer=True (the weights then copied again
        whatever step they were copied at) the AdamW moments into its optimizer (the solo format its checkpoint
        stores)."""
        if optimizer or self.synced_step != self.step:
            with torch.no_grad():
                for k, params in enumerate(self.param_of):
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

    def train(self, step: int) -> tuple[list[float], list[float]]:
        """One stacked optimizer step: (each member's loss, each member's grad norm before clipping)."""
        cfg, k = self.cfg, len(self.members)
        resid: dict[str, list[torch.Tensor]] = {}
        probe = any(p is not None and p._due(self.members[0], step) for p in self.grad_probes)
        if probe:  # a gradient probe's tensor hooks run on the eager forward (forward() skips the compiled call)

            def record(site: str, tensor: torch.Tensor) -> None:
                if tensor.requires_grad:
                    tensor.register_hook(
                        lambda g: resid.__setitem__(site, [g[m].detach().double().norm() for m in range(k)])
                    )

            self.stacked.resid_hook = record
        self.stacked.train()
        loss_sum = torch.zeros(k, device=self.device)
        alive = torch.tensor(self.alive, device=self.device)
        try:
            for micro in range(cfg.grad_accum):
                for t in self.members:  # each member's dropout masks: its solo run's at this micro-step
                    t.model.dropout_stream.at(step * cfg.grad_accum + micro)
                mark_step(self.compile_mode, self.device)
                xs, ys = zip(*(t.sampler.next_batch() for t in self.members), strict=True)
                x, y = torch.stack(xs).to(self.device), torch.stack(ys).to(self.device)
                with self.autocast:
                    losses = self.stacked.forward(x, y) if probe else self.stacked(x, y)
                (torch.where(alive, losses, 0.0).sum() / cfg.grad_accum).backward()
                loss_sum += losses.detach()
        finally:
            self.stacked.resid_hook = None
        loss_list = (loss_sum / cfg.grad_accum).tolist()
        for m, value in enumerate(loss_list):
            if self.alive[m] and not math.isfinite(value):
                self.fail(m, "training loss", value)
        grads = [self.stacked.p(n).grad for n in self.stacked.names]
        if probe:
            self._record_grad_probe(step, grads, resid)
        norms = self._clip(grads)
        lr = [lr_at(step, t.train_cfg) if a else 0.0 for t, a in zip(self.members, self.alive, strict=True)]
        wd = [t.train_cfg.weight_decay for t in self.members]
        self.opt.step(torch.tensor(lr, device=self.device), torch.tensor(wd, device=self.device))
        for n in self.stacked.names:
            self.stacked.p(n).grad = None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return loss_list, norms

    def _clip(self, grads: list[torch.Tensor]) -> list[float]:
        """Each member's gradient norm, taken as its solo step takes it (a row-wise reduction's order may depend
        on the row count), its gradients clipped, and a stopped member's (maybe non-finite) ones zeroed."""
        k = len(self.members)
        norms = torch.stack(
            [torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g[m]) for g in grads])) for m in range(k)]
        )
        norm_list = norms.tolist()
        for m, value in enumerate(norm_list):
            if self.alive[m] and not math.isfinite(value):
                self.fail(m, "gradient norm", value)
        clip = self.cfg.grad_clip if self.cfg.grad_clip > 0 else math.inf
        coef = torch.clamp(clip / (norms + 1e-6), max=1.0)
        keep = None if all(self.alive) else torch.tensor(self.alive, device=self.device)
        with torch.no_grad():
            for g in grads:
                shape = (-1,) + (1,) * (g.dim() - 1)
                g.mul_(coef.view(shape))
                if keep is not None:  # a stopped member's weights stay as they are
                    g.copy_(torch.where(keep.view(shape), g, 0.0))
        return norm_list

    def _record_grad_probe(self, step: int, grads: list[torch.Tensor], resid: dict) -> None:
        names, n_layers = self.stacked.names, self.stacked.cfg.n_layers
        squares = {
            n: [g[m].detach().double().pow(2).sum().item() for m in range(len(self.members))]
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
        return super().val_losses()

    def save(self) -> None:
        self.sync(optimizer=True)
        super().save()

    def by_member(self) -> dict[str, Any]:
        return {"by": "stacked", "size": len(self.members), "members": self.names()}

    def save_member(self, k: int) -> None:
        """Saved with the member's own global RNG state (what its solo run would hold; training draws none), and
        its record of how its steps were taken (training.steps_by), so a resume alone from here says so."""
        t, outer = self.members[k], torch.get_rng_state()
        self.record(k)
        torch.set_rng_state(t.rng)
        try:
            t.save()
        finally:
            torch.set_rng_state(outer)

    def before_finish(self) -> None:
        self.sync(optimizer=True)
        bf16 = concrete_dtype(self.cfg.dtype, self.device.type) == "bfloat16"
        self.peak = peak_matmul_flops(self.device, torch.bfloat16 if bf16 else torch.float32)

    def names(self) -> list[str]:
        """The members' run directories as final.json names them (<variant>/<seed>)."""
        paths = [u.run_dir.path for u in self.members]
        return [p.name if p.parent.name == "" else f"{p.parent.name}/{p.name}" for p in paths]

    def final_extra(self, k: int) -> dict[str, Any]:
        """The ensemble record final.json adds to its solo format, and how its steps were taken where not all in
        one stacked stretch (training.steps_by)."""
        self.record(k)
        t, alive, names = self.members[k], sum(self.alive), self.names()
        mixed = {"steps_by": t.steps_by} if len(t.steps_by) > 1 else {}
        tokens_per_s = t.totals["train_tokens"] / max(t.totals["train_time"], 1e-9)
        flops = flops_per_token(t.model_cfg, t.model.num_params())
        return {
            "ensemble": {
                "size": len(self.members),
                "members": names,
                "alive_at_end": alive,
                "tokens_per_s": tokens_per_s * alive,
                "mfu": flops * tokens_per_s * alive / self.peak,
            },
            **mixed,
        }

"""The training loop, written once for K members (a solo run is K = 1): its cadence and what it asks of a step.

advance() is the cadence: at each step it evaluates when due, takes a step, logs, checkpoints, and at the
end writes each member's final record. The step it takes stands beside it in training.steps: SoloStep, one
Trainer's own model and optimizer, and StackedStep, K same-shape members advanced as one (both subclass
Step, below). Every GPU change to a step is made there, once; the cadence does not know which it runs.

A non-finite training loss, gradient norm or validation loss is one message (not_finite). A solo run
stops on it (TrainingError); an ensemble member stops alone (failed.json in its run directory says why,
its last checkpoint is kept) while the others finish.

Members are training.trainer.Trainer objects (their setup, resume and save are the Trainer's); the loop
reads their model, optimizer, sampler, step, best, totals and callbacks. Callbacks are plain objects;
the loop calls whichever of these they define:
    on_train_start(trainer)           on_step_begin(trainer, step)     (solo step only)
    on_backward(trainer, step)        grads ready, before clipping     (solo step only)
    on_step(trainer, step, loss)      after the optimizer step
    on_eval(trainer, step, val_loss)  on_train_end(trainer)
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from interp.command.progress import progress_bar
from interp.command.signals import EXIT_INTERRUPT, exit_code, signal_name
from interp.errors import ToolkitError
from interp.files.io import kill_point, write_json
from training import steps_by
from training.optimizer import lr_at

FAILED = "failed.json"  # an ensemble member that stopped on a non-finite number: {step, error}


class TrainingError(ToolkitError):
    """Training cannot go on (a non-finite loss). A run directory it may not use raises RunDirError."""


class TrainingInterrupted(ToolkitError):
    """Ctrl-C during training: the step reached and where the run resumes from."""

    exit_code = EXIT_INTERRUPT

    def __init__(self, step: int, ckpt: Path, exit_code: int = EXIT_INTERRUPT):
        self.step = step
        self.exit_code = exit_code  # 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP (interp.command.signals)
        where = f"from its checkpoint {ckpt}" if ckpt.exists() else "from the start (no checkpoint yet)"
        what = "interrupted" if exit_code == EXIT_INTERRUPT else f"terminated ({signal_name(exit_code)})"
        super().__init__(f"{what} at step {step}; the run resumes {where}")


class MembersStopped(TrainingError):
    """Members that stopped on a non-finite number while the rest of their ensemble finished."""

    def __init__(self, failed: list[tuple[Any, str]], size: int):
        self.failed = failed  # (member, its not_finite message)
        lines = "; ".join(f"{t.run_dir.path}: {e}" for t, e in failed)
        rest = "the others finished" if len(failed) < size else "none finished"
        super().__init__(f"{len(failed)} of {size} ensemble members stopped ({lines}); {rest}")


def not_finite(member, what: str, value: float, step: int) -> str:
    """The one message for a non-finite number: nothing non-finite is ever written as a result."""
    return (
        f"{what} became {value} at step {step}; nothing was recorded for that step and "
        f"{member.kept()}. {member.remedy()}"
    )


# ----- the cadence -------------------------------------------------------------------------------------------


def advance(steps: Step, progress: bool) -> tuple[dict[Any, dict[str, Any]], list[tuple[Any, str]]]:
    """Advance every member from the step it stands at to max_steps, then write its final record.
    Returns ({member: final record}, [(member, why it stopped)]); a solo run raises TrainingError instead."""
    members, cfg = steps.members, steps.cfg
    start = members[0].step
    for t in members:
        t.call("on_train_start")
    bar = _bar(members, start, progress)
    wall_start = time.perf_counter()
    for t in members:
        t.wall_start = wall_start
    tokens_per_step = cfg.batch_size * cfg.grad_accum * members[0].model_cfg.n_ctx
    window_time, window_tokens = 0.0, 0
    records: list[dict[str, Any]] = [{} for _ in members]
    last_val = [math.nan] * len(members)
    try:
        for step in range(start, cfg.max_steps + 1):
            steps.at(step)
            if cfg.is_eval_step(step):
                _evaluate(steps, step, records, last_val, bar)
            if step == cfg.max_steps:
                for k, t in enumerate(members):
                    if steps.alive[k] and records[k]:
                        t.append("metrics.jsonl", {"step": step, **records[k]})
                break
            if not any(steps.alive):
                break
            t0 = time.perf_counter()
            losses, norms = steps.train(step)
            dt = time.perf_counter() - t0
            window_time += dt
            window_tokens += tokens_per_step
            for k, t in enumerate(members):
                if steps.alive[k]:
                    t.totals["train_time"] += dt
                    t.totals["train_tokens"] += tokens_per_step
                    t.call("on_step", step, losses[k])
            kill_point("step")  # test hook (interp.files.io.kill_point); a no-op unless RESIDUAL_KILL_AT is set
            if step % cfg.log_interval == 0 or cfg.is_eval_step(step):
                tokens_per_s = window_tokens / max(window_time, 1e-9)
                _log(steps, step, records, losses, norms, tokens_per_s)
                _show(bar, steps, losses, last_val, tokens_per_s)
                window_time, window_tokens = 0.0, 0
            bar.update(1)
            if (step + 1) % cfg.ckpt_interval == 0 and step + 1 < cfg.max_steps:
                steps.at(step + 1)  # the step the saved weights stand at (the next one to train)
                steps.save()
    except KeyboardInterrupt as e:
        raise TrainingInterrupted(steps.step, members[0].run_dir.ckpt, exit_code(e)) from None
    finally:
        bar.close()
    return _finish(steps, last_val, start), [(members[k], e) for k, e in steps.errors.items()]


def _bar(members: list, start: int, progress: bool):
    first = members[0]
    label = " ".join(str(first.meta[k]) for k in ("variant", "seed") if k in first.meta) or first.run_dir.path.name
    return progress_bar(
        total=first.train_cfg.max_steps,
        desc=label if len(members) == 1 else f"ensemble of {len(members)}",
        unit="step",
        on=progress and first.is_main,
        initial=start,
    )


def _show(bar, steps, losses: list[float], last_val: list[float], tokens_per_s: float) -> None:
    if len(losses) == 1:
        bar.set_postfix(loss=f"{losses[0]:.3f}", val=f"{last_val[0]:.3f}", tok_s=f"{tokens_per_s:.0f}")
    else:
        live = [v for v, a in zip(losses, steps.alive, strict=True) if a]
        bar.set_postfix(alive=f"{len(live)}/{len(losses)}", best=f"{min(live, default=math.nan):.3f}")


def _evaluate(steps, step: int, records: list[dict[str, Any]], last_val: list[float], bar) -> None:
    vals = steps.val_losses()
    for k, t in enumerate(steps.members):
        if not steps.alive[k]:
            continue
        if not math.isfinite(vals[k]):
            steps.fail(k, "validation loss", vals[k])
            continue
        records[k]["val_loss"] = last_val[k] = vals[k]
        if vals[k] < t.best["val_loss"]:
            t.best = {"val_loss": vals[k], "step": step}
    for k, t in enumerate(steps.members):
        if steps.alive[k]:
            t.call("on_eval", step, last_val[k])
        else:
            records[k] = {}
    if len(last_val) == 1:
        bar.set_postfix(val=f"{last_val[0]:.3f}")


def _log(steps, step: int, records, losses: list[float], norms: list[float], tokens_per_s: float) -> None:
    for k, t in enumerate(steps.members):
        if steps.alive[k]:
            records[k].update(
                step=step,
                lr=lr_at(step, t.train_cfg),
                train_loss=losses[k],
                grad_norm=norms[k],
                tokens_per_s=tokens_per_s,
            )
            t.append("metrics.jsonl", records[k])
        records[k] = {}


def _finish(steps, last_val: list[float], start: int) -> dict[Any, dict[str, Any]]:
    """Each member still training: on_train_end, its final record sealed in its final checkpoint (no field of
    final.json is reused on the word of an editable file: RunDir.verify_finished), then final.json."""
    steps.at(steps.cfg.max_steps)
    steps.before_finish()
    done = {}
    for k, t in enumerate(steps.members):
        if not steps.alive[k]:
            continue
        t.call("on_train_end")
        t.step = steps.cfg.max_steps
        t.last_val = last_val[k]  # recorded in the final checkpoint, so final.json is checked against it
        t.final_record = {**t.closing_record(last_val[k], start), **steps.final_extra(k)}
        steps.save_member(k)
        final = {**t.final_record, "ckpt_sha256": getattr(t, "ckpt_sha256", None)}
        if t.is_main:
            t.check_dir()
            write_json(t.run_dir.final, final)
        done[t] = final
    return done


# ----- what the cadence asks of a step (training.steps: the solo one and the stacked one) ----------------------


class Step:
    """What both steps share (training.steps): the members, which of them still train, the step they stand at,
    and stopping one. A step class adds train(step) -> (losses, grad norms), one per member."""

    stops_alone = False  # a solo run stops on a non-finite number; an ensemble member stops alone

    def __init__(self, members: list):
        self.members = members
        self.cfg = members[0].train_cfg
        self.device = members[0].device
        self.alive = [True] * len(members)
        self.errors: dict[int, str] = {}
        self.step = members[0].step
        self.since = self.step  # where this process took the members up (resumed or new)

    def at(self, step: int) -> None:
        self.step = step
        for t in self.members:
            t.step = step

    def fail(self, k: int, what: str, value: float) -> None:
        message = not_finite(self.members[k], what, value, self.step)
        if not self.stops_alone:
            raise TrainingError(message)
        self.alive[k] = False
        self.errors[k] = message
        write_json(self.members[k].run_dir.path / FAILED, {"step": self.step, "error": message})

    def val_losses(self) -> list[float]:
        return [t.val_loss() if a else math.nan for t, a in zip(self.members, self.alive, strict=True)]

    def save(self) -> None:
        for k in range(len(self.members)):
            if self.alive[k]:
                self.save_member(k)

    def record(self, k: int) -> None:
        """Member k's record of how its steps were taken, through the step it stands at."""
        t = self.members[k]
        t.steps_by = steps_by.extend(t.steps_by, self.by_member(), self.since, t.step)

    def by_member(self) -> dict[str, Any]:
        """How this step class takes a member's steps, as its record says (training.steps_by)."""
        return {"by": "solo"}

    def save_member(self, k: int) -> None:
        self.record(k)
        self.members[k].save()

    def before_finish(self) -> None:
        pass

    def final_extra(self, k: int) -> dict[str, Any]:
        """What final.json adds to the solo format: for a run some of whose steps were stacked, how each stretch of
        its steps was taken (training.steps_by)."""
        self.record(k)
        record = self.members[k].steps_by
        return {"steps_by": record} if record else {}

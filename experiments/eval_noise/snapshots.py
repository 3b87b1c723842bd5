"""eval_noise's weight snapshots: which steps, the callback that writes them (each sealed by content hash in
the run's checkpoints, Trainer.sealed), and reading one back only as the snapshot its run wrote."""

from __future__ import annotations

from typing import TYPE_CHECKING

from interp.errors import ToolkitError

if TYPE_CHECKING:
    from training.presets import TrainConfig
    from training.rundir import RunDir


def snapshot_steps(train_cfg: TrainConfig, count: int) -> list[int]:
    """`count` evenly spaced evaluation steps after step 0 (the trainer's, eval_from included), always the last."""
    evals = train_cfg.eval_steps()  # a lazy sequence: max_steps may be 10**12
    skip = 1 if evals[0] == 0 else 0
    n = len(evals) - skip
    if count >= n:
        return list(evals)[skip:]
    picks = {evals[skip + int(i * (n - 1) / (count - 1) + 0.5)] for i in range(count)} if count > 1 else {evals[-1]}
    return sorted(picks)


class SnapshotCallback:
    """Keep a copy of the model weights at the given evaluation steps (interp checkpoint, written atomically)."""

    def __init__(self, steps: list[int]):
        self.steps = set(steps)

    def on_eval(self, trainer, step: int, val_loss: float) -> None:
        if step in self.steps and trainer.is_main:
            from interp.files.checkpoint import save_checkpoint

            # What the snapshot is of, sealed with it: read back only for this run at this step.
            record, path = trainer.config_record, trainer.run_dir.snapshot(step)
            # Its content hash goes into every later checkpoint (Trainer.sealed): an edit is never evaluated.
            trainer.sealed[str(path.relative_to(trainer.run_dir.path))] = save_checkpoint(
                path,
                trainer.model,
                step=step,
                val_loss=val_loss,
                train_config=record["train"],
                model_init=record["model_init"],
                data=record["data"],
            )


def load_snapshot(run: RunDir, step: int, own: dict, sealed: dict):
    """The run's snapshot at step as a model, refused unless it says it is that: the step, and the model,
    training config, initialisation and data of the run's own verified checkpoint (own: snapshot_identity of
    it; a snapshot copied from another step or another run directory is named, never evaluated), and unless
    its content hash is the one the run sealed when it wrote it (sealed: the checkpoint's sealed_files)."""
    from interp.files.checkpoint import load_checkpoint
    from interp.model.gpt import ResidualGPT

    path = run.snapshot(step)
    snap = load_checkpoint(path)
    says = {"step": snap.state.get("step"), **snapshot_identity(snap)}
    if wrong := [k for k, v in {"step": step, **own}.items() if says[k] != v]:
        raise ToolkitError(
            f"{path} is not this run's snapshot at step {step} (its {', '.join(wrong)} differ from "
            f"{run.ckpt}'s); delete that run directory or choose another --out"
        )
    name = str(path.relative_to(run.path))
    if snap.content_sha256 != sealed.get(name):
        why = (
            f"its content hash is not the one {run.ckpt} sealed"
            if name in sealed
            else f"{run.ckpt} seals no snapshot there (trained before snapshots were sealed)"
        )
        raise ToolkitError(
            f"{path} is not the snapshot this run wrote at step {step}: {why}; delete that run directory or "
            "choose another --out"
        )
    return ResidualGPT.from_checkpoint(snap)


def snapshot_identity(ckpt) -> dict:
    """What a snapshot must share with its run's checkpoint: model, training config, initialisation, data."""
    state = ckpt.state
    return {
        "model": ckpt.config.to_dict(),
        "train_config": state.get("train_config"),
        "model_init": state.get("model_init"),
        "data": (state.get("data") or {}).get("sha256"),
    }

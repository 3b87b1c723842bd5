"""Runs trained as groups: EnsembleTrainer (K same-shape runs as one) and train_groups (group, then run).

An ensemble's members are solo Trainers that never run alone: each builds its model (same seed, same
initialisation, same model_init), its optimizer, sampler and validation batches, resumes from its own
checkpoint and writes its own config.json, metrics.jsonl, probes.jsonl, ckpt.pt and final.json in exactly
the solo format; the one loop (training.loop) advances them by one stacked step. A member whose loss or
gradient goes non-finite stops alone (failed.json in its run directory says why; its last checkpoint is
kept) while the others finish; run() then raises MembersStopped naming it.

train_groups is the one way from a list of runs to trained run directories, for `python -m training`'s
product, the experiments' local launcher and a cluster job alike: training.grouping decides which runs
train together and whether through the stacked step (group, trains_stacked).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from interp.command.progress import progress_bar
from interp.errors import ConfigError, one_line
from training.grouping import PER_MEMBER_TRAIN, check_ensemble_fits, group, group_key, trains_stacked, why_alone
from training.loop import MembersStopped, TrainingError
from training.trainer import Trainer, train_runs


class EnsembleTrainer:
    """Train member Trainers (built but not run) as one. run() returns their final records in order."""

    def __init__(self, members: Sequence[Trainer], progress: bool = True):
        self.members = list(members)
        if not self.members:
            raise ConfigError("an ensemble needs at least one member")
        for t in self.members:
            if why := why_alone(t):
                raise ConfigError(f"{t.run_dir.path} cannot train in an ensemble: {why}")
        if len({group_key(t) for t in self.members}) != 1:
            raise ConfigError(
                "ensemble members must share the model shape, the mixer and every training field but "
                + ", ".join(PER_MEMBER_TRAIN)
            )
        if len({t.run_dir.path.resolve() for t in self.members}) != len(self.members):
            raise ConfigError("two ensemble members share a run directory")
        self.progress = progress

    def run(self) -> list[dict[str, Any]]:
        """Check every member, lock them all and train those unfinished (training.trainer.train_runs)."""
        check_ensemble_fits(self.members[0], len(self.members))
        return train_runs(self.members, stacked=True, progress=self.progress)


def run_name(t: Trainer) -> str:
    """How an error names a run: its variant and seed where its labels say them, and its directory."""
    meta = t.meta
    if "variant" in meta and "seed" in meta:
        return f"{meta['variant']}, seed {meta['seed']} ({t.run_dir.path})"
    return str(t.run_dir.path)


def train_groups(
    trainers: Sequence[Trainer], size: int, progress: bool = True, runs_bar: bool = False
) -> list[dict[str, Any]]:
    """Train every run (finished ones only checked): same-shape runs as ensembles of up to `size` members where
    training.grouping says so, the others alone, in order; returns their final records in order. A run that
    stops on a non-finite number is reported once every group has trained: one TrainingError naming each
    (run_name: why). runs_bar: a progress bar of the runs (the launcher's), beside each run's own."""
    finals: dict[int, dict[str, Any]] = {}
    failed: list[tuple[Trainer, str]] = []
    groups = group(trainers, size)
    bar = progress_bar(total=len(trainers), desc="runs", unit="run", on=runs_bar and bool(trainers), leave=True)
    for members in groups:
        stacked = trains_stacked(members, size)
        head = members[0]
        first = f"{head.meta.get('variant', head.run_dir.path.name)} seed {head.train_cfg.seed}"
        bar.set_postfix_str(f"ensemble of {len(members)}: {first} ..." if stacked else first)
        try:
            results = EnsembleTrainer(members, progress).run() if stacked else [members[0].run()]
        except MembersStopped as e:
            failed += e.failed
            results = [m.run_dir.read_final() if m.run_dir.finished else None for m in members]
        except TrainingError as e:  # a solo run's
            failed.append((members[0], one_line(e)))
            results = [None]
        finals.update({id(m): r for m, r in zip(members, results, strict=True) if r is not None})
        bar.update(len(members))
    bar.close()
    if failed:
        raise TrainingError("; ".join(f"{run_name(t)}: {why}" for t, why in failed))
    return [finals[id(t)] for t in trainers]

"""Which runs train together and how many: the ensemble key, the CPU cache rule, the memory check.

Runs group when they share every shape field, the mixer, the data and every TrainConfig field but those
in PER_MEMBER_TRAIN; a run whose mixer, dtype, callbacks or device rule it out trains alone (why_alone).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

import torch

from interp.errors import ConfigError
from probes import GradientProbe
from training.budget import device_memory, estimate_bytes, gib
from training.presets import TrainConfig
from training.stacked import shape_key, why_not_stackable
from training.trainer import Trainer

PER_MEMBER_TRAIN = ("seed", "lr", "min_lr", "weight_decay")


def train_key(cfg: TrainConfig) -> tuple:
    return tuple((f.name, getattr(cfg, f.name)) for f in fields(cfg) if f.name not in PER_MEMBER_TRAIN)


def why_alone(trainer: Trainer) -> str | None:
    """None when this run can be an ensemble member, else why it trains alone."""
    why = why_not_stackable(trainer.model_cfg)
    if why:
        return why
    cfg = trainer.train_cfg
    if cfg.compile:
        return "compile=true"
    if trainer.world_size > 1:
        return "DDP"
    if cfg.dtype != "float32":
        return f"dtype {cfg.dtype}"
    if cfg.val_mode != "fixed":
        return f"val_mode {cfg.val_mode} (each member would draw its own validation batches)"
    for cb in trainer.callbacks:
        if isinstance(cb, GradientProbe):
            continue
        extra = [e for e in ("on_step_begin", "on_backward", "on_step") if hasattr(cb, e)]
        if extra:
            return f"callback {type(cb).__name__} needs {', '.join(extra)}"
    return None


def group_key(trainer: Trainer) -> tuple:
    data = json.dumps(trainer.config_record.get("data"), sort_keys=True, default=str)  # the same text, vocabulary
    return shape_key(trainer.model_cfg), train_key(trainer.train_cfg), data


CACHE_SHARE = 4  # a CPU ensemble's largest activation stays within 1/4 of the last-level cache (see size_for)
MIN_CPU_ENSEMBLE = 4  # fewer members than this did not beat solo steps on a CPU
DEFAULT_CACHE = 32 * 2**20


def last_level_cache() -> int:
    """Bytes of the CPU's largest cache (sysfs), or DEFAULT_CACHE where it cannot be read."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes, default=DEFAULT_CACHE)


def size_for(trainer: Trainer, cap: int) -> int:
    """How many members of this shape one ensemble takes: `cap` on an accelerator; on a CPU, as many as keep
    the largest activation (batch x n_ctx x d_mlp floats per member) within 1/CACHE_SHARE of the last-level
    cache, and none (1: solo) below MIN_CPU_ENSEMBLE. Measured on 2 cores with a 32 MiB cache
    (docs/results/ensembles.md): at phase-cell (1 MiB per member) 8 members ran 1.40x the member-steps of
    solo steps, 16 only 1.31x; at cpu-quick (4 MiB) no size beat solo steps (0.94x at 2, 0.86x at 8): a
    stacked tensor that leaves the cache costs more memory traffic than the per-operation overhead saved."""
    if trainer.train_cfg.device.startswith("cuda") or (
        trainer.train_cfg.device == "auto" and torch.cuda.is_available()
    ):
        return cap
    cfg = trainer.model_cfg
    activation = 4 * trainer.train_cfg.batch_size * cfg.n_ctx * max(cfg.d_mlp, cfg.d_model)
    fits = min(cap, last_level_cache() // (CACHE_SHARE * activation))
    return fits if fits >= min(MIN_CPU_ENSEMBLE, cap) else 1


def group(trainers: Sequence[Trainer], size: int) -> list[list[Trainer]]:
    """Runs in the order given, as ensembles of at most `size` same-key members (size 1: all solo), fewer
    where size_for says a shape runs faster so."""
    if size < 1:
        raise ConfigError(f"ensemble size must be >= 1, got {size}")
    groups: dict[tuple, list[list[Trainer]]] = {}
    order: list[list[Trainer]] = []
    for t in trainers:
        if size == 1 or why_alone(t) or size_for(t, size) == 1:
            order.append([t])
            continue
        chunks = groups.setdefault(group_key(t), [])
        if not chunks or len(chunks[-1]) >= size_for(t, size):
            chunks.append([])
            order.append(chunks[-1])
        chunks[-1].append(t)
    return order


def ensemble_bytes(trainer: Trainer, k: int) -> int:
    """Memory of k members: stacked weights, grads and moments, each member's solo copy, activations."""
    parts = estimate_bytes(trainer.model_cfg, trainer.train_cfg)
    return k * (parts["parameters"] + parts["parameters"] * 3 // 4 + parts["activations"]) + parts["validation"]


def check_ensemble_fits(trainer: Trainer, k: int) -> None:
    total, what = device_memory(trainer.train_cfg.device)
    if total is None or ensemble_bytes(trainer, k) <= total:
        return
    fits = 0
    while fits < k and ensemble_bytes(trainer, fits + 1) <= total:
        fits += 1
    need = gib(ensemble_bytes(trainer, k))
    raise ConfigError(
        f"an ensemble of {k} members needs about {need} but the machine has {gib(total)} of {what}; "
        f"the largest ensemble that fits is {fits} (--ensemble-size {max(fits, 1)})"
    )


def trains_stacked(trainers: Sequence[Trainer], size: int) -> bool:
    """Whether a group from group() trains through the stacked step. A stackable run trains there even alone
    (K=1): a member's numbers do not depend on the other members, so a run retrained on its own after its
    ensemble finished ends bitwise equal to the one it replaces. size 1 keeps the solo Trainer."""
    return size > 1 and not why_alone(trainers[0]) and size_for(trainers[0], size) > 1

"""Which runs train together and how many: the ensemble key, the sizing rule per device, the memory check.

Runs group when they share every shape field, the mixer, the data and every TrainConfig field but those
in PER_MEMBER_TRAIN (dropout, dtype and compile included: members draw their own dropout masks, run under
the same autocast and the same compiled step); a run whose mixer, DDP, validation mode or callbacks rule it
out trains alone (why_alone). How many members one ensemble takes is sizing(): a GPU's free memory, a CPU's
last-level cache; group() prints each shape's size and the reason once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

import torch

from interp.config.memory import device_here
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
    if why := why_not_stackable(trainer.model_cfg):
        return why
    cfg = trainer.train_cfg
    if trainer.world_size > 1:
        return "DDP"
    if cfg.val_mode != "fixed":
        return f"val_mode {cfg.val_mode} (each member would draw its own validation batches)"
    for cb in trainer.callbacks:
        if isinstance(cb, GradientProbe):
            continue
        if extra := [e for e in ("on_step_begin", "on_backward", "on_step") if hasattr(cb, e)]:
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


def on_cuda(trainer: Trainer) -> bool:
    device = trainer.train_cfg.device
    return device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())


GPU_SHARE = 0.8  # of a GPU's free memory an ensemble may plan for (the allocator's cache and fragmentation)


def member_bytes(trainer: Trainer) -> int:
    """One member's memory in an ensemble (training.budget's estimate: stacked weights, grads and moments, its
    solo copy, activations), with the explicit attention a dropout step takes: scores, pattern, its dropped
    copy and the mask, per layer and token."""
    cfg, parts = trainer.model_cfg, estimate_bytes(trainer.model_cfg, trainer.train_cfg)
    tokens = trainer.train_cfg.batch_size * cfg.n_ctx
    extra = tokens * cfg.n_layers * cfg.n_heads * cfg.n_ctx * (4 + 4 + 4 + 1) if cfg.dropout > 0 else 0
    return parts["parameters"] + parts["parameters"] * 3 // 4 + parts["activations"] + extra


def gpu_free_memory(trainer: Trainer) -> int:
    # device_here: --set device=cuda on a machine without one is the one-line ConfigError training gives, not
    # torch's "Torch not compiled with CUDA enabled" from mem_get_info (sizing runs before the trainer checks)
    device = device_here(trainer.train_cfg.device if trainer.train_cfg.device != "auto" else "cuda")
    return int(torch.cuda.mem_get_info(device)[0])


def sizing(trainer: Trainer, cap: int) -> tuple[int, str]:
    """How many members of this shape one ensemble takes, and why.

    On CUDA: as many as fit in GPU_SHARE of the GPU's free memory (member_bytes each), at most `cap`
    (--ensemble-size). On a GPU the per-kernel launch and Python overhead a small model's step pays is paid
    once for all members, and the stacked matmuls fill the chip better the more members they carry, so
    memory is the limit (on one H200, 16 phase-cell members trained 4.3x faster than one at a time).
    On a CPU: as many as keep the largest activation (batch x n_ctx x d_mlp floats per member) within
    1/CACHE_SHARE of the last-level cache, and none (1: solo) below MIN_CPU_ENSEMBLE. Measured on 2 cores
    with a 32 MiB cache (docs/results/ensembles.md): at phase-cell (1 MiB per member) 8 members ran 1.40x
    the member-steps of solo steps, 16 only 1.31x; at cpu-quick (4 MiB) no size beat solo steps (0.94x at 2,
    0.86x at 8): a stacked tensor that leaves the cache costs more memory traffic than the overhead saved."""
    if on_cuda(trainer):
        each = member_bytes(trainer)
        free = gpu_free_memory(trainer)
        fits = int(GPU_SHARE * free) // max(each, 1)
        if fits < 1:  # each trains alone, and even that may not fit: said, not hidden behind "1 fit"
            return 1, (
                f"GPU: {gib(free)} free, about {gib(each)} a member: none fits in {GPU_SHARE:.0%} of it; each "
                "trains alone, and may run out of GPU memory"
            )
        return min(cap, fits), (
            f"GPU: {gib(free)} free, about {gib(each)} a member: {fits} fit in {GPU_SHARE:.0%} of it"
            + (f", --ensemble-size caps at {cap}" if cap < fits else "")
        )
    cfg = trainer.model_cfg
    activation = 4 * trainer.train_cfg.batch_size * cfg.n_ctx * max(cfg.d_mlp, cfg.d_model)
    cache = last_level_cache()
    fits = min(cap, cache // (CACHE_SHARE * activation))
    if fits >= min(MIN_CPU_ENSEMBLE, cap):
        return fits, (
            f"CPU: a member's largest activation is {activation / 2**20:.1f} MiB; {fits} keep it within "
            f"1/{CACHE_SHARE} of the {cache // 2**20} MiB last-level cache (at most --ensemble-size {cap})"
        )
    return 1, (
        f"CPU: a member's largest activation is {activation / 2**20:.1f} MiB; fewer than {MIN_CPU_ENSEMBLE} fit "
        f"within 1/{CACHE_SHARE} of the {cache // 2**20} MiB last-level cache, where stacking was measured "
        "slower than solo steps: each trains alone"
    )


def size_for(trainer: Trainer, cap: int) -> int:
    """sizing()'s number of members (1: solo)."""
    return sizing(trainer, cap)[0]


class TrainGroup(list):
    """Runs that train together, and whether through the stacked step: decided once, when group() read the device
    (a second reading of a GPU's free memory can come out lower and must not change a group already made)."""

    def __init__(self, members=(), stacked: bool = False):
        super().__init__(members)
        self.stacked = stacked


def group(trainers: Sequence[Trainer], size: int, report: bool = True) -> list[TrainGroup]:
    """Runs in the order given, as ensembles of at most `size` same-key members (size 1: all solo), fewer
    where sizing() says a shape fits or runs faster so; with report, one stdout line per shape of several runs
    (stdout: the console's account of the run; stderr stays for errors, one line each)
    says how many members its ensembles take and why."""
    if size < 1:
        raise ConfigError(f"ensemble size must be >= 1, got {size}")
    groups: dict[tuple, list[TrainGroup]] = {}
    sizes: dict[tuple, int] = {}
    order: list[TrainGroup] = []
    for t in trainers:
        key = None if size == 1 or why_alone(t) else group_key(t)
        if key is not None and key not in sizes:
            sizes[key], why = sizing(t, size)
            if report and sum(1 for u in trainers if not why_alone(u) and group_key(u) == key) > 1:
                shape = f"{t.model_cfg.n_layers} layers, d_model {t.model_cfg.d_model}, n_ctx {t.model_cfg.n_ctx}"
                print(f"ensembles of {shape}: up to {sizes[key]} members ({why})")
        if key is None or sizes[key] == 1:  # alone
            order.append(TrainGroup([t]))
            continue
        chunks = groups.setdefault(key, [])
        if not chunks or len(chunks[-1]) >= sizes[key]:
            chunks.append(TrainGroup(stacked=True))
            order.append(chunks[-1])
        chunks[-1].append(t)
    return order


def ensemble_bytes(trainer: Trainer, k: int) -> int:
    """Memory of k members (member_bytes each) and the validation batches they share."""
    return k * member_bytes(trainer) + estimate_bytes(trainer.model_cfg, trainer.train_cfg)["validation"]


def check_ensemble_fits(trainer: Trainer, k: int) -> None:
    total, what = device_memory(trainer.train_cfg.device)
    if total is None or ensemble_bytes(trainer, k) <= total:
        return
    fits = next((n for n in range(k) if ensemble_bytes(trainer, n + 1) > total), k)
    need = gib(ensemble_bytes(trainer, k))
    raise ConfigError(
        f"an ensemble of {k} members needs about {need} but the machine has {gib(total)} of {what}; "
        f"the largest ensemble that fits is {fits} (--ensemble-size {max(fits, 1)})"
    )


def trains_stacked(trainers: Sequence[Trainer], size: int) -> bool:
    """Whether a group from group() trains through the stacked step. A stackable run trains there even alone
    (K=1): a member's numbers do not depend on the other members, so a run retrained on its own after its
    ensemble finished ends bitwise equal to the one it replaces. size 1 keeps the solo Trainer. A TrainGroup keeps the
    decision group() made; other runs (a cluster job's one run) read the device now."""
    if isinstance(trainers, TrainGroup):
        return trainers.stacked
    return size > 1 and not why_alone(trainers[0]) and size_for(trainers[0], size) > 1

"""Dropout whose masks come from a run's own stream: a pure function of (seed, micro-step, site).

torch's nn.Dropout draws from the process's global generator, in the order the forward calls it, so
a mask depends on everything else that drew before it. A DropoutStream draws each mask from a
generator seeded by (run seed, rank, micro-step counter, site) instead, which gives:

- an ensemble member (training.stacked) the very masks its solo run draws: the same seed, counter,
  site and shape, whatever the other members are;
- a resume that is bitwise without any generator state in the checkpoint: the masks of step s are
  those of step s whenever it runs;
- the same masks from one seed on every device of one type (each device type's own generator).

The Trainer sets a stream on the model it trains (ResidualGPT.set_dropout_stream) and moves it to
each micro-step (DropoutStream.at); a model with no stream (trained by hand, in a notebook) draws
from torch's global generator as nn.Dropout does. Sites are numbered once per model
(ResidualGPT numbers its StreamDropout modules in module order; a module used twice in one forward,
the block's resid_dropout, takes a slot per call).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Bool
from torch import Tensor, nn

_M64 = 2**64 - 1


def _splitmix64(z: int) -> int:
    """splitmix64's finaliser (Steele, Lea, Flood 2014): a bijection of 64-bit words with full avalanche."""
    z = (z + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def site_seed(seed: int, rank: int, counter: int, site: int) -> int:
    """The generator seed of one mask: every argument mixed in turn, so neighbouring keys share nothing."""
    z = _splitmix64(seed & _M64)
    for part in (rank, counter, site):
        z = _splitmix64(z ^ (part & _M64))
    # manual_seed takes 63 bits; a CPU generator (mt19937) keeps only the low 32 of them, a CUDA one all 64
    return z & (2**63 - 1)


class DropoutStream:
    """A run's dropout masks: keep(site, shape, p) is the same tensor for the same (seed, rank, counter, site)."""

    def __init__(self, seed: int, rank: int = 0):
        self.seed, self.rank = int(seed), int(rank)
        self.counter = 0
        self._generators: dict[str, torch.Generator] = {}

    def at(self, counter: int) -> DropoutStream:
        """Move to a micro-step: counter = step * grad_accum + micro (the Trainer's rule)."""
        self.counter = int(counter)
        return self

    @torch.compiler.disable  # a compiled forward calls out here (a graph break per site): generators stay eager
    def keep(self, site: int, shape: tuple[int, ...], p: float, device: torch.device) -> Bool[Tensor, "..."]:
        """Which elements survive (True with probability 1 - p)."""
        key = str(torch.device(device))
        gen = self._generators.get(key)
        if gen is None:
            gen = self._generators[key] = torch.Generator(device=device)
        gen.manual_seed(site_seed(self.seed, self.rank, self.counter, site))
        return torch.rand(tuple(shape), generator=gen, device=device) >= p


def apply_keep(x: Tensor, keep: Tensor, p: float) -> Tensor:
    """x with the dropped elements zeroed and the kept ones scaled by 1 / (1 - p): one rule for the solo
    forward and the stacked one (training.stacked), so both compute the same bits per element."""
    return x * keep.to(x.dtype) * (1.0 / (1.0 - p))


class _Slot:
    """What every StreamDropout of one model reads its stream from (one object, shared, not a module)."""

    def __init__(self) -> None:
        self.stream: DropoutStream | None = None


class StreamDropout(nn.Dropout):
    """nn.Dropout drawing from the model's DropoutStream when one is set, else from torch's global generator.

    `site` is set by the model that owns it; forward(x, slot) takes mask site + slot (a module that runs
    more than once in a forward passes a different slot each time and reserves `slots` sites)."""

    def __init__(self, p: float = 0.5, slots: int = 1):
        super().__init__(p)
        self.site = 0
        self.slots = slots
        self.holder: _Slot | None = None

    def stream(self) -> DropoutStream | None:
        return None if self.holder is None else self.holder.stream

    def forward(self, x: Tensor, slot: int = 0) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        stream = self.stream()
        if stream is None:
            return F.dropout(x, self.p, True, self.inplace)
        return apply_keep(x, stream.keep(self.site + slot, x.shape, self.p, x.device), self.p)


def number_sites(model: nn.Module) -> tuple[_Slot, int]:
    """Give every StreamDropout in `model` (module order) its first site and one shared slot; returns the slot
    and the number of sites used."""
    holder = _Slot()
    site = 0
    for module in model.modules():
        if isinstance(module, StreamDropout):
            module.site, module.holder = site, holder
            site += module.slots
    return holder, site


__all__ = ["DropoutStream", "StreamDropout", "apply_keep", "number_sites", "site_seed"]

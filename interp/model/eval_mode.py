"""Reading a model in eval mode: the mode set for the read and restored after (with frozen weights thawed for a
gradient read: unfrozen_in_eval), and passes over batches under hooks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from torch import Tensor, nn


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """The model in eval mode (dropout off) inside the block; its training flag as it was after, error or not."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@contextlib.contextmanager
def unfrozen_in_eval(model: nn.Module, params: Iterable[nn.Parameter]) -> Iterator[nn.Module]:
    """eval_mode, with every one of `params` requiring grad inside (a frozen weight still has a gradient to
    measure); those that were frozen are frozen again after, error or not."""
    frozen = [p for p in params if not p.requires_grad]
    with eval_mode(model):
        try:
            for p in frozen:
                p.requires_grad_(True)
            yield model
        finally:
            for p in frozen:
                p.requires_grad_(False)


def hooked_passes(model, batches: Iterable[tuple[Tensor, Tensor]], fwd_hooks: list) -> tuple[int, int]:
    """Forward every batch's inputs in eval mode under `fwd_hooks` (TransformerLens's (name or filter, hook) pairs),
    which do the reading; (sequences, tokens) passed."""
    sequences = tokens = 0
    with eval_mode(model), model.hooks(fwd_hooks=fwd_hooks):
        for x, _ in batches:
            model(x.to(next(model.parameters()).device))
            sequences, tokens = sequences + x.shape[0], tokens + x.numel()
    return sequences, tokens

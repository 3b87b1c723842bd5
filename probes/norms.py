"""Hidden-norm growth along the residual stream.

What this measures: the mean per-token L2 norm of the residual stream itself
(blocks.0.hook_resid_pre = the embedding output, then every hook_resid_mid and
hook_resid_post), in eval mode (dropout off) on the given batches, and the
growth ratio final resid_post / embedding. The paper's released code measured
"hidden-norm growth" in training mode with dropout on in one version and on
Linear outputs in another; neither is what is measured here.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from interp.model.api import as_batch_pairs, check_materialised
from interp.model.eval_mode import hooked_passes
from interp.reading.stream_layout import resid_sites


@torch.no_grad()
def hidden_norms(model, batches: Iterable[tuple[Tensor, Tensor]]) -> dict:
    """{"sites": names, "norms": mean per-token L2 norm at each, "growth": final / embedding}."""
    batches = as_batch_pairs(batches)
    check_materialised(model, "model")
    sites = resid_sites(model.cfg.n_layers)  # the residual stream's sites
    sums = dict.fromkeys(sites, 0.0)

    def record(resid, hook):
        sums[hook.name] += resid.detach().double().norm(dim=-1).sum().item()

    _, count = hooked_passes(model, batches, [(lambda name: name in sums, record)])
    norms = [sums[s] / count for s in sites]
    return {"sites": sites, "norms": norms, "growth": norms[-1] / norms[0]}

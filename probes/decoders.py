"""Identity decoders fitted once on a clean model and applied to the activations an intervention changed.

fit_decoders fits measure_identity()'s decoders at a few sites (no control, no scoring); Decoders scores
any activations of those sites' shape, so a drop under an intervention reads "no longer readable by the
clean model's readout".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from probes.identity import (
    MAX_ITER,
    N_TRAIN_WINDOWS,
    TRAIN_SEED,
    WEIGHT_DECAYS,
    IdentityProbeError,
    ProbePlan,
    eval_on_one_thread,
    fit_site_decoders,
    identity_sites,
    probe_model,
    probe_targets,
    probe_windows,
)


@dataclass(frozen=True)
class Decoders:
    """Identity decoders fitted once on a clean model, to score activations an intervention changed.

    decoders[site] = (mean, std, W [offset, d, class], b [offset, class]): the standardisation and the
    decoder measure_identity() fits, at `sites` for `offsets`. per_sequence_ce reads any activations of that site's
    shape, so a drop in decodability under an intervention is "no longer readable by the clean model's
    readout" - what the layers downstream, whose weights did not change either, face.
    """

    sites: tuple[str, ...]
    offsets: tuple[int, ...]
    decoders: dict[str, tuple[Tensor, Tensor, Tensor, Tensor]]

    def per_sequence_ce(
        self, site: str, acts: Float[Tensor, "batch pos d"], x: Int[Tensor, "batch pos"]
    ) -> Float[Tensor, "batch offset"]:
        """Each sequence's mean decoder cross-entropy per offset (positions where t + k exists)."""
        if site not in self.decoders:
            raise IdentityProbeError(f"site: no decoder was fitted at {site!r}; fitted at {', '.join(self.sites)}")
        if acts.shape[:-1] != x.shape:
            raise IdentityProbeError(
                f"acts, x: acts {tuple(acts.shape)} are not one vector per token of x {tuple(x.shape)}"
            )
        mean, std, w, b = self.decoders[site]
        if acts.shape[-1] != mean.shape[-1]:
            raise IdentityProbeError(
                f"acts: {acts.shape[-1]} features per token, but the decoder at {site} was fitted on {mean.shape[-1]}"
            )
        z = (acts.detach().float().cpu().reshape(-1, acts.shape[-1]) - mean) / std
        y = probe_targets(x.cpu(), self.offsets).reshape(-1, len(self.offsets))
        out = torch.zeros(x.shape[0], len(self.offsets))
        for j in range(len(self.offsets)):
            ce = F.cross_entropy(z @ w[j] + b[j], y[:, j], ignore_index=-100, reduction="none").view(x.shape)
            valid = (y[:, j] >= 0).view(x.shape).float()
            out[:, j] = (ce * valid).sum(1) / valid.sum(1).clamp_min(1)
        return out


def fit_decoders(
    model: Any,
    train_tokens: np.ndarray,
    sites: Sequence[str],
    *,
    offsets: Sequence[int] = (0, -1),
    n_train_windows: int = N_TRAIN_WINDOWS,
    weight_decays: Sequence[float] = WEIGHT_DECAYS,
    max_iter: int = MAX_ITER,
    seed: int = TRAIN_SEED,
) -> Decoders:
    """measure_identity()'s decoders at `sites` only (no control, no scoring): fitted once, applied many times."""
    model = probe_model(model)
    every = identity_sites(model.cfg.n_layers)
    unknown = [s for s in sites if s not in every] if not isinstance(sites, str) else [sites]
    if unknown or not sites:
        raise IdentityProbeError(
            f"sites: {unknown or list(sites)} are not residual sites of this model (a list of them); choose from "
            f"{', '.join(every)}"
        )
    windows, n_held = probe_windows(np.asarray(train_tokens), model.cfg.n_ctx, n_train_windows, seed)
    probe = ProbePlan(list(sites), list(offsets), model.cfg.d_vocab, control=False)
    with eval_on_one_thread(model):  # as measure_identity(): small matmuls on a shared CPU
        fitted, _, _ = fit_site_decoders(model, probe, windows, n_held, weight_decays, max_iter, None)
    return Decoders(tuple(sites), tuple(offsets), {site: fitted[site][:4] for site in sites})

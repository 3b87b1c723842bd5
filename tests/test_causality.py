"""Causality on every path: changing the token at t leaves every logit before t bit-for-bit unchanged.

The matrix is residual x mixer x self_bias, on the fused (SDPA) path, the explicit softmax path and the
installed TransformerLens major's export (HookedTransformer on 3.x, TransformerBridge on 4.x). Weights are
seeded with a wide init so that information does flow between positions: a change at position 0 must reach
a later position in every configuration that mixes positions, and none in those that do not
(self_bias=+inf, position_blind).
"""

from __future__ import annotations

import math

import pytest
import torch
from majors import TL4, export

from interp import ModelConfig, ResidualGPT

N_CTX, VOCAB = 12, 13
RESIDUALS = ("full", "attn_only", "ffn_only", "none")
ROUTINGS = {  # id -> (mixer, self_bias)
    "bias0": ("attention", 0.0),
    "bias4": ("attention", 4.0),
    "bias+inf": ("attention", math.inf),
    "bias-inf": ("attention", -math.inf),
    "uniform": ("uniform", 0.0),
    "position_blind": ("position_blind", 0.0),
}
PATHS = ("fused", "explicit", "tl")
CASES = [
    pytest.param(residual, routing, path, id=f"{residual}-{routing}-{path}")
    for residual in RESIDUALS
    for routing in ROUTINGS
    for path in PATHS
    # position_blind: no pattern (no explicit path); the 3.x export refuses it, the 4.x bridge runs it
    if not (routing == "position_blind" and (path == "explicit" or (path == "tl" and not TL4)))
]


def forward_fn(residual: str, routing: str, path: str):
    mixer, self_bias = ROUTINGS[routing]
    torch.manual_seed(3)
    cfg = ModelConfig(
        n_layers=2,
        d_model=32,
        n_heads=4,
        n_ctx=N_CTX,
        d_vocab=VOCAB,
        residual=residual,
        mixer=mixer,
        self_bias=self_bias,
        init_std=0.2,
    )
    model = ResidualGPT(cfg).eval()
    if path == "explicit":
        model.set_explicit_attention(True)
    if path == "tl":
        tl = export(model).eval()
        return lambda tokens: tl(tokens)
    return lambda tokens: model(tokens)


@pytest.mark.parametrize("residual,routing,path", CASES)
@torch.no_grad()
def test_a_change_at_t_leaves_every_earlier_position_exactly_unchanged(residual, routing, path):
    forward = forward_fn(residual, routing, path)
    tokens = torch.randint(0, VOCAB, (2, N_CTX), generator=torch.Generator().manual_seed(0))
    base = forward(tokens)
    for t in (0, 1, 6, N_CTX - 1):
        changed = tokens.clone()
        changed[:, t] = (changed[:, t] + 5) % VOCAB
        out = forward(changed)
        assert torch.equal(out[:, :t], base[:, :t]), f"a change at {t} moved an earlier position"
        if t == 0:  # not vacuous: the change reaches a later position exactly when the routing mixes positions
            mixes = routing not in ("bias+inf", "position_blind")
            assert torch.equal(out[:, 1:], base[:, 1:]) != mixes

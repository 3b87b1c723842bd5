"""The causal knob: the query/key initial scale.

scale_qk(s, model) multiplies every attention layer's query and key weights (and biases) by s right after
initialisation, so the random scores at init grow by s**2: attention sharpens onto random earlier positions,
with no preference for the current one (unlike self_bias or a local window, which hand attention a path to
the current token). It is a Variant.model_init (functools.partial(scale_qk, s)); config.json records it by
name (training.run_config.describe), so a run at another scale is never reused for this one.
"""

from __future__ import annotations

import math

import torch

from interp.errors import ToolkitError


@torch.no_grad()
def scale_qk(scale: float, model) -> None:
    """Multiply W_Q, W_K (in_proj rows [0, 2 d_model)) and their biases by scale, in every layer."""
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ToolkitError(f"the query/key scale must be a finite number > 0, got {scale!r}")
    if model.cfg.mixer != "attention":
        raise ToolkitError(f"the query/key scale needs softmax attention (mixer='attention'), not {model.cfg.mixer!r}")
    d = model.cfg.d_model
    for block in model.blocks:
        proj = block.attn.in_proj
        proj.weight[: 2 * d] *= scale
        if proj.bias is not None:
            proj.bias[: 2 * d] *= scale

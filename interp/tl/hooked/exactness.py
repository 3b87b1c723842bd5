"""The export's logits against ResidualGPT's on one small probe batch, after the conversion and again after TL's
weight processing: what to_hooked_transformer checks before it hands an export out.

The declarations (tl_weights, tl_scores) cannot prove a mixer's forward is what TL computes - a subclass may
change forward and keep an inherited export - so one small forward of each model is the check. ResidualGPT's
logits on the probe batch are computed once (probe_logits) and serve both checks.
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformer_lens import HookedTransformer

from interp.errors import ToolkitError
from interp.model.eval_mode import eval_mode
from interp.model.gpt import ResidualGPT


def _eval_logits(model: torch.nn.Module, tokens: Tensor) -> Tensor:
    """The model's float logits in eval mode, without gradients; its training mode is left as it was."""
    with eval_mode(model):
        with torch.no_grad():
            return model(tokens).float()


def probe_logits(model: ResidualGPT) -> tuple[Tensor, Tensor]:
    """(tokens, logits): ResidualGPT's on the fixed probe batch (2 rows of min(n_ctx, 16) random ids, seed 0)."""
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, model.cfg.d_vocab, (2, min(model.cfg.n_ctx, 16)), generator=gen)
    tokens = tokens.to(model.embed.weight.device)
    return tokens, _eval_logits(model, tokens)


def check_same_logits(
    model: ResidualGPT, hooked: HookedTransformer, processed: str = "", reference: tuple[Tensor, Tensor] | None = None
) -> None:
    """Refuse an export whose logits differ from ResidualGPT's on the probe batch (reference: probe_logits(model),
    computed here where not given).

    The tolerance is relative to the logit scale: 1e-4 in float32 (the fused and explicit attention kernels
    differ by ~1e-6), looser in half precision. `processed` names TL's weight processing when it has run:
    then log-probabilities are compared (center_unembed shifts each position's logits by a constant).
    """
    weight = model.embed.weight
    rel_tol = 1e-4 if weight.dtype in (torch.float32, torch.float64) else 3e-2
    tokens, ours = reference if reference is not None else probe_logits(model)
    theirs = _eval_logits(hooked, tokens)
    if processed:
        ours, theirs = ours.log_softmax(-1), theirs.log_softmax(-1)
    diff = (ours - theirs).abs().max().item()
    scale = max(1.0, ours.abs().max().item())
    if not diff <= rel_tol * scale and weight.dtype not in (torch.float32, torch.float64):
        raise ToolkitError(
            f"the HookedTransformer's logits differ from ResidualGPT's by up to {diff:.3g} in {weight.dtype} "
            f"(logit scale {scale:.3g}), where rounding alone can do that, so exactness cannot be checked: export "
            "the float32 model (to_hooked_transformer(model.float())) and cast the export afterwards (.to(dtype))"
        )
    if not diff <= rel_tol * scale and processed:
        raise ToolkitError(
            f"TransformerLens's weight processing ({processed}) changed the export's log-probabilities by up to "
            f"{diff:.3g} (scale {scale:.3g}), so it would be silently wrong; export with these options off "
            "and report the model's shapes (n_layers, d_model, d_vocab, d_mlp, n_ctx) as a bug"
        )
    if not diff <= rel_tol * scale:  # NaN fails too
        raise ToolkitError(
            f"mixer {model.cfg.mixer!r}: the HookedTransformer's logits differ from ResidualGPT's by up to {diff:.3g} "
            f"(logit scale {scale:.3g}, tolerance {rel_tol:g} of it) on a probe batch, so the export would be "
            "silently wrong; does the mixer's forward match its tl_weights / tl_scores? (an inherited export "
            "with a changed forward does not)"
        )

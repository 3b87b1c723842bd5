"""Sparse autoencoders (SAELens) on the 3.x export and on ResidualGPT: the processing an SAE was trained under.

SAELens records, in an SAE's cfg.json (metadata.model_from_pretrained_kwargs), the weight processing of the
HookedTransformer it read activations from; its own default says center_writing_weights=False. The export
takes from_pretrained's processing (fold_ln, center_writing_weights, center_unembed), which changes what some
hooks hold: the residual stream and what writes into it (hook_embed, hook_pos_embed, hook_resid_*,
hook_attn_out, hook_mlp_out) are centred, ResidualGPT's value minus its mean over d_model.

    export_processing(tl)      what the export's weights carry, in from_pretrained's names (for the runner's config)
    check_sae_processing(sae, tl)  SAEProcessingWarning where the SAE's record differs from the export's processing
    residual_gpt_sae_hook(sae, tl) (hook name, hook) that splices the SAE into ResidualGPT where the export splices
                               it: the site's value taken as the export holds it (centred), replaced by sae(value)

No SAELens import here: the SAE is any module with SAELens's cfg.metadata.hook_name, encode and decode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from interp.errors import ConfigError, ToolkitWarning, warn_each_call

# The hooks whose value center_writing_weights changes: what writes into the stream, and the stream itself.
CENTRED_SITES = (
    "hook_embed",
    "hook_pos_embed",
    "hook_resid_pre",
    "hook_resid_mid",
    "hook_resid_post",
    "hook_attn_out",
    "hook_mlp_out",
)
# TL's float32 mean of a centred row is rounding, far below this fraction of the weight's largest entry; a
# trained, uncentred weight's largest row mean is a visible fraction of it (1/sqrt(d_model) at random)
_CENTRED_RTOL = 1e-5


class SAEProcessingWarning(ToolkitWarning):
    """An SAE recorded as trained under other weight processing than the export it is spliced into has."""


def _centred(weight: torch.Tensor, dim: int = -1) -> bool:
    w = weight.detach().double()
    scale = w.abs().max().item()
    return scale == 0.0 or w.mean(dim).abs().max().item() <= _CENTRED_RTOL * scale


def export_processing(tl: Any) -> dict[str, bool]:
    """The weight processing the export `tl` carries, in HookedTransformer.from_pretrained's keyword names.

    Read from the export itself, so it holds however it was made (to_hooked_transformer's options, load_hooked,
    TransformerLens's process_weights_ afterwards): fold_ln from its LayerNorms (TL's LNPre once folded),
    center_writing_weights from W_E, W_pos, W_O, b_O, W_out, b_out (each row's mean over d_model zero),
    center_unembed from W_U (each row's mean over the vocabulary zero), fold_value_biases from the layers whose
    b_V processing moved into b_O. What SAELens's runner records (metadata.model_from_pretrained_kwargs).
    """
    cfg: Any = getattr(tl, "cfg", None)
    if not hasattr(tl, "W_E") or not hasattr(cfg, "normalization_type"):
        raise ConfigError(
            f"export_processing takes a HookedTransformer export (interp.load_tl on TransformerLens 3), "
            f"not {type(tl).__name__}"
        )
    writing = [tl.W_E, tl.W_pos]
    for block in tl.blocks:
        writing += [block.attn.W_O, block.attn.b_O]
        if hasattr(block, "mlp"):
            writing += [block.mlp.W_out, block.mlp.b_out]
    return {
        "fold_ln": cfg.normalization_type in ("LNPre", "RMSPre"),
        "center_writing_weights": all(_centred(w) for w in writing),
        "center_unembed": _centred(tl.W_U),
        "fold_value_biases": bool(getattr(tl, "value_biases_moved", [])),
    }


def _recorded(sae: Any) -> tuple[str, dict[str, Any]]:
    """The SAE's hook name and the processing its metadata records (SAELens's default where it records none)."""
    metadata = getattr(getattr(sae, "cfg", None), "metadata", None)
    site = getattr(metadata, "hook_name", None)
    if not isinstance(site, str):
        raise ConfigError(f"{type(sae).__name__}: no cfg.metadata.hook_name (an SAELens SAE records its site there)")
    kwargs = getattr(metadata, "model_from_pretrained_kwargs", None)
    return site, dict(kwargs) if isinstance(kwargs, dict) else {}


def _has_value_biases(tl: Any) -> bool:
    """Whether folding value biases changes anything here: some b_V is not zero, or was moved into b_O."""
    moved = bool(getattr(tl, "value_biases_moved", []))
    return moved or any(bool(block.attn.b_V.detach().ne(0).any()) for block in tl.blocks)


def check_sae_processing(sae: Any, tl: Any) -> None:
    """Warn (SAEProcessingWarning) where the SAE's recorded processing differs from the export's at its site.

    A field the record leaves out is from_pretrained's default (True for each, as SAELens's loader would pass
    it). Only processing that changes the site's value is compared: centring at the stream's sites, fold_ln at
    a LayerNorm's hook_normalized, fold_value_biases at hook_v / hook_z / hook_result where a b_V is not zero."""
    site, recorded = _recorded(sae)
    ours = export_processing(tl)
    leaf = site.rsplit(".", 1)[-1]
    relevant = []
    if leaf in CENTRED_SITES:
        relevant.append("center_writing_weights")
    if leaf == "hook_normalized":
        relevant.append("fold_ln")
    if leaf in ("hook_v", "hook_z", "hook_result") and _has_value_biases(tl):
        relevant.append("fold_value_biases")
    differ = [k for k in relevant if bool(recorded.get(k, True)) != ours[k]]
    if differ:
        said = ", ".join(f"{k}={bool(recorded.get(k, True))}" for k in differ)
        has = ", ".join(f"{k}={ours[k]}" for k in differ)
        warn_each_call(
            f"this SAE records training on a model processed with {said} "
            "(metadata.model_from_pretrained_kwargs; SAELens's own default is center_writing_weights=False), "
            f"but the export it is spliced into has {has}, so {site} holds other values here than it was "
            "trained on (centring: each position's mean over d_model); train it with "
            "training.sae_training.sae_runner_config(tl, ...), which records the export's processing",
            SAEProcessingWarning,
        )


def residual_gpt_sae_hook(sae: Any, tl: Any) -> tuple[str, Callable[..., torch.Tensor]]:
    """(hook name, hook) for ResidualGPT.run_with_hooks: `sae` spliced where the export `tl` splices it.

    At the SAE's site the hook takes ResidualGPT's value as the export holds it (centred where the export's
    center_writing_weights centres that site) and returns sae.decode(sae.encode(value)), what SAELens's
    run_with_saes puts there on the export. Downstream the two models then differ by a multiple of the
    all-ones vector at each position, which every read of the stream (a LayerNorm) removes, so their
    log-probabilities agree to float rounding. A site whose export value is not a function of ResidualGPT's
    this hook knows (a folded LayerNorm's hook_normalized, hook_v / hook_z after fold_value_biases) is refused.
    """
    site, _ = _recorded(sae)
    processing = export_processing(tl)
    leaf = site.rsplit(".", 1)[-1]
    if leaf == "hook_normalized" and processing["fold_ln"]:
        raise ConfigError(
            f"{site}: the export's folded LayerNorm holds the normalised value without the LayerNorm's weight and "
            "bias, which ResidualGPT's hook has applied; export with fold_ln=False to splice there on both"
        )
    if leaf in ("hook_v", "hook_z", "hook_result") and processing["fold_value_biases"]:
        raise ConfigError(
            f"{site}: the export's value biases were moved into b_O (fold_value_biases); not ResidualGPT's"
        )
    centre = leaf in CENTRED_SITES and processing["center_writing_weights"]

    def splice(value: torch.Tensor, hook: Any = None) -> torch.Tensor:
        seen = value - value.mean(-1, keepdim=True) if centre else value
        return sae.decode(sae.encode(seen)).to(value.dtype)

    return site, splice


__all__ = [
    "CENTRED_SITES",
    "SAEProcessingWarning",
    "check_sae_processing",
    "export_processing",
    "residual_gpt_sae_hook",
]

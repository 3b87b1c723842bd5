"""A ResidualGPT as a HookedTransformer: TL's config, the weights in TL's layout, and the entry point.

The weights move into TL's layout one to one; the attention slot's as its mixer
declares (interp.model.mixers); runtime_gain is folded into W_O / b_O and W_out /
b_out. What TL's block cannot express is rewired (interp.tl.hooked.rewire).
The checks around the conversion live apart: what it takes (interp.tl.guards.resolve_source), its
logits against ResidualGPT's (interp.tl.hooked.exactness), the export's class (interp.tl.hooked.exported).
"""

from __future__ import annotations

import math
import os
from typing import Any, cast

import torch
from torch import Tensor
from transformer_lens import HookedTransformer, HookedTransformerConfig

from interp.config.model_config import ModelConfig
from interp.config.registry import mixer_spec
from interp.errors import ConfigError, ToolkitError
from interp.files.checkpoint import Checkpoint
from interp.files.tokenizers import tokenizer_for
from interp.model.api import check_materialised
from interp.model.gpt import Block, ResidualGPT
from interp.model.mixers import TL_SLOTS
from interp.model.sublayers import tl_mlp_weights
from interp.tl.guards import resolve_source
from interp.tl.hooked.caches import new_hooked_transformer, warn_non_additive
from interp.tl.hooked.exactness import check_same_logits, probe_logits
from interp.tl.hooked.rewire import rewire_hooked
from interp.tl.major import tl_config_fields
from interp.tl.tokens import warn_no_tokenizer


def hooked_config(
    cfg: ModelConfig, device: str | torch.device = "cpu", dtype=torch.float32, n_special: int = 0
) -> HookedTransformerConfig:
    """The HookedTransformerConfig of a ModelConfig (refuses what TL cannot express).

    n_special extra embedding rows (zero) and no logits: what save_hooked files written before W_E was made
    square hold for a tokenizer's special tokens; the export itself passes 0 (its embedding zeroes them).
    """
    mixer = mixer_spec(cfg.mixer)
    if not mixer.exports_to_tl():
        raise mixer.refuse_tl()
    return HookedTransformerConfig(
        **tl_config_fields(cfg, n_special),
        original_architecture="ResidualGPT",
        init_weights=False,  # every weight is loaded below
        device=str(device),
        dtype=dtype,
    )


def tl_state_dict(model: ResidualGPT) -> dict[str, Tensor]:
    """ResidualGPT weights in TL's names and layout; every ResidualGPT parameter must be used once.

    The attention slot's weights are what its mixer declares (Mixer.tl_weights);
    a mixer that declares none is refused by name.
    """
    cfg = model.cfg
    params = dict(model.named_parameters())  # tied unembed appears once, as embed.weight
    used: set[str] = set()

    def take(name: str, like: Tensor | None = None) -> Tensor:
        if like is not None and name not in params:
            return torch.zeros_like(like)  # a bias the model does not have (bias=False)
        used.add(name)
        return params[name].detach()

    gain = cfg.runtime_gain  # every sublayer output is scaled: fold it into the writing weights
    embed = take("embed.weight")
    sd: dict[str, Tensor] = {"embed.W_E": embed, "pos_embed.W_pos": take("pos_embed.weight")}
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."  # the same block prefix in both models
        for ln in ("ln1", "ln2"):
            w = take(f"{b}{ln}.w")
            sd[f"{b}{ln}.w"], sd[f"{b}{ln}.b"] = w, take(f"{b}{ln}.b", w)

        attn = cast(Block, model.blocks[layer]).attn.tl_weights(
            lambda name, like=None, b=b: take(f"{b}attn.{name}", like)
        )
        if sorted(attn) != sorted(TL_SLOTS):
            raise ToolkitError(f"mixer {cfg.mixer!r}: tl_weights gave {sorted(attn)}, TransformerLens needs {TL_SLOTS}")
        attn["W_O"], attn["b_O"] = attn["W_O"] * gain, attn["b_O"] * gain
        sd.update({f"{b}attn.{name}": w for name, w in attn.items()})

        mlp = tl_mlp_weights(lambda name, like=None, b=b: take(f"{b}mlp.{name}", like))
        mlp["W_out"], mlp["b_out"] = mlp["W_out"] * gain, mlp["b_out"] * gain
        sd.update({f"{b}mlp.{name}": w for name, w in mlp.items()})

    w = take("ln_final.w")
    sd["ln_final.w"], sd["ln_final.b"] = w, take("ln_final.b", w)
    w_u = take("unembed.weight") if "unembed.weight" in params else embed  # tied: a copy either way
    sd["unembed.W_U"] = w_u.T
    sd["unembed.b_U"] = torch.zeros(cfg.d_vocab, dtype=w_u.dtype, device=w_u.device)

    if unused := sorted(set(params) - used):
        raise ToolkitError(f"to_hooked_transformer does not know where to put ResidualGPT parameter(s) {unused}")
    return {k: v.contiguous() for k, v in sd.items()}


def _refuse_unexportable(model: ResidualGPT, fold_value_biases: bool) -> None:
    """What no export can be made of: weights on the meta device; fold_value_biases where a row attends nowhere."""
    check_materialised(model)
    if fold_value_biases and model.cfg.bias and model.cfg.self_bias == -math.inf:
        raise ConfigError(
            "fold_value_biases assumes every attention row sums to 1, but with self_bias=-inf position 0 attends "
            "nowhere; leave fold_value_biases off for this model"
        )


def to_hooked_transformer(
    source: ResidualGPT | Checkpoint | str | os.PathLike,
    *,
    vocab: list[str] | None = None,
    fold_ln: bool = True,
    center_writing_weights: bool = True,
    center_unembed: bool = True,
    fold_value_biases: bool = False,
    refactor_factored_attn_matrices: bool = False,
    device: str | torch.device | None = None,
) -> HookedTransformer:
    """A ResidualGPT, Checkpoint or checkpoint path as a HookedTransformer computing the same function.

    The weight processing defaults are HookedTransformer.from_pretrained's (fold_ln, center_writing_weights,
    center_unembed), so TransformerLens's recipes give the right numbers: apply_ln_to_stack and
    accumulated_resid(apply_ln=True) divide by the cached LayerNorm scale but never multiply by its weight,
    which is right only once fold_ln has moved the weight into W_U (and W_Q / W_K / W_V / W_in). Each is exact
    for every residual config and every routing: fold_ln rewrites a LayerNorm and the weights that read its
    output only; every read of the stream is a LayerNorm (ln1, ln2, ln_final), which removes the mean that
    center_writing_weights takes out of what writes into it, whichever paths the wiring keeps; center_unembed
    shifts each position's logits by one constant, so log-probabilities, losses, samples and logit
    differences are ResidualGPT's (the logits themselves are not: pass center_unembed=False for those).
    With them, hook values differ from ResidualGPT's where processing changes them (resid_* and
    attn_out / mlp_out centred, ln*.hook_normalized without the LayerNorm's weight); fold_ln=False,
    center_writing_weights=False, center_unembed=False gives ResidualGPT's values at every hook.
    fold_value_biases (from_pretrained's too) stays off: it moves b_V into b_O, so a head ablated at hook_v /
    hook_z would keep its value bias here and not on ResidualGPT; turned on where b_V != 0 (here, or by TL's
    process_weights_, whose default it is) it warns at each call (ValueBiasWarning).

    With fold_ln=False, apply_ln_to_stack, tokens_to_residual_directions, every apply_ln=True and logit_attrs
    warn at each call (UnfoldedLayerNormWarning / LogitAttrsWarning); interp.reading.decompose applies the weights
    itself and is exact either way. logit_attrs also leaves out b_U (where fold_ln puts ln_final.b) and says so;
    so does every stack dotted with W_U, and where b_U is not zero (a bias=True model) apply_ln_to_stack and
    apply_ln=True at the unembedding and tokens_to_residual_directions warn at each call (UnembedBiasWarning).

    For residual != 'full' the model is a NonAdditiveHookedTransformer (interp.tl.hooked.caches): TL's
    decompose_resid, get_full_resid_decomposition, stack_head_results and logit_attrs warn at every call
    (NonAdditiveResidualWarning), on a cache built by hand from its activations too: their sums assume every
    sublayer output reaches the final stream; use interp.reading.decompose there. accumulated_resid and the logit
    lens read the stream itself and stay right.
    vocab (characters) or the checkpoint's state["vocab"] / state["encoding"] == "gpt2" gives the tokenizer. W_E
    holds the trained rows only (W_E @ OV @ W_U square, as SVDInterpreter and FactoredMatrix.eigenvalues need).
    """
    model, state, _ = resolve_source(source, device, "to_hooked_transformer")
    _refuse_unexportable(model, fold_value_biases)
    cfg = model.cfg
    tokenizer, why_not = tokenizer_for(cfg.d_vocab, vocab, state)
    weight = model.embed.weight  # W_E square with W_U: special ids embed as zeros (rewire.VocabCheckedEmbed)
    tl_cfg = hooked_config(cfg, device=device or weight.device, dtype=weight.dtype)
    hooked = new_hooked_transformer(tl_cfg, cfg)
    state_dict = tl_state_dict(model)
    state_dict.update(hooked.named_buffers())  # TL's constants (mask cache, IGNORE = -inf), not weights
    try:
        hooked.load_state_dict(state_dict, strict=True)
    except RuntimeError as e:  # a key or shape we produced that TL does not expect: a converter bug
        raise ToolkitError(f"TransformerLens rejected the converted weights: {e}") from None
    rewire_hooked(hooked, cfg)
    reference = probe_logits(model)  # ResidualGPT's, once: the same probe batch checks both steps below
    check_same_logits(model, hooked, reference=reference)  # before TL's processing (center_unembed shifts logits)
    processing = {
        "fold_ln": fold_ln,
        "center_writing_weights": center_writing_weights,
        "center_unembed": center_unembed,
        "fold_value_biases": fold_value_biases,
        "refactor_factored_attn_matrices": refactor_factored_attn_matrices,
    }
    if any(processing.values()):  # checked again: TL's processing guesses layouts from shapes (hooked.fold)
        hooked.load_and_process_state_dict(hooked.state_dict(), **processing)
        done = ", ".join(name for name, on in processing.items() if on)
        check_same_logits(model, hooked, processed=done, reference=reference)
    if tokenizer is not None:
        hooked.set_tokenizer(tokenizer, default_padding_side="right")
    else:
        warn_no_tokenizer(why_not)
    warn_non_additive(cfg)
    return hooked.eval()


def tl_config_dict(cfg: HookedTransformerConfig) -> dict[str, Any]:
    """TL's config as plain data: its __init__ fields, dtype and device as strings, numpy scalars as Python's."""
    import dataclasses

    out = {}
    for f in dataclasses.fields(HookedTransformerConfig):
        if f.init and hasattr(cfg, f.name):
            value = getattr(cfg, f.name)
            if f.name in ("dtype", "device"):
                value = str(value).removeprefix("torch.")
            elif hasattr(value, "item") and not isinstance(value, Tensor):  # numpy scalars (initializer_range)
                value = value.item()
            out[f.name] = value
    return out

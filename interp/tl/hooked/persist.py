"""save_hooked / load_hooked: an export round-tripped exactly, wiring and tokenizer included.

Plain data only (read back with torch.load(weights_only=True)), written atomically.

The file is a dict of TL's parameter names, each tensor with one extra leading
dimension of size 1, plus the record under "residual_gpt_hooked" (schema, ModelConfig,
TL config, vocabulary). The shapes are what keeps a plain HookedTransformer from
taking it in as another model: load_state_dict (strict or not) and
load_and_process_state_dict raise "size mismatch" at the first tensor, whatever
route the file takes (the whole dict, or its tensors picked out by hand), where
matching shapes would let strict=False drop the rewiring silently (an ablated
model read as a full one, logits off by several nats). load_hooked strips the
dimension and rebuilds the export with its wiring. The record also lists the layers whose b_V
weight processing moved into b_O (fold_value_biases): load_hooked warns ValueBiasWarning for them,
as the processing did (zeros alone would read as a model without value biases).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from transformer_lens import HookedTransformer

from interp.errors import CheckpointError, ToolkitError, ValueBiasWarning, warn_each_call
from interp.files.checkpoint import SCHEMA, refuse_non_finite_forward
from interp.files.tokenizers import tokenizer_for
from interp.tl.hooked.caches import new_hooked_transformer, warn_non_additive
from interp.tl.hooked.convert import tl_config_dict
from interp.tl.hooked.exported import VALUE_BIAS_EFFECT
from interp.tl.hooked.rewire import rewire_hooked
from interp.tl.saved import HOOKED_SCHEMA, load_weights, read_saved, tokenizer_fields, write_saved

_LEGACY_SCHEMA = "residual-gpt-hooked/1"  # tensors under "state_dict" in TL's shapes; still read
RECORD = "residual_gpt_hooked"  # the key of the record in the file; every other key is a tensor


def save_hooked(model: HookedTransformer, path: str | os.PathLike) -> None:
    """Save an export from to_hooked_transformer (weights, TL config, wiring, tokenizer) for load_hooked.

    Plain data only (read back with weights_only=True), written atomically.
    """
    record = getattr(model.cfg, "residual_gpt_config", None)
    if record is None:
        raise ToolkitError("save_hooked takes a model made by interp.to_hooked_transformer (no residual_gpt_config)")
    attached = sorted(getattr(model, "_acts_to_saes", None) or {})
    if attached:  # an SAE in a hook point's place: its keys would be saved as the model's, and load_hooked refuses
        raise ToolkitError(
            f"save_hooked: SAEs are attached at {', '.join(attached)}; call model.reset_saes() first (save an SAE "
            "with its own sae.save_model(path) and add it again after load_hooked)"
        )
    payload: dict[str, Any] = {k: v.detach().cpu()[None] for k, v in model.state_dict().items()}
    payload[RECORD] = {
        "schema": HOOKED_SCHEMA,
        "layout": "every tensor has an extra leading dimension of 1; read this file with interp.load_hooked",
        "model_config": dict(record),
        "tl_config": tl_config_dict(model.cfg),
        **tokenizer_fields(model.tokenizer),
        # b_V folded into b_O (fold_value_biases): zeros that look like bias=False, so said at load
        "value_biases_moved": list(getattr(model, "value_biases_moved", [])),
    }
    write_saved(path, payload)


def load_hooked(path: str | os.PathLike, device: str | torch.device | None = None) -> HookedTransformer:
    """The HookedTransformer that save_hooked wrote, wiring and tokenizer included (strict: every key must fit)."""
    payload = read_saved(path, device, "HookedTransformer", "save_hooked")
    record = payload.get(RECORD) if isinstance(payload, dict) else None
    state_dict: dict[str, Any] | None
    if isinstance(record, dict) and record.get("schema") == HOOKED_SCHEMA:
        state_dict = {k: v for k, v in payload.items() if k != RECORD}
    elif isinstance(payload, dict) and payload.get("schema") == _LEGACY_SCHEMA:
        record, state_dict = payload, payload.get("state_dict")
    else:
        named = record if isinstance(record, dict) else payload if isinstance(payload, dict) else {}
        schema = named.get("schema")
        from interp.files.nanogpt_format import is_nanogpt

        hint = (
            " (a ResidualGPT or nanoGPT checkpoint: interp.to_hooked_transformer(path) exports it)"
            if schema == SCHEMA or is_nanogpt(payload)
            else ""
        )
        raise CheckpointError(f"{path} has schema {schema!r}; load_hooked reads {HOOKED_SCHEMA!r}{hint}")
    from interp.files.checks import checked
    from interp.tl.hooked.hooked_file import check_hooked, export_tl_config

    with checked(path, CheckpointError, "it cannot be loaded"):
        cfg = check_hooked(record, state_dict, str(device or "cpu"), leading=record is not payload)
    assert isinstance(state_dict, dict)  # check_hooked refused anything else
    if record is not payload:
        state_dict = {k: v[0] for k, v in state_dict.items()}
    payload = record
    saved_tl = payload["tl_config"]  # checked: every field the export's, or device and model_name
    where = str(device) if device is not None else saved_tl.get("device") or "cpu"
    if device is None:  # the device it was saved from may not be this machine's
        from interp.config.memory import device_here

        try:
            device_here(where)
        except ToolkitError as e:
            raise CheckpointError(
                f"{path}: tl_config.device: {e}; load_hooked(path, device='cpu') loads it here"
            ) from None
    n_special = saved_tl["d_vocab"] - cfg.d_vocab
    tl_cfg = export_tl_config(cfg, saved_tl["dtype"], n_special, where, saved_tl.get("normalization_type", "LN"))
    hooked = new_hooked_transformer(tl_cfg, cfg)
    rewire_hooked(hooked, cfg)
    load_weights(hooked, state_dict, path)
    refuse_non_finite_forward(path, hooked, cfg.d_vocab, cfg.n_ctx)
    tokenizer, _ = tokenizer_for(cfg.d_vocab, None, {k: payload.get(k) for k in ("vocab", "encoding")})
    if tokenizer is not None:  # the characters, or GPT-2's BPE where its files are here
        hooked.set_tokenizer(tokenizer, default_padding_side="right")
    _value_biases_moved(hooked, payload.get("value_biases_moved", []), path)
    warn_non_additive(cfg)
    return hooked.eval()


def _value_biases_moved(hooked: HookedTransformer, layers: Any, path: str | os.PathLike) -> None:
    """Remember (and say, as the processing that moved them did) which layers' b_V the saved export lacks."""
    n_layers = hooked.cfg.n_layers
    if not (isinstance(layers, list) and all(type(x) is int and 0 <= x < n_layers for x in layers)):
        raise CheckpointError(f"{path}: value_biases_moved is {layers!r:.60}, not a list of layers 0..{n_layers - 1}")
    if not layers:
        return
    hooked.cfg.residual_gpt_value_biases_moved = sorted(set(layers))  # type: ignore[attr-defined]
    warn_each_call(
        f"{path} was saved after weight processing (fold_value_biases) moved the value biases b_V of layer(s) "
        f"{sorted(set(layers))} into b_O, which the export leaves off: {VALUE_BIAS_EFFECT}; "
        "interp.to_hooked_transformer(model) (fold_value_biases=False, its default) keeps them",
        ValueBiasWarning,
    )

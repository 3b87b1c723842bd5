"""LayerNorm folding in TL's layout, before TL's own fold sees the weights.

TransformerLens 3.9's fold_layer_norm guesses each reading weight's layout from its shape: W_U
[d_model, d_vocab] is scaled along its vocabulary axis when d_vocab == d_model, W_in [d_model, d_mlp]
along its hidden axis when d_mlp == d_model. Both are silent and change the model (a 32-character
vocabulary at d_model=32 moved log-probs by 0.02). Here the fold is done where the layout is known
(the d_model axis of every reader is -2), and each LayerNorm is left with weight one and bias zero,
so TL's fold multiplies by ones whichever axis it picks; its centring after the fold takes TL's
layout when the shape is square, which is right.
"""

from __future__ import annotations

from typing import Any

import torch

# Which weights (and their biases) read each LayerNorm's output, by TL name.
_READERS = {
    "ln1": (("attn.W_Q", "attn.b_Q"), ("attn.W_K", "attn.b_K"), ("attn.W_V", "attn.b_V")),
    "ln2": (("mlp.W_in", "mlp.b_in"),),
}


def _fold_one(state_dict: dict[str, Any], ln: str, readers: list[tuple[str, str]]) -> None:
    weight, bias = dict.get(state_dict, f"{ln}.w"), dict.get(state_dict, f"{ln}.b")
    if weight is None:  # already folded (LNPre): nothing to move
        return
    for w_key, b_key in readers:
        w = dict.get(state_dict, w_key)
        if w is None:
            continue
        if bias is not None:  # ln.b @ W over d_model, into the reader's bias
            moved = (w * bias[:, None]).sum(-2)
            old = dict.get(state_dict, b_key)
            dict.__setitem__(state_dict, b_key, moved if old is None else old + moved)
        dict.__setitem__(state_dict, w_key, w * weight[:, None])  # new tensors: never the model's own
    dict.__setitem__(state_dict, f"{ln}.w", torch.ones_like(weight))
    if bias is not None:
        dict.__setitem__(state_dict, f"{ln}.b", torch.zeros_like(bias))


def fold_layer_norms(state_dict: dict[str, Any], n_layers: int) -> None:
    """Fold ln1, ln2 and ln_final into the weights that read them, in place (the dict's entries, not its
    tensors), exactly for every shape; TL's fold_ln afterwards has only ones and zeros to fold."""
    for layer in range(n_layers):
        for ln, readers in _READERS.items():
            prefix = f"blocks.{layer}."
            _fold_one(state_dict, prefix + ln, [(prefix + w, prefix + b) for w, b in readers])
    _fold_one(state_dict, "ln_final", [("unembed.W_U", "unembed.b_U")])


__all__ = ["fold_layer_norms"]

"""A nanoGPT train.py checkpoint and its meta.pkl, checked before interp.files.nanogpt_format maps them.

check_nanogpt_payload: 'model' a state dict of floating tensors under string names, 'model_args' GPTConfig's
fields with their types and ranges, the rest plain data of bounded depth. check_meta_pkl: meta.pkl's
itos {0: char, ..., n-1: char} (integer keys only: keys of mixed types are refused, not sorted),
and stoi / vocab_size, where present, agreeing with it. The mapped weights are then checked against
their config by interp.files.checks.checkpoint_file.check_weights like every other schema's.
"""

from __future__ import annotations

from typing import Any

from interp.files.checks import Bad, is_int, walk_limits, want_dict, want_int, want_number, want_str_keys
from interp.files.checks.checkpoint_file import check_tensor, want_characters

_INTS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")


def check_nanogpt_payload(payload: dict[str, Any]) -> None:
    walk_limits({k: v for k, v in payload.items() if k != "model"})
    model = want_str_keys(want_dict(payload["model"], "model"), "model")
    for name, value in model.items():
        check_tensor(value, f"model[{name!r}]")
    # torch.compile's prefix is dropped on load: a weight held both with it and without it is two answers
    twice = sorted(k for k in model if k.startswith("_orig_mod.") and k.removeprefix("_orig_mod.") in model)
    if twice:
        raise Bad(
            f"model[{twice[0]!r}]", "is there with and without torch.compile's _orig_mod. prefix: which is meant?"
        )
    args = want_str_keys(want_dict(payload["model_args"], "model_args"), "model_args")
    for key in _INTS:
        if key in args:
            want_int(args[key], f"model_args.{key}", 1)
    if "bias" in args and not isinstance(args["bias"], bool):
        raise Bad("model_args.bias", f"is not true or false ({args['bias']!r:.40})")
    if "dropout" in args:
        want_number(args["dropout"], "model_args.dropout")
    if "config" in payload and payload["config"] is not None:
        want_str_keys(want_dict(payload["config"], "config"), "config")
    if "iter_num" in payload:
        want_int(payload["iter_num"], "iter_num", 0)


def check_meta_pkl(meta: Any) -> list[str]:
    """The characters of a meta.pkl (id = index)."""
    walk_limits(meta)
    itos = want_dict(meta, "the file").get("itos")
    if not isinstance(itos, dict):
        raise Bad("", "has no itos {0: char, 1: char, ...}; it is not a nanoGPT character meta.pkl")
    bad = next((k for k in itos if not is_int(k)), None)
    if bad is not None:
        raise Bad("itos", f"has a key that is not an integer id ({bad!r:.40})")
    if set(itos) != set(range(len(itos))):
        raise Bad("itos", f"has ids other than 0..{len(itos) - 1}")
    vocab = [itos[i] for i in range(len(itos))]
    want_characters(vocab, "itos")
    if "vocab_size" in meta and meta["vocab_size"] != len(vocab):
        raise Bad("vocab_size", f"is {meta['vocab_size']!r:.40}; itos has {len(vocab)} characters")
    stoi = meta.get("stoi")
    if stoi is not None and stoi != {c: i for i, c in enumerate(vocab)}:
        raise Bad("stoi", "is not the inverse of itos")
    return vocab


__all__ = ["check_meta_pkl", "check_nanogpt_payload"]

"""HiddenRoutingWarning's shared parts for both majors' exports: W_Q @ W_K does not show a routing (self_bias,
a mixer's score routing) that the attention scores apply (hidden_routing); reads inside routing_quiet() say
nothing (the forward pass, and a model-level read that warned once already)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from torch import Tensor

from interp.config.model_config import ModelConfig
from interp.config.registry import mixer_spec
from interp.errors import ScopedFlag

_ROUTING_QUIET = ScopedFlag("routing_quiet")


def routing_quiet() -> AbstractContextManager[None]:
    """No HiddenRoutingWarning inside."""
    return _ROUTING_QUIET.raised()


def routing_is_quiet() -> bool:
    return bool(_ROUTING_QUIET)


def hidden_routing_message(what: str, cfg: ModelConfig, scores: str) -> str:
    """The warning's text: `what` (W_Q, W_K, QK) leaves out the routing `scores` (what applies it) applies."""
    return (
        f"{what}: {scores} also applies mixer={cfg.mixer!r}, self_bias={cfg.self_bias:g} "
        "(interp.model.mixers), which W_Q @ W_K does not show; scores rebuilt from hook_q / hook_k miss it too. "
        "interp.reading.scores.attention_scores(model, q, k) rebuilds the scores the model uses, routing included"
    )


def hidden_routing(cfg: ModelConfig, w_q: Callable[[], Tensor]) -> bool:
    """Whether the model's scores apply a routing that W_Q @ W_K does not show (a zero W_Q - the uniform mixer -
    shows its routing itself: every score 0). Inside routing_quiet() never."""
    if routing_is_quiet() or not mixer_spec(cfg.mixer).tl_routes_scores(cfg):
        return False
    with routing_quiet():
        return bool(w_q().detach().ne(0).any())

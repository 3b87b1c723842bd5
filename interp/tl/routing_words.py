"""HiddenRoutingWarning for both majors' exports, written once (warn_hidden_routing): W_Q @ W_K does not show a
routing (self_bias, a mixer's score routing) that the attention scores apply (hidden_routing); reads inside
routing_quiet() say nothing (the forward pass, and a model-level read that warned once already)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from torch import Tensor

from interp.config.model_config import ModelConfig
from interp.config.registry import mixer_spec
from interp.errors import HiddenRoutingWarning, ScopedFlag
from interp.tl.tokens import warn_at_user

_ROUTING_QUIET = ScopedFlag("routing_quiet")


def routing_quiet() -> AbstractContextManager[None]:
    """No HiddenRoutingWarning inside."""
    return _ROUTING_QUIET.raised()


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
    if _ROUTING_QUIET or not mixer_spec(cfg.mixer).tl_routes_scores(cfg):
        return False
    with routing_quiet():
        return bool(w_q().detach().ne(0).any())


def warn_hidden_routing(what: str, cfg: ModelConfig, applied_by: str, *w_qs: Callable[[], Tensor]) -> None:
    """HiddenRoutingWarning at the user's line where any of w_qs (one block's W_Q each) hides cfg's routing
    (hidden_routing): `what` (W_Q, W_K, QK) leaves out the routing `applied_by` (what applies it) applies."""
    if any(hidden_routing(cfg, w_q) for w_q in w_qs):
        warn_at_user(hidden_routing_message(what, cfg, applied_by), HiddenRoutingWarning)

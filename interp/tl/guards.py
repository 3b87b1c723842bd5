"""The guards both TransformerLens majors' exports share, written once: ExportGuards, the mixin before the 3.x
HookedTransformer export (interp.tl.hooked.exported) and the TL 4 bridge (interp.tl.bridge); resolve_source,
what either is made from.

    to_tokens       past n_ctx with truncate=True (TL's default, which would keep the first n_ctx tokens without a
                    word): one ConfigError naming truncate=False, which keeps it whole. prepend_bos: the model was
                    trained without BOS and the char tokenizer's <|endoftext|> row is zero, never trained: to_tokens
                    (and so generate, forward and run_with_cache on text) warns (UntrainedTokenWarning)
    text            to_tokens, to_string, to_str_tokens, to_single_str_token, and forward / run_with_cache /
                    generate on text, on an export made without a tokenizer: one NoTokenizerError (TL asserts);
    input           forward / run_with_cache / generate on what is neither text nor a tensor (a tuple, None,
                    [], a list of ids, an array): one ArgumentError (TL fails inside)
    to_string, tokens_to_residual_directions
                    an id outside the vocabulary (-1, which TL reads from the end) is a TokenIdError
    loss_fn         on a right-padded batch (to_tokens of a list) the pad id has no logit: the padding is masked out
                    of the loss as TL's attention_mask masks it (the mean over real targets)
    _check_stream_read, tokens_to_residual_directions
                    TL's cache methods ask it at every call (interp.tl.stream_reads): logit_attrs's word, a
                    LayerNorm read without its weights, a stack that misses a nonzero b_U
    QK, W_Q, W_K    with a routing in the scores (self_bias, uniform) they do not show it: HiddenRoutingWarning,
                    naming interp.reading.scores.attention_scores

What the majors do differently is a class attribute or one method each (unfolded_fix, routing_applied_by,
_logit_attrs_word, _padding_mark).
"""

from __future__ import annotations

import functools
import os
from typing import Any, cast

import torch
from torch import Tensor

from interp.config.model_config import ModelConfig
from interp.errors import LogitAttrsWarning, ToolkitError, warn_each_call
from interp.files.checkpoint import Checkpoint, load_checkpoint
from interp.model.api import check_config_unedited, check_ids
from interp.model.gpt import ResidualGPT
from interp.tl import stream_reads
from interp.tl.major import refuse_past_context
from interp.tl.routing_words import routing_quiet, warn_hidden_routing
from interp.tl.tokens import check_loss_shapes, check_model_input, loss_targets, require_tokenizer, warn_bos


class ExportGuards:
    """The guards of both majors' exports (see the module docstring); before TL's class in the bases."""

    unfolded_fix: str = ""  # what a LayerNorm read without its weights should use instead
    routing_applied_by: str = ""  # what applies the routing W_Q @ W_K does not show

    @property
    def model_config(self) -> ModelConfig:
        """The ResidualGPT ModelConfig this export computes."""
        raise NotImplementedError

    @property
    def n_trained(self) -> int:
        """The ids the model was trained on, each with a logit (a tokenizer's special ids come after them)."""
        return cast(Any, self).cfg.d_vocab_out  # TL's config of either major (interp.tl.major.tl_config_fields)

    def _padding_mark(self, tokens: Tensor, padding_side: str | None) -> Any:
        """What to_tokens marks its tokens with (read by the embedding), or a refusal of their padding."""
        raise NotImplementedError

    def _logit_attrs_word(self) -> str | None:
        """What ActivationCache.logit_attrs leaves out on this model, said at each call; None if nothing."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the token boundary

    def to_tokens(
        self,
        input: Any,
        prepend_bos: bool | None = None,
        padding_side: str | None = None,
        move_to_device: bool = True,
        truncate: bool = True,
    ) -> Any:
        """TL's to_tokens; past n_ctx with truncate=True (TL's default) one ConfigError naming truncate=False,
        where TL would keep the first n_ctx tokens without a word (interp.tl.major.refuse_past_context)."""
        tl: Any = self  # TL's model: its cfg and tokenizer (HookedTransformer's, TransformerBridge's)
        require_tokenizer(tl.tokenizer, "to_tokens")
        warn_bos(tl, prepend_bos, self.n_trained)
        tokens = super().to_tokens(input, prepend_bos, padding_side, move_to_device, truncate=False)  # type: ignore[misc]
        if truncate and isinstance(tokens, Tensor):
            refuse_past_context(tokens.shape[-1], tl.cfg.n_ctx, tl.tokenizer)
        if isinstance(tokens, Tensor):  # its special ids are BOS (warned above) or padding
            tokens.from_to_tokens = self._padding_mark(tokens, padding_side)  # type: ignore[attr-defined]
        return tokens

    def to_string(self, tokens: Any) -> Any:
        """TL's decode; an id outside the tokenizer's vocabulary is a TokenIdError (TL's decode drops it, or
        fails with an OverflowError for a negative one)."""
        tokenizer = cast(Any, self).tokenizer
        require_tokenizer(tokenizer, "to_string")
        if not isinstance(tokens, str):
            check_ids(tokens, len(tokenizer), "tokens")
        return super().to_string(tokens)  # type: ignore[misc]

    def to_str_tokens(self, input: Any, *args: Any, **kwargs: Any) -> Any:
        require_tokenizer(cast(Any, self).tokenizer, "to_str_tokens")
        return super().to_str_tokens(input, *args, **kwargs)  # type: ignore[misc]

    def to_single_str_token(self, int_token: int) -> str:
        require_tokenizer(cast(Any, self).tokenizer, "to_single_str_token")
        return super().to_single_str_token(int_token)  # type: ignore[misc]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self._check_input(args, kwargs, "forward")
        return super().forward(*args, **kwargs)  # type: ignore[misc]

    def _check_input(self, args: tuple, kwargs: dict[str, Any], what: str) -> None:
        """forward's and run_with_cache's input, where given (interp.tl.tokens.check_model_input): TL asserts on
        text without a tokenizer, and fails inside on a tuple, None, a number or []."""
        if args or "input" in kwargs:
            check_model_input(args[0] if args else kwargs["input"], cast(Any, self).tokenizer, what)

    def loss_fn(
        self, logits: Tensor, tokens: Tensor, attention_mask: Tensor | None = None, per_token: bool = False
    ) -> Any:
        """TL's loss; a right-padded batch's padding (the pad id has no logit) masked out as attention_mask
        masks it in TL, so the loss is the mean over real targets (interp.tl.tokens.loss_targets)."""
        check_loss_shapes(logits, tokens)
        pad = getattr(cast(Any, self).tokenizer, "pad_token_id", None)
        tokens, attention_mask = loss_targets(tokens, attention_mask, logits.shape[-1], pad)
        return super().loss_fn(logits, tokens, attention_mask, per_token=per_token)  # type: ignore[misc]

    # ------------------------------------------------------------------ TL's reads of the stream

    def tokens_to_residual_directions(self, tokens: Any) -> Any:
        """TL's (W_U's columns); warns at each call where ln_final is not folded into W_U or where b_U is not
        zero (a bias=True model's ln_final.b, folded there). An id outside the trained ones (-1, which TL would
        read from the end) is a TokenIdError, as on ResidualGPT; a list of ids is one row per id."""
        with stream_reads.outermost() as first:
            if first:
                stream_reads.warn_unfolded_directions(self, self.unfolded_fix)
                stream_reads.warn_unembed_bias_directions(self)
            tl: Any = self
            if isinstance(tokens, str):
                tokens = tl.to_single_token(tokens)
            w_u = tl.W_U
            ids = check_ids(tokens, self.n_trained, "tokens", w_u.device)  # TL's W_U[:, -1]: the last token's
            if isinstance(tokens, (list, tuple)):  # TL takes no list; ResidualGPT does: one row per id
                return w_u[:, ids].movedim(0, -1)
            return super().tokens_to_residual_directions(tokens if isinstance(tokens, Tensor) else int(ids))  # type: ignore[misc]

    def _check_stream_read(self, method: str, args: dict[str, Any]) -> None:
        """Called by TL's ActivationCache methods on this model's caches (interp.tl.stream_reads), each call."""
        if method == "logit_attrs":
            if word := self._logit_attrs_word():
                warn_each_call(word, LogitAttrsWarning)
            return
        stream_reads.warn_unfolded(self, method, args, self.unfolded_fix)
        stream_reads.warn_unembed_bias(self, method, args)

    # ------------------------------------------------------------------ the routing W_Q @ W_K does not show

    def _warn_hidden_routing(self, what: str) -> None:
        blocks = cast(Any, self).blocks
        # A routing that replaces the scores where W_Q is zero (uniform) is what W_Q @ W_K = 0 shows.
        w_qs = (functools.partial(getattr, block.attn, "W_Q") for block in blocks)
        warn_hidden_routing(what, self.model_config, self.routing_applied_by, *w_qs)

    def _read_quietly(self, name: str) -> Any:
        """TL's `name` (W_Q, W_K, QK), warned here where it hides a routing; TL's reads inside it say nothing."""
        self._warn_hidden_routing(name)
        with routing_quiet():
            return getattr(super(), name)

    W_Q = property(lambda self: self._read_quietly("W_Q"))  # warned once here, not again per block
    W_K = property(lambda self: self._read_quietly("W_K"))
    QK = property(lambda self: self._read_quietly("QK"))  # TL's QK reads W_Q and W_K: quiet here


def model_from_checkpoint(ckpt: Checkpoint, device: str | torch.device | None = None) -> ResidualGPT:
    """The checkpoint's ResidualGPT in eval mode; weights must fit its config exactly (strict)."""
    model = ResidualGPT.from_checkpoint(ckpt)
    return (model.to(device) if device is not None else model).eval()


def resolve_source(source: Any, device: Any, caller: str) -> tuple[ResidualGPT, dict[str, Any], bool]:
    """(model, the checkpoint's extra state, whether the model is the caller's own) from what to_hooked_transformer
    and to_transformer_bridge take: a ResidualGPT (DDP's too; its model.cfg must be the one it was built with), a
    Checkpoint or a checkpoint path (model_from_checkpoint); anything else is a ToolkitError naming caller."""
    if isinstance(getattr(source, "module", None), ResidualGPT):  # DDP
        source = source.module
    if isinstance(source, ResidualGPT):  # its vocabulary, where from_checkpoint gave it one: the tokenizer
        check_config_unedited(source)  # an edited model.cfg would export another model than the weights compute
        return source, dict(source.vocab_state), True
    if isinstance(source, (str, os.PathLike)):
        source = load_checkpoint(source, map_location=device or "cpu")
    if not isinstance(source, Checkpoint):
        raise ToolkitError(
            f"{caller} takes a ResidualGPT, a Checkpoint or a checkpoint path, not {type(source).__name__}"
        )
    return model_from_checkpoint(source, device), dict(source.state), False

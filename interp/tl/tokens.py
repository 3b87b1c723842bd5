"""The exports' token boundary, shared by both majors (the 3.x HookedTransformer and the TL 4 bridge).

The char tokenizer's <|endoftext|> (BOS, EOS and PAD alike) has the id after the model's trained ones
(d_vocab_out = 65 on TinyShakespeare): it embeds as zeros and has no logit. So

    ids         at either export's embedding: an id outside the trained and the special ones is one TokenIdError
                (check_embedded_ids)
    BOS         put before the text (prepend_bos=True, or by hand) shifts every later position's logits:
                UntrainedTokenWarning (warn_bos, special_before_text)
    padding     after the text is harmless under the causal mask, but TransformerLens's loss gathers a
                log-prob at every target before it masks padding, and the pad id has no logit: loss_targets
                masks trailing padding as lm_cross_entropy_loss's attention_mask does and gives the mean over
                real targets (a special id left as a real target is one TokenIdError); logits and tokens of
                another batch or length are one ShapeError (check_loss_shapes)
    input       forward, run_with_cache and generate take text (a str, a list of str) or a tensor; a tuple, None,
                [], a list of ids or an array is one ArgumentError (check_model_input), where TL fails inside
    generate    its sampling options and return_type checked as ResidualGPT's (check_generate_options), its ids
                [batch, pos], eos_token_id an id of the vocabulary or a non-empty list of them (check_eos);
                on rows ending in padding appends after it: UntrainedTokenWarning (warn_generate_after_padding);
                past n_ctx both majors crop as nanoGPT does (generate_cropped), and decode as TL does (decoded)
    no tokenizer  text (to_tokens, to_string, to_str_tokens, forward, run_with_cache, generate) on an export made
                without one is one NoTokenizerError (require_tokenizer), where TL asserts; generate's stop_at_eos
                without an end-of-text id is one ConfigError naming stop_at_eos=False
    meta        tokens on the meta device hold no data: one ShapeError (refuse_meta) before TL's copy fails
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from interp.errors import (
    ArgumentError,
    ConfigError,
    NoTokenizerError,
    NoTokenizerWarning,
    ShapeError,
    TokenIdError,
    UntrainedTokenWarning,
    frame_module,
    warn,
    warn_each_call,
)
from interp.model.api import check_ids, check_sampling


def special_before_text(tokens: Tensor, trained: int) -> bool:
    """Whether a row holds an id >= trained (a special token) anywhere but in a run after its text: trailing
    padding is harmless under a causal mask, a special token first or before the text is not."""
    special = tokens >= trained
    if not bool(special.any()):
        return False
    if bool(special[..., 0].any()):
        return True
    text_at_or_after = (~special).flip(-1).long().cummax(-1).values.flip(-1).bool()
    return bool((special[..., :-1] & text_at_or_after[..., 1:]).any())


def bos_warning(tokenizer: Any, trained: int) -> str:
    """UntrainedTokenWarning's text for to_tokens(prepend_bos=True) on a model trained without BOS."""
    bos = tokenizer.bos_token_id
    row = (
        f"its embedding row (id {bos}) was never trained (zero)"
        if bos is not None and bos >= trained
        else f"id {bos} never started a training sequence"
    )
    return (
        f"prepend_bos=True puts {tokenizer.bos_token!r} before the prompt, but this model was trained without BOS "
        f"and {row}: every later position's logits shift. Leave prepend_bos off (the default)"
    )


def warn_bos(model: Any, prepend_bos: bool | None, trained: int) -> None:
    """UntrainedTokenWarning (bos_warning) where a call puts BOS before the text: prepend_bos, or where it is None
    the model's default_prepend_bos, on a model with a tokenizer."""
    if (model.cfg.default_prepend_bos if prepend_bos is None else prepend_bos) and model.tokenizer is not None:
        warn_at_user(bos_warning(model.tokenizer, trained), UntrainedTokenWarning)


def special_warning(trained: int) -> str:
    """UntrainedTokenWarning's text for tokens holding a special id before (or at the start of) the text."""
    return (
        f"tokens hold id(s) >= {trained} before other tokens: the tokenizer's special token(s), whose embeddings "
        f"are zero and were never trained (the model was trained on ids 0..{trained - 1}); every later position's "
        "logits shift (padding after the text, as to_tokens pads, does not)"
    )


def check_embedded_ids(tokens: Tensor, trained: int, limit: int) -> None:
    """Either export's embedding: TokenIdError for an id outside 0..limit-1 (the model's trained ids, then the
    tokenizer's special ids); a special id before the text warns UntrainedTokenWarning, unless to_tokens made the
    tokens (its BOS, which to_tokens warns for, or its padding)."""
    try:
        check_ids(tokens, limit, "tokens")
    except TokenIdError as e:
        special = f"; ids {trained}..{limit - 1} are the tokenizer's special tokens" if limit > trained else ""
        raise TokenIdError(f"{e} (the model was trained on ids 0..{trained - 1}{special})") from None
    if limit > trained and not getattr(tokens, "from_to_tokens", False) and special_before_text(tokens, trained):
        warn_at_user(special_warning(trained), UntrainedTokenWarning)


def loss_targets(
    tokens: Int[Tensor, "batch pos"], attention_mask: Tensor | None, n_logits: int, pad_id: int | None
) -> tuple[Tensor, Tensor | None]:
    """(tokens, attention_mask) for TransformerLens's lm_cross_entropy_loss where a target has no logit.

    Trailing pad ids (right padding, to_tokens' default here) are masked out of the loss, as TL masks padding
    through attention_mask, and replaced by id 0 only so that TL's gather stays in range (masked, they count
    for nothing): the loss is the mean over real targets, loss_per_token 0 at padding. A special id that would
    still be a target (inside the text) has no logit to score: one TokenIdError."""
    special = tokens >= n_logits
    if tokens.dim() != 2 or not bool(special[:, 1:].any()):
        return tokens, attention_mask
    if attention_mask is not None and attention_mask.dim() != 2:
        attention_mask = None  # a 4-d mask: only the targets' own 2-d mask is ours to build
    keep = torch.ones_like(tokens, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    if pad_id is not None:
        trailing = tokens.eq(pad_id).flip(-1).long().cumprod(-1).flip(-1).bool()
        keep = keep & ~trailing.to(keep.device)
    scored = special[:, 1:] & keep[:, 1:] & keep[:, :-1]
    if bool(scored.any()):
        row, pos = (int(i) for i in scored.nonzero()[0])
        raise TokenIdError(
            f"tokens: id {int(tokens[row, pos + 1])} at position {pos + 1} of row {row} is a loss target but a "
            f"special token with no logit (the model predicts ids 0..{n_logits - 1}); only padding after the text "
            "is left out of the loss: pass return_type='logits' and score the positions you mean"
        )
    return tokens.masked_fill(special, 0), keep.long()


def warn_unmasked_left_padding(arguments: dict[str, Any], tokenizer: Any, trained: int) -> None:
    """A forward's bound arguments, its tokens left-padded by to_tokens(padding_side="left"): TL masks that padding
    only when the call is given padding_side="left" too (or an attention_mask); without, every row attends to its
    zero pads. UntrainedTokenWarning at every such call."""
    side = arguments.get("padding_side")
    side = side if side in ("left", "right") else getattr(tokenizer, "padding_side", None)
    mask, tokens = arguments.get("attention_mask"), arguments.get("input")
    if mask is None:
        unmasked = side != "left"
    else:  # a mask given is TL's to use: it must leave out the leading pads (an all-ones one does not)
        pads = leading_special(tokens, trained)
        unmasked = pads is not None and mask.shape == pads.shape and bool((mask.bool() & pads.to(mask.device)).any())
    if unmasked:
        warn_each_call(
            "these tokens were left-padded by to_tokens(padding_side='left'), but this call does not mask the "
            "padding (TransformerLens masks left padding only when the call is given padding_side='left' too): "
            "every row attends to its pad tokens; pass padding_side='left' here",
            UntrainedTokenWarning,
        )


def check_model_input(input: Any, tokenizer: Any, what: str) -> None:
    """What forward, run_with_cache and generate take on either major: text (a str, or a non-empty list of str;
    without a tokenizer one NoTokenizerError) or a tensor (ids, or the embeddings or stream TL takes at places).
    Anything else is one ArgumentError, where TL fails inside: an AttributeError on a tuple, None or a number,
    an IndexError on [], the tokenizer's ValueError on a list of ids."""
    if isinstance(input, Tensor):
        if input.dim() == 0:  # TL indexes its positions
            raise ShapeError(f"{what} takes token ids [batch, pos] or [pos], got one number: torch.tensor([[id]])")
        return
    texts = isinstance(input, (list, tuple)) and all(isinstance(p, str) for p in input)
    if isinstance(input, str) or (texts and isinstance(input, list)):
        require_tokenizer(tokenizer, f"{what} on text")
        if input != []:
            return
    if isinstance(input, (list, tuple)) and not input:
        fix = "it is empty; give at least one text"
    elif texts:
        fix = "TransformerLens batches texts in a list: list(...)"
    elif isinstance(input, (list, tuple)):
        fix = "token ids go in a tensor, torch.tensor([[...]]) for [batch, pos]"
    elif hasattr(input, "__array__") and getattr(getattr(input, "dtype", None), "kind", "") in "iu":
        fix = "torch.as_tensor(...) makes its token ids a tensor"
    elif hasattr(input, "__array__"):
        fix = "texts go in a list of str, token ids in a tensor"
    else:
        fix = "give text or token ids [batch, pos]"
    name = type(input).__name__
    kind = f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"
    raise ArgumentError(f"{what} takes text (a str, or a list of str) or a tensor of token ids, not {kind}: {fix}")


def require_tokenizer(tokenizer: Any, what: str) -> None:
    """One NoTokenizerError where an export made without a tokenizer is asked for text (TL asserts, or fails on
    None.decode)."""
    if tokenizer is None:
        raise NoTokenizerError(
            f"{what} needs a tokenizer, and this export has none (made without a vocabulary): give it token ids, "
            "or export a checkpoint that records its vocabulary, or pass vocab= to the export"
        )


def check_eos(eos: Any, tokenizer: Any, d_vocab: int) -> None:
    """generate's eos_token_id where it stops there (stop_at_eos): an id of the vocabulary, or a non-empty list of
    them; None takes the tokenizer's, and without one it is a ConfigError naming stop_at_eos=False. TL fails
    inside on another kind ([]: an IndexError, 'a' or 2.0: torch's errors), and never stops at -1 or 999."""
    if eos is None:
        if getattr(tokenizer, "eos_token_id", None) is None:
            raise ConfigError(
                "generate stops at an end-of-text id (stop_at_eos=True, the default), and this export has no "
                "tokenizer to give one: pass stop_at_eos=False, or eos_token_id=<id>"
            )
        return
    n_ids = max(d_vocab, len(tokenizer)) if tokenizer is not None else d_vocab  # its special ids come last
    ids = list(eos) if isinstance(eos, (list, tuple)) else [eos]
    if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n_ids for i in ids):
        raise ConfigError(
            f"eos_token_id: an id in 0..{n_ids - 1} or a non-empty list of them, got {eos!r}; "
            "None takes the tokenizer's, and stop_at_eos=False stops nowhere"
        )


def eos_stops(arguments: dict[str, Any], tokenizer: Any) -> list[int]:
    """The ids generate stops at, its arguments checked (check_eos): none without stop_at_eos (TL's default is
    with), else eos_token_id or the tokenizer's."""
    if not arguments.get("stop_at_eos", True):
        return []
    eos = arguments.get("eos_token_id")
    eos = getattr(tokenizer, "eos_token_id", None) if eos is None else eos
    return [eos] if isinstance(eos, int) else list(eos or ())


def check_generate_options(
    arguments: dict[str, Any], return_types: tuple[str, ...], tokenizer: Any, d_vocab: int
) -> None:
    """Either major's generate, its arguments as bound (defaults where absent): its input (check_model_input;
    ids [batch, pos]), the sampling options as ResidualGPT.generate checks them (interp.model.api.check_sampling),
    eos_token_id (check_eos) and a return_type the major knows, one ToolkitError each (TL 3 would raise an
    AssertionError, TL 4 torch.cat's error or return tokens without a word); text without a tokenizer is a
    NoTokenizerError."""
    input = arguments.get("input", "")
    check_model_input(input, tokenizer, "generate")
    if isinstance(input, Tensor) and input.dim() == 1:  # TL indexes a batch it does not have
        raise ShapeError(f"generate takes token ids [batch, pos], got shape {tuple(input.shape)}: pass tokens[None]")
    if arguments.get("return_type") == "str":
        require_tokenizer(tokenizer, "generate with return_type='str'")
    if arguments.get("stop_at_eos", True):
        check_eos(arguments.get("eos_token_id"), tokenizer, d_vocab)
    check_sampling(arguments.get("max_new_tokens", 10), arguments.get("top_k"), arguments.get("top_p"))
    return_type = arguments.get("return_type", "input")
    if return_type not in return_types:
        raise ConfigError(f"return_type must be one of {', '.join(map(repr, return_types))}, got {return_type!r}")


def check_loss_shapes(logits: Any, tokens: Any) -> None:
    """loss_fn's logits [*, pos, vocab] and tokens [*, pos] of one batch and length: TransformerLens's gather
    would score only the rows and positions they share, without a word, or fail inside torch."""
    if isinstance(logits, Tensor) and isinstance(tokens, Tensor) and logits.shape[:-1] != tokens.shape:
        raise ShapeError(
            f"loss_fn: logits {tuple(logits.shape)} and tokens {tuple(tokens.shape)} are not of one batch and length "
            "(logits [batch, pos, vocab], tokens [batch, pos]): pass the tokens the logits were computed from"
        )


def warn_generate_after_padding(tokens: Any, trained: int) -> None:
    """generate on token rows that end in special ids (>= trained: the padding to_tokens puts after a shorter
    text, or an <|endoftext|>): TransformerLens appends each new token after them, so such a row continues from
    its padding, at positions past it, not from its text. UntrainedTokenWarning at every such call."""
    if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.shape[-1] == 0:
        return
    if ends := (tokens[:, -1] >= trained).nonzero()[:, 0].tolist():
        rows = ", ".join(map(str, ends[:5])) + (", ..." if len(ends) > 5 else "")
        warn_each_call(
            f"generate: row(s) {rows} of these tokens end in special id(s) (>= {trained}: the padding to_tokens "
            "puts after a shorter text, or an <|endoftext|>); each new token goes after them, so those rows "
            "continue from their padding, at positions past it, not from their text: pass the prompts as a list "
            "of strings, or generate each row alone without its padding",
            UntrainedTokenWarning,
        )


def generate_cropped(
    step: Callable[[Tensor, int], Any], tokens: Tensor, n_new: int, n_ctx: int, stops: list[int] | None = None
) -> Tensor:
    """tokens [batch, pos] and n_new more, each from the last n_ctx tokens (nanoGPT's crop, as ResidualGPT.generate);
    step(tokens, n) is TL's generate of n tokens, returning tokens. A row that made one of `stops` goes on with
    stops[0] (padding, as TL's stop_at_eos) until every row has one."""
    n_prompt = tokens.shape[1]
    out = tokens
    finished = torch.zeros(out.shape[0], dtype=torch.bool, device=out.device)
    first = max(0, min(n_new, n_ctx - n_prompt))
    if first:  # up to n_ctx: TL's generate (its kv cache) as it is
        out = step(out, first)
        if stops:
            finished |= torch.isin(out[:, n_prompt:], torch.tensor(stops, device=out.device)).any(-1)
    while out.shape[1] - n_prompt < n_new and not (stops and bool(finished.all())):
        new = step(out[:, -n_ctx:], 1)[:, -1:].clone()
        if stops:
            new[finished] = stops[0]
            finished |= torch.isin(new[:, 0], torch.tensor(stops, device=out.device))
        out = torch.cat([out, new], dim=1)
    return out


def decoded(tokenizer: Any, tokens: Tensor) -> str | list[str]:
    """generate's text, as TL's: each row decoded without its special tokens; one row's text alone. No tokenizer
    (return_type="str" asked of tokens) is an AttributeError, as TL's."""
    texts = [tokenizer.decode(row, skip_special_tokens=True) for row in tokens]
    return texts[0] if len(texts) == 1 else texts


def leading_special(tokens: Any, trained: int) -> Tensor | None:
    """Where each row's leading run of special ids (>= trained: left padding, a BOS) stands; None for no 2-d ids."""
    if not isinstance(tokens, Tensor) or tokens.dim() != 2:
        return None
    return (tokens >= trained).long().cumprod(-1).bool()


def refuse_meta(tokens: Any) -> None:
    """Tokens on the meta device (shapes only, no data): one line where TL's copy to the model fails obscurely."""
    if isinstance(tokens, Tensor) and tokens.device.type == "meta":
        raise ShapeError(
            f"tokens: on the meta device, which holds shapes but no data (shape {tuple(tokens.shape)}); build the "
            "token ids on a real device (torch.tensor(ids), or model.to_tokens(text))"
        )


_LIBRARIES = ("interp", "transformer_lens", "torch", "functools", "contextlib", "transformers")


def warn_at_user(message: str, category: type[Warning]) -> None:
    """warnings.warn attributed to the first calling line outside the toolkit, TransformerLens and torch (a
    bridge component warns from deep in TL 4's forward); Python's filters decide how often it shows."""
    frame, level = sys._getframe(1), 2  # stacklevel 2: the caller of this function
    while frame.f_back is not None and frame_module(frame).split(".")[0] in _LIBRARIES:
        frame, level = frame.f_back, level + 1
    warn(message, category, stacklevel=level)  # interp.errors.warn: a line Python's warn cannot take warns too


def warn_no_tokenizer(why_not: str | None) -> None:
    """Both majors' exports made without a tokenizer say so, at the user's line."""
    warn_at_user(f"no tokenizer attached: {why_not}; the model takes token tensors only", NoTokenizerWarning)

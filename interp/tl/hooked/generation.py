"""generate on the 3.x export: TransformerLens's, with ResidualGPT's answers where TL's would be wrong or fail.

past n_ctx      the prompt is cropped to its last n_ctx tokens at every step, as ResidualGPT.generate and
                nanoGPT do (TL would index past W_pos); a list of prompts past it runs one at a time
max_new_tokens=0
                the prompt (TL's ends in torch.cat's ValueError)
an empty prompt one ShapeError, as on ResidualGPT (TL's ends in an IndexError)
padding         left padding without padding_side='left', and rows that end in padding: a warning each call
key-value cache left off where TL 3.9 would misplace positions with it (no tokenizer, or embeddings given)
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from transformer_lens import HookedTransformer

from interp.errors import ConfigError, ShapeError
from interp.model.next_token import tl_temperature
from interp.tl.tokens import (
    check_generate_options,
    decoded,
    eos_stops,
    generate_cropped,
    warn_bos,
    warn_generate_after_padding,
    warn_unmasked_left_padding,
)

_GENERATE = inspect.signature(HookedTransformer.generate)


def refuse_empty(input: Any) -> None:
    """One ShapeError for an input with no positions, as ResidualGPT's (TL's answers are empty or an IndexError)."""
    if isinstance(input, (str, list)):
        raise ShapeError(f"input {input!r:.40} has no tokens; give at least one character (ResidualGPT refuses it too)")
    shape = tuple(input.shape) if isinstance(input, torch.Tensor) else None
    raise ShapeError(f"tokens: no positions (shape {shape}); give at least one token per row")


def _cache_misplaces_positions(bound: inspect.BoundArguments, tokenizer: Any) -> bool:
    """TL 3.9's generate with its key-value cache and no attention mask (no tokenizer, or embeddings given)
    offsets W_pos by the cached length across the whole sequence: wrong tokens, or a false n_ctx refusal. The
    cache is then left off, which computes what ResidualGPT.generate does."""
    given = bound.arguments.get("input", "")
    embeds = isinstance(given, torch.Tensor) and given.ndim == 3
    return bound.arguments.get("use_past_kv_cache", True) and (tokenizer is None or embeds)


class ExportGenerate(HookedTransformer):
    """The export's generate (ExportedHookedTransformer's base; see the module docstring)."""

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """TransformerLens's generate; past n_ctx, nanoGPT's crop to the last n_ctx tokens at every step.

        Within n_ctx this is TL's generate unchanged. Past it each new token is
        sampled (with the same options) from the last n_ctx tokens, as in
        ResidualGPT.generate; freq_penalty then counts those tokens only.
        """
        bound = _GENERATE.bind(self, *args, **kwargs)
        if tl_temperature(bound):  # NaN, inf, < 0 refused; a tiny one greedy, not TL's NaN traceback
            args, kwargs = bound.args[1:], bound.kwargs
        if _cache_misplaces_positions(bound, self.tokenizer):
            bound.arguments["use_past_kv_cache"] = False
            args, kwargs = bound.args[1:], bound.kwargs
        bound.apply_defaults()
        a = dict(bound.arguments)
        text, n_new = a["input"], a["max_new_tokens"]
        if getattr(text, "from_to_tokens", None) == "left":  # TL's generate hands forward a copy: checked here
            warn_unmasked_left_padding(a, self.tokenizer, self.cfg.d_vocab_out)
        warn_generate_after_padding(text, self.cfg.d_vocab_out)
        check_generate_options(a, ("input", "str", "tokens", "embeds"), self.tokenizer, self.cfg.d_vocab)
        empty = isinstance(text, torch.Tensor) and text.ndim == 2 and text.shape[-1] == 0
        if isinstance(text, str) and not text:  # "" is TL's default input; with a BOS it is one token
            empty = HookedTransformer.to_tokens(self, text, prepend_bos=a["prepend_bos"]).shape[-1] == 0
        if empty:
            refuse_empty(text)  # TL's generate would end in an IndexError
        if n_new == 0 and not a.get("generation_kwargs"):  # TL's would end in torch.cat's ValueError
            return self._prompt_only(text, a)
        if isinstance(text, torch.Tensor) and text.ndim == 3 or a.get("generation_kwargs"):
            return super().generate(*args, **kwargs)  # embeddings, HF extras: TL's own n_ctx check applies
        if isinstance(text, list) and len(text) == 1:
            text = text[0]
        if isinstance(text, list):
            whole = [
                HookedTransformer.to_tokens(self, p, prepend_bos=a["prepend_bos"], truncate=False).shape[-1]
                for p in text
            ]
            if max(whole) + n_new <= self.cfg.n_ctx:
                return super().generate(*args, **kwargs)  # TL's, as it is
            options = {k: v for k, v in a.items() if k not in ("self", "input", "generation_kwargs")}
            return self._generate_each(text, options)  # generation_kwargs went to TL's generate above
        if isinstance(text, str):
            tokens = HookedTransformer.to_tokens(  # whole: a prompt past n_ctx is cropped below, as model.generate's
                self, text, prepend_bos=a["prepend_bos"], padding_side=a["padding_side"], truncate=False
            )
        else:
            tokens = text
        if tokens.shape[-1] + n_new <= self.cfg.n_ctx:
            return super().generate(*args, **kwargs)
        if isinstance(text, str):
            warn_bos(self, a["prepend_bos"], self.cfg.d_vocab_out)
        return self._generate_cropped(tokens, n_new, a, as_text=isinstance(text, str))

    def _prompt_only(self, text: Any, a: dict[str, Any]) -> Any:
        """generate with max_new_tokens=0: the prompt, as TL's generate returns its output (ResidualGPT's does)."""
        return_type = a["return_type"]
        if isinstance(text, torch.Tensor) and text.ndim == 3:  # embeddings: TL returns the new tokens only
            if return_type in ("input", "embeds"):
                return text
            tokens = torch.zeros(text.shape[0], 0, dtype=torch.long, device=text.device)
        else:
            if isinstance(text, (str, list)):
                warn_bos(self, a["prepend_bos"], self.cfg.d_vocab_out)
            many = isinstance(text, list) and len(text) > 1  # TL's generate pads a list on the left
            if isinstance(text, torch.Tensor):
                tokens = text
            else:
                side: Any = "left" if many else a["padding_side"]
                tokens = HookedTransformer.to_tokens(self, text, prepend_bos=a["prepend_bos"], padding_side=side)
            if return_type == "input":
                return_type = "str" if isinstance(text, (str, list)) else "tokens"
        if return_type == "embeds":
            return self.embed(tokens)
        if return_type == "str":
            return decoded(self.tokenizer, tokens)  # a tokenizer: check_generate_options refused text without one
        return tokens

    def _generate_each(self, prompts: list[str], options: dict[str, Any]) -> Any:
        """A list of prompts past n_ctx: each cropped as one prompt is; strings, or tokens where lengths agree."""
        return_type = options["return_type"]
        outs = [self.generate(p, **{**options, "verbose": False}) for p in prompts]
        if return_type in ("input", "str"):
            return outs
        if return_type == "tokens" and len({o.shape[-1] for o in outs}) == 1:
            return torch.cat(outs)
        raise ConfigError(
            f"generate on a list of prompts past n_ctx ({self.cfg.n_ctx}) runs them one at a time (each cropped to "
            f"its last n_ctx tokens) and returns strings, or tokens of equal lengths; return_type={return_type!r} "
            "of prompts of unequal lengths: call generate on each prompt"
        )

    def _generate_cropped(self, tokens: torch.Tensor, n_new: int, a: dict[str, Any], as_text: bool) -> Any:
        return_type = a["return_type"]
        if return_type == "input":
            return_type = "str" if as_text else "tokens"
        if return_type not in ("str", "tokens"):
            raise ConfigError(f"generate past n_ctx ({self.cfg.n_ctx}) returns tokens or text, not {return_type!r}")
        sampling = ("do_sample", "top_k", "top_p", "temperature", "freq_penalty")
        options = {k: a[k] for k in ("stop_at_eos", "eos_token_id", *sampling, "use_past_kv_cache")}
        stops = eos_stops(a, self.tokenizer)
        step = functools.partial(super().generate, return_type="tokens", verbose=False, **options)  # (tokens, n)
        out = generate_cropped(step, tokens.to(self.cfg.device), n_new, self.cfg.n_ctx, stops)
        return decoded(self.tokenizer, out) if return_type == "str" else out

"""generate on the TL 4 bridge: TransformerLens 4's, with ResidualGPT's answers where TL's would differ or fail.

a list of prompts of unequal lengths, or past n_ctx
                one prompt at a time (TL 4 left-pads, and ResidualGPT has no position offsets)
past n_ctx      each new token from the last n_ctx tokens (nanoGPT's crop, as ResidualGPT.generate)
max_new_tokens=0
                the prompt (TL's ends in torch.cat's ValueError)
temperature     checked as ResidualGPT.generate's, and max_new_tokens, top_k, top_p and return_type as both majors'
                exports check them (interp.tl.tokens.check_generate_options); rows that end in padding warn at each call
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, cast

import torch
from transformer_lens.model_bridge import TransformerBridge

from interp.errors import ConfigError
from interp.model.gpt import ResidualGPT
from interp.model.next_token import tl_temperature
from interp.tl.tokens import check_generate_options, decoded, eos_stops, generate_cropped, warn_generate_after_padding


class BridgeGenerate(TransformerBridge):
    """ResidualBridge's base: the bridged ResidualGPT and generate (see the module docstring)."""

    @property
    def residual_gpt(self) -> ResidualGPT:
        return cast(ResidualGPT, self.original_model.gpt)  # BridgeHost.gpt

    def generate(self, input: Any = "", *args: Any, **kwargs: Any) -> Any:
        """TL 4's generate; a list of prompts of unequal token lengths, or past n_ctx, runs one prompt at a time.

        TL 4 left-pads such a batch, and ResidualGPT has no position offsets for
        padding: each prompt alone gives what ResidualGPT.generate gives it, past
        n_ctx cropped to its last n_ctx tokens at each step. A temperature is checked as ResidualGPT.generate's
        (NaN, inf, < 0 refused) and a tiny one samples greedily instead of ending in TL's NaN traceback.
        """
        input, args, kwargs = self._checked_temperature(input, args, kwargs)
        warn_generate_after_padding(input, self.residual_gpt.cfg.d_vocab)
        n_new = args[0] if args else kwargs.get("max_new_tokens", 10)
        if n_new == 0:
            return self._prompt_only(input, args[1:], kwargs)
        if isinstance(input, (list, tuple)) and len(input) > 1 and all(isinstance(p, str) for p in input):
            prepend_bos = kwargs.get("prepend_bos")
            lengths = [self.to_tokens(p, prepend_bos=prepend_bos, truncate=False).shape[-1] for p in input]
            past = max(lengths) + n_new > self.residual_gpt.cfg.n_ctx
            if len(set(lengths)) > 1 or past:
                batched = [k for k in ("output_logits", "return_cache", "return_input_tokens") if kwargs.get(k)]
                if kwargs.get("return_type", "input") not in ("input", "str") or batched:
                    why = "past n_ctx" if past else "of unequal lengths"
                    raise ConfigError(
                        f"generate on prompts {why} runs them one at a time and returns a list of "
                        f"strings; it cannot give return_type={kwargs.get('return_type')!r} "
                        f"{' / '.join(batched)}: call generate on each prompt instead"
                    )
                return [self._generate_cropping(p, *args, **kwargs) for p in input]
        return self._generate_cropping(input, *args, **kwargs)

    def _prompt_only(self, input: Any, args: tuple, kwargs: dict) -> Any:
        """generate with max_new_tokens=0: the prompt, as ResidualGPT.generate returns it (TL's generate ends in
        torch.cat's ValueError), in the form TL's return_type asks for."""
        extras = [k for k in ("output_logits", "return_cache", "return_input_tokens") if kwargs.get(k)]
        return_type = kwargs.get("return_type", "input")
        if args or extras or return_type not in ("input", "str", "tokens"):
            raise ConfigError(
                "generate with max_new_tokens=0 returns the prompt alone (as text or tokens, by return_type); "
                f"it has no {' / '.join(extras) or 'such option'} to give: run the model on the prompt instead"
            )
        if isinstance(input, torch.Tensor):
            tokens = input if input.ndim == 2 else input[None]
        else:  # text, or a list of texts: TL's tokenization, as generate's
            kw = {k: kwargs[k] for k in ("prepend_bos", "padding_side") if k in kwargs}
            tokens = self.to_tokens(input, truncate=False, **kw)
        if return_type == "tokens" or (return_type == "input" and isinstance(input, torch.Tensor)):
            return tokens
        return decoded(self.tokenizer, tokens)  # a str is one row: its text

    def _checked_temperature(self, input: Any, args: tuple, kwargs: dict) -> tuple[Any, tuple, dict]:
        try:
            bound = inspect.signature(super().generate).bind(input, *args, **kwargs)
        except TypeError:  # TL's own call error says it
            return input, args, kwargs
        check_generate_options(bound.arguments, ("input", "str", "tokens"), self.tokenizer, self.cfg.d_vocab)
        if not tl_temperature(bound):
            return input, args, kwargs
        return bound.args[0], bound.args[1:], bound.kwargs

    def _generate_cropping(self, input: Any, max_new_tokens: int = 10, *args: Any, **kwargs: Any) -> Any:
        """TL 4's generate; past n_ctx, each new token from the last n_ctx tokens (nanoGPT's crop, as
        ResidualGPT.generate and the 3.x export). Only one prompt (text or tokens) returning text or tokens."""
        n_ctx = self.residual_gpt.cfg.n_ctx
        return_type = kwargs.get("return_type", "input")
        if isinstance(input, str):
            tokens = self.to_tokens(input, prepend_bos=kwargs.get("prepend_bos"), truncate=False)  # cropped below
        elif isinstance(input, torch.Tensor) and input.ndim in (1, 2):
            tokens = input if input.ndim == 2 else input[None]
        else:
            tokens = None
        extras = [k for k in ("output_logits", "return_cache", "return_input_tokens") if kwargs.get(k)]
        plain_call = not args and not extras and return_type in ("input", "str", "tokens")
        if tokens is None or not plain_call or tokens.shape[0] != 1 or tokens.shape[-1] + max_new_tokens <= n_ctx:
            return super().generate(input, max_new_tokens, *args, **kwargs)
        step_kwargs = {k: v for k, v in kwargs.items() if k not in ("return_type", "prepend_bos")}
        step_kwargs["verbose"] = False
        step = functools.partial(super().generate, return_type="tokens", **step_kwargs)  # (tokens, n): tokens
        out = generate_cropped(step, tokens, max_new_tokens, n_ctx, eos_stops(kwargs, self.tokenizer))
        as_text = return_type == "str" or (return_type == "input" and isinstance(input, str))
        return decoded(self.tokenizer, out) if as_text else out  # one row: its text

"""Which TransformerLens major is installed (light: no transformer_lens import).

    TL 3.x   interp.to_hooked_transformer -> HookedTransformer (interp.tl.hooked)
    TL 4.x   interp.to_transformer_bridge -> TransformerBridge (interp.tl.bridge)

interp.tl.load.load_tl returns whichever the installed major has. TL 4 removed
HookedTransformer; interp.tl.hooked calls require_tl3() before it imports it, so on
4.x `import interp.tl.hooked` (and interp.to_hooked_transformer, save_hooked,
load_hooked) is a ToolkitError that names to_transformer_bridge, instead of TL's
ImportError deep inside an import.
"""

from __future__ import annotations

from importlib.metadata import version

from interp.errors import ConfigError, ToolkitError

TL_VERSION = version("transformer-lens")
TL_MAJOR = int(TL_VERSION.split(".")[0])


class NeedsTransformerLens3(ToolkitError, ImportError):
    """A TransformerLens 3.x-only path (HookedTransformer) asked for under TransformerLens 4."""


def tl_config_fields(cfg, n_special: int = 0) -> dict:
    """The TransformerLens config fields (3.x HookedTransformerConfig and 4.x TransformerBridgeConfig alike)
    that describe a ResidualGPT of ModelConfig cfg; n_special tokenizer specials get ids after the model's."""
    return dict(
        n_layers=cfg.n_layers,
        d_model=cfg.d_model,
        n_ctx=cfg.n_ctx,
        d_head=cfg.d_head,
        n_heads=cfg.n_heads,
        d_mlp=cfg.d_mlp,
        d_vocab=cfg.d_vocab + n_special,
        d_vocab_out=cfg.d_vocab,
        act_fn="gelu",  # exact erf GELU, as F.gelu in ResidualGPT
        normalization_type="LN",
        eps=1e-5,
        positional_embedding_type="standard",
        default_prepend_bos=False,  # trained without BOS
        model_name=f"residual-gpt(residual={cfg.residual}, mixer={cfg.mixer}, self_bias={cfg.self_bias:g})",
    )


def refuse_past_context(n: int, n_ctx: int, tokenizer: object) -> None:
    """to_tokens with truncate=True (TransformerLens's default) of a prompt past n_ctx, on either major: TL would
    keep its first n_ctx tokens without a word; here one line that names the option."""
    if n > n_ctx:
        unit = "characters" if getattr(tokenizer, "chars", None) is not None else "tokens"
        raise ConfigError(
            f"prompt of {n} {unit} exceeds the context of {n_ctx} tokens (TransformerLens's to_tokens, "
            f"truncate=True, would cut it to its first {n_ctx} silently); shorten it, or pass truncate=False to "
            "keep it whole (generate crops to the last n_ctx tokens at each step; a forward pass refuses it)"
        )


def refuse_past_n_ctx(n: int, n_ctx: int) -> None:
    """A forward pass of n positions on either major's export: past n_ctx one ConfigError (TL would index past
    W_pos), naming generate's budget."""
    if n > n_ctx:
        raise ConfigError(
            f"sequence length {n} exceeds n_ctx {n_ctx}; with generate, ask for at most n_ctx minus the prompt "
            "length new tokens (ResidualGPT.generate crops to the last n_ctx tokens instead)"
        )


def require_tl3() -> None:
    """Raise NeedsTransformerLens3 unless TransformerLens 3.x (which has HookedTransformer) is installed."""
    if TL_MAJOR >= 4:
        raise NeedsTransformerLens3(
            f"to_hooked_transformer / save_hooked / load_hooked (interp.tl.hooked) need TransformerLens 3.x "
            f"(HookedTransformer), but transformer-lens {TL_VERSION} is installed, which removed it: use "
            "interp.to_transformer_bridge (or interp.load_tl, which picks the installed major), or install "
            "'transformer-lens>=3.9,<4'"
        )


__all__ = ["TL_MAJOR", "TL_VERSION", "NeedsTransformerLens3", "refuse_past_context", "refuse_past_n_ctx", "require_tl3"]

"""ResidualGPT: a Pre-LN GPT whose attention and FFN residual paths can each be removed.

    resid_mid  = (resid_pre if attn_residual else 0) + attn(ln1(resid_pre))
    resid_post = (resid_mid if ffn_residual  else 0) + mlp(ln2(resid_mid))

Every intermediate passes through a TransformerLens HookPoint with TL's name, so
run_with_cache / run_with_hooks / hooks() work as on a HookedTransformer:
run_with_cache returns TL's ActivationCache (`cache["resid_pre", 0]`), and
model.cfg carries the few HookedTransformerConfig attributes TL's helpers read
(device, n_key_value_heads, normalization_type, ...), so transformer_lens.patching
runs on a ResidualGPT. generate() is nanoGPT's.
"""

from __future__ import annotations

import math
import warnings
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import ActivationCache, HookedRootModule  # the top-level name on TL 3.9+ and 4.x
from transformer_lens.hook_points import HookPoint

from interp.config.model_config import ModelConfig
from interp.config.registry import mixer_spec
from interp.errors import ArgumentError, ConfigError, HookNames, ScopedFlag, ToolkitError, TrainModeWarning, warn
from interp.model.activation_cache import ResidualActivationCache
from interp.model.api import (
    BoundaryHooks,
    check_config_unedited,
    check_forward_inputs,
    check_generate_args,
    check_ids,
    check_targets,
)
from interp.model.dropout import DropoutStream, StreamDropout, number_sites
from interp.model.eval_mode import eval_mode
from interp.model.next_token import next_token
from interp.model.sublayers import MLP, LayerNorm


class EditableHookPoint(HookPoint):
    """A HookPoint whose hooks may edit the value in place with gradients on (the Main Demo's v[:, :, h] = 0).

    Autograd refuses an in-place edit of a view of a multi-output op (q, k, v split from one projection); TL's
    own values are not such views, so there the edit works. While a forward hook is attached and autograd
    records the value, a view is handed on as a copy; with no hook, or no gradient, it passes as it is.
    """

    def forward(self, x: Any) -> Any:
        if self._forward_hooks and isinstance(x, Tensor) and x.requires_grad and x._is_view():
            return x.clone()
        return x


class Block(nn.Module):
    # Set with setattr in __init__; declared so the checker sees HookPoints, not nn.Module.__getattr__'s Tensor.
    hook_resid_pre: HookPoint
    hook_attn_out: HookPoint
    hook_resid_mid: HookPoint
    hook_mlp_out: HookPoint
    hook_resid_post: HookPoint

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.ln1 = LayerNorm(cfg)
        self.attn = mixer_spec(cfg.mixer)(cfg)  # the registered mixer class (interp.config.registry)
        self.ln2 = LayerNorm(cfg)
        self.mlp = MLP(cfg)
        self.resid_dropout = StreamDropout(cfg.dropout, slots=2)  # slot 0 after attention, 1 after the MLP
        for name in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
            setattr(self, f"hook_{name}", HookPoint())

    def forward(self, resid_pre: Float[Tensor, "b p d"]) -> Float[Tensor, "b p d"]:
        gain = self.cfg.runtime_gain
        resid_pre = self.hook_resid_pre(resid_pre)
        attn_out = self.resid_dropout(self.attn(self.ln1(resid_pre)))
        attn_out = self.hook_attn_out(attn_out * gain if gain != 1.0 else attn_out)
        resid_mid = self.hook_resid_mid(resid_pre + attn_out if self.cfg.attn_residual else attn_out)
        mlp_out = self.resid_dropout(self.mlp(self.ln2(resid_mid)), 1)
        mlp_out = self.hook_mlp_out(mlp_out * gain if gain != 1.0 else mlp_out)
        return self.hook_resid_post(resid_mid + mlp_out if self.cfg.ffn_residual else mlp_out)


# HookedTransformerConfig attributes that TransformerLens's helpers (patching,
# ActivationCache) read from model.cfg, with their value for every ResidualGPT.
_TL_CONSTANTS = dict(
    n_key_value_heads=None,
    attn_only=False,
    normalization_type="LN",
    positional_embedding_type="standard",
    default_prepend_bos=False,
    original_architecture="ResidualGPT",
)


def _bound_config(cfg: ModelConfig, device: torch.device) -> ModelConfig:
    """A private copy of cfg that also answers TL's cfg.device, cfg.d_vocab_out, ...

    They are plain attributes, not dataclass fields: equality, to_dict() and
    replace() see the ModelConfig alone.
    """
    bound = cfg.replace()
    for name, value in {**_TL_CONSTANTS, "d_vocab_out": cfg.d_vocab, "device": device}.items():
        object.__setattr__(bound, name, value)
    return bound


# HookedTransformer attributes in TL's weight layout that a ResidualGPT lacks (its weights are nn.Linear's).
_TL_WEIGHT_NAMES = frozenset(
    "W_Q W_K W_V W_O b_Q b_K b_V b_O W_in W_out b_in b_out W_E W_pos W_U b_U W_E_pos QK OV accumulated_bias "
    "all_head_labels".split()
)


class TLLayoutError(ToolkitError, AttributeError):
    """A HookedTransformer weight (W_O, QK, ...) asked of a ResidualGPT (an AttributeError too, for hasattr)."""


# Set where hooks in train mode are meant (training-time probes) or already warned about (run_with_cache).
_TRAIN_HOOKS_QUIET = ScopedFlag("train_hooks_quiet")


def train_mode_hooks_expected() -> AbstractContextManager[None]:
    """No TrainModeWarning for hooks inside: a probe that reads activations during training on purpose."""
    return _TRAIN_HOOKS_QUIET.raised()


class ResidualGPT(BoundaryHooks, HookedRootModule):
    """The residual-ablation GPT. `forward(tokens)` -> logits; with targets, (logits, loss).

    What a call hands it is checked at the boundary (interp.model.api): tokens, hook names and hook returns.
    """

    def __init__(self, cfg: ModelConfig):
        if not isinstance(cfg, ModelConfig):  # a dict or TL's config would fail deep inside with no hint
            raise ArgumentError(
                f"cfg: ResidualGPT takes a ModelConfig (ModelConfig(**fields) or ModelConfig.from_dict(d)), "
                f"not {type(cfg).__name__}"
            )
        super().__init__()
        self.cfg = _bound_config(cfg, torch.device("cpu"))
        self._cfg_built = (self.cfg, cfg.to_dict())  # what the blocks compute: an edited model.cfg is refused
        self.embed = nn.Embedding(cfg.d_vocab, cfg.d_model)
        self.pos_embed = nn.Embedding(cfg.n_ctx, cfg.d_model)
        self.embed_dropout = StreamDropout(cfg.dropout)
        self.hook_embed = HookPoint()
        self.hook_pos_embed = HookPoint()
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_final = LayerNorm(cfg)
        self.unembed = nn.Linear(cfg.d_model, cfg.d_vocab, bias=False)
        if cfg.tie_embeddings:
            self.unembed.weight = self.embed.weight
        # The vocabulary, as a checkpoint's state names it: {"vocab": [chars]} or {"encoding": "gpt2"}
        # (from_checkpoint sets it); generate() then takes and returns text.
        self.vocab_state: dict[str, Any] = {}
        self._init_weights()
        self._dropout_slot, self.n_dropout_sites = number_sites(self)  # interp.model.dropout: mask sites, one stream
        for module in self.modules():  # the mixers' too (a registered mixer makes plain HookPoints)
            if type(module) is HookPoint:
                module.__class__ = EditableHookPoint
        self.setup()

    def set_dropout_stream(self, stream: DropoutStream | None) -> None:
        """Draw every dropout mask from `stream` (the Trainer sets the run's; interp.model.dropout), or with None from
        torch's global generator, as nn.Dropout does."""
        self._dropout_slot.stream = stream

    @property
    def dropout_stream(self) -> DropoutStream | None:
        return self._dropout_slot.stream

    def setup(self) -> None:
        super().setup()
        self.mod_dict = HookNames(self.mod_dict, self.cfg.n_layers)  # a hook name it lacks: one clear error

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name in _TL_WEIGHT_NAMES:
                raise TLLayoutError(
                    f"ResidualGPT has no {name} (TransformerLens's weight layout): read it from "
                    f"interp.to_hooked_transformer(model).{name}, or use interp.reading.decompose for per-head terms"
                ) from None
            raise

    def _init_weights(self) -> None:
        # nanoGPT's init: N(0, std) everywhere, std/sqrt(2L) on what writes into the residual.
        std = self.cfg.init_std
        for name, p in self.named_parameters():
            if name.endswith(("ln1.w", "ln2.w", "ln_final.w")):
                nn.init.ones_(p)
            elif p.dim() == 1:
                nn.init.zeros_(p)
            elif name.endswith("out_proj.weight"):
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * self.cfg.n_layers))
            else:
                nn.init.normal_(p, 0.0, std)

    def forward(
        self, tokens: Int[Tensor, "batch pos"], targets: Int[Tensor, "batch pos"] | None = None
    ) -> Float[Tensor, "batch pos d_vocab"] | tuple[Float[Tensor, "batch pos d_vocab"], Tensor]:
        self._check_forward(tokens, targets)
        n = tokens.shape[-1]
        embed = self.hook_embed(self._embedded(tokens))
        pos = self.pos_embed(torch.arange(n, device=tokens.device)).expand(tokens.shape[0], n, -1)
        pos = self.hook_pos_embed(pos)  # [batch, pos, d_model] as in TransformerLens
        resid = self.embed_dropout(embed + pos)
        for block in self.blocks:
            resid = block(resid)
        logits = self.unembed(self.ln_final(resid))
        return logits if targets is None else (logits, self._loss(logits, targets))

    def _check_forward(self, tokens: Tensor, targets: Tensor | None) -> None:
        """Every check of a forward call, before it computes: a hooked call in train mode warned, an edited cfg
        refused, tokens and targets checked (ids outside the vocabulary too, in eval mode: analysis)."""
        if self.training and self.cfg.dropout > 0 and not _TRAIN_HOOKS_QUIET and self._any_hook():
            # run_with_hooks, hooks(), add_hook, transformer_lens.patching: once per call site, not per forward
            warnings.warn(
                f"a hooked forward in train mode with dropout={self.cfg.dropout:g}: every hooked activation and "
                "patching result is off by a random amount (two identical calls differ); call model.eval() first",
                TrainModeWarning,
                stacklevel=3,
            )
        check_config_unedited(self, deep=False)
        check_forward_inputs(tokens, targets, self.cfg.n_ctx, getattr(self.cfg, "device", None))
        # In training the embedding's IndexError is diagnosed instead (_embedded), free. A TransformerLens 4 bridge
        # swaps self.embed for its own component, which embeds its tokenizer's specials (ids >= d_vocab) as zeros:
        # the check is the plain embedding's.
        if isinstance(self.embed, nn.Embedding) and not self.training:
            check_ids(tokens, self.cfg.d_vocab)

    def _embedded(self, tokens: Tensor) -> Tensor:
        """The token embedding; an id outside the vocabulary is a TokenIdError, not the embedding's IndexError (a
        GPU would only assert)."""
        try:
            return self.embed(tokens)
        except IndexError:
            check_ids(tokens, self.cfg.d_vocab)
            raise

    def _loss(self, logits: Tensor, targets: Tensor) -> Tensor:
        """nanoGPT's loss: cross-entropy with ignore_index=-1 (a target of -1 is masked out)."""
        try:
            return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-1)
        except IndexError:  # a target outside the vocabulary: diagnosed here, free on the training path
            check_targets(targets, self.cfg.d_vocab)
            raise

    def _any_hook(self) -> bool:
        """A hook anywhere: TL's hook points, or register_forward_hook / nnsight on any submodule."""
        return any(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks for m in self.modules())

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        object.__setattr__(self.cfg, "device", self.embed.weight.device)  # as TL's model.to() updates cfg.device
        return out

    def run_with_cache(
        self, *model_args, return_cache_object: bool = True, remove_batch_dim: bool = False, **kwargs
    ) -> tuple[Any, ActivationCache | dict[str, Tensor]]:
        """(output, cache) as HookedTransformer.run_with_cache: an ActivationCache unless return_cache_object=False."""
        if self.training and self.cfg.dropout > 0:
            warn(
                f"run_with_cache in train mode with dropout={self.cfg.dropout:g}: every cached activation (and "
                "interp.reading.decompose of it) is off by a random amount; call model.eval() first (from_checkpoint, "
                "to_hooked_transformer and load_hooked return eval mode)",
                TrainModeWarning,
                stacklevel=2,
            )
        with _TRAIN_HOOKS_QUIET.raised():  # warned above (or in eval mode): not again in forward
            out, cache = super().run_with_cache(*model_args, remove_batch_dim=remove_batch_dim, **kwargs)
        if return_cache_object:
            cache = ResidualActivationCache(cache, self, has_batch_dim=not remove_batch_dim)
        return out, cache

    @property
    def codec(self):
        """encode / decode in the checkpoint's vocabulary (interp.model.vocab.Codec); a ConfigError when there is
        none."""
        from interp.model.vocab import codec

        if not self.vocab_state:
            raise ConfigError(
                "this ResidualGPT has no vocabulary, so it takes token ids only: load it with "
                "ResidualGPT.from_checkpoint from a checkpoint saved with vocab=... (or encoding='gpt2'), or set "
                "model.vocab_state = {'vocab': [...characters...]}; a nanoGPT checkpoint's characters are in its "
                "meta.pkl (interp.load_checkpoint(path, meta=...), --meta on the commands)"
            )
        return codec(self.vocab_state, what="the prompt")

    @torch.no_grad()
    def generate(
        self,
        tokens: Int[Tensor, "batch pos"] | str,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> Int[Tensor, "batch pos_plus_new"]:
        """nanoGPT's generate: append max_new_tokens sampled tokens, feeding back at most n_ctx of them.

        tokens: integer ids [batch, pos], or a string when the model has a vocabulary
        (from_checkpoint: the checkpoint's); a string comes back as the prompt and its
        continuation, decoded. Past n_ctx the prompt is cropped to its last n_ctx tokens
        at every step, as nanoGPT does (the export's generate does the same).
        temperature 0 takes the argmax (greedy, as TransformerLens's sampler), any other finite
        positive one draws (one so small that dividing overflows draws the argmax; interp.model.next_token);
        top_k keeps the k most likely tokens. Runs in eval mode (dropout off)
        and restores the training flag afterwards.
        """
        if isinstance(tokens, str):
            text_codec = self.codec
            if not tokens:
                raise ConfigError("generate got an empty prompt; give at least one character")
            ids = torch.tensor([text_codec.encode(tokens)], device=self.embed.weight.device)
            out = self.generate(ids, max_new_tokens, temperature, top_k, generator)
            return text_codec.decode(out[0].tolist())
        temperature = check_generate_args(tokens, max_new_tokens, temperature, top_k, self.cfg.d_vocab)
        with eval_mode(self):
            for _ in range(max_new_tokens):
                logits = self(tokens[:, -self.cfg.n_ctx :])[:, -1, :].float()
                if not bool(torch.isfinite(logits).all()):  # an argmax or a draw over NaN is no text
                    raise ToolkitError(f"the logits at position {tokens.shape[1]} are not finite: the weights overflow")
                drawn = next_token(logits, temperature, top_k, generator)  # any temperature: interp.model.next_token
                tokens = torch.cat([tokens, drawn.to(tokens.dtype)], dim=1)
        return tokens

    def tokens_to_residual_directions(self, tokens: int | Int[Tensor, "..."]) -> Float[Tensor, "... d_model"]:
        """Each token's unembedding direction, as HookedTransformer's (ActivationCache.logit_attrs reads it)."""
        if isinstance(tokens, str):
            ids = self.codec.encode(tokens)
            if len(ids) != 1:
                raise ConfigError(f"{tokens!r} is {len(ids)} tokens, not one; pass a single token or its id")
            tokens = ids[0]
        return self.unembed.weight[check_ids(tokens, self.cfg.d_vocab, "tokens", self.unembed.weight.device)]

    def num_params(self, include_pos_embed: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())  # tied weights counted once
        return n if include_pos_embed else n - self.pos_embed.weight.numel()

    def set_explicit_attention(self, explicit: bool = True) -> None:
        """Force (or stop forcing) the explicit softmax path in every attention block."""
        for block in self.blocks:
            if hasattr(block.attn, "explicit"):
                block.attn.explicit = explicit

    @classmethod
    def from_checkpoint(cls, source, map_location: str | torch.device = "cpu") -> ResidualGPT:
        """The one way from a checkpoint (a path or a loaded interp.files.checkpoint.Checkpoint) to a model.

        Returns the model in eval mode (dropout off: call .train() to train it) with the
        checkpoint's vocabulary attached (generate then takes a string). A nanoGPT train.py
        checkpoint is read too (interp.nanogpt).
        """
        from interp.errors import CheckpointError, state_dict_detail
        from interp.files.checkpoint import Checkpoint, load_checkpoint, refuse_non_finite_forward

        ckpt = source if isinstance(source, Checkpoint) else load_checkpoint(source, map_location=map_location)
        model = cls(ckpt.config)
        try:
            model.load_state_dict(ckpt.weights, strict=True)
        except RuntimeError as e:
            raise CheckpointError(
                f"{ckpt.path or 'checkpoint'}: weights do not match its model config: {state_dict_detail(e)}"
            ) from None
        model.vocab_state = {k: ckpt.state[k] for k in ("vocab", "encoding") if ckpt.state.get(k) is not None}
        refuse_non_finite_forward(ckpt.path or "checkpoint", model.eval(), model.cfg.d_vocab, model.cfg.n_ctx)
        return model

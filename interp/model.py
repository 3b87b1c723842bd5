"""ResidualGPT: a Pre-LN GPT whose attention and FFN residual paths can each be removed.

    resid_mid  = (resid_pre if attn_residual else 0) + attn(ln1(resid_pre))
    resid_post = (resid_mid if ffn_residual  else 0) + mlp(ln2(resid_mid))

Every intermediate passes through a TransformerLens HookPoint with TL's name, so
run_with_cache / run_with_hooks / hooks() work as on a HookedTransformer.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens.hook_points import HookedRootModule, HookPoint

from interp.config import ModelConfig
from interp.errors import ConfigError
from interp.mixers import _hooked, make_mixer


class LayerNorm(nn.Module):
    """LayerNorm (eps 1e-5), weight `w` and, when cfg.bias, bias `b`.

    As in TransformerLens, hook_normalized holds the normalised vector before w and b;
    while nothing hooks it, one fused layer_norm applies w and b (no separate multiply).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w = nn.Parameter(torch.ones(cfg.d_model))
        self.b = nn.Parameter(torch.zeros(cfg.d_model)) if cfg.bias else None
        self.hook_normalized = HookPoint()

    def forward(self, x: Float[Tensor, "b p d"]) -> Float[Tensor, "b p d"]:
        if not _hooked(self.hook_normalized):
            return F.layer_norm(x, x.shape[-1:], self.w, self.b, eps=1e-5)
        x = self.hook_normalized(F.layer_norm(x, x.shape[-1:], eps=1e-5))
        return x * self.w + self.b if self.b is not None else x * self.w


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.in_proj = nn.Linear(cfg.d_model, cfg.d_mlp, bias=cfg.bias)
        self.out_proj = nn.Linear(cfg.d_mlp, cfg.d_model, bias=cfg.bias)
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()

    def forward(self, x: Float[Tensor, "b p d"]) -> Float[Tensor, "b p d"]:
        return self.out_proj(self.hook_post(F.gelu(self.hook_pre(self.in_proj(x)))))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.ln1 = LayerNorm(cfg)
        self.attn = make_mixer(cfg)
        self.ln2 = LayerNorm(cfg)
        self.mlp = MLP(cfg)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        for name in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
            setattr(self, f"hook_{name}", HookPoint())

    def forward(self, resid_pre: Float[Tensor, "b p d"]) -> Float[Tensor, "b p d"]:
        gain = self.cfg.runtime_gain
        resid_pre = self.hook_resid_pre(resid_pre)
        attn_out = self.resid_dropout(self.attn(self.ln1(resid_pre)))
        attn_out = self.hook_attn_out(attn_out * gain if gain != 1.0 else attn_out)
        resid_mid = self.hook_resid_mid(resid_pre + attn_out if self.cfg.attn_residual else attn_out)
        mlp_out = self.resid_dropout(self.mlp(self.ln2(resid_mid)))
        mlp_out = self.hook_mlp_out(mlp_out * gain if gain != 1.0 else mlp_out)
        return self.hook_resid_post(resid_mid + mlp_out if self.cfg.ffn_residual else mlp_out)


class ResidualGPT(HookedRootModule):
    """The residual-ablation GPT. `forward(tokens)` -> logits; with targets, (logits, loss)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.d_vocab, cfg.d_model)
        self.pos_embed = nn.Embedding(cfg.n_ctx, cfg.d_model)
        self.embed_dropout = nn.Dropout(cfg.dropout)
        self.hook_embed = HookPoint()
        self.hook_pos_embed = HookPoint()
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_final = LayerNorm(cfg)
        self.unembed = nn.Linear(cfg.d_model, cfg.d_vocab, bias=False)
        if cfg.tie_embeddings:
            self.unembed.weight = self.embed.weight
        self._init_weights()
        self.setup()

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
        self,
        tokens: Int[Tensor, "batch pos"],
        targets: Int[Tensor, "batch pos"] | None = None,
    ) -> Float[Tensor, "batch pos d_vocab"] | tuple[Float[Tensor, "batch pos d_vocab"], Tensor]:
        n = tokens.shape[-1]
        if n > self.cfg.n_ctx:
            raise ConfigError(f"sequence length {n} exceeds n_ctx {self.cfg.n_ctx}")
        embed = self.hook_embed(self.embed(tokens))
        pos = self.pos_embed(torch.arange(n, device=tokens.device)).expand(tokens.shape[0], n, -1)
        pos = self.hook_pos_embed(pos)  # [batch, pos, d_model] as in TransformerLens
        resid = self.embed_dropout(embed + pos)
        for block in self.blocks:
            resid = block(resid)
        logits = self.unembed(self.ln_final(resid))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        return logits, loss

    def num_params(self, include_pos_embed: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())  # tied weights counted once
        return n if include_pos_embed else n - self.pos_embed.weight.numel()

    def set_explicit_attention(self, explicit: bool = True) -> None:
        """Force (or stop forcing) the explicit softmax path in every attention block."""
        for block in self.blocks:
            if hasattr(block.attn, "explicit"):
                block.attn.explicit = explicit

    @classmethod
    def from_checkpoint(cls, path: str | Path, map_location: str | torch.device = "cpu") -> ResidualGPT:
        from interp.checkpoint import load_checkpoint

        ckpt = load_checkpoint(path, map_location=map_location)
        model = cls(ckpt.config)
        model.load_state_dict(ckpt.weights)
        return model

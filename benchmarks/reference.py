"""The reference GPT the step benchmark measures ResidualGPT against.

A plain GPT in nanoGPT's structure, of the same shape as a ResidualGPT: fused
QKV Linear, scaled_dot_product_attention(is_causal=True), GELU MLP, LayerNorm
(bias optional), tied embeddings, dropout where the config has it, no hook
points. Written here so the benchmark depends on nothing outside the repository.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

from interp.config.model_config import ModelConfig


class RefLayerNorm(nn.Module):
    def __init__(self, d: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x: Float[Tensor, "b p d"]) -> Float[Tensor, "b p d"]:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class RefAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.dropout = cfg.n_heads, cfg.dropout
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Float[Tensor, "b p d"]) -> Float[Tensor, "b p d"]:
        b, p, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (t.view(b, p, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(b, p, d)))


class RefBlock(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1 = RefLayerNorm(cfg.d_model, cfg.bias)
        self.attn = RefAttention(cfg)
        self.ln_2 = RefLayerNorm(cfg.d_model, cfg.bias)
        self.c_fc = nn.Linear(cfg.d_model, cfg.d_mlp, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.d_mlp, cfg.d_model, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Float[Tensor, "b p d"]) -> Float[Tensor, "b p d"]:
        x = x + self.attn(self.ln_1(x))
        return x + self.dropout(self.c_proj(F.gelu(self.c_fc(self.ln_2(x)))))


class RefGPT(nn.Module):
    """`forward(idx, targets)` -> (logits, loss), as nanoGPT's GPT."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.wte = nn.Embedding(cfg.d_vocab, cfg.d_model)
        self.wpe = nn.Embedding(cfg.n_ctx, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(RefBlock(cfg) for _ in range(cfg.n_layers))
        self.ln_f = RefLayerNorm(cfg.d_model, cfg.bias)
        self.lm_head = nn.Linear(cfg.d_model, cfg.d_vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = cfg.init_std / math.sqrt(2 * cfg.n_layers) if name.endswith("c_proj.weight") else cfg.init_std
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx: Int[Tensor, "b p"], targets: Int[Tensor, "b p"]) -> tuple[Float[Tensor, "b p v"], Tensor]:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

"""What the edge-case export tests share (test_demo_edges.py, test_hooked_audit52d.py): random character models
whose LayerNorms and biases are far from their init, their export on the installed major, and warning counts."""

from __future__ import annotations

import warnings

import torch

from interp import ModelConfig, ResidualGPT
from interp.tl.load import load_tl

CHARS = list("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")  # TinyShakespeare's 65


def model_with(bias: bool, seed: int = 0, n_layers: int = 2, **changes) -> ResidualGPT:
    """A random ResidualGPT whose biases and LayerNorm weights are far from their init (0 and 1)."""
    torch.manual_seed(seed)
    cfg = ModelConfig(n_layers=n_layers, d_model=32, n_heads=4, n_ctx=16, d_vocab=len(CHARS), bias=bias, **changes)
    model = ResidualGPT(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".w"):
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif name.endswith((".b", ".bias")):
                p.copy_(0.3 * torch.randn_like(p))
            else:
                p.normal_(0, 0.2)
    return model.eval()


def exported(model: ResidualGPT, **kwargs):
    """The installed major's export with its defaults (folded on 3.x), quiet while it is made."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_tl(model, vocab=CHARS, **kwargs)


def ids(text: str) -> torch.Tensor:
    return torch.tensor([[CHARS.index(c) for c in text]])


def counted(category: type[Warning], call, times: int = 2) -> int:
    """How many `category` warnings `times` calls of `call` show under the default filter."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        for _ in range(times):
            call()
    return sum(issubclass(w.category, category) for w in seen)


def v_ablated_loss(mod, toks: torch.Tensor) -> float:
    """Mean next-token loss with head 1 of layer 0 zeroed at hook_v (the Main Demo's ablation)."""

    def ablate(v, hook):
        v[:, :, 1] = 0.0

    with torch.no_grad():
        logits = mod.run_with_hooks(toks, fwd_hooks=[("blocks.0.attn.hook_v", ablate)])
    return -logits.log_softmax(-1)[:, :-1].gather(-1, toks[:, 1:, None]).mean().item()

"""What the five TransformerLens demo test files share (tests/test_demo_*.py): smoke models trained once per
process, their export on the installed major (HookedTransformer with from_pretrained's processing on 3.x,
the bridge on 4.x), prompts drawn from the model's own characters, and ground truth computed on ResidualGPT."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
from conftest import data_root
from majors import TL4

from interp import ResidualGPT
from interp.tl.load import load_tl

WIRINGS = ("full", "attn_only")


@functools.cache
def smoke_checkpoint(residual: str) -> Path:
    """A smoke-preset run of `residual` (60 steps, a few seconds), trained once per test process."""
    from training.presets import resolve
    from training.run_config import variant_name
    from training.rundir import RunDir
    from training.trainer import Trainer

    out = Path(tempfile.mkdtemp(prefix=f"demo-{residual}-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    spec = resolve("smoke", {"residual": residual, "max_steps": 60, "eval_interval": 60, "ckpt_interval": 60})
    before = os.environ.get("RESIDUAL_DATA_DIR")
    os.environ["RESIDUAL_DATA_DIR"] = str(data_root())
    try:
        run = RunDir.of(out, "smoke", variant_name(spec.model.to_dict()), spec.train.seed)
        Trainer(spec.model, spec.train, run, progress=False).run()
    finally:
        if before is None:
            del os.environ["RESIDUAL_DATA_DIR"]
        else:
            os.environ["RESIDUAL_DATA_DIR"] = before
    return run.ckpt


def model_of(residual: str) -> ResidualGPT:
    return ResidualGPT.from_checkpoint(smoke_checkpoint(residual)).eval()


def export_of(residual: str):
    """The installed major's export, with its defaults (as a TransformerLens user gets it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the export's one notice for a removed residual path
        return load_tl(smoke_checkpoint(residual))


def prompts(model: ResidualGPT, n: int = 4, length: int = 20, seed: int = 0) -> list[str]:
    """n prompts of `length` characters of the model's vocabulary (TinyShakespeare's, or the synthetic one)."""
    chars = [c for c in model.vocab_state["vocab"] if c.isprintable()]
    gen = torch.Generator().manual_seed(seed)
    return ["".join(chars[i] for i in torch.randint(0, len(chars), (length,), generator=gen)) for _ in range(n)]


def answers(model: ResidualGPT, tokens: torch.Tensor) -> torch.Tensor:
    """[batch, 2]: ResidualGPT's top next token at the last position, and its runner-up (the 'wrong' answer)."""
    with torch.no_grad():
        top2 = model(tokens)[:, -1].topk(2, dim=-1).indices
    return top2


def logit_diff(logits: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """Per-prompt logit difference at the last position: answer minus wrong answer."""
    last = logits[:, -1]
    return last.gather(1, pairs[:, :1])[:, 0] - last.gather(1, pairs[:, 1:])[:, 0]


def patching_setup(residual: str):
    """The patching demos' start: model, export, clean and corrupted tokens, and the metric (the mean logit
    difference between ResidualGPT's top answer and its runner-up on the clean prompts)."""
    model, tl = model_of(residual), export_of(residual)
    clean = tl.to_tokens(prompts(model, n=2, length=12, seed=0))
    corrupted = tl.to_tokens(prompts(model, n=2, length=12, seed=1))
    pairs = answers(model, clean)

    def metric(logits):
        return logit_diff(logits, pairs).mean()

    return model, tl, clean, corrupted, metric


def export_weights(model: ResidualGPT) -> dict[str, torch.Tensor]:
    """ResidualGPT's weights as its export shows them, folded and centred here by hand where the export does
    (TL 3: fold_ln, center_writing_weights, center_unembed), raw on TL 4 (the bridge folds nothing).
    W_E [vocab, d]; W_V [layer, head, d, d_head]; W_O [layer, head, d_head, d]; W_U [d, vocab]."""
    from einops import rearrange

    gain = model.cfg.runtime_gain
    with torch.no_grad():
        w_e = model.embed.weight.detach().clone()
        w_u = model.unembed.weight.detach().T.clone()
        w_v, w_o = [], []
        for block in model.blocks:
            w_in = block.attn.in_proj.weight.detach()
            v = rearrange(w_in.chunk(3)[2], "(h dh) d -> h d dh", h=model.cfg.n_heads)
            o = rearrange(block.attn.out_proj.weight.detach(), "d (h dh) -> h dh d", h=model.cfg.n_heads) * gain
            if not TL4:
                v = block.ln1.w.detach()[None, :, None] * v  # fold_ln: the weight in, and what reads
                v = v - v.mean(-2, keepdim=True)  # the mean-free LayerNorm output centred along d_model
                o = o - o.mean(-1, keepdim=True)  # center_writing_weights
            w_v.append(v)
            w_o.append(o)
        if not TL4:
            w_e = w_e - w_e.mean(-1, keepdim=True)
            w_u = model.ln_final.w.detach()[:, None] * w_u
            w_u = w_u - w_u.mean(0, keepdim=True)
            w_u = w_u - w_u.mean(-1, keepdim=True)  # center_unembed
    return {"W_E": w_e, "W_V": torch.stack(w_v), "W_O": torch.stack(w_o), "W_U": w_u}

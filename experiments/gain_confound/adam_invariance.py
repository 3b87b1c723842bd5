"""The Adam invariance behind experiments.gain_confound: the derivation below (printed in its report) and
adam_invariance_check(), which measures it.

Why a runtime gain tests nothing under Adam. Write a sublayer's output as y = g*f(x; W). Then dL/dW =
g*(df/dW)^T dL/dy, and Adam's step m_hat/(sqrt(v_hat)+eps), with m and v running means of the gradient and
its square, is unchanged when every gradient is multiplied by the same constant c (m scales by c, sqrt(v) by
|c|), up to eps. So W takes steps of the same size whatever g is, and what is left is the constant g in
front of f. A LayerNorm removes a constant factor from its input: LN(g*y) = LN(y) exactly without its eps,
and to within a relative |1 - 1/g^2| eps / (2 var(y)) with eps = 1e-5. Precisely, for this architecture: in
ffn_only and none, every sublayer output either enters a LayerNorm directly (no attention residual:
resid_mid = g*attn) or is added to a term that carries the same g, so after block 0's attention the whole
stream is g times the g = 1 stream and ln_final removes it: the loss is the same function of the weights for
every g, and the runs differ only through LayerNorm's eps, which matters while var(sublayer output) is not
much larger than 1e-5/g^2, i.e. early, while the output projections are near their 0.02/sqrt(2L) init. In
attn_only the same holds except in block 0, where g*attn_0 is added to the unscaled embedding (resid_mid_0 =
embed + g*attn_0): the runtime gain is equivalent to multiplying block 0's attention output projection alone
by g - at init and, because Adam ignores the gradient's scale, in every update (that one matrix trains at g
times the learning rate, weight decay aside). In full every residual sum meets the unscaled embedding (the
gain is equivalent to dividing the input token and position embeddings by g; the tied unembedding is
unchanged). Gradient clipping rescales the whole gradient by a step-dependent factor while it is active, and
Adam is invariant only to a constant one, so there the invariance is approximate. Way (b) differs in kind:
after W' = g*W once, the gradient with respect to W' is 1/g of the unscaled one (LayerNorm downstream) but
Adam's step size is not, so those weights move 1/g as fast relative to their size - a change in the
optimisation that persists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from interp.errors import ToolkitError
from training.presets import resolve

EXPLANATION = " ".join(__doc__.split("\n\n", 1)[1].split())  # the derivation above, as one line of prose
TINY_EPS = 1e-30  # "eps -> 0" for the invariance check: no 0/0 on exactly-zero gradients
EPS_DEFAULT = 1e-8  # PyTorch's AdamW eps
EPS = (("eps_zero", TINY_EPS), ("eps_default", EPS_DEFAULT))


def gain_label(g: float) -> str:
    """How a gain is written in variant names and result keys: 0.25, 1, 2."""
    return f"{g:g}"


def adam_invariance_check(
    scale_weights: Callable[[Any, float], None],
    gains=(0.25, 0.5, 2.0, 4.0),
    residual: str = "attn_only",
    steps: int = 5,
    seed: int = 0,
    model_cfg=None,
    train_cfg=None,
    batches=None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Adam's update is invariant to a constant rescaling of the gradient; measured two ways.

    optimizer: one model trained `steps` AdamW steps (the trainer's betas, lr, weight decay; no clipping) on real
        gradients G_t, beside a copy of its parameters fed c*G_t by a second AdamW: the two updates at every step.
    model: the model with runtime_gain = g at weights W, and the g = 1 model at W after scale_weights(model, g)
        (gain_confound's way (b): every out_proj.weight multiplied by g) - the same function. One AdamW step
        (weight decay 0: decay acts on the raw weights, which differ by g) on the same batch: the gradient of each
        out_proj in the first is g times the second's, every other gradient is equal, and Adam makes the two raw
        updates equal.

    The figure is ||update_a - update_b|| / ||update_b|| over all parameters, the max over gains (and steps),
    once with eps -> 0 (1e-30: the algebra, up to float rounding; bitwise 0 for powers of two) and once with
    PyTorch's eps = 1e-8, where entries whose gradient is within ~100 eps of zero are not invariant.
    """
    import torch

    spec = resolve("smoke")
    model_cfg = (model_cfg or spec.model.replace(d_vocab=65)).replace(residual=residual, dropout=0.0, runtime_gain=1.0)
    train_cfg = train_cfg or spec.train
    dev = torch.device(device)
    batches = check_batches(model_cfg, batches, steps, seed, dev)
    gains = [float(g) for g in gains if float(g) != 1.0] or [2.0]
    optimizer_part = optimizer_invariance(model_cfg, train_cfg, batches, gains, seed, dev)
    model_part = model_invariance(scale_weights, model_cfg, train_cfg, batches[0], gains, seed, dev)
    return {
        "max_rel_update_diff": max(optimizer_part["eps_zero"], model_part["eps_zero"]),
        "max_rel_update_diff_eps_default": max(optimizer_part["eps_default"], model_part["eps_default"]),
        "optimizer": optimizer_part,
        "model": model_part,
        "metric": "||update_a - update_b||_2 / ||update_b||_2 over all parameters; max over gains (and steps)",
        "gains": gains,
        "steps": len(batches),
        "eps": dict(EPS),
        "model_config": model_cfg.to_dict(),
        "lr": train_cfg.lr,
        "betas": [train_cfg.beta1, train_cfg.beta2],
    }


def check_batches(model_cfg, batches, steps: int, seed: int, dev) -> list:
    """The first `steps` batches on the device; random tokens (seeded) when none are given."""
    import torch

    if batches is None:
        gen = torch.Generator().manual_seed(seed)
        batches = [
            tuple(torch.randint(0, model_cfg.d_vocab, (4, model_cfg.n_ctx), generator=gen) for _ in range(2))
            for _ in range(steps)
        ]
    batches = [(x.to(dev), y.to(dev)) for x, y in list(batches)[:steps]]
    if not batches:
        raise ToolkitError("adam_invariance_check needs at least one batch")
    return batches


def optimizer_invariance(model_cfg, train_cfg, batches: list, gains: list[float], seed: int, dev) -> dict[str, Any]:
    """AdamW on G_t beside AdamW on c*G_t, at both eps: the max relative update difference, per step too,
    and the fraction of first-step gradient entries within 100 eps of zero."""
    out: dict[str, Any] = {}
    small_fraction = None
    for label, eps in EPS:
        per_gain = {}
        for c in gains:
            diffs, fraction = _scaled_gradient_run(model_cfg, train_cfg, batches, c, eps, seed, dev)
            small_fraction = fraction if small_fraction is None else small_fraction
            per_gain[gain_label(c)] = diffs
        out[label] = max(max(d) for d in per_gain.values())
        out[f"{label}_per_step"] = per_gain
    out["small_gradient_fraction"] = small_fraction
    return out


def _scaled_gradient_run(
    model_cfg, train_cfg, batches: list, c: float, eps: float, seed: int, dev
) -> tuple[list[float], float]:
    """One model and a shadow copy of its parameters stepped on c times its gradients: the relative update
    difference at each step, and the fraction of first-step gradient entries within 100 * 1e-8 of zero."""
    import torch

    model = _fresh(model_cfg, seed, dev)
    shadow = [torch.nn.Parameter(p.detach().clone()) for p in model.parameters()]
    opt_a = _adamw(model.parameters(), train_cfg, eps, train_cfg.weight_decay)
    opt_b = _adamw(shadow, train_cfg, eps, train_cfg.weight_decay)
    diffs, small_fraction = [], None
    for x, y in batches:
        before_a = [p.detach().clone() for p in model.parameters()]
        before_b = [p.detach().clone() for p in shadow]
        _, loss = model(x, y)
        loss.backward()
        if small_fraction is None:
            grads = torch.cat([p.grad.flatten().abs() for p in model.parameters()])
            small_fraction = (grads < 100 * 1e-8).double().mean().item()
        for pa, pb in zip(model.parameters(), shadow, strict=True):
            pb.grad = c * pa.grad.detach().clone()
        for opt in (opt_a, opt_b):  # each steps its own parameters: the order between them changes nothing
            opt.step()
            opt.zero_grad(set_to_none=True)
        update_b = [p.detach() - b for p, b in zip(shadow, before_b, strict=True)]
        update_a = [p.detach() - b for p, b in zip(model.parameters(), before_a, strict=True)]
        diffs.append(_rel(update_b, update_a))
    return diffs, small_fraction


def model_invariance(
    scale_weights: Callable[[Any, float], None], model_cfg, train_cfg, batch: tuple, gains: list[float], seed: int, dev
) -> dict[str, Any]:
    """runtime_gain = g at W beside scale_weights(W, g), one AdamW step each on `batch`, at both eps: the max
    relative update difference, and the max |logit difference| of the two (the same function)."""
    import torch

    out: dict[str, Any] = {}
    x, y = batch
    function_diff = 0.0
    for label, eps in EPS:
        worst = 0.0
        for g in gains:
            runtime = _fresh(model_cfg.replace(runtime_gain=g), seed, dev)
            scaled = _fresh(model_cfg, seed, dev)
            scaled.load_state_dict(runtime.state_dict())
            scale_weights(scaled, g)
            with torch.no_grad():
                function_diff = max(function_diff, (runtime(x) - scaled(x)).abs().max().item())
            updates = [_one_step(model, train_cfg, eps, x, y) for model in (runtime, scaled)]
            worst = max(worst, _rel(updates[0], updates[1]))
        out[label] = worst
    out["function_max_abs_diff"] = function_diff
    return out


def _one_step(model, train_cfg, eps: float, x, y) -> list:
    """One AdamW step without weight decay: each parameter's update."""
    opt = _adamw(model.parameters(), train_cfg, eps, 0.0)
    before = [p.detach().clone() for p in model.parameters()]
    _, loss = model(x, y)
    loss.backward()
    opt.step()
    return [p.detach() - b for p, b in zip(model.parameters(), before, strict=True)]


def _adamw(params, train_cfg, eps: float, weight_decay: float):
    """The trainer's AdamW (its parameter groups, lr and betas) at this eps and weight decay."""
    import torch

    from training.optimizer import optimizer_groups

    return torch.optim.AdamW(
        optimizer_groups(params, weight_decay), lr=train_cfg.lr, betas=(train_cfg.beta1, train_cfg.beta2), eps=eps
    )


def _rel(a: list, b: list) -> float:
    """||a - b|| / ||b|| over all tensors together, in float64 (0 when b is 0)."""
    import torch

    da = torch.cat([t.flatten().double() for t in a])
    db = torch.cat([t.flatten().double() for t in b])
    denom = db.norm().item()
    return (da - db).norm().item() / denom if denom > 0 else 0.0


def _fresh(cfg, seed: int, dev):
    """A model built under torch.manual_seed(seed), in train mode."""
    import torch

    from interp.model.gpt import ResidualGPT

    torch.manual_seed(seed)
    return ResidualGPT(cfg).to(dev).train()


def adam_line(check: dict[str, Any]) -> str:
    """The check as one console line."""
    opt = check["optimizer"]
    return (
        f"Adam invariance: updates for gradient G and g*G (g in {check['gains']}, {check['steps']} steps) and for "
        f"runtime gain g vs weights*g (same function, max |logit diff| "
        f"{check['model']['function_max_abs_diff']:.1e}) differ by {check['max_rel_update_diff']:.1e} "
        f"relative with eps -> 0, {check['max_rel_update_diff_eps_default']:.1e} with eps = 1e-8 "
        f"({100 * opt['small_gradient_fraction']:.1f}% of gradient entries are within 100 eps of 0)"
    )

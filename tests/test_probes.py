"""Probes on constructed cases: alpha_tt, hidden norms and gradient norms against hand computations."""

import math

import pytest
import torch

from interp import ConfigError, ModelConfig, ResidualGPT, save_checkpoint
from probes import attention_stats, gradient_flow, hidden_norms, measure, parameter_grad_norms, uniform_baseline
from probes.gradients import capture_resid_grads


def model_of(**kw):
    torch.manual_seed(0)
    cfg = ModelConfig(**{"n_layers": 2, "d_model": 32, "n_heads": 4, "n_ctx": 12, "d_vocab": 11, **kw})
    return ResidualGPT(cfg)


def batches(n=2, batch=3, seq=12):
    g = torch.Generator().manual_seed(5)
    return [(torch.randint(0, 11, (batch, seq), generator=g), torch.randint(0, 11, (batch, seq), generator=g))
            for _ in range(n)]


def test_uniform_baseline_value():
    assert uniform_baseline(4) == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)


def test_scores_hooked_to_favour_the_diagonal_give_alpha_one():
    model = model_of()

    def favour_diagonal(scores, hook):
        return scores + 1e4 * torch.eye(scores.shape[-1])

    with model.hooks(fwd_hooks=[("blocks.1.attn.hook_attn_scores", favour_diagonal)]):
        stats = attention_stats(model, batches())
    assert stats["alpha_tt"][1] == pytest.approx([1.0] * 4, abs=1e-9)
    assert stats["alpha_tt"][0][0] < 0.5
    assert stats["prev_token"][1] == pytest.approx([0.0] * 4, abs=1e-9)
    assert stats["distance"][1] == pytest.approx([0.0] * 4, abs=1e-6)


def test_equal_scores_give_exactly_the_uniform_baseline():
    model = model_of()

    def flatten(scores, hook):
        return torch.where(torch.isinf(scores), scores, torch.zeros_like(scores))

    with model.hooks(fwd_hooks=[(lambda n: n.endswith("hook_attn_scores"), flatten)]):
        stats = attention_stats(model, batches())
    base = uniform_baseline(12)
    for layer in stats["alpha_tt"]:
        assert layer == pytest.approx([base] * 4, rel=1e-6)
    assert stats["alpha_tt_ratio"] == pytest.approx([1.0, 1.0], rel=1e-6)
    t = torch.arange(1, 12, dtype=torch.float64)
    assert stats["entropy"][0][0] == pytest.approx(torch.log(t + 1).mean().item(), rel=1e-6)
    assert stats["distance"][0][0] == pytest.approx((t / 2).mean().item(), rel=1e-6)


def test_uniform_mixer_and_self_bias_limits():
    base = uniform_baseline(12)
    uniform = attention_stats(model_of(mixer="uniform"), batches())
    assert uniform["alpha_tt_layer_mean"] == pytest.approx([base, base], rel=1e-6)
    assert attention_stats(model_of(self_bias=math.inf), batches())["alpha_tt_layer_mean"] == [1.0, 1.0]
    assert attention_stats(model_of(self_bias=-math.inf), batches())["alpha_tt_layer_mean"] == [0.0, 0.0]


def test_position_blind_is_skipped_with_a_reason():
    stats = attention_stats(model_of(mixer="position_blind"), batches())
    assert "no attention pattern" in stats["skipped"]


def test_norm_growth_equals_hand_computation():
    model = model_of(residual="attn_only").eval()
    data = batches()
    stats = hidden_norms(model, data)
    first, last, count = 0.0, 0.0, 0
    for x, _ in data:
        _, cache = model.run_with_cache(x)
        first += cache["blocks.0.hook_resid_pre"].norm(dim=-1).sum().item()
        last += cache["blocks.1.hook_resid_post"].norm(dim=-1).sum().item()
        count += x.numel()
    assert stats["norms"][0] == pytest.approx(first / count, rel=1e-6)
    assert stats["norms"][-1] == pytest.approx(last / count, rel=1e-6)
    assert stats["growth"] == pytest.approx(last / first, rel=1e-6)
    assert stats["sites"][1] == "blocks.0.hook_resid_mid" and len(stats["norms"]) == 5


def test_parameter_grad_norms_equal_hand_computation():
    model = model_of()
    x, y = batches()[0]
    model(x, y)[1].backward()
    norms = parameter_grad_norms(model)
    by_hand = math.sqrt(sum(p.grad.pow(2).sum().item() for n, p in model.named_parameters()
                            if n.startswith("blocks.0.attn.")))
    assert norms["attn"][0] == pytest.approx(by_hand, rel=1e-6)
    total = math.sqrt(sum(p.grad.pow(2).sum().item() for p in model.parameters()))
    assert norms["total"] == pytest.approx(total, rel=1e-6)
    assert norms["total"] == pytest.approx(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9).item(), rel=1e-5)


def test_residual_gradient_equals_retain_grad():
    model = model_of(residual="ffn_only").eval()
    x, y = batches()[0]
    flow = gradient_flow(model, x, y)
    kept = {}

    def keep(resid, hook):
        resid.retain_grad()
        kept[hook.name] = resid

    model.zero_grad()
    with model.hooks(fwd_hooks=[("blocks.1.hook_resid_pre", keep)]):
        model(x, y)[1].backward()
    assert flow["resid"][1] == pytest.approx(kept["blocks.1.hook_resid_pre"].grad.norm().item(), rel=1e-6)


def test_gradient_flow_leaves_existing_grads_alone():
    model = model_of()
    x, y = batches()[0]
    model(x, y)[1].backward()
    before = {n: p.grad.clone() for n, p in model.named_parameters()}
    gradient_flow(model, *batches()[1])
    assert all(torch.equal(before[n], p.grad) for n, p in model.named_parameters())


def test_hooks_are_removed_even_on_error():
    model = model_of()

    class Boom(Exception):
        pass

    def boom(x, hook):
        raise Boom

    with pytest.raises(Boom):
        with model.hooks(fwd_hooks=[("blocks.0.hook_mlp_out", boom)]):
            attention_stats(model, batches())
    with pytest.raises(Boom), capture_resid_grads(model):
        raise Boom
    assert all(not hp.fwd_hooks and not hp.bwd_hooks for hp in model.hook_dict.values())


def test_measure_on_a_checkpoint(tmp_path):
    model = model_of(residual="attn_only")
    save_checkpoint(tmp_path / "ckpt.pt", model)
    result = measure(tmp_path / "ckpt.pt", batches())
    assert set(result) == {"attention", "norms", "gradients"}
    assert len(result["attention"]["alpha_tt"]) == 2 and result["norms"]["growth"] > 0
    assert len(result["gradients"]["resid"]) == 3 and result["gradients"]["total"] > 0


def test_measure_takes_token_tensors_with_shifted_targets():
    model = model_of(residual="ffn_only")
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(0, 11, (3, 13), generator=g) for _ in range(2)]  # n_ctx + 1: inputs fill the context
    pairs = [(t[:, :-1], t[:, 1:]) for t in seqs]
    expected = measure(model, pairs)
    assert measure(model, seqs) == expected
    assert measure(model, seqs[0])["gradients"] == measure(model, pairs[:1])["gradients"]  # one bare tensor
    with pytest.raises(ConfigError, match="pos >= 2"):
        measure(model, [torch.zeros(3, 1, dtype=torch.long)])

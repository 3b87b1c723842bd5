"""ResidualGPT: residual wiring, mixers, fused vs explicit attention, parameter counts."""

import math

import pytest
import torch

from interp import ConfigError, ModelConfig, ResidualGPT

RESIDUALS = ["full", "attn_only", "ffn_only", "none"]
SELF_BIASES = [0.0, 4.0, math.inf, -math.inf]
MIXES = [("attention", b) for b in SELF_BIASES] + [("uniform", 0.0), ("position_blind", 0.0)]


@pytest.fixture(autouse=True)
def seeded_weights():
    """Every model here is built from the same seed: a failure reproduces with the same weights."""
    torch.manual_seed(0)


def tiny(**kw) -> ModelConfig:
    return ModelConfig(**{"n_layers": 2, "d_model": 32, "n_heads": 4, "n_ctx": 16, "d_vocab": 11, **kw})


def tokens(batch=3, n=16, vocab=11, seed=0):
    return torch.randint(0, vocab, (batch, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("residual", RESIDUALS)
def test_residual_wiring_from_one_cache(residual):
    torch.manual_seed(0)
    model = ResidualGPT(tiny(residual=residual)).eval()
    _, cache = model.run_with_cache(tokens())
    for layer in range(2):
        c = {k.split(".", 2)[-1]: v for k, v in cache.items() if k.startswith(f"blocks.{layer}.")}
        sites = ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post")
        pre, attn, mid, mlp, post = (c[f"hook_{n}"] for n in sites)
        if residual in ("attn_only", "none"):
            assert torch.equal(post, mlp)
        if residual in ("ffn_only", "none"):
            assert torch.equal(mid, attn)
        if residual == "full":
            torch.testing.assert_close(mid, pre + attn)
            torch.testing.assert_close(post, mid + mlp)
        if residual == "attn_only":
            torch.testing.assert_close(mid, pre + attn)
        if residual == "ffn_only":
            torch.testing.assert_close(post, mid + mlp)


def test_hook_names_are_transformer_lens_names():
    names = set(ResidualGPT(tiny()).hook_dict)
    expected = {"hook_embed", "hook_pos_embed", "ln_final.hook_normalized"}
    for l in range(2):
        expected |= {
            f"blocks.{l}.{n}"
            for n in (
                "hook_resid_pre",
                "ln1.hook_normalized",
                "attn.hook_q",
                "attn.hook_k",
                "attn.hook_v",
                "attn.hook_attn_scores",
                "attn.hook_pattern",
                "attn.hook_z",
                "hook_attn_out",
                "hook_resid_mid",
                "ln2.hook_normalized",
                "mlp.hook_pre",
                "mlp.hook_post",
                "hook_mlp_out",
                "hook_resid_post",
            )
        }
    assert expected <= names


def test_hook_shapes():
    _, cache = ResidualGPT(tiny()).run_with_cache(tokens(batch=2, n=5))
    assert cache["blocks.0.attn.hook_q"].shape == (2, 5, 4, 8)
    assert cache["blocks.0.attn.hook_z"].shape == (2, 5, 4, 8)
    assert cache["blocks.0.attn.hook_pattern"].shape == (2, 4, 5, 5)
    assert cache["blocks.0.attn.hook_attn_scores"].shape == (2, 4, 5, 5)


def pattern(cfg):
    torch.manual_seed(1)
    _, cache = ResidualGPT(cfg).eval().run_with_cache(tokens(n=7))
    return cache["blocks.1.attn.hook_pattern"]


def test_self_bias_plus_inf_is_identity_pattern():
    p = pattern(tiny(self_bias=math.inf))
    assert torch.equal(p, torch.eye(7).expand_as(p))


def test_self_bias_minus_inf_zero_diagonal_and_rows_sum_to_one():
    p = pattern(tiny(self_bias=-math.inf))
    assert torch.equal(p.diagonal(dim1=-2, dim2=-1), torch.zeros(3, 4, 7))
    torch.testing.assert_close(p[..., 1:, :].sum(-1), torch.ones(3, 4, 6))
    assert torch.equal(p[..., 0, :], torch.zeros(3, 4, 7))  # position 0 reads nothing


def test_minus_inf_position_zero_writes_zeros():
    model = ResidualGPT(tiny(self_bias=-math.inf)).eval()
    _, cache = model.run_with_cache(tokens())
    assert torch.equal(cache["blocks.0.attn.hook_z"][:, 0], torch.zeros(3, 4, 8))


@pytest.mark.parametrize("explicit", [False, True], ids=["fused", "explicit"])
def test_self_bias_four_adds_exactly_four_to_the_self_score(explicit):
    """With q zeroed every score is the self bias alone: query t puts e^4 / (e^4 + t) on itself and
    1 / (e^4 + t) on each earlier key, so z = that pattern times v, on the fused and the explicit path."""
    model = ResidualGPT(tiny(self_bias=4.0)).eval()
    model.set_explicit_attention(explicit)
    seen = {}

    def keep(x, hook):
        seen[hook.name.split(".")[-1]] = x.detach().clone()

    hooks = [
        ("blocks.0.attn.hook_q", lambda q, hook: torch.zeros_like(q)),
        ("blocks.0.attn.hook_v", keep),
        ("blocks.0.attn.hook_z", keep),
    ]
    if explicit:
        hooks.append(("blocks.0.attn.hook_pattern", keep))
    model.run_with_hooks(tokens(n=7), fwd_hooks=hooks)
    e4, t = math.exp(4.0), torch.arange(7, dtype=torch.float64)
    expected = torch.tril(torch.ones(7, 7, dtype=torch.float64)) / (e4 + t)[:, None]
    expected.diagonal().copy_(e4 / (e4 + t))
    z = torch.einsum("qk,bkhd->bqhd", expected, seen["hook_v"].double())
    torch.testing.assert_close(seen["hook_z"].double(), z, rtol=1e-5, atol=1e-6)
    if explicit:
        torch.testing.assert_close(seen["hook_pattern"].double(), expected.expand(3, 4, 7, 7), rtol=1e-6, atol=1e-7)


def test_uniform_pattern_is_one_over_t_plus_one():
    p = pattern(tiny(mixer="uniform"))
    expected = torch.tril(torch.ones(7, 7)) / torch.arange(1, 8)[:, None]
    torch.testing.assert_close(p, expected.expand_as(p))


def test_position_blind_sees_no_other_position():
    model = ResidualGPT(tiny(mixer="position_blind")).eval()
    t = tokens(batch=1)
    base = model(t)
    for s in (0, 5, 15):
        changed = t.clone()
        changed[0, s] = (changed[0, s] + 1) % 11
        diff = (model(changed) - base).abs().amax(-1)[0]
        others = [p for p in range(16) if p != s]
        assert diff[others].max() == 0
        assert diff[s] > 0


@pytest.mark.parametrize("mixer,self_bias", MIXES[:-1])
def test_attention_is_causal(mixer, self_bias):
    model = ResidualGPT(tiny(mixer=mixer, self_bias=self_bias)).eval()
    t = tokens(batch=1)
    base = model(t)
    changed = t.clone()
    changed[0, 9] = (changed[0, 9] + 1) % 11
    diff = (model(changed) - base).abs().amax(-1)[0]
    assert diff[:9].max() == 0
    assert diff[9:].max() > 0


@pytest.mark.parametrize("residual", RESIDUALS)
@pytest.mark.parametrize("mixer,self_bias", MIXES)
def test_fused_and_explicit_paths_agree(residual, mixer, self_bias):
    torch.manual_seed(2)
    model = ResidualGPT(tiny(residual=residual, mixer=mixer, self_bias=self_bias)).eval()
    t = tokens()
    fused = model(t)
    model.set_explicit_attention(True)
    explicit = model(t)
    assert (fused - explicit).abs().max() <= 1e-5


def test_explicit_path_runs_only_when_pattern_is_hooked(monkeypatch):
    calls = []
    real_softmax = torch.softmax
    monkeypatch.setattr(torch, "softmax", lambda *a, **k: calls.append(1) or real_softmax(*a, **k))
    model = ResidualGPT(tiny()).eval()
    model(tokens())
    assert calls == []
    model.run_with_hooks(tokens(), fwd_hooks=[("blocks.0.attn.hook_pattern", lambda x, hook: x)])
    assert len(calls) == 1


def test_paper_10m_parameter_count():
    model = ResidualGPT(ModelConfig(n_layers=6, n_heads=6, d_model=384, n_ctx=256, d_vocab=65))
    assert model.num_params() == 10_745_088
    assert model.num_params(include_pos_embed=False) == 10_646_784


def test_position_blind_is_parameter_matched():
    attn = ResidualGPT(tiny()).num_params()
    blind = ResidualGPT(tiny(mixer="position_blind")).num_params()
    assert attn == blind


def test_residual_projections_get_scaled_init():
    torch.manual_seed(0)
    model = ResidualGPT(ModelConfig(n_layers=8, d_model=256, n_heads=4))
    std_out = model.blocks[0].mlp.out_proj.weight.std().item()
    std_in = model.blocks[0].mlp.in_proj.weight.std().item()
    assert std_in == pytest.approx(0.02, rel=0.05)
    assert std_out == pytest.approx(0.02 / math.sqrt(16), rel=0.05)


def test_loss_with_targets():
    model = ResidualGPT(tiny())
    t = tokens()
    logits, loss = model(t[:, :-1], t[:, 1:])
    assert logits.shape == (3, 15, 11)
    assert loss.item() == pytest.approx(math.log(11), abs=0.1)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("d_model", 30, "divisible by n_heads"),
        ("residual", "attn", "residual must be one of"),
        ("mixer", "mlp", "mixer .mlp. is not registered in this process"),
        ("n_layers", 0, "n_layers must be a positive integer"),
        ("d_vocab", -3, "d_vocab"),
        ("dropout", 1.0, "dropout must be in [0, 1)"),
        ("dropout", -0.1, "dropout"),
    ],
)
def test_bad_config_names_the_field(field, value, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(")", r"\)")):
        tiny(**{field: value})


def test_config_round_trip():
    for cfg in (tiny(), tiny(self_bias=math.inf), tiny(self_bias=-math.inf, residual="ffn_only"), tiny(d_mlp=48)):
        assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert tiny().d_mlp == 128 and tiny().d_head == 8
    with pytest.raises(ConfigError, match="unknown"):
        ModelConfig.from_dict({**tiny().to_dict(), "n_layer": 3})


@pytest.mark.parametrize("mixer", ["attention", "uniform"])
def test_causal_kernel_matches_masked_kernel_with_gradients(mixer):
    torch.manual_seed(3)
    model = ResidualGPT(tiny(mixer=mixer))
    t = tokens()
    grads = []
    for causal_kernel in (True, False):
        for block in model.blocks:
            block.attn.causal_kernel = causal_kernel
        model.zero_grad()
        _, loss = model(t, t)
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for fast, masked in zip(*grads, strict=True):
        torch.testing.assert_close(fast, masked, atol=1e-6, rtol=1e-5)


def test_fused_layer_norm_matches_the_hooked_path():
    torch.manual_seed(4)
    model = ResidualGPT(tiny(bias=True))
    for p in model.parameters():  # non-trivial LayerNorm weights and biases
        p.data.add_(0.1 * torch.randn_like(p))
    t = tokens()
    _, fused_loss = model(t, t)
    fused_loss.backward()
    fused_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    seen = []
    hooks = [(name, lambda x, hook: seen.append(hook.name) or x) for name in model.hook_dict if "normalized" in name]
    with model.hooks(fwd_hooks=hooks):
        _, hooked_loss = model(t, t)
        hooked_loss.backward()
    assert len(seen) == 2 * 2 + 1  # the hooked path ran in every LayerNorm
    torch.testing.assert_close(fused_loss, hooked_loss)
    for fused, hooked in zip(fused_grads, [p.grad for p in model.parameters()], strict=True):
        torch.testing.assert_close(fused, hooked, atol=1e-6, rtol=1e-5)


def test_misused_inputs_are_toolkit_errors_not_raw_index_or_key_errors():
    """Ids outside the vocabulary or of a float dtype, a hook at a layer the model lacks, an attribution to a token
    past the vocabulary: each a ToolkitError naming what is wrong (a notebook catches one kind)."""
    from interp.errors import ToolkitError
    from interp.reading.decompose import direct_logit_attribution
    from interp.reading.interventions import knock_out_self

    model = ResidualGPT(ModelConfig(n_layers=2, d_model=16, n_heads=2, n_ctx=8, d_vocab=10)).eval()
    for bad, words in ((torch.tensor([[999]]), "token id 999"), (torch.tensor([[-1]]), "token id -1")):
        with pytest.raises(ToolkitError, match=words):
            model(bad)
    with pytest.raises(ToolkitError, match="integers"):
        model(torch.tensor([[1.0]]))
    with pytest.raises(ToolkitError, match=r"blocks\.9\.attn\.hook_pattern.*layers 0\.\.1"):
        model.run_with_hooks(torch.tensor([[1, 2]]), fwd_hooks=knock_out_self(9))
    with pytest.raises(KeyError):  # still a KeyError for code that catches one
        model.mod_dict["blocks.9.attn.hook_pattern"]
    _, cache = model.run_with_cache(torch.tensor([[1, 2, 3]]))
    with pytest.raises(ToolkitError, match="token id 9999"):
        direct_logit_attribution(cache, 9999, 1)
    with pytest.raises(ToolkitError, match="do not match the cache's positions"):
        direct_logit_attribution(cache, torch.tensor([[1, 2]]))
    assert direct_logit_attribution(cache, torch.tensor([[1, 2, 3]])) is not None

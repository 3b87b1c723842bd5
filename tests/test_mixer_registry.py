"""A mixer added in this file alone: it trains, exports (or is refused by name), decomposes and is probed.

Two toy mixers, each one projection wide (in_proj d -> d), which the export
once handled by an `else: # uniform` fall-through:

    toy_tied_qkv  softmax attention with q = k = v = in_proj(x): a pattern and heads,
                  and a TransformerLens export it declares (W_Q = W_K = W_V)
    toy_shift     each position reads the previous position's in_proj(x): no pattern,
                  no heads, no TransformerLens equivalent (refused, naming the mixer)
"""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from majors import TL4, export, tl3_only
from torch import nn
from transformer_lens.hook_points import HookPoint

import interp
import interp.config.registry as registry
from interp import ConfigError, ModelConfig, ResidualGPT, ToolkitError
from interp.config.registry import MIXERS, mixer_spec, register_mixer
from interp.model.mixers import CausalAttention, Mixer, PatternMixer, UniformMixer
from interp.reading.decompose import decompose, decomposition_error, direct_logit_attribution, resid_sites
from probes import measure
from probes.identity import measure_identity


@register_mixer
class TiedQKV(PatternMixer):
    name = "toy_tied_qkv"

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, n_proj=1)

    def tl_qkv(self, w_in, b_in):
        return (w_in, b_in), (w_in, b_in), (w_in, b_in)

    def forward(self, x):
        h = self._heads(self.in_proj(x))
        q, k, v = self.hook_q(h), self.hook_k(h), self.hook_v(h)
        scale = self.cfg.d_head**-0.5
        return self._mix(q, k, v, lambda q, k: torch.einsum("bqhd,bkhd->bhqk", q, k) * scale)


@register_mixer
class Shift(Mixer, nn.Module):
    name = "toy_shift"
    hook_sites = ("hook_v",)

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.in_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.hook_v = HookPoint()

    def forward(self, x):
        v = self.hook_v(self.in_proj(x))
        return self.out_proj(F.pad(v, (0, 0, 1, 0))[:, :-1])  # position t reads t - 1; position 0 reads zeros


@register_mixer
class DoubledUniform(UniformMixer):
    """A forward changed under an inherited export: TL would compute the plain uniform mixer."""

    name = "toy_doubled_uniform"

    def forward(self, x):
        return 2 * super().forward(x)


@register_mixer
class SwappedQK(CausalAttention):
    """An export that hands TL (k, q, v): every slot filled, every parameter used once, and still wrong."""

    name = "toy_swapped_qk"
    takes_self_bias = False

    def tl_qkv(self, w_in, b_in):
        q, k, v = super().tl_qkv(w_in, b_in)
        return k, q, v


@register_mixer
class Liar(Mixer, nn.Module):
    """Declares a pattern and heads, and delivers neither (no hook_pattern filled, no head_weights)."""

    name = "toy_liar"
    has_pattern, has_heads = True, True

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.lin = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x):
        return self.lin(x)


CHARS = [chr(ord("a") + i) for i in range(20)]


def model_of(mixer: str, residual: str = "full", steps: int = 5) -> ResidualGPT:
    """A few Adam steps of the model's own forward/backward on random tokens (training's smallest form)."""
    torch.manual_seed(0)
    cfg = ModelConfig(
        n_layers=2, d_model=32, n_heads=4, n_ctx=16, d_vocab=len(CHARS), residual=residual, mixer=mixer, bias=True
    )
    model = ResidualGPT(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randint(0, len(CHARS), (4, 16), generator=gen)
        _, loss = model(x[:, :-1], x[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] != losses[0]
    return model.eval()


def tokens() -> torch.Tensor:
    return torch.randint(0, len(CHARS), (3, 16), generator=torch.Generator().manual_seed(2))


def test_registered_mixers_are_valid_config_values():
    assert {"toy_tied_qkv", "toy_shift"} <= set(MIXERS) and "toy_shift" in MIXERS
    assert mixer_spec("toy_shift") is Shift and not Shift.has_pattern and not Shift.exports_to_tl()
    assert TiedQKV.has_pattern and TiedQKV.has_heads and TiedQKV.exports_to_tl()
    with pytest.raises(ConfigError, match="is not registered in this process"):
        ModelConfig(mixer="toy_unregistered")
    with pytest.raises(ConfigError, match="self_bias applies only"):
        ModelConfig(mixer="toy_tied_qkv", self_bias=1.0)  # takes_self_bias defaults to False


def test_builtin_names_match_the_registered_builtin_classes():
    import interp.model.mixers  # noqa: F401  (registers the built-ins)

    builtins = {name for name, cls in registry._REGISTRY.items() if cls.__module__ == "interp.model.mixers"}
    assert builtins == set(registry.BUILTIN_MIXERS)
    for name in builtins:  # each declares its hook sites, and they exist on the module
        block = ResidualGPT(ModelConfig(n_layers=1, d_model=8, n_heads=2, n_ctx=4, d_vocab=5, mixer=name)).blocks[0]
        assert all(isinstance(getattr(block.attn, site), HookPoint) for site in mixer_spec(name).hook_sites)


def test_a_name_is_registered_once():
    with pytest.raises(ConfigError, match="already taken"):

        @register_mixer
        class Impostor(Shift):
            name = "toy_shift"


def _module(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(source, module.__dict__)
    return module


_SHIFTED = """
from torch import nn
from interp.model.mixers import Mixer
from interp.config.registry import register_mixer

@register_mixer
class Shifted(Mixer, nn.Module):
    name = "toy_shifted"
"""


def test_a_name_taken_by_another_module_is_refused():
    first = _module("toy_moda", _SHIFTED)
    with pytest.raises(ConfigError, match="'toy_shifted' is already taken by toy_moda.Shifted"):
        _module("toy_modb", _SHIFTED)  # the same qualname from another module must not replace it
    assert mixer_spec("toy_shifted") is first.Shifted
    reloaded = _module("toy_moda", _SHIFTED)  # the same module reloaded: its class replaces the old one
    assert mixer_spec("toy_shifted") is reloaded.Shifted


def test_builtin_names_and_non_mixers_are_refused():
    with pytest.raises(ConfigError, match="'uniform' is a built-in of interp.model.mixers"):

        @register_mixer
        class MyUniform(UniformMixer):
            name = "uniform"

    with pytest.raises(ConfigError, match="must subclass interp.model.mixers.Mixer"):

        @register_mixer
        class Flags(nn.Module):
            name = "toy_flags_only"
            has_pattern = has_heads = takes_self_bias = False

    assert "toy_flags_only" not in MIXERS and mixer_spec("uniform") is UniformMixer


def test_a_builtin_name_cannot_be_taken_before_the_builtins_load():
    code = """if True:
        from torch import nn
        from interp.errors import ConfigError
        from interp.config.registry import register_mixer, mixer_spec
        try:
            @register_mixer
            class MyAttn(nn.Module):
                name = "attention"; has_pattern = has_heads = takes_self_bias = False
        except ConfigError as e:
            print("refused:", e)
        import interp.model.mixers
        print(mixer_spec("attention") is interp.model.mixers.CausalAttention)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "refused: mixer name 'attention' is a built-in" in out and out.strip().endswith("True")


@pytest.mark.parametrize("residual", ["full", "attn_only"])
def test_declared_export_is_exact(residual):
    model = model_of("toy_tied_qkv", residual)
    tl = export(model, vocab=CHARS)  # HookedTransformer on TL 3.x, TransformerBridge on 4.x
    x = tokens()
    with torch.no_grad():
        torch.testing.assert_close(tl(x), model(x), atol=1e-5, rtol=1e-5)
        _, ours = model.run_with_cache(x)
        _, theirs = tl.run_with_cache(x)
    torch.testing.assert_close(
        theirs["blocks.1.attn.hook_pattern"], ours["blocks.1.attn.hook_pattern"], atol=1e-5, rtol=1e-5
    )
    assert max(decomposition_error(theirs, s, per_head=True) for s in resid_sites(2)) < 1e-4


@tl3_only
def test_undeclared_export_is_refused_by_name():
    with pytest.raises(ConfigError, match="mixer='toy_shift' has no TransformerLens equivalent"):
        interp.to_hooked_transformer(model_of("toy_shift"), vocab=CHARS)


@pytest.mark.skipif(not TL4, reason="TransformerLens 4 only (the bridge)")
def test_bridge_runs_any_mixer_with_the_hooks_it_declares():
    model = model_of("toy_shift")
    tl = export(model, vocab=CHARS)  # the bridge runs the mixer's own forward: no export needed
    x = tokens()
    with torch.no_grad():
        expected, ours = model.run_with_cache(x)
        logits, theirs = tl.run_with_cache(x)
    assert torch.equal(logits, expected) and torch.equal(theirs["blocks.1.attn.hook_v"], ours["blocks.1.attn.hook_v"])
    with pytest.raises(ToolkitError, match="mixer='toy_shift', has no heads, no attention pattern.*are hook_v"):
        tl.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_pattern", lambda t, hook: t)])
    with pytest.raises(ToolkitError, match="mixer='toy_shift' has no TransformerLens attention weights"):
        _ = tl.W_Q


@tl3_only
@pytest.mark.parametrize("mixer", ["toy_doubled_uniform", "toy_swapped_qk"])
def test_an_export_whose_logits_differ_is_refused_by_name(mixer):
    from interp.tl.hooked import to_hooked_transformer

    model = model_of(mixer).train()
    with pytest.raises(ToolkitError, match=rf"mixer '{mixer}': the HookedTransformer's logits differ .* by up to"):
        to_hooked_transformer(model, vocab=CHARS)
    assert model.training  # the check ran in eval mode and gave the model back as it was


@pytest.mark.parametrize("mixer", ["toy_tied_qkv", "toy_shift"])
def test_decomposition_is_exact_per_head_where_declared(mixer):
    model = model_of(mixer, "ffn_only")
    x = tokens()
    with torch.no_grad():
        _, cache = model.run_with_cache(x)
    assert max(decomposition_error(cache, s, per_head=h) for s in resid_sites(2) for h in (False, True)) < 1e-4
    labels = decompose(cache, "final", per_head=True).labels
    assert ("L1H0" in labels) == (mixer == "toy_tied_qkv") and ("1_attn_out" in labels) == (mixer == "toy_shift")
    dla = direct_logit_attribution(cache, x)
    torch.testing.assert_close(dla.total(), dla.target, atol=1e-4, rtol=1e-4)


def test_declared_but_undelivered_pattern_and_heads_are_refused_by_name():
    from probes.attention import attention_stats

    model = model_of("toy_liar", steps=2)
    x = tokens()
    with pytest.raises(ToolkitError, match="mixer 'toy_liar' declares has_pattern=True but filled .* in 0 of 2"):
        attention_stats(model, [(x, x)])
    with torch.no_grad():
        _, cache = model.run_with_cache(x)
    with pytest.raises(ToolkitError, match="mixer 'toy_liar' declares has_heads=True but its head_weights"):
        decompose(cache, "final", model, per_head=True)
    assert "1_attn_out" in decompose(cache, "final", model).labels  # without per_head: whole, as before


@pytest.mark.parametrize("mixer", ["toy_tied_qkv", "toy_shift"])
def test_probes_read_what_the_mixer_declares(mixer):
    model = model_of(mixer, "attn_only")
    x = tokens()
    result = measure(model, x)
    if mixer == "toy_shift":
        assert result["attention"] == {"skipped": "toy_shift mixer has no attention pattern"}
    else:
        assert len(result["attention"]["alpha_tt"]) == 2 and 0 < result["attention"]["alpha_tt_layer_mean"][0] < 1
    assert len(result["norms"]["norms"]) == len(resid_sites(2)) and result["gradients"]["total"] > 0
    train = torch.randint(0, len(CHARS), (400,), generator=torch.Generator().manual_seed(3)).numpy()
    identity = measure_identity(model, train, [(x[:, :-1], x[:, 1:])], n_train_windows=4, max_iter=2)
    assert len(identity["accuracy"]) == len(resid_sites(2)) + 1

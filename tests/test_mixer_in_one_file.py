"""docs/DESIGN.md "Adding a mixer": a new mixer needs no file but the one that defines it - this one.

`local_window` is causal softmax attention in which each query reads only the last `window` keys, itself
included; `window` is the mixer's own parameter (ModelConfig.mixer_params), declared beside its forward.
Defined and registered here only, it is taken through everything the toolkit does with a mixer:
configs and run names (two windows, two run directories), training on the smoke preset (Trainer, run
directory, checkpoint), the TransformerLens export of the installed major (3.x: HookedTransformer,
logits exact; 4.x: the bridge, whose own test below skips on 3.x), exact decompositions, the
interventions (on the model and on the export), attention scores rebuilt from hook_q / hook_k, and
the probes. Nothing in the package names it: what it does follows from its declarations
(params, key_mask, tl_qkv, tl_routes_scores / tl_scores).
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch
from einops import einsum
from majors import TL4, export, tl3_only

from interp import ConfigError, ModelConfig, ResidualGPT, ToolkitError
from interp.config.registry import MIXERS, mixer_spec, register_mixer
from interp.model.mixers import PatternMixer
from interp.reading import interventions as iv
from interp.reading.decompose import decompose, decomposition_error, direct_logit_attribution, resid_sites
from interp.reading.scores import attention_scores, routing_bias


@register_mixer
class LocalWindow(PatternMixer):
    """Causal softmax attention over the last `window` keys (query t reads keys t - window + 1 .. t)."""

    name = "local_window"
    params = {"window": 4}

    @classmethod
    def check_params(cls, params):
        if params["window"] < 1:
            raise ConfigError(f"local_window: window must be at least 1 (the query itself), got {params['window']}")

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, n_proj=3)

    def key_mask(self, n, device):  # both of PatternMixer's paths (fused and explicit) read it
        q = torch.arange(n, device=device)[:, None]
        k = torch.arange(n, device=device)[None, :]
        return (k <= q) & (q - k < self.cfg.mixer_params["window"])

    def forward(self, x):
        q, k, v = self.in_proj(x).split(self.cfg.d_model, dim=-1)
        q, k, v = self.hook_q(self._heads(q)), self.hook_k(self._heads(k)), self.hook_v(self._heads(v))
        scale = self.cfg.d_head**-0.5
        return self._mix(q, k, v, lambda q, k: einsum(q, k, "b q h dh, b k h dh -> b h q k") * scale)

    # the export: TL's attention weights, and its causally masked scores cut to the window
    def tl_qkv(self, w_in, b_in):
        return tuple(zip(w_in.chunk(3), b_in.chunk(3), strict=True))

    @classmethod
    def tl_routes_scores(cls, cfg):
        return True

    @classmethod
    def tl_scores(cls, cfg, scores):
        n_q, n_k = scores.shape[-2:]
        q_pos = torch.arange(n_k - n_q, n_k, device=scores.device)[:, None]  # the last n_q (a kv cache)
        too_old = q_pos - torch.arange(n_k, device=scores.device)[None, :] >= cfg.mixer_params["window"]
        return scores.masked_fill(too_old, -math.inf)


N_CTX = 12


def window_model(window: int = 4, residual: str = "full", seed: int = 0) -> ResidualGPT:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        n_layers=2,
        d_model=32,
        n_heads=4,
        n_ctx=N_CTX,
        d_vocab=20,
        residual=residual,
        bias=True,
        mixer="local_window",
        mixer_params={"window": window},
        init_std=0.2,
    )
    model = ResidualGPT(cfg).eval()
    with torch.no_grad():  # a trained LayerNorm is not the identity
        model.ln_final.w.uniform_(0.5, 2.0)
    return model


def tokens(seed: int = 1, n: int = 3) -> torch.Tensor:
    return torch.randint(0, 20, (n, N_CTX), generator=torch.Generator().manual_seed(seed))


VOCAB = [chr(ord("a") + i) for i in range(20)]


# ----- the config and the run name -------------------------------------------------------------------


def test_the_window_is_a_declared_parameter_of_the_config():
    assert "local_window" in MIXERS and mixer_spec("local_window") is LocalWindow
    cfg = ModelConfig(mixer="local_window")
    assert cfg.mixer_params == {"window": 4}  # the declared default, filled in
    eight = cfg.replace(mixer_params={"window": 8})
    assert eight != cfg and hash(eight) != hash(cfg) and eight.to_dict()["mixer_params"] == {"window": 8}
    assert ModelConfig.from_dict(json.loads(json.dumps(eight.to_dict()))) == eight
    assert "mixer_params" not in ModelConfig().to_dict()  # the built-ins' records are as they were
    with pytest.raises(ConfigError, match="window must be at least 1"):
        ModelConfig(mixer="local_window", mixer_params={"window": 0})
    with pytest.raises(ConfigError, match="parameter window must be int, got '4'"):
        ModelConfig(mixer="local_window", mixer_params={"window": "4"})
    with pytest.raises(ConfigError, match=r"no parameter\(s\) \['stride'\]; its parameters: window"):
        ModelConfig(mixer="local_window", mixer_params={"stride": 2})
    with pytest.raises(ConfigError, match=r"'attention' has no parameter\(s\) \['window'\]"):
        ModelConfig(mixer_params={"window": 4})
    with pytest.raises(TypeError, match="read-only"):
        cfg.mixer_params["window"] = 8


def test_two_windows_never_share_a_run_directory(tmp_path):
    from experiments.runner.frame import Group, Job, check_distinct_dirs
    from experiments.shared.plan import Variant
    from training.presets import parse_overrides, resolve
    from training.run_config import slug, variant_name
    from training.rundir import RunDir

    four, eight = (dict(mixer="local_window", mixer_params={"window": w}) for w in (4, 8))
    assert variant_name(four) == "full + local_window window=4"
    assert variant_name(eight) == "full + local_window window=8"
    assert variant_name(dict(mixer="local_window")) == variant_name(four)  # the default is spelled too
    assert variant_name(ModelConfig(mixer="local_window").to_dict()) == variant_name(four)  # the trainer CLI's way
    assert slug(variant_name(four)) != slug(variant_name(eight))
    assert RunDir.of(tmp_path, "smoke", variant_name(four), 0) != RunDir.of(tmp_path, "smoke", variant_name(eight), 0)
    assert parse_overrides(['mixer_params={"window": 8}']) == {"mixer_params": {"window": 8}}  # --set
    with pytest.raises(ConfigError, match="expects a JSON object"):
        parse_overrides(["mixer_params=8"])
    group = Group(resolve("smoke", {}), [Variant.of(**four), Variant.of(**eight)])
    check_distinct_dirs([Job(group, v, 0) for v in group.variants])  # the frame's check passes them


# ----- both paths of the forward --------------------------------------------------------------------------


def test_the_fused_and_explicit_paths_read_only_the_window():
    model = window_model(window=3)
    x = tokens()
    with torch.no_grad():
        fused = model(x)  # no hook asks for the pattern: SDPA with the mixer's key_mask
        logits, cache = model.run_with_cache(x)
    torch.testing.assert_close(fused, logits, atol=1e-5, rtol=1e-5)
    pattern = cache["blocks.0.attn.hook_pattern"]
    q, k = torch.arange(N_CTX)[:, None], torch.arange(N_CTX)[None, :]
    outside = (k > q) | (q - k >= 3)
    assert pattern[..., outside].abs().max() == 0 and pattern[..., ~outside].min() > 0
    torch.testing.assert_close(pattern.sum(-1), torch.ones_like(pattern.sum(-1)))
    # causal, and two layers of window 3 see 5 positions back and no further
    changed = x.clone()
    changed[:, 2] = (changed[:, 2] + 1) % 20
    with torch.no_grad():
        moved = (model(changed) - fused).abs().amax(dim=(0, 2))
    assert moved[:2].max() == 0 and moved[2:7].min() > 0 and moved[7:].max() == 0
    # a window as long as the context is plain causal attention, weight for weight
    wide = window_model(window=N_CTX)
    plain = ResidualGPT(wide.cfg.replace(mixer="attention", mixer_params={})).eval()
    plain.load_state_dict(wide.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(wide(x), plain(x), atol=1e-5, rtol=1e-5)


# ----- training through the project's Trainer -----------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Six smoke-preset steps of window 4 through the Trainer, into the run directory its name gives."""
    from conftest import data_root

    from probes import default_callbacks
    from training.presets import resolve
    from training.run_config import variant_name
    from training.rundir import RunDir
    from training.trainer import Trainer

    out = tmp_path_factory.mktemp("window_runs")
    spec = resolve(
        "smoke",
        {
            "mixer": "local_window",
            "mixer_params": {"window": 4},
            "max_steps": 6,
            "eval_interval": 3,
            "ckpt_interval": 3,
            "log_interval": 3,
            "eval_batches": 2,
        },
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESIDUAL_DATA_DIR", str(data_root()))
        run = RunDir.of(out, "smoke", variant_name(spec.model.to_dict()), spec.train.seed)
        final = Trainer(spec.model, spec.train, run, callbacks=default_callbacks(spec.train), progress=False).run()
    return spec, run, final


def test_it_trains_on_the_smoke_preset_into_its_own_run_directory(trained, monkeypatch):
    from conftest import data_root

    from training.presets import resolve
    from training.rundir import RunDirError
    from training.trainer import Trainer

    spec, run, final = trained
    assert run.path.parent.name == "full_local_window_window=4" and run.final.exists()
    assert math.isfinite(final["final_val_loss"]) and final["steps"] == 6
    assert json.loads(run.config.read_text())["model"]["mixer_params"] == {"window": 4}
    records = [json.loads(line) for line in run.probes.read_text().splitlines()]
    attention = [r for r in records if r["probe"] == "attention"]  # the probes read its pattern:
    assert attention and all(0 < a <= 1 for r in attention for a in np.ravel(r["alpha_tt"]))
    assert all(0 < d <= 3 for r in attention for d in np.ravel(r["distance"]))  # never past the window
    model = ResidualGPT.from_checkpoint(run.ckpt)
    # d_vocab is the corpus's (65 on TinyShakespeare, 32 on the synthetic corpus of an offline clone)
    assert model.cfg == spec.model.replace(d_vocab=model.cfg.d_vocab) and model.cfg.mixer_params["window"] == 4
    # a window-8 config asked of the window-4 directory is refused before anything trains
    monkeypatch.setenv("RESIDUAL_DATA_DIR", str(data_root()))
    other = resolve("smoke", {**spec.overrides, "mixer_params": {"window": 8}})
    with pytest.raises(RunDirError, match="config"):
        Trainer(other.model, other.train, run, progress=False).run()


# ----- TransformerLens --------------------------------------------------------------------------------------


@pytest.mark.parametrize("residual", ["full", "ffn_only"])
def test_the_export_of_the_installed_major_is_exact(residual):
    model = window_model(window=3, residual=residual)
    tl = export(model, vocab=VOCAB)  # a HookedTransformer on TL 3.x, the TransformerBridge on 4.x
    x = tokens()
    with torch.no_grad():
        ours_logits, ours = model.run_with_cache(x)
        tl_logits, theirs = tl.run_with_cache(x)
    torch.testing.assert_close(tl_logits, ours_logits, atol=1e-5, rtol=1e-5)
    for name in ("blocks.1.attn.hook_attn_scores", "blocks.1.attn.hook_pattern", "blocks.1.hook_resid_post"):
        torch.testing.assert_close(theirs[name], ours[name], atol=1e-5, rtol=1e-5)
    assert max(decomposition_error(theirs, s, per_head=True) for s in resid_sites(2)) < 1e-4


def test_the_trained_checkpoint_exports(trained):
    _, run, _ = trained
    model = ResidualGPT.from_checkpoint(run.ckpt)
    tl = export(run.ckpt)
    x = tokens(n=2) % model.cfg.d_vocab
    with torch.no_grad():
        torch.testing.assert_close(tl(x), model(x), atol=1e-5, rtol=1e-5)


@tl3_only
def test_the_hooked_export_records_the_window_in_its_routing():
    tl = export(window_model(window=3), vocab=VOCAB)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # WeightsOnlyWarning: the state dict alone is not the model (we know)
        sd = tl.state_dict()
    assert sd["blocks.0.attn.hook_attn_scores.routing_local_window_window"].item() == 3


@pytest.mark.skipif(not TL4, reason="TransformerLens 4 only (the bridge); TL 3.x's export is tested above")
def test_the_bridge_runs_it_and_its_state_dict_names_the_window():
    four, eight = export(window_model(window=4), vocab=VOCAB), export(window_model(window=8), vocab=VOCAB)
    sd = four.state_dict()
    assert json.loads(bytes(sd["wiring.mixer_params"].tolist()).decode()) == {"window": 4}
    with pytest.raises(ToolkitError, match="wiring.mixer_params"):  # a window-4 state dict is not window 8's
        eight.load_state_dict(sd)


# ----- reading the model --------------------------------------------------------------------------------------


@pytest.mark.parametrize("residual", ["full", "attn_only", "ffn_only", "none"])
def test_decompositions_are_exact(residual):
    model = window_model(window=3, residual=residual)
    x = tokens()
    with torch.no_grad():
        _, cache = model.run_with_cache(x)
    assert max(decomposition_error(cache, s, model, per_head=h) for s in resid_sites(2) for h in (False, True)) < 1e-5
    labels = decompose(cache, "final", model, per_head=True).labels
    assert ("L1H3" in labels) == (residual in ("full", "ffn_only"))  # heads where attention reaches the end
    dla = direct_logit_attribution(cache, x, model=model)
    torch.testing.assert_close(dla.total(), dla.target, atol=1e-4, rtol=1e-4)


def test_attention_scores_are_rebuilt_with_the_window():
    model = window_model(window=3)
    x = tokens()
    with torch.no_grad():
        _, cache = model.run_with_cache(x)
        tl_cache = export(model, vocab=VOCAB).run_with_cache(x)[1]
    for source, c in ((model, cache), (model.cfg, tl_cache)):
        for layer in range(2):
            rebuilt = attention_scores(source, c["q", layer], c["k", layer])
            torch.testing.assert_close(rebuilt, c["attn_scores", layer], atol=1e-5, rtol=1e-5)
    bias = routing_bias(model, 5)
    q, k = torch.arange(5)[:, None], torch.arange(5)[None, :]
    assert (bias[(k <= q) & (q - k < 3)] == 0).all() and (bias[(k <= q) & (q - k >= 3)] == -math.inf).all()
    assert not LocalWindow.replaces_scores and not LocalWindow.pattern_is_causal_uniform(model.cfg)


def test_the_pattern_interventions_apply_on_the_model_and_its_export():
    model = window_model(window=3)
    tl = export(model, vocab=VOCAB)
    x, y = tokens(), tokens(seed=2)
    clean = iv.per_sequence_loss(model, x, y)[0]
    for name in ("knock_out_self", "self_only", "uniform_pattern"):
        assert iv.applicable(model, name) and iv.applicable(tl, name)
        for layer in range(2):
            hooks = iv.layer_hooks(name, layer)
            ours = iv.per_sequence_loss(model, x, y, hooks)[0]
            torch.testing.assert_close(iv.per_sequence_loss(tl, x, y, hooks)[0], ours, atol=1e-5, rtol=1e-5)
            assert torch.isfinite(ours).all() and not torch.equal(ours, clean)
    # window 1 reads only itself: self_only changes nothing, knock_out_self leaves every query nothing
    one = window_model(window=1)
    seen = {}
    hooks = [("blocks.0.attn.hook_pattern", lambda p, hook: seen.setdefault("p", p))]
    base = iv.per_sequence_loss(one, x, y)[0]
    torch.testing.assert_close(iv.per_sequence_loss(one, x, y, iv.self_only(0) + iv.self_only(1))[0], base)
    iv.per_sequence_loss(one, x, y, iv.knock_out_self(0) + hooks)
    assert seen["p"].abs().max() == 0
    zero = iv.per_sequence_loss(one, x, y, iv.ablate_heads(0, [0, 1, 2, 3]))[0]
    assert iv.applicable(one, "zero_head") and not torch.equal(zero, base)


def test_the_interventions_experiment_reads_it_from_its_declarations():
    from experiments.interventions import effects as fx

    model = window_model(window=3)
    x, y = tokens(n=4), tokens(seed=2, n=4)
    diff = fx.export_difference(model, (x, y), patch_pos=6, unigram=np.full(20, 1 / 20))
    assert diff is not None and diff["max_abs_diff"] < 1e-4
    assert {"knock_out_self", "self_only", "uniform_pattern"} <= set(diff["per_intervention"])
    assert fx.n_ticks(model.cfg, identity=False) == 2 + 5 * 2 + 2 * 2 * 4 + 1  # pattern and heads counted


def test_the_probes_read_its_pattern():
    from probes import measure

    x = tokens()
    alpha = measure(window_model(window=1, residual="attn_only"), x)["attention"]["alpha_tt"]
    assert np.allclose(alpha, 1.0)  # a window of one reads only itself
    assert all(0 < a < 1 for a in np.ravel(measure(window_model(window=3), x)["attention"]["alpha_tt"]))

"""Probes on constructed cases: alpha_tt, hidden norms and gradient norms against hand computations."""

import math

import pytest
import torch

from interp import ConfigError, ModelConfig, ResidualGPT, load_checkpoint, save_checkpoint
from probes import (
    attention_stats,
    gradient_flow,
    hidden_norms,
    measure,
    parameter_grad_norms,
    pattern_stats,
    uniform_baseline,
)
from probes.gradients import capture_resid_grads


def model_of(**kw):
    torch.manual_seed(0)
    cfg = ModelConfig(**{"n_layers": 2, "d_model": 32, "n_heads": 4, "n_ctx": 12, "d_vocab": 11, **kw})
    return ResidualGPT(cfg)


def batches(n=2, batch=3, seq=12):
    g = torch.Generator().manual_seed(5)
    return [
        (torch.randint(0, 11, (batch, seq), generator=g), torch.randint(0, 11, (batch, seq), generator=g))
        for _ in range(n)
    ]


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
    by_hand = math.sqrt(
        sum(p.grad.pow(2).sum().item() for n, p in model.named_parameters() if n.startswith("blocks.0.attn."))
    )
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


def test_measure_on_a_checkpoint_equals_the_probes_on_the_model(tmp_path):
    model = model_of(residual="attn_only")
    with torch.no_grad():
        for block in model.blocks:  # sharper attention than the init's: the stats differ between weights
            block.attn.in_proj.weight.mul_(4.0)
    save_checkpoint(tmp_path / "ckpt.pt", model)
    data = batches()
    direct = {
        "attention": attention_stats(model, data),
        "norms": hidden_norms(model, data),
        "gradients": gradient_flow(model, torch.cat([x for x, _ in data]), torch.cat([y for _, y in data])),
    }  # the gradients of every batch (one length here: concatenated), not the first batch's (issue 46)
    assert measure(tmp_path / "ckpt.pt", data) == direct  # bit for bit: the same weights, the same order
    assert measure(load_checkpoint(tmp_path / "ckpt.pt"), data) == direct
    assert measure(model, data) == direct


# ----------------------------------------------------------------------------------------------------------
# pattern_stats by hand: two heads of different patterns, two batches of unequal size


def hand_patterns(batch: int, dtype=torch.float64) -> torch.Tensor:
    """[batch, 2 heads, 4, 4]. Batch of 1: head 0 splits 1/2 self, 1/2 previous; head 1 is uniform.
    Batch of 3: head 0 puts everything on position 0; head 1 everything on itself. Row 0 is [1, 0, 0, 0]."""
    n = 4
    eye, first = torch.eye(n, dtype=dtype), torch.zeros(n, n, dtype=dtype)
    first[:, 0] = 1.0
    if batch == 1:
        split = 0.5 * eye + 0.5 * torch.diag(torch.ones(n - 1, dtype=dtype), -1)
        split[0, 0] = 1.0
        uniform = torch.tril(torch.ones(n, n, dtype=dtype)) / torch.arange(1, n + 1, dtype=dtype)[:, None]
        heads = [split, uniform]
    else:
        heads = [first, eye]
    return torch.stack(heads).expand(batch, 2, n, n).clone()


# Per batch, means over t = 1, 2, 3:
#   split:   alpha 1/2, prev 1/2, entropy ln 2, distance 1/2
#   uniform: alpha = prev = (1/2 + 1/3 + 1/4) / 3 = 13/36, entropy (ln 2 + ln 3 + ln 4) / 3,
#            distance (1/2 + 1 + 3/2) / 3 = 1
#   first:   alpha 0, prev (1 + 0 + 0) / 3 = 1/3, entropy 0, distance (1 + 2 + 3) / 3 = 2
#   self:    alpha 1, prev 0, entropy 0, distance 0
# Over both batches each sequence counts once: (1 x batch-of-1 value + 3 x batch-of-3 value) / 4.
EXPECTED = {
    "alpha_tt": [(1 / 2 + 3 * 0) / 4, (13 / 36 + 3 * 1) / 4],
    "prev_token": [(1 / 2 + 3 * 1 / 3) / 4, (13 / 36 + 3 * 0) / 4],
    "entropy": [(math.log(2) + 0) / 4, ((math.log(2) + math.log(3) + math.log(4)) / 3 + 0) / 4],
    "distance": [(1 / 2 + 3 * 2) / 4, (1 + 3 * 0) / 4],
}


def test_pattern_stats_by_hand():
    stats = pattern_stats(torch.cat([hand_patterns(1), hand_patterns(3)]))
    for name, expected in EXPECTED.items():
        assert stats[name].tolist() == pytest.approx(expected, abs=1e-12), name


def test_attention_stats_weights_batches_by_their_size():
    model = model_of(n_heads=2, n_ctx=4)

    def hand(pattern, hook):
        return hand_patterns(pattern.shape[0], pattern.dtype)

    data = [(torch.zeros(1, 4, dtype=torch.long),) * 2, (torch.zeros(3, 4, dtype=torch.long),) * 2]
    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_pattern", hand)]):
        stats = attention_stats(model, data)
    for name, expected in EXPECTED.items():
        assert stats[name][0] == pytest.approx(expected, abs=1e-6), name  # float32 patterns in the model
    assert stats["uniform_baseline"] == pytest.approx(13 / 36)
    assert stats["alpha_tt_layer_mean"][0] == pytest.approx((1 / 8 + (13 / 36 + 3) / 4) / 2)


# ----------------------------------------------------------------------------------------------------------
# What the default probes cost, in counted work (the wall-clock side lives in the benchmark)


class ForwardCounter:
    """Sequences through the model's forward, split by train / eval mode (probes run in eval mode)."""

    def __init__(self):
        self.sequences = {"train": 0, "eval": 0}

    def on_train_start(self, trainer):
        def count(module, args):
            self.sequences["train" if module.training else "eval"] += args[0].shape[0]

        trainer.model.register_forward_pre_hook(count)


def probe_work(preset: str, tmp_path, **overrides) -> dict:
    """Train preset with and without the default probes; forward sequences and probe records of each."""
    from interp.files.io import read_jsonl
    from probes import default_callbacks
    from training.presets import resolve
    from training.trainer import Trainer

    out = {}
    for probes in (False, True):
        spec = resolve(preset, {"probes": probes, **overrides})
        counter = ForwardCounter()
        callbacks = [counter, *(default_callbacks(spec.train) if probes else [])]
        run = tmp_path / f"probes-{probes}"
        final = Trainer(spec.model, spec.train, run, callbacks=callbacks, progress=False).run()
        records = [r["probe"] for r in read_jsonl(run / "probes.jsonl")]
        out[probes] = {**counter.sequences, "records": records, "wall_time_s": final["wall_time_s"]}
    return out


def check_default_probe_work(work: dict, train) -> None:
    """cpu-quick's schedule cut to 150 steps: evaluations at 100 and 150 (from step 75 on, eval_from 0.5);
    activation probes at the last one (every 200 steps and the last) on 2 batches, twice (attention, norms);
    gradient probes inside the training step."""
    from probes import default_callbacks

    without, with_probes = work[False], work[True]
    evals = train.eval_steps()
    interval = default_callbacks(train)[1].interval
    probed = [s for s in evals if s % interval == 0 or s == train.max_steps]
    assert (train.max_steps, evals, probed) == (150, [100, 150], [150])
    assert with_probes["train"] == without["train"] == 150 * train.batch_size  # gradient probe: no extra forward
    assert without["eval"] == len(evals) * train.eval_batches * train.batch_size
    extra = with_probes["eval"] - without["eval"]
    assert extra == len(probed) * 2 * 2 * train.batch_size
    assert extra <= 0.10 * with_probes["train"]  # forward only; each training sequence also runs backward
    assert with_probes["records"].count("gradients") == len([*range(0, 150, train.log_interval), 149])
    assert with_probes["records"].count("attention") == with_probes["records"].count("norms") == len(probed)
    assert without["records"] == []


def test_default_probes_add_at_most_ten_percent_forward_work(data, tmp_path):
    """The cpu-quick schedule with a tiny model and batch: the counts scale with the batch, not the model."""
    from training.presets import resolve

    small = {"n_layers": 1, "d_model": 16, "n_heads": 2, "n_ctx": 8, "batch_size": 4, "max_steps": 150}
    work = probe_work("cpu-quick", tmp_path, **small)
    check_default_probe_work(work, resolve("cpu-quick", small).train)


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

"""python -m experiments.gain_confound: the paper's section 5.1 - a gain on the sublayer outputs, two ways.

For each partial config (--configs, default attn_only,ffn_only) every sublayer output is scaled by g in
--gains (default 0.25,0.5,1,2,4):

    (a) runtime   ModelConfig.runtime_gain = g: the output is multiplied by g in every forward pass
                  (the paper's first, confounded experiment)
    (b) weights   model_init multiplies every block's attn.out_proj.weight and mlp.out_proj.weight by g once,
                  before the optimizer is built (the paper's fix)

g = 1 is the same run both ways and is trained once. Reported: the spread (max - min over g) of the
validation-loss curves at every evaluation step, per way and config; the first step after which way (a)'s
spread stays below --threshold (0.002 nats; the paper: under AdamW the runtime-gain curves overlap within 0.002
after about 200 steps, so the runtime gain tests nothing); and whether way (b) rescues a partial config
(rescued = final val below unigram - margin while g = 1's is not).

Default run length: the paper's claim is about the first ~200 steps, so unless --set says otherwise every run
is trained for max_steps = min(preset's, 250) with eval_interval = min(preset's, 25), evaluated from step 0
(eval_from = 0, whatever the preset's) and probes off (the 18 default cpu-quick runs would take ~25 min at the
full 900 steps on 2 cores). --set max_steps=N / eval_interval=N / eval_from=F / probes=true override these.
The cosine schedule decays over max_steps, so a shortened run is not the first steps of a full-length one
(warmup is unchanged; paper-124m's 2,000 warmup steps exceed 250: set max_steps there).

Why the runtime gain tests nothing under Adam (printed, and in report.html; adam_invariance_check() shows it
numerically): for y = g*f(x; W), dL/dW = g * (df/dW)^T dL/dy. Adam's step m_hat / (sqrt(v_hat) + eps) is
unchanged when every gradient is multiplied by the same constant c (m scales by c, sqrt(v) by |c|), up to eps.
So W takes the same steps whatever g is; what remains is the constant g in front of f, and a LayerNorm removes a
constant factor from its input exactly, up to its eps (1e-5).

results.json schema ("gain-confound/1"):
    schema, experiment   "gain-confound/1", "gain_confound"
    preset, seeds, configs, gains, threshold, margin
    defaults             the overrides this experiment applied by default ({max_steps, eval_interval, eval_from,
                         probes})
    config               {"model", "train"} as run (preset + defaults + --set), "overrides",
                         "variants" (name -> {config, way, gain, overrides})
    reference_levels     {"unigram", "bigram", ...} on the fixed validation batches (train-split counts)
    runs                 one per (variant, seed): variant, config, way ("both" for g = 1, "runtime", "weights"),
                         gain, seed, run_dir, final_val_loss, best_val_loss, best_step, steps, wall_time_s,
                         tokens_per_s, val_curve {steps, loss}, train_curve {steps, loss}
    spread               config -> way -> seed -> {steps, spread (max - min over g at each step), settle_step
                         (first step after which spread < threshold, null if never), final_spread}
    settle_step          config -> way -> the latest settle_step over seeds (null if any seed never settles)
    rescue               config -> {g1_final (mean over seeds), by_gain: g -> {final_val_loss, best_val_loss,
                         delta_vs_g1, below_floor, rescued}, rescued_gains [g], verdict (text)}
    finals               config -> way -> g -> mean final val loss over seeds
    paper                the paper's reported figures for this preset (text), or null
    adam_invariance      adam_invariance_check(): {max_rel_update_diff (eps -> 0), max_rel_update_diff_eps_default,
                         optimizer {...}, model {...}, metric, gains, steps, eps}
    explanation          the derivation, in words
    software             library versions; train_wall_time_s, wall_time_s, created
"""

from __future__ import annotations

import functools
import math
from typing import Any

from experiments.gain_confound.adam_invariance import EXPLANATION, adam_invariance_check, adam_line, gain_label
from experiments.runner.frame import Context, Experiment, Group, Variant, check_number, run_summary
from experiments.runner.text import fmt_number, format_table, reference_lines, seed_curves, table_figure
from experiments.statistics.stats import settle_step, stats
from interp.command.cli import default_option
from interp.config.model_config import RESIDUALS
from interp.errors import ToolkitError

SCHEMA = "gain-confound/1"
DEFAULT_CONFIGS = ("attn_only", "ffn_only")
DEFAULT_GAINS = (0.25, 0.5, 1.0, 2.0, 4.0)
DEFAULT_THRESHOLD = 0.002
DEFAULT_MARGIN = 0.05
DEFAULT_MAX_STEPS = 250
WAYS = ("runtime", "weights")  # the two ways a gain is applied; g = 1 (way "both") belongs to each
DEFAULT_EVAL_INTERVAL = 25
PAPER_NOTE = {  # what the paper reports for its 10M setting (section 5.1)
    "paper-10m": "paper (10M): runtime g = 2.0 first appeared to recover attn_only to best val 1.54; the runtime-gain "
    "curves overlapped within 0.002 after ~200 steps under AdamW, so the result was withdrawn",
}


def scale_output_projections(model, gain: float) -> None:
    """Way (b): multiply every block's attn.out_proj.weight and mlp.out_proj.weight by gain, once."""
    import torch

    with torch.no_grad():
        for block in model.blocks:
            block.attn.out_proj.weight.mul_(gain)
            block.mlp.out_proj.weight.mul_(gain)


def gain_variants(configs: list[str], gains: list[float]) -> list[tuple[Variant, dict[str, Any]]]:
    """(Variant, {config, way, gain}) for every config: g = 1 once, then runtime and weights for each other g."""
    out = []
    for c in configs:
        out.append((Variant(f"{c} g=1", {"residual": c}), {"config": c, "way": "both", "gain": 1.0}))
        for way in WAYS:
            for g in (g for g in gains if g != 1.0):
                overrides = {"residual": c, **({"runtime_gain": g} if way == "runtime" else {})}
                init = functools.partial(scale_output_projections, gain=g) if way == "weights" else None
                tag = {"config": c, "way": way, "gain": g}
                out.append((Variant(f"{c} {way} g={gain_label(g)}", overrides, init), tag))
    return out


# ----- aggregation ----------------------------------------------------------------------------------------


def runs_of(runs: list[dict[str, Any]], config: str, way: str) -> list[dict[str, Any]]:
    """The runs of one config applied one way, g = 1 (way "both") among them."""
    return [r for r in runs if r["config"] == config and r["way"] in ("both", way)]


def spreads(runs: list[dict[str, Any]], configs: list[str], seeds: list[int], threshold: float) -> dict[str, Any]:
    """config -> way -> seed: the spread of the validation curves across gains at each common step."""
    return {
        c: {w: {str(seed): spread_of(runs_of(runs, c, w), seed, threshold) for seed in seeds} for w in WAYS}
        for c in configs
    }


def spread_of(runs: list[dict[str, Any]], seed: int, threshold: float) -> dict[str, Any]:
    curves = [r for r in runs if r["seed"] == seed]
    steps = sorted(set.intersection(*(set(r["val_curve"]["steps"]) for r in curves)))
    losses = [dict(zip(r["val_curve"]["steps"], r["val_curve"]["loss"], strict=True)) for r in curves]
    spread = [max(l[s] for l in losses) - min(l[s] for l in losses) for s in steps]
    return {
        "steps": steps,
        "spread": spread,
        "settle_step": settle_step(steps, spread, threshold) if len(curves) > 1 else None,
        "final_spread": spread[-1] if spread else None,
        "gains": sorted(r["gain"] for r in curves),
    }


def latest_settle(spread: dict[str, Any]) -> dict[str, Any]:
    """config -> way: the last seed's settle step (None while any seed has not settled)."""
    settles = {
        c: {w: [v["settle_step"] for v in per_seed.values()] for w, per_seed in ways.items()}
        for c, ways in spread.items()
    }
    return {c: {w: None if None in s else max(s) for w, s in ways.items()} for c, ways in settles.items()}


def finals(runs: list[dict[str, Any]], configs: list[str], gains: list[float]) -> dict[str, Any]:
    """config -> way -> gain: the mean final validation loss."""
    return {c: {w: {gain_label(g): _mean_final(runs_of(runs, c, w), g) for g in gains} for w in WAYS} for c in configs}


def _mean_final(runs: list[dict[str, Any]], gain: float) -> float:
    return stats([r["final_val_loss"] for r in runs if r["gain"] == gain])["mean"]


def rescue(
    runs: list[dict[str, Any]], configs: list[str], gains: list[float], levels: dict[str, Any], margin: float
) -> dict[str, Any]:
    floor = levels["unigram"] - margin
    out: dict[str, Any] = {}
    for c in configs:
        g1 = _mean_final(runs_of(runs, c, "both"), 1.0)
        by_gain = {}
        for g in (g for g in gains if g != 1.0):
            rs = [r for r in runs if r["config"] == c and r["way"] == "weights" and r["gain"] == g]
            final = stats([r["final_val_loss"] for r in rs])
            below = final["mean"] < floor
            by_gain[gain_label(g)] = {
                "final_val_loss": final,
                "best_val_loss": stats([r["best_val_loss"] for r in rs]),
                "delta_vs_g1": final["mean"] - g1,
                "below_floor": below,
                "rescued": below and not g1 < floor,
            }
        rescued = [g for g, v in by_gain.items() if v["rescued"]]
        best_g, best = min(by_gain.items(), key=lambda kv: kv[1]["final_val_loss"]["mean"]) if by_gain else (None, None)
        if g1 < floor:
            verdict = f"nothing to rescue: g=1 ends at {g1:.3f}, already below the floor ({floor:.3f}); " + (
                f"best weights gain g={best_g}: {best['delta_vs_g1']:+.3f} vs g=1" if best else ""
            )
        elif rescued:
            verdict = f"RESCUED by weight scaling at g={', '.join(rescued)} (g=1 at the floor: {g1:.3f})"
        else:
            verdict = f"not rescued: every weights gain ends at or above the floor ({floor:.3f}); g=1 {g1:.3f}" + (
                f", best g={best_g} {best['final_val_loss']['mean']:.3f}" if best else ""
            )
        out[c] = {"g1_final": g1, "floor": floor, "by_gain": by_gain, "rescued_gains": rescued, "verdict": verdict}
    return out


# ----- output ---------------------------------------------------------------------------------------------


def final_table(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["config", "g", "runtime final", "weights final", "weights - g=1", "weights below floor"]
    rows = []
    for c in results["configs"]:
        fin, of_config = results["finals"][c], results["rescue"][c]
        for g in results["gains"]:
            k = gain_label(g)
            res = of_config["by_gain"].get(k)
            delta = fmt_number(res["delta_vs_g1"], "+.3f") if res else "(g=1)"
            below = res["below_floor"] if res else of_config["g1_final"] < of_config["floor"]
            loss_cells = [fmt_number(fin[way][k], ".3f") for way in ("runtime", "weights")]
            rows.append([c, k, *loss_cells, delta, "yes" if below else "no"])
    return headers, rows


def spread_table(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    settles = f"settles below {results['threshold']:g} from step"
    headers = ["config", "way", "seed", "spread at first eval", "max spread", "final spread", settles]
    rows = []
    for c, ways in results["spread"].items():
        for way, per_seed in ways.items():
            for seed, s in per_seed.items():
                first = s["spread"][0] if s["spread"] else None
                spread_cells = [fmt_number(x) for x in (first, max(s["spread"], default=None), s["final_spread"])]
                rows.append(
                    [c, way, seed, *spread_cells, "never" if s["settle_step"] is None else str(s["settle_step"])]
                )
    return headers, rows


def sections(results: dict[str, Any], ctx: Context) -> list:
    import plotly.graph_objects as go

    from interp.figures.plots import PALETTE, loss_curves, reference_line

    refs = reference_lines(results["reference_levels"])
    runs = results["runs"]
    d = results["defaults"]
    intro = (
        f"Preset {results['preset']}, seeds {results['seeds']}, configs {results['configs']}, gains "
        f"{results['gains']}. Runs are {results['config']['train']['max_steps']} steps, evaluated every "
        f"{results['config']['train']['eval_interval']} steps on the fixed validation batches (this "
        f"experiment's defaults: {d}; --set overrides them). Way (a) multiplies every "
        f"sublayer output by g in every forward pass (runtime_gain); way (b) multiplies every out_proj weight by "
        f"g once before the optimizer is built. g=1 is one run used for both."
    )
    if results.get("paper"):
        intro += " " + results["paper"] + "."
    sections: list = [
        intro,
        ("Why the runtime gain tests nothing", EXPLANATION, None),
        ("Adam invariance, measured", adam_line(results["adam_invariance"]), None),
    ]
    headers, rows = spread_table(results)
    sections.append(("Spread of the validation curves over g", table_figure(headers, rows)))
    fig = go.Figure()
    curves = [(c, way, per_seed) for c, ways in results["spread"].items() for way, per_seed in ways.items()]
    for i, (c, way, per_seed) in enumerate(curves):  # one colour a (config, way)
        for seed, s in per_seed.items():
            fig.add_scatter(
                x=s["steps"],
                y=[max(v, 1e-6) for v in s["spread"]],
                mode="lines+markers",
                name=f"{c} {way} seed{seed}",
                line=dict(color=PALETTE[i % len(PALETTE)], dash="solid" if way == "runtime" else "dot"),
            )
    threshold = results["threshold"]
    reference_line(fig, threshold, f"threshold {threshold:g}")
    title = "Spread (max - min over g) of the validation loss at each evaluation step"
    fig.update_layout(title=title, xaxis_title="step", yaxis_title="spread (nats, log)", yaxis_type="log")
    sections.append(("Spread over g, per step", fig))
    verdicts = " ".join(f"{c}: {v['verdict']}." for c, v in results["rescue"].items())
    sections.append(("Does weight scaling rescue a config?", verdicts, None))
    for c in results["configs"]:
        for way, label in (("runtime", "(a) runtime gain"), ("weights", "(b) weights scaled once")):
            ordered = sorted(runs_of(runs, c, way), key=lambda r: r["gain"])
            curves = seed_curves(ordered, name=lambda r: f"g={gain_label(r['gain'])}")
            sections.append((f"{c}, {label}", loss_curves(curves, refs, title=f"{c}: validation loss, {label}")))
    return sections


def parse_gains(text: str) -> list[float]:
    try:
        gains = [float(g) for g in text.split(",") if g.strip()]
    except ValueError:
        raise ToolkitError(f"--gains expects comma-separated positive numbers, got {text!r}") from None
    if not gains or any(not (g > 0 and math.isfinite(g)) for g in gains) or len(set(gains)) != len(gains):
        raise ToolkitError(f"--gains needs distinct positive finite numbers, got {text!r}")
    if 1.0 not in gains:
        gains.append(1.0)  # the reference both ways are compared with
    return sorted(gains)


def parse_configs(text: str) -> list[str]:
    configs = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in configs if c not in RESIDUALS]
    if not configs or unknown or len(set(configs)) != len(configs):
        raise ToolkitError(f"--configs expects distinct names from {', '.join(RESIDUALS)}, got {text!r}")
    return configs


def add_arguments(p) -> None:
    default_option(p, "--configs", ",".join(DEFAULT_CONFIGS), "residual configs")
    default_option(p, "--gains", ",".join(gain_label(g) for g in DEFAULT_GAINS), "gains g; 1 is always added")
    default_option(p, "--threshold", DEFAULT_THRESHOLD, "spread (nats) below which curves count as overlapping")
    margin = f"rescued = final val below unigram - margin (default {DEFAULT_MARGIN} nats)"
    p.add_argument("--margin", type=float, default=DEFAULT_MARGIN, help=margin)


def check(args) -> None:
    parse_configs(args.configs)
    parse_gains(args.gains)
    check_number("--threshold", args.threshold, 0.0)
    check_number("--margin", args.margin, 0.0)


def defaults(spec) -> dict[str, Any]:
    """Short runs without probes, evaluated from the start: the paper's claim is about the first ~200 steps."""
    return {
        "max_steps": min(spec.train.max_steps, DEFAULT_MAX_STEPS),
        "eval_interval": min(spec.train.eval_interval, DEFAULT_EVAL_INTERVAL),
        "eval_from": 0.0,
        "probes": False,
    }


def plan(ctx: Context) -> list[Group]:
    tagged = gain_variants(parse_configs(ctx.args.configs), parse_gains(ctx.args.gains))
    return [Group(ctx.spec, [v for v, _ in tagged])]


def analyse(ctx: Context, records: list[dict[str, Any]]) -> dict[str, Any]:
    from training.batches import fixed_batches
    from training.numerics import pick_device
    from training.presets import parse_overrides

    configs, gains, spec = parse_configs(ctx.args.configs), parse_gains(ctx.args.gains), ctx.spec
    tags = {v.name: t for v, t in gain_variants(configs, gains)}
    given = parse_overrides(ctx.args.set)
    runs = [{**run_summary(r), **tags[r["variant"]]} for r in records]
    model_cfg = spec.model.replace(d_vocab=ctx.corpus.vocab_size)
    check_batches = fixed_batches(ctx.corpus.train, model_cfg.n_ctx, min(4, spec.train.batch_size), 5)
    check = adam_invariance_check(
        scale_output_projections,
        gains=[g for g in gains if g != 1.0],
        residual=configs[0],
        model_cfg=model_cfg,
        train_cfg=spec.train,
        batches=check_batches,
        device=str(pick_device(spec.train.device)),
    )
    spread = spreads(runs, configs, ctx.seeds, ctx.args.threshold)
    variants = {v.name: {**tag, "overrides": v.overrides} for v, tag in gain_variants(configs, gains)}
    return {
        "configs": configs,
        "gains": gains,
        "threshold": ctx.args.threshold,
        "margin": ctx.args.margin,
        "defaults": {k: v for k, v in defaults(spec).items() if k not in given},
        "config": {"variants": variants},
        "runs": runs,
        "spread": spread,
        "settle_step": latest_settle(spread),
        "rescue": rescue(runs, configs, gains, ctx.levels, ctx.args.margin),
        "finals": finals(runs, configs, gains),
        "adam_invariance": check,
        "paper": PAPER_NOTE.get(spec.preset),
        "explanation": EXPLANATION,
    }


def summary(results: dict[str, Any]) -> str:
    lines = ["spread of the validation curves over g:", format_table(*spread_table(results))]
    steps = results["config"]["train"]["max_steps"]
    for c, ways in results["settle_step"].items():
        s = ways["runtime"]
        lines.append(
            f"{c}: runtime-gain curves stay within {results['threshold']:g} of each other "
            + (f"from step {s} on" if s is not None else f"at no step up to the last ({steps})")
            + " (paper: after about 200 steps)"
        )
    if results["paper"]:
        lines.append(results["paper"])
    lines += [f"{c}: {v['verdict']}" for c, v in results["rescue"].items()]
    lines.append(
        "why: for y = g*f(x;W), dL/dW = g*(df/dW)^T dL/dy and Adam's m_hat/(sqrt(v_hat)+eps) ignores a "
        "constant gradient scale, so W moves the same; LayerNorm then removes the constant g (exactly in "
        "ffn_only/none, up to LN eps; in attn_only only block 0's embed + g*attn_0 keeps it) - details in "
        "report.html"
    )
    lines.append(adam_line(results["adam_invariance"]))
    return "\n".join(lines)


EXPERIMENT = Experiment(
    name="gain_confound",
    schema=SCHEMA,
    doc=__doc__,
    title="Gain confound",
    plan=plan,
    analyse=analyse,
    table=final_table,
    summary=summary,
    sections=sections,
    add_arguments=add_arguments,
    check=check,
    defaults=defaults,
    owned={"residual": "--configs", "runtime_gain": "--gains"},
)

if __name__ == "__main__":
    raise SystemExit(EXPERIMENT.main())

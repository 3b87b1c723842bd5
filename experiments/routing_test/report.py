"""The routing test's report: the console table and summary, and the report.html sections and figures.

Everything here reads results.json's dict (experiments.routing_test's analyse) and writes text or
figures; nothing here decides (the rules are experiments.routing_test.rules).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from experiments.routing_test.rules import moves
from experiments.runner.frame import Context
from experiments.runner.text import format_table, reference_lines, seed_curves, table_figure
from experiments.statistics.stats import PACE_FACTOR
from interp.errors import DataError

PROMPT = "ROMEO:\nWhat light through yonder window breaks?"  # for the attention-pattern figures
PLACES = {
    "at the unigram floor": "floor",
    "at the bigram level": "bigram",
    "between bigram and floor": "between",
    "near full": "near full",
    "below bigram (uses context)": "uses context",
}


def margin_sensitive(v: dict[str, Any]) -> bool:
    """Would the verdict differ at half or twice the margin?"""
    return any(other != v["verdict"] for other in v.get("at_margins", {}).values())


def margin_text(v: dict[str, Any]) -> str:
    """The verdict at each checked margin, e.g. "SUPPORTS at margin 0.025; CONTRADICTS at margin 0.1"."""
    return "; ".join(f"{other.upper()} at margin {m}" for m, other in v["at_margins"].items())


def verdict_label(v: dict[str, Any]) -> str:
    """The verdict in capitals, and where a longer run would take it when it is provisional."""
    if not v.get("provisional"):
        return v["verdict"].upper()
    return f"{v['verdict'].upper()} (provisional: heading to {v['heading'].upper()} in a longer run)"


def table(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per variant, narrow enough for a 120-column console at the cpu-quick shape."""
    headers = ["variant", "final val", "place", "tail drop", "at 3x", "alpha_tt/layer", "block-0 grad", "growth"]
    rows = []
    for name, v in results["variants"].items():
        loss = v["final_val_loss"]
        loss_s = f"{loss['mean']:.3f}" + (f" +/- {loss['std']:.3f}" if loss["n"] > 1 else "")
        alpha = v["alpha_tt_layer_mean"]
        if not alpha:
            alpha_s = "n/a"
        elif len(alpha) <= 4:
            alpha_s = " ".join(f"{a:.2f}" for a in alpha)
        else:
            alpha_s = f"{sum(alpha) / len(alpha):.2f} [{min(alpha):.2f}-{max(alpha):.2f}]"
        grads = list(v["block0_grad_at"].values())
        grad_s = f"{grads[0]:.2g} > {grads[-1]:.2g}" if grads else "n/a"
        growth = f"{v['growth']:.1f}x" if v["growth"] is not None else "n/a"
        tail_s = [f"{v['tail_drop']['mean']:+.3f}", f"{v['projected_val_loss']['mean']:.3f}"]
        rows.append([name, loss_s, PLACES.get(v["place"], v["place"]), *tail_s, alpha_s, grad_s, growth])
    return headers, rows


def status(v: dict[str, Any], console: bool = False) -> str:
    """What happened to a prediction (experiments.routing_test.rules.verdicts): not run (a variant it needs was
    left out), not decided (a guard held; the reason), provisional (a 3x longer run would change the verdict),
    or decided by its rule and unchanged at 3x. console=True: the first words only."""
    if v["measured"] == "not run":
        return "not run" if console else "not run: a variant it needs is not in --variants"
    if v["measured"].startswith("not decided: "):
        return "not decided" if console else v["measured"]
    if v.get("provisional"):
        return f"provisional -> {v['heading']}" if console else f"provisional: heading to {v['heading']} at 3x"
    what = "decided" if v["verdict"] != "inconclusive" else "no side"
    if console:
        return what
    text = "decided by its rule" if what == "decided" else "evaluated: its rule takes no side"
    return f"{text}, unchanged at {PACE_FACTOR}x" + ("; margin-sensitive" if margin_sensitive(v) else "")


def verdict_table(results: dict[str, Any], console: bool = False) -> tuple[list[str], list[list[str]]]:
    """One row per prediction: id, what it predicts, the verdict, the separation (nats and seed std), the rule,
    and what happened (status). console=True: id, verdict, status and separation only (the prediction and rule
    follow in the detail lines)."""
    rows = [
        [v["id"], v["title"], v["verdict"], v["separation"], v["rule"], status(v, console)] for v in results["verdicts"]
    ]
    headers = ["id", "prediction", "verdict", "separation", "rule", "status"]
    if console:
        keep = [0, 2, 5, 3]
        return [headers[k] for k in keep], [[r[k] for k in keep] for r in rows]
    return headers, rows


def summary(results: dict[str, Any]) -> str:
    m = results["margin"]
    baseline = next((v["uniform_baseline"] for v in results["variants"].values() if v["uniform_baseline"]), None)
    lines = [
        f"place (margin {m} nats): floor if loss >= unigram - m; bigram if |loss - bigram| <= m; near full "
        "if <= full + m; else uses context (below bigram) or between",
        "tail drop: val loss fall over the last quarter; at 3x: where a run 3x longer would end at the "
        "pace (per log-step) of the second half; block-0 grad: step 0 > end"
        + (f"; alpha_tt uniform baseline {baseline:.3f}" if baseline else ""),
    ]
    if gap := results.get("gaps", {}).get("attn_only - full"):
        spread = f" +/- {gap['std']:.3f} (seed std, {gap['n']} seeds)" if gap["n"] > 1 else " (1 seed: no spread)"
        lines.append(f"attn_only - full: {gap['mean']:+.3f} nats{spread}; the paper at 10M: +0.078")
    lines += ["", format_table(*verdict_table(results, console=True)), ""]
    for v in results["verdicts"]:
        lines.append(f"{v['id']} {v['title']}: {verdict_label(v)}")
        lines.append(f"   predicted: {v['prediction']}")
        lines.append(f"   measured:  {v['measured']}")
        lines.append(f"   separation: {v['separation']}   [rule: {v['rule']}]")
        if v.get("still_moving"):
            lines.append(f"   provisional: {'; '.join(v['still_moving'])}")
        if margin_sensitive(v):
            lines.append(f"   margin-sensitive: {margin_text(v)}")
    if longer := needs_longer(results):
        lines.append(
            f"\nwould still move by more than the margin in a run {PACE_FACTOR}x longer "
            f"(--set max_steps=N): {', '.join(longer)}"
        )
    return "\n".join(lines)


def needs_longer(results: dict[str, Any]) -> list[str]:
    """Variants whose loss would still move by more than the margin in a run PACE_FACTOR times longer."""
    return [name for name, v in results["variants"].items() if moves(v, results["margin"])]


def sections(results: dict[str, Any], ctx: Context) -> list:
    from interp.figures.plots import alpha_tt_heatmap, gradient_flow_heatmap, loss_curves, norm_profile

    runs = results["runs"]
    curves = seed_curves(runs)
    out: list = [("Verdicts", table_figure(*verdict_table(results))), *_verdict_texts(results)]
    refs = reference_lines(results["reference_levels"])
    out.append(("Validation loss", loss_curves(curves, refs, title="Validation loss (fixed batches)")))
    alphas = {f"{r['variant']}/seed{r['seed']}": np.array(r["alpha_tt"]) for r in runs if r["alpha_tt"]}
    baseline = next((r["uniform_baseline"] for r in runs if r["uniform_baseline"]), None)
    if alphas:
        text = (
            "Mean weight a query puts on its own position, over positions t >= 1; the uniform "
            f"baseline mean 1/(t+1) is {baseline:.3f}. Position-blind variants have no pattern."
        )
        out.append(("alpha_tt per layer and head (final)", text, alpha_tt_heatmap(alphas, baseline=baseline)))
    for r in runs:
        flow = r["grad_flow"]
        if not flow["steps"]:
            continue
        per_step = zip(flow["attn"], flow["mlp"], strict=True)  # [step][layer] each
        grid = np.array([[np.hypot(a, m) for a, m in zip(att, mlp, strict=True)] for att, mlp in per_step]).T
        labels = [f"block {i}" for i in range(grid.shape[0])]
        title = f"{r['variant']}: block parameter-gradient norm (before clipping)"
        fig = gradient_flow_heatmap(grid + 1e-12, flow["steps"], layer_labels=labels, title=title)
        out.append((f"Gradient flow: {r['variant']} seed {r['seed']}", fig))
    profiles = {f"{r['variant']}/seed{r['seed']}": r["norms"]["norms"] for r in runs if r["norms"]["norms"]}
    sites = next((r["norms"]["sites"] for r in runs if r["norms"]["sites"]), None)
    if profiles:
        profile = norm_profile(profiles, sites, log_y=True, title="Mean per-token residual norm")
        out.append(("Hidden-norm profile (final, eval mode)", profile))
    if results.get("identity"):
        out += _identity_figures(results)
    return out + attention_figures(results, ctx.corpus)


def _verdict_texts(results: dict[str, Any]) -> list[str]:
    """Each verdict in words, then which runs would still move by more than the margin in a longer run."""
    longer = needs_longer(results)
    return [
        *(
            f"{v['id']} {v['title']}: {verdict_label(v)}. Predicted: {v['prediction']}. "
            f"Measured: {v['measured']}. Separation: {v['separation']}. Rule: {v['rule']}."
            + (f" Provisional: {'; '.join(v['still_moving'])}." if v.get("still_moving") else "")
            + (f" Margin-sensitive: {margin_text(v)}." if margin_sensitive(v) else "")
            for v in results["verdicts"]
        ),
        f"Runs whose validation loss would still move by more than the margin in a run {PACE_FACTOR}x "
        f"longer, at the pace of their second half: {', '.join(longer)}."
        if longer
        else f"No run's validation loss would move by more than the margin in a run {PACE_FACTOR}x longer "
        "at the pace of its second half.",
    ]


def _identity_figures(results: dict[str, Any]) -> list:
    """Where the current and previous token can be read (linear decoders per site), and the logit lens."""
    from interp.figures.plots import identity_accuracy, logit_lens_figure

    ident, levels = results["identity"], results["reference_levels"]
    two_levels = {"unigram": levels["unigram"], "bigram": levels["bigram"]}
    return [
        (
            "Where is the current token?",
            "Linear decoders (multinomial logistic regression, weight decay chosen on held-out training "
            "windows, scored on the fixed validation batches) read the token at offset 0 (current) and -1 "
            "(previous) from each site of the first seed's final checkpoint. Dashed: chance (unigram) and, "
            "for offset -1, what the current token alone predicts about the previous one.",
            identity_accuracy({n: v["identity"] for n, v in ident.items()}, (0, -1)),
        ),
        ("Logit lens", logit_lens_figure({n: v["logit_lens"] for n, v in ident.items()}, two_levels)),
    ]


def attention_figures(results: dict[str, Any], corpus, prompt: str = PROMPT) -> list:
    """Attention patterns of the first seed of every variant that has one, at the first and last layer."""
    import torch

    from interp.figures.plots import attention_patterns
    from interp.model.gpt import ResidualGPT

    figures = []
    for run in results["runs"]:
        if run["alpha_tt"] is None or run["seed"] != results["seeds"][0]:
            continue
        model = ResidualGPT.from_checkpoint(Path(run["run_dir"]) / "ckpt.pt").eval()
        try:
            ids = corpus.encode(prompt)[: model.cfg.n_ctx]
        except DataError:  # a corpus without the prompt's characters: its own first validation tokens
            ids = [int(i) for i in corpus.val[: min(len(prompt), model.cfg.n_ctx)]]
        tokens = [corpus.decode([i]) for i in ids]
        with torch.no_grad():
            _, cache = model.run_with_cache(torch.tensor([ids]), names_filter=lambda n: n.endswith("hook_pattern"))
        for layer in sorted({0, model.cfg.n_layers - 1}):
            fig = attention_patterns(cache, tokens, layer, title=f"{run['variant']}: layer {layer}")
            figures.append((f"Attention patterns, {run['variant']}, layer {layer}", fig))
    return figures

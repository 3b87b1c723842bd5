"""report.html of the routing test: curves, alpha_tt, gradient flow, norms, attention patterns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from experiments.common import reference_lines


def _verdict_paragraphs(results: dict[str, Any]) -> list[str]:
    return [f"{v['id']} {v['title']}: {v['verdict'].upper()}. Predicted: {v['prediction']}. "
            f"Measured: {v['measured']}. Separation: {v['separation']}. Rule: {v['rule']}."
            for v in results["verdicts"]]


def _attention_figures(results: dict[str, Any], corpus, prompt: str) -> list:
    import torch

    from interp.model import ResidualGPT
    from interp.plots import attention_patterns

    figures = []
    first_seed = results["seeds"][0]
    for run in results["runs"]:
        if run["variant"] not in ("full", "attn_only", "ffn_only") or run["seed"] != first_seed:
            continue
        model = ResidualGPT.from_checkpoint(Path(run["run_dir"]) / "ckpt.pt").eval()
        ids = corpus.encode(prompt)[: model.cfg.n_ctx]
        tokens = [corpus.decode([i]) for i in ids]
        with torch.no_grad():
            _, cache = model.run_with_cache(torch.tensor([ids]), names_filter=lambda n: n.endswith("hook_pattern"))
        for layer in sorted({0, model.cfg.n_layers - 1}):
            fig = attention_patterns(cache, tokens, layer, title=f"{run['variant']}: layer {layer}")
            figures.append((f"Attention patterns, {run['variant']}, layer {layer}", fig))
    return figures


def write_report(path: Path, results: dict[str, Any], corpus, prompt: str) -> Path:
    from interp.plots import alpha_tt_heatmap, gradient_flow_heatmap, loss_curves, norm_profile, save_html

    levels = results["reference_levels"]
    refs = reference_lines(levels)
    runs = results["runs"]
    curves = {f"{r['variant']}/seed{r['seed']}": (r["val_curve"]["steps"], r["val_curve"]["loss"]) for r in runs}
    sections: list = [
        f"Preset {results['preset']}, seeds {results['seeds']}, margin {results['margin']} nats. "
        f"Reference levels on the fixed validation batches: unigram {levels['unigram']:.3f}, "
        f"bigram {levels['bigram']:.3f} nats.",
        ("Verdicts", None, None),
        *_verdict_paragraphs(results),
        ("Validation loss", loss_curves(curves, refs, title="Validation loss (fixed batches)")),
    ]
    alphas = {name: np.array(r["alpha_tt"]) for r in runs if r["alpha_tt"]
              for name in [f"{r['variant']}/seed{r['seed']}"]}
    baseline = next((r["uniform_baseline"] for r in runs if r["uniform_baseline"]), None)
    if alphas:
        sections.append(("alpha_tt per layer and head (final)",
                         "Mean weight a query puts on its own position, over positions t >= 1; the uniform "
                         f"baseline mean 1/(t+1) is {baseline:.3f}. Position-blind variants have no pattern.",
                         alpha_tt_heatmap(alphas, baseline=baseline)))
    for r in runs:
        flow = r["grad_flow"]
        if not flow["steps"]:
            continue
        grid = np.array([[np.hypot(a, m) for a, m in zip(att, mlp, strict=True)]
                         for att, mlp in zip(flow["attn"], flow["mlp"], strict=True)]).T
        sections.append((f"Gradient flow: {r['variant']} seed {r['seed']}", gradient_flow_heatmap(
            grid + 1e-12, flow["steps"], layer_labels=[f"block {i}" for i in range(grid.shape[0])],
            title=f"{r['variant']}: block parameter-gradient norm (before clipping)")))
    profiles = {f"{r['variant']}/seed{r['seed']}": r["norms"]["norms"] for r in runs if r["norms"]["norms"]}
    sites = next((r["norms"]["sites"] for r in runs if r["norms"]["sites"]), None)
    if profiles:
        sections.append(("Hidden-norm profile (final, eval mode)",
                         norm_profile(profiles, sites, log_y=True, title="Mean per-token residual norm")))
    sections.extend(_attention_figures(results, corpus, prompt))
    return save_html(sections, path, title="Routing test")

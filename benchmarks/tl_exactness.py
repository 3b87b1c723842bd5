"""Max |difference| between ResidualGPT and its TransformerLens model, per residual config x mixer.

    python -m benchmarks.tl_exactness [--ckpt PATH ...] [--per-hook]

Runs on whichever TransformerLens major is installed (interp.load_tl: a
HookedTransformer on 3.x, a TransformerBridge on 4.x): for each model, the
largest |logits - ResidualGPT's| and the largest |cache - ResidualGPT's cache|
over every hook name the two caches share (-inf scores compared as equal).
Without --ckpt, small random-init models of every config and one with GPT-2's vocabulary (seed 0).
"""

from __future__ import annotations

import warnings

from interp.command.cli import DocParser, command_main

CONFIGS = [
    ("full", "attention", 0.0),
    ("attn_only", "attention", 0.0),
    ("ffn_only", "attention", 0.0),
    ("none", "attention", 0.0),
    ("attn_only", "uniform", 0.0),
    ("attn_only", "position_blind", 0.0),
    ("ffn_only", "attention", 2.0),
    ("ffn_only", "attention", float("inf")),
    ("full", "attention", float("-inf")),
]

RAW_EXPORT = {"fold_ln": False, "center_writing_weights": False, "center_unembed": False}


def max_diffs(model, tl_model, tokens):
    import torch

    with torch.no_grad():
        logits_gpt, cache_gpt = model.run_with_cache(tokens)
        logits_tl, cache_tl = tl_model.run_with_cache(tokens)
    logits = (logits_gpt - logits_tl[..., : logits_gpt.shape[-1]]).abs().max().item()
    worst, worst_name, per_hook = 0.0, None, {}
    for name in cache_gpt.keys():
        if name not in cache_tl.cache_dict:
            continue
        a, b = cache_gpt[name], cache_tl[name]
        same_inf = torch.isinf(a) & torch.isinf(b) & (a.sign() == b.sign())
        d = (a - b).masked_fill(same_inf, 0.0).abs().max().item()
        per_hook[name] = d
        if d > worst or worst_name is None:
            worst, worst_name = d, name
    return logits, worst, worst_name, len(per_hook), len(cache_gpt.keys()), per_hook


def main(argv=None) -> int:
    return command_main(lambda: _main(argv), "nothing was written")  # a usage error: one line, not argparse's block


def _main(argv) -> int:
    parser = DocParser(prog="python -m benchmarks.tl_exactness", description=__doc__)
    parser.add_argument("--ckpt", nargs="*", default=[], help="checkpoints to measure instead of random-init models")
    parser.add_argument("--per-hook", action="store_true", help="also print each shared hook's max |difference|")
    args = parser.parse_args(argv)
    import torch

    from interp import ModelConfig, ResidualGPT
    from interp.tl.load import load_tl
    from interp.tl.major import TL_MAJOR, TL_VERSION

    warnings.simplefilter("ignore")
    models = [(path, ResidualGPT.from_checkpoint(path).eval(), path) for path in args.ckpt]
    if not args.ckpt:
        for residual, mixer, bias in CONFIGS:
            torch.manual_seed(0)
            cfg = ModelConfig(
                n_layers=3, d_model=64, n_heads=4, n_ctx=32, d_vocab=65, residual=residual, mixer=mixer, self_bias=bias
            )
            model = ResidualGPT(cfg).eval()
            models.append((f"{residual}+{mixer}" + (f"(self_bias={bias:g})" if bias else ""), model, model))
        torch.manual_seed(0)  # a GPT-2-BPE-sized vocabulary (its tokenizer attaches when the BPE files are found)
        model = ResidualGPT(ModelConfig(n_layers=2, d_model=32, n_heads=4, n_ctx=32, d_vocab=50257)).eval()
        models.append(("full+attention (GPT-2 BPE vocab)", model, model))
    print(f"transformer-lens {TL_VERSION}")
    print(f"{'model':44s} {'max|logits|':>12s} {'max|cache|':>12s}  shared/ResidualGPT hooks  worst hook")
    # 3.x: processing off (its defaults centre the stream and fold LayerNorms: exact, but other hook values)
    raw = RAW_EXPORT if TL_MAJOR < 4 else {}
    for label, model, source in models:
        try:
            tl_model = load_tl(source, **raw)
        except Exception as e:  # position_blind has no HookedTransformer on 3.x
            print(f"{label:44s} {'-':>12s} {'-':>12s}  {type(e).__name__}: {str(e)[:60]}")
            continue
        torch.manual_seed(1)
        tokens = torch.randint(0, model.cfg.d_vocab, (4, model.cfg.n_ctx))
        logits, worst, name, shared, total, per_hook = max_diffs(model, tl_model, tokens)
        print(f"{label:44s} {logits:12.3g} {worst:12.3g}  {shared:3d}/{total:<3d}  {name}")
        if args.per_hook:
            for hook, d in per_hook.items():
                print(f"    {hook:40s} {d:.3g}")
    return 0


if __name__ == "__main__":
    from interp.command.cli import guarded_output

    raise SystemExit(guarded_output(main))

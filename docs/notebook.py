# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # In a notebook: ResidualGPT, TransformerLens 3, nanoGPT, plots
#
# This file is the notebook: [jupytext](https://jupytext.readthedocs.io) percent format, one source in git
# (diffs read as code, no outputs to strip). `make notebook` opens it in JupyterLab (paired with a git-ignored
# `docs/notebook.ipynb`: saving writes both); `make test` runs every cell (tests/test_notebook.py) on the
# `smoke` preset, so a call here that stops working fails CI. In the order a researcher works: train a model,
# cache its activations, hand it to TransformerLens, look at attention, decompose the stream exactly, intervene,
# and read a published result from the files shipped in docs/results/data/.

# %%
# ruff: noqa: E402
# (each section imports what it first uses, as a notebook is read)
import tempfile
from pathlib import Path

import plotly.io as pio
import torch

import interp
from interp import ResidualGPT, load_hooked, save_hooked, to_hooked_transformer
from interp.figures.plot_page import offline_notebook_renderer

# plotly.js embedded in the notebook (the "notebook" renderer's first output), so figures render offline;
# "plotly_mimetype" is what JupyterLab draws with the jupyterlab-plotly extension, also offline.
# "notebook_connected" (and Colab's, Kaggle's defaults) would load plotly.js from a CDN, and plotly's own "notebook"
# MathJax; interp.figures.plot_page.offline_notebook_renderer() is "notebook" asking nothing of the network.
pio.renderers.default = "plotly_mimetype+" + offline_notebook_renderer()
ROOT = Path(interp.__file__).resolve().parents[1]  # the repository: shipped results are read from here
WORK = Path(tempfile.mkdtemp(prefix="residual-notebook-"))  # this notebook's runs and files
torch.manual_seed(0)

# %% [markdown]
# ## Train a model (or load one)
#
# The `smoke` preset (2 layers, d_model 32, 40 steps: seconds on a CPU) as `attn_only`, the paper's surviving
# ablation: the attention residual kept, the FFN residual removed. The same run from the command line is
# `python -m training --preset smoke --residual attn_only --out runs/demo`. Any finished run directory loads the
# same way: `ResidualGPT.from_checkpoint("runs/routing_test/cpu-quick/attn_only/seed1337/ckpt.pt")`.

# %%
from training.presets import resolve
from training.trainer import Trainer

spec = resolve("smoke", {"residual": "attn_only"})
trainer = Trainer(spec.model, spec.train, WORK / "attn_only", progress=False)
final = trainer.run()
ckpt = WORK / "attn_only" / "ckpt.pt"
print(f"final val loss {final['final_val_loss']:.3f} after {final['steps']} steps")

# %% [markdown]
# ## Run with cache, generate
#
# `from_checkpoint` returns eval mode (dropout off) with the checkpoint's vocabulary attached. The prompt is the
# start of the validation text, so the notebook runs on whichever corpus the model was trained on.

# %%
model = ResidualGPT.from_checkpoint(ckpt)
prompt = model.codec.decode(trainer.corpus.val[:24].tolist())
tokens = torch.tensor([model.codec.encode(prompt)])
logits, cache = model.run_with_cache(tokens)  # a TransformerLens ActivationCache: cache["pattern", 0]
out = model.generate(tokens, max_new_tokens=50, temperature=0.8, top_k=10)  # nanoGPT's signature
text = model.generate(prompt, max_new_tokens=50, temperature=0)  # text in, text out
print(cache["pattern", 0].shape)
print(repr(text))

# %% [markdown]
# ## The TransformerLens export
#
# `to_hooked_transformer` gives a HookedTransformer computing the same function, in eval mode, with
# `from_pretrained`'s weight processing (LayerNorms folded, writing weights and the unembedding centred: each
# position's logits shift by one constant, the log-probabilities are the model's; docs/notebook.md says why).
# TransformerLens's own methods run on it. `save_hooked` / `load_hooked` round-trip it exactly, wiring included.

# %%
tl = to_hooked_transformer(ckpt)
assert torch.allclose(tl(tokens).log_softmax(-1), logits.log_softmax(-1), atol=1e-5)  # the same model
print(tl.to_str_tokens(prompt)[:8])  # the char tokenizer attached to the export
greedy = tl.generate(prompt, max_new_tokens=40, do_sample=False, verbose=False)  # newlines kept
assert greedy == model.generate(prompt, max_new_tokens=40, temperature=0)  # equals model.generate's greedy output
save_hooked(tl, WORK / "attn_only.tl.pt")
before = tl(tokens)
tl = load_hooked(WORK / "attn_only.tl.pt")  # exact round trip, wiring included
assert torch.equal(tl(tokens), before)

# %% [markdown]
# ## Attention patterns
#
# One heatmap per head, one label per cached position (`python -m interp.plot_attention` writes the same
# figure into an HTML page that opens offline).

# %%
from interp.figures.plots import attention_patterns

attention_patterns(cache, model.codec.pieces(tokens[0].tolist()), layer=0)

# %% [markdown]
# ## The exact decomposition
#
# With a removed residual path the stream is not the sum of every sublayer output; `interp.reading.decompose` walks
# the wiring back and returns only the terms that reach a site, so they sum to the stream for every wiring.
# `direct_logit_attribution` splits a logit difference through the final LayerNorm with its scale frozen.

# %%
from interp.reading.decompose import decompose, direct_logit_attribution

parts = decompose(cache, "final", per_head=True)  # exact for every wiring: parts.stack.sum(0) == the stream
print("final:", parts.labels)  # attn_only: the last block's MLP output alone, no residual carries the rest
mid = decompose(cache, "blocks.1.hook_resid_mid", per_head=True)  # the kept attention residual: more terms
print("blocks.1.hook_resid_mid:", mid.labels)
for name, p in (("blocks.1.hook_resid_post", parts), ("blocks.1.hook_resid_mid", mid)):
    print(f"{name}: largest error of the sum {(p.stack.sum(0) - cache[name]).abs().max().item():.1e}")
dla = direct_logit_attribution(cache, 3, 5)  # logit[3] - logit[5] at each position
print(f"attribution: largest error of the sum {(dla.values.sum(0) - dla.target).abs().max().item():.1e}")

# %% [markdown]
# ## An intervention
#
# Interventions are TransformerLens hook lists (`interp.reading.interventions`), so the same call runs on ResidualGPT
# and on the export. Here: knock out each token's attention to itself in layer 0 (softmax with the self score
# at -inf), and compare the loss on validation windows. After the smoke preset's 40 steps the model still sits
# near the unigram floor, so the numbers mean little; the calls are what a trained run takes (interventions on
# the routing test's models: `python -m experiments.interventions`).

# %%
from interp.reading.interventions import knock_out_self, per_sequence_loss

n_ctx = model.cfg.n_ctx
val = torch.as_tensor(trainer.corpus.val[: 16 * n_ctx + 1], dtype=torch.long)
x = val[:-1].view(16, n_ctx)
y = val[1:].view(16, n_ctx)
clean, _ = per_sequence_loss(model, x, y)
knocked, _ = per_sequence_loss(model, x, y, fwd_hooks=knock_out_self(0))
on_tl, _ = per_sequence_loss(tl, x, y, fwd_hooks=knock_out_self(0))
assert torch.allclose(knocked, on_tl, atol=1e-5)  # the same hooks on the export
print(f"val loss {clean.mean():.3f}; without the self path in layer 0 {knocked.mean():.3f}")

# %% [markdown]
# ## A survival curve from shipped results
#
# docs/results/data/escape_time-smoke holds a smoke run of the escape-time experiment (how long `ffn_only` runs
# wait on the unigram floor), shipped there by `python -m experiments.shipping.ship`; its MANIFEST.json records the
# command that trained the runs (printed below). The results file holds every run's escape step, so the
# Kaplan-Meier curves recompute from it without training anything.

# %%
import json

from experiments.escape_time.report import median_text, survival_figure
from experiments.escape_time.survival import kaplan_meier

shipped = ROOT / "docs/results/data/escape_time-smoke/results-escape_time.json"
if not shipped.is_file():
    raise FileNotFoundError(f"{shipped} is not in this checkout: the shipped results folder is missing")
results = json.loads(shipped.read_text())
print("trained by:", json.loads((shipped.parent / "MANIFEST.json").read_text())["command"])
margin = str(results["margin"])
for cell in results["cells"]:
    runs = [r for r in results["runs"] if r["variant"] == cell["name"]]
    escape = [r["escape"][margin] for r in runs]  # None: still on the floor at the run's last step (censored)
    km = kaplan_meier(
        [r["last_step"] if e is None else e for r, e in zip(runs, escape, strict=True)], [e is not None for e in escape]
    )
    assert km["survival"] == cell["km"]["survival"], cell["name"]  # the shipped curve, recomputed
    print(f"{cell['name']:<22} {cell['n_escaped']} of {cell['n']} escaped, median {median_text(cell)}")
survival_figure(results)

# %% [markdown]
# ## What else works the same way
#
# - `python -m interp.sample --ckpt PATH --prompt "ROMEO:" --max-new-tokens 200 --top-k 10 --seed 1`
#   samples text; `python -m interp.plot_attention --ckpt PATH --text "ROMEO:" --layer 0 --out attn.html`
#   writes an attention figure that opens offline.
# - `transformer_lens.patching` helpers run on ResidualGPT itself; nnsight traces it (read and edit
#   `blocks.0.attn.hook_pattern`, `hook_z`, `hook_resid_*`; `pip install -e '.[interop]'`).
#   circuitsvis views open offline through `interp.reading.interop.circuitsvis_patterns` (or `offline_html(view)`
#   around circuitsvis's own functions), which inline circuitsvis's script (about 1.3 MB a view); the
#   toolkit's own figures embed plotly and stay offline.
# - With a removed residual path the stream is not the sum of its parts, so TransformerLens's
#   `decompose_resid`, `get_full_resid_decomposition`, `stack_head_results` and `logit_attrs` are
#   wrong there: the export warns at every such call (ResidualGPT's own cache refuses them) and
#   `interp.reading.decompose` gives the exact decomposition, direct logit attribution with the final
#   LayerNorm scale frozen, and the logit lens. `accumulated_resid` and the logit lens on a given site
#   are right for every wiring. `logit_attrs` and `apply_ln_to_stack` need `fold_ln=True` (the
#   export's default) even for `full`: without it TL leaves out the final LayerNorm's weight, and
#   `logit_attrs` always leaves out `b_U`; the calls warn whenever their sums cannot be the logit.
# - Every loader returns eval mode; `run_with_cache` on a ResidualGPT in train mode with dropout warns
#   (`TrainModeWarning`). TransformerLens has no dropout, so the export is the same in either mode.
# - A self-biased model adds `self_bias` to each query's own score inside `hook_attn_scores`, which
#   `W_Q @ W_K` (`tl.QK`) and scores rebuilt from `hook_q`/`hook_k` do not show: the export warns at
#   `QK`/`W_Q`/`W_K`, and `interp.reading.scores.attention_scores(model, q, k)` rebuilds the scores the model
#   uses (`routing_bias(model, n)` is the term to add).
# - The export was trained without BOS: `prepend_bos=True` (any call that tokenizes text) warns. Past
#   `n_ctx`, `tl.generate` crops to the last `n_ctx` tokens as `model.generate` and nanoGPT do.
# - `save_hooked` writes a file only `load_hooked` reads: every tensor has an extra leading dimension,
#   so a plain HookedTransformer (`load_state_dict`, strict or not, `load_and_process_state_dict`)
#   refuses it instead of losing the rewiring. In memory, a rewired export's `tl.state_dict()` warns
#   (`WeightsOnlyWarning`) when something other than an export of the same ModelConfig reads it (a plain
#   HookedTransformer, a copy by hand, `torch.save`): its weights alone are another model there. Loaded
#   back into an export of the same config it is exact and says nothing.
# - `interp.reading.decompose` and `direct_logit_attribution` refuse a cache whose terms do not sum to the
#   stream, which is what a steering hook on a `hook_resid_*` point leaves (the edit is no term).
# - nanoGPT: a checkpoint from nanoGPT's `train.py` loads everywhere a ResidualGPT one does
#   (`from_checkpoint`, `to_hooked_transformer`, `interp.sample`, `interp.plot_attention`; `meta.pkl`
#   found as nanoGPT's `sample.py` finds it). `python -m interp.nanogpt --ckpt ckpt.pt --out out/ckpt.pt`
#   writes one that nanoGPT's `sample.py` loads (residual `full`, attention, tied; others are refused).
# - `probes.identity.measure_identity(ckpt, corpus.train, val_batches)`: linear probes that read the token at
#   offsets 0, -1, -2 from every residual site, beside chance and the current-token level.

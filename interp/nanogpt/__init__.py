"""nanoGPT checkpoints in and out.

In: a checkpoint that nanoGPT's train.py wrote ({"model", "model_args", "iter_num",
"best_val_loss", "config", "optimizer"}; weight names possibly prefixed
"_orig_mod." by torch.compile) is read by interp.load_checkpoint (through interp.files.nanogpt_format), so
ResidualGPT.from_checkpoint, to_hooked_transformer, `python -m interp.sample` and
`python -m interp.plot_attention` take it as they take their own. nanoGPT's block is
ResidualGPT's with residual='full' and mixer='attention' (Pre-LN, LayerNorm eps
1e-5, exact GELU, 4x MLP, tied embeddings): twelve names per layer change, no weight.
Its vocabulary is not in the checkpoint: a character model's meta.pkl (itos) is
found next to the checkpoint, in ../data/<dataset>/ or ./data/<dataset>/ (where
nanoGPT's sample.py looks), or given; a 50257/50304-token model reads as GPT-2 BPE.

Out: to_nanogpt(model) is the {"model_args", "model", ...} dict that nanoGPT's
sample.py loads (GPT(GPTConfig(**model_args)), load_state_dict strict); only what
nanoGPT's GPT can express: residual='full', mixer='attention', self_bias 0, tied
embeddings, d_mlp 4 * d_model (runtime_gain is folded into the c_proj weights).
Anything else is refused by name: nanoGPT would load it silently as another model.

    python -m interp.nanogpt --ckpt runs/.../ckpt.pt --out out-nanogpt/ckpt.pt [--meta-out data/x/meta.pkl]

Rooms: writer.py (to_nanogpt and the command line; the reader is interp.files.nanogpt_format), __main__.py.
"""

from interp.nanogpt.writer import main, parser, refusal, run, to_nanogpt

__all__ = ["main", "parser", "refusal", "run", "to_nanogpt"]

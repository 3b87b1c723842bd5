"""Plot a checkpoint's attention patterns on a prompt into one self-contained HTML page.

    python -m interp.plot_attention --ckpt runs/.../ckpt.pt --text "ROMEO:" --layer 0 --out attn.html

Without --layer every layer gets a section. The text is encoded with the
checkpoint's own vocabulary: state["vocab"] (a list of characters) or, for BPE
checkpoints, state["encoding"] == "gpt2" (files from $RESIDUAL_DATA_DIR/gpt2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interp.command.cli import DocParser, checkpoint_options, run_writing_command
from interp.config.registry import mixer_spec
from interp.errors import CheckpointError, ConfigError, DataError, ToolkitError
from interp.files.io import DataFileError
from interp.model.vocab import codec

if TYPE_CHECKING:
    from interp.config.model_config import ModelConfig

# torch, transformer_lens and plotly are imported in run(): --help and usage errors answer at once.


def parser() -> argparse.ArgumentParser:
    p = DocParser(
        prog="python -m interp.plot_attention",
        description="Plot a ResidualGPT checkpoint's attention patterns on a prompt (one heatmap per head) "
        "into a self-contained HTML file that opens offline.",
        epilog="""examples:
  python -m interp.plot_attention --ckpt ckpt.pt --text "ROMEO:" --layer 0 --out attn.html
  python -m interp.plot_attention --ckpt ckpt.pt --text "ROMEO:"     # every layer, into attn.html

The text is encoded with the checkpoint's vocabulary: state["vocab"] (a list of
characters), or GPT-2 BPE for checkpoints saved with encoding="gpt2" (files
from $RESIDUAL_DATA_DIR/gpt2). Errors print one `error:` line and exit 2.""",
    )
    checkpoint_options(p)
    p.add_argument("--text", required=True, help="prompt in the checkpoint's vocabulary, at most n_ctx tokens")
    p.add_argument("--layer", type=int, default=None, help="layer to plot (default: every layer)")
    p.add_argument("--out", type=Path, default=Path("attn.html"), help="HTML file to write (default: attn.html)")
    return p


def encode(text: str, state: dict[str, Any], cfg: ModelConfig) -> tuple[list[int], list[str]]:
    """Token ids and their strings, with the checkpoint's vocabulary."""
    if not text:
        raise DataError("--text is empty; give at least one character")
    text_codec = codec(state, what="--text")
    ids = text_codec.encode(text)
    if len(ids) > cfg.n_ctx:
        raise DataError(f"--text is {len(ids)} tokens but the model's context is {cfg.n_ctx}; shorten it")
    return ids, text_codec.pieces(ids)


def run(args: argparse.Namespace) -> Path:
    from interp.command.cli import refuse_overwriting_inputs
    from interp.files.checkpoint import load_checkpoint

    refuse_overwriting_inputs("--out", args.out, {"--ckpt": args.ckpt, "--meta": args.meta})
    ckpt = load_checkpoint(args.ckpt, meta=args.meta)
    cfg = ckpt.config
    if args.layer is not None and not 0 <= args.layer < cfg.n_layers:
        raise ConfigError(f"--layer {args.layer} is out of range: the model has layers 0..{cfg.n_layers - 1}")
    layers = [args.layer] if args.layer is not None else list(range(cfg.n_layers))
    try:
        ids, pieces = encode(args.text, ckpt.state, cfg)
    except CheckpointError as e:  # no vocabulary: name the file it is missing from
        raise CheckpointError(f"{args.ckpt}: {e}") from None
    if not mixer_spec(cfg.mixer).has_pattern:
        raise ConfigError(f"{args.ckpt} uses mixer={cfg.mixer!r}, which has no attention pattern to plot")

    import torch  # the input is good: now the heavy imports

    from interp.figures.plot_page import save_html
    from interp.figures.plots import attention_patterns
    from interp.model.gpt import ResidualGPT

    model = ResidualGPT.from_checkpoint(ckpt)
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in layers]
    with torch.no_grad():
        _, cache = model.eval().run_with_cache(torch.tensor([ids]), names_filter=names)
    bad = [name for name in names if not bool(torch.isfinite(cache[name]).all())]
    if bad:  # weights that overflow on this text: a NaN heatmap is no plot
        raise CheckpointError(
            f"{args.ckpt}: the attention pattern {bad[0]} is not finite on this text (the weights overflow)"
        )
    sections = [
        (f"Layer {layer}", attention_patterns(cache, pieces, layer=layer, title=f"Layer {layer}: {args.text!r}"))
        for layer in layers
    ]
    intro = (
        f"{args.ckpt}: residual={cfg.residual}, mixer={cfg.mixer}, self_bias={cfg.self_bias}. "
        "Rows are queries, columns the keys they read; hover for the weight."
    )
    try:
        return save_html([intro, *sections], args.out, title=f"Attention patterns: {args.ckpt.name}")
    except OSError as e:
        raise ToolkitError(f"cannot write {args.out}: {e.strerror or e}; choose another --out") from None
    except DataFileError as e:  # interp.files.io's atomic write: the old file, if any, is kept
        raise DataFileError(f"{e}; choose another --out") from None


def main(argv: list[str] | None = None) -> int:
    return run_writing_command(parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())

"""Sample text from a checkpoint, as nanoGPT's sample.py.

    python -m interp.sample --ckpt runs/.../ckpt.pt                       # 200 tokens after a newline
    python -m interp.sample --ckpt runs/.../ckpt.pt --prompt "ROMEO:" --max-new-tokens 200
    python -m interp.sample --ckpt ckpt.pt --prompt $'ROMEO:\n' --max-new-tokens 100 --temperature 0   # greedy

The prompt is encoded with the checkpoint's vocabulary (state["vocab"], or GPT-2
BPE for encoding="gpt2"); ResidualGPT.generate feeds back at most n_ctx tokens, so of a prompt
longer than n_ctx the model reads the last n_ctx tokens only (one `warning:` line on stderr says so).
Prints the whole prompt and its continuation (control characters but newline and tab shown escaped: the
vocabulary is a file's); errors print one `error:` line, exit 2.
"""

from __future__ import annotations

import argparse
import sys

from interp.command.cli import Parser, checkpoint_options, run_writing_command, seed_option
from interp.errors import CheckpointError, ConfigError, DataError, ToolkitError, escape_controls
from interp.model.next_token import temperature_option
from interp.model.vocab import codec

# torch and transformer_lens are imported in run(): --help and usage errors answer at once.


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m interp.sample", description="Sample from a ResidualGPT checkpoint (nanoGPT style).")
    checkpoint_options(p)
    p.add_argument(
        "--prompt",
        default="\n",
        help="text to continue, in the checkpoint's vocabulary (default: a newline, as nanoGPT's sample.py)",
    )
    p.add_argument("--max-new-tokens", type=int, default=200, help="tokens to append (default 200)")
    p.add_argument(
        "--temperature",
        type=temperature_option,
        default=1.0,
        help="softmax temperature, a finite number >= 0; 0 is greedy (default 1.0)",
    )
    p.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens (default: all)")
    p.add_argument("--seed", type=seed_option, default=1337, help="sampling seed in [0, 2**63) (default 1337)")
    p.add_argument("--num-samples", type=int, default=1, help="independent samples to print (default 1)")
    return p


def run(args: argparse.Namespace) -> list[str]:
    if args.max_new_tokens < 0 or args.num_samples < 1:
        raise ConfigError("--max-new-tokens must be >= 0 and --num-samples >= 1")
    if not args.prompt:
        raise DataError("--prompt is empty; give at least one character (nanoGPT's default is a newline)")
    from interp.files.checkpoint import load_checkpoint

    ckpt = load_checkpoint(args.ckpt, meta=args.meta)
    try:
        encode, decode = codec(ckpt.state, what="--prompt")
    except CheckpointError as e:  # no vocabulary: name the file it is missing from
        raise CheckpointError(f"{args.ckpt}: {e}") from None
    ids = encode(args.prompt)

    import torch  # the input is good: now the heavy imports

    from interp.model.gpt import ResidualGPT

    model = ResidualGPT.from_checkpoint(ckpt).eval()
    if len(ids) > model.cfg.n_ctx:
        print(cropped_line(len(ids), model.cfg.n_ctx), file=sys.stderr)
    generator = torch.Generator().manual_seed(args.seed)
    tokens = torch.tensor([ids])
    out = []
    for _ in range(args.num_samples):
        try:
            sample = model.generate(tokens, args.max_new_tokens, args.temperature, args.top_k, generator=generator)
        except ToolkitError as e:  # named with its file (logits that overflow on this prompt)
            raise CheckpointError(f"{args.ckpt}: {e}") from None
        out.append(decode(sample[0].tolist()))
    return out


def cropped_line(n_prompt: int, n_ctx: int) -> str:
    """The one line that says a prompt is longer than the context the model reads."""
    return (
        f"warning: the prompt is {n_prompt} tokens, longer than the model's context (n_ctx={n_ctx}): "
        f"only its last {n_ctx} are read (the whole prompt is printed)"
    )


def main(argv: list[str] | None = None) -> int:
    # The vocabulary comes from a file: its control characters are shown escaped, lines and tabs kept.
    return run_writing_command(
        parser, run, argv, lambda samples: escape_controls("\n---------------\n".join(samples), keep="\n\t")
    )


if __name__ == "__main__":
    sys.exit(main())

"""The README's Python lines run as written on whichever TransformerLens major is installed (issue 58: after a
plain `pip install -e .`, which takes TransformerLens 4.3, the README sent the user to to_hooked_transformer, which
TL 4 refuses). `make test` runs this on 3.x, `make test-tl4` on 4.x; only the checkpoint path is replaced, by a
smoke run of the same wiring."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from demo_models import smoke_checkpoint

from interp.errors import DataError

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_no_python_line_needs_one_major():
    """to_hooked_transformer and to_transformer_bridge each refuse on the other major; load_tl takes either."""
    assert BLOCKS
    assert not [b for b in BLOCKS if "to_hooked_transformer(" in b or "to_transformer_bridge(" in b]


def _fit_prompts(block: str, model) -> str:
    """Lower-case a prompt the checkpoint cannot encode: the synthetic corpus of a clone without ../shared has
    no capitals ("ROMEO:" -> "romeo:"); the lines run are otherwise the README's own."""
    for prompt in re.findall(r'encode\("([^"]*)"\)', block):
        try:
            model.codec.encode(prompt)
        except DataError:
            model.codec.encode(prompt.lower())  # a prompt no test vocabulary holds fails here
            block = block.replace(f'encode("{prompt}")', f'encode("{prompt.lower()}")')
    return block


def test_each_python_block_runs_on_the_installed_major(data):
    from interp import ResidualGPT

    namespace: dict = {"__name__": "readme"}
    for block in BLOCKS:
        paths = re.findall(r'"(runs/[^"]+/(\w+)/seed\d+/ckpt\.pt)"', block)
        for path, residual in paths:
            ckpt = smoke_checkpoint(residual)
            block = _fit_prompts(block.replace(path, str(ckpt)), ResidualGPT.from_checkpoint(ckpt))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the export's notice for a removed residual path
            exec(compile(block, "README.md", "exec"), namespace)
    assert "tl" in namespace and "parts" in namespace

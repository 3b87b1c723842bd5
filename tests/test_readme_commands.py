"""Every `python -m` command in README.md and docs/guide.md (its longer half) parses as written (issue 46: a newcomer
copying `python -m interp.sample` met a usage error naming three required options), and the long ones say their cost
on the same line or the next."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text() + "\n" + (REPO / "docs" / "guide.md").read_text()


def _parser(module: str):
    if module.startswith("experiments."):
        import importlib

        return importlib.import_module(f"{module}.run").EXPERIMENT.parser()
    if module == "training":
        from training.__main__ import training_parser

        return training_parser()
    if module == "interp.nanogpt":
        from interp.nanogpt.writer import parser

        return parser()
    if module == "interp.sample":
        from interp.sample import parser

        return parser()
    if module == "interp.plot_attention":
        from interp.plot_attention import parser

        return parser()
    raise AssertionError(f"README names python -m {module}: add its parser here")


def _commands() -> list[list[str]]:
    """The command lines of the README's code blocks and `...` spans that start with python -m."""
    found = re.findall(r"^ {4}(python -m .+?)(?:\s+#.*)?$", README, re.M)
    found += re.findall(r"`(python -m [^`]+)`", README)
    out = []
    for line in found:
        argv = shlex.split(line.replace("$CKPT", "ckpt.pt"))
        if argv[2] != "experiments":  # `python -m experiments` lists them: no options
            out.append(argv[2:])
    return out


def test_the_readme_names_the_commands():
    names = {argv[0] for argv in _commands()}
    assert {"experiments.routing_test", "experiments.escape_time", "interp.sample", "interp.nanogpt"} <= names


@pytest.mark.parametrize("argv", _commands(), ids=lambda argv: " ".join(argv)[:60])
def test_each_readme_command_parses_as_written(argv):
    args = _parser(argv[0]).parse_args(argv[1:])  # a missing required option exits 2 here
    assert args is not None


@pytest.mark.parametrize("name", ["experiments.phase_diagram --confirm", "experiments.escape_time"])
def test_the_long_experiments_say_their_cost_and_quick_form(name):
    line = next(line for line in README.splitlines() if f"python -m {name}`" in line)
    following = README.splitlines()[README.splitlines().index(line) + 1]
    text = line + following
    assert re.search(r"\d+(\.\d+)? ?(h|min)\b", text) and "--preset" in text and "smoke" in text, text

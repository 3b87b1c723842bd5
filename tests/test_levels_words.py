"""The reference levels printed and quoted say which text they are of (issue 58: a smoke run printed unigram 3.312
beside the README's "about 3.35" without saying that one is of 1,024 validation tokens and the other of the split)."""

from __future__ import annotations

import pytest
from conftest import REPO, has_shared_data

from experiments.runner.text import levels_line
from training.data import load_corpus
from training.presets import resolve
from training.reference_levels import reference_levels_split, validation_levels


def preset_levels(preset: str) -> tuple[dict, object]:
    """The levels a command prints for `preset` (training.reference_levels.validation_levels), and its corpus."""
    spec = resolve(preset, {})
    corpus = load_corpus(spec.train.corpus, spec.train.data_path)
    return validation_levels(spec.model.n_ctx, spec.train, corpus), corpus


def test_the_printed_levels_say_which_tokens_they_are_of(data):
    levels, corpus = preset_levels("smoke")
    line = levels_line(levels)
    assert f"of the {levels['n_targets']:,} target tokens in this preset's fixed validation batches" in line
    assert "a sample of the validation split" in line and f"train split's {len(corpus.train):,} tokens" in line
    assert line.endswith(f"unigram {levels['unigram']:.3f}, bigram {levels['bigram']:.3f} nats")
    assert "\n" not in line


def test_the_readme_levels_are_the_ones_computed_on_the_text_it_names(data):
    """Each level the user's guide quotes, of TinyShakespeare's whole validation split and of each preset's batches."""
    if not has_shared_data():
        pytest.skip("docs/guide.md quotes TinyShakespeare's levels; the synthetic stand-in has others")
    readme = " ".join((REPO / "docs" / "guide.md").read_text().split())
    levels, corpus = preset_levels("smoke")
    split = reference_levels_split(corpus.train, corpus.val, corpus.vocab_size)
    assert f"whole validation split they are {split['unigram']:.3f} and {split['bigram']:.3f} nats" in readme
    for preset in ("paper-10m", "cpu-quick", "smoke"):
        levels, _ = preset_levels(preset)
        said = f"{preset}'s {levels['n_targets']:,} tokens give {levels['unigram']:.3f} and {levels['bigram']:.3f}"
        assert said in readme


def test_with_random_validation_batches_the_words_say_so(tmp_path, data, capsys):
    """val_mode=random (nanogpt-10m's default): the runs validate on fresh batches, the levels are of the fixed
    ones; the console line and the report's first lines say which is which."""
    from experiments.routing_test.run import EXPERIMENT

    argv = ["--preset", "smoke", "--variants", "full", "--set", "max_steps=5", "--set", "val_mode=random"]
    assert EXPERIMENT.main([*argv, "--no-identity", "--no-progress", "--out", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "fresh random batches of the validation split at each evaluation, val_mode=random" in out
    assert "in this preset's fixed validation batches" not in out
    page = (tmp_path / "smoke" / "report-routing_test.html").read_text()
    assert "Validation loss on fresh random batches of the validation split" in page
    assert "Validation loss on the fixed validation batches" not in page

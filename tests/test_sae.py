"""SAELens on the 3.x export (issue 58): its own runner trains an SAE on a smoke export from the toolkit's corpus
in a few lines, its own run_with_saes / add_sae splice it into what load_tl returns, and the spliced log-probs
are ResidualGPT's with the same SAE at the same site, on `full` and on the rewired `attn_only`.

SAELens 6 needs TransformerLens < 4, so this file skips under `make test-tl4`, and where the `sae` extra is not
installed. About 40 s on 2 busy CPU cores, most of it importing SAELens and training two smoke models.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import warnings

import pytest
import torch
from demo_models import model_of, smoke_checkpoint
from majors import TL4

if TL4:
    pytest.skip(
        "SAELens 6 needs TransformerLens < 4 (sae-lens pins transformer-lens<4); `make test` runs this file on 3.x",
        allow_module_level=True,
    )
sae_lens = pytest.importorskip(
    "sae_lens", reason="SAELens is not installed: pip install -c constraints/tl3.txt -e '.[sae]'"
)

from interp.errors import ConfigError, DataError, HookNameError, ToolkitError, UntrainedTokenWarning  # noqa: E402
from interp.reading.sae import SAEProcessingWarning, export_processing, residual_gpt_sae_hook  # noqa: E402
from interp.tl.load import load_tl  # noqa: E402
from training.sae_training import sae_dataset, sae_runner_config  # noqa: E402

SITE = "blocks.0.hook_resid_post"  # on attn_only a rewired hook point (no FFN residual): resid_post = mlp_out
# Log-probs (|value| below ~10 nats) from two float32 computations of one function: the export alone agrees with
# ResidualGPT to ~1.5e-6 (fused vs explicit attention, processed weights); one SAE encode / decode of activations
# of norm ~1 adds rounding of ~1e-7 of them. 1e-5 is several times both, and far below what a wrong splice moves
# (the stream without its centring, or a removed residual put back: 0.1 to 1 nat).
LOGPROB_TOL = 1e-5
# A trained SAE reconstructs most of the site's variance (measured 0.96 at these settings); an untrained one,
# SAELens's initialisation, explains none of it (below 0).
MIN_EXPLAINED_VARIANCE = 0.8


def _export(residual: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the export's one notice for a removed residual path
        return load_tl(smoke_checkpoint(residual))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data_dir):
    """An SAE trained by SAELens's own runner on the attn_only smoke export at SITE, as the docs show it."""
    from sae_lens import LanguageModelSAETrainingRunner, StandardTrainingSAEConfig

    tl = _export("attn_only")
    out = tmp_path_factory.mktemp("sae")
    cfg = sae_runner_config(
        tl,
        SITE,
        d_sae=64,
        training_tokens=8192,
        sae=StandardTrainingSAEConfig(d_in=tl.cfg.d_model, d_sae=64, l1_coefficient=0.03),
        train_batch_size_tokens=256,
        store_batch_size_prompts=16,
        lr=1e-2,
        n_eval_batches=1,
        output_path=str(out),
        verbose=False,
    )
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        sae = LanguageModelSAETrainingRunner(cfg, override_model=tl, override_dataset=sae_dataset(tl)).run()
    return tl, sae.eval(), out, said


@pytest.fixture(scope="module")
def data_dir():
    import os

    from conftest import data_root

    before = os.environ.get("RESIDUAL_DATA_DIR")
    os.environ["RESIDUAL_DATA_DIR"] = str(data_root())
    yield data_root()
    if before is None:
        os.environ.pop("RESIDUAL_DATA_DIR", None)
    else:
        os.environ["RESIDUAL_DATA_DIR"] = before


def _val_tokens(tl, n: int = 8) -> torch.Tensor:
    return torch.tensor(sae_dataset(tl, split="val")[:n]["tokens"])


def test_the_corpus_is_one_call_and_feeds_only_trained_ids(trained):
    tl, _, _, said = trained
    ds = sae_dataset(tl)
    tokens = torch.tensor(ds[:64]["tokens"])
    assert ds.column_names == ["tokens"] and tokens.shape == (64, tl.cfg.n_ctx)
    assert int(tokens.max()) < tl.cfg.d_vocab_out  # the char tokenizer's <|endoftext|> (65) never appears
    assert not [w for w in said if issubclass(w.category, UntrainedTokenWarning)]  # nor did the runner add it


def test_the_runner_trains_a_working_sae(trained):
    tl, sae, _, _ = trained
    tokens = _val_tokens(tl)  # held-out text
    with torch.no_grad():
        _, cache = tl.run_with_cache(tokens, names_filter=[SITE])
        x = cache[SITE]
        residual = x - sae(x)
        explained = 1 - residual.pow(2).sum() / (x - x.mean((0, 1))).pow(2).sum()
        clean = tl(tokens, return_type="loss").item()
        spliced = tl.run_with_saes(tokens, saes=[sae], return_type="loss").item()
        active = (sae.encode(x) > 0).float().sum(-1).mean().item()
    assert explained > MIN_EXPLAINED_VARIANCE, explained
    assert 0 < active < sae.cfg.d_sae  # sparse: not every feature on every token
    assert spliced - clean < 0.1, (clean, spliced)  # the spliced model still predicts (the smoke model: ~3.4 nats)


def test_the_saved_sae_records_the_exports_processing(trained):
    tl, _, out, _ = trained
    from sae_lens import SAE

    recorded = json.loads((out / "cfg.json").read_text())["metadata"]
    assert recorded["model_from_pretrained_kwargs"] == export_processing(tl)
    assert export_processing(tl) == {
        "fold_ln": True,
        "center_writing_weights": True,
        "center_unembed": True,
        "fold_value_biases": False,
    }
    assert recorded["prepend_bos"] is False and recorded["sequence_separator_token"] is None
    loaded = SAE.load_from_disk(out)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SAEProcessingWarning)  # its own record: no word
        tl.run_with_saes(_val_tokens(tl, 2), saes=[loaded])


def test_an_sae_recorded_under_other_processing_warns_at_the_splice(trained):
    tl, sae, _, _ = trained
    other = copy.deepcopy(sae)
    other.cfg.metadata.model_from_pretrained_kwargs = {"center_writing_weights": False}  # SAELens's own default
    with pytest.warns(SAEProcessingWarning, match="center_writing_weights=False") as got:
        tl.run_with_saes(_val_tokens(tl, 2), saes=[other])
    assert [w.filename for w in got if w.category is SAEProcessingWarning] == [__file__]  # the user's line


@pytest.mark.parametrize(
    ("residual", "site"),
    [
        ("full", SITE),
        ("attn_only", SITE),  # TL's hook point there removes the FFN residual: SAELens's wrapper takes its place
        ("attn_only", "blocks.0.hook_mlp_out"),  # the rewired hook point that records what the block adds
        ("attn_only", "blocks.1.hook_resid_mid"),
    ],
)
def test_spliced_log_probs_are_residual_gpts_with_the_same_sae(trained, residual, site):
    _, trained_sae, _, _ = trained
    sae = copy.deepcopy(trained_sae)
    sae.cfg.metadata.hook_name = site
    model, tl = model_of(residual), _export(residual)
    tokens = _val_tokens(tl)
    with torch.no_grad():
        ours = model.run_with_hooks(tokens, fwd_hooks=[residual_gpt_sae_hook(sae, tl)]).log_softmax(-1)
        clean = model(tokens).log_softmax(-1)
        spliced = tl.run_with_saes(tokens, saes=[sae]).log_softmax(-1)
        after = tl(tokens).log_softmax(-1)  # SAELens's reset: the export's own wiring again
        tl.add_sae(sae)
        added = tl(tokens).log_softmax(-1)
        tl.reset_saes()
    assert (ours - clean).abs().max() > 100 * LOGPROB_TOL  # the SAE changes the prediction: the check is not empty
    assert (spliced - ours).abs().max() <= LOGPROB_TOL
    assert (added - ours).abs().max() <= LOGPROB_TOL
    assert (after - clean).abs().max() <= LOGPROB_TOL
    assert (tl(tokens).log_softmax(-1) - clean).abs().max() <= LOGPROB_TOL


def test_the_export_becomes_sae_lenss_own_class(data_dir):
    """What HookedSAETransformer.__init__ adds to a HookedTransformer, the export has after its first SAE call."""
    from sae_lens import HookedSAETransformer
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    tl = _export("full")
    assert not isinstance(tl, HookedSAETransformer)  # no SAELens import until the first SAE call
    # looking is not a call: hasattr, inspect.getmembers and a debugger read every property
    assert tl.acts_to_saes == {} and hasattr(tl, "acts_to_saes") and dict(inspect.getmembers(tl))["acts_to_saes"] == {}
    assert not isinstance(tl, HookedSAETransformer)
    tl.reset_saes()
    assert tl.acts_to_saes == {} and isinstance(tl, HookedSAETransformer)
    cfg = HookedTransformerConfig(n_layers=1, d_model=8, n_ctx=4, d_head=4, n_heads=2, d_vocab=5, act_fn="gelu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        added = set(vars(HookedSAETransformer(cfg))) - set(vars(HookedTransformer(cfg)))
    assert added <= set(vars(tl)), added - set(vars(tl))
    assert "blocks.0.mlp.hook_in" in tl.hook_dict


def test_an_export_with_an_sae_attached_is_not_saved_until_reset(trained, tmp_path):
    """save_hooked would write the SAE's keys as the model's (a file load_hooked refuses): refused in one line;
    after reset_saes the file loads back to the same log-probs."""
    from interp import load_hooked, save_hooked

    tl, sae, _, _ = trained
    x = _val_tokens(tl, 2)
    tl.add_sae(sae)
    try:
        with pytest.raises(ToolkitError, match=f"SAEs are attached at {SITE}; call model.reset_saes") as refused:
            save_hooked(tl, tmp_path / "spliced.pt")
        assert "\n" not in str(refused.value) and not (tmp_path / "spliced.pt").exists()
    finally:
        tl.reset_saes()
    save_hooked(tl, tmp_path / "plain.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = load_hooked(tmp_path / "plain.pt")
    torch.testing.assert_close(again(x).log_softmax(-1), tl(x).log_softmax(-1), rtol=0, atol=0)


def test_the_config_sizes_the_buffer_and_refuses_one_too_small(trained):
    tl, _, _, _ = trained
    cfg = sae_runner_config(tl, SITE, d_sae=64, training_tokens=4096)  # SAELens's batch of 4096 tokens
    assert cfg.n_batches_in_buffer * cfg.context_size >= cfg.train_batch_size_tokens
    assert cfg.sae.d_in == tl.cfg.d_model and cfg.logger.log_to_wandb is False
    with pytest.raises(ConfigError, match="n_batches_in_buffer >= 128"):
        sae_runner_config(tl, SITE, d_sae=64, training_tokens=4096, n_batches_in_buffer=20)
    with pytest.raises(HookNameError, match=r"^hook_name: this model has no hook point named 'blocks.0.hook_resid_p"):
        sae_runner_config(tl, "blocks.0.hook_resid_pots", d_sae=64, training_tokens=4096)


@pytest.mark.parametrize(
    "option",
    [{"n_batches_in_buffer": "x"}, {"context_size": True}, {"train_batch_size_tokens": 0}, {"context_size": 2.5}],
)
def test_the_config_refuses_a_count_that_is_not_a_positive_integer(trained, option):
    tl, _, _, _ = trained
    with pytest.raises(ConfigError, match=f"^{next(iter(option))} must be a positive integer"):
        sae_runner_config(tl, SITE, d_sae=64, training_tokens=4096, **option)


def test_the_config_refuses_a_model_that_is_not_the_export_by_name(trained):
    """ResidualGPT itself (or a bridge) is refused in one line naming the export, not with an AttributeError."""
    from api_models import tiny_model

    with pytest.raises(ConfigError, match="takes a HookedTransformer export .* not ResidualGPT"):
        sae_runner_config(tiny_model(residual="attn_only"), SITE, d_sae=8, training_tokens=100)


def test_a_corpus_of_other_characters_is_refused(trained):
    from types import SimpleNamespace

    tl, _, _, _ = trained
    chars = list(reversed(tl.tokenizer.chars))  # the same characters under other ids: another text
    other = SimpleNamespace(cfg=tl.cfg, vocab_state={"vocab": chars, "encoding": "char"})
    with pytest.raises(DataError, match="not the vocabulary"):
        sae_dataset(other)
    with pytest.raises(ConfigError, match="context_size"):
        sae_dataset(tl, context_size=tl.cfg.n_ctx + 1)


def test_a_text_file_of_other_characters_is_refused_naming_the_file(trained, tmp_path):
    tl, _, _, _ = trained
    text = tmp_path / "odd.txt"
    text.write_text("abcabc xyz\n" * 2000)
    with pytest.raises(DataError, match=re.escape(f"{text} (read as corpus 'shakespeare_char') (char, ")):
        sae_dataset(tl, path=text)


def test_without_sae_lens_the_first_sae_call_says_how_to_install(monkeypatch, data_dir):
    import sys

    from interp.tl.hooked import sae_methods

    tl = _export("full")
    monkeypatch.setattr(sae_methods, "_SAE_CLASSES", {})
    monkeypatch.setitem(sys.modules, "sae_lens", None)  # import sae_lens now fails as if not installed
    with pytest.raises(ToolkitError, match=r"\.\[sae\]"):
        tl.run_with_saes(torch.zeros(1, 4, dtype=torch.long), saes=[])

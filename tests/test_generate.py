"""Generation and the character tokenizer: ResidualGPT.generate (nanoGPT's), tl.generate, interp.sample."""

from __future__ import annotations

import math

import pytest
import torch
from test_hooked import CHARS, RESIDUALS, ROUTINGS, convert, make_model, tokens

from interp import ConfigError, DataError, save_checkpoint

PROMPTS = ["ROMEO:\n", "\n", "KING:", "a\n\nb\n"]  # newlines at the end, alone, absent, repeated


def ids(text: str) -> torch.Tensor:
    return torch.tensor([[CHARS.index(c) for c in text]])


@pytest.mark.parametrize("routing", list(ROUTINGS))
@pytest.mark.parametrize("residual", RESIDUALS)
def test_greedy_generation_agrees_with_export(residual, routing):
    mixer, self_bias = ROUTINGS[routing]
    model = make_model("trained", residual=residual, mixer=mixer, self_bias=self_bias)
    tl = convert(model)
    for prompt in PROMPTS:
        n_new = model.cfg.n_ctx - len(prompt)  # up to the full context
        expected = model.generate(ids(prompt), n_new, temperature=0.0)
        got = tl.generate(ids(prompt), max_new_tokens=n_new, do_sample=False, verbose=False)
        assert got.tolist() == expected.tolist(), prompt
        text = tl.generate(prompt, max_new_tokens=n_new, do_sample=False, verbose=False)
        assert text == "".join(CHARS[i] for i in expected[0]), prompt  # every newline kept


def test_generate_crops_to_the_context():
    model = make_model("trained", residual="attn_only")
    prompt = tokens(batch=2, n=10)
    out = model.generate(prompt, 20, temperature=0.0)  # 30 tokens > n_ctx 16
    assert out.shape == (2, 30) and torch.equal(out[:, :10], prompt)
    with torch.no_grad():
        for i in range(10, 30):
            window = out[:, max(0, i - model.cfg.n_ctx) : i]
            assert torch.equal(out[:, i], model(window)[:, -1].argmax(-1))


def test_sampling_is_seeded_and_top_k_restricts():
    model = make_model("trained", residual="none")
    prompt = tokens(batch=4, n=4)
    runs = [model.generate(prompt, 12, generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], model.generate(prompt, 12, generator=torch.Generator().manual_seed(8)))
    assert torch.equal(model.generate(prompt, 12, top_k=1), model.generate(prompt, 12, temperature=0.0))
    out = model.generate(prompt, 12, temperature=2.0, top_k=3, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(out[:, :-1])[:, 3:]  # the logits each new token was drawn from
    top3 = logits.topk(3, dim=-1).indices
    assert (top3 == out[:, 4:, None]).any(-1).all()


def test_generate_keeps_training_flag_and_checks_arguments():
    model = make_model("random").train()
    model.generate(tokens(batch=1, n=3), 2)
    assert model.training
    for kwargs, match in [
        (dict(max_new_tokens=-1), "max_new_tokens"),
        (dict(max_new_tokens=2, temperature=-1.0), "temperature"),
        (dict(max_new_tokens=2, temperature=math.nan), "temperature"),
        (dict(max_new_tokens=2, top_k=0), "top_k"),
    ]:
        with pytest.raises(ConfigError, match=match):
            model.generate(tokens(batch=1, n=3), **kwargs)
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        model.generate(torch.tensor([[len(CHARS)]]), 1)
    with pytest.raises(ConfigError, match=r"\[batch, pos\]"):
        model.generate(torch.tensor([1, 2]), 1)


def test_char_tokenizer_keeps_newlines_and_pads_with_its_own_token():
    model = make_model("trained")
    tl = convert(model)
    tok = tl.tokenizer
    assert tok.eos_token_id == tok.pad_token_id == tok.bos_token_id == len(CHARS)  # after every character
    assert tl.to_string(tl.to_tokens("a\nb\n")[0]) == "a\nb\n"
    batch = tl.to_tokens(["ab\n", "abcd"])
    assert batch[0].tolist() == [CHARS.index(c) for c in "ab\n"] + [len(CHARS)]
    with torch.no_grad():
        padded = tl(batch)[0, :3]
        alone = model(ids("ab\n"))[0]
    assert (padded - alone).abs().max().item() <= 1e-5
    assert tl.generate(["ROMEO:\n", "KING:"], max_new_tokens=4, do_sample=False, verbose=False)[0].startswith(
        "ROMEO:\n"
    )


def test_unknown_characters_and_long_prompts_are_clear_errors():
    model = make_model("random")
    tl = convert(model)
    with pytest.raises(DataError, match="'é'.*65-character vocabulary"):
        tl.to_tokens("café")
    with pytest.raises(ConfigError, match="17 characters exceeds the context of 16"):
        tl.to_tokens("x" * 17)
    with pytest.raises(ConfigError, match="sequence length 17 exceeds n_ctx 16"):
        tl(tokens(batch=1, n=17))
    # past n_ctx generate crops to the last n_ctx tokens, as ResidualGPT.generate (tests/test_trust.py)
    assert len(tl.generate("ROMEO:", max_new_tokens=12, do_sample=False, verbose=False)) == 18
    with pytest.raises(ConfigError, match="sequence length 17 exceeds n_ctx 16"):
        model(tokens(batch=1, n=17))


LONG_PROMPTS = ["ROMEO: what is it now, my lord?", "KING:\nO, let me\nspeak!\n\nQUEEN:\n"]  # 31, 29 > n_ctx 16


@pytest.mark.parametrize("residual", ["attn_only", "none"])
def test_the_exports_generate_continues_a_long_text_prompt_as_model_generate_does(residual):
    """Issue 50: on a text prompt past n_ctx, the installed major's export (TL 3: the HookedTransformer, TL 4: the
    bridge; make test-tl4 runs this file) crops to the last n_ctx tokens at every step, as ResidualGPT.generate."""
    model = make_model("trained", residual=residual)
    model.vocab_state = {"vocab": CHARS}
    tl = convert(model)
    for prompt in LONG_PROMPTS:
        want = model.generate(prompt, 20, temperature=0)
        assert want.startswith(prompt) and len(want) == len(prompt) + 20
        assert tl.generate(prompt, max_new_tokens=20, do_sample=False, verbose=False) == want, prompt
        got = tl.generate(ids(prompt), max_new_tokens=20, do_sample=False, verbose=False)
        assert "".join(CHARS[i] for i in got[0]) == want, prompt


def test_sample_command(tmp_path, capsys):
    from interp import sample

    model = make_model("trained", residual="ffn_only")
    save_checkpoint(tmp_path / "ckpt.pt", model, vocab=CHARS)
    args = ["--ckpt", str(tmp_path / "ckpt.pt"), "--prompt", "ROMEO:\n", "--max-new-tokens", "9"]
    assert sample.main([*args, "--temperature", "0"]) == 0
    expected = model.generate(ids("ROMEO:\n"), 9, temperature=0.0)[0]
    assert capsys.readouterr().out == "".join(CHARS[i] for i in expected) + "\n"
    assert sample.main([*args, "--top-k", "5", "--seed", "3"]) == 0
    first = capsys.readouterr().out
    assert sample.main([*args, "--top-k", "5", "--seed", "3"]) == 0
    assert capsys.readouterr().out == first
    assert sample.main([*args[:3], "café", *args[4:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "'é'" in err and err.count("\n") == 1
    # only --ckpt is required: nanoGPT's defaults, a newline and (here) 200 new tokens
    assert sample.main([*args[:2], "--temperature", "0"]) == 0
    expected = model.generate(ids("\n"), 200, temperature=0.0)[0]
    assert capsys.readouterr().out == "".join(CHARS[i] for i in expected) + "\n"


def test_sample_command_says_in_one_line_when_it_reads_only_the_end_of_a_long_prompt(tmp_path, capsys):
    """The model reads at most n_ctx tokens: a longer prompt is cropped to its end, and the command says so."""
    from interp import sample

    model = make_model("random", residual="attn_only")
    save_checkpoint(tmp_path / "ckpt.pt", model, vocab=CHARS)
    args = ["--ckpt", str(tmp_path / "ckpt.pt"), "--max-new-tokens", "3", "--temperature", "0"]
    prompt = "ROMEO:\nWhat light is this?"  # 26 characters, n_ctx 16
    assert sample.main([*args, "--prompt", prompt]) == 0
    out, err = capsys.readouterr()
    assert out == "".join(CHARS[i] for i in model.generate(ids(prompt), 3, temperature=0.0)[0]) + "\n"
    assert err.startswith("warning: ") and err.count("\n") == 1
    assert "26 tokens" in err and "n_ctx=16" in err and "last 16" in err
    assert sample.main([*args, "--prompt", prompt[-16:]]) == 0  # one that fits: nothing said
    assert capsys.readouterr().err == ""


def test_sample_shows_a_vocabularys_control_characters_escaped(tmp_path, capsys):
    """A vocabulary is a file's: an escape code in it is printed as \\x1b, never sent to the terminal raw."""
    from interp import sample

    forged = ["\x1b", "\r", "\t", "\x07", *CHARS[4:]]  # the same size as CHARS, "\n" and three more replaced
    model = make_model("trained", residual="ffn_only")
    save_checkpoint(tmp_path / "ckpt.pt", model, vocab=forged)
    prompt = "ROMEO:\x1b\r\x07\t"
    args = ["--ckpt", str(tmp_path / "ckpt.pt"), "--prompt", prompt, "--max-new-tokens", "40", "--temperature", "0"]
    assert sample.main(args) == 0
    out = capsys.readouterr().out
    prompt_ids = torch.tensor([[forged.index(c) for c in prompt]])
    raw = "".join(forged[i] for i in model.generate(prompt_ids, 40, temperature=0.0)[0])
    assert not any(c in out for c in "\x1b\r\x07") and "\t" in out
    assert out == raw.replace("\x1b", "\\x1b").replace("\r", "\\r").replace("\x07", "\\x07") + "\n"


# ---------------------------------------------------------------- temperatures (issue 50, item 2)
# Dividing float32 logits by a temperature under about 1e-37 overflows them to inf, and a softmax over
# inf is NaN: any positive finite temperature must still give text, the tiny ones greedy text.
TINY = [1e-30, 1e-39, 1e-300, 5e-324]  # the last is the smallest positive double
BAD = [math.inf, -math.inf, math.nan, -1.0, -1e-300, True, "0.5", None]


@pytest.mark.parametrize("temperature", TINY)
def test_a_temperature_whose_division_overflows_samples_greedily(temperature):
    model = make_model("trained", residual="full")
    prompt = tokens(batch=3, n=4)
    greedy = model.generate(prompt, 12, temperature=0.0)
    drawn = model.generate(prompt, 12, temperature=temperature, generator=torch.Generator().manual_seed(0))
    assert torch.equal(drawn, greedy)
    assert torch.equal(model.generate(prompt, 12, temperature=temperature, top_k=4), greedy)


@pytest.mark.parametrize("temperature", [1e300, 1.7976931348623157e308])
def test_a_huge_temperature_draws_among_the_top_k(temperature):
    model = make_model("trained", residual="none")
    prompt = tokens(batch=4, n=4)
    out = model.generate(prompt, 12, temperature=temperature, top_k=3, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        top3 = model(out[:, :-1])[:, 3:].topk(3, dim=-1).indices
    assert (top3 == out[:, 4:, None]).any(-1).all()
    wide = model.generate(prompt, 12, temperature=temperature, generator=torch.Generator().manual_seed(1))
    assert wide.shape == (4, 16) and int(wide.max()) < len(CHARS)


@pytest.mark.parametrize("temperature", BAD, ids=repr)
def test_a_temperature_that_is_no_finite_number_at_least_0_is_refused_in_one_line(temperature):
    model = make_model("random")
    with pytest.raises(ConfigError, match="temperature") as refused:
        model.generate(tokens(batch=1, n=3), 2, temperature=temperature)
    assert "\n" not in str(refused.value) and "0 is greedy" in str(refused.value)


@pytest.mark.parametrize("temperature", [torch.tensor(0.5), torch.tensor(0.0)], ids=repr)
def test_a_0d_tensor_temperature_samples_as_its_number(temperature):
    model = make_model("trained", residual="full")
    prompt = tokens(batch=2, n=4)
    number = model.generate(prompt, 8, temperature=temperature.item(), generator=torch.Generator().manual_seed(3))
    tensor = model.generate(prompt, 8, temperature=temperature, generator=torch.Generator().manual_seed(3))
    assert torch.equal(number, tensor)


def test_an_int_past_floats_range_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="0 is greedy"):
        make_model("random").generate(tokens(batch=1, n=3), 2, temperature=2**2000)


@pytest.mark.parametrize("temperature", TINY)
def test_the_exports_generate_at_a_tiny_temperature_is_greedy(temperature):
    """The installed major's export samples with TransformerLens's own sampler (float32 logits / temperature):
    a tiny temperature gives the greedy text there too, not TL's NaN traceback."""
    model = make_model("trained", residual="full")
    model.vocab_state = {"vocab": CHARS}
    tl = convert(model)
    greedy = tl.generate(ids("ROMEO"), max_new_tokens=8, do_sample=False, verbose=False)
    drawn = tl.generate(ids("ROMEO"), max_new_tokens=8, temperature=temperature, verbose=False)
    assert torch.equal(drawn, greedy)


@pytest.mark.parametrize("temperature", BAD, ids=repr)
def test_the_exports_generate_refuses_what_model_generate_refuses(temperature):
    model = make_model("trained", residual="attn_only")
    model.vocab_state = {"vocab": CHARS}
    tl = convert(model)
    with pytest.raises(ConfigError, match="0 is greedy"):
        tl.generate(ids("ROMEO"), max_new_tokens=4, temperature=temperature, verbose=False)


@pytest.mark.parametrize("temperature", ["1e-300", "5e-324", "1e-40"])
def test_sample_command_with_a_tiny_temperature_prints_the_greedy_text(tmp_path, capsys, temperature):
    from interp import sample

    model = make_model("trained", residual="full")
    save_checkpoint(tmp_path / "ckpt.pt", model, vocab=CHARS)
    args = ["--ckpt", str(tmp_path / "ckpt.pt"), "--prompt", "RO", "--max-new-tokens", "12"]
    assert sample.main([*args, "--temperature", "0"]) == 0
    greedy = capsys.readouterr().out
    assert sample.main([*args, "--temperature", temperature]) == 0
    assert capsys.readouterr().out == greedy


@pytest.mark.parametrize("temperature", ["nan", "inf", "-inf", "-1", "-1e-300", "warm", ""])
def test_sample_command_refuses_a_bad_temperature_before_reading_the_checkpoint(tmp_path, capsys, temperature):
    from interp import sample

    missing = tmp_path / "no-such-ckpt.pt"  # never opened: the option is refused first
    assert sample.main(["--ckpt", str(missing), f"--temperature={temperature}"]) == 2  # = : argparse takes "-inf"
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "--temperature" in err and "0 is greedy" in err
    assert str(missing) not in err


BAD_OPTIONS = [
    ({"max_new_tokens": -1}, "max_new_tokens"),
    ({"max_new_tokens": 2.5}, "max_new_tokens"),
    ({"max_new_tokens": True}, "max_new_tokens"),
    ({"top_k": 0}, "top_k"),
    ({"top_k": 1.5}, "top_k"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"return_type": "bogus"}, "return_type"),
]


@pytest.mark.parametrize("options,name", BAD_OPTIONS, ids=repr)
def test_either_majors_generate_refuses_a_bad_option_as_model_generate_does(options, name):
    """One ConfigError naming the option on TL 3 and TL 4 alike (TL's own: an AssertionError, torch.cat's error,
    or tokens returned for an unknown return_type), before any token is drawn."""
    model = make_model("trained", residual="attn_only")
    model.vocab_state = {"vocab": CHARS}
    tl = convert(model)
    kwargs = {"max_new_tokens": 3, **options}
    with pytest.raises(ConfigError, match=name):
        tl.generate("ROMEO", verbose=False, **kwargs)
    with pytest.raises(ConfigError, match=name):
        tl.generate(ids("ROMEO"), verbose=False, **kwargs)
    good = tl.generate("ROMEO", max_new_tokens=3, top_k=2, top_p=0.9, return_type="str", verbose=False)
    assert isinstance(good, str) and good.startswith("ROMEO") and len(good) == 8


def test_either_majors_loss_refuses_logits_of_another_batch_or_length():
    """TL's loss would score only the rows the two share (a silent wrong number) or fail inside torch.gather."""
    from interp.errors import ShapeError

    model = make_model("trained", residual="attn_only")
    model.vocab_state = {"vocab": CHARS}
    tl = convert(model)
    x = ids("ROMEO: KING")
    two = torch.cat([x, x.flip(1)])
    with torch.no_grad():
        with pytest.raises(ShapeError, match="one batch and length"):
            tl.loss_fn(tl(two), x)
        with pytest.raises(ShapeError, match="one batch and length"):
            tl.loss_fn(tl(x[:, :4]), x)
        rows = tl.loss_fn(tl(two), two, per_token=True)
        assert torch.allclose(tl.loss_fn(tl(two), two), rows.mean())
        assert torch.allclose(tl.loss_fn(tl(x), x), rows[0].mean())

"""interp.figures.plots and the attention CLI: figures hold the data they claim; pages render offline."""

from __future__ import annotations

import math
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from majors import export
from offline import external_references

from interp import ModelConfig, ResidualGPT, save_checkpoint
from interp.figures.plot_page import PlotInputError, Table, save_html
from interp.figures.plots import (
    alpha_tt_heatmap,
    attention_patterns,
    gradient_flow_heatmap,
    loss_curves,
    norm_profile,
    token_labels,
    visible,
)
from interp.files.gpt2 import gpt2_files
from interp.plot_attention import main

CHARS = list("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")  # TinyShakespeare's 65
PROMPT = "ROMEO:\nO me, O"  # repeated characters: labels must stay distinct
REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


def tiny_model(**changes) -> ResidualGPT:
    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=2, d_model=32, n_heads=4, n_ctx=16, d_vocab=len(CHARS), init_std=0.2, **changes)
    return ResidualGPT(cfg).eval()


@pytest.fixture
def ckpt(tmp_path) -> Path:
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, tiny_model(residual="attn_only", self_bias=4.0), vocab=CHARS)
    return path


def prompt_ids() -> torch.Tensor:
    return torch.tensor([[CHARS.index(c) for c in PROMPT]])


# --------------------------------------------------------------------------- attention figure


@pytest.mark.parametrize("source", ["tl", "residual_gpt"])  # tl: the installed major's export
def test_attention_figure_holds_the_cached_pattern(source):
    model = tiny_model(residual="none")
    if source == "tl":
        model = export(model, vocab=CHARS)
        tokens = model.to_str_tokens(PROMPT)
    else:
        tokens = list(PROMPT)
    with torch.no_grad():
        _, cache = model.run_with_cache(prompt_ids())
    for layer in range(2):
        fig = attention_patterns(cache, tokens, layer=layer)
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0].numpy()
        heatmaps = [t for t in fig.data if isinstance(t, go.Heatmap)]
        assert len(heatmaps) == 4
        for head, heatmap in enumerate(heatmaps):
            np.testing.assert_array_equal(np.asarray(heatmap.z), pattern[head])
            labels = list(heatmap.x)
            assert labels == list(heatmap.y) == token_labels(tokens)
            assert [label.split(":", 1)[1] for label in labels] == [visible(t) for t in PROMPT]
            assert len(set(labels)) == len(PROMPT)  # repeated 'O' and ' ' do not collapse
            assert "weight %{z" in heatmap.hovertemplate
    assert fig.layout.yaxis.autorange == "reversed"  # query 0 on top, as in the matrix


def test_attention_figure_from_a_tensor_and_heads_subset():
    pattern = torch.softmax(torch.randn(2, 3, 5, 5), -1)
    fig = attention_patterns(pattern, list("abcde"), batch=1, heads=[2, 0])
    np.testing.assert_array_equal(np.asarray(fig.data[0].z), pattern[1, 2].numpy())
    np.testing.assert_array_equal(np.asarray(fig.data[1].z), pattern[1, 0].numpy())
    assert [a.text for a in fig.layout.annotations] == ["head 2", "head 0"]


def test_attention_figure_rejects_mismatched_tokens():
    with pytest.raises(PlotInputError, match="q = k = 4 tokens"):
        attention_patterns(np.zeros((2, 5, 5)), list("abcd"))
    with pytest.raises(PlotInputError, match="layer="):
        attention_patterns({}, list("abcd"))


def test_visible_tokens():
    assert token_labels(["a", " ", "\n", " the"]) == ["0:a", "1:\u2423", "2:\\n", "3:\u2423the"]


# --------------------------------------------------------------------------- probe figures


def test_alpha_tt_runs_side_by_side_with_baseline():
    runs = {"full": np.full((2, 4), 0.2), "attn_only": torch.rand(2, 4)}
    fig = alpha_tt_heatmap(runs, baseline=0.25)
    assert len(fig.data) == 2 and {t.coloraxis for t in fig.data} == {"coloraxis"}  # one shared colour scale
    np.testing.assert_array_equal(np.asarray(fig.data[1].z), runs["attn_only"].numpy().astype(float))
    assert "0.250" in fig.layout.title.text and "uniform baseline 0.250" in fig.data[0].hovertemplate
    assert [a.text for a in fig.layout.annotations] == ["full", "attn_only"]
    single = alpha_tt_heatmap(np.eye(3))
    assert len(single.data) == 1 and list(single.data[0].y) == ["layer 0", "layer 1", "layer 2"]


def test_gradient_flow_uses_log10_with_real_tick_labels():
    grads = np.array([[1e-4, 1e-2, 0.0], [1.0, 10.0, 3e-3]])
    fig = gradient_flow_heatmap(grads, steps=[0, 10, 20])
    heatmap = fig.data[0]
    z = np.asarray(heatmap.z, dtype=float)
    np.testing.assert_allclose(z[1], np.log10(grads[1]))
    assert math.isnan(z[0, 2])  # a zero gradient is a gap, not -inf
    np.testing.assert_array_equal(np.asarray(heatmap.customdata), grads)  # hover shows the real value
    ticks = dict(zip(heatmap.colorbar.tickvals, heatmap.colorbar.ticktext, strict=True))
    assert ticks[-4.0] == "0.0001" and ticks[1.0] == "10"
    with pytest.raises(PlotInputError):
        gradient_flow_heatmap(np.ones(3))


def test_norm_profile_one_line_per_config():
    fig = norm_profile({"full": [1, 2, 4], "none": [1, 1, 1]}, ["embed", "L0", "L1"])
    assert [t.name for t in fig.data] == ["full", "none"]
    assert list(fig.data[0].x) == ["embed", "L0", "L1"] and list(fig.data[0].y) == [1, 2, 4]


def test_loss_curves_with_reference_lines():
    curves = {
        "attn_only/seed0": ([0, 10, 20], [4.0, 3.0, 2.0]),
        "attn_only/seed1": ([0, 10, 20], [4.1, 3.1, 2.1]),
        "none/seed0": (np.arange(3), torch.tensor([4.0, 3.5, 3.4])),
    }
    fig = loss_curves(curves, {"unigram": 3.35, "bigram": 2.48})
    assert [t.name for t in fig.data] == list(curves)
    assert fig.data[0].line.color == fig.data[1].line.color != fig.data[2].line.color  # colour per config
    assert sorted(s.y0 for s in fig.layout.shapes) == [2.48, 3.35]
    assert all(s.y0 == s.y1 for s in fig.layout.shapes)  # horizontal


# --------------------------------------------------------------------------- HTML output


def _figures() -> list:
    return [
        "An introduction <with> markup to escape.",
        ("Attention", attention_patterns(np.full((1, 3, 3), 1 / 3), list("abc"))),
        ("Norms", "One line per config.", norm_profile({"full": [1, 2]})),
        go.Figure(go.Scatter(y=[1, 3, 2])),
    ]


def test_save_html_one_self_contained_file(tmp_path):
    from plotly.offline import get_plotlyjs

    path = tmp_path / "report.html"
    path.write_text("old")
    assert save_html(_figures(), path, title="A & B") == path
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<title>A &amp; B</title>" in page
    assert page.count(get_plotlyjs()[:5000]) == 1  # plotly.js embedded exactly once
    assert "<script src" not in page and external_references(page) == []  # nothing to fetch
    assert page.count("Plotly.newPlot(") == 3
    assert "<h2>Attention</h2>" in page and "<p>One line per config.</p>" in page and "&lt;with&gt;" in page
    assert sorted(os.listdir(tmp_path)) == ["report.html"]  # no temporary left behind
    assert (path.stat().st_mode & 0o777) == 0o644


def test_save_html_single_figure_and_bad_items(tmp_path):
    save_html(go.Figure(), tmp_path / "one.html")
    assert (tmp_path / "one.html").read_text().count("Plotly.newPlot(") == 1
    with pytest.raises(PlotInputError, match="save_html takes"):
        save_html([42], tmp_path / "bad.html")
    assert not (tmp_path / "bad.html").exists()


def test_save_html_writes_tables_as_html_tables(tmp_path):
    """A table is an HTML <table>: text a reader can select and search, every row on the page (no plotly table
    scrolling inside a fixed height), cells escaped; plots stay plotly."""
    rows = [[f"P{i}", "a < b & c", None] for i in range(1, 8)]
    page_path = save_html(
        [("Verdicts", Table(["id", "rule", "status"], rows, title="seven rows")), ("Curve", go.Figure())],
        tmp_path / "t.html",
    )
    page = page_path.read_text()
    table = page.split("<table>")[1].split("</table>")[0]
    assert page.count("<table>") == 1 and "<caption>seven rows</caption>" in table
    assert table.count("<tr>") == 8 and "<td>P7</td>" in table  # the header and every row
    assert "<td>a &lt; b &amp; c</td>" in table and "<td></td>" in table  # escaped; None is an empty cell
    assert page.count("Plotly.newPlot(") == 1  # only the figure
    with pytest.raises(PlotInputError, match="row 0 has 2 cells for 3 headers"):
        Table(["a", "b", "c"], [["x", "y"]])


def test_every_experiment_report_table_is_an_html_table():
    from experiments.runner.text import table_figure

    assert isinstance(table_figure(["a"], [[1.5]]), Table)


# --------------------------------------------------------------------------- CLI


def test_cli_writes_every_layer(ckpt, tmp_path, capsys):
    out = tmp_path / "attn.html"
    assert main(["--ckpt", str(ckpt), "--text", PROMPT, "--out", str(out)]) == 0
    page = out.read_text()
    assert page.count("Plotly.newPlot(") == 2 and "<h2>Layer 0</h2>" in page and "<h2>Layer 1</h2>" in page
    assert "0:R" in page and "6:\\\\n" in page  # token labels (the newline label, JSON-escaped)
    assert str(out) in capsys.readouterr().out


def test_cli_one_layer(ckpt, tmp_path):
    out = tmp_path / "deep" / "attn.html"
    assert main(["--ckpt", str(ckpt), "--text", "ROMEO:", "--layer", "1", "--out", str(out)]) == 0
    page = out.read_text()
    assert page.count("Plotly.newPlot(") == 1 and "<h2>Layer 1</h2>" in page


def test_cli_help(capsys):
    assert main(["--help"]) == 0  # the help is printed inside the output guard (interp.command.cli.guarded_output)
    text = capsys.readouterr().out
    assert all(flag in text for flag in ("--ckpt", "--text", "--layer", "--out", "examples:", "vocab"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--text", "ROMEO€"], "lacks: '€'"),
        (["--text", ""], "--text is empty"),
        (["--text", "R" * 17], "17 tokens but the model's context is 16"),
        (["--text", "ROMEO", "--layer", "2"], "--layer 2 is out of range"),
        (["--text", "ROMEO", "--layer", "x"], "invalid int value"),
        (["--layer", "0"], "required: --text"),
    ],
)
def test_cli_bad_input_one_line_exit_2(ckpt, tmp_path, capsys, args, message):
    out = tmp_path / "attn.html"
    out.write_text("earlier result")
    assert main(["--ckpt", str(ckpt), *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert "Traceback" not in err
    assert out.read_text() == "earlier result"  # nothing already written is overwritten


def test_cli_refuses_missing_checkpoint_position_blind_and_no_vocab(tmp_path, capsys):
    assert main(["--ckpt", str(tmp_path / "none.pt"), "--text", "a"]) == 2
    assert "no checkpoint at" in capsys.readouterr().err
    save_checkpoint(tmp_path / "pb.pt", tiny_model(mixer="position_blind"), vocab=CHARS)
    assert main(["--ckpt", str(tmp_path / "pb.pt"), "--text", "a"]) == 2
    assert "position_blind" in capsys.readouterr().err
    save_checkpoint(tmp_path / "nv.pt", tiny_model())
    assert main(["--ckpt", str(tmp_path / "nv.pt"), "--text", "a"]) == 2
    assert "vocab=itos" in capsys.readouterr().err


def test_cli_gpt2_checkpoint(tmp_path, monkeypatch):
    data = os.environ.get("RESIDUAL_DATA_DIR") or str(SHARED_DATA)
    if gpt2_files(data) is None:
        pytest.skip(f"GPT-2 BPE files not found under {data}/gpt2 (set RESIDUAL_DATA_DIR)")
    monkeypatch.setenv("RESIDUAL_DATA_DIR", data)
    torch.manual_seed(0)
    model = ResidualGPT(ModelConfig(n_layers=1, d_model=16, n_heads=2, n_ctx=8, d_vocab=50257))
    save_checkpoint(tmp_path / "bpe.pt", model, encoding="gpt2")
    out = tmp_path / "attn.html"
    assert main(["--ckpt", str(tmp_path / "bpe.pt"), "--text", "Hello world", "--out", str(out)]) == 0
    page = out.read_text()
    assert "0:Hello" in page and ("1:\u2423world" in page or "1:\\u2423world" in page)  # raw or JSON-escaped


# --------------------------------------------------------------------------- browser


def png_pixels(path: Path) -> np.ndarray:
    """[height, width, channels] uint8 from an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, "unsupported PNG layout"
        elif kind == b"IDAT":
            idat += body
    bpp = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, 1 + width * bpp)
    out = np.zeros((height, width * bpp), dtype=np.uint8)
    prev = np.zeros(width * bpp, dtype=np.int64)
    for y in range(height):
        kind, row = raw[y, 0], raw[y, 1:].astype(np.int64)
        if kind == 0:
            cur = row
        elif kind == 1:  # Sub: running sum along each channel
            cur = np.cumsum(row.reshape(width, bpp), axis=0).reshape(-1) % 256
        elif kind == 2:  # Up
            cur = (row + prev) % 256
        else:  # Average / Paeth depend on the byte just decoded: plain Python
            r, p, cur = row.tolist(), prev.tolist(), [0] * len(row)
            for i in range(len(r)):
                a = cur[i - bpp] if i >= bpp else 0
                c = p[i - bpp] if i >= bpp else 0
                if kind == 3:
                    cur[i] = (r[i] + (a + p[i]) // 2) % 256
                else:
                    est = a + p[i] - c
                    pa, pb, pc = abs(est - a), abs(est - p[i]), abs(est - c)
                    pred = a if pa <= pb and pa <= pc else (p[i] if pb <= pc else c)
                    cur[i] = (r[i] + pred) % 256
            cur = np.array(cur, dtype=np.int64)
        out[y], prev = cur, cur
    return out.reshape(height, width, bpp)


def test_cli_page_renders_in_headless_chromium(ckpt, tmp_path):
    if CHROMIUM is None:
        pytest.skip("chromium not installed (Debian: apt-get install chromium); the browser check needs it")
    out = tmp_path / "attn.html"
    assert main(["--ckpt", str(ckpt), "--text", PROMPT, "--out", str(out)]) == 0
    shot = tmp_path / "shot.png"
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
        "--window-size=1200,900", f"--screenshot={shot}", "--dump-dom",
    ]  # fmt: skip
    run = subprocess.run([CHROMIUM, *flags, out.as_uri()], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    assert not [line for line in console if "Uncaught" in line or "rror" in line], console
    assert run.stdout.count('class="main-svg"') >= 2  # plotly drew the figure (svg layers per plot)
    pixels = png_pixels(shot)
    assert pixels.shape[:2] == (900, 1200)
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 16, "screenshot is (nearly) one colour"


def test_png_reader_on_known_images(tmp_path):
    """The reader decodes each filter type (hand-built 2x2 RGB images)."""

    def png(rows: list[bytes]) -> Path:
        def chunk(kind: bytes, body: bytes) -> bytes:
            return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

        ihdr = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.png"
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"".join(rows))))
        return path

    expected = np.array([[[10, 20, 30], [40, 50, 60]], [[70, 80, 90], [100, 110, 120]]], dtype=np.uint8)
    plain = png([b"\0" + expected[0].tobytes(), b"\0" + expected[1].tobytes()])
    np.testing.assert_array_equal(png_pixels(plain), expected)
    sub_up = png([b"\1" + bytes([10, 20, 30, 30, 30, 30]), b"\2" + bytes([60] * 6)])
    np.testing.assert_array_equal(png_pixels(sub_up), expected)
    # Average row 1: first pixel predicts floor(up / 2); Paeth row 1: neighbours a=70.., b=40.., c=10..
    avg = png([b"\0" + expected[0].tobytes(), b"\3" + bytes([65, 70, 75, 45, 45, 45])])
    np.testing.assert_array_equal(png_pixels(avg), expected)
    paeth = png([b"\0" + expected[0].tobytes(), b"\4" + bytes([60, 60, 60, 30, 30, 30])])
    np.testing.assert_array_equal(png_pixels(paeth), expected)


@pytest.mark.slow
def test_cli_as_a_process(ckpt, tmp_path):
    """The real entry point: python -m, exit codes and stderr as a user sees them."""
    out = tmp_path / "attn.html"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    ok = subprocess.run(
        [sys.executable, "-m", "interp.plot_attention", "--ckpt", str(ckpt), "--text", "ROMEO:", "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
    )  # fmt: skip
    assert ok.returncode == 0 and out.exists(), ok.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "interp.plot_attention", "--ckpt", str(ckpt), "--text", "€"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1

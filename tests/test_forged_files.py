"""Forged files of every kind: every field made the wrong type, wrong length, out of range, non-finite,
deeply nested or missing, and the entry points that read it run on each (issue 36).

The property, for every forgery: the reader either takes the file (the change was harmless: an optional
field dropped) or refuses it with one ToolkitError naming the file - never another exception, never a hang.
For the fields a wrong value would make silently wrong (schema, model config, weights, vocabulary,
encoding, the run's numbers, a corpus's counts and ids), refusal is required. The cases are in-process
calls (load_checkpoint, ResidualGPT.from_checkpoint, read_meta, load_hooked, load_bridge, RunDir reads,
load_bpe_corpus); a few run `python -m interp.sample` as a user would. test_case_count prints how many
cases the generator made.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import run_module
from majors import TL4, tl3_only

from interp.config.model_config import ModelConfig
from interp.errors import ToolkitError
from interp.files.checkpoint import HASH_KEY, content_hash, load_checkpoint, save_checkpoint
from interp.model.gpt import ResidualGPT

CFG = ModelConfig(n_layers=2, d_model=8, n_heads=2, n_ctx=8, d_vocab=5)
VOCAB = list("abcde")
DEEP = 100  # past interp.files.checks.MAX_DEPTH


def deep(n: int = DEEP) -> list:
    out: list = []
    for _ in range(n):
        out = [out]
    return out


def mutations(value: Any) -> Iterator[tuple[str, Any]]:
    """What a forger does to one field: another type, out of range, non-finite, another length, deep nesting."""
    if isinstance(value, bool):
        yield "int", int(value) + 2
        yield "str", "yes"
    elif isinstance(value, int):
        yield "str", str(value)
        yield "float", value + 0.5
        yield "negative", -value - 1
        yield "huge", 2**31
        yield "bool", True
    elif isinstance(value, float):
        yield "nan", math.nan
        yield "inf", math.inf
        yield "str", str(value)
    elif isinstance(value, str):
        yield "int", 7
        yield "other", value + "?"
        yield "list", [value]
    elif isinstance(value, (list, tuple)):
        yield "shorter", list(value)[:-1]
        yield "longer", [*value, value[0] if value else 0]
        yield "ints", list(range(len(value)))
        yield "dict", {"0": value}
    elif isinstance(value, dict):
        yield "list", list(value.values())
        yield "int keys", {i: v for i, v in enumerate(value.values())}
        yield "mixed keys", {**value, 3: "x"}
    elif isinstance(value, torch.Tensor):
        yield "list", value.tolist() if value.numel() < 50 else [1.0]
        yield "wrong shape", torch.zeros(3, 3)
        yield "int dtype", value.to(torch.int64)
        if value.is_floating_point():
            yield "nan", torch.full_like(value, math.nan)
    yield "deep", deep()
    yield "none", None


def forgeries(
    payload: dict,
    must: Callable[[str], bool],
    skip: tuple[str, ...] = (),
    sample: Callable[[str], bool] = lambda path: True,
) -> Iterator[tuple[str, dict, bool]]:
    """(case id, forged payload, refusal required) for every field of payload (dicts walked, one level of
    lists), each mutation, and each field removed."""

    def fields(obj: dict, prefix: tuple) -> Iterator[tuple]:
        for key, value in obj.items():
            path = (*prefix, key)
            name = ".".join(map(str, path))
            if any(name.startswith(s) for s in skip) or not sample(name):
                continue
            yield path
            if isinstance(value, dict) and value and not all(isinstance(v, torch.Tensor) for v in value.values()):
                yield from fields(value, path)

    def put(obj: dict, path: tuple, value: Any, remove: bool = False) -> dict:
        obj = dict(obj)
        if len(path) == 1:
            if remove:
                obj.pop(path[0])
            else:
                obj[path[0]] = value
            return obj
        obj[path[0]] = put(obj[path[0]], path[1:], value, remove)
        return obj

    def get(obj: dict, path: tuple) -> Any:
        for key in path:
            obj = obj[key]
        return obj

    for path in fields(payload, ()):
        name = ".".join(map(str, path))
        for how, value in mutations(get(payload, path)):
            yield f"{name}:{how}", put(payload, path, value), must(name)
        yield f"{name}:missing", put(payload, path, None, remove=True), must(name)


def rehash(payload: dict) -> dict:
    """The forger recomputes the content hash, so it is the checkers, not the hash, that must catch it."""
    payload = {k: v for k, v in payload.items() if k != HASH_KEY}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        payload[HASH_KEY] = content_hash(payload)
    finally:
        sys.setrecursionlimit(limit)
    return payload


def save(payload: Any, path: Path) -> Path:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # torch.save of a deep nesting recurses (reading it back does not)
    try:
        torch.save(payload, path)
    finally:
        sys.setrecursionlimit(limit)
    return path


class Hang(Exception):
    pass


def bounded(call: Callable[[], Any], seconds: int = 20) -> Any:
    """call() under an alarm: a reader that waits on a FIFO fails the test instead of hanging it."""

    def ring(*_):
        raise Hang(f"no answer within {seconds}s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        return call()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def clean(call: Callable[[], Any], path: Path, required: bool) -> None:
    """call() loads, or raises one ToolkitError naming path; required: it must refuse."""
    try:
        bounded(call)
    except ToolkitError as e:
        assert str(path) in str(e), f"the error does not name {path}: {e}"
        assert "\n" not in str(e).strip(), f"more than one line: {e}"
        return
    assert not required, "a forged field was taken in without a word"


# ------------------------------------------------------------------------------------------ the files


def own_payload() -> dict:
    torch.manual_seed(0)
    return {
        "schema": "residual-gpt/1",
        "model_config": CFG.to_dict(),
        "weights": {k: v.clone() for k, v in ResidualGPT(CFG).state_dict().items()},
        "vocab": list(VOCAB),
        "encoding": "char",
        "step": 10,
        "best": {"val_loss": 1.5, "step": 5},
        "train_config": {"lr": 0.001},
        "data": {"sha256": "0" * 64, "train_tokens": 100},
        "final_val_loss": 1.6,
        "model_init": None,
    }


OWN_MUST = (
    "schema",
    "model_config",
    "weights",
    "vocab",
    "encoding",
    "step",
    "best",
    "data",
    "final_val_loss",
    "train_config",
)
_WEIGHTS_SAMPLED = ("weights.embed.weight", "weights.blocks.1.mlp.in_proj.weight", "weights.ln_final.w")


def _own_must(name: str) -> bool:
    if name.endswith(":missing"):
        return False
    return name.split(".")[0] in OWN_MUST and name not in ("model_config.dropout", "model_config.init_std")


def own_cases() -> list[tuple[str, dict, bool]]:
    cases = []
    for case, payload, must in forgeries(
        own_payload(),
        lambda n: n.split(".")[0] in OWN_MUST,
        sample=lambda n: not n.startswith("weights.") or n in _WEIGHTS_SAMPLED,
    ):
        field, how = case.rsplit(":", 1)
        top = field.split(".")[0]
        required = (
            must
            and how != "missing"
            or (how == "missing" and top in ("schema", "model_config", "weights") and field == top)
        )
        if how == "missing" and top == "weights" and field != top:
            required = True  # a weight the config has, gone
        if how == "none" and field in ("vocab", "encoding", "model_init"):
            required = False  # no vocabulary is a valid state (token ids only)
        if how == "missing" and field in ("vocab", "encoding"):
            required = False
        if field.startswith(("best.", "train_config.", "data.")) or field == "model_init" or how == "huge":
            required = False  # compared with the run asked for on reuse (training.rundir), not read as a number
        if field == "model_config.self_bias" and how in ("inf", "str"):
            required = False  # +inf is a valid self_bias, and "inf" / "0.0" its JSON spelling
        if field in ("model_config.mixer", "model_config.act_fn", "model_config.residual") and how == "other":
            required = True
        cases.append((case, payload, required))
    return cases


def nanogpt_payload() -> tuple[dict, dict]:
    from interp.nanogpt.writer import to_nanogpt

    torch.manual_seed(0)
    model = ResidualGPT(CFG.replace(bias=True))
    payload = to_nanogpt(model)
    meta = {"vocab_size": 5, "itos": dict(enumerate(VOCAB)), "stoi": {c: i for i, c in enumerate(VOCAB)}}
    return payload, meta


def nanogpt_cases() -> list[tuple[str, dict, bool]]:
    payload, _ = nanogpt_payload()
    return [
        (
            c,
            p,
            not c.endswith((":missing", ":none"))
            and c.split(":")[0]
            in (
                "model_args.n_layer",
                "model_args.n_head",
                "model_args.n_embd",
                "model_args.block_size",
                "model_args.vocab_size",
                "model_args",
                "model",
                "model.transformer.wte.weight",
            ),
        )
        for c, p, _ in forgeries(
            payload,
            lambda n: True,
            skip=("config",),
            sample=lambda n: (
                not n.startswith("model.")
                or n in ("model.transformer.wte.weight", "model.transformer.h.1.mlp.c_fc.weight")
            ),
        )
    ]


def meta_cases() -> list[tuple[str, dict, bool]]:
    _, meta = nanogpt_payload()
    refused = ("vocab_size:str", "vocab_size:huge", "stoi:list")
    out = [
        (c, p, c.split(":")[0].startswith("itos") and c != "itos:int keys" or c in refused)
        for c, p, _ in forgeries(meta, lambda n: True)
    ]
    out.append(("itos:mixed key types", {**meta, "itos": {0: "a", "1": "b", 2: "c"}}, True))
    out.append(("itos:ints", {**meta, "itos": dict(enumerate(range(5)))}, True))
    return [(c, p, r and not c.endswith(":missing") or c == "itos:missing") for c, p, r in out]


OWN = own_cases()
NANOGPT = nanogpt_cases()
META = meta_cases()


# ------------------------------------------------------------------------------------------ checkpoints


@pytest.mark.parametrize("case,payload,required", OWN, ids=[c for c, _, _ in OWN])
def test_forged_checkpoint(tmp_path, case, payload, required):
    path = save(rehash(payload), tmp_path / "ckpt.pt")
    clean(lambda: ResidualGPT.from_checkpoint(path).codec.decode([0, 1]), path, required)


def test_checkpoint_nested_five_thousand_levels(tmp_path):
    path = save(rehash({**own_payload(), "extra": deep(5000)}), tmp_path / "ckpt.pt")
    clean(lambda: load_checkpoint(path), path, True)


@pytest.mark.parametrize(
    "field,value", [("n_layers", 100_000), ("d_vocab", 2**31), ("d_model", 2**20), ("n_ctx", 2**40)]
)
def test_checkpoint_sizes_pass_the_memory_estimate_before_any_allocation(tmp_path, field, value):
    payload = own_payload()
    payload["model_config"] = {**payload["model_config"], field: value}
    path = save(rehash(payload), tmp_path / "ckpt.pt")
    clean(lambda: ResidualGPT.from_checkpoint(path), path, True)


@pytest.mark.parametrize("case,payload,required", NANOGPT, ids=[c for c, _, _ in NANOGPT])
def test_forged_nanogpt_checkpoint(tmp_path, case, payload, required):
    path = save(payload, tmp_path / "ckpt.pt")
    clean(lambda: ResidualGPT.from_checkpoint(path), path, required)


@pytest.mark.parametrize("case,meta,required", META, ids=[c for c, _, _ in META])
def test_forged_meta_pkl(tmp_path, case, meta, required):
    from interp.files.nanogpt_format import read_meta

    path = tmp_path / "meta.pkl"
    path.write_bytes(pickle.dumps(meta))
    clean(lambda: read_meta(path), path, required)


def test_meta_pkl_as_fifo_and_device_is_refused_by_name(tmp_path):
    from interp.files.nanogpt_format import read_meta

    fifo = tmp_path / "meta.pkl"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        clean(lambda p=path: read_meta(p), path, True)


def test_checkpoint_as_fifo_is_refused_by_name(tmp_path):
    fifo = tmp_path / "ckpt.pt"
    os.mkfifo(fifo)
    clean(lambda: load_checkpoint(fifo), fifo, True)


@pytest.mark.parametrize("case", ["vocab:ints", "model_config.n_layers:huge", "schema:other"])
def test_sample_command_on_a_forged_checkpoint(tmp_path, case):
    payload = next(p for c, p, _ in OWN if c == case)
    path = save(rehash(payload), tmp_path / "ckpt.pt")
    r = run_module("interp.sample", "--ckpt", str(path), "--prompt", "ab", "--max-new-tokens", "2", timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(path) in lines[0], r.stderr


class _Runs:
    def __reduce__(self):
        return (os.system, ("touch ran",))


@pytest.mark.parametrize("protocol", [2, 4])
def test_a_plain_pickle_checkpoint_is_one_error_line(tmp_path, protocol):
    """A ckpt.pt that is a plain pickle (not torch.save's zip): refused by weights_only loading, with no
    torch UserWarning ("Detected pickle protocol 4") before the one error line, and nothing it names runs."""
    path = tmp_path / "ckpt.pt"
    path.write_bytes(pickle.dumps({"schema": "residual-gpt/1", "x": _Runs()}, protocol=protocol))
    r = run_module("interp.sample", "--ckpt", str(path), "--prompt", "ab", "--max-new-tokens", "2", timeout=120)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert str(path) in lines[0] and not (tmp_path / "ran").exists()


def test_sample_command_with_a_fifo_as_meta(tmp_path):
    fifo = tmp_path / "meta.pkl"
    os.mkfifo(fifo)
    payload, _ = nanogpt_payload()
    path = save(payload, tmp_path / "ckpt.pt")
    r = run_module(
        "interp.sample", "--ckpt", str(path), "--meta", str(fifo), "--prompt", "ab", "--max-new-tokens", "2", timeout=60
    )
    assert r.returncode == 2 and "FIFO" in r.stderr and str(fifo) in r.stderr, r.stderr


# ------------------------------------------------------------------------------------------ saved exports


@pytest.fixture(scope="module")
def hooked_record(tmp_path_factory):
    if TL4:
        pytest.skip("save_hooked is TransformerLens 3's")
    from interp.tl.hooked import save_hooked, to_hooked_transformer

    path = tmp_path_factory.mktemp("hooked") / "h.pt"
    ckpt = tmp_path_factory.mktemp("hooked") / "c.pt"
    torch.manual_seed(0)
    save_checkpoint(ckpt, ResidualGPT(CFG), vocab=VOCAB)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        save_hooked(to_hooked_transformer(ckpt), path)
    return torch.load(path, weights_only=True)


HOOKED_FIELDS = (
    "model_config",
    "model_config.n_layers",
    "model_config.d_vocab",
    "model_config.d_model",
    "tl_config",
    "tl_config.dtype",
    "tl_config.n_layers",
    "tl_config.d_model",
    "tl_config.d_vocab",
    "tl_config.n_ctx",
    "vocab",
    "encoding",
    "schema",
)


@tl3_only
@pytest.mark.parametrize("field", HOOKED_FIELDS)
def test_forged_hooked_save(tmp_path, hooked_record, field):
    from interp.tl.hooked import load_hooked
    from interp.tl.hooked.persist import RECORD

    record = hooked_record[RECORD]
    n = 0
    for case, forged, _ in forgeries(record, lambda n: True, sample=lambda name: field.startswith(name)):
        if case.rsplit(":", 1)[0] != field:
            continue
        how = case.rsplit(":", 1)[1]
        required = not (field in ("vocab", "encoding") and how in ("none", "missing"))
        path = save({**hooked_record, RECORD: forged}, tmp_path / f"h{n}.pt")
        clean(lambda p=path: load_hooked(p), path, required)
        n += 1
    assert n


@tl3_only
def test_hooked_save_with_an_unknown_dtype_or_without_model_config(tmp_path, hooked_record):
    from interp.tl.hooked import load_hooked
    from interp.tl.hooked.persist import RECORD

    record = hooked_record[RECORD]
    for i, forged in enumerate(
        [
            {**record, "tl_config": {**record["tl_config"], "dtype": "os.system"}},
            {k: v for k, v in record.items() if k != "model_config"},
        ]
    ):
        path = save({**hooked_record, RECORD: forged}, tmp_path / f"h{i}.pt")
        clean(lambda p=path: load_hooked(p), path, True)


@tl3_only
@pytest.mark.parametrize(
    "change",
    [
        {"bogus_field": 1},
        {"act_fn": "bogus"},
        {"act_fn": "relu"},
        {"positional_embedding_type": "rotary"},
        {"n_devices": 64},
        {"normalization_type": None},
        {"normalization_type": "RMS"},
        {"eps": 1},
        {"device": "bogus"},
    ],
    ids=str,
)
def test_hooked_save_with_a_forged_tl_config_is_refused_by_field(tmp_path, hooked_record, change):
    """load_hooked builds from the export of the model_config, and a saved tl_config that differs from it is
    refused naming the field (never HookedTransformerConfig's TypeError / AssertionError / AttributeError)."""
    from interp.tl.hooked import load_hooked
    from interp.tl.hooked.persist import RECORD

    record = hooked_record[RECORD]
    forged = {**record, "tl_config": {**record["tl_config"], **change}}
    path = save({**hooked_record, RECORD: forged}, tmp_path / "h.pt")
    with pytest.raises(ToolkitError, match=rf"tl_config\.{next(iter(change))}"):
        bounded(lambda: load_hooked(path))


@tl3_only
def test_hooked_save_missing_tl_config_fields_loads_the_export(tmp_path, hooked_record):
    """A field left out is the export's own (load_hooked never builds from the file's tl_config)."""
    from interp.tl.hooked import load_hooked
    from interp.tl.hooked.persist import RECORD

    record = hooked_record[RECORD]
    tl = {k: v for k, v in record["tl_config"].items() if k not in ("act_fn", "n_devices", "model_name")}
    path = save({**hooked_record, RECORD: {**record, "tl_config": tl}}, tmp_path / "h.pt")
    hooked = load_hooked(path)
    assert hooked.cfg.act_fn == "gelu" and hooked.cfg.n_devices == 1


def _with_non_finite(weights: dict, value: float) -> dict:
    name = next(k for k, v in weights.items() if v.is_floating_point() and v.numel() > 1)
    bad = weights[name].clone()
    bad.view(-1)[1] = value
    return {**weights, name: bad}


@tl3_only
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_hooked_save_with_non_finite_weights_is_refused(tmp_path, hooked_record, value):
    """The finite check own checkpoints and nanoGPT imports have (interp.files.checks.checkpoint_file.check_finite)
    runs on save_hooked files too."""
    from interp.tl.hooked import load_hooked
    from interp.tl.hooked.persist import RECORD

    tensors = {k: v for k, v in hooked_record.items() if k != RECORD}
    path = save({**_with_non_finite(tensors, value), RECORD: hooked_record[RECORD]}, tmp_path / "h.pt")
    with pytest.raises(ToolkitError, match="non-finite weights"):
        load_hooked(path)


def bridge_payload() -> dict:
    from interp.tl.saved import BRIDGE_SCHEMA

    torch.manual_seed(0)
    return {
        "schema": BRIDGE_SCHEMA,
        "model_config": CFG.to_dict(),
        "state_dict": {k: v.clone() for k, v in ResidualGPT(CFG).state_dict().items()},
        "vocab": list(VOCAB),
        "encoding": None,
    }


def test_forged_bridge_saves_are_checked_before_the_bridge_is_built():
    """The checker load_bridge runs (interp.tl.saved_file.check_bridge), on either major (load_bridge checks
    the schema itself, before)."""
    from interp.files.checks import Bad
    from interp.tl.saved_file import check_bridge

    n = 0
    weight = "state_dict.embed.weight"
    for case, forged, _ in forgeries(
        bridge_payload(), lambda n: True, sample=lambda n: not n.startswith("state_dict.") or n == weight
    ):
        field, how = case.rsplit(":", 1)
        harmless = (
            (field in ("vocab", "encoding") and how in ("none", "missing"))
            or (field in ("model_config.dropout", "model_config.init_std") and how == "missing")
            or (field == "model_config.self_bias" and how in ("inf", "str"))
        )
        try:
            check_bridge(forged)
        except Bad:
            n += 1
            continue
        assert harmless or field == "schema" or how == "missing" and field.startswith("model_config."), case
    assert n > 50


@pytest.mark.skipif(not TL4, reason="load_bridge is TransformerLens 4's")
def test_load_bridge_refuses_a_forged_save(tmp_path):
    from interp.tl.bridge import load_bridge

    for i, forged in enumerate(
        [
            {**bridge_payload(), "vocab": [1, 2, 3, 4, 5]},
            {k: v for k, v in bridge_payload().items() if k != "model_config"},
            {**bridge_payload(), "state_dict": _with_non_finite(bridge_payload()["state_dict"], math.nan)},
            {**bridge_payload(), "state_dict": _with_non_finite(bridge_payload()["state_dict"], math.inf)},
        ]
    ):
        path = save(forged, tmp_path / f"b{i}.pt")
        clean(lambda p=path: load_bridge(p), path, True)


def test_bridge_save_with_non_finite_weights_is_refused_by_its_checker():
    from interp.files.checks import Bad
    from interp.tl.saved_file import check_bridge

    for value in (math.nan, math.inf, -math.inf):
        payload = {**bridge_payload(), "state_dict": _with_non_finite(bridge_payload()["state_dict"], value)}
        with pytest.raises(Bad, match="non-finite weights"):
            check_bridge(payload)


# ------------------------------------------------------------------------------------------ run directories

FINAL = {
    "final_val_loss": 1.5,
    "best_val_loss": 1.4,
    "best_step": 5,
    "steps": 10,
    "wall_time_s": 2.0,
    "tokens_per_s": 100.0,
    "ckpt_sha256": "a" * 64,
}
CONFIG = {
    "model": CFG.to_dict(),
    "train": {"lr": 0.001},
    "model_init": None,
    "data": {
        "corpus": "synthetic",
        "encoding": "char",
        "train_tokens": 100,
        "val_tokens": 10,
        "sha256": "0" * 64,
        "vocab_sha256": "1" * 64,
    },
    "meta": {},
}
FINAL_CASES = list(forgeries(FINAL, lambda n: True))
CONFIG_CASES = list(forgeries(CONFIG, lambda n: True, skip=("model.", "train.")))


def _json(obj: Any) -> str:
    return json.dumps(obj, default=str).replace("NaN", '"nan"').replace("Infinity", '"inf"')


@pytest.mark.parametrize("case,final,_", FINAL_CASES, ids=[c for c, _, _ in FINAL_CASES])
def test_forged_final_json(tmp_path, case, final, _):
    from training.rundir import RunDir

    run = RunDir(tmp_path)
    run.final.write_text(_json(final))
    field, how = case.rsplit(":", 1)
    required = field != "ckpt_sha256" and not (field == "best_step" and how == "none") and how != "huge"
    if field == "ckpt_sha256":
        required = how not in ("missing", "none", "other")
    clean(run.load, run.final, required)


@pytest.mark.parametrize("case,config,_", CONFIG_CASES, ids=[c for c, _, _ in CONFIG_CASES])
def test_forged_config_json(tmp_path, case, config, _):
    from training.rundir import RunDir

    run = RunDir(tmp_path)
    run.config.write_text(_json(config))
    field, how = case.rsplit(":", 1)
    required = (
        how in ("deep", "list", "int", "ints")
        and field.startswith(("data", "model", "train", "meta"))
        and field not in ("data.corpus", "data.encoding", "data.vocab_sha256")
        or field == "model_init"
        and how == "int"
    )
    clean(run.read_config, run.config, required and how != "missing")


@pytest.mark.parametrize(
    "log,record",
    [
        ("probes", {"step": 10, "probe": [1, 2]}),
        ("probes", {"step": 10, "probe": {"a": 1}}),
        ("probes", {"step": "10", "probe": "attention"}),
        ("probes", {"step": -1, "probe": "attention"}),
        ("probes", {"step": 10, "probe": "attention", "alpha_tt": deep()}),
        ("metrics", {"step": [10], "val_loss": 1.0}),
        ("metrics", {"step": 10.5, "train_loss": 1.0}),
        ("metrics", {"step": 10, "val_loss": "1.5"}),
        ("metrics", {"step": 10, "train_loss": True}),
        ("metrics", {"step": 10, "lr": deep()}),
    ],
    ids=str,
)
def test_forged_log_records_are_refused_naming_the_file(tmp_path, log, record):
    """metrics.jsonl's and probes.jsonl's records are checked where they are read (RunDir.load, the reuse of a
    finished run): a probe named by a list was a TypeError (unhashable type) in RunDir.load."""
    from training.rundir import RunDir

    run = RunDir(tmp_path)
    run.final.write_text(_json(FINAL))
    good = {"step": 0, "probe": "attention"} if log == "probes" else {"step": 0, "val_loss": 2.0}
    path = run.probes if log == "probes" else run.metrics
    path.write_text(_json(good) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(ToolkitError, match=r"record 2"):
        bounded(run.load)
    clean(run.load, path, True)


def test_run_json_as_fifo_is_refused_by_name(tmp_path):
    from training.rundir import RunDir

    run = RunDir(tmp_path)
    os.mkfifo(run.config)
    os.mkfifo(run.final)
    clean(run.read_config, run.config, True)
    clean(run.load, run.final, True)


# ------------------------------------------------------------------------------------------ corpora

META_JSON = {"name": "bpe", "encoding": "gpt2", "train_tokens": 64, "val_tokens": 16}
CORPUS_CASES = list(forgeries(META_JSON, lambda n: True))


def _corpus(tmp_path: Path, meta: dict, train: np.ndarray | None = None) -> Path:
    directory = tmp_path / "corpus"
    directory.mkdir()
    (directory / "meta.json").write_text(_json(meta))
    (train if train is not None else np.arange(64, dtype=np.uint16)).tofile(directory / "train.bin")
    np.arange(16, dtype=np.uint16).tofile(directory / "val.bin")
    return directory


@pytest.mark.parametrize("case,meta,_", CORPUS_CASES, ids=[c for c, _, _ in CORPUS_CASES])
def test_forged_corpus_meta_json(tmp_path, data, case, meta, _):
    from training.data import load_bpe_corpus

    directory = _corpus(tmp_path, meta)
    field, how = case.rsplit(":", 1)
    required = field != "name" or how in ("int", "list", "deep")
    if not required and not (data / "gpt2" / "encoder.json").is_file():
        pytest.skip("a valid corpus loads the GPT-2 BPE: needs ../shared/data/gpt2 (offline here)")
    # a count that does not fit the files is refused naming the file it does not fit: the directory is named
    clean(lambda: load_bpe_corpus(directory), directory, required and not (field == "name" and how == "missing"))


def test_corpus_meta_json_saying_1e999_tokens(tmp_path, data):
    from training.data import load_bpe_corpus

    directory = _corpus(tmp_path, META_JSON)
    (directory / "meta.json").write_text('{"encoding": "gpt2", "train_tokens": 1e999, "val_tokens": 16}')
    clean(lambda: load_bpe_corpus(directory), directory / "meta.json", True)


def test_corpus_token_id_past_the_vocabulary(tmp_path, data):
    from training.data import load_bpe_corpus

    train = np.arange(64, dtype=np.uint16)
    train[40] = 60000
    directory = _corpus(tmp_path, META_JSON, train)
    clean(lambda: load_bpe_corpus(directory), directory / "train.bin", True)


def test_corpus_files_as_fifo_are_refused_by_name(tmp_path, data):
    from training.data import load_bpe_corpus

    directory = _corpus(tmp_path, META_JSON)
    (directory / "val.bin").unlink()
    os.mkfifo(directory / "val.bin")
    clean(lambda: load_bpe_corpus(directory), directory / "val.bin", True)
    (directory / "meta.json").unlink()
    os.mkfifo(directory / "meta.json")
    clean(lambda: load_bpe_corpus(directory), directory / "meta.json", True)


@pytest.mark.parametrize("kind", ["FIFO", "directory"])
def test_corpus_meta_json_not_a_regular_file_is_named_by_load_corpus(tmp_path, data, kind):
    """load_corpus('bpe', dir) names what meta.json is (it said "half-prepared corpus (no meta.json)")."""
    from training.data import load_corpus

    directory = _corpus(tmp_path, META_JSON)
    (directory / "meta.json").unlink()
    os.mkfifo(directory / "meta.json") if kind == "FIFO" else (directory / "meta.json").mkdir()
    with pytest.raises(ToolkitError, match=rf"meta\.json is a {kind}, not a regular file"):
        bounded(lambda: load_corpus("bpe", directory))


# ------------------------------------------------------------------------------------------ data identity


def test_same_token_ids_in_another_vocabulary_are_other_data():
    """The data identity covers what the ids mean: a different text with the same ids is not the same run."""
    from training.corpus import Corpus, data_provenance

    ids = np.array([0, 1, 2, 1, 0], dtype=np.uint16)

    def corpus(chars):
        return Corpus("c", 3, ids, ids, encode=None, decode=None, vocab=list(chars), encoding="char")

    a, b = data_provenance(corpus("abc")), data_provenance(corpus("xyz"))
    assert a["sha256"] == b["sha256"] and a["vocab_sha256"] != b["vocab_sha256"]


def test_a_run_of_another_vocabulary_is_refused(tmp_path):
    from training.rundir import RunDir, RunDirError

    run = RunDir(tmp_path)
    run.config.write_text(json.dumps(CONFIG))
    record = json.loads(json.dumps(CONFIG))
    record["data"]["vocab_sha256"] = "2" * 64
    with pytest.raises(RunDirError, match="another vocabulary"):
        run.check(record)


def test_case_count(capsys):
    n = len(OWN) + len(NANOGPT) + len(META) + len(FINAL_CASES) + len(CONFIG_CASES) + len(CORPUS_CASES)
    with capsys.disabled():
        print(
            f"\nforged-file generator: {n} parametrized forgeries (checkpoint {len(OWN)}, nanoGPT {len(NANOGPT)}, "
            f"meta.pkl {len(META)}, final.json {len(FINAL_CASES)}, config.json {len(CONFIG_CASES)}, "
            f"corpus meta.json {len(CORPUS_CASES)}), plus saved-export and fixed cases"
        )
    assert n > 300


TENSOR_FORGERIES = {
    "float64 past float32's range": lambda w: w.double() * 1e300,
    "a finite float32 weight past any trained model's": lambda w: torch.full_like(w, 3e38),
    "a float8 tensor": lambda w: w.to(torch.float8_e4m3fn),
    "a meta tensor": lambda w: torch.empty(w.shape, device="meta"),
    "a sparse tensor": lambda w: w.to_sparse(),
    "a complex tensor": lambda w: w.to(torch.complex64),
}


@pytest.mark.parametrize("forgery", list(TENSOR_FORGERIES))
def test_a_weight_that_is_no_plain_finite_float32_tensor_is_refused(forgery, tmp_path):
    """float64 values that become inf in the float32 model, tensors with no data (meta), sparse and complex ones:
    one error naming the file (the float64 case loaded with inf weights and plotted NaN; meta and sparse ones were
    a traceback from the content hash)."""
    payload = own_payload()
    name = "blocks.0.mlp.in_proj.weight"
    payload["weights"][name] = TENSOR_FORGERIES[forgery](payload["weights"][name])
    path = tmp_path / "ckpt.pt"
    torch.save(payload, path)  # the hash left out: the checks run before any hash walks the data
    clean(lambda: load_checkpoint(path), path, required=True)
    if forgery.startswith(("float64", "a finite")):
        torch.save(rehash(payload), path)  # and with a forger's recomputed hash
        clean(lambda: load_checkpoint(path), path, required=True)


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"final_val_loss": 0.5, "final_val_loss": 2.0}', "appears twice"),  # json keeps the last one
        ('{"val_fraction": 1e999}', "past a float's range"),  # json reads it as inf
        ('{"a": NaN}', "not a JSON number"),
    ],
)
def test_json_no_writer_here_writes_is_refused_naming_the_file(text, words, tmp_path):
    """A key twice in one object, a number past a float's range, NaN: every JSON reader (interp.files.io.read_json,
    under config.json, final.json, a corpus's meta.json) refuses it as damage naming the file."""
    from interp.files.io import DataFileError, read_json

    path = tmp_path / "final.json"
    path.write_text(text)
    with pytest.raises(DataFileError) as e:
        read_json(path)
    assert str(path) in str(e.value) and words in str(e.value)


@tl3_only
@pytest.mark.parametrize("value", [3e38, -1e20, 1e9])
def test_hooked_save_with_weights_that_overflow_the_forward_is_refused(tmp_path, hooked_record, value):
    """A legal float32 file whose weights are finite but past any trained model's (the forward computes NaN)."""
    from interp.tl.hooked import load_hooked
    from interp.tl.hooked.persist import RECORD

    tensors = {k: v for k, v in hooked_record.items() if k != RECORD}
    path = save({**_with_non_finite(tensors, value), RECORD: hooked_record[RECORD]}, tmp_path / "h.pt")
    with pytest.raises(ToolkitError, match="past 1e"):
        load_hooked(path)


def test_bridge_save_with_a_weight_past_any_trained_models_is_refused_by_its_checker():
    from interp.files.checks import Bad
    from interp.tl.saved_file import check_bridge

    payload = {**bridge_payload(), "state_dict": _with_non_finite(bridge_payload()["state_dict"], 3e38)}
    with pytest.raises(Bad, match="magnitude 3e"):
        check_bridge(payload)


@tl3_only
@pytest.mark.parametrize(
    "mask",
    [
        lambda n: torch.ones(n, n, dtype=torch.bool),  # sees the future
        lambda n: torch.ones(n, n, dtype=torch.bool).tril().float(),
        lambda n: torch.ones(n + 1, n + 1, dtype=torch.bool).tril(),
        lambda n: torch.zeros(1, dtype=torch.bool),
    ],
)
def test_hooked_save_with_a_forged_causal_mask_is_refused(tmp_path, hooked_record, mask):
    """TransformerLens 3.9 builds its causal mask per forward and leaves the buffer empty; a file's buffer is
    still the file's, so one that is neither empty nor causal is named (it was accepted)."""
    from interp.tl.hooked import load_hooked

    name = next(k for k in hooked_record if k.endswith(".attn.mask"))
    forged = {**hooked_record, name: mask(CFG.n_ctx)[None]}
    path = save(forged, tmp_path / "h.pt")
    with pytest.raises(ToolkitError, match="causal mask"):
        load_hooked(path)
    causal = {**hooked_record, name: torch.ones(CFG.n_ctx, CFG.n_ctx, dtype=torch.bool).tril()[None]}
    load_hooked(save(causal, tmp_path / "ok.pt"))  # what TransformerLens before 3.9 saved


def test_a_float8_weight_in_an_export_or_a_nanogpt_file_is_refused_by_its_checker():
    """float8 has no abs or max on CPU: the finite check itself was a NotImplementedError traceback."""
    from interp.files.checks import Bad
    from interp.tl.saved_file import check_bridge

    weights = bridge_payload()["state_dict"]
    name = next(k for k, v in weights.items() if v.dim() == 2)
    payload = {**bridge_payload(), "state_dict": {**weights, name: weights[name].to(torch.float8_e5m2)}}
    with pytest.raises(Bad, match="float8_e5m2"):
        check_bridge(payload)


def test_a_runtime_gain_that_overflows_the_forward_is_refused(tmp_path):
    """runtime_gain 1e30 from a file: sample printed argmax-of-NaN text, plot_attention wrote NaN (exit 0)."""
    payload = own_payload()
    payload["model_config"]["runtime_gain"] = 1e30
    path = save(rehash(payload), tmp_path / "ckpt.pt")
    with pytest.raises(ToolkitError, match="runtime_gain must be in"):
        load_checkpoint(path)


def test_a_meta_pkl_naming_a_global_is_refused_naming_the_file(tmp_path):
    """A meta.pkl that refers to os.system: never run, and the error names the file (it named only meta.pkl)."""
    from interp.files.nanogpt_format import read_meta

    class Evil:
        def __reduce__(self):
            return (os.system, ("touch ran",))

    path = tmp_path / "forged-meta.pkl"
    path.write_bytes(pickle.dumps({"vocab_size": 1, "itos": {0: Evil()}, "stoi": {}}))
    with pytest.raises(ToolkitError, match=f"{path}: meta.pkl refers to .*system"):
        read_meta(path)
    assert not (tmp_path / "ran").exists()


@tl3_only
def test_a_hooked_save_from_a_device_this_machine_lacks_is_named(tmp_path, hooked_record):
    """tl_config.device 'cuda:7' on a CPU machine: one error naming the file and how to load it here (it was a raw
    AssertionError from torch); device='cpu' loads it."""
    from interp.tl.hooked import load_hooked
    from interp.tl.hooked.persist import RECORD

    record = hooked_record[RECORD]
    path = save(
        {**hooked_record, RECORD: {**record, "tl_config": {**record["tl_config"], "device": "cuda:7"}}},
        tmp_path / "h.pt",
    )
    with pytest.raises(ToolkitError, match=r"tl_config.device: device 'cuda:7' asked for.*device='cpu'"):
        load_hooked(path)
    assert load_hooked(path, device="cpu").cfg.device == "cpu"


def test_a_nanogpt_weight_held_with_and_without_the_compile_prefix_is_refused(tmp_path):
    """Two copies of one weight (one under _orig_mod.): the prefixed one silently won and changed the samples."""
    payload, _ = nanogpt_payload()
    name = next(k for k in payload["model"] if k.endswith("mlp.c_fc.weight"))
    payload["model"]["_orig_mod." + name] = payload["model"][name] * 100
    path = save(payload, tmp_path / "ckpt.pt")
    clean(lambda: ResidualGPT.from_checkpoint(path), path, required=True)
    with pytest.raises(ToolkitError, match="_orig_mod"):
        ResidualGPT.from_checkpoint(path)
    compiled = {"_orig_mod." + k: v for k, v in nanogpt_payload()[0]["model"].items()}  # all prefixed: one answer
    ResidualGPT.from_checkpoint(save({**nanogpt_payload()[0], "model": compiled}, tmp_path / "compiled.pt"))


def test_a_json_file_past_any_this_toolkit_writes_is_refused_before_it_is_parsed(tmp_path):
    """A 1 GiB (sparse) final.json was parsed for 13 s and 2.5 GB of memory before being refused."""
    from interp.files.io import DataFileError, read_json

    path = tmp_path / "final.json"
    with open(path, "wb") as f:
        f.truncate(2**30)
    with pytest.raises(DataFileError, match=r"final.json is 1024 MiB, past the 256 MiB"):
        read_json(path)


def _chained(weights: dict, value: float = 5e7) -> dict:
    """Block 0's second layer norm and MLP at +-value: each weight under check_finite's bound, but the residual
    they write (~value**3) overflows the next layer norm's variance."""
    out = dict(weights)
    for k, v in weights.items():
        if k.startswith("blocks.0.") and ("ln2.w" in k or ".mlp." in k) and v.is_floating_point():
            out[k] = torch.where(v < 0, -value, value).to(v.dtype)
    assert len(out) == len(weights) and any(not torch.equal(out[k], weights[k]) for k in weights)
    return out


def test_weights_in_range_whose_forward_overflows_are_refused_by_every_loader(tmp_path):
    """Re-audit of issue 36: three chained weights under 1e8 gave NaN logits from a file every check passed (sample
    printed argmax-of-NaN text). Each loader runs one forward on a probe sequence once the model is built."""
    payload = own_payload()
    payload["weights"] = _chained(payload["weights"])
    path = save(rehash(payload), tmp_path / "ckpt.pt")
    load_checkpoint(path)  # the file itself is in range: it is the model that overflows
    clean(lambda: ResidualGPT.from_checkpoint(path), path, True)
    with pytest.raises(ToolkitError, match="forward overflows"):
        ResidualGPT.from_checkpoint(path)
    r = run_module("interp.sample", "--ckpt", str(path), "--prompt", "ab", "--max-new-tokens", "2", timeout=120)
    assert r.returncode == 2 and "forward overflows" in r.stderr and r.stdout == "", r.stderr
    untouched = own_payload()
    ResidualGPT.from_checkpoint(save(rehash(untouched), tmp_path / "ok.pt"))  # a normal model still loads


@pytest.mark.skipif(not TL4, reason="load_bridge is TransformerLens 4's")
def test_a_bridge_save_whose_forward_overflows_is_refused(tmp_path):
    from interp.tl.bridge import load_bridge

    path = save({**bridge_payload(), "state_dict": _chained(bridge_payload()["state_dict"])}, tmp_path / "b.pt")
    clean(lambda: load_bridge(path), path, True)


@tl3_only
@pytest.mark.parametrize("name", ["blocks.0.ln1.b", "blocks.1.attn.b_Q", "blocks.0.mlp.b_out", "unembed.b_U"])
def test_a_bias_in_a_hooked_save_of_a_model_without_biases_is_refused(tmp_path, name):
    """Re-audit of issue 36: a save_hooked file of a bias=False model with a non-zero TransformerLens bias loaded
    as a model its config says it is not (TransformerLens has the bias slots; the export writes zeros)."""
    import dataclasses
    import warnings

    from interp.tl.hooked import load_hooked, save_hooked, to_hooked_transformer

    torch.manual_seed(0)
    save_checkpoint(tmp_path / "c.pt", ResidualGPT(dataclasses.replace(CFG, bias=False)), vocab=VOCAB)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = {"fold_ln": False, "center_writing_weights": False, "center_unembed": False}  # ln1.b kept
        save_hooked(to_hooked_transformer(tmp_path / "c.pt", **raw), tmp_path / "h.pt")
    record = torch.load(tmp_path / "h.pt", weights_only=True)
    assert load_hooked(tmp_path / "h.pt") is not None  # as written: loads
    forged = {**record, name: record[name] + 0.5}
    path = save(forged, tmp_path / "forged.pt")
    clean(lambda: load_hooked(path), path, True)
    with pytest.raises(ToolkitError, match="bias=False"):
        load_hooked(path)


def test_the_forward_probe_covers_every_position():
    """Re-audit: the probe ran positions 0-15 only, so weights overflowing from position 16 on (a forged position
    embedding) loaded and sampled NaN text with exit 0. It now runs two sequences of n_ctx tokens."""
    from interp.files.checks import Bad
    from interp.files.checks.checkpoint_file import check_forward_finite

    def late_overflow(tokens):  # finite up to position 15, NaN after: what the audit's forged file computed
        logits = torch.zeros(*tokens.shape, 5)
        logits[:, 16:] = math.nan
        return logits

    with pytest.raises(Bad, match="forward overflows"):
        check_forward_finite(late_overflow, 5, 32)
    check_forward_finite(late_overflow, 5, 16)  # a 16-token model never reaches position 16


def test_generate_refuses_logits_that_are_not_finite_and_sample_names_the_file(tmp_path, monkeypatch):
    """An input the load-time probe did not try may still overflow: generate stops at the first non-finite logits
    (an argmax over NaN printed newlines with exit 0), and interp.sample names the checkpoint."""
    from interp import sample

    model = ResidualGPT(CFG).eval()
    with torch.no_grad():
        model.unembed.weight[1] = math.nan  # past any loader, as a notebook could
    with pytest.raises(ToolkitError, match="not finite"):
        model.generate(torch.tensor([[0, 1]]), 3, temperature=0)
    path = save(rehash(own_payload()), tmp_path / "ckpt.pt")
    monkeypatch.setattr(ResidualGPT, "generate", model.generate)
    assert sample.main(["--ckpt", str(path), "--prompt", "ab", "--max-new-tokens", "2"]) == 2

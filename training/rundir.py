"""The run directory: one home for its layout, its name and reading it back (docs/DESIGN.md contract 3).

    <out>/<preset>/<slug(variant)>/seed<k>/
        config.json     what was trained (model, train, model_init, meta)  - written first
        metrics.jsonl   one record per logged step
        probes.jsonl    probe records {"step", "probe", ...}
        ckpt.pt         the last checkpoint (weights, optimizer, samplers, RNG)
        final.json      the final record - written last: its presence means "finished"

The trainer CLI and every experiment name directories by the same rule, so a
run trained one way is found and reused by the other.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interp.errors import ConfigError
from interp.io import DataFileError, read_json, read_jsonl

# The part of a config that decides whether a run directory holds "the same run".
IDENTITY_KEYS = ("model", "train", "model_init")
# What every final.json holds (training.trainer's final record) and the experiments read.
FINAL_KEYS = ("final_val_loss", "best_val_loss", "best_step", "steps", "wall_time_s", "tokens_per_s")


def _field_defaults(key: str) -> dict[str, Any]:
    from interp.config import ModelConfig
    from training.presets import TrainConfig

    cls = {"model": ModelConfig, "train": TrainConfig}[key]
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


def _number(value: Any) -> float:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else math.inf


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The identity keys in which two config records differ.

    A model or train field missing from the old record counts as its default, so a field
    added to the code later (with a default) does not orphan runs trained before it existed.
    With fixed validation batches, an old run that evaluated from earlier on (a smaller
    eval_from) is the same run: where it evaluates changes no weight and no loss (contract 6),
    and it holds every evaluation the new config asks for. One that started evaluating later
    lacks some, and differs; so does any with random validation batches, whose draws depend
    on how many evaluations came before.
    """
    differ = []
    for key in IDENTITY_KEYS:
        a, b = _identity(old, new, key)
        if a != b:
            differ.append(key)
    return differ


def differing_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What config_diff found, field by field: "train.lr 0.002 -> 1.0" (for an error message)."""
    out = []
    for key in IDENTITY_KEYS:
        a, b = _identity(old, new, key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{f} {a.get(f)!r} -> {b.get(f)!r}" for f in sorted(set(a) | set(b)) if a.get(f) != b.get(f)]
        else:
            out.append(f"{key} {a!r} -> {b!r}")
    return out


def _identity(old: dict[str, Any], new: dict[str, Any], key: str) -> tuple[Any, Any]:
    """The two sides of one identity key as config_diff compares them (see there)."""
    a, b = old.get(key), new.get(key)
    if key not in ("model", "train") or not (isinstance(a, dict) and isinstance(b, dict)):
        return a, b
    defaults = _field_defaults(key)
    a, b = {**defaults, **a}, {**defaults, **b}
    fixed = a["val_mode"] == b["val_mode"] == "fixed" if key == "train" else False
    if fixed and _number(a["eval_from"]) <= _number(b["eval_from"]):
        a = {**a, "eval_from": b["eval_from"]}
    return a, b


def slug(name: str) -> str:
    """A variant name as one safe path component: "attn_only + uniform" -> "attn_only_uniform"."""
    text = re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).strip("_.")
    if not text:
        raise ConfigError(f"variant name {name!r} gives no usable directory name")
    return text


def variant_name(model: dict[str, Any]) -> str:
    """The name of a model configuration's variant, as the experiments spell it.

    residual, then " + " and the routing change: a mixer other than attention, or
    self_bias (+inf "self_only", -inf "no_self", finite "self_bias").
    """
    name = model.get("residual", "full")
    mixer = model.get("mixer", "attention")
    if mixer != "attention":
        name += f" + {mixer}"
    bias = float(model.get("self_bias", 0.0))
    if bias == math.inf:
        name += " + self_only"
    elif bias == -math.inf:
        name += " + no_self"
    elif bias != 0.0:
        name += " + self_bias"
    return name


@dataclass(frozen=True)
class RunDir:
    path: Path

    @classmethod
    def of(cls, out: str | Path, preset: str, variant: str, seed: int) -> RunDir:
        return cls(Path(out) / slug(preset) / slug(variant) / f"seed{int(seed)}")

    config = property(lambda self: self.path / "config.json")
    metrics = property(lambda self: self.path / "metrics.jsonl")
    probes = property(lambda self: self.path / "probes.jsonl")
    ckpt = property(lambda self: self.path / "ckpt.pt")
    final = property(lambda self: self.path / "final.json")
    lock = property(lambda self: self.path / ".lock")

    @property
    def finished(self) -> bool:
        return self.final.is_file()

    def busy(self) -> bool:
        """True while another process holds this directory's lock (is training into it)."""
        if not self.lock.exists():
            return False
        from filelock import FileLock, Timeout

        lock = FileLock(self.lock, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            return True
        lock.release()
        return False

    def read_config(self) -> dict[str, Any] | None:
        if not self.config.exists():
            return None
        config = read_json(self.config)
        if not isinstance(config, dict):
            raise DataFileError(f"{self.config} is damaged (not a JSON object); move it aside to recover")
        return config

    def load(self) -> dict[str, Any]:
        """A finished run as plain data: final record, metric curves, probe records by kind."""
        final = read_json(self.final)
        missing = [k for k in FINAL_KEYS if not isinstance(final, dict) or k not in final]
        if missing:
            raise DataFileError(f"{self.final} is damaged (no {', '.join(missing)}); move the run directory "
                                "aside and train it again")
        metrics = read_jsonl(self.metrics, required=("step",))
        probes: dict[str, list[dict[str, Any]]] = {}
        for record in read_jsonl(self.probes, required=("step", "probe")):
            probes.setdefault(record["probe"], []).append(record)
        val = [(r["step"], r["val_loss"]) for r in metrics if "val_loss" in r]
        train = [(r["step"], r["train_loss"]) for r in metrics if "train_loss" in r]
        return {
            "run_dir": str(self.path),
            "final": final,
            "val_curve": {"steps": [s for s, _ in val], "loss": [v for _, v in val]},
            "train_curve": {"steps": [s for s, _ in train], "loss": [v for _, v in train]},
            "probes": probes,
        }

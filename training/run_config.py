"""What config.json says a run is: the record, when two records are the same run, and the run's name.

config_record is what a run directory's config.json holds; config_diff and differing_fields compare two
of them on IDENTITY_KEYS (a field added later counts as its default); variant_name and slug give the
directory name every experiment and the trainer CLI share (training.rundir.RunDir.of).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import TYPE_CHECKING, Any

from interp.errors import ConfigError

if TYPE_CHECKING:
    from interp.config.model_config import ModelConfig
    from training.corpus import Corpus
    from training.presets import TrainConfig

# The part of a config that decides whether a run directory holds "the same run".
IDENTITY_KEYS = ("model", "train", "model_init")


def _field_defaults(key: str) -> dict[str, Any]:
    from interp.config.model_config import ModelConfig
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
    sides = {key: _identity(old, new, key) for key in IDENTITY_KEYS}
    return [key for key, (a, b) in sides.items() if a != b]


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


def describe(fn) -> str | None:
    """A stable name for a model_init function (recorded in config.json, compared on resume)."""
    if fn is None:
        return None
    if isinstance(fn, functools.partial):
        args = ", ".join([*map(repr, fn.args), *(f"{k}={v!r}" for k, v in sorted(fn.keywords.items()))])
        return f"{describe(fn.func)}({args})"
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def config_record(
    model: ModelConfig, train: TrainConfig, corpus: Corpus, model_init=None, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What config.json holds for a run: the model and training config, model_init, the data, meta."""
    from training.corpus import data_provenance

    return {
        "model": model.to_dict(),
        "train": train.to_dict(),
        "model_init": describe(model_init),
        "data": dict(data_provenance(corpus)),
        "meta": dict(meta or {}),
    }


def cli_labels(preset: str, variant: str, seed: int, logged: dict[str, Any] | None) -> dict[str, Any]:
    """config.json's meta for a run of `python -m training`: {preset, variant, seed}, as an experiment labels its
    runs (experiments.cluster.launch.run_meta), so either reads the other's run as its own.

    logged: the run directory's config.json, if any. One an older trainer wrote says {preset, variant} only (its
    train.seed records the seed): resumed or reused, it keeps those labels, since its checkpoint seals them and
    a resume that sealed others would be refused at the next reuse (training.rundir.RunDir.check_labels). The
    meta labels are no identity key: config_diff never compares them.
    """
    labels = {"preset": preset, "variant": variant, "seed": seed}
    old = (logged or {}).get("meta")
    if old == {"preset": preset, "variant": variant} and ((logged or {}).get("train") or {}).get("seed") == seed:
        return dict(old)
    return labels


def slug(name: str) -> str:
    """A variant name as one safe path component: "attn_only + uniform" -> "attn_only_uniform"."""
    text = re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).strip("_.")
    if not text:
        raise ConfigError(f"variant name {name!r} gives no usable directory name")
    return text


def variant_name(model: dict[str, Any]) -> str:
    """The name of a model configuration's variant, as the experiments spell it.

    residual, then " + " and the routing change: a mixer other than attention, then each
    parameter the mixer declares as " key=value" (its defaults filled in: "full + window
    window=4", whether the 4 was given or not), or self_bias (+inf "self_only", -inf
    "no_self", finite "self_bias").
    """
    name = model.get("residual", "full")
    mixer = model.get("mixer", "attention")
    if mixer != "attention":
        name += f" + {mixer}"
    for key, value in _mixer_params(mixer, model.get("mixer_params") or {}).items():
        name += f" {key}={_spell(value)}"
    bias = float(model.get("self_bias", 0.0))
    return name + {math.inf: " + self_only", -math.inf: " + no_self", 0.0: ""}.get(bias, " + self_bias")


def _mixer_params(mixer: str, given: dict[str, Any]) -> dict[str, Any]:
    """The mixer's parameters as a ModelConfig would hold them (defaults filled), or `given` as it is where
    the mixer is not registered in this process (no config of it can be built here either)."""
    from interp.config.model_config import resolve_mixer_params
    from interp.config.registry import BUILTIN_MIXERS, MIXERS, mixer_spec

    if mixer in BUILTIN_MIXERS and not given:  # the built-ins declare none (interp.config.registry)
        return {}
    if mixer not in MIXERS:
        return dict(given)
    return resolve_mixer_params(mixer_spec(mixer), given)


def _spell(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)  # repr: the shortest exact spelling

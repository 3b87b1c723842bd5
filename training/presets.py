"""Named configurations: plain data, never a code path of their own.

A preset is {"model": ModelConfig fields, "train": TrainConfig fields}; any
field can be overridden (`--set key=value` on the command line).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import math
import re
import typing
from dataclasses import dataclass, field
from typing import Any

from interp.config.model_config import ModelConfig
from interp.errors import ConfigError
from interp.files.gpt2 import GPT2_VOCAB_SIZE
from training.corpus import CORPORA

DTYPES = ("float32", "bfloat16", "auto")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def concrete_dtype(dtype: str, device_type: str) -> str:
    """What dtype="auto" trains in on a device type: bfloat16 autocast on CUDA, float32 elsewhere (a CPU's
    bfloat16 matmuls are no faster than float32 and round more). A concrete dtype is itself."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if device_type == "cuda" else "float32"


@dataclass(frozen=True)
class TrainConfig:
    corpus: str = "shakespeare_char"
    data_path: str | None = None  # file or prepared directory; None: RESIDUAL_DATA_DIR, cache, download
    batch_size: int = 32  # sequences per micro-step, across all ranks
    grad_accum: int = 1
    max_steps: int = 1000
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    lr_schedule: str = "cosine"  # or "constant"
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # 0 disables
    eval_interval: int = 100
    eval_batches: int = 20
    eval_from: float = 0.0  # evaluate only from this fraction of max_steps on (and always at the last step)
    val_mode: str = "fixed"  # "fixed": batches drawn once (seed 99991); "random": fresh ones each eval
    log_interval: int = 10
    ckpt_interval: int = 200
    seed: int = 1337
    device: str = "auto"  # auto: cuda, then mps, then cpu
    dtype: str = "float32"  # "bfloat16": autocast; "auto": bfloat16 on CUDA, float32 elsewhere (concrete_dtype)
    deterministic: bool = True  # torch.use_deterministic_algorithms: contract 5 (same seed, same bits) rests on it
    tf32: bool = True  # float32 matmuls on CUDA in TF32 (torch.backends.cuda.matmul.allow_tf32); no-op elsewhere
    probes: bool = True  # attach the default probes (alpha_tt, gradient flow, norms)
    probe_interval: int = 0  # 0: about 10 probe points per run
    compile: bool = False  # torch.compile the model (training.compile.maybe_compile)
    compile_mode: str = "default"  # torch.compile's mode; "reduce-overhead" captures CUDA graphs (needs compile)

    def __post_init__(self) -> None:
        positive = (
            "batch_size",
            "grad_accum",
            "max_steps",
            "eval_interval",
            "eval_batches",
            "log_interval",
            "ckpt_interval",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)!r}")
        for name in ("warmup_steps", "probe_interval", "seed"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.seed >= 2**63:  # what torch's generators take
            raise ConfigError(f"seed must be < 2**63, got {self.seed!r}")
        for name in ("lr", "min_lr", "weight_decay", "grad_clip"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(f"{name} must be a finite number, got {getattr(self, name)!r}")
        if isinstance(self.eval_from, bool) or not 0 <= self.eval_from <= 1:
            raise ConfigError(f"eval_from is a fraction of max_steps in [0, 1], got {self.eval_from!r}")
        if not (self.lr > 0 and 0 <= self.min_lr <= self.lr):
            raise ConfigError(f"need lr > 0 and 0 <= min_lr <= lr, got lr={self.lr}, min_lr={self.min_lr}")
        choices = {
            "corpus": CORPORA,
            "lr_schedule": ("cosine", "constant"),
            "val_mode": ("fixed", "random"),
            "dtype": DTYPES,
            "compile_mode": COMPILE_MODES,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if not isinstance(self.device, str) or not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", self.device):
            raise ConfigError(f"device must be auto, cpu, cuda[:N] or mps, got {self.device!r}")
        if self.compile_mode != "default" and not self.compile:
            raise ConfigError(f"compile_mode={self.compile_mode} needs compile=true (--set compile=true)")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1 and self.grad_clip >= 0 and self.weight_decay >= 0):
            raise ConfigError("need 0 <= beta1, beta2 < 1, grad_clip >= 0 and weight_decay >= 0")

    def is_eval_step(self, step: int) -> bool:
        """Whether the trainer evaluates (and runs its activation probes' schedule) at this step."""
        # rounded: 0.55 * 200 is 110.00000000000001, and step 110 must count
        first = round(self.eval_from * self.max_steps, 6)
        return step == self.max_steps or (step % self.eval_interval == 0 and step >= first)

    def eval_steps(self) -> EvalSteps:
        """Every step is_eval_step holds for, in order: a lazy sequence (max_steps may be 10**12)."""
        first = round(self.eval_from * self.max_steps, 6)
        start = -(-math.ceil(first) // self.eval_interval) * self.eval_interval  # first multiple >= first
        return EvalSteps(range(start, self.max_steps, self.eval_interval), self.max_steps)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        # run directories written before these fields existed still resume: a default is left out
        for name, default in (("compile", False), ("compile_mode", "default"), ("tf32", True)):
            if d[name] == default:
                del d[name]
        return d


class EvalSteps(collections.abc.Sequence):
    """The evaluation steps: multiples of eval_interval from eval_from on, then max_steps - computed, not listed."""

    def __init__(self, multiples: range, last: int):
        self.multiples, self.last = multiples, last

    def __len__(self) -> int:
        return len(self.multiples) + 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError("evaluation step index out of range")
        i %= n
        return self.last if i == n - 1 else self.multiples[i]

    def __iter__(self):
        yield from self.multiples
        yield self.last

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, (list, EvalSteps)) else NotImplemented

    def __repr__(self) -> str:
        return f"EvalSteps({self.multiples!r} + [{self.last}])"


def _preset(model: dict, **train) -> dict:
    return {"model": model, "train": train}


PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # Seconds on a CPU; checkpoints several times before its last step (kill-and-resume tests).
    "smoke": _preset(
        dict(n_layers=2, n_heads=2, d_model=32, n_ctx=32, dropout=0.0),
        batch_size=8,
        max_steps=40,
        lr=3e-3,
        min_lr=3e-4,
        warmup_steps=5,
        eval_interval=10,
        eval_batches=4,
        log_interval=5,
        ckpt_interval=10,
    ),
    # One cell of a grid of many small models (experiments.phase_diagram, whose docstring has the timing): on
    # TinyShakespeare characters `full` learns context within its 600 steps and deep ffn_only sits on the floor.
    # Evaluated and probed every 25 steps from step 0, so the first hundred steps are seen.
    "phase-cell": _preset(
        dict(n_layers=2, n_heads=4, d_model=64, n_ctx=64, dropout=0.0),
        batch_size=16,
        max_steps=600,
        lr=2e-3,
        min_lr=2e-4,
        warmup_steps=50,
        eval_interval=25,
        eval_batches=8,
        log_interval=10,
        ckpt_interval=300,
        probe_interval=25,
    ),
    # About 1.5 min per run on 2 CPU cores. Sized by measurement (docs/RESULTS.md): at the
    # cost of 450 steps of batch 32, 900 steps of batch 16 at twice the lr settle the routing test's
    # slowest variant (ffn_only + self_bias) furthest. 32 x 16 validation sequences, as before, but only
    # over the second half, which is all the routing test reads: one evaluation costs ~11 steps at batch
    # 16, and the first half's five came to about 5% of the run (docs/training.md).
    "cpu-quick": _preset(
        dict(n_layers=4, n_heads=4, d_model=128, n_ctx=128, dropout=0.0),
        batch_size=16,
        max_steps=900,
        lr=2e-3,
        min_lr=2e-4,
        warmup_steps=100,
        eval_interval=100,
        eval_batches=32,
        eval_from=0.5,
        log_interval=20,
        ckpt_interval=300,
    ),
    # The paper's Table 1 (ResidualGPT, 10M, TinyShakespeare characters).
    "paper-10m": _preset(
        dict(n_layers=6, n_heads=6, d_model=384, n_ctx=256, dropout=0.2, bias=False, tie_embeddings=True),
        batch_size=64,
        max_steps=3000,
        lr=3e-4,
        min_lr=3e-5,
        warmup_steps=100,
        weight_decay=0.1,
        beta1=0.9,
        beta2=0.95,
        grad_clip=1.0,
        eval_interval=100,
        eval_batches=50,
        log_interval=10,
        ckpt_interval=500,
        dtype="auto",  # bfloat16 autocast on CUDA (the paper's GPU runs), float32 on a CPU
    ),
    # The paper's 124M runs (OpenWebText, GPT-2 BPE), bf16 autocast on CUDA.
    "paper-124m": _preset(
        dict(n_layers=12, n_heads=12, d_model=768, n_ctx=1024, d_vocab=GPT2_VOCAB_SIZE, dropout=0.1),
        corpus="openwebtext",
        batch_size=16,
        grad_accum=8,
        max_steps=20000,
        lr=6e-4,
        min_lr=6e-5,
        warmup_steps=2000,
        eval_interval=500,
        eval_batches=50,
        log_interval=10,
        ckpt_interval=1000,
        dtype="auto",
    ),
    # The setting of the paper's first (joint-collapse) observation: untied, random val batches, constant lr.
    "nanogpt-10m": _preset(
        dict(n_layers=6, n_heads=6, d_model=384, n_ctx=256, dropout=0.2, tie_embeddings=False),
        batch_size=64,
        max_steps=3000,
        lr=3e-4,
        min_lr=3e-4,
        lr_schedule="constant",
        warmup_steps=0,
        eval_interval=100,
        eval_batches=50,
        val_mode="random",
        ckpt_interval=500,
        dtype="auto",
    ),
}

MODEL_FIELDS = {f.name: f for f in dataclasses.fields(ModelConfig)}
TRAIN_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
_TRAIN_HINTS = typing.get_type_hints(TrainConfig)
_MODEL_HINTS = typing.get_type_hints(ModelConfig)


def parse_value(key: str, text: str) -> Any:
    """Turn the string of `--set key=value` into the field's type, or raise ConfigError."""
    hint = _MODEL_HINTS.get(key) or _TRAIN_HINTS.get(key)
    if hint is None:
        raise ConfigError(f"unknown field {key!r}; fields: {', '.join(sorted(MODEL_FIELDS | TRAIN_FIELDS))}")
    if typing.get_origin(hint) in (collections.abc.Mapping, dict):  # mixer_params: a JSON object
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise ConfigError(f"{key} expects a JSON object, e.g. {key}='{{\"window\": 8}}', got {text!r}")
        return value
    args = set(typing.get_args(hint)) or {hint}
    if type(None) in args and text.lower() in ("none", "null", ""):
        return None
    if bool in args:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key} expects true or false, got {text!r}")
    try:
        if int in args:
            return int(text)
        if float in args:
            value = float(text)
            if math.isnan(value):
                raise ValueError
            return value
    except ValueError:
        kind = "an integer" if int in args else "a number"
        raise ConfigError(f"{key} expects {kind}, got {text!r}") from None
    return text


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` items -> {field: typed value}."""
    overrides = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        overrides[key.strip()] = parse_value(key.strip(), value)
    return overrides


@dataclass(frozen=True)
class RunSpec:
    """A preset with overrides, resolved: what one run (or every run of an experiment) trains."""

    preset: str
    model: ModelConfig
    train: TrainConfig
    overrides: dict[str, Any] = field(default_factory=dict)

    def with_overrides(self, extra: dict[str, Any]) -> RunSpec:
        """This spec with more overrides (a variant's, a seed), layered on the preset as resolve() layers them;
        the vocabulary stays the one this spec was fitted to (fit_vocab) unless extra sets d_vocab."""
        spec = resolve(self.preset, {**self.overrides, **extra})
        return spec if "d_vocab" in extra else spec.fit_vocab(self.model.d_vocab)

    def fit_vocab(self, d_vocab: int) -> RunSpec:
        """The model sized to the data's vocabulary: the corpus, not the preset, decides d_vocab."""
        if self.model.d_vocab == d_vocab:
            return self
        return dataclasses.replace(self, model=self.model.replace(d_vocab=d_vocab))


def check_asked_vocab(overrides: dict[str, Any], vocab_size: int) -> None:
    """An explicit --set d_vocab that the data would silently replace is refused (the data decides it)."""
    if "d_vocab" in overrides and overrides["d_vocab"] != vocab_size:
        raise ConfigError(
            f"--set d_vocab={overrides['d_vocab']} asked for, but the corpus has {vocab_size} tokens and "
            "the data decides the vocabulary; drop --set d_vocab (or set it to the corpus's size)"
        )


def resolve(preset: str, overrides: dict[str, Any] | None = None) -> RunSpec:
    """Preset + overrides -> validated (ModelConfig, TrainConfig)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
    overrides = dict(overrides or {})
    model = dict(PRESETS[preset]["model"])
    train = dict(PRESETS[preset]["train"])
    for key, value in overrides.items():
        if key in MODEL_FIELDS:
            model[key] = value
        elif key in TRAIN_FIELDS:
            train[key] = value
        else:
            raise ConfigError(f"unknown field {key!r}; fields: {', '.join(sorted(MODEL_FIELDS | TRAIN_FIELDS))}")
    try:
        train_cfg = TrainConfig(**train)
        model_cfg = ModelConfig(**model)
    except TypeError as e:  # a wrongly typed value compared with a number
        raise ConfigError(f"bad value in preset {preset!r} overrides: {e}") from None
    return RunSpec(preset=preset, model=model_cfg, train=train_cfg, overrides=overrides)

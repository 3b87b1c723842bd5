"""ModelConfig: the shape and the residual wiring of a ResidualGPT.

Field names follow TransformerLens's HookedTransformerConfig where one exists.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from interp.config.registry import BUILTIN_MIXERS, MIXERS, mixer_spec
from interp.errors import ConfigError

RESIDUALS = ("full", "attn_only", "ffn_only", "none")
ACT_FNS = ("gelu",)


class MixerParams(dict):
    """A mixer's parameters as a ModelConfig holds them: a read-only, hashable dict (ModelConfig is frozen,
    and its fields make keys: training.stacked.shape_key, training.estimate)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("ModelConfig.mixer_params is read-only; use cfg.replace(mixer_params={...})")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __copy__(self, *memo: Any) -> MixerParams:  # frozen: a copy, deep or not, is itself
        return self

    __deepcopy__ = __copy__

    def __reduce__(self) -> tuple:
        return (MixerParams, (dict(self),))


def resolve_mixer_params(spec: Any, given: Mapping[str, Any]) -> dict[str, Any]:
    """`given` checked against what the mixer class declares (spec.params: name -> default), defaults filled.

    A value must have its default's type (an int is taken for a float); then spec.check_params may refuse it.
    """
    declared = dict(getattr(spec, "params", {}))
    unknown = sorted(set(given) - set(declared))
    if unknown:
        known = ", ".join(declared) or "none"
        raise ConfigError(f"mixer {spec.name!r} has no parameter(s) {unknown}; its parameters: {known}")
    params = {}
    for key, default in declared.items():
        value = given.get(key, default)
        kind = type(default)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not kind or (kind is float and not math.isfinite(value)):
            raise ConfigError(
                f"mixer {spec.name!r}: parameter {key} must be {'a finite ' * (kind is float)}"
                f"{kind.__name__}, got {value!r}"
            )
        params[key] = value
    spec.check_params(params)
    return params


# Each sublayer's output times the gain lands in the stream; LayerNorm squares it, so past ~1e19 it overflows
# float32. The gain-confound experiment uses 0.25-4.
MAX_RUNTIME_GAIN = 1e6


@dataclass(frozen=True)
class ModelConfig:
    """A frozen, validated model configuration.

    residual: which identity paths a block keeps.
        full      resid_mid = resid_pre + attn,  resid_post = resid_mid + mlp
        attn_only keeps the attention residual, drops the FFN one
        ffn_only  keeps the FFN residual, drops the attention one
        none      drops both
    mixer: the token mixer in the attention slot (MIXERS: interp.config.registry's live list, so a
        mixer registered with interp.config.registry.register_mixer is valid too); the built-ins:
        attention       causal softmax attention (self_bias added to the diagonal score)
        uniform         every causal score equal: the plain mean of earlier values
        position_blind  a per-position GELU MLP d -> 2d -> d: no cross-position information
    mixer_params: the mixer's own parameters (what its class declares in `params`, e.g. a window size);
        defaults filled in, so two configs of one mixer compare (and name their runs) by every value.
        Empty for the built-ins; left out of to_dict() when empty (records written before it existed match).
    self_bias: added to each position's score on itself; +inf attends only to
        itself, -inf never to itself (position 0 then writes zeros).
    runtime_gain: every sublayer output is multiplied by this in every forward
        pass (the paper's confounded gain experiment; 1.0 means off).
    """

    n_layers: int = 4
    d_model: int = 128
    n_heads: int = 4
    n_ctx: int = 128
    d_vocab: int = 65
    d_mlp: int = -1  # -1: 4 * d_model
    act_fn: str = "gelu"
    dropout: float = 0.0
    bias: bool = False
    residual: str = "full"
    mixer: str = "attention"
    mixer_params: Mapping[str, Any] = field(default_factory=dict)
    self_bias: float = 0.0
    init_std: float = 0.02
    tie_embeddings: bool = True
    runtime_gain: float = 1.0

    def __post_init__(self) -> None:
        for name in ("n_layers", "d_model", "n_heads", "n_ctx", "d_vocab"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.d_mlp == -1:
            object.__setattr__(self, "d_mlp", 4 * self.d_model)
        if isinstance(self.d_mlp, bool) or not isinstance(self.d_mlp, int) or self.d_mlp <= 0:
            raise ConfigError(f"d_mlp must be a positive integer (or -1 for 4 * d_model), got {self.d_mlp!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.act_fn not in ACT_FNS:
            raise ConfigError(f"act_fn must be one of {ACT_FNS}, got {self.act_fn!r}")
        if self.residual not in RESIDUALS:
            raise ConfigError(f"residual must be one of {RESIDUALS}, got {self.residual!r}")
        if self.mixer not in MIXERS:
            raise ConfigError(
                f"mixer {self.mixer!r} is not registered in this process (registered: {', '.join(MIXERS)}); a mixer "
                "defined outside the package must be imported (its register_mixer call run) before a model or "
                "checkpoint that uses it is built or loaded"
            )
        given = self.mixer_params
        if not isinstance(given, Mapping) or not all(isinstance(k, str) for k in given):
            raise ConfigError(f"mixer_params must be a mapping of parameter names to values, got {given!r}")
        if given or self.mixer not in BUILTIN_MIXERS:  # the built-ins declare none (interp.config.registry), so a
            given = resolve_mixer_params(mixer_spec(self.mixer), given)  # default config stays light (no torch)
        object.__setattr__(self, "mixer_params", MixerParams(given))
        for name in ("dropout", "self_bias", "init_std", "runtime_gain"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{name} must be a number, got {value!r}")
            object.__setattr__(self, name, float(value))
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if math.isnan(self.self_bias):
            raise ConfigError("self_bias must be a number or +/-inf, got nan")
        if not (self.init_std > 0 and math.isfinite(self.init_std)):
            raise ConfigError(f"init_std must be positive, got {self.init_std!r}")
        if not 0 < self.runtime_gain <= MAX_RUNTIME_GAIN:
            raise ConfigError(
                f"runtime_gain must be in (0, {MAX_RUNTIME_GAIN:.0e}], got {self.runtime_gain!r} (a larger gain "
                "overflows float32 inside the forward: NaN logits)"
            )
        for name in ("bias", "tie_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.self_bias != 0.0 and not mixer_spec(self.mixer).takes_self_bias:
            raise ConfigError(
                f"self_bias applies only to a mixer that takes it (mixer='attention'), not {self.mixer!r}"
            )

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def attn_residual(self) -> bool:
        return self.residual in ("full", "attn_only")

    @property
    def ffn_residual(self) -> bool:
        return self.residual in ("full", "ffn_only")

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe data (non-finite self_bias becomes "inf" / "-inf")."""
        d = dataclasses.asdict(self)
        d["mixer_params"] = dict(self.mixer_params)
        if not d["mixer_params"]:
            del d["mixer_params"]  # as every record written before mixers had parameters
        if not math.isfinite(d["self_bias"]):
            d["self_bias"] = "inf" if d["self_bias"] > 0 else "-inf"
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown model config field(s) {unknown}; known: {sorted(known)}")
        d = dict(d)
        if isinstance(d.get("self_bias"), str):
            try:
                d["self_bias"] = float(d["self_bias"])
            except ValueError:
                raise ConfigError(f"self_bias must be a number or 'inf'/'-inf', got {d['self_bias']!r}") from None
        return cls(**d)

"""The paper-scale prediction files (docs/results/predictions/paper_scale-v*.json), read and scored against a run.

Each version is a file written before any GPU run of what it predicts and never rewritten; a revision is a new
version. An arm predicts the probability p_floor that a seed ends on the floor (final validation loss >= the unigram
level of its validation batches - margin) as a low / mid / high band; for n seeds the count on the floor is held
when it lies in [binomial 5% quantile at low, 95% quantile at high]. The routing rows predict P1-P7's verdicts.

`make gpu-check` scores the newest version against its Table 1 runs (stage c) and routing test (stage d); an arm the
check did not run says so. With --dry-run the same code scores the paper-10m arms against tiny smoke runs: the
plumbing, never a test of the prediction.

Pinned      every committed version's sha256 (of the file's bytes) is in PINNED below, so an edited file is not
            scored as the committed one: load, once the fields are checked (so a damaged field is named), refuses
            a file whose bytes are not its version's pin, or a version with no pin; newest first checks every
            older version in the folder against its pin and that none pinned is missing, then loads the highest.
            tests/test_paper_predictions.py checks every file in the folder against its pin.
A new       version N: write docs/results/predictions/paper_scale-vN.json (its "version" field N, the schema
version     below; a "revises" block saying what changed from which version and why), take its sha256
            (`sha256sum docs/results/predictions/paper_scale-vN.json`), add N: "<sha256>" to PINNED, and commit the
            file and the pin together, before any GPU run of what it predicts. An older version's file and pin are
            never changed.
Checked     (load, by the pydantic models below; each error one PredictionFileError naming the file, and the arm
            or routing row): the schema; version the file name's N; written an ISO 8601 time with a zone, not in
            the future; floor_rule.margin in (0, 1); per arm exactly PredictedArm's fields, a unique non-empty
            id, a preset of training.presets, a residual of interp.config.model_config.RESIDUALS, a schedule of
            SCHEDULES, qk_scale > 0, p_floor low <= mid <= high in [0, 1]; per routing row exactly Routing's
            fields, a unique id P1-P7, a verdict of VERDICTS, p in [0, 1]; revises.version an earlier one; every
            text a non-empty string. Types are strict: a number is never a bool (JSON true is not 1), a string,
            NaN or Infinity; no object repeats a key or holds a field not modelled.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator
from scipy.stats import binom

from experiments.floor.predictions import no_repeats
from interp.config.model_config import RESIDUALS
from interp.errors import ToolkitError
from training.presets import PRESETS, TrainConfig

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "docs" / "results" / "predictions"
SCHEMA = "paper-scale-predictions/1"
SCHEDULES = Literal["preset", "constant"]
VERDICTS = Literal["supports", "contradicts", "inconclusive", "not decided"]
NAME = re.compile(r"paper_scale-v([1-9]\d*)\.json")
# version -> sha256 of the committed file's bytes (`git show HEAD:docs/results/predictions/paper_scale-vN.json`)
PINNED: dict[int, str] = {
    1: "247c730f5e0488d407029868e25d535b62d64c149d0996ac13b887c25eec54f1",
    2: "09636fe6f799b82bc2f60c493c06558433fb368f1f64fd43ffd471093a22b42a",
    3: "377f6dc0e92ec8646cc9b0af976d1a78cabcbdf74b0e85ba6915fcfc3433b887",
}


class PredictionFileError(ToolkitError):
    """A prediction file that cannot be read as one (schema, fields, probabilities, its pinned sha256)."""


def _shown(path: Path) -> str:
    """path as messages name it: from the repository root where it lies inside it."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def _version_of(path: Path) -> int:
    m = NAME.fullmatch(path.name)
    if not m:
        raise PredictionFileError(f"{_shown(path)}: a prediction file is named paper_scale-v<N>.json (N from 1)")
    return int(m.group(1))


def versions(folder: Path | None = None) -> list[Path]:
    """The prediction files, oldest version first (folder: FOLDER unless given); a PredictionFileError for a
    paper_scale-v*.json not named paper_scale-v<N>.json (v02 beside v2 would be two files of one version)."""
    found = [(_version_of(p), p) for p in (FOLDER if folder is None else folder).glob("paper_scale-v*.json")]
    return [p for _, p in sorted(found)]


# A validator refusing a value that ok(value, info) says no to, in words (after the field's name and value).
def _check(ok: Callable[[Any, ValidationInfo], bool], words: str) -> AfterValidator:
    def check(value: Any, info: ValidationInfo) -> Any:
        if not ok(value, info):
            raise ValueError(words)
        return value

    return AfterValidator(check)


Text = Annotated[str, _check(lambda s, _: bool(s.strip()), "is not a non-empty string")]
Probability = Annotated[float, Field(ge=0, le=1)]
Preset = Literal[tuple(PRESETS)]  # type: ignore[valid-type]


def _written(text: str) -> str:
    when = datetime.datetime.fromisoformat(text)  # a ValueError for what is no ISO 8601 time
    if when.tzinfo is None:  # a date alone reads as midnight with no zone
        raise ValueError("needs a time of day and its zone (2026-12-06T11:24:00+00:00)")
    if when > datetime.datetime.now(datetime.UTC):
        raise ValueError("is in the future: a prediction is written before what it predicts, not after now")
    return text


class _Schema(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)  # true is no number, "1" no int


class Band(_Schema):
    low: Probability
    mid: Probability
    high: Probability


class PredictedArm(_Schema):
    id: Text
    preset: Preset
    residual: Literal[RESIDUALS]  # type: ignore[valid-type]
    schedule: SCHEDULES
    qk_scale: Annotated[float, Field(gt=0)]
    p_floor: Annotated[Band, _check(lambda b, _: b.low <= b.mid <= b.high, "needs low <= mid <= high")]
    why: Text
    refuted_if: Text


class Routing(_Schema):
    id: Annotated[str, Field(pattern=r"^P[1-7]$")]
    preset: Preset
    verdict: VERDICTS
    p: Probability
    why: Text


class FloorRule(_Schema):
    text: Text = Field(None)  # absent, or a non-empty string (null is refused)
    margin: Annotated[float, Field(gt=0, lt=1)]


class Revises(_Schema):
    version: Annotated[int, _check(lambda v, info: 1 <= v < info.context["version"], "is not an earlier version")]
    changed: list[Any]
    why: Text


class PredictionFile(_Schema):  # validated with context={"version": N}, the N of its name paper_scale-vN.json
    schema_: Literal[SCHEMA] = Field(alias="schema")
    version: Annotated[int, _check(lambda v, info: v == info.context["version"], "is not its file name's")]
    written: Annotated[str, AfterValidator(_written)]  # an ISO 8601 time with its zone, not in the future
    what: Text
    floor_rule: FloorRule
    count_interval: Text = Field(None)  # the optional fields: absent, or what they say (null is refused)
    schedules: dict[str, Text] = Field(None)
    basis: Text = Field(None)
    arms: list[PredictedArm] = Field(min_length=1)
    routing: list[Routing]
    refutes_the_hypothesis: Text = Field(None)
    revises: Revises = Field(None)

    @model_validator(mode="after")
    def _unique_ids(self) -> PredictionFile:
        for what, rows in (("arm", self.arms), ("routing", self.routing)):
            ids = [r.id for r in rows]
            if twice := sorted({x for x in ids if ids.count(x) > 1}):
                raise ValueError(f"{what} id(s) {', '.join(twice)} appear more than once")
        return self


# A top-level field's error in words, whatever pydantic found wrong with it (but its absence).
SAYS = {
    "version": "its version field is {value!r}, not the {version} its name says",
    "written": "written {value!r} is not an ISO 8601 time with its zone, at or before now",
    "floor_rule": "floor_rule is an object with a margin, a number of nats in (0, 1)",
    "arms": "arms is a list of at least one arm",
    "routing": "routing is a list",
}
ROWS = {"arms": ("arm", PredictedArm), "routing": ("routing", Routing)}  # a row's name in messages, and its model
HEAD = re.compile(r"^(Value error, |[A-Z]\w* (?=should))")  # pydantic's "Input should ...": "should ..."


def _words(e: ValidationError, doc: Any, version: int) -> str:
    """pydantic's first error in words: the arm or routing row (by id, by index where the id is what is wrong),
    the field, its value (where no object or list) and what is wrong with it."""
    err = e.errors(include_url=False)[0]
    loc, kind, value = [str(x) for x in err["loc"]], err["type"], err["input"]
    if len(loc) == 1 and loc[0] in SAYS and kind != "missing":
        return SAYS[loc[0]].format(value=value, version=version)
    name = ""
    if len(loc) > 1 and loc[0] in ROWS:
        (what, model), row = ROWS[loc[0]], doc[loc[0]][int(loc[1])]
        rid = row.get("id") if isinstance(row, dict) else None
        if len(loc) == 2 or (len(loc) == 3 and kind in ("missing", "extra_forbidden")):
            return f"{what} {loc[1]} ({rid!r}) has exactly the fields {sorted(model.model_fields)}"
        name, loc = f"{what} {loc[1] if loc[2] == 'id' else rid}'s ", loc[2:]
    if kind == "missing":
        return f"{name}{'.'.join(loc[:-1]) + ' has ' if len(loc) > 1 else ''}no {loc[-1]}"
    shown = "" if isinstance(value, (dict, list)) else f" {value!r}"
    words = "is no field the schema names" if kind == "extra_forbidden" else HEAD.sub("", err["msg"])
    return f"{name}{'.'.join(loc)}{shown} {words}".lstrip()


class _NonFinite(str):
    """JSON's NaN / Infinity / -Infinity as parsed here: marked, so the check can say where it stands."""


def _non_finite(doc: Any, where: str = "") -> str | None:
    """Where (a dotted path) the first NaN / Infinity in doc stands, and which; None where there is none."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        at = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key)
        if found := (f"{at} is {value}" if isinstance(value, _NonFinite) else _non_finite(value, at)):
            return found
    return None


def _check_pin(path: Path, version: int, data: bytes, pins: dict[int, str]) -> None:
    digest = hashlib.sha256(data).hexdigest()
    if version not in pins:
        raise PredictionFileError(
            f"{_shown(path)}: version {version} has no sha256 pinned in experiments/floor/paper_scale.py "
            f"(its sha256 {digest}); a new version's sha256 is pinned in PINNED in the commit that adds its file"
        )
    if digest != pins[version]:
        raise PredictionFileError(
            f"{_shown(path)} is not the committed version {version} (sha256 {digest}, pinned {pins[version]}); "
            "a revision is a new version file, and its sha256 is pinned in experiments/floor/paper_scale.py"
        )


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise PredictionFileError(f"{_shown(path)}: not a readable prediction file ({e})") from None


def load(path: Path, pins: dict[int, str] | None = PINNED) -> dict[str, Any]:
    """One prediction file, checked (the module docstring's Checked), then its bytes against its version's pin
    (pins None: not pinned, for a version being written)."""
    where, version = _shown(path), _version_of(path)
    data = _read(path)
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_NonFinite, object_pairs_hook=no_repeats)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, a repeated key, nesting
        raise PredictionFileError(f"{where}: not a readable prediction file ({e})") from None
    if (found := _non_finite(doc)) is not None:
        raise PredictionFileError(f"{where}: {found}: NaN and Infinity are no number a prediction holds")
    try:
        PredictionFile.model_validate(doc, context={"version": version})
    except ValidationError as e:
        raise PredictionFileError(f"{where}: {_words(e, doc, version)}") from None
    except (TypeError, OverflowError) as e:  # a list where a preset goes, an int past float's range
        raise PredictionFileError(f"{where}: a field holds what no prediction field takes ({e})") from None
    if pins is not None:
        _check_pin(path, version, data, pins)
    return doc


def newest(folder: Path | None = None, pins: dict[int, str] | None = PINNED) -> tuple[Path, dict[str, Any]]:
    """The highest version, loaded (folder: FOLDER unless given); first every older version in the folder against
    its pin, and no pinned one missing (an edited or removed committed file is refused, not passed over)."""
    folder = FOLDER if folder is None else folder
    found = versions(folder)
    if not found:
        raise PredictionFileError(f"no paper_scale-v*.json in {_shown(folder)}")
    if pins is not None:
        have = {_version_of(p): p for p in found}
        gone = [f"paper_scale-v{v}.json" for v in sorted(set(pins) - set(have))]
        if gone:
            raise PredictionFileError(f"{_shown(folder)}: {', '.join(gone)} pinned but missing (never removed)")
        for v, p in have.items():
            if p != found[-1]:  # the newest: load names what is wrong in it before its pin
                _check_pin(p, v, _read(p), pins)
    return found[-1], load(found[-1], pins)


def count_interval(n: int, low: float, high: float) -> tuple[int, int]:
    """The 90% interval of how many of n seeds end on the floor, for a per-seed probability in [low, high]."""
    return int(binom.ppf(0.05, n, low)), int(binom.ppf(0.95, n, high))


def _schedule(train: dict[str, Any], preset: str) -> str | None:
    """ "constant" (from step 0, no warm-up), "preset" (the preset's warm-up and decay) or None (anything else)."""
    if train.get("lr_schedule") == "constant" and train.get("warmup_steps") == 0:
        return "constant"
    if preset not in PRESETS:
        return None
    own = TrainConfig(**PRESETS[preset]["train"])
    same = all(train.get(k) == getattr(own, k) for k in ("lr_schedule", "warmup_steps", "lr", "min_lr"))
    return "preset" if same else None


def measured_arms(results: dict[str, Any], margin: float, as_preset: str | None = None) -> dict[tuple, list[bool]]:
    """(preset, residual, schedule, qk_scale) -> on the floor, per seed, from a residual sweep's results file."""
    preset = results["preset"]
    unigram = results["reference_levels"]["unigram"]
    schedule = _schedule(results["config"]["train"], preset)
    out: dict[tuple, list[bool]] = {}
    for run in results["runs"]:
        key = (as_preset or preset, run["variant"], schedule, 1.0)
        out.setdefault(key, []).append(run["final_val_loss"] >= unigram - margin)
    return out


def score_arms(doc: dict[str, Any], sweeps: list[dict[str, Any]], dry_run: bool = False) -> list[dict[str, str]]:
    """One row an arm: predicted band and count interval beside the measured count (over every residual sweep's
    results given), or why it was not measured."""
    margin = doc["floor_rule"]["margin"]
    measured: dict[tuple, list[bool]] = {}
    for results in sweeps:
        for key, runs in measured_arms(results, margin, "paper-10m" if dry_run else None).items():
            measured.setdefault(key, []).extend(runs)
    rows = []
    for arm in doc["arms"]:
        p = arm["p_floor"]
        predicted = f"p_floor {p['mid']:.2f} [{p['low']:.2f}, {p['high']:.2f}]"
        runs = measured.get((arm["preset"], arm["residual"], arm["schedule"], float(arm["qk_scale"])), [])
        if not runs:
            rows.append({"check": arm["id"], "result": "not run by this check", "against": predicted})
            continue
        n, k = len(runs), sum(runs)
        lo, hi = count_interval(n, p["low"], p["high"])
        verdict = "held" if lo <= k <= hi else "failed"
        if (lo, hi) == (0, n):
            verdict += " (its interval holds every count: no test)"
        if dry_run:
            verdict = "dry run (smoke shapes): plumbing, not a test"
        result, against = f"{k} of {n} on the floor: {verdict}", f"{predicted}; {lo}-{hi} of {n}"
        rows.append({"check": arm["id"], "result": result, "against": against})
    return rows


def score_routing(doc: dict[str, Any], results: dict[str, Any] | None, dry_run: bool = False) -> list[dict[str, str]]:
    """One row a prediction P1-P7: the predicted verdict (with its probability) beside the routing test's."""
    got = {v["id"]: v["verdict"] for v in (results or {}).get("verdicts", [])}
    rows = []
    for r in doc.get("routing", []):
        against = f"predicted {r['verdict']} (p {r['p']:.2f})"
        if r["id"] not in got:
            rows.append({"check": r["id"], "result": "not run by this check", "against": against})
            continue
        same = "as predicted" if got[r["id"]] == r["verdict"] else "not as predicted"
        if dry_run:
            same = "dry run (smoke shapes): plumbing, not a test"
        rows.append({"check": r["id"], "result": f"{got[r['id']]}: {same}", "against": against})
    return rows

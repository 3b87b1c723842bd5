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
Checked     (load, each a PredictionFileError naming the file, and the arm or routing row): the schema; the
            version field an integer equal to the file name's; floor_rule.margin in (0, 1); per arm exactly
            ARM_KEYS, a unique non-empty id, a preset of training.presets, a residual of the toolkit's wirings
            (interp.config.model_config.RESIDUALS), a schedule of SCHEDULES, qk_scale a finite number > 0,
            p_floor exactly low <= mid <= high in [0, 1]; per routing row exactly ROUTING_KEYS, a unique id P1-P7,
            a verdict of VERDICTS, p in [0, 1]; every text field a non-empty string. A number is never a bool
            (JSON true is not 1 here), NaN or Infinity; no object repeats a key.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

from scipy.stats import binom

from interp.errors import ToolkitError

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "docs" / "results" / "predictions"
SCHEMA = "paper-scale-predictions/1"
SCHEDULES = ("preset", "constant")
ARM_KEYS = {"id", "preset", "residual", "schedule", "qk_scale", "p_floor", "why", "refuted_if"}
BAND_KEYS = ("low", "mid", "high")
ROUTING_KEYS = {"id", "preset", "verdict", "p", "why"}
ROUTING_ID = re.compile(r"P[1-7]")
VERDICTS = ("supports", "contradicts", "inconclusive", "not decided")
REQUIRED = ("schema", "version", "written", "what", "floor_rule", "arms", "routing")
TEXTS = ("what", "basis", "count_interval", "refutes_the_hypothesis")  # each a non-empty string where present
NAME = re.compile(r"paper_scale-v([1-9]\d*)\.json")
# version -> sha256 of the committed file's bytes (`git show HEAD:docs/results/predictions/paper_scale-vN.json`)
PINNED: dict[int, str] = {
    1: "247c730f5e0488d407029868e25d535b62d64c149d0996ac13b887c25eec54f1",
    2: "09636fe6f799b82bc2f60c493c06558433fb368f1f64fd43ffd471093a22b42a",
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


def _is_number(x: Any) -> bool:
    """A finite int or float that is not a bool (JSON true reads as Python's True, an int equal to 1)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _text(x: Any) -> bool:
    return isinstance(x, str) and bool(x.strip())


def _check_arm(arm: Any, i: int, where: str, presets: Any, residuals: tuple[str, ...]) -> str:
    """The arm's id, or a PredictionFileError naming the file and the arm."""
    if not isinstance(arm, dict) or set(arm) != ARM_KEYS:
        name = arm.get("id") if isinstance(arm, dict) else None
        raise PredictionFileError(f"{where}: arm {i} ({name!r}): an arm has exactly the fields {sorted(ARM_KEYS)}")
    if not _text(arm["id"]):
        raise PredictionFileError(f"{where}: arm {i}'s id {arm['id']!r} is not a non-empty string")
    name = f"{where}: arm {arm['id']}"
    if arm["preset"] not in presets:
        raise PredictionFileError(f"{name}'s preset {arm['preset']!r} is not one of {', '.join(presets)}")
    if arm["residual"] not in residuals:
        raise PredictionFileError(f"{name}'s residual {arm['residual']!r} is not one of {residuals}")
    if arm["schedule"] not in SCHEDULES:
        raise PredictionFileError(f"{name}'s schedule {arm['schedule']!r} is not one of {SCHEDULES}")
    q = arm["qk_scale"]
    if not _is_number(q) or q <= 0:
        raise PredictionFileError(f"{name}'s qk_scale {q!r} is not a finite number > 0")
    p = arm["p_floor"]
    band = [p[k] for k in BAND_KEYS] if isinstance(p, dict) and set(p) == set(BAND_KEYS) else []
    if len(band) != 3 or not all(_is_number(x) and 0.0 <= x <= 1.0 for x in band) or band != sorted(band):
        raise PredictionFileError(
            f"{name}'s p_floor needs 0 <= low <= mid <= high <= 1, numbers (no bool) and no other field: {p!r}"
        )
    for key in ("why", "refuted_if"):
        if not _text(arm[key]):
            raise PredictionFileError(f"{name}'s {key} {arm[key]!r} is not a non-empty string")
    return str(arm["id"])


def _check_routing(r: Any, i: int, where: str, presets: Any) -> str:
    """The row's id (P1-P7), or a PredictionFileError naming the file and the row."""
    if not isinstance(r, dict) or set(r) != ROUTING_KEYS:
        name = r.get("id") if isinstance(r, dict) else None
        raise PredictionFileError(f"{where}: routing {i} ({name!r}) has exactly the fields {sorted(ROUTING_KEYS)}")
    if not isinstance(r["id"], str) or not ROUTING_ID.fullmatch(r["id"]):
        raise PredictionFileError(f"{where}: routing {i}'s id {r['id']!r} is not one of P1-P7")
    name = f"{where}: routing {r['id']}"
    if r["verdict"] not in VERDICTS or not _is_number(r["p"]) or not 0.0 <= r["p"] <= 1.0:
        raise PredictionFileError(f"{name}: a verdict among {VERDICTS} and p in [0, 1] (a number, no bool)")
    if r["preset"] not in presets:
        raise PredictionFileError(f"{name}'s preset {r['preset']!r} is not one of {', '.join(presets)}")
    if not _text(r["why"]):
        raise PredictionFileError(f"{name}'s why {r['why']!r} is not a non-empty string")
    return r["id"]


def _unique(ids: list[str], what: str, where: str) -> None:
    twice = sorted({x for x in ids if ids.count(x) > 1})
    if twice:
        raise PredictionFileError(f"{where}: {what} id(s) {', '.join(twice)} appear more than once")


class _NonFinite(str):
    """JSON's NaN / Infinity / -Infinity as parsed here: marked, so the check can say where it stands."""


def _non_finite(doc: Any, where: str = "") -> str | None:
    """Where (a dotted path) the first NaN / Infinity in doc stands, and which; None where there is none."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        at = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key)
        if isinstance(value, _NonFinite):
            return f"{at} is {value}"
        if (found := _non_finite(value, at)) is not None:
            return found
    return None


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"an object repeats the key(s) {twice}")
    return dict(pairs)


def _check_doc(doc: Any, version: int, where: str) -> None:
    from interp.config.model_config import RESIDUALS
    from training.presets import PRESETS

    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise PredictionFileError(f"{where}: schema is not {SCHEMA}")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise PredictionFileError(f"{where}: no {', '.join(missing)} (a prediction file has {', '.join(REQUIRED)})")
    v = doc["version"]
    if isinstance(v, bool) or not isinstance(v, int) or v != version:
        raise PredictionFileError(f"{where}: its version field is {v!r}, not the {version} its name says")
    try:
        written = _text(doc["written"]) and bool(datetime.datetime.fromisoformat(doc["written"]))
    except ValueError:
        written = False
    if not written:
        raise PredictionFileError(f"{where}: written {doc['written']!r} is not an ISO 8601 time")
    for key in TEXTS:
        if key in doc and not _text(doc[key]):
            raise PredictionFileError(f"{where}: {key} {doc[key]!r} is not a non-empty string")
    rule = doc["floor_rule"]
    margin: Any = rule.get("margin") if isinstance(rule, dict) else None
    if not _is_number(margin) or not 0 < margin < 1:
        raise PredictionFileError(f"{where}: floor_rule.margin must be a number of nats in (0, 1), not {margin!r}")
    if "text" in rule and not _text(rule["text"]):
        raise PredictionFileError(f"{where}: floor_rule.text {rule['text']!r} is not a non-empty string")
    schedules = doc.get("schedules", {})
    if not isinstance(schedules, dict) or not all(_text(x) for x in schedules.values()):
        raise PredictionFileError(f"{where}: schedules is an object of non-empty strings")
    if not isinstance(doc["arms"], list) or not doc["arms"]:
        raise PredictionFileError(f"{where}: arms is a list of at least one arm")
    ids = [_check_arm(arm, i, where, PRESETS, RESIDUALS) for i, arm in enumerate(doc["arms"])]
    _unique(ids, "arm", where)
    if not isinstance(doc["routing"], list):
        raise PredictionFileError(f"{where}: routing is a list")
    _unique([_check_routing(r, i, where, PRESETS) for i, r in enumerate(doc["routing"])], "routing", where)
    if "revises" in doc:
        rev = doc["revises"]
        old = rev.get("version") if isinstance(rev, dict) else None
        if isinstance(old, bool) or not isinstance(old, int) or not 1 <= old < version:
            raise PredictionFileError(f"{where}: revises.version {old!r} is not an earlier version")
        if not isinstance(rev.get("changed"), list) or not _text(rev.get("why")):
            raise PredictionFileError(f"{where}: revises has a changed list and a non-empty why")


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
        doc = json.loads(data.decode("utf-8"), parse_constant=_NonFinite, object_pairs_hook=_no_repeats)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, a repeated key, nesting
        raise PredictionFileError(f"{where}: not a readable prediction file ({e})") from None
    if (found := _non_finite(doc)) is not None:
        raise PredictionFileError(f"{where}: {found}: NaN and Infinity are no number a prediction holds")
    _check_doc(doc, version, where)
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
    from training.presets import PRESETS, TrainConfig

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
        rows.append(
            {
                "check": arm["id"],
                "result": f"{k} of {n} on the floor: {verdict}",
                "against": f"{predicted}; {lo}-{hi} of {n}",
            }
        )
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

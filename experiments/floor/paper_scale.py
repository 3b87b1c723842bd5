"""The paper-scale prediction files (docs/results/predictions/paper_scale-v*.json), read and scored against a run.

Each version is a file written before any GPU run of what it predicts and never rewritten; a revision is a new
version. An arm predicts the probability p_floor that a seed ends on the floor (final validation loss >= the unigram
level of its validation batches - margin) as a low / mid / high band; for n seeds the count on the floor is held
when it lies in [binomial 5% quantile at low, 95% quantile at high]. The routing rows predict P1-P7's verdicts.

`make gpu-check` scores the newest version against its Table 1 runs (stage c) and routing test (stage d); an arm the
check did not run says so. With --dry-run the same code scores the paper-10m arms against tiny smoke runs: the
plumbing, never a test of the prediction.
"""

from __future__ import annotations

import json
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
VERDICTS = ("supports", "contradicts", "inconclusive", "not decided")


class PredictionFileError(ToolkitError):
    """A prediction file that cannot be read as one (schema, fields, probabilities)."""


def versions(folder: Path = FOLDER) -> list[Path]:
    """The prediction files, oldest version first."""
    found = [
        (int(m.group(1)), p) for p in folder.glob("paper_scale-v*.json") if (m := re.search(r"-v(\d+)\.json$", p.name))
    ]
    return [p for _, p in sorted(found)]


def _check_arm(arm: Any, where: str) -> None:
    if not isinstance(arm, dict) or set(arm) != ARM_KEYS:
        raise PredictionFileError(f"{where}: an arm has exactly the fields {sorted(ARM_KEYS)}")
    p = arm["p_floor"]
    band = [p.get(k) for k in ("low", "mid", "high")] if isinstance(p, dict) else []
    if len(band) != 3 or not all(isinstance(x, (int, float)) and 0.0 <= x <= 1.0 for x in band) or band != sorted(band):
        raise PredictionFileError(f"{where}: arm {arm['id']}'s p_floor needs 0 <= low <= mid <= high <= 1")
    if arm["schedule"] not in SCHEDULES:
        raise PredictionFileError(f"{where}: arm {arm['id']}'s schedule {arm['schedule']!r} is not one of {SCHEDULES}")


def load(path: Path) -> dict[str, Any]:
    """One prediction file, checked: schema, each arm's fields and band, each routing verdict."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PredictionFileError(f"{path}: not a readable prediction file ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise PredictionFileError(f"{path}: schema is not {SCHEMA}")
    margin = doc.get("floor_rule", {}).get("margin")
    if not isinstance(margin, (int, float)) or not 0 < margin < 1:
        raise PredictionFileError(f"{path}: floor_rule.margin must be a number of nats in (0, 1)")
    for arm in doc.get("arms", []):
        _check_arm(arm, str(path))
    for r in doc.get("routing", []):
        if r.get("verdict") not in VERDICTS or not 0.0 <= r.get("p", -1) <= 1.0:
            raise PredictionFileError(f"{path}: routing {r.get('id')}: a verdict among {VERDICTS} and p in [0, 1]")
    return doc


def newest(folder: Path = FOLDER) -> tuple[Path, dict[str, Any]]:
    found = versions(folder)
    if not found:
        raise PredictionFileError(f"no paper_scale-v*.json in {folder}")
    return found[-1], load(found[-1])


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
        runs = measured.get((arm["preset"], arm["residual"], arm["schedule"], float(arm["qk_scale"])))
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

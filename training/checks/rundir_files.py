"""A run directory's JSON (config.json, final.json, metrics.jsonl's and probes.jsonl's records), checked field
by field, and its files' kinds.

Each checker takes what interp.files.io.read_json returned and raises Bad (interp.files.checks), which the
reader in training.rundir turns into a DataFileError naming the file: a forged or hand-edited
file is refused, never half used (a list where a dict was, a loss that is a string, a nesting
1,000 levels deep).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from interp.files.checks import Bad, walk_limits, want_dict, want_int, want_number, want_object, want_str, want_str_keys

FINAL_KEYS = ("final_val_loss", "best_val_loss", "best_step", "steps", "wall_time_s", "tokens_per_s")


def check_run_config(config: Any) -> dict[str, Any]:
    """config.json: {"model", "train", "model_init", "data", "meta"} (training.run_config.config_record)."""
    want_object(config)
    walk_limits(config)
    for key in ("model", "train", "meta"):
        if key in config and config[key] is not None:
            want_str_keys(want_dict(config[key], key), key)
    if config.get("model_init") is not None:
        want_str(config["model_init"], "model_init")
    if "data" in config and config["data"] is not None:
        check_data(config["data"], "data")
    return config


def check_data(data: Any, field: str = "data") -> dict[str, Any]:
    """The data a run read (training.corpus.data_provenance)."""
    want_str_keys(want_dict(data, field), field)
    if "sha256" in data:
        want_str(data["sha256"], f"{field}.sha256")
    for key in ("train_tokens", "val_tokens"):
        if key in data:
            want_int(data[key], f"{field}.{key}", 0)
    for key in ("corpus", "encoding", "vocab_sha256"):
        if data.get(key) is not None:
            want_str(data[key], f"{field}.{key}")
    return data


def check_final(final: Any) -> dict[str, Any]:
    """final.json: every FINAL_KEYS, finite losses, whole step counts, a checkpoint hash if recorded."""
    want_object(final)
    walk_limits(final)
    if missing := [k for k in FINAL_KEYS if k not in final]:
        raise Bad("", f"is damaged (no {', '.join(missing)})")
    for key in ("final_val_loss", "best_val_loss"):
        value = final[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) == math.inf:
            raise Bad("", f"holds no finite {key} ({value!r:.40})")
    want_int(final["steps"], "steps", 0)
    if final["best_step"] is not None:
        want_int(final["best_step"], "best_step", 0)
    for key in ("wall_time_s", "tokens_per_s"):
        want_number(final[key], key)
    if final.get("ckpt_sha256") is not None:
        want_str(final["ckpt_sha256"], "ckpt_sha256")
    return final


LOSS_KEYS = ("val_loss", "train_loss")


def check_metric_record(record: dict[str, Any]) -> dict[str, Any]:
    """One metrics.jsonl record: a whole step >= 0, finite losses (what the curves are made of), other values
    plain data no deeper than interp.files.checks.MAX_DEPTH."""
    want_int(record.get("step"), "step", 0)
    for key in LOSS_KEYS:
        if key in record:
            want_number(record[key], key)
    walk_limits(record, "the record")
    return record


def check_probe_record(record: dict[str, Any]) -> dict[str, Any]:
    """One probes.jsonl record: a whole step >= 0, the probe's name a string, its values plain data no deeper
    than interp.files.checks.MAX_DEPTH (each probe's reader reads its own fields)."""
    want_int(record.get("step"), "step", 0)
    want_str(record.get("probe"), "probe")
    walk_limits(record, "the record")
    return record


def damaged_files(paths: list[Path]) -> list[tuple[Path, str]]:
    """(path, what it is) for each run-directory file that exists but is not a regular file (a FIFO, a
    directory, a device, a dangling link): damage, refused by name before anything is read or written.
    Path.is_file() alone reads a FIFO final.json as "not finished" and trains the run again over it."""
    from interp.files.checks import not_regular

    return [(p, kind) for p in paths if (kind := not_regular(p)) is not None]


__all__ = [
    "FINAL_KEYS",
    "check_run_config",
    "check_data",
    "check_final",
    "check_metric_record",
    "check_probe_record",
    "damaged_files",
]

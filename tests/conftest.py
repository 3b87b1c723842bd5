"""Shared fixtures: the offline data in ../shared/data, tiny presets, subprocess helpers."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def shared_data(monkeypatch):
    """Point the loaders at ../shared/data (skip when it is absent: no network in tests)."""
    if not (SHARED_DATA / "tinyshakespeare" / "input.txt").is_file():
        pytest.skip(f"offline data not found at {SHARED_DATA}")
    monkeypatch.setenv("RESIDUAL_DATA_DIR", str(SHARED_DATA))
    return SHARED_DATA


def run_module(module: str, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """python -m module args, in the repo, with the offline data dir set."""
    full_env = {**os.environ, "RESIDUAL_DATA_DIR": str(SHARED_DATA), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout
    )

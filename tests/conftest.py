"""Shared fixtures: a data directory every machine has, tiny presets, subprocess helpers.

Tests that need data ask for the `data` fixture (alias: `shared_data`). It points $RESIDUAL_DATA_DIR at
../shared/data when that holds TinyShakespeare, else at a generated directory holding the synthetic corpus
(training.synthetic) laid out the same way, so no core test skips on a fresh clone. Set
RESIDUAL_TEST_DATA=synthetic to use the synthetic directory even where ../shared/data exists.
"""

import atexit
import functools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def has_shared_data() -> bool:
    forced = os.environ.get("RESIDUAL_TEST_DATA") == "synthetic"
    return not forced and (SHARED_DATA / "tinyshakespeare" / "input.txt").is_file()


@functools.cache
def data_root() -> Path:
    """../shared/data, or (made once per session, removed at exit) a synthetic data directory."""
    if has_shared_data():
        return SHARED_DATA
    from training.synthetic import write_data_dir

    root = Path(tempfile.mkdtemp(prefix="residual-synthetic-data-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return write_data_dir(root)


@pytest.fixture
def data(monkeypatch) -> Path:
    """$RESIDUAL_DATA_DIR at data_root() for this test (the real corpus where present, else synthetic)."""
    root = data_root()
    monkeypatch.setenv("RESIDUAL_DATA_DIR", str(root))
    return root


@pytest.fixture
def shared_data(data) -> Path:
    """The name older tests use for `data`: the same directory, never a skip."""
    return data


def free_port() -> int:
    """A TCP port nothing listens on now (for torchrun's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_module(module: str, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """python -m module args, in the repo, with $RESIDUAL_DATA_DIR at data_root() unless env says otherwise."""
    full_env = {**os.environ, "RESIDUAL_DATA_DIR": str(data_root()), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout
    )


class InterruptAt:
    """A trainer callback that presses Ctrl-C at one step, as a user would."""

    def __init__(self, step):
        self.step = step

    def on_step(self, trainer, step, loss):
        if step == self.step:
            raise KeyboardInterrupt


def pytest_report_header(config):
    major = version("transformer-lens")
    tl4 = int(major.split(".")[0]) >= 4
    export = "TransformerBridge (interp.tl.bridge)" if tl4 else "HookedTransformer (interp.tl.hooked)"
    return f"transformer-lens {major}: the export tests run against the {export}"


@pytest.fixture(autouse=True)
def _signal_handlers_back():
    """A test that ends a command with a signal leaves its handlers ignored, as a process that is ending
    should (interp.command.signals); this test process goes on, so they come back after each test."""
    yield
    from interp.command.signals import restore

    restore()

# Each target sets up .venv on first use: torch first (a bare `torch` requirement
# would pull a multi-gigabyte CUDA build), then the project with its dev extra.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
# Offline data: ../shared/data when it exists (CI, this workplace); else the loaders download.
SHARED_DATA := $(abspath ../shared/data)
ifneq ($(wildcard $(SHARED_DATA)/tinyshakespeare/input.txt),)
export RESIDUAL_DATA_DIR ?= $(SHARED_DATA)
endif
ARGS ?=

.PHONY: test test-slow routing-test lint setup bench

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -rs --durations=15

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

lint: $(STAMP)
	$(VENV)/bin/ruff check .

routing-test: $(STAMP)
	$(PY) -m experiments.routing_test $(ARGS)

# The training step side by side with a bare nanoGPT-style step (python -m benchmarks.step --help).
bench: $(STAMP)
	$(PY) -m benchmarks.step $(ARGS)

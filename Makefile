# Each target sets up .venv on first use: torch first (a bare `torch` requirement
# would pull a multi-gigabyte CUDA build), then the project with its dev extra and the sae extra (SAELens,
# which needs TransformerLens 3: not in .venv-tl4, whose dev extra leaves it out).
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

.PHONY: test test-slow test-slurm routing-test lint typecheck setup bench setup-tl4 test-tl4 notebook

setup: $(STAMP)

# $(call venv,FOLDER,CONSTRAINTS,EXTRAS): a virtual environment with torch first, then the project.
comma := ,
define venv
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q --upgrade pip
	$(1)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(1)/bin/python -m pip install -q -c $(2) -e '.[$(3)]'
	touch $(1)/.installed
endef

$(STAMP): pyproject.toml constraints/tl3.txt
	$(call venv,$(VENV),constraints/tl3.txt,dev$(comma)sae)

# TransformerLens 4 (TransformerBridge) beside the default 3.x: its own environment, .venv-tl4.
VENV4 := .venv-tl4
PY4 := $(VENV4)/bin/python
STAMP4 := $(VENV4)/.installed

$(STAMP4): pyproject.toml constraints/tl4.txt
	$(call venv,$(VENV4),constraints/tl4.txt,dev)

setup-tl4: $(STAMP4)

# Every test that touches TransformerLens, on 4.x: the export tests run against the bridge there
# (tests/majors.py), HookedTransformer-only checks skip themselves; tests/test_sae.py skips whole, saying why
# (SAELens needs TransformerLens 3).
TL4_TESTS ?= tests/test_bridge.py tests/test_bridge_audit52d.py tests/test_hooked_audit52d.py tests/test_uniformity.py tests/test_hooked.py tests/test_generate.py tests/test_causality.py \
	tests/test_decompose.py tests/test_interop.py tests/test_plots.py tests/test_mixer_registry.py \
	tests/test_model.py tests/test_probes.py \
	tests/test_demo_main.py tests/test_demo_exploratory.py tests/test_demo_activation_patching.py \
	tests/test_demo_attribution_patching.py tests/test_demo_head_detector.py tests/test_demo_edges.py \
	tests/test_readme_python.py tests/test_sae.py
# The bridge modules type-checked against TL 4 too (pyproject.toml [tool.mypy]); a cache apart from .venv's.
# Errors only in the named files: the HookedTransformer modules they import are TL 3 code, checked by `make test`.
test-tl4: $(STAMP4)
	$(VENV4)/bin/mypy --cache-dir .mypy_cache/tl4 --follow-imports=silent interp/tl/bridge.py interp/tl/bridge_adapter.py \
		interp/tl/bridge_generate.py interp/tl/bridge_weights.py interp/tl/bridge_hooks.py
	$(PY4) -m pytest -q -rs $(TL4_TESTS)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -rs --durations=15

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

# The Slurm launcher against a real one-node Slurm (tests/test_slurm.py): the session installs it if missing
# (apt, root), starts munged, slurmctld and slurmd (scripts/slurm-cluster.sh) and stops exactly those at its end.
# Required here: a cluster that cannot start fails the target instead of skipping.
test-slurm: $(STAMP)
	RESIDUAL_SLURM_REQUIRED=1 $(PY) -m pytest -q -rs -m slurm --durations=10 tests/test_slurm.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy on interp/ (files, cache and settings: [tool.mypy] in pyproject.toml); `make test` runs it before pytest.
typecheck: $(STAMP)
	$(VENV)/bin/mypy

# docs/notebook.py (jupytext percent format: the notebook's one source in git; `make test` runs it) in JupyterLab.
# jupytext pairs it with docs/notebook.ipynb (git-ignored, docs/.gitignore): saving in JupyterLab writes both.
# ARGS goes to jupyter lab (e.g. ARGS=--no-browser).
notebook: $(STAMP)
	@test -x $(VENV)/bin/jupyter-lab || { echo "error: JupyterLab is not in $(VENV); install it with: $(PY) -m pip install -c constraints/tl3.txt -e '.[notebook]'" >&2; exit 2; }
	$(VENV)/bin/jupytext --sync docs/notebook.py
	$(VENV)/bin/jupyter lab docs/notebook.ipynb $(ARGS)

routing-test: $(STAMP)
	$(PY) -m experiments.routing_test $(ARGS)

# The training step side by side with a bare nanoGPT-style step (python -m benchmarks.step --help), then
# K solo steps side by side with one ensemble step of K members (python -m benchmarks.ensemble_speed --help).
bench: $(STAMP)
	$(PY) -m benchmarks.step $(ARGS)
	$(PY) -m benchmarks.ensemble_speed

# One prepared command for a GPU at hand for minutes (python -m benchmarks.gpu_check --help): pytest -m cuda, the
# step benchmark, Table 1 with 8 seeds and the routing test at paper-10m, at most 9 minutes on one H200, one table.
# No .venv needed: a bare GPU machine's python3 with torch, the wheels it lacks in .gpu-wheels/ and the corpus in
# .gpu-data/ (both git-ignored, carried along; the --help says how to fill them). ARGS=--dry-run tries it here.
GPU_PY := $(if $(wildcard $(PY)),$(PY),$(PYTHON))
.PHONY: gpu-check
gpu-check:
	$(GPU_PY) -m benchmarks.gpu_check $(ARGS)

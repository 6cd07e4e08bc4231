PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Everything: the demo, tests, linters, benchmarks. `make demo` installs only what it needs.
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
# Most tests wait on sockets and timers, so three workers on two cores finish sooner.
TEST_WORKERS ?= 3

.PHONY: demo test test-core lint lock bench bench-scale image-check clean

# The venv gets no copy of pip of its own (installing one takes longer than the demo's
# packages): the interpreter's pip installs into it, when it has one that can.
$(BIN)/python:
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python --version >/dev/null 2>&1 \
	  || $(BIN)/python -m ensurepip --default-pip >/dev/null
PIP = $(shell $(PYTHON) -m pip --python $(BIN)/python --version >/dev/null 2>&1 \
	&& echo '$(PYTHON) -m pip --python $(BIN)/python' || echo '$(BIN)/python -m pip')

# Every install is of uv.lock, the exact versions (and hashes) the project was tested with:
# `uv sync --frozen` never resolves anew, and fails if the lock is missing. uv is the one
# tool installed by version (pip cannot lock itself); it reads the platform's certificate
# store, as pip does here (a TLS-inspecting proxy's CA). Updating the lock: docs/OPERATIONS.md.
UV_VERSION := 0.13.9
UV := UV_SYSTEM_CERTS=1 UV_PROJECT_ENVIRONMENT=$(VENV) $(BIN)/uv
# --inexact keeps what the lock does not list (uv itself; the demo's venv keeps the extras
# a full install added). Nothing is byte-compiled up front: Python compiles what it imports.
SYNC = $(UV) sync --quiet --frozen --inexact

$(BIN)/uv: | $(BIN)/python
	$(PIP) install --quiet --no-compile 'uv==$(UV_VERSION)'

# The `local` group is gpuops-local (bot/local/pyproject.toml): the simulators, the Slack
# stand-in, the demo. Both installs have it, editable; the image never does.
$(STAMP): pyproject.toml bot/local/pyproject.toml uv.lock | $(BIN)/uv
	$(SYNC) --group local --extra test --extra dev --extra bench
	touch $(STAMP) $(DEMO_STAMP)

# uv installs the demo's packages in about 2 s of CPU where pip takes about 20 (and uv,
# one wheel, takes 3).
$(DEMO_STAMP): pyproject.toml bot/local/pyproject.toml uv.lock | $(BIN)/uv
	$(SYNC) --group local
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/gpuops demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

# The core's own logic on the core harness (no HTTP; see tests/README.md), SQLite only.
test-core: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m 'not postgres' tests/core

lint: $(STAMP)
	$(UV) lock --check --offline
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/hadolint Dockerfile
	$(BIN)/kubernetes-validate --strict --quiet deploy/kubernetes/*.yaml

# Build the image on a minimal Debian base and run it against the simulators and the Slack
# stand-in on this host (root, podman; see deploy/image-check.sh).
image-check: $(STAMP)
	bash deploy/image-check.sh

# e.g. make bench BENCH_ARGS="--compare-gpuops ../before" (another checkout, with its .venv)
BENCH_ARGS ?=
bench: $(STAMP)
	status=0; \
	$(BIN)/python -m bench.run $(BENCH_ARGS) || status=1; \
	$(BIN)/python -m bench.deadlines || status=1; \
	exit $$status

# A year of history and thousands of clusters (docs/BENCHMARKS.md, "Scale"): writes
# bench/results/scale.json; e.g. make bench-scale SCALE_ARGS="--sizes 0,10k --clusters 10,100"
SCALE_ARGS ?=
bench-scale: $(STAMP)
	$(BIN)/python -m bench.scale $(SCALE_ARGS)

# After a change to pyproject.toml's dependencies, or to take newer releases: see
# docs/OPERATIONS.md ("Dependencies and the lock"). LOCK_ARGS=--upgrade takes every newest.
LOCK_ARGS ?=
lock: | $(BIN)/uv
	$(UV) lock $(LOCK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

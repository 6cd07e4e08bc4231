PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Everything: the demo, tests, linters, benchmarks. `make demo` installs only what it needs.
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
# Most tests wait on sockets and timers, so three workers on two cores finish sooner.
TEST_WORKERS ?= 3

.PHONY: demo test test-core lint bench image-check clean

# The venv gets no copy of pip of its own (installing one takes longer than the demo's
# packages): the interpreter's pip installs into it, when it has one that can.
$(BIN)/python:
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python --version >/dev/null 2>&1 \
	  || $(BIN)/python -m ensurepip --default-pip >/dev/null
PIP = $(shell $(PYTHON) -m pip --python $(BIN)/python --version >/dev/null 2>&1 \
	&& echo '$(PYTHON) -m pip --python $(BIN)/python' || echo '$(BIN)/python -m pip')

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip --version >/dev/null 2>&1 || $(BIN)/python -m ensurepip --default-pip
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[demo,test,dev,bench]'
	touch $(STAMP) $(DEMO_STAMP)

# uv installs the demo's packages in about 2 s of CPU where pip takes about 20 (and uv,
# one wheel, takes 3); nothing is byte-compiled up front: the demo compiles what it imports.
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) install --quiet --no-compile uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[demo]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/gpuops demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

# The core's own logic on the core harness (no HTTP; see tests/README.md), SQLite only.
test-core: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m 'not postgres' tests/core

lint: $(STAMP)
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

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

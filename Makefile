PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Most tests wait on sockets and timers, so three workers on two cores finish sooner.
TEST_WORKERS ?= 3

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test,dev,bench]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpuops demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	status=0; \
	$(BIN)/python -m bench.run || status=1; \
	$(BIN)/python -m bench.deadlines || status=1; \
	exit $$status

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

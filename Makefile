# One task runner for developers, CI and the README.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test lint unit run bench bench-engine bench-store bench-e2e bench-replay bench-hot-session bench-bursts clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the project's dependencies change.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check engine store consumer replay migrations tests bench examples
	$(BIN)/mypy engine
	$(BIN)/mypy --strict replay

# The whole suite: lint, unit, scenario, store, consumer, integration and fault tests.
test: lint
	$(BIN)/pytest -q -p no:cacheprovider --cov --cov-report=term:skip-covered $(PYTEST_ARGS)

unit: $(STAMP)
	$(BIN)/pytest -q tests/engine tests/scenarios

run: $(STAMP)
	$(BIN)/turnflow dev $(ARGS)

bench: bench-engine bench-store bench-e2e bench-replay

bench-engine: $(STAMP)
	$(BIN)/python bench/engine_bench.py

bench-store: $(STAMP)
	$(BIN)/python bench/store_bench.py

bench-replay: $(STAMP)
	$(BIN)/python bench/replay_bench.py

bench-e2e: $(STAMP)
	$(BIN)/turnflow bench

# Quiet conversations' latency alone and beside one session with 20,000 waiting inputs.
bench-hot-session: $(STAMP)
	$(BIN)/python bench/hot_session_bench.py $(ARGS)

# Bursts of 3 messages at 200 ms model latency: merging off and on, side by side.
bench-bursts: $(STAMP)
	$(BIN)/python bench/burst_bench.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage

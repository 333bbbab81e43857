# Two commands do everything on a fresh Debian machine:
#   make demo   build the environment, sample data from a real system, run a parallel analysis
#   make test   build the environment and run the whole test suite
#   make check  the quick tier for the change-test loop: the in-process and CLI tests (no mpi, slow or tool)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.trajscale-env-ok

# Tests run on every core and two workers more (pytest-xdist): many tests wait on the processes they
# start (a SLURM job, a stream, a cluster), and the extra workers compute meanwhile (on 2 cores, 4
# workers took make check from 4:47 to 3:35, the same CPU time). A module's tests run on one worker (its fixtures made
# once); tests/tiers.py orders the modules, the slow ones first, and xdist keeps that order.
# Every process the suite starts keeps NumPy's BLAS to one thread, as the command line does (OpenBLAS's
# threads spin at each start: about 0.06 s of CPU in each of the suite's thousands of processes), and
# OpenMP (PyTorch's intra-op threads, deeptime's loops) to one as well: its threads spin-wait between parallel
# regions, CPU the suite's other workers need (tests/ml: 27.7 -> 24.4 s of CPU; the suite's parallelism is its
# workers and the executors' processes, and the tests that check the threads' defaults clear both variables).
# Bytecode is cached as in a user's installation (an environment that turns it off would have every
# process the suite starts compile trajscale's modules again).
# ccache, where installed (make env installs it), keeps the compiled kernels' objects between environments:
# a clean clone's set-up and the package test's wheel build compile only the modules that changed (each
# compiles all of them in about 45 s of CPU otherwise). A CC given on the command line or in the
# environment is left as it is.
ifeq ($(origin CC),default)
ifneq ($(shell command -v ccache),)
export CC := ccache $(shell python3 -c 'import sysconfig; print(sysconfig.get_config_var("CC") or "cc")')
endif
endif
# Cython's translations are kept the same way (setup.py asks cythonize for its cache where CYTHON_CACHE_DIR is
# set): a build translates only the .pyx files whose contents (or Cython, or its options) changed since a build
# before, the package test's sdist-and-wheel build among them (translating all of them is about 14 s of CPU).
# A CYTHON_CACHE_DIR given on the command line or in the environment is kept.
export CYTHON_CACHE_DIR ?= $(HOME)/.cache/cython
WORKERS := $(shell echo $$(( $$(nproc) + 2 )))
PYTEST := PATH="$(CURDIR)/$(VENV)/bin:$$PATH" PYTHONDONTWRITEBYTECODE= OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(PY) -m pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadfile --no-loadscope-reorder

# The import contracts in pyproject.toml ([tool.importlinter]) are checked first, on this tree's sources: a broken
# layer is named in a second, before the tests start.
LINT_IMPORTS := PYTHONPATH="$(CURDIR)/src" $(VENV)/bin/lint-imports --no-logo

.PHONY: env demo test check docs bench clean

env: $(STAMP)

$(STAMP): pyproject.toml scripts/setup-env.sh scripts/compile_runtime.py
	bash scripts/setup-env.sh

demo: env
	$(VENV)/bin/trajscale demo

test: env
	$(LINT_IMPORTS)
	$(PYTEST) --durations=30 tests

check: env
	$(LINT_IMPORTS)
	$(PYTEST) -m "not mpi and not slow and not tool" tests

docs: env
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html

bench: env
	$(PY) benchmarks/read_layouts.py
	$(PY) benchmarks/rmsd.py
	$(PY) benchmarks/cold.py

clean:
	rm -rf demo-output .pytest_cache .import_linter_cache docs/_build docs/generated

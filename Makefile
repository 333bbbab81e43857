# Two commands do everything on a fresh Debian machine:
#   make demo   build the environment, sample data from a real system, run a parallel analysis
#   make test   build the environment and run the whole test suite
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.trajscale-env-ok

.PHONY: env demo test docs bench clean

env: $(STAMP)

$(STAMP): pyproject.toml scripts/setup-env.sh
	bash scripts/setup-env.sh

demo: env
	$(VENV)/bin/trajscale demo

test: env
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q -p no:cacheprovider tests

docs: env
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html

bench: env
	$(PY) benchmarks/read_layouts.py
	$(PY) benchmarks/rmsd.py
	$(PY) benchmarks/cold.py

clean:
	rm -rf demo-output .pytest_cache docs/_build docs/generated

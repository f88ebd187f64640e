# `make demo` and `make test` each build .venv from scratch if it is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
SYSTEM_STAMP := $(VENV)/.system-stamp

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Debian packages for the real-process tests (SLURM, a headless browser); see scripts/
$(SYSTEM_STAMP): scripts/system-packages.txt scripts/install-system-packages.sh $(STAMP)
	bash scripts/install-system-packages.sh
	touch $(SYSTEM_STAMP)

demo: $(STAMP)
	$(VENV)/bin/dpgm demo

test: $(STAMP) $(SYSTEM_STAMP)
	$(PY) -m ruff check dpgm tests benchmarks examples
	$(VENV)/bin/lint-imports
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m benchmarks.counts

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# `make demo` and `make test` each build .venv from scratch if it is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/dpgm demo

test: $(STAMP)
	$(PY) -m ruff check dpgm tests benchmarks
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m benchmarks.counts

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

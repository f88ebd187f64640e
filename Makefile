# `make demo` and `make test` each build .venv from scratch if it is missing, and install the
# locked versions (requirements/*.txt, written by `make lock`) with the pip the venv comes with:
# every package pinned, --no-deps, so pip resolves nothing and never backtracks; --no-compile leaves
# byte-compiling to the first import of each module (3.5x faster: benchmarks/results/install.md).
# That first import writes the bytecode only if PYTHONDONTWRITEBYTECODE is unset: some CI images and
# containers set it, and then every process (each `dpgm` command, each Dask worker) compiles NumPy,
# pandas, xarray, Dask and Zarr from source again: 3.3x the CPU per import, 2.8x per `dpgm` command
# (benchmarks/results/bytecode.md). The recipes run without it.
unexport PYTHONDONTWRITEBYTECODE
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --no-deps --no-compile
RUNTIME_STAMP := $(VENV)/.runtime-stamp
TEST_STAMP := $(VENV)/.test-stamp
DOCS_STAMP := $(VENV)/.docs-stamp
SYSTEM_STAMP := $(VENV)/.system-stamp
# the tests run in this many pytest processes (pytest-xdist, one file per process at a time), each with
# its own 2-worker session cluster; then the tests marked `serial` (timed against the wall clock) alone
TEST_PROCESSES ?= 2
# the platform the lock is resolved for (CI and the project's machines)
LOCK_FOR := --python-version 3.11 --python-platform x86_64-unknown-linux-gnu

.PHONY: demo test docs lint bench clean lock

$(PY):
	$(PYTHON) -m venv $(VENV)

# what `make demo` needs: dpgm's dependencies and matplotlib for its plot
$(RUNTIME_STAMP): requirements/runtime.txt pyproject.toml | $(PY)
	$(PIP) -r requirements/runtime.txt
	$(PIP) -e .
	$(PY) -m pip check
	touch $@

# the tests add the peers (pgmpy, pyAgrum, statsmodels, scikit-learn, hmmlearn), moto's S3 server, linters
$(TEST_STAMP): requirements/test.txt $(RUNTIME_STAMP)
	$(PIP) -r requirements/test.txt
	$(PY) -m pip check
	touch $@

# Sphinx, the PyData theme, numpydoc and MyST for `make docs`, pinned to the test set's versions
$(DOCS_STAMP): requirements/docs.txt $(RUNTIME_STAMP)
	$(PIP) -r requirements/docs.txt
	$(PY) -m pip check
	touch $@

# Debian packages for the real-process tests (SLURM, a headless browser); see scripts/
$(SYSTEM_STAMP): scripts/system-packages.txt scripts/install-system-packages.sh $(TEST_STAMP)
	bash scripts/install-system-packages.sh
	touch $(SYSTEM_STAMP)

demo: $(RUNTIME_STAMP)
	$(VENV)/bin/dpgm demo

test: $(TEST_STAMP) $(SYSTEM_STAMP)
	$(PY) -m ruff check dpgm tests benchmarks examples
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -n $(TEST_PROCESSES) --dist loadfile -m "not serial"
	$(PY) -m pytest -m serial

# the HTML pages of README.md and docs/ and the API reference, into docs/_build/html; a warning fails
docs: $(DOCS_STAMP)
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html

bench: $(TEST_STAMP)
	$(PY) -m benchmarks.counts

# Resolve pyproject.toml's ranges again (today's newest versions) into the locks: the test set first,
# then the runtime and docs sets constrained by it, so a package has one version in all three.
lock: | $(PY)
	$(PY) -m pip install --quiet uv
	$(VENV)/bin/uv pip compile pyproject.toml --extra test --extra plot $(LOCK_FOR) --quiet \
		--custom-compile-command 'make lock' -o requirements/test.txt
	$(VENV)/bin/uv pip compile pyproject.toml --extra plot $(LOCK_FOR) -c requirements/test.txt --quiet \
		--custom-compile-command 'make lock' -o requirements/runtime.txt
	$(VENV)/bin/uv pip compile pyproject.toml --extra docs --extra plot $(LOCK_FOR) -c requirements/test.txt --quiet \
		--custom-compile-command 'make lock' -o requirements/docs.txt

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis docs/_build docs/generated

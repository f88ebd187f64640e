"""Every docstring example of the package runs as written: the ``Examples`` sections are code.

Each module's examples run with :mod:`doctest` in a fresh namespace, their printed output
compared with what the docstring shows (whitespace normalised; ``...`` matches anything).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import dpgm

MODULES = sorted(m.name for m in pkgutil.walk_packages(dpgm.__path__, "dpgm.") if not m.name.endswith("__main__"))


def test_the_package_has_examples_to_run():
    finder = doctest.DocTestFinder()
    examples = sum(len(t.examples) for name in ["dpgm", *MODULES] for t in finder.find(importlib.import_module(name)))
    assert examples >= 100, examples


@pytest.mark.parametrize("name", ["dpgm", *MODULES])
def test_the_examples_of_the_module_run_as_written(name):
    module = importlib.import_module(name)
    failed, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, report=True)
    assert failed == 0, f"{failed} example(s) of {name} printed something else (shown above)"

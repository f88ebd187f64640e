"""What importing a part of dpgm loads, checked in fresh interpreters.

``import dpgm.inference`` (the math: junction trees, propagation) must not load Dask,
distributed or Zarr; and a module path names the module, never a function that
shadows it (``dpgm.stats.counts`` was the function, so ``import dpgm.stats.counts as m``
gave the function).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ENGINES = ("dask", "distributed", "zarr")


def _loaded_after(statement: str) -> list[str]:
    code = f"import sys; {statement}; import json; print(json.dumps([m for m in {ENGINES!r} if m in sys.modules]))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(result.stdout)


@pytest.mark.parametrize("statement", ["import dpgm", "import dpgm.inference", "import dpgm.models",
                                       "import dpgm.algorithms", "import dpgm.glm_families",
                                       "from dpgm.inference.propagation import TreeLayout"])
def test_the_math_loads_no_engine(statement):
    assert _loaded_after(statement) == []


def test_the_engine_is_loaded_when_a_pass_needs_it():
    """The check above can fail: a name that runs passes does load Dask."""
    assert "dask" in _loaded_after("import dpgm; dpgm.counts")


def test_stats_module_paths_are_modules_and_the_public_names_functions():
    code = ("import types, dpgm, dpgm.stats.counts as c, dpgm.stats.moments as m; "
            "print(isinstance(c, types.ModuleType), isinstance(m, types.ModuleType), "
            "dpgm.counts is c.counts, dpgm.moments is m.moments)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.split() == ["True", "True", "True", "True"]

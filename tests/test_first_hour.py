"""A newcomer's first scripts, run as ``python script.py`` in real subprocesses."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.py"


def _run(script: Path, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def _family_loglik(frame: pd.DataFrame, edges: list[tuple[str, str]]) -> float:
    """Maximum log-likelihood of a Bayesian network from pandas counts: sum n(x, pa) log(n(x, pa) / n(pa))."""
    total = 0.0
    for child in frame.columns:
        parents = [p for p, c in edges if c == child]
        family = frame.groupby([*parents, child], observed=True).size()
        if parents:
            parent_totals = family.groupby(level=list(range(len(parents)))).transform("sum")
        else:
            parent_totals = family.sum()
        total += float((family * np.log(family / parent_totals)).sum())
    return total


def test_readme_shows_the_quickstart_script_verbatim():
    readme = (ROOT / "README.md").read_text()
    body = QUICKSTART.read_text().split('"""', 2)[2].strip()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert any(body in block for block in blocks), "README's quick start differs from examples/quickstart.py"


@pytest.mark.slow
def test_quickstart_runs_as_a_script_and_fits_the_data(tmp_path):
    done = _run(QUICKSTART, tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = float(re.search(r"log-likelihood (-?\d+\.\d+)", done.stdout).group(1))

    # oracle: the same store read with xarray alone, counted with pandas
    store = xr.open_zarr(tmp_path / "asia.zarr", mask_and_scale=False, consolidated=False)
    frame = pd.DataFrame({name: pd.Categorical.from_codes(store[name].values, store[name].attrs["states"])
                          for name in store.data_vars if name != "weight"})
    assert len(frame) == 100_000
    import dpgm

    edges = list(dpgm.load_network("asia").edges)
    assert printed == pytest.approx(_family_loglik(frame, edges), rel=0, abs=1e-6)  # printed to 6 decimals
    crosstab = pd.crosstab(frame["smoke"], frame["lung"])
    assert f"yes    {crosstab.loc['yes', 'yes']}  {crosstab.loc['yes', 'no']}" in done.stdout


@pytest.mark.slow
def test_a_script_without_the_main_guard_fails_at_once_saying_why(tmp_path):
    script = tmp_path / "fit.py"
    script.write_text(textwrap.dedent("""
        import dpgm
        truth = dpgm.load_network("asia")
        data = dpgm.sample_bayesian_network(truth, 1_000, seed=0)
        with dpgm.connect(n_workers=2) as client:
            result = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), data, client=client)
        print("fitted", result.loglik)
    """))
    done = _run(script, tmp_path, timeout=120)  # it used to hang forever
    assert done.returncode != 0
    assert "fitted" not in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("dpgm.cluster.UnguardedScript: ")
    assert 'if __name__ == "__main__":' in last
    assert "error: dpgm.connect() ran while a worker process was importing your script" in done.stderr  # workers
    assert "Nanny failed" not in done.stderr  # no chained tracebacks of the cluster's start-up


@pytest.mark.slow
def test_the_same_script_with_the_guard_runs(tmp_path):
    script = tmp_path / "fit.py"
    script.write_text(textwrap.dedent("""
        import dpgm

        if __name__ == "__main__":
            truth = dpgm.load_network("asia")
            data = dpgm.sample_bayesian_network(truth, 1_000, seed=0)
            with dpgm.connect(n_workers=2) as client:
                result = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), data, client=client)
            print("fitted", repr(result.loglik))
    """))
    done = _run(script, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    import dpgm

    truth = dpgm.load_network("asia")
    frame = dpgm.to_pandas(dpgm.sample_bayesian_network(truth, 1_000, seed=0))
    expected = _family_loglik(frame.astype("category"), list(truth.edges))
    assert float(done.stdout.split("fitted ")[1]) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("argv", [["--help"], ["fit", "--help"], ["convert", "--help"], ["info", "--help"]])
def test_help_imports_none_of_the_engine(argv):
    """``dpgm --help`` answers without loading NumPy, xarray, Dask or Zarr (1.7-2.4 s before: it loaded all)."""
    probe = textwrap.dedent(f"""
        import sys
        from dpgm.cli import cli
        try:
            cli.main({argv!r}, standalone_mode=False)
        except SystemExit:
            pass
        print("LOADED", sorted(m for m in ("numpy", "pandas", "xarray", "dask", "distributed", "zarr", "numba")
                               if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "LOADED []"


def test_lazy_public_names_are_the_modules_objects():
    import importlib

    import dpgm

    for name in dpgm.__all__:
        module = importlib.import_module(dpgm._PUBLIC[name])
        assert getattr(dpgm, name) is getattr(module, name), name
    assert set(dpgm.__all__) == set(dpgm._PUBLIC)
    assert dpgm.potentials is importlib.import_module("dpgm.potentials")
    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        dpgm.nonesuch  # noqa: B018

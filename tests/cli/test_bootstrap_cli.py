"""``dpgm bootstrap SPEC DATA --replicates B --out R.zarr``: real subprocesses on the session's cluster.

Oracles:

* :func:`dpgm.bootstrap` in this process, on the same store and seed: the store the command
  wrote, read back by ``xarray.open_zarr``, equals its ``replicates`` (every parameter, the
  per-replicate ``loglik``, ``converged``, ``passes``, the labels, the attributes) to
  ``rel=1e-9``, and the report its standard errors and intervals (the same fits, their
  passes run by another process on the same cluster);
* an independent implementation of the weights: replicate ``b`` of a Bayesian network is
  the plain :func:`dpgm.fit` of the data weighted by Poisson(1) draws recomputed here, by
  SplitMix64 in pure-Python integer arithmetic mod 2**64 and ``scipy.stats.poisson.ppf``
  (the definition of :mod:`dpgm.stats.resample`), and one of its CPTs equals a pandas
  weighted cross-tabulation of the rows, labels matched by name. The counts are integer
  sums, so the tables agree to ``rtol=1e-12`` (only the division rounds).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml
from cli_runs import error_line, run_dpgm, s3_server
from conformance.builders import CASE_IDS, case_named
from poisson_oracle import oracle_weights

import dpgm
from dpgm.data import Schema
from dpgm.spec import build_model

REL = 1e-9
def poisson_weights(n_rows: int, replicate: int, random_state: int) -> np.ndarray:
    """Rows ``0 .. n_rows - 1``'s weights in ``replicate``, recomputed without dpgm (``tests/poisson_oracle.py``)."""
    return oracle_weights(np.arange(n_rows), replicate, random_state).astype(float)


def _asia(tmp_path: Path, rows: int = 1500) -> xr.Dataset:
    data = dpgm.sample_bayesian_network(dpgm.load_network("asia"), rows, seed=5).compute()
    dpgm.write_dataset(data, tmp_path / "asia.zarr", chunk_rows=300)
    (tmp_path / "asia.yaml").write_text(yaml.safe_dump({"model": "bayesian_network", "network": "asia"}))
    return data


def _api(model, store: Path, client, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        return dpgm.bootstrap(model, dpgm.open_dataset(store), client=client, progress=False, **options)


def assert_store_equals(out, expected: xr.Dataset, **open_options) -> xr.Dataset:
    """``xr.open_zarr(out)`` holds ``expected``: the same variables over the same dimensions and labels, values
    to ``REL``, and its attributes (the store adds only dpgm's completion records)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # consolidated metadata: read without a warning
        back = xr.open_zarr(out, **open_options).load()
    assert sorted(back.data_vars) == sorted(expected.data_vars)
    for name, array in expected.data_vars.items():
        assert back[name].dims == array.dims, name
        assert back[name].dtype.kind == array.dtype.kind, name
        np.testing.assert_allclose(back[name].values, array.values, rtol=REL, atol=0, err_msg=name)
    for name, coord in expected.coords.items():
        assert [str(v) for v in back[name].values] == [str(v) for v in coord.values], name
    assert {k: back.attrs[k] for k in expected.attrs} == expected.attrs
    assert set(back.attrs) - set(expected.attrs) == {"dpgm_complete", "dpgm_manifest", "dpgm_schema"}
    assert back.attrs["dpgm_complete"] is True
    return back


def test_the_store_and_report_hold_the_api_bootstrap_and_replicates_are_weighted_fits(tmp_path, client,
                                                                                        shared_cluster):
    data = _asia(tmp_path)
    out, report = tmp_path / "R.zarr", tmp_path / "boot.json"
    run = run_dpgm("bootstrap", tmp_path / "asia.yaml", tmp_path / "asia.zarr", "--replicates", 6,
                   "--random-state", 11, "--out", out, "--report", report, "--level", 0.9, check=True)
    structure = dpgm.BayesianNetwork.from_edges(dpgm.load_network("asia").edges)
    expected = _api(structure, tmp_path / "asia.zarr", client, replicates=6, random_state=11)
    back = assert_store_equals(out, expected.replicates)
    assert back.attrs["random_state"] == 11 and back.attrs["passes"] == 1 and back.sizes["replicate"] == 6

    for line in expected.summary().splitlines():  # the same counts: the same printed digits
        assert line in run.stdout, line
    assert "6 replicates, 1 pass(es) over the data" in run.stdout

    written = json.loads(report.read_text())
    assert written["estimate"]["loglik"] == pytest.approx(expected.estimate.loglik, rel=REL)
    assert (written["passes"], written["replicates"], written["level"], written["random_state"]) == (1, 6, 0.9, 11)
    assert written["replicates_converged"] == 6 and written["seconds"] > 0
    errors, interval = expected.standard_errors, expected.confidence_interval(0.9)
    assert sorted(written["parameters"]) == sorted(expected.parameters)
    for name, figures in written["parameters"].items():
        dims = figures["dims"]
        np.testing.assert_allclose(figures["standard_error"], errors[name].transpose(*dims).values, rtol=REL)
        for bound in ("lower", "upper"):
            np.testing.assert_allclose(figures[bound], interval[name].sel(bound=bound).transpose(*dims).values,
                                       rtol=REL, err_msg=f"{name} {bound}")
        assert figures["coords"] == {d: list(map(str, expected.replicates[d].values)) for d in dims}

    frame = dpgm.to_pandas(data)
    for b in (0, 5):
        weights = poisson_weights(data.sizes["row"], b, 11)
        fitted = dpgm.fit(structure, data.assign(weight=("row", weights))).model
        for variable, cpd in fitted.cpds.items():
            stored = back[f"table:{variable}"].sel(replicate=b)
            np.testing.assert_allclose(stored.values, cpd.sel({d: stored[d].values for d in stored.dims})
                                       .transpose(*stored.dims).values, rtol=1e-12, err_msg=f"{variable} b={b}")
        counts = pd.crosstab(frame["lung"], frame["smoke"], values=weights, aggfunc="sum", dropna=False).fillna(0)
        lung = back["table:lung"].sel(replicate=b).to_pandas()
        np.testing.assert_allclose(lung.loc[counts.index, counts.columns].values,
                                   (counts / counts.sum(axis=0)).values, rtol=1e-12)


@pytest.mark.parametrize("spec_name", CASE_IDS)
def test_every_kind_s_replicates_read_back_from_the_store_as_written(spec_name, tmp_path):
    """The command's writer on the API's replicates of every kind: the parameters' names (``table:class``,
    ``a,b``, ``coefficients.c``, ``scalars.a.intercept``, ``x:term`` dimensions), labels and numbers read back
    from Zarr v3 unchanged, bit for bit."""
    from dpgm.cli.resampling import save_replicates

    case = case_named(spec_name)
    options = dict(case.options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.bootstrap(case.model(), case.data(), replicates=3, random_state=1,
                                method=options.pop("method", None), options=options, progress=False)
    save_replicates(result.replicates, str(tmp_path / "R.zarr"))
    back = assert_store_equals(tmp_path / "R.zarr", result.replicates)
    for name in result.replicates.data_vars:
        assert np.array_equal(back[name].values, result.replicates[name].values), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["R.zarr"]


@pytest.mark.parametrize("spec_name", ["markov_network", "linear_gaussian",
                                       *(pytest.param(name, marks=pytest.mark.slow)
                                         for name in ("log_linear", "gaussian_graphical", "glm"))])
def test_a_complete_data_kind_through_the_command_equals_the_api(spec_name, tmp_path, client, shared_cluster):
    case = case_named(spec_name)
    dpgm.write_dataset(case.data(), tmp_path / "data.zarr", chunk_rows=case.chunk_rows)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(case.spec))
    run_dpgm("bootstrap", tmp_path / "spec.yaml", tmp_path / "data.zarr", "--replicates", 3, "--random-state", 1,
             "--out", tmp_path / "R.zarr", check=True)
    options = dict(case.options)
    expected = _api(case.model(), tmp_path / "data.zarr", client, replicates=3, random_state=1,
                    method=options.pop("method"), options=options)
    assert_store_equals(tmp_path / "R.zarr", expected.replicates)


def test_an_em_bootstrap_reports_the_spread_of_its_stored_replicates(tmp_path, client, shared_cluster):
    """EM replicates start from the fit on the data, seeded by the spec's ``random_state``: the store equals the
    API's; the report's spread equals NumPy on the stored replicates, ``std(ddof=1)`` and ``quantile``
    (linear), to 1e-12."""
    case = case_named("latent_class")
    dpgm.write_dataset(case.data(), tmp_path / "data.zarr", chunk_rows=case.chunk_rows)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({**case.spec, "tol": 1e-3, "n_init": 1}))
    run = run_dpgm("bootstrap", tmp_path / "spec.yaml", tmp_path / "data.zarr", "--replicates", 3, "--out",
                   tmp_path / "R.zarr", "--report", tmp_path / "r.json", "--level", 0.8)
    options = {**{k: v for k, v in case.options.items() if k != "method"}, "tol": 1e-3, "n_init": 1}
    expected = _api(case.model(), tmp_path / "data.zarr", client, replicates=3, method="em", options=options)
    assert_store_equals(tmp_path / "R.zarr", expected.replicates)
    back = xr.open_zarr(tmp_path / "R.zarr").load()
    written = json.loads((tmp_path / "r.json").read_text())
    assert run.returncode == (0 if back["converged"].all() and written["estimate"]["converged"] else 3)
    assert written["replicates_converged"] == int(back["converged"].sum())
    assert sorted(written["parameters"]) == ["table:class", "table:q1", "table:q2", "table:q3", "table:q4"]
    for name, figures in written["parameters"].items():
        stored = back[name].transpose("replicate", *figures["dims"]).values
        np.testing.assert_allclose(figures["standard_error"], stored.std(axis=0, ddof=1), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose([figures["lower"], figures["upper"]], np.quantile(stored, [0.1, 0.9], axis=0),
                                   rtol=1e-12, atol=1e-15)
        assert np.asarray(figures["estimate"]).shape == stored.shape[1:]


def test_a_fit_stopped_at_its_limit_exits_3_with_the_store_written(tmp_path, shared_cluster):
    case = case_named("latent_class")
    dpgm.write_dataset(case.data(), tmp_path / "data.zarr", chunk_rows=case.chunk_rows)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({**case.spec, "max_iter": 2, "tol": 1e-12, "n_init": 1}))
    run = run_dpgm("bootstrap", tmp_path / "spec.yaml", tmp_path / "data.zarr", "--replicates", 2,
                   "--out", tmp_path / "R.zarr", "--report", tmp_path / "r.json")
    assert run.returncode == 3, run.stderr[-3000:]
    assert "the fit on the data did not converge; 2 replicate(s) did not converge" in run.stdout
    back = xr.open_zarr(tmp_path / "R.zarr")
    assert not back["converged"].values.any() and (back["passes"].values <= 2).all()
    assert json.loads((tmp_path / "r.json").read_text())["estimate"]["converged"] is False


def _files(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def test_refusals_come_before_any_work_and_leave_the_outputs_as_they_were(tmp_path):
    _asia(tmp_path, rows=200)
    spec, data, out = tmp_path / "asia.yaml", tmp_path / "asia.zarr", tmp_path / "R.zarr"
    xr.Dataset({"old": ("replicate", [1.0, 2.0])}).to_zarr(out, zarr_format=3, consolidated=False)
    before = _files(out)
    run = run_dpgm("bootstrap", spec, data, "--out", out)
    assert "R.zarr" in error_line(run, 73) and "--overwrite" in run.stderr and "dashboard" not in run.stderr
    assert _files(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["R.zarr", "asia.yaml",
                                                                                     "asia.zarr"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"model": "bayesian_network", "network": "asia", "alpha": 1.0}))
    line = error_line(run_dpgm("bootstrap", bad, data, "--out", tmp_path / "new.zarr"), 78)
    assert "bad.yaml" in line and "alpha" in line
    assert "absent.zarr" in error_line(run_dpgm("bootstrap", spec, tmp_path / "absent.zarr", "--out",
                                                tmp_path / "new.zarr"), 66)
    assert "--replicates" in error_line(run_dpgm("bootstrap", spec, data, "--replicates", 1, "--out",
                                                 tmp_path / "new.zarr"), 2)
    assert "--level" in error_line(run_dpgm("bootstrap", spec, data, "--level", 1, "--out",
                                            tmp_path / "new.zarr"), 2)
    (tmp_path / "taken.json").write_text("{}")
    assert "taken.json" in error_line(run_dpgm("bootstrap", spec, data, "--out", tmp_path / "new.zarr",
                                               "--report", tmp_path / "taken.json"), 73)
    assert not (tmp_path / "new.zarr").exists() and (tmp_path / "taken.json").read_text() == "{}"


def test_overwrite_swaps_the_new_store_in(tmp_path, shared_cluster):
    _asia(tmp_path, rows=400)
    out = tmp_path / "R.zarr"
    xr.Dataset({"old": ("replicate", [1.0, 2.0])}).to_zarr(out, zarr_format=3, consolidated=False)
    run_dpgm("bootstrap", tmp_path / "asia.yaml", tmp_path / "asia.zarr", "--replicates", 2, "--random-state", 4,
             "--out", out, "--overwrite", check=True)
    back = xr.open_zarr(out)
    assert "old" not in back and back.attrs["random_state"] == 4 and back.sizes["replicate"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["R.zarr", "asia.yaml", "asia.zarr"]  # nothing beside it


def test_many_parameter_entries_print_the_summary_s_first_lines_and_count_the_rest(tmp_path, client,
                                                                                     shared_cluster):
    alarm = dpgm.load_network("alarm")
    dpgm.write_dataset(dpgm.sample_bayesian_network(alarm, 2000, seed=2), tmp_path / "alarm.zarr", chunk_rows=1000)
    (tmp_path / "alarm.yaml").write_text(yaml.safe_dump({"model": "bayesian_network", "network": "alarm"}))
    run = run_dpgm("bootstrap", tmp_path / "alarm.yaml", tmp_path / "alarm.zarr", "--replicates", 2,
                   "--out", tmp_path / "R.zarr", check=True)
    data = dpgm.open_dataset(tmp_path / "alarm.zarr")
    model, _, _ = build_model({"model": "bayesian_network", "network": "alarm"}, Schema.from_dataset(data).states)
    expected = _api(model, tmp_path / "alarm.zarr", client, replicates=2)  # the spec's model: its tables' order
    summary = expected.summary().splitlines()
    entries = len(summary) - 2
    printed = run.stdout.splitlines()
    assert printed[:102] == summary[:102]
    assert printed[102].strip() == (f"... {entries - 100:,} more of the {entries:,} parameter entries are not "
                                    "shown (--report holds them all; --out every replicate)")
    assert printed[103].startswith("2 replicates, 1 pass(es) over the data") and len(printed) == 104


@pytest.mark.slow
def test_a_store_at_a_url_holds_the_same_replicates(tmp_path, client, shared_cluster):
    _asia(tmp_path, rows=400)
    with s3_server("dpgm-boot") as options:
        url = "s3://dpgm-boot/runs/R.zarr"
        for _ in range(2):  # the second run replaces the first store (written beside it, copied over it)
            run_dpgm("bootstrap", tmp_path / "asia.yaml", tmp_path / "asia.zarr", "--replicates", 3, "--out", url,
                     "--overwrite", "--storage-options", json.dumps(options), check=True)
        line = error_line(run_dpgm("bootstrap", tmp_path / "asia.yaml", tmp_path / "asia.zarr", "--out", url,
                                   "--storage-options", json.dumps(options)), 73)
        assert url in line
        expected = _api(dpgm.BayesianNetwork.from_edges(dpgm.load_network("asia").edges), tmp_path / "asia.zarr",
                        client, replicates=3)
        assert_store_equals(url, expected.replicates, storage_options=options)

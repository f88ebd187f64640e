"""The dpgm command in real subprocesses: outputs against the Python API, exit codes on bad input."""

from __future__ import annotations

import concurrent.futures
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_runs import run_dpgm

import dpgm

pytestmark = pytest.mark.usefixtures("shared_cluster")  # commands on the session's cluster (cli_runs)

DPGM = [sys.executable, "-m", "dpgm.cli"]


def run(*args, env=None, check=True):
    return run_dpgm(*args, env=env, check=check, timeout=180)


def test_generate_info_counts_end_to_end(tmp_path):
    store = tmp_path / "asia.zarr"
    out = run("generate", "asia", store, "--rows", "3000", "--seed", "5", "--chunk-rows", "1000", "--workers", "2")
    assert "wrote 3,000 rows x 8 variables" in out.stdout
    info = run("info", store).stdout
    assert "3,000 rows in 3 chunks" in info and "smoke" in info
    result = json.loads(run("counts", store, "--scope", "smoke,lung", "--scope", "dysp", "--json", "--workers", "1").stdout)
    expected = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 3000, None, seed=5, chunk_rows=1000)
    tables = dpgm.counts(expected, [("smoke", "lung"), ("dysp",)])
    assert result["n_rows"] == 3000
    assert result["tables"]["smoke,lung"]["counts"] == tables[("smoke", "lung")].values.tolist()
    assert result["tables"]["dysp"]["counts"] == tables[("dysp",)].values.tolist()


def test_convert_csv(tmp_path):
    frame = pd.DataFrame({"a": ["x", "y", None, "x"] * 5, "b": [1.5, 2.5, np.nan, 0.25] * 5})
    frame.to_csv(tmp_path / "in.csv", index=False)
    run("convert", tmp_path / "in.csv", tmp_path / "out.zarr", "--chunk-rows", "6")
    ds = dpgm.open_dataset(tmp_path / "out.zarr").load()
    assert ds.a.values.tolist()[:4] == [0, 1, -1, 0] and ds.a.attrs["states"] == ["x", "y"]
    np.testing.assert_array_equal(ds.b.values, frame.b.to_numpy())


def _one_line_error(result, code):
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_bad_input_exit_codes(tmp_path):
    ds = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 100, tmp_path / "a.zarr", seed=0)
    assert ds.sizes["row"] == 100
    line = _one_line_error(run("counts", tmp_path / "a.zarr", "--scope", "smoke,nope", "--workers", "1", check=False), 65)
    assert "'nope'" in line and "known:" in line
    line = _one_line_error(run("info", tmp_path / "none.zarr", check=False), 66)
    assert "no dataset" in line
    line = _one_line_error(
        run("counts", tmp_path / "a.zarr", "--scope", "smoke", "--scheduler", "tcp://127.0.0.1:9",
            "--connect-timeout", "1", check=False), 69
    )
    assert "no Dask scheduler" in line
    line = _one_line_error(run("generate", "nonet", tmp_path / "b.zarr", "--rows", "10", check=False), 65)
    assert "no shipped network" in line or "neither" in line
    line = _one_line_error(run("generate", "asia", tmp_path / "a.zarr", "--rows", "10", "--workers", "1", check=False), 73)
    assert "--overwrite" in line
    usage = run("counts", check=False)
    assert usage.returncode == 2


def test_help_lists_commands():
    text = run("--help").stdout
    for command in ["generate", "convert", "counts", "info", "demo"]:
        assert command in text
    assert Path(dpgm.__file__).exists()


def test_fit_spec_end_to_end_equals_api(tmp_path):
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, 5000, tmp_path / "a.zarr", seed=8, chunk_rows=1000)
    (tmp_path / "spec.yaml").write_text("model: bayesian_network\nnetwork: asia\nmethod: bayes\nprior: K2\n")
    out = run("fit", tmp_path / "spec.yaml", tmp_path / "a.zarr", "--out", tmp_path / "m.zarr",
              "--report", tmp_path / "r.json", "--workers", "1")
    assert "fitted by bayes" in out.stdout
    saved = dpgm.load(tmp_path / "m.zarr")
    expected = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), ds, method="bayes", prior="K2")
    for v in truth.variables:
        np.testing.assert_array_equal(saved.cpds[v].transpose(*expected.model.cpds[v].dims).values,
                                      expected.model.cpds[v].values)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["loglik"] == expected.loglik and report["converged"] is True


def test_fit_bad_spec_exits_78(tmp_path):
    (tmp_path / "spec.toml").write_text('model = "bayesian_network"\nedges = "nope"\n')
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 100, tmp_path / "a.zarr", seed=0)
    result = run("fit", tmp_path / "spec.toml", tmp_path / "a.zarr", "--out", tmp_path / "m.zarr", check=False)
    assert "edges" in _one_line_error(result, 78)


def test_fit_markov_and_latent_class_specs(tmp_path):
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, 4000, tmp_path / "a.zarr", seed=3, chunk_rows=1000)
    (tmp_path / "mn.yaml").write_text("model: markov_network\ncliques: [[smoke, lung], [lung, either], "
                                      "[either, bronc], [bronc, smoke]]\nmethod: ipf\ntol: 1.0e-10\n")
    run("fit", tmp_path / "mn.yaml", tmp_path / "a.zarr", "--out", tmp_path / "mn.zarr", "--workers", "1")
    saved = dpgm.load(tmp_path / "mn.zarr")
    scopes = [("smoke", "lung"), ("lung", "either"), ("either", "bronc"), ("bronc", "smoke")]
    expected = dpgm.fit(dpgm.MarkovNetwork.from_cliques(scopes, truth.states), ds, method="ipf", tol=1e-10)
    for s in scopes:
        np.testing.assert_allclose(saved.potentials[s].values, expected.model.potentials[s].values, rtol=1e-12)
    (tmp_path / "lca.yaml").write_text("model: latent_class\nn_classes: 2\nobserved: [xray, dysp, tub]\n"
                                       "random_state: 0\nmax_iter: 50\ntol: 1.0e-6\n")
    out = run("fit", tmp_path / "lca.yaml", tmp_path / "a.zarr", "--out", tmp_path / "lca.zarr", "--workers", "1",
              "--plot", tmp_path / "lca.png", "--report", tmp_path / "lca.json", check=False)
    assert out.returncode in (0, 3), out.stderr
    assert set(dpgm.load(tmp_path / "lca.zarr").variables) == {"class", "xray", "dysp", "tub"}
    import matplotlib.image

    assert matplotlib.image.imread(tmp_path / "lca.png").shape[:2] == (400, 1100)
    history = json.loads((tmp_path / "lca.json").read_text())["history"]
    assert len(history) >= 2 and f"convergence plot saved to {tmp_path / 'lca.png'}" in out.stdout


def test_drop_makes_an_observed_column_latent_from_the_command_line(tmp_path):
    """--drop (or 'drop:' in the spec) removes the column, so 'latent:' may name it: the same EM as Python's
    fit on the data without that column."""
    truth = dpgm.load_network("asia")
    store = tmp_path / "asia.zarr"
    dpgm.sample_bayesian_network(truth, 3000, store, seed=2, chunk_rows=1000)
    edges = [list(e) for e in truth.edges]
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"model": "bayesian_network", "edges": edges, "latent": {"either": ["yes", "no"]},
                                "random_state": 1, "max_iter": 500, "tol": 1e-6}))
    in_spec = tmp_path / "spec-drop.yaml"
    in_spec.write_text(json.dumps({**json.loads(spec.read_text()), "drop": ["either"]}))
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:  # four independent processes
        refused = pool.submit(run, "fit", spec, store, "--out", tmp_path / "m0.zarr", "--workers", "1", check=False)
        fits = [pool.submit(run, "fit", spec, store, "--out", tmp_path / "m1.zarr", "--drop", "either", "--workers", "1"),
                pool.submit(run, "fit", in_spec, store, "--out", tmp_path / "m2.zarr", "--workers", "1")]
        unknown = pool.submit(run, "fit", spec, store, "--out", tmp_path / "m3.zarr", "--drop", "nope", check=False)
    refused, unknown = refused.result(), unknown.result()
    for fit in fits:
        fit.result()  # raises with the process's stderr if it failed
    assert refused.returncode == 78 and "--drop either" in refused.stderr
    structure = dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)
    expected = dpgm.fit(structure, dpgm.open_dataset(store).drop_vars("either"), method="em", random_state=1,
                        max_iter=500, tol=1e-6)
    for path in ("m1.zarr", "m2.zarr"):
        fitted = dpgm.load(tmp_path / path)
        for v in truth.variables:
            np.testing.assert_allclose(fitted.cpds[v].values, expected.model.cpds[v].values, rtol=1e-12)
    assert unknown.returncode == 78 and "cannot drop ['nope']" in unknown.stderr


def test_batch_logs_get_plain_progress_lines_and_quiet_drops_them(tmp_path):
    """stderr is a pipe here, as in a batch job: passes report on the 'dpgm' logger, no terminal bar."""
    store = tmp_path / "asia.zarr"
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 20_000, store, seed=1, chunk_rows=2000)
    loud = run("counts", store, "--scope", "smoke,lung", "--workers", "1")
    assert re.search(r"(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d dpgm: pass dpgm-counts finished [\d.]+ s$", loud.stderr)
    assert "\r" not in loud.stderr
    quiet = run("-q", "counts", store, "--scope", "smoke,lung", "--workers", "1")
    assert "dpgm: pass" not in quiet.stderr
    assert quiet.stdout == loud.stdout

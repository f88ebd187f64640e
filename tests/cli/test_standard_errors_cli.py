"""``dpgm fit SPEC DATA --out M --standard-errors``: a real subprocess on the session's cluster.

Oracle: statsmodels' ``proportion_confint(method="normal")`` on the rows of each parent configuration
(pandas counts) for a CPT, rel 1e-9; the report's standard errors equal the API's
``FitResult.standard_errors`` (checked against statsmodels in ``tests/api/test_standard_errors.py``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from cli_runs import error_line, run_dpgm

import dpgm


def test_fit_reports_standard_errors_and_wald_intervals(tmp_path, shared_cluster):
    from statsmodels.stats.proportion import proportion_confint

    data = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 3000, seed=4).compute()
    dpgm.write_dataset(data, tmp_path / "asia.zarr", chunk_rows=700)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"model": "bayesian_network", "network": "asia"}))
    run = run_dpgm("fit", tmp_path / "spec.yaml", tmp_path / "asia.zarr", "--out", tmp_path / "m.zarr", "--report",
                   tmp_path / "r.json", "--standard-errors", check=True)
    assert "standard errors (asymptotic) and 95% Wald intervals:" in run.stdout
    written = json.loads((tmp_path / "r.json").read_text())["standard_errors"]
    lung = written["table:lung"]
    assert lung["dims"] == ["lung", "smoke"]
    frame = dpgm.to_pandas(data)
    for j, smoke in enumerate(lung["coords"]["smoke"]):
        rows = frame[frame["smoke"] == smoke]
        n = len(rows)
        for i, state in enumerate(lung["coords"]["lung"]):
            count = int((rows["lung"] == state).sum())
            low, high = proportion_confint(count, n, alpha=0.05, method="normal")
            assert lung["standard_error"][i][j] == pytest.approx(np.sqrt(count / n * (1 - count / n) / n), rel=1e-9)
            assert [lung["lower"][i][j], lung["upper"][i][j]] == pytest.approx([low, high], rel=1e-9)
    expected = dpgm.fit(dpgm.BayesianNetwork.from_edges(dpgm.load_network("asia").edges), data).standard_errors
    for name, figures in written.items():
        got = np.array(figures["standard_error"], dtype=float)
        want = expected[name].transpose(*figures["dims"]).values
        np.testing.assert_allclose(got, want, rtol=1e-9)


def test_standard_errors_of_a_kind_without_them_are_refused_before_the_fit(tmp_path):
    rng = np.random.default_rng(0)
    import pandas as pd

    dpgm.write_dataset(dpgm.from_pandas(pd.DataFrame(rng.normal(size=(300, 2)), columns=["a", "b"])),
                       tmp_path / "x.zarr")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"model": "gaussian_graphical", "edges": [["a", "b"]],
                                                           "method": "glasso", "alpha": 0.1}))
    run = run_dpgm("fit", tmp_path / "spec.yaml", tmp_path / "x.zarr", "--out", tmp_path / "m.zarr",
                   "--standard-errors")
    line = error_line(run, 78)
    assert "GaussianGraphicalModel fitted by glasso has no asymptotic standard errors" in line
    assert "dpgm bootstrap" in line
    assert not (tmp_path / "m.zarr").exists()


def test_standard_errors_of_a_penalised_fit_are_refused_before_the_fit(tmp_path):
    data = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 500, seed=1).compute()
    dpgm.write_dataset(data, tmp_path / "asia.zarr")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"model": "log_linear", "margins": [["smoke", "lung"]],
                                                        "method": "lbfgs", "l1": 0.5}))
    run = run_dpgm("fit", tmp_path / "spec.yaml", tmp_path / "asia.zarr", "--out", tmp_path / "m.zarr",
                   "--standard-errors")
    assert "a fit penalised by l1 has no asymptotic standard errors" in error_line(run, 78)
    assert not (tmp_path / "m.zarr").exists()


def test_an_em_fit_reports_the_observed_information_standard_errors(tmp_path, shared_cluster):
    """A Gaussian mixture fitted by EM from a spec: the report's standard errors equal the API's (checked against a
    numerical Hessian of SciPy's mixture density in ``tests/api/test_em_standard_errors.py``), rel 1e-6."""
    import pandas as pd

    rng = np.random.default_rng(2)
    frame = pd.DataFrame(np.concatenate([rng.normal(0, 1, (300, 2)), rng.normal(3, 0.8, (200, 2))]),
                         columns=["a", "b"])
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "x.zarr", chunk_rows=150)
    spec = {"model": "gaussian_mixture", "n_components": 2, "variables": ["a", "b"], "random_state": 0,
            "tol": 1e-10}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    run = run_dpgm("fit", tmp_path / "spec.yaml", tmp_path / "x.zarr", "--out", tmp_path / "m.zarr", "--report",
                   tmp_path / "r.json", "--standard-errors", check=True)
    assert "standard errors (asymptotic)" in run.stdout
    written = json.loads((tmp_path / "r.json").read_text())["standard_errors"]
    expected = dpgm.fit(dpgm.GaussianMixture(2, ["a", "b"]), dpgm.from_pandas(frame), random_state=0,
                        tol=1e-10).standard_errors
    assert set(written) == set(expected.data_vars)
    for name, figures in written.items():
        np.testing.assert_allclose(np.array(figures["standard_error"], dtype=float),
                                   expected[name].transpose(*figures["dims"]).values, rtol=1e-6, err_msg=name)


def test_an_em_fit_with_too_many_parameters_for_the_observed_information_is_refused_before_the_fit(tmp_path):
    from dpgm.api.observed_information import MAX_MOVES

    questions = {f"q{i}": ["a", "b", "c"] for i in range(8)}
    truth = dpgm.latent_class_model(questions, 3).randomized(np.random.default_rng(0))
    dpgm.write_dataset(dpgm.sample_bayesian_network(truth, 200, None, seed=1).drop_vars("class"),
                       tmp_path / "q.zarr")
    spec = {"model": "latent_class", "n_classes": 3, "observed": sorted(questions)}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    run = run_dpgm("fit", tmp_path / "spec.yaml", tmp_path / "q.zarr", "--out", tmp_path / "m.zarr",
                   "--standard-errors")
    line = error_line(run, 78)
    assert f"at most {MAX_MOVES}" in line and "dpgm bootstrap" in line
    assert not (tmp_path / "m.zarr").exists()

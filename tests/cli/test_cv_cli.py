"""``dpgm cv SPEC [SPEC...] DATA``: a real subprocess on the session's cluster against the API's numbers.

Oracle: :func:`dpgm.cross_validate` in this process on the same specifications and folds (whose numbers
``tests/api/test_cross_validation.py`` checks against pgmpy, scikit-learn and statsmodels); the report
equals it to ``rel=1e-9`` (the same fits, passes on another cluster).
"""

from __future__ import annotations

import json

import pytest
import yaml
from cli_runs import error_line, run_dpgm

import dpgm


def _specs(tmp_path):
    truth = dpgm.load_network("asia")
    specs = {"asia": {"model": "bayesian_network", "network": "asia", "method": "bayes"},
             "chain": {"model": "bayesian_network", "edges": [["smoke", "lung"], ["lung", "either"]],
                       "variables": truth.variables, "method": "bayes"}}
    paths = []
    for name, spec in specs.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(json.loads(json.dumps(spec))))
        paths.append(path)
    data = dpgm.sample_bayesian_network(truth, 1500, seed=5).compute()
    dpgm.write_dataset(data, tmp_path / "asia.zarr", chunk_rows=300)
    return paths, data


def test_cv_prints_the_candidates_and_reports_what_the_api_computes(tmp_path, shared_cluster):
    paths, data = _specs(tmp_path)
    report = tmp_path / "cv.json"
    run = run_dpgm("cv", *paths, tmp_path / "asia.zarr", "--folds", 3, "--random-state", 7, "--report", report,
                   check=True)
    assert "chosen: asia" in run.stdout and "2 passes over the data" in run.stdout
    truth = dpgm.load_network("asia")
    chain = dpgm.BayesianNetwork.from_edges([("smoke", "lung"), ("lung", "either")], variables=truth.variables)
    expected = dpgm.cross_validate({"asia": dpgm.Candidate(dpgm.BayesianNetwork.from_edges(truth.edges), "bayes"),
                                    "chain": dpgm.Candidate(chain, "bayes")}, data, folds=3, random_state=7)
    written = json.loads(report.read_text())
    assert written["chosen"] == "asia" and written["passes"] == 2
    for name in ("asia", "chain"):
        got = written["candidates"][name]
        assert got["loglik"] == pytest.approx(expected.loglik.sel(candidate=name).values.tolist(), rel=1e-9)
        assert got["bic"] == pytest.approx(float(expected.bic.sel(candidate=name)), rel=1e-9)
        assert f"{float(expected.mean_loglik_per_row.sel(candidate=name)):.6f}" in run.stdout


def test_cv_refusals_name_the_culprit(tmp_path):
    paths, _ = _specs(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"model": "bayesian_network", "network": "asia", "alpha": 1.0}))
    assert "bad.yaml" in error_line(run_dpgm("cv", paths[0], bad, tmp_path / "asia.zarr"), 78)
    assert "absent.zarr" in error_line(run_dpgm("cv", paths[0], tmp_path / "absent.zarr"), 66)
    narrow = tmp_path / "narrow.yaml"
    narrow.write_text(yaml.safe_dump({"model": "bayesian_network", "edges": [["smoke", "lung"]]}))
    assert "not comparable" in error_line(run_dpgm("cv", paths[0], narrow, tmp_path / "asia.zarr"), 78)
    (tmp_path / "taken.json").write_text("{}")
    line = error_line(run_dpgm("cv", paths[0], tmp_path / "asia.zarr", "--report", tmp_path / "taken.json"), 73)
    assert "taken.json" in line

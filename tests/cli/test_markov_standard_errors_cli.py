"""``dpgm fit SPEC DATA --out M --standard-errors`` for a ``markov_network`` spec: a real subprocess on the
session's cluster.

Oracle: statsmodels' Poisson GLM on the contingency table of the same rows (pandas counts) with the
treatment-coded hierarchical design of the cliques: each potential entry is ``exp`` of a sum of its
coefficients, its standard error ``phi sqrt(L cov L')`` (rel 1e-6); the saved model's potentials are the
report's estimates.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import statsmodels.api as sm
import yaml
from cli_runs import run_dpgm

import dpgm

CLIQUES = [["smoke", "lung"], ["smoke", "bronc"], ["lung", "bronc", "dysp"]]


def test_markov_network_fit_reports_the_canonical_potentials_errors_and_intervals(tmp_path, shared_cluster):
    data = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 6000, seed=8).compute()
    dpgm.write_dataset(data, tmp_path / "asia.zarr", chunk_rows=1500)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"model": "markov_network", "cliques": CLIQUES,
                                                        "tol": 1e-12}))
    run = run_dpgm("fit", tmp_path / "spec.yaml", tmp_path / "asia.zarr", "--out", tmp_path / "m.zarr", "--report",
                   tmp_path / "r.json", "--standard-errors", check=True)
    assert "standard errors (asymptotic) and 95% Wald intervals:" in run.stdout
    assert "lung,bronc,dysp[yes, yes, yes]" in run.stdout
    written = json.loads((tmp_path / "r.json").read_text())["standard_errors"]
    assert sorted(written) == sorted(",".join(c) for c in CLIQUES)

    variables = ["smoke", "lung", "bronc", "dysp"]
    frame = dpgm.to_pandas(data)[variables]
    states = {v: ["yes", "no"] for v in variables}
    cells = list(itertools.product(*(states[v] for v in variables)))
    counts = frame.value_counts().reindex(cells, fill_value=0).to_numpy()
    terms, seen = {}, []
    for clique in CLIQUES:  # each subset in the first clique holding it
        subsets = [tuple(clique[i] for i in chosen) for size in range(1, len(clique) + 1)
                   for chosen in itertools.combinations(range(len(clique)), size)]
        terms[tuple(clique)] = [a for a in subsets if not any(set(a) <= set(c) for c in seen)]
        seen.append(clique)
    columns = [term for clique in terms.values() for term in clique]  # binary: one non-reference cell each
    design = np.array([[1.0] + [float(all(dict(zip(variables, cell, strict=True))[v] == "no" for v in term))
                                for term in columns] for cell in cells])
    glm = sm.GLM(counts, design, family=sm.families.Poisson()).fit(tol=1e-13, maxiter=100)
    saved = dpgm.load(str(tmp_path / "m.zarr"))
    for clique, figures in written.items():
        scope = tuple(clique.split(","))
        assert figures["dims"] == list(scope)
        for index in itertools.product(range(2), repeat=len(scope)):
            at = {v: states[v][i] for v, i in zip(scope, index, strict=True)}
            combination = np.array([0.0] + [float(term in terms[scope] and all(at[v] == "no" for v in term))
                                            for term in columns])
            phi = np.exp(combination @ glm.params)
            se = phi * np.sqrt(combination @ glm.cov_params() @ combination)
            entry = figures["estimate"]
            standard_error = figures["standard_error"]
            lower, upper = figures["lower"], figures["upper"]
            for i in index:
                entry, standard_error, lower, upper = entry[i], standard_error[i], lower[i], upper[i]
            assert entry == pytest.approx(phi, rel=1e-6)
            assert standard_error == pytest.approx(se, rel=1e-6, abs=1e-12)
            assert [lower, upper] == pytest.approx([phi - 1.959963984540054 * se, phi + 1.959963984540054 * se],
                                                   rel=1e-6, abs=1e-12)
            assert float(saved.potentials[scope].sel(at)) == pytest.approx(entry, rel=1e-12)


def test_standard_errors_that_the_fit_shows_impossible_exit_78_after_saving_the_model(tmp_path, shared_cluster):
    """An empty margin cell (no row has smoke=yes and lung=yes) leaves a zero potential, which has no canonical
    form: known only after the pass, so the model and report are written, then one line and exit 78."""
    from cli_runs import error_line

    data = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 2000, seed=3).compute()
    frame = dpgm.to_pandas(data)
    keep = ~((frame["smoke"] == "yes") & (frame["lung"] == "yes"))
    dpgm.write_dataset(data.isel(row=np.nonzero(keep.to_numpy())[0]), tmp_path / "asia.zarr")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"model": "markov_network",
                                                        "cliques": [["smoke", "lung"], ["smoke", "bronc"]]}))
    run = run_dpgm("fit", tmp_path / "spec.yaml", tmp_path / "asia.zarr", "--out", tmp_path / "m.zarr", "--report",
                   tmp_path / "r.json", "--standard-errors")
    line = error_line(run, 78)
    assert "--standard-errors" in line and "dpgm.bootstrap" in line
    assert (tmp_path / "m.zarr").exists() and "standard_errors" not in json.loads((tmp_path / "r.json").read_text())
    fitted = dpgm.load(tmp_path / "m.zarr")
    assert float(fitted.potentials[("smoke", "lung")].sel(smoke="yes", lung="yes")) == 0.0

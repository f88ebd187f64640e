"""Structural zeros as part of the model: every inference path, large models, EM, bad masks.

Oracles: brute-force enumeration of the joint written here with NumPy (the
model's potentials times the indicator of the allowed cells), and statsmodels'
Poisson GLM fitted on the cells that are not structural zeros.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import xarray as xr

import dpgm
from dpgm.algorithms.tables import MAX_JOINT_CELLS

STATES = {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"], "c": ["c0", "c1"], "d": ["d0", "d1"]}


def _random_network(seed: int, scopes, zero_cells) -> dpgm.MarkovNetwork:
    rng = np.random.default_rng(seed)
    potentials = {s: xr.DataArray(rng.uniform(0.2, 2.0, [len(STATES[v]) for v in s]), dims=s,
                                  coords={v: STATES[v] for v in s}) for s in scopes}
    mask = xr.DataArray(np.zeros((3, 3, 2), dtype=bool), dims=("a", "b", "c"),
                        coords={v: STATES[v] for v in "abc"})
    for cell in zero_cells:
        mask.values[cell] = True
    return dpgm.MarkovNetwork(potentials, structural_zeros=mask)


def _brute_joint(model: dpgm.MarkovNetwork) -> np.ndarray:
    """The normalized joint over (a, b, c, d), potentials times the allowed-cell indicator."""
    variables = list(model.variables)
    letters = dict(zip(variables, "wxyz", strict=False))
    terms, operands = [], []
    for scope, table in model.potentials.items():
        terms.append("".join(letters[v] for v in scope))
        operands.append(table.values)
    mask = model.structural_zeros
    terms.append("".join(letters[str(v)] for v in mask.dims))
    operands.append(~mask.values)
    joint = np.einsum(",".join(terms) + "->" + "".join(letters[v] for v in variables), *operands)
    return joint / joint.sum()


# the zeros' scope (a, b, c) lies in no single potential's scope
SCOPES = [("a", "b"), ("b", "c"), ("c", "d")]
ZERO_CELLS = [(0, 0, 0), (1, 2, 1), (2, 1, 0)]


@pytest.fixture(scope="module")
def network():
    return _random_network(3, SCOPES, ZERO_CELLS)


def test_every_query_applies_the_zeros(network):
    joint = _brute_joint(network)
    variables = list(network.variables)
    order = [variables.index(v) for v in "abcd"]
    joint_abcd = np.transpose(joint, order)
    # marginal of the zeros' own scope: exactly 0 on them, enumeration elsewhere (rel 1e-12)
    table = dpgm.marginal(network, ("a", "b", "c")).values
    expected = joint_abcd.sum(axis=3)
    assert all(table[cell] == 0.0 for cell in ZERO_CELLS)
    np.testing.assert_allclose(table, expected, rtol=1e-12, atol=1e-15)
    post = dpgm.marginals(network, {"d": "d1"})
    conditional = joint_abcd[..., 1] / joint_abcd[..., 1].sum()
    np.testing.assert_allclose(post["a"].values, conditional.sum(axis=(1, 2)), rtol=1e-12)
    # log Z of the model with its zeros: log of the unnormalized sum
    unnormalized = np.einsum("ab,bc,cd,abc->", *(network.potentials[s].values for s in SCOPES),
                             ~network.structural_zeros.values)
    assert dpgm.log_partition(network) == pytest.approx(np.log(unnormalized), rel=1e-12)
    # MAP never lands on a structural zero and reaches the brute-force maximum
    best = dpgm.map_assignment(network)
    assert best == dict(zip("abcd", (STATES[v][i] for v, i in zip("abcd", np.unravel_index(
        np.argmax(joint_abcd), joint_abcd.shape), strict=True)), strict=True))


def test_batched_posteriors_and_predict_proba_apply_the_zeros(network):
    joint = np.transpose(_brute_joint(network), [list(network.variables).index(v) for v in "abcd"])
    tree = dpgm.JunctionTree(network)
    codes = np.array([[0, 0], [1, 1], [2, -1], [-1, 1]])  # (a, c) observed; -1 missing
    _, post = tree.posteriors(codes, ["a", "c"], targets=["b"])
    for row, (a, c) in enumerate(codes):
        sub = joint[a if a >= 0 else slice(None)]
        sub = sub if a >= 0 else sub.sum(axis=0)
        sub = sub[:, c, :] if c >= 0 else sub.sum(axis=1)
        expected = sub.sum(axis=-1)
        np.testing.assert_allclose(post["b"][row], expected / expected.sum(), rtol=1e-12)
    frame = pd.DataFrame({"a": pd.Categorical(["a0", "a1"], STATES["a"]),
                          "c": pd.Categorical(["c0", "c1"], STATES["c"])})
    proba = dpgm.predict_proba(network, dpgm.from_pandas(frame), "b").values
    np.testing.assert_allclose(proba[0], joint[0, :, 0, :].sum(-1) / joint[0, :, 0, :].sum(), rtol=1e-12)
    assert proba[0, 0] == 0.0  # (a0, b0, c0) is a structural zero


def test_save_load_and_uai_keep_the_zeros(network, tmp_path):
    network.save(tmp_path / "mn.zarr")
    loaded = dpgm.load(tmp_path / "mn.zarr")
    assert loaded.structural_zeros.equals(network.structural_zeros)
    np.testing.assert_array_equal(dpgm.marginal(loaded, ("a", "b", "c")).values,
                                  dpgm.marginal(network, ("a", "b", "c")).values)
    dpgm.write_uai(network, tmp_path / "mn.uai")  # UAI: the zeros become one more 0/1 factor
    again = dpgm.read_uai(tmp_path / "mn.uai", names=list(network.variables))
    np.testing.assert_allclose(dpgm.marginal(again, ("a", "b", "c")).values,
                               dpgm.marginal(network, ("a", "b", "c")).values, rtol=1e-12, atol=0)


def _quasi_table(seed: int) -> xr.DataArray:
    rng = np.random.default_rng(seed)
    counts = rng.poisson(rng.gamma(3.0, 30.0, (4, 4))).astype(float)
    np.fill_diagonal(counts, 0.0)
    labels = ["s0", "s1", "s2", "s3"]
    return xr.DataArray(counts, dims=("origin", "destination"), coords={"origin": labels, "destination": labels})


def _quasi_glm(table: xr.DataArray) -> np.ndarray:
    k = table.shape[0]
    cells = [(i, j) for i in range(k) for j in range(k) if i != j]
    design = np.array([[1.0] + [float(i == r) for r in range(1, k)] + [float(j == c) for c in range(1, k)]
                       for i, j in cells])
    fit = sm.GLM(np.array([table.values[c] for c in cells]), design, family=sm.families.Poisson()).fit(tol=1e-14)
    fitted = np.zeros((k, k))
    for cell, value in zip(cells, fit.fittedvalues, strict=True):
        fitted[cell] = value
    return fitted


@pytest.mark.parametrize("method", ["ipf", "gis", "lbfgs"])
def test_quasi_independence_in_a_model_too_large_to_enumerate(method):
    """A forest: quasi-independence of (origin, destination) beside 19 isolated binary variables
    (2**19 * 16 cells > MAX_JOINT_CELLS), so the junction-tree engines carry the zeros."""
    table = _quasi_table(11)
    rng = np.random.default_rng(0)
    cells = np.repeat(np.arange(16), table.values.ravel().astype(int))
    frame = pd.DataFrame({
        "origin": pd.Categorical.from_codes(cells // 4, ["s0", "s1", "s2", "s3"]),
        "destination": pd.Categorical.from_codes(cells % 4, ["s0", "s1", "s2", "s3"]),
    })
    extra = [f"x{i}" for i in range(19)]
    for name in extra:
        frame[name] = pd.Categorical.from_codes(rng.integers(0, 2, len(frame)), ["0", "1"])
    data = dpgm.from_pandas(frame)
    states = {v: list(frame[v].cat.categories) for v in frame.columns}
    assert np.prod([len(s) for s in states.values()]) > MAX_JOINT_CELLS
    margins = [("origin",), ("destination",), *((v,) for v in extra)]
    mask = xr.DataArray(np.eye(4, dtype=bool), dims=("origin", "destination"), coords=table.coords)
    model = (dpgm.MarkovNetwork.from_cliques(margins, states) if method == "ipf"
             else dpgm.LogLinearModel.from_margins(margins, states))
    tol = 1e-9 if method == "gis" else 1e-11  # GIS's slow linear rate: 1e-9 already gives cells to ~1e-8
    result = dpgm.fit(model, data, method=method, structural_zeros=mask, tol=tol, max_iter=5000)
    fitted = dpgm.marginal(result.model, ("origin", "destination")).values * float(table.sum())
    assert np.all(np.diag(fitted) == 0.0)
    expected = _quasi_glm(table)
    off = ~np.eye(4, dtype=bool)
    # L-BFGS stops on the gradient, whose size bounds the cells' relative error near 1e-8
    np.testing.assert_allclose(fitted[off], expected[off], rtol=1e-6)


@pytest.mark.parametrize("kind", ["markov", "log_linear"])
def test_em_with_complete_data_and_zeros_reaches_the_glm_fit(kind):
    table = _quasi_table(12)
    states = {v: list(table.coords[v].values) for v in table.dims}
    mask = xr.DataArray(np.eye(4, dtype=bool), dims=table.dims, coords=table.coords)
    margins = [("origin",), ("destination",)]
    model = (dpgm.MarkovNetwork.from_cliques(margins, states) if kind == "markov"
             else dpgm.LogLinearModel.from_margins(margins, states))
    result = dpgm.fit(model, table, method="em", structural_zeros=mask, tol=1e-13, max_iter=500)
    assert result.model.structural_zeros.equals(mask)
    fitted = dpgm.marginal(result.model, ("origin", "destination")).values * float(table.sum())
    expected = _quasi_glm(table)
    assert np.all(np.diag(fitted) == 0.0)
    np.testing.assert_allclose(fitted, expected, rtol=1e-6, atol=1e-9)


def test_observations_in_a_structural_zero_cell_are_refused():
    table = _quasi_table(13)
    table[1, 1] = 4.0
    mask = xr.DataArray(np.eye(4, dtype=bool), dims=table.dims, coords=table.coords)
    model = dpgm.MarkovNetwork.from_cliques([("origin",), ("destination",)],
                                            {v: list(table.coords[v].values) for v in table.dims})
    for method in ("ipf", "lbfgs"):
        with pytest.raises(dpgm.DataError, match=r"4 rows fall in cells .*'origin': 's1', 'destination': 's1'"):
            dpgm.fit(model, table, method=method, structural_zeros=mask)


@pytest.mark.parametrize("bad, error, message", [
    (xr.DataArray([True, False], dims=["zz"], coords={"zz": ["0", "1"]}), ValueError, "not in the model"),
    (xr.DataArray([True, False, False, False], dims=["origin"], coords={"origin": list("wxyz")}), ValueError,
     "labels"),
    (xr.DataArray([0.5, 0, 0, 0], dims=["origin"], coords={"origin": ["s0", "s1", "s2", "s3"]}), ValueError,
     "boolean"),
    (xr.DataArray(np.ones(4, dtype=bool), dims=["origin"], coords={"origin": ["s0", "s1", "s2", "s3"]}),
     ValueError, "every cell"),
    (np.eye(4, dtype=bool), TypeError, "DataArray"),
])
def test_bad_masks_are_refused_by_name(bad, error, message):
    table = _quasi_table(14)
    model = dpgm.MarkovNetwork.from_cliques([("origin",), ("destination",)],
                                            {v: list(table.coords[v].values) for v in table.dims})
    with pytest.raises(error, match=message):
        dpgm.fit(model, table, method="ipf", structural_zeros=bad)


def test_closed_form_refuses_zeros_and_names_ipf():
    table = _quasi_table(15)
    model = dpgm.MarkovNetwork.from_cliques([("origin",), ("destination",)],
                                            {v: list(table.coords[v].values) for v in table.dims})
    mask = xr.DataArray(np.eye(4, dtype=bool), dims=table.dims, coords=table.coords)
    with pytest.raises(ValueError, match="method='ipf'"):
        dpgm.fit(model, table, method="closed_form", structural_zeros=mask)


def test_a_refit_keeps_the_model_s_own_zeros():
    table = _quasi_table(16)
    mask = xr.DataArray(np.eye(4, dtype=bool), dims=table.dims, coords=table.coords)
    states = {v: list(table.coords[v].values) for v in table.dims}
    first = dpgm.fit(dpgm.MarkovNetwork.from_cliques([("origin",), ("destination",)], states), table,
                     method="ipf", structural_zeros=mask, tol=1e-12)
    again = dpgm.fit(first.model, table, method="newton", tol=1e-12)
    assert again.g2 == pytest.approx(first.g2, abs=1e-6) and again.df == first.df
    assert list(itertools.chain(np.diag(dpgm.marginal(again.model, table.dims).values))) == [0.0] * 4

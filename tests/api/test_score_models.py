"""``dpgm.score`` for hidden Markov models, GLM conditionals and hybrid networks.

Oracles: hmmlearn's ``CategoricalHMM.score`` per sequence (dpgm's parameters copied in) and, for
sequences with missing steps, enumeration of every hidden path; statsmodels' families'
``loglike_obs`` at the means computed from a pandas design (``get_dummies``) and dpgm's
coefficients; hybrid networks: each node's term computed with SciPy/NumPy from the fitted
parameters, log-sum-exp over the latent states. Tolerance ``rtol=1e-10`` (the same sums in
another order).
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import xarray as xr
from conformance.builders import _sequence_rows
from scipy.special import expit, logsumexp
from scipy.stats import norm

import dpgm
from dpgm.errors import DataError

RTOL = 1e-10


def _quiet_fit(model, data, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        return dpgm.fit(model, data, **options).model


def _sequences(n: int, length: int, seed: int) -> np.ndarray:
    return _sequence_rows(seed, n, length)["obs"].values


def _sequence_data(codes: np.ndarray) -> xr.Dataset:
    return xr.Dataset({"obs": (("row", "time"), codes, {"states": list("abc")})})


@pytest.fixture(scope="module")
def fitted_hmm():
    return _quiet_fit(dpgm.hmm(2, list("abc"), variable="obs"), _sequence_data(_sequences(80, 15, 3)), n_init=2,
                      random_state=0, tol=1e-8)


def test_hmm_equals_hmmlearn_score_per_sequence(fitted_hmm):
    from hmmlearn.hmm import CategoricalHMM

    start, transition, emission = fitted_hmm.arrays()
    theirs = CategoricalHMM(n_components=2)
    theirs.startprob_, theirs.transmat_, theirs.emissionprob_ = start, transition, emission
    theirs.n_features = 3
    codes = _sequences(40, 12, 7)
    scores = dpgm.score(fitted_hmm, _sequence_data(codes))
    assert scores.dims == ("row",) and scores.shape == (40,)
    np.testing.assert_allclose(scores.values, [theirs.score(seq.reshape(-1, 1)) for seq in codes], rtol=RTOL)


def test_hmm_sums_out_missing_steps_as_enumeration_of_hidden_paths(fitted_hmm):
    start, transition, emission = fitted_hmm.arrays()
    codes = _sequences(30, 6, 8)
    codes[np.random.default_rng(1).random(codes.shape) < 0.3] = -1
    codes[0] = -1  # no observation at all: log 1
    expected = []
    for seq in codes:
        total = 0.0
        for path in itertools.product(range(2), repeat=len(seq)):
            p = start[path[0]] * np.prod([transition[a, b] for a, b in itertools.pairwise(path)])
            total += p * np.prod([emission[s, c] for s, c in zip(path, seq, strict=True) if c >= 0])
        expected.append(np.log(total))
    scores = dpgm.score(fitted_hmm, _sequence_data(codes)).values
    np.testing.assert_allclose(scores, expected, rtol=RTOL, atol=1e-14)


def test_hmm_bad_input_names_the_variable(fitted_hmm):
    with pytest.raises(DataError, match="'obs'"):
        dpgm.score(fitted_hmm, _sequence_data(_sequences(5, 4, 0)).rename({"obs": "other"}))
    with pytest.raises(DataError, match="'obs'.*time"):
        dpgm.score(fitted_hmm, xr.Dataset({"obs": (("row",), np.zeros(5, np.int8), {"states": list("abc")})}))


def _regression_frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, n)
    g = rng.integers(0, 3, n)
    eta = 0.3 + 0.8 * x + np.array([0.0, 0.5, -1.0])[g]
    return pd.DataFrame({"x": x, "g": pd.Categorical([f"g{v}" for v in g], categories=["g0", "g1", "g2"]),
                         "y": eta + rng.normal(0, 0.6, n), "count": rng.poisson(np.exp(eta / 2)).astype(float),
                         "event": pd.Categorical(np.where(rng.random(n) < expit(eta), "yes", "no"),
                                                 categories=["no", "yes"])})


@pytest.mark.parametrize(("child", "family", "theirs"), [
    ("y", "gaussian", sm.families.Gaussian()),
    ("count", "poisson", sm.families.Poisson()),
    ("event", "bernoulli", sm.families.Binomial()),
])
def test_glm_conditional_equals_statsmodels_loglike_obs(child, family, theirs):
    frame = _regression_frame(600, 1)
    model = dpgm.fit(dpgm.GLMConditional(child, ["x", "g"], family), dpgm.from_pandas(frame), tol=1e-12).model
    test = _regression_frame(200, 2)
    design = pd.concat([pd.Series(1.0, index=test.index, name="Intercept"), test["x"],
                        pd.get_dummies(test["g"], prefix="g", prefix_sep="[", dtype=float).iloc[:, 1:]], axis=1)
    design.columns = [c if c in ("Intercept", "x") else c + "]" for c in design.columns]
    beta = model.coefficients.sel(term=list(design.columns)).values
    mu = theirs.link.inverse(design.to_numpy() @ beta)
    y = (test[child] == "yes").astype(float).to_numpy() if family == "bernoulli" else test[child].to_numpy()
    expected = theirs.loglike_obs(y, mu, scale=model.scale if family == "gaussian" else 1.0)
    scores = dpgm.score(model, dpgm.from_pandas(test))
    np.testing.assert_allclose(scores.values, expected, rtol=RTOL)
    # a missing child is summed out (log 1); a missing parent of an observed child has no score (NaN)
    holed = test.copy()
    holed.loc[[0, 1], child] = np.nan if family != "bernoulli" else None
    holed.loc[[2, 3], "x"] = np.nan
    holed_scores = dpgm.score(model, dpgm.from_pandas(holed)).values
    assert (holed_scores[[0, 1]] == 0).all() and np.isnan(holed_scores[[2, 3]]).all()
    np.testing.assert_allclose(holed_scores[4:], expected[4:], rtol=RTOL)
    assert np.isnan(float(dpgm.score(model, dpgm.from_pandas(holed)).total))


def _switching_frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, n)
    z = rng.random(n) < 0.4
    y = np.where(z, 1.0 + 2.0 * x, -0.5 - 1.0 * x) + rng.normal(0, np.where(z, 0.5, 0.8))
    return pd.DataFrame({"x": x, "y": y})


def test_hybrid_network_with_a_latent_root_equals_per_node_terms_summed_over_its_states():
    network = dpgm.HybridNetwork([("z", "y"), ("x", "y")], {"x": "gaussian", "y": "gaussian"},
                                 states={"z": ["a", "b"]})
    fitted = _quiet_fit(network, dpgm.from_pandas(_switching_frame(700, 7)), method="em", n_init=2, random_state=0)
    test = _switching_frame(200, 8)
    px, py = fitted.conditionals["x"], fitted.conditionals["y"]
    x_term = norm.logpdf(test["x"], float(px.coefficients.sel(term="Intercept")), np.sqrt(px.scale))
    by_state = []
    for state in ["a", "b"]:
        c = py.coefficients.sel(z=state)
        mean = float(c.sel(term="Intercept")) + float(c.sel(term="x")) * test["x"].to_numpy()
        sd = np.sqrt(float(py.scale_by_state.sel(z=state)))
        by_state.append(np.log(float(fitted.tables["z"].sel(z=state))) + norm.logpdf(test["y"], mean, sd))
    expected = x_term + logsumexp(by_state, axis=0)
    scores = dpgm.score(fitted, dpgm.from_pandas(test))
    np.testing.assert_allclose(scores.values, expected, rtol=RTOL)
    assert scores.attrs["summed_out"] == ["z"]
    holed = test.copy()
    holed.loc[:9, "y"] = np.nan  # y is a leaf: summed out
    np.testing.assert_allclose(dpgm.score(fitted, dpgm.from_pandas(holed)).values[:10], x_term[:10], rtol=RTOL)


def test_hybrid_network_of_tables_and_glm_nodes_equals_per_node_terms():
    rng = np.random.default_rng(9)
    n = 800
    region = rng.integers(0, 3, n)
    age = rng.normal(40, 10, n)
    income = 20 + np.array([0.0, 5.0, -3.0])[region] + 0.4 * age + rng.normal(0, 4, n)
    default = rng.random(n) < expit(2 - 0.1 * income)
    frame = pd.DataFrame({"region": pd.Categorical(np.array(["n", "s", "w"])[region], categories=["n", "s", "w"]),
                          "age": age, "income": income,
                          "default": pd.Categorical(np.where(default, "yes", "no"), categories=["no", "yes"])})
    network = dpgm.HybridNetwork([("region", "income"), ("age", "income"), ("income", "default")],
                                 {"income": "gaussian", "default": "bernoulli", "age": "gaussian"})
    fitted = dpgm.fit(network, dpgm.from_pandas(frame), tol=1e-12).model
    test = frame.head(150)
    region_term = np.log(fitted.tables["region"].sel(region=test["region"].astype(str).to_numpy()).values)
    ca, ci, cd = (fitted.conditionals[v] for v in ("age", "income", "default"))
    age_term = norm.logpdf(test["age"], float(ca.coefficients.sel(term="Intercept")), np.sqrt(ca.scale))
    dummies = {s: (test["region"] == s).to_numpy(float) for s in ("s", "w")}
    income_mean = (float(ci.coefficients.sel(term="Intercept")) + float(ci.coefficients.sel(term="age")) * test["age"]
                   + sum(float(ci.coefficients.sel(term=f"region[{s}]")) * d for s, d in dummies.items()))
    income_term = norm.logpdf(test["income"], income_mean, np.sqrt(ci.scale))
    p = expit(float(cd.coefficients.sel(term="Intercept")) + float(cd.coefficients.sel(term="income")) * test["income"])
    default_term = np.where(test["default"] == "yes", np.log(p), np.log1p(-p))
    scores = dpgm.score(fitted, dpgm.from_pandas(test))
    np.testing.assert_allclose(scores.values, region_term + age_term + income_term + default_term, rtol=RTOL)
    with pytest.raises(DataError, match="'age'"):
        dpgm.score(fitted, dpgm.from_pandas(test.drop(columns="age")))

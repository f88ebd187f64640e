"""``dpgm.score`` for Gaussian graphical models, linear-Gaussian networks and Gaussian mixtures.

Oracles: SciPy's ``multivariate_normal.logpdf`` (of the observed coordinates' sub-vector and
sub-matrix for rows with NaN: the marginal of a normal), scikit-learn's
``GaussianMixture.score_samples`` with dpgm's fitted parameters copied in, pgmpy's
``LinearGaussianBayesianNetwork`` (its ``to_joint_gaussian`` and ``log_likelihood``) and SciPy's
``norm.logpdf`` per node. Tolerance ``rtol=1e-10``: the same densities through other
factorisations (Cholesky of the covariance here, SciPy's eigendecomposition, scikit-learn's
precision Cholesky) agree to ~1e-13 relative on these well-conditioned covariances.
"""

from __future__ import annotations

import warnings

import networkx as nx
import numpy as np
import pandas as pd
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal, norm

import dpgm
from dpgm.errors import DataError

RTOL = 1e-10


def _rows(n: int, seed: int, columns: list[str], missing: float = 0.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p = len(columns)
    mixing = rng.normal(0, 1, (p, p)) + 2 * np.eye(p)
    x = rng.normal(0, 1, (n, p)) @ mixing.T + np.arange(p)
    x[rng.random((n, p)) < missing] = np.nan
    return pd.DataFrame(x, columns=columns)


def _marginal_logpdf(x: np.ndarray, mean: np.ndarray, covariance: np.ndarray) -> np.ndarray:
    """SciPy's density of each row's observed coordinates (0 for a row with none)."""
    out = np.zeros(len(x))
    for r, row in enumerate(x):
        o = ~np.isnan(row)
        if o.any():
            out[r] = multivariate_normal.logpdf(row[o], mean[o], covariance[np.ix_(o, o)])
    return out


def test_gaussian_graphical_model_equals_scipy_with_nan_rows_marginalised():
    variables = list("abcd")
    train = dpgm.from_pandas(_rows(500, 0, variables))
    fitted = dpgm.fit(dpgm.GaussianGraphicalModel([("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]), train,
                      tol=1e-12)
    model = fitted.model
    frame = _rows(300, 1, variables, missing=0.3)
    scores = dpgm.score(model, dpgm.from_pandas(frame))
    expected = _marginal_logpdf(frame.to_numpy(), model.mean.values, model.covariance.values)
    np.testing.assert_allclose(scores.values, expected, rtol=RTOL)
    assert (frame.isna().all(axis=1) == (scores.values == 0)).all()
    # complete rows: the fitted model's log-likelihood of its training data is the total
    assert float(dpgm.score(fitted.model, train).total) == pytest.approx(fitted.loglik, rel=1e-10)


def test_linear_gaussian_network_equals_pgmpy_and_per_node_scipy():
    from pgmpy.factors.continuous import LinearGaussianCPD
    from pgmpy.models import LinearGaussianBayesianNetwork

    edges = [("a", "c"), ("b", "c"), ("c", "d")]
    rng = np.random.default_rng(2)
    a, b = rng.normal(1, 1, 600), rng.normal(-1, 2, 600)
    c = 0.5 + 0.8 * a - 0.3 * b + rng.normal(0, 0.7, 600)
    d = -1 + 1.5 * c + rng.normal(0, 0.5, 600)
    frame = pd.DataFrame({"a": a, "b": b, "c": c, "d": d})
    model = dpgm.fit(dpgm.LinearGaussianNetwork(edges), dpgm.from_pandas(frame)).model
    theirs = LinearGaussianBayesianNetwork(edges)
    for v in model.variables:
        p = model.parameters[v]
        theirs.add_cpds(LinearGaussianCPD(v, [p["intercept"], *p["coefficients"].values], np.sqrt(p["variance"]),
                                          list(model.parents(v))))
    # complete rows: the sum of each node's normal log density given its parents
    complete = frame.head(200)
    per_node = sum(norm.logpdf(complete[v], model.parameters[v]["intercept"]
                               + complete[list(model.parents(v))].to_numpy() @ model.parameters[v]["coefficients"].values,
                               np.sqrt(model.parameters[v]["variance"])) for v in model.variables)
    scores = dpgm.score(model, dpgm.from_pandas(complete))
    np.testing.assert_allclose(scores.values, per_node, rtol=RTOL)
    # pgmpy's total: SciPy's density of pgmpy's joint normal, which pgmpy rounds to 8 decimals (to_joint_gaussian)
    assert float(scores.total) == pytest.approx(theirs.log_likelihood(complete), rel=1e-8)
    # rows with NaN: SciPy's density of the observed coordinates under the joint normal, built node by node in
    # topological order (Cov(v, u) = sum_p beta_vp Cov(p, u), Var(v) = sum_p beta_vp Cov(p, v) + variance_v)
    holed = complete.mask(np.random.default_rng(3).random(complete.shape) < 0.3)
    order = list(nx.topological_sort(theirs))
    mean, covariance = np.zeros(4), np.zeros((4, 4))
    for i, v in enumerate(order):
        p = model.parameters[v]
        parents = [order.index(u) for u in model.parents(v)]
        beta = p["coefficients"].values
        mean[i] = p["intercept"] + beta @ mean[parents]
        covariance[i, :i] = covariance[:i, i] = beta @ covariance[parents, :i]
        covariance[i, i] = beta @ covariance[parents, i] + p["variance"]
    expected = _marginal_logpdf(holed[order].to_numpy(), mean, covariance)
    np.testing.assert_allclose(dpgm.score(model, dpgm.from_pandas(holed)).values, expected, rtol=RTOL)


@pytest.mark.parametrize("covariance_type", ["full", "diag", "spherical", "tied"])
def test_gaussian_mixture_equals_scikit_learn_score_samples(covariance_type):
    from sklearn.mixture import GaussianMixture

    variables = ["x0", "x1", "x2"]
    rng = np.random.default_rng(4)
    first = rng.random(600) < 0.4
    x = np.where(first[:, None], rng.normal([0, 0, 0], 1.0, (600, 3)), rng.normal([4, 3, -2], 0.7, (600, 3)))
    frame = pd.DataFrame(x, columns=variables)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        model = dpgm.fit(dpgm.GaussianMixture(2, variables, covariance_type), dpgm.from_pandas(frame), n_init=2,
                         random_state=0).model
    theirs = GaussianMixture(2, covariance_type=covariance_type).fit(x[:50])  # then its parameters replaced
    theirs.weights_, theirs.means_ = model.weights.values, model.means.values
    theirs.covariances_ = model.covariances.values
    theirs.precisions_cholesky_ = _precisions_cholesky(model.covariances.values, covariance_type)
    scores = dpgm.score(model, dpgm.from_pandas(frame))
    np.testing.assert_allclose(scores.values, theirs.score_samples(x), rtol=RTOL)
    # rows with NaN: log-sum-exp over components of each component's marginal (SciPy)
    holed = np.where(rng.random(x.shape) < 0.3, np.nan, x)
    covariances = _full(model.covariances.values, covariance_type, 2, 3)
    expected = logsumexp([np.log(w) + _marginal_logpdf(holed, m, c)
                          for w, m, c in zip(model.weights.values, model.means.values, covariances, strict=True)],
                         axis=0)
    holed_scores = dpgm.score(model, dpgm.from_pandas(pd.DataFrame(holed, columns=variables))).values
    np.testing.assert_allclose(holed_scores, expected, rtol=RTOL, atol=1e-14)  # all-NaN rows: log(sum w) ~ 1e-16


def _full(covariances: np.ndarray, covariance_type: str, k: int, p: int) -> np.ndarray:
    if covariance_type == "full":
        return covariances
    if covariance_type == "tied":
        return np.repeat(covariances[None], k, axis=0)
    if covariance_type == "diag":
        return np.stack([np.diag(c) for c in covariances])
    return np.stack([np.eye(p) * c for c in covariances])


def _precisions_cholesky(covariances: np.ndarray, covariance_type: str) -> np.ndarray:
    from sklearn.mixture._gaussian_mixture import _compute_precision_cholesky

    return _compute_precision_cholesky(covariances, covariance_type)


def test_bad_input_is_a_data_error_naming_the_variable():
    variables = list("abcd")
    train = dpgm.from_pandas(_rows(200, 0, variables))
    model = dpgm.fit(dpgm.GaussianGraphicalModel([("a", "b"), ("c", "d")]), train).model
    with pytest.raises(DataError, match="'c'"):
        dpgm.score(model, train.drop_vars("c"))
    codes = pd.Categorical(np.where(np.arange(200) % 2, "u", "v"))
    with pytest.raises(DataError, match="'d'.*categorical"):
        dpgm.score(model, dpgm.from_pandas(_rows(200, 0, variables).assign(d=codes)))
    infinite = _rows(200, 0, variables)
    infinite.loc[3, "b"] = np.inf
    with pytest.raises(DataError, match="'b'.*chunk 0"):
        dpgm.score(model, dpgm.from_pandas(infinite)).compute()

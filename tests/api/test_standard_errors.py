"""``FitResult.standard_errors`` and ``confidence_interval`` against closed forms computed by others.

Oracles: statsmodels' ``proportion_confint(method="normal")`` (the Wald interval of a proportion,
``p -/+ z sqrt(p (1 - p) / n)``) on each CPT column's rows, counted by pandas; the Dirichlet
posterior's standard deviation from SciPy's ``dirichlet.var`` under BDeu; statsmodels' OLS
``bse`` for a GLM's coefficients and its GLM's Wald ``conf_int``. Tolerance: rel 1e-10 (the same closed forms).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import xarray as xr
from treatment_features import treatment_coded_features

import dpgm


def _asia(n: int, seed: int = 0):
    return dpgm.sample_bayesian_network(dpgm.load_network("asia"), n, seed=seed).compute()


def test_cpt_wald_intervals_equal_statsmodels_proportion_confint():
    from statsmodels.stats.proportion import proportion_confint

    data = _asia(5000, seed=3)
    model = dpgm.BayesianNetwork.from_edges([("smoke", "lung"), ("smoke", "bronc"), ("bronc", "dysp"),
                                             ("lung", "dysp")])
    result = dpgm.fit(model, data[["smoke", "lung", "bronc", "dysp"]])
    interval = result.confidence_interval(0.9)
    frame = dpgm.to_pandas(data)
    checked = 0
    table = frame.groupby(["bronc", "lung"], observed=False)["dysp"].value_counts().unstack()
    for (bronc, lung), counts in table.iterrows():
        n = int(counts.sum())
        for state, count in counts.items():
            low, high = proportion_confint(int(count), n, alpha=0.1, method="normal")
            at = {"dysp": state, "bronc": bronc, "lung": lung}
            se = float(result.standard_errors["table:dysp"].sel(at))
            assert se == pytest.approx(np.sqrt(count / n * (1 - count / n) / n), rel=1e-10)
            if 0 < low and high < 1:  # statsmodels clips the interval to [0, 1]
                assert float(interval["table:dysp"].sel({**at, "bound": "lower"})) == pytest.approx(low, rel=1e-10)
                assert float(interval["table:dysp"].sel({**at, "bound": "upper"})) == pytest.approx(high, rel=1e-10)
                checked += 1
    assert checked >= 6


def test_bdeu_standard_errors_are_the_dirichlet_posterior_standard_deviations():
    data = _asia(800, seed=1)
    model = dpgm.BayesianNetwork.from_edges([("smoke", "lung")])
    result = dpgm.fit(model, data[["smoke", "lung"]], method="bayes", equivalent_sample_size=4.0)
    frame = dpgm.to_pandas(data)
    counts = pd.crosstab(frame["lung"], frame["smoke"]).reindex(index=["yes", "no"], columns=["yes", "no"])
    alpha = counts.to_numpy(dtype=float) + 4.0 / (2 * 2)  # BDeu: ess / (q r) per cell
    for j, smoke in enumerate(counts.columns):
        expected = np.sqrt(scipy.stats.dirichlet.var(alpha[:, j]))
        got = result.standard_errors["table:lung"].sel(smoke=smoke).sel(lung=list(counts.index)).values
        np.testing.assert_allclose(got, expected, rtol=1e-10)
    # the smoke table has no parent: one configuration with every row
    p = result.model.cpds["smoke"].values
    expected = np.sqrt(scipy.stats.dirichlet.var(frame["smoke"].value_counts().reindex(["yes", "no"]).to_numpy(float)
                                                 + 4.0 / 2))
    np.testing.assert_allclose(result.standard_errors["table:smoke"].sel(smoke=["yes", "no"]).values, expected,
                               rtol=1e-10)
    assert p.shape == (2,)


def test_glm_standard_errors_equal_statsmodels_bse():
    import statsmodels.api as sm

    rng = np.random.default_rng(2)
    x, z = rng.normal(size=500), rng.normal(size=500)
    y = 1.0 - 2.0 * x + 0.5 * z + rng.normal(scale=0.7, size=500)
    result = dpgm.fit(dpgm.GLMConditional("y", ["x", "z"], "gaussian"),
                      dpgm.from_pandas(pd.DataFrame({"x": x, "z": z, "y": y})), tol=1e-12)
    ols = sm.OLS(y, sm.add_constant(np.column_stack([x, z]))).fit()
    np.testing.assert_allclose(result.standard_errors["coefficients"].values, ols.bse, rtol=1e-8)
    glm = sm.GLM(y, sm.add_constant(np.column_stack([x, z])), family=sm.families.Gaussian()).fit()
    interval = result.confidence_interval(0.95)["coefficients"]  # Wald, normal quantile: as statsmodels' GLM
    np.testing.assert_allclose(interval.sel(bound="lower").values, glm.conf_int(0.05)[:, 0], rtol=1e-8)
    np.testing.assert_allclose(interval.sel(bound="upper").values, glm.conf_int(0.05)[:, 1], rtol=1e-8)


def _gaussian_rows(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    covariance = np.array([[1.0, 0.5, 0.2, 0.4], [0.5, 1.5, 0.5, 0.1], [0.2, 0.5, 1.0, 0.5], [0.4, 0.1, 0.5, 2.0]])
    return pd.DataFrame(rng.multivariate_normal([0.0, 1.0, -1.0, 2.0], covariance, n), columns=list("abcd"))


def test_saturated_gaussian_covariance_errors_equal_the_wishart_closed_form():
    """On a complete graph the MLE covariance's entries have ``var(s_ij) = (s_ij^2 + s_ii s_jj) / n``."""
    frame = _gaussian_rows(3000, seed=1)
    result = dpgm.fit(dpgm.GaussianGraphicalModel([tuple("abcd")]), dpgm.from_pandas(frame), method="closed_form")
    s = np.cov(frame.to_numpy().T, bias=True)
    n = len(frame)
    np.testing.assert_allclose(result.standard_errors["covariance"].values,
                               np.sqrt((s**2 + np.outer(np.diag(s), np.diag(s))) / n), rtol=1e-8)
    np.testing.assert_allclose(result.standard_errors["mean"].values, np.sqrt(np.diag(s) / n), rtol=1e-8)


def test_graphical_model_errors_equal_a_numerical_hessian_of_scipys_log_likelihood():
    """A 4-cycle (two precision zeros): the free precision entries' covariance is the inverse of the negative
    Hessian of the total log-likelihood (SciPy's ``multivariate_normal.logpdf``, central differences); the
    covariance entries' standard errors follow through NumPy's inverse (the Jacobian by differences too)."""
    frame = _gaussian_rows(2000, seed=2)
    edges = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
    result = dpgm.fit(dpgm.GaussianGraphicalModel(edges), dpgm.from_pandas(frame), method="ipf", tol=1e-13)
    x = frame.to_numpy()
    mean = result.model.mean.values
    precision = np.linalg.inv(result.model.covariance.values)
    free = [(i, i) for i in range(4)] + [(0, 1), (1, 2), (2, 3), (0, 3)]

    def matrix(theta: np.ndarray) -> np.ndarray:
        k = np.zeros((4, 4))
        for value, (i, j) in zip(theta, free, strict=True):
            k[i, j] = k[j, i] = value
        return k

    def loglik(theta: np.ndarray) -> float:
        return float(scipy.stats.multivariate_normal(mean, np.linalg.inv(matrix(theta))).logpdf(x).sum())

    theta = np.array([precision[i, j] for i, j in free])
    h = 1e-3
    m = len(free)
    hessian = np.zeros((m, m))
    for e in range(m):
        for f in range(m):
            step_e, step_f = np.eye(m)[e] * h, np.eye(m)[f] * h
            hessian[e, f] = (loglik(theta + step_e + step_f) - loglik(theta + step_e - step_f)
                             - loglik(theta - step_e + step_f) + loglik(theta - step_e - step_f)) / (4 * h * h)
    estimates = np.linalg.inv(-hessian)
    jacobian = np.zeros((16, m))
    for e in range(m):
        step = np.eye(m)[e] * 1e-6
        jacobian[:, e] = (np.linalg.inv(matrix(theta + step)) - np.linalg.inv(matrix(theta - step))).ravel() / 2e-6
    expected = np.sqrt(np.diag(jacobian @ estimates @ jacobian.T)).reshape(4, 4)
    np.testing.assert_allclose(result.standard_errors["covariance"].values, expected, rtol=1e-4)


def test_kinds_without_asymptotic_standard_errors_say_so_and_name_the_bootstrap():
    rng = np.random.default_rng(0)
    data = dpgm.from_pandas(pd.DataFrame(rng.normal(size=(200, 2)), columns=["a", "b"]))
    result = dpgm.fit(dpgm.GaussianGraphicalModel([("a", "b")]), data, method="glasso", alpha=0.1)
    with pytest.raises(NotImplementedError, match="dpgm.bootstrap"):
        _ = result.standard_errors
    fitted = dpgm.fit(dpgm.BayesianNetwork.from_edges([("smoke", "lung")]), _asia(100)[["smoke", "lung"]])
    with pytest.raises(ValueError, match="level must be"):
        fitted.confidence_interval(0)


def test_linear_gaussian_standard_errors_equal_statsmodels_ols_per_node():
    """Each node's slopes and intercept: statsmodels' OLS ``bse`` of the node on its parents (rel 1e-8); the
    residual variance's: the MLE's asymptotic ``sqrt(2 / n) sigma^2`` (Anderson, *An Introduction to
    Multivariate Statistical Analysis*, 3.4)."""
    import statsmodels.api as sm

    rng = np.random.default_rng(6)
    n = 1500
    a = rng.normal(1.0, 1.0, n)
    b = 0.5 * a + rng.normal(0.0, 0.8, n)
    c = 2.0 - 1.0 * a + 0.7 * b + rng.normal(0.0, 0.5, n)
    frame = pd.DataFrame({"a": a, "b": b, "c": c})
    result = dpgm.fit(dpgm.LinearGaussianNetwork([("a", "b"), ("a", "c"), ("b", "c")]), dpgm.from_pandas(frame))
    errors = result.standard_errors
    for node, parents in (("b", ["a"]), ("c", ["a", "b"])):
        ols = sm.OLS(frame[node], sm.add_constant(frame[parents])).fit()
        assert float(errors[f"scalars.{node}.intercept"]) == pytest.approx(ols.bse["const"], rel=1e-8)
        got = errors[f"coefficients.{node}"].sel({f"parents_of_{node}": parents}).values
        np.testing.assert_allclose(got, ols.bse[parents].values, rtol=1e-8)
        mle = ols.ssr / n
        assert float(errors[f"scalars.{node}.variance"]) == pytest.approx(np.sqrt(2 / n) * mle, rel=1e-8)
    root = sm.OLS(frame["a"], np.ones(n)).fit()
    assert float(errors["scalars.a.intercept"]) == pytest.approx(root.bse.iloc[0], rel=1e-8)


def test_log_linear_weight_errors_equal_statsmodels_poisson_glm_bse():
    import statsmodels.api as sm

    states = {"a": ["a0", "a1", "a2"], "b": ["b0", "b1"], "c": ["c0", "c1", "c2"]}
    rng = np.random.default_rng(9)
    counts = rng.poisson(rng.uniform(20, 120, size=(3, 2, 3)))
    table = xr.DataArray(counts, dims=("a", "b", "c"), coords=states)
    features = treatment_coded_features([["a", "b"], ["b", "c"]], states)  # [ab][bc]
    result = dpgm.fit(dpgm.LogLinearModel(features), dpgm.from_table(table), method="newton", tol=1e-12)
    frame = table.to_dataframe(name="n").reset_index()
    design = np.column_stack([np.ones(len(frame))] + [
        features[name].sel({v: xr.DataArray(frame[v].to_numpy()) for v in features[name].dims}).values
        for name in features])
    glm = sm.GLM(frame["n"].to_numpy(), design, family=sm.families.Poisson()).fit(tol=1e-12)
    np.testing.assert_allclose([result.model.weights[name] for name in features], glm.params[1:], rtol=1e-6)
    errors = result.standard_errors["weights"].sel(feature=list(features)).values
    np.testing.assert_allclose(errors, glm.bse[1:], rtol=1e-6)


def test_log_linear_weights_the_features_cannot_identify_get_nan():
    """One indicator per margin cell (``from_margins``) over-parametrises: no single weight is identified."""
    states = {"a": ["a0", "a1"], "b": ["b0", "b1"]}
    table = xr.DataArray(np.array([[30, 12], [9, 44]]), dims=("a", "b"), coords=states)
    result = dpgm.fit(dpgm.LogLinearModel.from_margins([("a", "b")], states), dpgm.from_table(table))
    assert np.isnan(result.standard_errors["weights"].values).all()

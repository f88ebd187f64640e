"""Standard errors of EM fits (the observed information) against a numerical Hessian of a brute-force log-likelihood.

Each oracle writes the observed-data log-likelihood itself (SciPy's normal densities and
log-sum-exp for mixtures, hmmlearn's ``CategoricalHMM.score`` for hidden Markov models,
enumeration of the latent class for a latent class model), takes statsmodels'
``approx_hess3`` (central differences) in its own free parameters (each distribution's
last entry ``1 - sum`` of the others), inverts the negative Hessian and carries the
covariance to every entry by the delta method. Tolerance ``rtol=1e-4``: two finite
difference Hessians with different steps.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import xarray as xr
from scipy.special import logsumexp
from scipy.stats import multivariate_normal
from statsmodels.tools.numdiff import approx_hess3

import dpgm

RTOL = 1e-4


def _quiet(model, data, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        return dpgm.fit(model, data, method="em", **({"tol": 1e-12, "max_iter": 5000} | options))


def _covariance(loglik, theta: np.ndarray, jacobian: np.ndarray) -> np.ndarray:
    """Standard errors of ``jacobian @ theta``'s entries: the oracle's inverse negative Hessian, by the delta method."""
    hessian = approx_hess3(theta, loglik)
    covariance = np.linalg.inv(-hessian)
    return np.sqrt(np.diag(jacobian @ covariance @ jacobian.T))


def _two_clusters(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    first = rng.multivariate_normal([0, 0], [[1.0, 0.4], [0.4, 1.0]], size=int(0.6 * n))
    return np.concatenate([first, rng.multivariate_normal([3, 1], [[0.7, -0.2], [-0.2, 1.2]], size=n - len(first))])


def _mixture_errors(x: np.ndarray, weights, means, covariances) -> dict[str, np.ndarray]:
    """Oracle for a full-covariance mixture of 2 components in 2 dimensions."""

    def unpack(theta):
        w = np.array([theta[0], 1 - theta[0]])
        mu = theta[1:5].reshape(2, 2)
        cov = [np.array([[a, b], [b, d]]) for a, b, d in theta[5:].reshape(2, 3)]
        return w, mu, cov

    def loglik(theta):
        w, mu, cov = unpack(theta)
        return float(logsumexp([np.log(w[k]) + multivariate_normal(mu[k], cov[k]).logpdf(x) for k in range(2)],
                               axis=0).sum())

    theta = np.concatenate([[weights[0]], means.ravel(),
                            *[[c[0, 0], c[0, 1], c[1, 1]] for c in covariances]])
    # every entry: weights (2), means (4), covariances (2 x 2 x 2) from the 11 free parameters
    jacobian = np.zeros((14, 11))
    jacobian[0, 0], jacobian[1, 0] = 1, -1
    jacobian[2:6, 1:5] = np.eye(4)
    for k in range(2):
        for (i, j), f in {(0, 0): 0, (0, 1): 1, (1, 0): 1, (1, 1): 2}.items():
            jacobian[6 + 4 * k + 2 * i + j, 5 + 3 * k + f] = 1
    errors = _covariance(loglik, theta, jacobian)
    return {"weights": errors[:2], "means": errors[2:6].reshape(2, 2), "covariances": errors[6:].reshape(2, 2, 2)}


def test_gaussian_mixture_errors_equal_a_numerical_hessian_of_scipys_mixture_density():
    x = _two_clusters(600, seed=0)
    data = xr.Dataset({"a": ("row", x[:, 0]), "b": ("row", x[:, 1])})
    result = _quiet(dpgm.GaussianMixture(2, ["a", "b"]), data, random_state=0)
    model = result.model
    expected = _mixture_errors(x, model.weights.values, model.means.values, model.covariances.values)
    errors = result.standard_errors
    for name, values in expected.items():
        np.testing.assert_allclose(errors[name].values, values, rtol=RTOL, err_msg=name)
    interval = result.confidence_interval(0.9)
    np.testing.assert_allclose(interval["means"].sel(bound="upper") - model.means,
                               1.6448536269514722 * expected["means"], rtol=RTOL)


def test_mixture_errors_from_zarr_on_the_cluster_equal_the_oracle(tmp_path, client):
    """The information pass on a 2-worker cluster over a chunked store (frequency weights too): the same oracle,
    each row repeated as often as its weight."""
    x = _two_clusters(400, seed=5)
    weights = np.random.default_rng(1).integers(1, 4, size=len(x))
    data = xr.Dataset({"a": ("row", x[:, 0]), "b": ("row", x[:, 1]), "weight": ("row", weights.astype(float))})
    dpgm.write_dataset(data, tmp_path / "mix.zarr", chunk_rows=90)
    stored = dpgm.open_dataset(tmp_path / "mix.zarr")
    result = _quiet(dpgm.GaussianMixture(2, ["a", "b"]), stored, random_state=0, client=client)
    model = result.model
    expected = _mixture_errors(np.repeat(x, weights, axis=0), model.weights.values, model.means.values,
                               model.covariances.values)
    errors = result.standard_errors
    for name, values in expected.items():
        np.testing.assert_allclose(errors[name].values, values, rtol=RTOL, err_msg=name)


def test_hmm_errors_equal_a_numerical_hessian_of_hmmlearns_score():
    from conformance.builders import _sequence_rows
    from hmmlearn.hmm import CategoricalHMM

    codes = _sequence_rows(7, 300, 20)["obs"].values
    data = xr.Dataset({"obs": (("row", "time"), codes, {"states": list("abc")})})
    result = _quiet(dpgm.hmm(2, list("abc"), variable="obs"), data, n_init=3, random_state=0)
    start, transition, emission = (np.asarray(a, float) for a in result.model.arrays())

    def unpack(theta):
        s = np.array([theta[0], 1 - theta[0]])
        t = np.array([[theta[1], 1 - theta[1]], [theta[2], 1 - theta[2]]])
        e = np.array([[theta[3], theta[4], 1 - theta[3] - theta[4]], [theta[5], theta[6], 1 - theta[5] - theta[6]]])
        return s, t, e

    def loglik(theta):
        s, t, e = unpack(theta)
        oracle = CategoricalHMM(n_components=2, n_features=3)
        oracle.startprob_, oracle.transmat_, oracle.emissionprob_ = s, t, e
        return float(oracle.score(codes.reshape(-1, 1), [codes.shape[1]] * codes.shape[0]))

    theta = np.array([start[0], transition[0, 0], transition[1, 0], *emission[0, :2], *emission[1, :2]])
    jacobian = np.zeros((2 + 4 + 6, 7))
    jacobian[0, 0], jacobian[1, 0] = 1, -1
    for i in range(2):
        jacobian[2 + 2 * i, 1 + i], jacobian[3 + 2 * i, 1 + i] = 1, -1
        jacobian[6 + 3 * i: 8 + 3 * i, 3 + 2 * i: 5 + 2 * i] = np.eye(2)
        jacobian[8 + 3 * i, 3 + 2 * i: 5 + 2 * i] = -1
    expected = _covariance(loglik, theta, jacobian)
    errors = result.standard_errors
    np.testing.assert_allclose(errors["start"].values, expected[:2], rtol=RTOL)
    np.testing.assert_allclose(errors["transition"].values, expected[2:6].reshape(2, 2), rtol=RTOL)
    np.testing.assert_allclose(errors["emission"].values, expected[6:].reshape(2, 3), rtol=RTOL)


def test_latent_class_errors_with_missing_values_equal_a_numerical_hessian_of_the_enumerated_likelihood():
    questions = {f"q{i}": ["a", "b"] for i in range(4)}
    from dpgm.models.parameters import with_parameters

    p_a = {"q0": [0.8, 0.2], "q1": [0.7, 0.25], "q2": [0.85, 0.3], "q3": [0.75, 0.1]}  # P(a | class 0, 1)
    truth = with_parameters(dpgm.latent_class_model(questions, 2),
                            {"table:class": np.array([0.4, 0.6]),
                             **{f"table:{q}": np.array([p, 1 - np.array(p)]) for q, p in p_a.items()}})
    data = dpgm.sample_bayesian_network(truth, 1500, None, seed=4, missing=0.1).drop_vars("class")
    result = _quiet(dpgm.latent_class_model(questions, 2), data, n_init=4, random_state=0)
    model = result.model
    classes = [str(c) for c in model.cpds["class"].coords["class"].values]
    codes = np.stack([data[q].values for q in questions], axis=1)  # -1: missing

    def loglik(theta):
        prior = np.array([theta[0], 1 - theta[0]])
        p_a = theta[1:].reshape(4, 2)  # P(q = a | class)
        total = np.log(prior)[None, :].repeat(len(codes), axis=0)
        for q in range(4):
            observed = codes[:, q] >= 0
            p = np.where(codes[:, q, None] == 0, p_a[q][None, :], 1 - p_a[q][None, :])
            total += np.where(observed[:, None], np.log(p), 0.0)
        return float(logsumexp(total, axis=1).sum())

    tables = {q: model.cpds[q].transpose(q, "class").sel({q: ["a", "b"], "class": classes}).values for q in questions}
    theta = np.concatenate([[model.cpds["class"].sel({"class": classes[0]}).item()],
                            *[tables[q][0] for q in questions]])
    jacobian = np.zeros((2 + 16, 9))
    jacobian[0, 0], jacobian[1, 0] = 1, -1
    for q in range(4):
        for c in range(2):
            jacobian[2 + 4 * q + c, 1 + 2 * q + c], jacobian[2 + 4 * q + 2 + c, 1 + 2 * q + c] = 1, -1
    expected = _covariance(loglik, theta, jacobian)
    errors = result.standard_errors
    np.testing.assert_allclose(errors["table:class"].sel({"class": classes}).values, expected[:2], rtol=RTOL)
    for q_index, q in enumerate(questions):
        got = errors[f"table:{q}"].transpose(q, "class").sel({q: ["a", "b"], "class": classes}).values
        np.testing.assert_allclose(got, expected[2 + 4 * q_index: 6 + 4 * q_index].reshape(2, 2), rtol=RTOL,
                                   err_msg=q)


def test_too_many_free_parameters_name_the_bootstrap():
    from dpgm.api.observed_information import MAX_MOVES

    questions = {f"q{i}": ["a", "b", "c"] for i in range(8)}
    truth = dpgm.latent_class_model(questions, 3).randomized(np.random.default_rng(0))
    data = dpgm.sample_bayesian_network(truth, 300, None, seed=1).drop_vars("class")
    result = _quiet(dpgm.latent_class_model(questions, 3), data, max_iter=5)
    assert result.n_params > MAX_MOVES
    with pytest.raises(NotImplementedError, match=r"at most 40 .*dpgm.bootstrap"):
        _ = result.standard_errors


def test_mixture_of_regressions_errors_equal_a_numerical_hessian_of_the_direct_likelihood():
    """A hybrid network fitted by EM: a latent class ``z`` over a gaussian GLM ``y | x, z`` and a gaussian root ``x``;
    the oracle's log-likelihood is SciPy's normal densities, log-sum-exp over ``z``, plus ``x``'s."""
    from scipy.stats import norm

    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, 1500)
    z = rng.random(1500) < 0.4
    y = np.where(z, 1.0 + 2.0 * x, -0.5 - 1.0 * x) + rng.normal(0, np.where(z, 0.7, 1.0))
    network = dpgm.HybridNetwork([("z", "y"), ("x", "y")], families={"x": "gaussian", "y": "gaussian"},
                                 states={"z": ["a", "b"]})
    data = xr.Dataset({"x": ("row", x), "y": ("row", y)})
    result = _quiet(network, data, n_init=3, random_state=0)
    model = result.model
    prior = model.tables["z"].sel(z=["a", "b"]).values
    coefficients = model.conditionals["y"].coefficients.sel(z=["a", "b"])  # (y:term or term, z)
    terms = [d for d in coefficients.dims if d != "z"][0]
    beta = coefficients.transpose("z", terms).values  # (intercept, slope) per state
    variances = model.conditionals["y"].scale_by_state.sel(z=["a", "b"]).values
    x_mean, x_variance = float(model.conditionals["x"].coefficients.values[0]), float(model.conditionals["x"].scale)

    def loglik(theta):
        pi_a, a0, b0, a1, b1, v0, v1, mean, variance = theta
        parts = [np.log(pi_a) + norm.logpdf(y, a0 + b0 * x, np.sqrt(v0)),
                 np.log(1 - pi_a) + norm.logpdf(y, a1 + b1 * x, np.sqrt(v1))]
        return float(logsumexp(parts, axis=0).sum() + norm.logpdf(x, mean, np.sqrt(variance)).sum())

    theta = np.array([prior[0], *beta[0], *beta[1], *variances, x_mean, x_variance])
    jacobian = np.zeros((10, 9))
    jacobian[0, 0], jacobian[1, 0] = 1, -1
    jacobian[2:, 1:] = np.eye(8)
    expected = _covariance(loglik, theta, jacobian)
    errors = result.standard_errors
    np.testing.assert_allclose(errors["table:z"].sel(z=["a", "b"]).values, expected[:2], rtol=RTOL)
    got = errors["coefficients:y"].sel(z=["a", "b"]).transpose("z", ...).values
    np.testing.assert_allclose(got, expected[2:6].reshape(2, 2), rtol=RTOL)
    np.testing.assert_allclose(errors["scales.y"].values, expected[6:8], rtol=RTOL)
    np.testing.assert_allclose([errors["coefficients:x"].item(), errors["scales.x"].item()], expected[8:], rtol=RTOL)


def test_log_linear_em_weight_errors_equal_a_numerical_hessian_of_the_enumerated_likelihood():
    """Treatment-coded features of [smoke lung][smoke bronc] fitted by EM to asia's rows with 15% of the values
    missing; the oracle sums the enumerated joint ``exp(sum_f w_f F_f)`` over each row's missing values."""
    from itertools import product

    variables = ["smoke", "lung", "bronc"]
    data = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 3000, None, seed=6, missing=0.15)[variables]
    data = data.compute()
    states = {v: list(data[v].attrs["states"]) for v in variables}

    def indicator(cells: dict) -> xr.DataArray:
        table = xr.DataArray(np.zeros([len(states[v]) for v in cells]), dims=list(cells),
                             coords={v: states[v] for v in cells})
        table.loc[cells] = 1.0
        return table

    features = {f"{v}={states[v][1]}": indicator({v: states[v][1]}) for v in variables}
    for u, v in (("smoke", "lung"), ("smoke", "bronc")):
        features[f"{u}:{v}"] = indicator({u: states[u][1], v: states[v][1]})
    result = _quiet(dpgm.LogLinearModel(features), data, n_init=1, random_state=0)
    names = list(features)
    cells = np.array(list(product(range(2), repeat=3)))
    design = np.array([[features[f].isel({v: int(c[variables.index(v)]) for v in features[f].dims}).item()
                        for f in names] for c in cells])
    codes = np.stack([data[v].values for v in variables], axis=1)
    patterns, counts = np.unique(codes, axis=0, return_counts=True)
    consistent = np.array([[np.all((p < 0) | (p == c)) for c in cells] for p in patterns])

    def loglik(theta):
        logits = design @ theta
        log_p = logits - logsumexp(logits)
        per_pattern = logsumexp(np.where(consistent, log_p[None, :], -np.inf), axis=1)
        return float(counts @ per_pattern)

    theta = np.array([result.model.weights[f] for f in names])
    expected = _covariance(loglik, theta, np.eye(len(names)))
    got = result.standard_errors["weights"].sel(feature=names).values
    np.testing.assert_allclose(got, expected, rtol=RTOL)


@pytest.mark.slow
def test_mixture_observed_information_errors_agree_with_the_bootstrap():
    """Bootstrap standard errors (300 replicates) estimate the same spread: their ratio to the observed information's
    is 1 within 4 Monte Carlo standard errors of a standard deviation, ``4 / sqrt(2 (B - 1))``."""
    import pandas as pd

    rng = np.random.default_rng(11)
    first = rng.random(3000) < 0.4
    x = np.where(first[:, None], rng.normal([0.0, 0.0], 1.0, (3000, 2)), rng.normal([4.0, 3.0], 0.8, (3000, 2)))
    data = dpgm.from_pandas(pd.DataFrame(x, columns=["u", "v"]))
    model = dpgm.GaussianMixture(2, ["u", "v"], "diag")
    replicates = 300
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        boot = dpgm.bootstrap(model, data, replicates=replicates, random_state=3, progress=False,
                              options={"tol": 1e-10, "random_state": 0})
    asymptotic = boot.estimate.standard_errors
    for name in ("weights", "means", "covariances"):
        np.testing.assert_allclose(boot.standard_errors[name].values / asymptotic[name].values, 1.0,
                                   atol=4 / np.sqrt(2 * (replicates - 1)), err_msg=name)


def test_markov_network_em_potential_errors_equal_a_numerical_hessian_of_the_enumerated_likelihood():
    """A star Markov network over a latent ``h`` and four observed items (10% of their values missing), fitted
    by EM; the oracle's parameters are the logs of the canonical potentials' entries other than 1 (a bijection
    with the canonical terms), its likelihood the enumerated joint summed over ``h`` and each row's missing
    values, and a potential's error ``phi se(log phi)``."""
    from itertools import product

    items = ["a", "b", "c", "d"]
    rng = np.random.default_rng(3)
    n = 2500
    h = rng.random(n) < 0.4
    p = np.where(h[:, None], [0.8, 0.7, 0.25, 0.6], [0.2, 0.3, 0.7, 0.35])
    codes = (rng.random((n, 4)) < p).astype(np.int8)
    codes[rng.random((n, 4)) < 0.1] = -1
    states = {v: ["n", "y"] for v in items}
    data = xr.Dataset({v: ("row", codes[:, i]) for i, v in enumerate(items)})
    for v in items:
        data[v].attrs["states"] = states[v]
    model = dpgm.MarkovNetwork.from_cliques([("h", v) for v in items], {"h": ["0", "1"], **states})
    result = _quiet(model, data, n_init=1, random_state=0)
    fitted = result.model
    scopes = list(fitted.scopes)
    logs = {s: np.log(fitted.potentials[s].transpose(*s).values) for s in scopes}
    free = {s: np.abs(logs[s]) > 0 for s in scopes}  # the canonical form's entries fixed at 1 have log 0
    order = ["h", *items]
    cells = np.array(list(product(range(2), repeat=5)))
    patterns, counts = np.unique(codes, axis=0, return_counts=True)
    consistent = np.array([[np.all((q < 0) | (q == c[1:])) for c in cells] for q in patterns])

    def loglik(theta):
        start, total = 0, np.zeros(len(cells))
        for s in scopes:
            table = logs[s].copy()
            k = int(free[s].sum())
            table[free[s]] = theta[start:start + k]
            start += k
            total += table[tuple(cells[:, order.index(v)] for v in s)]
        log_p = total - logsumexp(total)
        return float(counts @ logsumexp(np.where(consistent, log_p[None, :], -np.inf), axis=1))

    theta = np.concatenate([logs[s][free[s]] for s in scopes])
    log_errors = _covariance(loglik, theta, np.eye(len(theta)))
    assert len(theta) == 9
    errors = result.standard_errors
    start = 0
    for s in scopes:
        k = int(free[s].sum())
        expected = np.zeros(logs[s].shape)
        expected[free[s]] = np.exp(logs[s][free[s]]) * log_errors[start:start + k]
        start += k
        got = errors[",".join(s)].transpose(*s).values
        np.testing.assert_allclose(got, expected, rtol=RTOL, atol=1e-12)

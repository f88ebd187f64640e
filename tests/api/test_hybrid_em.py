"""EM with a latent class parent of GLM nodes (mixture of regressions) against an independent NumPy EM.

The oracle is written here from the textbook updates (DeSarbo and Cron 1988): for a
mixture of two linear regressions ``y | x, z=k ~ N(a_k + b_k x, s_k^2)``, 40 random
starts iterated to a relative change below 1e-14, then polished by scipy's BFGS on
the direct log-likelihood; its best log-likelihood is the optimum. dpgm's best of
10 restarts must reach it within 1e-6 (absolute), and its parameters match the
optimum's up to the label switch (rel 1e-5: a flat likelihood near the optimum).
The root ``x`` is a gaussian node: its MLE log-likelihood is added in closed form.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize
from scipy.special import logsumexp

import dpgm


def _data(n: int = 1500, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, n)
    z = rng.random(n) < 0.4
    y = np.where(z, 1.0 + 2.0 * x, -0.5 - 1.0 * x) + rng.normal(0, np.where(z, 0.7, 1.0))
    return pd.DataFrame({"x": x, "y": y})


def _loglik(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    logit, a0, b0, ls0, a1, b1, ls1 = theta
    log_pi = np.array([-np.logaddexp(0, logit), -np.logaddexp(0, -logit)])  # logit = log(pi1 / pi0)
    parts = []
    for k, (a, b, ls) in enumerate(((a0, b0, ls0), (a1, b1, ls1))):
        s2 = np.exp(2 * ls)
        parts.append(log_pi[k] - 0.5 * (np.log(2 * np.pi * s2) + (y - a - b * x) ** 2 / s2))
    return float(logsumexp(np.column_stack(parts), axis=1).sum())


def _numpy_em(x: np.ndarray, y: np.ndarray, n_starts: int = 40, seed: int = 123) -> tuple[float, np.ndarray]:
    """Best of ``n_starts`` EM runs from random responsibilities, polished by BFGS on the log-likelihood."""
    rng = np.random.default_rng(seed)
    design = np.column_stack([np.ones_like(x), x])
    best = (-np.inf, None)
    for _ in range(n_starts):
        r = rng.dirichlet([1.0, 1.0], size=len(x))
        previous = -np.inf
        for _ in range(5000):
            pi = r.mean(axis=0)
            coef, s2 = [], []
            for k in range(2):
                w = r[:, k]
                beta = np.linalg.solve(design.T @ (design * w[:, None]), design.T @ (w * y))
                coef.append(beta)
                s2.append(max(w @ (y - design @ beta) ** 2 / w.sum(), 1e-12))
            logp = np.column_stack([np.log(pi[k]) - 0.5 * (np.log(2 * np.pi * s2[k])
                                                           + (y - design @ coef[k]) ** 2 / s2[k]) for k in range(2)])
            norm = logsumexp(logp, axis=1)
            loglik = norm.sum()
            r = np.exp(logp - norm[:, None])
            if abs(loglik - previous) <= 1e-14 * abs(loglik):
                break
            previous = loglik
        theta = np.array([np.log(pi[1] / pi[0]), *coef[0], 0.5 * np.log(s2[0]), *coef[1], 0.5 * np.log(s2[1])])
        if loglik > best[0]:
            best = (loglik, theta)
    polished = minimize(lambda t: -_loglik(t, x, y), best[1], method="BFGS", options={"gtol": 1e-10})
    return max(-polished.fun, best[0]), polished.x


@pytest.mark.slow
def test_mixture_of_two_regressions_reaches_the_numpy_em_optimum_from_zarr_on_two_workers(tmp_path, client):
    frame = _data()
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "mix.zarr", chunk_rows=400)
    data = dpgm.open_dataset(tmp_path / "mix.zarr")
    network = dpgm.HybridNetwork([("z", "y"), ("x", "y")], families={"x": "gaussian", "y": "gaussian"},
                                 states={"z": ["a", "b"]})
    result = dpgm.fit(network, data, method="em", n_init=10, random_state=0, tol=1e-13, client=client)
    x, y = frame["x"].values, frame["y"].values
    optimum, theta = _numpy_em(x, y)
    x_loglik = -0.5 * len(x) * (np.log(2 * np.pi * x.var()) + 1)  # the root x: gaussian MLE
    assert result.loglik == pytest.approx(optimum + x_loglik, abs=1e-6)
    assert result.converged
    assert len(result.info["restart_logliks"]) == 10
    # the parameters of the optimum, up to the order of the latent states
    fitted = result.model.conditionals["y"]
    coefficients = fitted.coefficients.transpose("z", "term").values
    scales = fitted.scale_by_state.values
    oracle = [(theta[1:3], np.exp(2 * theta[3])), (theta[4:6], np.exp(2 * theta[6]))]
    order = [0, 1] if abs(coefficients[0, 1] - oracle[0][0][1]) < abs(coefficients[0, 1] - oracle[1][0][1]) else [1, 0]
    for k, j in enumerate(order):
        np.testing.assert_allclose(coefficients[k], oracle[j][0], rtol=1e-5)
        assert scales[k] == pytest.approx(oracle[j][1], rel=1e-5)
    prior = result.model.tables["z"].values
    pi1 = 1 / (1 + np.exp(-theta[0]))
    np.testing.assert_allclose(prior, np.array([1 - pi1, pi1])[order], rtol=1e-5)


def test_em_needs_one_latent_root_with_states():
    data = dpgm.from_pandas(_data(n=50))
    with pytest.raises(dpgm.DataError, match="give its states"):
        dpgm.fit(dpgm.HybridNetwork([("z", "y"), ("x", "y")], {"x": "gaussian", "y": "gaussian"}), data,
                 method="em")
    with pytest.raises(dpgm.DataError, match="exactly one latent"):
        dpgm.fit(dpgm.HybridNetwork([("z", "y"), ("w", "y"), ("x", "y")], {"x": "gaussian", "y": "gaussian"},
                                    states={"z": ["a", "b"], "w": ["a", "b"]}), data, method="em")


def _numpy_latent_class_regression(x, t, b, y, n_starts=12, seed=7):
    """EM for z -> t (table), (z, x) -> b (logistic per class), (z, x) -> y (linear per class).

    Written from the textbook: the logistic M step is a weighted fit iterated by Newton to
    convergence (an exact M step, where dpgm takes one Newton step per iteration).
    """
    rng = np.random.default_rng(seed)
    design = np.column_stack([np.ones_like(x), x])
    best = -np.inf
    for _ in range(n_starts):
        r = rng.dirichlet([1.0, 1.0], size=len(x))
        previous, coef_b = -np.inf, [np.zeros(2), np.zeros(2)]
        for _ in range(3000):
            pi = r.mean(axis=0)
            table = np.array([[r[t == s, k].sum() for s in range(3)] for k in range(2)])
            table /= table.sum(axis=1, keepdims=True)
            logp = np.log(pi)[None, :] + np.log(table[:, t]).T
            for k in range(2):
                w = r[:, k]
                beta = np.linalg.solve(design.T @ (design * w[:, None]), design.T @ (w * y))
                s2 = w @ (y - design @ beta) ** 2 / w.sum()
                logp[:, k] += -0.5 * (np.log(2 * np.pi * s2) + (y - design @ beta) ** 2 / s2)
                g = coef_b[k]
                for _ in range(50):
                    p = 1 / (1 + np.exp(-design @ g))
                    step = np.linalg.solve(design.T @ (design * (w * p * (1 - p))[:, None]), design.T @ (w * (b - p)))
                    g = g + step
                    if np.abs(step).max() < 1e-13:
                        break
                coef_b[k] = g
                eta = design @ g
                logp[:, k] += b * eta - np.logaddexp(0, eta)
            norm = logsumexp(logp, axis=1)
            loglik = norm.sum()
            r = np.exp(logp - norm[:, None])
            if abs(loglik - previous) <= 1e-14 * abs(loglik):
                break
            previous = loglik
        best = max(best, loglik)
    return best


def test_latent_class_regression_with_a_table_a_logistic_and_a_linear_child():
    """Mixed children of one latent class: the best of 10 restarts reaches the NumPy EM's optimum (1e-6 abs).

    The EM log-likelihood is evaluated at the parameters of the E step, so both sides report
    the same function; the x root's gaussian MLE log-likelihood is added to the oracle.
    """
    rng = np.random.default_rng(3)
    n = 1200
    x = rng.normal(size=n)
    z = rng.random(n) < 0.45
    t = np.where(z, rng.choice(3, n, p=[0.6, 0.3, 0.1]), rng.choice(3, n, p=[0.1, 0.3, 0.6]))
    b = (rng.random(n) < 1 / (1 + np.exp(-np.where(z, 1.0 + 1.5 * x, -1.0 - 0.5 * x)))).astype(int)
    y = np.where(z, 2.0 + x, -1.0 + 0.3 * x) + rng.normal(0, np.where(z, 0.8, 1.2))
    frame = pd.DataFrame({"x": x, "t": pd.Categorical.from_codes(t, ["lo", "mid", "hi"]),
                          "b": pd.Categorical.from_codes(b, ["no", "yes"]), "y": y})
    network = dpgm.HybridNetwork([("z", "t"), ("z", "b"), ("x", "b"), ("z", "y"), ("x", "y")],
                                 families={"x": "gaussian", "b": "bernoulli", "y": "gaussian"},
                                 states={"z": ["one", "two"]})
    result = dpgm.fit(network, dpgm.from_pandas(frame), method="em", n_init=10, random_state=1, tol=1e-14,
                      max_iter=5000)
    optimum = _numpy_latent_class_regression(x, t, b.astype(float), y)
    x_loglik = -0.5 * n * (np.log(2 * np.pi * x.var()) + 1)
    assert result.loglik == pytest.approx(optimum + x_loglik, abs=1e-6)
    assert result.model.conditionals["b"].coefficients.dims == ("term", "z")
    assert result.model.tables["t"].dims == ("t", "z")


def test_a_fit_stopped_and_resumed_from_its_checkpoint_equals_an_uninterrupted_one(tmp_path):
    """Checkpoint after 4 iterations, resume to convergence: the same restarts, log-likelihoods and coefficients
    as one uninterrupted fit (rel 1e-12: the same arithmetic from parameters saved as float64)."""
    data = dpgm.from_pandas(_data(n=600, seed=2))
    network = dpgm.HybridNetwork([("z", "y"), ("x", "y")], families={"x": "gaussian", "y": "gaussian"},
                                 states={"z": ["a", "b"]})
    options = {"method": "em", "n_init": 3, "random_state": 5, "tol": 1e-10}
    whole = dpgm.fit(network, data, **options)
    with pytest.warns(dpgm.ConvergenceWarning):
        dpgm.fit(network, data, max_iter=4, checkpoint=str(tmp_path / "ck"), **options)
    resumed = dpgm.fit(network, data, resume=str(tmp_path / "ck"), **options)
    np.testing.assert_allclose(resumed.info["restart_logliks"], whole.info["restart_logliks"], rtol=1e-12)
    np.testing.assert_allclose(resumed.model.conditionals["y"].coefficients.values,
                               whole.model.conditionals["y"].coefficients.values, rtol=1e-10)
    assert resumed.n_iter == whole.n_iter


def test_squarem_and_pruned_restarts_reach_the_numpy_em_optimum_in_fewer_passes():
    """``accelerate="squarem"`` and ``prune_restarts=True`` (once a TypeError from the fit function) reach the
    NumPy EM optimum within 1e-6 (absolute, as the plain fit above), and SQUAREM takes fewer passes than
    plain EM from the same starts."""
    frame = _data(n=800, seed=3)
    data = dpgm.from_pandas(frame)
    network = dpgm.HybridNetwork([("z", "y"), ("x", "y")], families={"x": "gaussian", "y": "gaussian"},
                                 states={"z": ["a", "b"]})
    x, y = frame["x"].values, frame["y"].values
    optimum, _ = _numpy_em(x, y, n_starts=20)
    x_loglik = -0.5 * len(x) * (np.log(2 * np.pi * x.var()) + 1)
    common = {"method": "em", "n_init": 4, "random_state": 1, "tol": 1e-13, "max_iter": 5000}
    plain = dpgm.fit(network, data, accelerate=None, **common)
    fast = dpgm.fit(network, data, accelerate="squarem", **common)
    pruned = dpgm.fit(network, data, accelerate="squarem", prune_restarts=True, **common)
    for result in (plain, fast, pruned):
        assert result.converged
        assert result.loglik == pytest.approx(optimum + x_loglik, abs=1e-6)
    assert fast.passes < plain.passes
    assert pruned.passes <= fast.passes


def test_init_model_continues_from_a_fitted_network_to_the_numpy_em_optimum():
    """A fit stopped after 3 iterations, continued with ``init="model"`` (no start pass), reaches the oracle's
    optimum; started at the optimum, it stays there (the bootstrap starts its replicates so)."""
    frame = _data()
    data = dpgm.from_pandas(frame)
    network = dpgm.HybridNetwork([("z", "y"), ("x", "y")], families={"x": "gaussian", "y": "gaussian"},
                                 states={"z": ["a", "b"]})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        early = dpgm.fit(network, data, method="em", n_init=10, random_state=0, max_iter=3)
    assert not early.converged
    continued = dpgm.fit(early.model, data, method="em", init="model", tol=1e-13, max_iter=2000)
    x, y = frame["x"].values, frame["y"].values
    optimum, _ = _numpy_em(x, y)
    x_loglik = -0.5 * len(x) * (np.log(2 * np.pi * x.var()) + 1)
    assert continued.loglik == pytest.approx(optimum + x_loglik, abs=1e-6)
    assert continued.passes == continued.n_iter  # no pass for random starts
    again = dpgm.fit(continued.model, data, method="em", init="model", tol=1e-13)
    assert again.loglik == pytest.approx(continued.loglik, abs=1e-7) and again.n_iter <= 5  # 2 + 3 certifying
    np.testing.assert_allclose(again.model.conditionals["y"].coefficients.values,
                               continued.model.conditionals["y"].coefficients.values, rtol=1e-5)
    with pytest.raises(ValueError, match="n_init must be 1"):
        dpgm.fit(continued.model, data, method="em", init="model", n_init=2)

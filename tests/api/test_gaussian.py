"""Gaussian graphical models: closed form, IPS and the graphical lasso against the literature's conditions,
scikit-learn and SciPy; conditional queries, save/load, the cluster."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from sklearn.covariance import graphical_lasso as sklearn_graphical_lasso

import dpgm

VARIABLES = ["a", "b", "c", "d", "e"]


def _data(n: int = 4000, seed: int = 0, missing: float = 0.0) -> pd.DataFrame:
    """Rows from a sparse precision (a 5-cycle plus a chord) with a nonzero mean."""
    rng = np.random.default_rng(seed)
    precision = np.eye(5) * 2.0
    for i, j, w in [(0, 1, 0.6), (1, 2, -0.5), (2, 3, 0.4), (3, 4, 0.5), (4, 0, -0.3), (1, 3, 0.3)]:
        precision[i, j] = precision[j, i] = w
    values = rng.multivariate_normal([1.0, -1.0, 0.0, 3.0, 10.0], np.linalg.inv(precision), n)
    frame = pd.DataFrame(values, columns=VARIABLES)
    return frame.mask(rng.random(frame.shape) < missing) if missing else frame


def _sample_covariance(frame: pd.DataFrame) -> np.ndarray:
    return np.cov(frame.to_numpy().T, bias=True)


def _on_graph(model: dpgm.GaussianGraphicalModel) -> np.ndarray:
    return model.adjacency | np.eye(len(model.variables), dtype=bool)


def test_decomposable_closed_form_equals_the_textbook_formula_and_ips():
    frame = _data()
    s = _sample_covariance(frame)
    chain = dpgm.GaussianGraphicalModel([("a", "b"), ("b", "c")])
    result = dpgm.fit(chain, dpgm.from_pandas(frame[["a", "b", "c"]]), method="closed_form")
    sigma = result.model.covariance.values
    # a - b - c: a and c independent given b, so sigma_ac = s_ab s_bc / s_bb (Lauritzen 1996, ch. 5)
    assert sigma[0, 2] == pytest.approx(s[0, 1] * s[1, 2] / s[1, 1], rel=1e-12)
    np.testing.assert_allclose(sigma[_on_graph(chain)], s[:3, :3][_on_graph(chain)], rtol=1e-12)
    by_ips = dpgm.fit(chain, dpgm.from_pandas(frame[["a", "b", "c"]]), method="ipf", tol=1e-13)
    np.testing.assert_allclose(by_ips.model.covariance.values, sigma, rtol=1e-10)
    np.testing.assert_allclose(result.model.mean.values, frame[["a", "b", "c"]].mean().to_numpy(), rtol=1e-13,
                               atol=1e-14)  # a mean near 0: rounding of the others (|mean| ~ 1) shows


def test_ips_on_a_cycle_meets_dempsters_conditions():
    """The MLE of covariance selection is the unique positive definite Sigma equal to S on the graph's
    entries (and diagonal) whose inverse is zero off the graph (Dempster 1972)."""
    frame = _data(seed=1)
    s = _sample_covariance(frame)
    cycle = dpgm.GaussianGraphicalModel([("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("e", "a")])
    result = dpgm.fit(cycle, dpgm.from_pandas(frame), tol=1e-12)
    assert result.method == "ipf" and result.converged
    on = _on_graph(cycle)
    np.testing.assert_allclose(result.model.covariance.values[on], s[on], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(result.model.precision.values[~on], 0.0, atol=1e-10)
    # log-likelihood at the fit equals SciPy's density summed over the rows (MLE mean)
    logpdf = scipy.stats.multivariate_normal(result.model.mean.values, result.model.covariance.values).logpdf
    assert result.loglik == pytest.approx(float(logpdf(frame.to_numpy()).sum()), rel=1e-11)
    assert result.df == 10 - 5 and result.n_params == 2 * 5 + 5


def test_deviance_is_zero_for_the_saturated_model_and_grows_with_missing_edges():
    frame = _data(seed=2)
    complete = dpgm.GaussianGraphicalModel([tuple(VARIABLES)])
    saturated = dpgm.fit(complete, dpgm.from_pandas(frame))
    assert saturated.g2 == pytest.approx(0.0, abs=1e-8) and saturated.df == 0
    np.testing.assert_allclose(saturated.model.covariance.values, _sample_covariance(frame), rtol=1e-12)
    independence = dpgm.fit(dpgm.GaussianGraphicalModel([(v,) for v in VARIABLES]), dpgm.from_pandas(frame))
    s = _sample_covariance(frame)
    # independence: deviance = -n log det(R), R the correlation matrix (closed form)
    scale = np.sqrt(np.diag(s))
    expected = -len(frame) * np.linalg.slogdet(s / np.outer(scale, scale))[1]
    assert independence.g2 == pytest.approx(expected, rel=1e-10) and independence.df == 10


@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.2])
def test_graphical_lasso_equals_scikit_learn(alpha):
    frame = _data(seed=3)
    result = dpgm.fit(dpgm.GaussianGraphicalModel([tuple(VARIABLES)]), dpgm.from_pandas(frame), method="glasso",
                      alpha=alpha, tol=1e-12)
    _, expected = sklearn_graphical_lasso(_sample_covariance(frame), alpha, tol=1e-12, enet_tol=1e-12,
                                          max_iter=1000)
    np.testing.assert_allclose(result.model.precision.values, expected, rtol=1e-6, atol=1e-8)
    nonzero = (np.abs(expected) > 1e-8) & ~np.eye(5, dtype=bool)
    assert result.model.n_edges == int(nonzero.sum()) // 2


def test_graphical_lasso_with_the_graph_s_zeros_forced():
    frame = _data(seed=4)
    cycle = dpgm.GaussianGraphicalModel([("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("e", "a")])
    zero_penalty = dpgm.fit(cycle, dpgm.from_pandas(frame), method="glasso", alpha=0.0, tol=1e-12)
    by_ips = dpgm.fit(cycle, dpgm.from_pandas(frame), method="ipf", tol=1e-12)
    # alpha = 0 with forced zeros is covariance selection itself
    np.testing.assert_allclose(zero_penalty.model.precision.values, by_ips.model.precision.values, rtol=1e-7,
                               atol=1e-9)


def test_conditional_mean_and_covariance_equal_the_precision_form():
    model = dpgm.fit(dpgm.GaussianGraphicalModel([tuple(VARIABLES)]), dpgm.from_pandas(_data(seed=5))).model
    query = dpgm.marginal(model, ["a", "c"], {"b": 0.5, "e": 9.0})
    mu = model.mean.values
    both = [0, 2, 1, 4]  # A = (a, c), B = (b, e); d is summed out
    k = np.linalg.inv(model.covariance.values[np.ix_(both, both)])  # precision of the (A, B) marginal
    # x_A | x_B ~ N(mu_A - K_AA^-1 K_AB (x_B - mu_B), K_AA^-1)  (the precision form, Lauritzen 1996 App. C)
    k_aa = np.linalg.inv(k[:2, :2])
    np.testing.assert_allclose(query["covariance"].values, k_aa, rtol=1e-10)
    np.testing.assert_allclose(query["mean"].values,
                               mu[[0, 2]] - k_aa @ k[:2, 2:] @ (np.array([0.5, 9.0]) - mu[[1, 4]]), rtol=1e-10)
    with pytest.raises(ValueError, match="both queried and observed"):
        dpgm.marginal(model, ["a"], {"a": 1.0})


def test_save_load_round_trips_exactly(tmp_path):
    model = dpgm.fit(dpgm.GaussianGraphicalModel([("a", "b"), ("b", "c")]),
                     dpgm.from_pandas(_data(seed=6)[["a", "b", "c"]])).model
    model.save(tmp_path / "g.zarr")
    again = dpgm.load(tmp_path / "g.zarr")
    assert again.edges == model.edges and again.variables == model.variables
    np.testing.assert_array_equal(again.covariance.values, model.covariance.values)
    np.testing.assert_array_equal(again.mean.values, model.mean.values)


def test_zarr_on_the_cluster_equals_memory(tmp_path, client):
    frame = _data(n=20_000, seed=7)
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "g.zarr", chunk_rows=3000)
    cycle = dpgm.GaussianGraphicalModel([("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("e", "a")])
    on_cluster = dpgm.fit(cycle, dpgm.open_dataset(tmp_path / "g.zarr"), client=client, tol=1e-12)
    in_memory = dpgm.fit(cycle, dpgm.from_pandas(frame), tol=1e-12)
    np.testing.assert_allclose(on_cluster.model.covariance.values, in_memory.model.covariance.values, rtol=1e-10)
    assert on_cluster.loglik == pytest.approx(in_memory.loglik, rel=1e-12)


def test_missing_values_are_refused_with_their_count_or_fitted_listwise():
    frame = _data(seed=8, missing=0.01)
    rows = int(frame.isna().any(axis=1).sum())
    chain = dpgm.GaussianGraphicalModel([("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")])
    with pytest.raises(dpgm.DataError, match=f"{rows:,} rows have a missing value"):
        dpgm.fit(chain, dpgm.from_pandas(frame))
    result = dpgm.fit(chain, dpgm.from_pandas(frame), missing="listwise")
    assert result.info["n_missing"] == rows and result.n_rows == len(frame) - rows


def test_bad_requests_are_refused():
    frame = _data(n=200, seed=9)
    ds = dpgm.from_pandas(frame.assign(k=pd.Categorical(["x", "y"] * 100)))
    cycle = dpgm.GaussianGraphicalModel([("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")])
    with pytest.raises(ValueError, match="closed_form needs a decomposable"):
        dpgm.fit(cycle, ds, method="closed_form")
    with pytest.raises(ValueError, match="alpha"):
        dpgm.fit(cycle, ds, method="glasso")
    with pytest.raises(dpgm.DataError, match="variable 'k'.*categorical"):
        dpgm.fit(dpgm.GaussianGraphicalModel([("a", "k")]), ds)
    with pytest.raises(ValueError, match="no parameters yet"):
        dpgm.marginal(cycle, ["a"])
    # 'e' = 'a' + 'b' exactly: the clique's sample covariance is singular, named by its variables
    collinear = dpgm.from_pandas(frame.assign(e=frame["a"] + frame["b"]))
    for method in ("ipf", "closed_form"):
        with pytest.raises(dpgm.DataError, match=r"sample covariance of \['a', 'b', 'e'\] is singular"):
            dpgm.fit(dpgm.GaussianGraphicalModel([("a", "b", "e"), ("e", "c")]), collinear, method=method)
    with pytest.raises(dpgm.DataError, match="variable 'c', chunk 1: holds an infinite value"):
        dpgm.fit(cycle, dpgm.from_pandas(frame.assign(c=np.where(np.arange(200) == 150, np.inf, frame["c"])))
                 .chunk({"row": 100}))


def test_covariance_selection_equals_direct_maximisation_with_scipy():
    """The issue's independent computation: maximise log det K - tr(S K) over precisions with the graph's
    zero pattern by SciPy's L-BFGS-B on the free entries (diagonal and edges)."""
    import scipy.optimize

    frame = _data(seed=10)
    n, s = len(frame), _sample_covariance(frame)
    cycle = dpgm.GaussianGraphicalModel([("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("e", "a"), ("b", "d")])
    rows, cols = np.nonzero(np.triu(_on_graph(cycle)))

    def objective(free):
        k = np.zeros((5, 5))
        k[rows, cols] = free
        k[cols, rows] = free
        sign, log_det = np.linalg.slogdet(k)
        if sign <= 0:
            return np.inf, np.zeros_like(free)
        gradient = s - np.linalg.inv(k)
        gradient = np.where(rows == cols, 1.0, 2.0) * gradient[rows, cols]
        return float(np.trace(s @ k) - log_det), gradient

    start = np.diag(1 / np.diag(s))[rows, cols]
    best = scipy.optimize.minimize(objective, start, jac=True, method="L-BFGS-B",
                                   options={"gtol": 1e-14, "ftol": 0, "maxiter": 10_000, "maxcor": 50})
    k = np.zeros((5, 5))
    k[rows, cols] = best.x
    k[cols, rows] = best.x
    result = dpgm.fit(cycle, dpgm.from_pandas(frame), method="ipf", tol=1e-13)
    np.testing.assert_allclose(result.model.covariance.values, np.linalg.inv(k), rtol=1e-8)
    off_graph = ~_on_graph(cycle)
    assert np.abs(result.model.precision.values[off_graph]).max() <= 1e-10 * np.abs(k).max()
    loglik = -0.5 * n * (5 * np.log(2 * np.pi) + best.fun)
    assert result.loglik == pytest.approx(loglik, abs=1e-8)


def _grid_data(rows: int, cols: int, n: int, seed: int):
    """Rows from a precision on a rows x cols grid graph (non-decomposable), and the grid's edges."""
    rng = np.random.default_rng(seed)
    names = [f"v{i}" for i in range(rows * cols)]
    edges = [(i, i + 1) for i in range(rows * cols) if (i + 1) % cols]
    edges += [(i, i + cols) for i in range(rows * cols - cols)]
    precision = np.eye(rows * cols) * 2.0
    for i, j in edges:
        precision[i, j] = precision[j, i] = rng.uniform(-0.45, 0.45)
    values = rng.multivariate_normal(rng.normal(0, 3, rows * cols), np.linalg.inv(precision), n)
    return pd.DataFrame(values, columns=names), [(names[i], names[j]) for i, j in edges]


def test_ips_on_a_30_variable_grid_equals_direct_maximisation_with_scipy():
    """A 5 x 6 grid (non-decomposable, 49 edges): IPS against SciPy maximising log det K - tr(S K) over the free
    entries (L-BFGS-B, then Newton steps with the exact Hessian to machine precision)."""
    import scipy.optimize

    frame, edges = _grid_data(5, 6, 5000, seed=11)
    p = frame.shape[1]
    s = _sample_covariance(frame)
    model = dpgm.GaussianGraphicalModel(edges, list(frame.columns))
    on = _on_graph(model)
    rows, cols = np.nonzero(np.triu(on))
    factor = np.where(rows == cols, 1.0, 2.0)

    def unpack(free):
        k = np.zeros((p, p))
        k[rows, cols] = free
        k[cols, rows] = free
        return k

    def objective(free):
        sign, log_det = np.linalg.slogdet(unpack(free))
        if sign <= 0:
            return np.inf, np.zeros_like(free)
        return float(np.trace(s @ unpack(free)) - log_det), factor * (s - np.linalg.inv(unpack(free)))[rows, cols]

    best = scipy.optimize.minimize(objective, np.diag(1 / np.diag(s))[rows, cols], jac=True, method="L-BFGS-B",
                                   options={"gtol": 1e-12, "ftol": 0, "maxiter": 20_000, "maxcor": 50})
    free = best.x
    for _ in range(3):  # Newton: d^2(-log det K)/dK_a dK_b = tr(Sigma E_a Sigma E_b) for the symmetric units E
        sigma = np.linalg.inv(unpack(free))
        hessian = (sigma[rows][:, rows] * sigma[cols][:, cols] + sigma[rows][:, cols] * sigma[cols][:, rows])
        hessian *= np.outer(factor, factor) / 2
        free = free - np.linalg.solve(hessian, objective(free)[1])
    k = unpack(free)
    result = dpgm.fit(model, dpgm.from_pandas(frame), method="ipf", tol=1e-13, max_iter=5000)
    assert result.converged
    np.testing.assert_allclose(result.model.covariance.values, np.linalg.inv(k), rtol=1e-8)
    assert np.abs(result.model.precision.values[~on]).max() <= 1e-10 * np.abs(k).max()
    loglik = -0.5 * len(frame) * (p * np.log(2 * np.pi) + objective(free)[0])
    assert result.loglik == pytest.approx(loglik, abs=1e-8)


def test_ips_on_a_40_variable_decomposable_graph_equals_the_closed_form():
    """A random 3-tree on 40 variables (chordal; cliques of 4 sharing triangles): IPS equals the
    clique/separator closed form."""
    rng = np.random.default_rng(12)
    cliques = [(0, 1, 2, 3)]
    for v in range(4, 40):
        base = cliques[rng.integers(len(cliques))]
        keep = tuple(sorted(rng.choice(base, 3, replace=False)))
        cliques.append((*keep, v))
    names = [f"v{i}" for i in range(40)]
    a = rng.normal(size=(40, 40))
    frame = pd.DataFrame(rng.multivariate_normal(np.zeros(40), a @ a.T / 40 + np.eye(40), 3000), columns=names)
    model = dpgm.GaussianGraphicalModel([tuple(names[i] for i in c) for c in cliques], names)
    closed = dpgm.fit(model, dpgm.from_pandas(frame), method="closed_form")
    by_ips = dpgm.fit(model, dpgm.from_pandas(frame), method="ipf", tol=1e-13)
    assert by_ips.converged
    np.testing.assert_allclose(by_ips.model.covariance.values, closed.model.covariance.values, rtol=1e-8)
    assert by_ips.loglik == pytest.approx(closed.loglik, abs=1e-8)

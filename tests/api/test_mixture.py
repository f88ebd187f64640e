"""Gaussian mixtures: EM against scikit-learn's GaussianMixture (same starts, every iteration), a NumPy
reference that marginalises each row's missing coordinates, the cluster against memory, bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from scipy.special import logsumexp
from sklearn.exceptions import ConvergenceWarning as SklearnConvergenceWarning
from sklearn.mixture import GaussianMixture as SklearnMixture

import dpgm
from dpgm.errors import ConfigError, ConvergenceWarning, DataError

VARIABLES = ["a", "b", "c"]
TYPES = ["full", "diag", "spherical", "tied"]


def _data(n: int = 600, seed: int = 0, offset: float = 0.0) -> np.ndarray:
    """Three correlated clusters of different sizes (about 3:2:1)."""
    rng = np.random.default_rng(seed)
    a = rng.multivariate_normal([0, 0, 0], [[1, 0.5, 0], [0.5, 1, 0.2], [0, 0.2, 1]], n // 2)
    b = rng.multivariate_normal([4, 4, 0], [[1, -0.3, 0], [-0.3, 2, 0], [0, 0, 0.5]], n // 3)
    c = rng.multivariate_normal([-3, 5, 2], np.eye(3) * 0.5, n - n // 2 - n // 3)
    return rng.permutation(np.concatenate([a, b, c])) + offset


def _dataset(x: np.ndarray, weights: np.ndarray | None = None) -> dpgm.Schema:
    frame = pd.DataFrame(x, columns=VARIABLES[: x.shape[1]])
    if weights is None:
        return dpgm.from_pandas(frame)
    return dpgm.from_pandas(frame.assign(weight=weights), weight="weight")


def _start(covariance_type: str, x: np.ndarray, k: int = 3) -> dict:
    """The same starting parameters for dpgm and scikit-learn: rows as means, scaled identity covariances."""
    p = x.shape[1]
    covariances = {"full": np.stack([np.eye(p) * (1 + c) for c in range(k)]),
                   "diag": np.stack([np.full(p, 1.0 + c) for c in range(k)]),
                   "spherical": 1.0 + np.arange(k), "tied": np.eye(p) * 1.5}[covariance_type]
    return {"weights": np.full(k, 1 / k), "means": x[[0, 1, 2][:k]] + 0.1, "covariances": covariances}


def _precisions(covariances: np.ndarray, covariance_type: str) -> np.ndarray:
    return 1.0 / covariances if covariance_type in ("diag", "spherical") else np.linalg.inv(covariances)


def _sklearn(x: np.ndarray, covariance_type: str, start: dict, max_iter: int, **options) -> SklearnMixture:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SklearnConvergenceWarning)
        return SklearnMixture(len(start["weights"]), covariance_type=covariance_type, weights_init=start["weights"],
                              means_init=start["means"],
                              precisions_init=_precisions(start["covariances"], covariance_type),
                              max_iter=max_iter, tol=0.0, **options).fit(x)


def _fit(data, covariance_type: str, **options) -> dpgm.FitResult:
    k = len(options["init"]["weights"]) if isinstance(options.get("init"), dict) else options.pop("k", 3)
    model = dpgm.GaussianMixture(k, variables=VARIABLES, covariance_type=covariance_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return dpgm.fit(model, data, **options)


def _logliks(result: dpgm.FitResult) -> np.ndarray:
    return np.array([h["loglik"] for h in result.history])


@pytest.mark.parametrize("covariance_type", TYPES)
def test_every_iteration_equals_scikit_learn_from_the_same_start(covariance_type):
    """sklearn's lower_bounds_[t] is the mean log-likelihood under the parameters its t-th E step used, as is
    dpgm's history[t] (summed over rows); its M step adds reg_covar to the diagonal and 10 eps to nk, as dpgm's.
    Equal to rel 1e-10 (observed: ~1e-15) over 25 iterations, and so are the final parameters."""
    x = _data(offset=50.0)  # far from zero: dpgm's statistics are centred on the current means
    start = _start(covariance_type, x)
    reference = _sklearn(x, covariance_type, start, max_iter=25, reg_covar=1e-4)
    result = _fit(_dataset(x), covariance_type, init=start, max_iter=25, tol=0.0, reg_covar=1e-4, accelerate=None)
    assert result.n_iter == 25 and result.passes == 25
    np.testing.assert_allclose(_logliks(result) / len(x), reference.lower_bounds_, rtol=1e-10)
    # dpgm's model is the one whose log-likelihood is reported: sklearn's parameters one M step before its last
    previous = _sklearn(x, covariance_type, start, max_iter=24, reg_covar=1e-4)
    np.testing.assert_allclose(result.model.weights.values, previous.weights_, rtol=1e-10)
    np.testing.assert_allclose(result.model.means.values, previous.means_, rtol=1e-10)
    np.testing.assert_allclose(result.model.covariances.values, previous.covariances_, rtol=1e-9)
    assert result.model.means.dims == ("component", "variable")
    assert list(result.model.means.coords["variable"].values) == VARIABLES


def test_frequency_weights_equal_repeated_rows():
    """A row of weight w counts as w copies: against scikit-learn on the expanded rows (rel 1e-10)."""
    x = _data(300, seed=3)
    weights = np.random.default_rng(3).integers(0, 4, len(x)).astype(float)
    expanded = np.repeat(x, weights.astype(int), axis=0)
    start = _start("full", expanded)
    reference = _sklearn(expanded, "full", start, max_iter=10)
    result = _fit(_dataset(x, weights), "full", init=start, max_iter=10, tol=0.0, accelerate=None)
    np.testing.assert_allclose(_logliks(result) / weights.sum(), reference.lower_bounds_, rtol=1e-10)
    assert result.n_rows == weights.sum()


@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_best_of_ten_restarts_reaches_scikit_learns_best_optimum(covariance_type):
    """dpgm: 10 k-means++ starts from a one-pass sample, EM to tol 1e-10; scikit-learn: 10 k-means starts, EM
    to tol 1e-10 (per-row mean). dpgm's best mean log-likelihood is at least sklearn's minus 1e-7 (a relative
    tolerance: both stop at a local optimum where the change per iteration is below ~1e-10)."""
    x = _data(1500, seed=5)
    x[:, 2] += np.random.default_rng(5).normal(0, 2, len(x))  # blurred clusters: EM has several optima
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SklearnConvergenceWarning)
        reference = SklearnMixture(3, covariance_type=covariance_type, n_init=10, tol=1e-10, max_iter=2000,
                                   random_state=0).fit(x)
    result = _fit(_dataset(x), covariance_type, k=3, n_init=10, random_state=0, tol=1e-12, max_iter=2000)
    assert result.converged
    assert len(result.info["restart_logliks"]) == 10
    # one pass per iteration for all restarts: passes = the longest restart's iterations
    assert result.passes == max(len(h) for h in result.info["restart_histories"])
    best = result.loglik / len(x)
    assert best >= reference.lower_bound_ - 1e-7 * abs(reference.lower_bound_)
    # and it is a fixed point of scikit-learn's EM: one more sklearn iteration from dpgm's optimum stays put
    start = {"weights": result.model.weights.values, "means": result.model.means.values,
             "covariances": result.model.covariances.values}
    np.testing.assert_allclose(_sklearn(x, covariance_type, start, max_iter=2).lower_bounds_, best, rtol=1e-9)


def _reference_em(x: np.ndarray, covariance_type: str, start: dict, n_iter: int, reg_covar: float):
    """EM with missing values, one row at a time: each row's density is the marginal of its observed
    coordinates; its missing ones are replaced by their conditional mean and their conditional covariance
    is added to the cross-products. Rows with nothing observed are skipped."""
    k, p = start["means"].shape
    weights, means = start["weights"].copy(), start["means"].copy()
    c = start["covariances"]
    full = {"full": c, "tied": np.stack([c] * k), "diag": np.stack([np.diag(v) for v in c]) if c.ndim == 2 else None,
            "spherical": np.stack([np.eye(p) * v for v in c]) if c.ndim == 1 else None}[covariance_type]
    logliks = []
    for _ in range(n_iter):
        nk, sums, cross, total = np.zeros(k), np.zeros((k, p)), np.zeros((k, p, p)), 0.0
        for row in x:
            o = ~np.isnan(row)
            if not o.any():
                continue
            m = ~o
            log_joint, filled, conditional = np.empty(k), [], []
            for j in range(k):
                s = full[j]
                log_joint[j] = np.log(weights[j]) + scipy.stats.multivariate_normal(
                    means[j][o], s[np.ix_(o, o)]).logpdf(row[o])
                gain = s[np.ix_(m, o)] @ np.linalg.inv(s[np.ix_(o, o)])
                value = row.copy()
                value[m] = means[j][m] + gain @ (row[o] - means[j][o])
                extra = np.zeros((p, p))
                extra[np.ix_(m, m)] = s[np.ix_(m, m)] - gain @ s[np.ix_(o, m)]
                filled.append(value)
                conditional.append(extra)
            norm = logsumexp(log_joint)
            total += norm
            r = np.exp(log_joint - norm)
            for j in range(k):
                nk[j] += r[j]
                sums[j] += r[j] * filled[j]
                cross[j] += r[j] * (np.outer(filled[j], filled[j]) + conditional[j])
        logliks.append(total)
        nk = nk + 10 * np.finfo(float).eps
        weights = nk / nk.sum()
        means = sums / nk[:, None]
        covariances = cross / nk[:, None, None] - np.einsum("ki,kj->kij", means, means)
        if covariance_type == "tied":
            covariances = np.stack([np.einsum("k,kij->ij", nk, covariances) / nk.sum()] * k)
        elif covariance_type == "diag":
            covariances = np.stack([np.diag(np.diag(s)) for s in covariances])
        elif covariance_type == "spherical":
            covariances = np.stack([np.eye(p) * np.diag(s).mean() for s in covariances])
        full = covariances + reg_covar * np.eye(p)
    return np.array(logliks), weights, means, full


@pytest.mark.parametrize("covariance_type", TYPES)
def test_missing_values_equal_a_reference_that_marginalises_each_row(covariance_type):
    """15% of coordinates missing at random plus 5 rows with nothing observed: per-iteration log-likelihoods
    and the final parameters equal the row-by-row NumPy/SciPy reference (rel 1e-10); nothing is dropped but
    the empty rows, which are counted."""
    x = _data(240, seed=7)
    rng = np.random.default_rng(7)
    x[rng.random(x.shape) < 0.15] = np.nan
    x[rng.choice(len(x), 5, replace=False)] = np.nan
    x[:3] = _data(240, seed=7)[:3]  # the start's rows stay complete
    start = _start(covariance_type, x)
    n_iter = 6
    logliks, weights, means, covariances = _reference_em(x, covariance_type, start, n_iter, 1e-6)
    result = _fit(_dataset(x), covariance_type, init=start, max_iter=n_iter, tol=0.0, accelerate=None)
    np.testing.assert_allclose(_logliks(result), logliks, rtol=1e-10)
    # the reported model is the one the last E step used: compare one more reference M step's input
    _, weights, means, covariances = _reference_em(x, covariance_type, start, n_iter - 1, 1e-6)
    np.testing.assert_allclose(result.model.weights.values, weights, rtol=1e-10)
    np.testing.assert_allclose(result.model.means.values, means, rtol=1e-10)
    np.testing.assert_allclose(result.model.component_covariances(), covariances, rtol=1e-9, atol=1e-14)
    empty = np.isnan(x).all(axis=1).sum()
    assert result.info["n_empty"] == empty == 5
    assert result.info["n_incomplete"] == (np.isnan(x).any(axis=1).sum() - empty)
    assert result.n_rows == len(x) - empty


def test_no_underflow_in_100_dimensions():
    """Densities of 100-dimensional rows are far below the smallest double: the log-likelihood comes by
    log-sum-exp and equals SciPy's logpdf mixture (rel 1e-10)."""
    rng = np.random.default_rng(11)
    p, k = 100, 2
    x = rng.normal(size=(400, p)) * 3 + np.where(rng.random((400, 1)) < 0.5, 0.0, 5.0)
    means = np.stack([np.zeros(p), np.full(p, 5.0)])
    covariances = np.stack([np.eye(p) * 0.05, np.eye(p) * 0.05])  # narrow: each row's density ~ exp(-1e4)
    model = dpgm.GaussianMixture(k, [f"v{i}" for i in range(p)], "full")
    data = dpgm.from_pandas(pd.DataFrame(x, columns=model.variables))
    init = {"weights": np.array([0.5, 0.5]), "means": means, "covariances": covariances}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        result = dpgm.fit(model, data, init=init, max_iter=1)
    expected = logsumexp(np.stack([np.log(0.5) + scipy.stats.multivariate_normal(means[j], covariances[j]).logpdf(x)
                                   for j in range(k)]), axis=0).sum()
    assert np.isfinite(result.loglik) and result.loglik < -1e5
    assert result.loglik == pytest.approx(expected, rel=1e-10)


def test_zarr_on_the_cluster_equals_memory_and_k_means_plus_plus_ignores_the_chunking(tmp_path, client):
    """The row sample is keyed by a hash of each row's values: the same starts from 1 in-memory slice and 7
    ragged Zarr chunks read on 2 worker processes, so the same fit (rel 1e-12; summation order differs)."""
    x = _data(2000, seed=9)
    x[np.random.default_rng(9).random(x.shape) < 0.05] = np.nan
    dpgm.write_dataset(_dataset(x), tmp_path / "m.zarr", chunk_rows=300)
    options = {"covariance_type": "full", "n_init": 3, "random_state": 4, "max_iter": 12, "tol": 0.0}
    covariance_type = options.pop("covariance_type")
    in_memory = _fit(_dataset(x), covariance_type, **options)
    on_cluster = _fit(dpgm.open_dataset(tmp_path / "m.zarr"), covariance_type, client=client, **options)
    assert on_cluster.info["restart"] == in_memory.info["restart"]
    for ours, theirs in zip(on_cluster.info["restart_histories"], in_memory.info["restart_histories"], strict=True):
        np.testing.assert_allclose([h["loglik"] for h in ours], [h["loglik"] for h in theirs], rtol=1e-12)
    np.testing.assert_allclose(on_cluster.model.covariances.values, in_memory.model.covariances.values, rtol=1e-9)
    assert on_cluster.passes == 12
    again = _fit(dpgm.open_dataset(tmp_path / "m.zarr"), covariance_type, client=client, **options)
    np.testing.assert_array_equal(_logliks(again), _logliks(on_cluster))  # same seed: the same run


def test_predict_proba_equals_scikit_learn_and_writes_into_the_store(tmp_path, client):
    x = _data(900, seed=12)
    start = _start("full", x)
    reference = _sklearn(x, "full", start, max_iter=10)
    model = dpgm.GaussianMixture(3, VARIABLES).with_parameters(reference.weights_, reference.means_,
                                                               reference.covariances_)
    dpgm.write_dataset(_dataset(x), tmp_path / "p.zarr", chunk_rows=200)
    data = dpgm.open_dataset(tmp_path / "p.zarr")
    proba = dpgm.predict_proba(model, data, "component", write=True, client=client)
    assert proba.dims == ("row", "component") and list(proba.coords["component"].values) == [0, 1, 2]
    np.testing.assert_allclose(proba.values, reference.predict_proba(x), rtol=1e-10, atol=1e-300)
    written = dpgm.open_dataset(tmp_path / "p.zarr")["component_proba"].values
    np.testing.assert_allclose(written, proba.values, rtol=1e-15)
    # a row with a missing coordinate: the posterior from the marginal of the observed two
    partial = x[:4].copy()
    partial[0, 1] = np.nan
    partial[1] = np.nan
    got = dpgm.predict_proba(model, _dataset(partial), "component").values
    cov = reference.covariances_
    marginal = [np.log(reference.weights_[j]) + scipy.stats.multivariate_normal(
        reference.means_[j][[0, 2]], cov[j][np.ix_([0, 2], [0, 2])]).logpdf(partial[0, [0, 2]]) for j in range(3)]
    np.testing.assert_allclose(got[0], np.exp(np.array(marginal) - logsumexp(marginal)), rtol=1e-10)
    np.testing.assert_allclose(got[1], reference.weights_, rtol=1e-12)  # nothing observed: the prior
    with pytest.raises(ValueError, match="'component'"):
        dpgm.predict_proba(model, data, "cluster")


@pytest.mark.parametrize("covariance_type", TYPES)
def test_save_load_round_trips_exactly(tmp_path, covariance_type):
    x = _data(300)
    result = _fit(_dataset(x), covariance_type, init=_start(covariance_type, x), max_iter=3, tol=0.0)
    result.model.save(tmp_path / "g.zarr")
    again = dpgm.load(tmp_path / "g.zarr")
    assert isinstance(again, dpgm.GaussianMixture) and again.covariance_type == covariance_type
    for name in ("weights", "means", "covariances"):
        np.testing.assert_array_equal(getattr(again, name).values, getattr(result.model, name).values)
        assert getattr(again, name).dims == getattr(result.model, name).dims
    assert again.variables == result.model.variables


def test_checkpoint_and_resume_continue_the_same_run(tmp_path):
    x = _data(500, seed=2)
    options = {"n_init": 2, "random_state": 1, "tol": 0.0}
    whole = _fit(_dataset(x), "diag", max_iter=8, **options)
    _fit(_dataset(x), "diag", max_iter=4, checkpoint=tmp_path / "ck", **options)
    resumed = _fit(_dataset(x), "diag", max_iter=8, resume=tmp_path / "ck", checkpoint=tmp_path / "ck", **options)
    np.testing.assert_allclose(_logliks(resumed), _logliks(whole), rtol=1e-13)
    np.testing.assert_allclose(resumed.model.means.values, whole.model.means.values, rtol=1e-13)


def test_bad_input_is_refused_with_a_clear_error():
    x = _data(300)
    bad = x.copy()
    bad[250, 1] = np.inf
    model = dpgm.GaussianMixture(3, VARIABLES)
    with pytest.raises(DataError, match="variable 'b'.*infinite"):
        dpgm.fit(model, _dataset(bad))
    constant = x.copy()
    constant[:, 2] = 1.0  # singular along 'c' in every component
    with pytest.raises(DataError, match=r"component \d's covariance \(full\) is singular.*\['c'\]"):
        _fit(_dataset(constant), "full", init=_start("full", x), reg_covar=0.0, max_iter=5)
    with pytest.raises(DataError, match=r"component \d's covariance \(diag\) is singular.*\['c'\]"):
        _fit(_dataset(constant), "diag", init=_start("diag", x), reg_covar=0.0, max_iter=5)
    regularised = _fit(_dataset(constant), "full", init=_start("full", x), reg_covar=1e-6, max_iter=5)
    assert np.isfinite(regularised.loglik)
    with pytest.raises(ConfigError, match="reg_covar"):
        dpgm.fit(model, _dataset(x), reg_covar=-1.0)
    with pytest.raises(ConfigError, match="alpha"):
        dpgm.fit(model, _dataset(x), alpha=1.0)
    with pytest.raises(ValueError, match=r"init\['means'\] must have shape \(3, 3\)"):
        dpgm.fit(model, _dataset(x), init={"weights": np.full(3, 1 / 3), "means": np.zeros((2, 3)),
                                           "covariances": np.stack([np.eye(3)] * 3)})
    with pytest.raises(DataError, match="'d' is not in the data|variable 'd'"):
        dpgm.fit(dpgm.GaussianMixture(2, ["a", "d"]), _dataset(x))
    with pytest.raises(DataError, match="too few for n_components=3"):
        dpgm.fit(model, _dataset(np.tile(x[:2], (10, 1))))
    with pytest.raises(ValueError, match="covariance_type"):
        dpgm.GaussianMixture(2, VARIABLES, covariance_type="banded")

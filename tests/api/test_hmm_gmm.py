"""Hidden Markov models with a Gaussian mixture per state (``{"family": "gmm"}``), against hmmlearn, scikit-learn
and enumeration.

dpgm's M step is the exact maximiser of the expected complete-data log-likelihood.
hmmlearn's ``GMMHMM`` with its priors off centres each covariance on the *previous*
means (``c_n`` accumulates ``(x - mu_old)(x - mu_old)^T``), so from the second
iteration its iterates differ from exact EM's, while their fixed points agree. The
oracles are therefore:

* iteration by iteration (all four covariance types, rel 1e-9): hmmlearn's
  ``GMMHMM`` for the log-likelihood, the state posteriors (``score_samples``) and the
  start and transition updates (``params="st"``), scikit-learn's ``GaussianMixture``
  for each state's mix posteriors and its weighted maximum-likelihood M step
  (``_estimate_gaussian_parameters``) with the steps weighted by their state
  posteriors;
* one mix per state: hmmlearn's ``GaussianHMM`` iteration by iteration (rel 1e-9);
* hmmlearn's own ``GMMHMM`` M step (priors off: ``weights_prior=1``, ``means_prior=0``,
  ``means_weight=0``; ``covars_prior``/``covars_weight`` chosen so the denominators are
  the posterior counts) run to convergence from the same start: the same maximum;
* a model of a categorical and a gmm family with missing values: the sum over every
  hidden path and every mix of the joint probability, with SciPy's densities (rel 1e-10).
"""

from __future__ import annotations

import itertools
import json
import warnings

import numpy as np
import pytest
import xarray as xr
from cli_runs import run_dpgm
from hmmlearn.hmm import GMMHMM, GaussianHMM
from scipy.stats import multivariate_normal
from sklearn.mixture import GaussianMixture
from sklearn.mixture._gaussian_mixture import (
    _compute_precision_cholesky,
    _estimate_gaussian_parameters,
)
from threadpoolctl import threadpool_limits

import dpgm

RTOL = 1e-9
N_STATES, N_MIX, N_FEATURES = 2, 2, 2
COVARIANCE_TYPES = ["full", "diag", "spherical", "tied"]


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """hmmlearn's and scikit-learn's many tiny triangular solves crawl when BLAS threads fight over shared cores."""
    with threadpool_limits(1):
        yield


def _truth(covariance_type: str) -> GMMHMM:
    """Two states, two mixes each, over two variables."""
    truth = GMMHMM(n_components=N_STATES, n_mix=N_MIX, covariance_type=covariance_type, init_params="")
    truth.startprob_, truth.transmat_ = np.array([0.6, 0.4]), np.array([[0.85, 0.15], [0.25, 0.75]])
    truth.weights_ = np.array([[0.35, 0.65], [0.5, 0.5]])
    truth.means_ = np.array([[[0.0, 0.0], [2.5, 1.0]], [[5.0, 5.0], [7.0, 2.5]]])
    full = np.array([[[[1.0, 0.3], [0.3, 0.7]], [[0.6, -0.2], [-0.2, 1.0]]],
                     [[[0.9, 0.0], [0.0, 0.5]], [[1.2, 0.4], [0.4, 0.8]]]])
    truth.covars_ = {"full": full, "diag": np.diagonal(full, axis1=2, axis2=3).copy(),
                     "spherical": np.array([[0.8, 0.7], [0.6, 1.0]]), "tied": full[:, 0]}[covariance_type]
    return truth


def _observations(covariance_type: str, n: int = 40, length: int = 30, seed: int = 1) -> np.ndarray:
    truth = _truth(covariance_type)
    return np.stack([truth.sample(length, random_state=seed * 1000 + i)[0] for i in range(n)])  # (B, T, 2)


def _dataset(observations: np.ndarray) -> xr.Dataset:
    return xr.Dataset({"x": (("row", "time"), observations[..., 0]), "y": (("row", "time"), observations[..., 1])})


def _start_arrays(covariance_type: str) -> dict[str, np.ndarray]:
    """A start away from the truth, in hmmlearn's shapes."""
    rng = np.random.default_rng(99)
    covariances = {"full": np.broadcast_to(np.eye(2) * 1.5, (N_STATES, N_MIX, 2, 2)).copy(),
                   "diag": np.full((N_STATES, N_MIX, 2), 1.5), "spherical": np.full((N_STATES, N_MIX), 1.5),
                   "tied": np.broadcast_to(np.eye(2) * 1.5, (N_STATES, 2, 2)).copy()}[covariance_type]
    return {"startprob": rng.dirichlet(np.ones(N_STATES)), "transmat": rng.dirichlet(np.ones(N_STATES), N_STATES),
            "weights": np.array([[0.5, 0.5], [0.4, 0.6]]),
            "means": np.array([[[0.5, 0.5], [2.0, 2.0]], [[4.0, 4.0], [6.0, 3.0]]]), "covars": covariances}


def _model(arrays: dict[str, np.ndarray], covariance_type: str, n_mix: int = N_MIX) -> dpgm.HiddenMarkovModel:
    structure = dpgm.hmm(N_STATES, emissions={("x", "y"): {"family": "gmm", "n_mix": n_mix,
                                                           "covariance_type": covariance_type}})
    family = structure.emissions[0].with_arrays(arrays["weights"], arrays["means"], arrays["covars"],
                                                structure.labels)
    return structure.with_parameters(arrays["startprob"], arrays["transmat"], [family])


def _gmmhmm(arrays: dict[str, np.ndarray], covariance_type: str, **options) -> GMMHMM:
    """hmmlearn's GMMHMM at ``arrays``, its priors off: the weights' Dirichlet flat, the means' prior weight 0,
    and the covariances' prior such that each denominator is the posterior count (full: ``covars_weight =
    -(n_features + 2)``, diag: ``covars_prior = -1.5``, spherical: ``covars_prior = -(n_features + 2) / 2`` (its
    default uses ``n_mix``), tied: ``covars_weight = -(n_mix + n_features + 1)``)."""
    priors = {"full": {"covars_prior": 0.0, "covars_weight": -(N_FEATURES + 2.0)},
              "diag": {"covars_prior": -1.5, "covars_weight": 0.0},
              "spherical": {"covars_prior": -(N_FEATURES + 2.0) / 2, "covars_weight": 0.0},
              "tied": {"covars_prior": 0.0, "covars_weight": -(arrays["weights"].shape[1] + N_FEATURES + 1.0)}}
    model = GMMHMM(n_components=N_STATES, n_mix=arrays["weights"].shape[1], covariance_type=covariance_type,
                   init_params="", tol=-np.inf, weights_prior=1.0, means_prior=0.0, means_weight=0.0,
                   **priors[covariance_type], **options)
    model.startprob_, model.transmat_ = arrays["startprob"].copy(), arrays["transmat"].copy()
    model.weights_, model.means_, model.covars_ = (arrays["weights"].copy(), arrays["means"].copy(),
                                                   arrays["covars"].copy())
    return model


def _mix_posteriors(x: np.ndarray, weights, means, covariances, covariance_type: str) -> np.ndarray:
    """scikit-learn's ``p(mix | x)`` for one state's mixture."""
    mixture = GaussianMixture(len(weights), covariance_type=covariance_type)
    mixture.weights_, mixture.means_, mixture.covariances_ = weights, means, covariances
    mixture.precisions_cholesky_ = _compute_precision_cholesky(covariances, covariance_type)
    return np.exp(mixture._estimate_log_prob_resp(x)[1])


def _oracle_em(arrays: dict[str, np.ndarray], covariance_type: str, x: np.ndarray, lengths: list[int],
               n_iter: int) -> tuple[list[float], dict[str, np.ndarray]]:
    """Exact EM from hmmlearn's forward-backward and scikit-learn's per-state mixture steps: the log-likelihood
    of each of ``n_iter`` iterations and the parameters after ``n_iter - 1`` M steps."""
    history = []
    for iteration in range(n_iter):
        reference = _gmmhmm(arrays, covariance_type, params="st", n_iter=1)
        _, gamma = reference.score_samples(x, lengths)
        reference.fit(x, lengths)
        history.append(reference.monitor_.history[0])
        if iteration == n_iter - 1:
            break
        new = {"startprob": reference.startprob_, "transmat": reference.transmat_}
        weights, means, covariances = [], [], []
        for s in range(N_STATES):
            state_covariances = arrays["covars"][s]
            responsibility = gamma[:, s, None] * _mix_posteriors(x, arrays["weights"][s], arrays["means"][s],
                                                                 state_covariances, covariance_type)
            kind = "full" if covariance_type == "tied" else covariance_type
            nk, mu, sigma = _estimate_gaussian_parameters(x, responsibility, 0.0, kind)
            weights.append(nk / nk.sum())
            means.append(mu)
            covariances.append(np.einsum("k,kij->ij", nk, sigma) / nk.sum() if covariance_type == "tied" else sigma)
        arrays = {**new, "weights": np.stack(weights), "means": np.stack(means), "covars": np.stack(covariances)}
    return history, arrays


def _fit(model, data, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        return dpgm.fit(model, data, **options)


def _assert_parameters(model: dpgm.HiddenMarkovModel, arrays: dict[str, np.ndarray], rtol: float,
                       atol: float = 0.0) -> None:
    family = model.emissions[0]
    np.testing.assert_allclose(model.start.values, arrays["startprob"], rtol=rtol, atol=atol)
    np.testing.assert_allclose(model.transition.values, arrays["transmat"], rtol=rtol, atol=atol)
    np.testing.assert_allclose(family.weights.values, arrays["weights"], rtol=rtol, atol=atol)
    np.testing.assert_allclose(family.means.values, arrays["means"], rtol=rtol, atol=atol)
    np.testing.assert_allclose(family.covariances.values, arrays["covars"], rtol=rtol, atol=atol)


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_gmm_emissions_are_exact_em_iteration_by_iteration(covariance_type):
    """Every iteration's log-likelihood and the final parameters equal exact EM computed with hmmlearn's
    forward-backward and scikit-learn's mixture steps (rel 1e-9)."""
    observations = _observations(covariance_type)
    arrays = _start_arrays(covariance_type)
    result = _fit(_model(arrays, covariance_type), _dataset(observations), init="model", tol=0, max_iter=10,
                  reg_covar=0.0, accelerate=None)
    x, lengths = observations.reshape(-1, 2), [observations.shape[1]] * observations.shape[0]
    history, final = _oracle_em(arrays, covariance_type, x, lengths, 10)
    np.testing.assert_allclose([h["loglik"] for h in result.history], history, rtol=RTOL)
    _assert_parameters(result.model, final, rtol=RTOL)
    assert np.all(np.diff(history) > 0)  # the oracle climbs: it is EM


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_one_mix_per_state_equals_hmmlearns_gaussian_hmm(covariance_type):
    """With ``n_mix=1`` the family is a Gaussian per state: hmmlearn's ``GaussianHMM`` iteration by iteration
    (rel 1e-9); a gmm's ``tied`` (shared by a state's mixes) is then GaussianHMM's ``full``."""
    observations = _observations(covariance_type, seed=3)
    arrays = _start_arrays(covariance_type)
    single = {**arrays, "weights": np.ones((N_STATES, 1)), "means": arrays["means"][:, :1],
              "covars": arrays["covars"] if covariance_type == "tied" else arrays["covars"][:, :1]}
    result = _fit(_model(single, covariance_type, n_mix=1), _dataset(observations), init="model", tol=0,
                  max_iter=8, reg_covar=0.0, accelerate=None)
    kind = "full" if covariance_type == "tied" else covariance_type
    reference = GaussianHMM(n_components=N_STATES, covariance_type=kind, init_params="", params="stmc", n_iter=8,
                            tol=-np.inf, covars_prior=0.0, means_weight=0.0)
    reference.startprob_, reference.transmat_ = single["startprob"], single["transmat"]
    reference.means_ = single["means"][:, 0]
    reference.covars_ = single["covars"] if covariance_type == "tied" else single["covars"][:, 0]
    reference.fit(observations.reshape(-1, 2), [observations.shape[1]] * observations.shape[0])
    np.testing.assert_allclose([h["loglik"] for h in result.history], reference.monitor_.history, rtol=RTOL)


@pytest.mark.slow
@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_the_maximum_is_hmmlearns_gmmhmm_maximum(covariance_type):
    """hmmlearn's own GMMHMM (priors off; its covariance step centred on the previous means) and dpgm's exact EM
    climb from the same start to the same maximum: log-likelihood rel 1e-10; parameters abs 1e-4 (both stop when
    an iteration gains less than 1e-13, where EM's linear rate leaves their parameters ~5e-6 apart)."""
    observations = _observations(covariance_type, n=30, length=25, seed=5)
    arrays = _start_arrays(covariance_type)
    x, lengths = observations.reshape(-1, 2), [observations.shape[1]] * observations.shape[0]
    result = _fit(_model(arrays, covariance_type), _dataset(observations), init="model", tol=1e-13, max_iter=5000,
                  reg_covar=0.0)
    reference = _gmmhmm(arrays, covariance_type, params="stmcw", n_iter=5000)
    reference.monitor_.tol = 1e-13
    reference.fit(x, lengths)
    assert result.converged and reference.monitor_.converged
    assert result.loglik == pytest.approx(reference.score(x, lengths), rel=1e-10)
    _assert_parameters(result.model, {"startprob": reference.startprob_, "transmat": reference.transmat_,
                                      "weights": reference.weights_, "means": reference.means_,
                                      "covars": reference.covars_}, rtol=0, atol=1e-4)


def test_gmm_hmm_from_zarr_on_the_cluster_equals_in_memory_and_decodes_as_hmmlearn(tmp_path, client):
    """A Zarr store (ragged chunks) on the 2-worker cluster gives the in-memory fit's iterates (rel 1e-12); the
    fitted model's Viterbi paths equal hmmlearn's GMMHMM ``decode`` and its posteriors ``predict_proba`` (rel
    1e-9)."""
    observations = _observations("full", n=50, length=20, seed=7)
    data = _dataset(observations)
    dpgm.write_dataset(data, tmp_path / "g.zarr", chunk_rows=17)
    start = _model(_start_arrays("full"), "full")
    stored = dpgm.open_dataset(tmp_path / "g.zarr")
    on_cluster = _fit(start, stored, init="model", tol=0, max_iter=6, reg_covar=0.0, client=client)
    in_memory = _fit(start, data, init="model", tol=0, max_iter=6, reg_covar=0.0)
    np.testing.assert_allclose([h["loglik"] for h in on_cluster.history],
                               [h["loglik"] for h in in_memory.history], rtol=1e-12)
    for name, table in in_memory.model.emissions[0].tables().items():
        np.testing.assert_allclose(on_cluster.model.emissions[0].tables()[name].values, table.values, rtol=1e-12)
    assert on_cluster.passes == 6
    fitted = on_cluster.model
    family = fitted.emissions[0]
    reference = _gmmhmm({"startprob": fitted.start.values, "transmat": fitted.transition.values,
                         "weights": family.weights.values, "means": family.means.values,
                         "covars": family.covariances.values}, "full")
    paths = dpgm.predict(fitted, stored, client=client).values
    posteriors = dpgm.predict_proba(fitted, stored, "state", client=client).values
    for i in range(len(observations)):
        np.testing.assert_array_equal(paths[i], reference.decode(observations[i], algorithm="viterbi")[1])
        np.testing.assert_allclose(posteriors[i], reference.predict_proba(observations[i]), rtol=1e-9, atol=1e-12)


def _mixed_model(covariance_type: str = "full") -> dpgm.HiddenMarkovModel:
    """Two states; a categorical status and two continuous channels, a mixture of two Gaussians per state."""
    structure = dpgm.hmm(2, emissions={"status": ["ok", "fault"],
                                       ("u", "v"): {"family": "gmm", "n_mix": 2, "covariance_type": covariance_type}})
    status, channels = structure.emissions
    status = status.with_tables({"table": np.array([[0.8, 0.2], [0.3, 0.7]])})
    full = np.array([[[[1.0, 0.4], [0.4, 0.9]], [[0.5, -0.1], [-0.1, 0.7]]],
                     [[[0.8, 0.2], [0.2, 0.6]], [[1.3, -0.5], [-0.5, 1.1]]]])
    covariances = {"full": full, "diag": np.diagonal(full, axis1=2, axis2=3).copy()}[covariance_type]
    channels = channels.with_arrays(np.array([[0.3, 0.7], [0.55, 0.45]]),
                                    np.array([[[0.0, 1.0], [1.5, -0.5]], [[3.0, 0.5], [2.0, 2.5]]]), covariances,
                                    structure.labels)
    return structure.with_parameters(np.array([0.6, 0.4]), np.array([[0.75, 0.25], [0.35, 0.65]]),
                                     [status, channels])


def _enumerated_loglik(model: dpgm.HiddenMarkovModel, status, u, v) -> float:
    """``log`` of the sum, over every hidden path and every path of mixes, of the joint probability of one
    sequence's observed values (SciPy's normal densities of the observed coordinates; -1 / NaN left out of the
    product; trailing unobserved steps: padding)."""
    table, channels = model.emissions
    weights, means, covariances = channels.weights.values, channels.means.values, channels.full()
    observed = (status >= 0) | ~np.isnan(u) | ~np.isnan(v)
    length = int(np.nonzero(observed)[0].max()) + 1
    n_mix = weights.shape[1]
    # density[t, s * n_mix + k]: p(status_t | s) w_sk N(observed part of (u_t, v_t); mu_sk, S_sk)
    density = np.ones((length, 2 * n_mix))
    for t in range(length):
        point = np.array([u[t], v[t]])
        seen = ~np.isnan(point)
        for s, k in itertools.product(range(2), range(n_mix)):
            p = table.table.values[s, status[t]] if status[t] >= 0 else 1.0
            p *= weights[s, k]
            if seen.any():
                p *= multivariate_normal(means[s, k][seen], covariances[s, k][np.ix_(seen, seen)]).pdf(point[seen])
            density[t, s * n_mix + k] = p
    paths = np.array(list(itertools.product(range(2 * n_mix), repeat=length)))  # (state, mix) per step
    hidden = paths // n_mix
    joint = model.start.values[hidden[:, 0]] * density[np.arange(length), paths].prod(axis=1)
    joint *= model.transition.values[hidden[:, :-1], hidden[:, 1:]].prod(axis=1)
    return float(np.log(joint.sum()))


def _missing_data(seed: int, n: int, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, xr.Dataset]:
    rng = np.random.default_rng(seed)
    status = rng.integers(0, 2, (n, length))
    u, v = rng.normal(1.5, 1.6, (n, length)), rng.normal(1.0, 1.4, (n, length))
    status[rng.random((n, length)) < 0.2] = -1
    u[rng.random((n, length)) < 0.25] = np.nan  # steps with one coordinate missing, some with both
    v[rng.random((n, length)) < 0.25] = np.nan
    status[0, 3:], u[0, 3:], v[0, 3:] = -1, np.nan, np.nan  # a shorter sequence
    data = xr.Dataset({"status": (("row", "time"), status.astype(np.int8), {"states": ["ok", "fault"]}),
                       "u": (("row", "time"), u), "v": (("row", "time"), v)})
    return status, u, v, data


def test_categorical_and_gmm_with_missing_values_score_as_the_enumeration_of_every_path_and_mix():
    """``dpgm.score`` per sequence equals the enumeration of every hidden path and mix (rel 1e-10), with
    categorical codes missing, one or both continuous coordinates missing (their marginal density), and a
    shorter sequence; every EM iteration's log-likelihood is the enumeration's at that iteration's parameters,
    and they climb."""
    model = _mixed_model()
    status, u, v, data = _missing_data(7, 10, 6)
    assert (np.isnan(u) ^ np.isnan(v)).any() and (np.isnan(u) & np.isnan(v)).any()
    scores = dpgm.score(model, data)
    expected = [_enumerated_loglik(model, status[i], u[i], v[i]) for i in range(len(status))]
    np.testing.assert_allclose(scores.values, expected, rtol=1e-10)
    result = _fit(model, data, init="model", tol=0, max_iter=4, reg_covar=0.0)
    assert result.history[0]["loglik"] == pytest.approx(sum(expected), rel=1e-10)
    assert np.all(np.diff([h["loglik"] for h in result.history]) > 0)
    fitted = [_enumerated_loglik(result.model, status[i], u[i], v[i]) for i in range(len(status))]
    assert result.history[-1]["loglik"] == pytest.approx(sum(fitted), rel=1e-10)  # the model the last one measured
    np.testing.assert_allclose(dpgm.score(result.model, data).values, fitted, rtol=1e-10)


def test_em_with_partially_missing_steps_stops_where_the_likelihood_is_stationary():
    """EM's statistics fill a step's missing coordinates with their conditional moments given the observed ones
    (Ghahramani & Jordan); EM's fixed point is then a stationary point of the observed-data log-likelihood
    (Fisher's identity). Central differences of that log-likelihood (``dpgm.score``, equal to the enumeration of
    every path and mix at the fitted parameters, rel 1e-10) in every mean, variance and covariance vanish
    there: below 1e-4 of their size at the start."""
    status, u, v, data = _missing_data(11, 150, 6)
    result = _fit(_mixed_model(), data, init="model", tol=1e-13, max_iter=20000, reg_covar=0.0,
                  accelerate="squarem")
    assert result.converged
    fitted = result.model
    np.testing.assert_allclose(dpgm.score(fitted, data).values[:8],
                               [_enumerated_loglik(fitted, status[i], u[i], v[i]) for i in range(8)], rtol=1e-10)

    def gradient(model: dpgm.HiddenMarkovModel) -> np.ndarray:
        channels = model.emissions[1]
        out = []
        for name in ("means", "covariances"):
            base = channels.tables()[name].values
            for index in np.ndindex(base.shape):
                if name == "covariances" and index[2] > index[3]:
                    continue  # a symmetric matrix: one entry moves both
                step = 1e-5
                moved = []
                for sign in (1, -1):
                    changed = base.copy()
                    changed[index] += sign * step
                    if name == "covariances":
                        changed[index[:2] + index[:1:-1]] = changed[index]
                    family = channels.with_tables({**channels.tables(), name: changed})
                    moved.append(float(dpgm.score(model.with_parameters(model.start.values, model.transition.values,
                                                                        [model.emissions[0], family]),
                                                  data).sum()))
                out.append((moved[0] - moved[1]) / (2 * step))
        return np.array(out)

    at_start, at_end = gradient(_mixed_model()), gradient(fitted)
    assert np.abs(at_end).max() < 1e-4 * np.abs(at_start).max(), (at_start, at_end)


def test_models_with_gmm_families_save_and_load(tmp_path):
    """Two gmm families of different ``n_mix`` and covariance types beside a categorical and a Gaussian one round-
    trip exactly (their ``mix`` and ``variable`` dims are kept apart in the store)."""
    structure = dpgm.hmm(2, emissions={"status": ["ok", "fault"], ("u", "v"): {"family": "gmm", "n_mix": 2,
                                                                                  "covariance_type": "tied"},
                                       "w": {"family": "gmm", "n_mix": 3, "covariance_type": "spherical"},
                                       ("a", "b", "c"): {"family": "gaussian", "covariance_type": "diag"}})
    status, pair, single, gaussian = structure.emissions
    rng = np.random.default_rng(4)
    pair = pair.with_arrays(rng.dirichlet(np.ones(2), 2), rng.normal(size=(2, 2, 2)),
                            np.stack([np.eye(2) * 0.7, [[1.0, 0.3], [0.3, 0.5]]]), structure.labels)
    single = single.with_arrays(rng.dirichlet(np.ones(3), 2), rng.normal(size=(2, 3, 1)), rng.uniform(0.5, 2, (2, 3)),
                                structure.labels)
    gaussian = gaussian.with_arrays(rng.normal(size=(2, 3)), rng.uniform(0.5, 2, (2, 3)), structure.labels)
    model = structure.with_parameters(np.array([0.3, 0.7]), np.array([[0.9, 0.1], [0.4, 0.6]]),
                                      [status, pair, single, gaussian])
    model.save(str(tmp_path / "m.zarr"))
    loaded = dpgm.load(str(tmp_path / "m.zarr"))
    assert [f.spec() for f in loaded.emissions] == [f.spec() for f in model.emissions]
    for mine, theirs in zip(model.emissions, loaded.emissions, strict=True):
        for name, table in mine.tables().items():
            assert theirs.tables()[name].dims == table.dims
            np.testing.assert_array_equal(theirs.tables()[name].values, table.values)
    assert loaded.n_free_parameters() == model.n_free_parameters()


def test_free_parameters_count_every_states_mix_weights():
    """hmmlearn's ``GMMHMM`` counts ``n_mix - 1`` weights in all; each state has its own ``n_mix - 1``, so dpgm
    counts ``(n_states - 1)(n_mix - 1)`` more, and otherwise as hmmlearn (all four covariance types)."""
    for covariance_type in COVARIANCE_TYPES:
        for n_states, n_mix in [(2, 2), (3, 4), (4, 1)]:
            model = dpgm.hmm(n_states, emissions={("x", "y", "z"): {"family": "gmm", "n_mix": n_mix,
                                                                     "covariance_type": covariance_type}})
            reference = GMMHMM(n_components=n_states, n_mix=n_mix, covariance_type=covariance_type)
            reference.n_features = 3
            counted = sum(reference._get_n_fit_scalars_per_param().values())
            assert model.n_free_parameters() == counted + (n_states - 1) * (n_mix - 1)


def test_starts_from_the_data_recover_the_mixes():
    """k-means++ on the hashed step sample (states, then each state's mixes) and EM recover well-separated
    mixes: every true mean within 0.15 of a fitted one (12,000 steps: standard errors ~0.02-0.04)."""
    observations = _observations("diag", n=300, length=40, seed=9)
    structure = dpgm.hmm(N_STATES, emissions={("x", "y"): {"family": "gmm", "n_mix": N_MIX}})
    result = _fit(structure, _dataset(observations), n_init=3, random_state=0, tol=1e-8, max_iter=500)
    fitted = result.model.emissions[0].means.values.reshape(-1, 2)
    truth = _truth("diag").means_.reshape(-1, 2)
    distances = np.linalg.norm(truth[:, None] - fitted[None], axis=2)
    assert sorted(distances.argmin(axis=1)) == [0, 1, 2, 3]
    assert distances.min(axis=1).max() < 0.15


def test_squarem_reaches_plain_ems_maximum_and_bad_settings_are_refused():
    """SQUAREM extrapolates in log weights (renormalised per state), means and log-Cholesky covariances and reaches
    plain EM's log-likelihood from the same start (abs 1e-5) in fewer passes; a gmm without ``n_mix``, with an
    unknown setting or a bad ``n_mix`` is refused, and so are incremental EM, data with fewer distinct steps than
    states x mixes, a covariance that collapses (naming the state, the mix and the variable) and an infinite value
    (naming the variable and chunk)."""
    observations = _observations("full", n=40, length=30, seed=13)
    data = _dataset(observations)
    start = _model(_start_arrays("full"), "full")
    plain = _fit(start, data, init="model", tol=1e-10, max_iter=3000, reg_covar=0.0, accelerate=None)
    fast = _fit(start, data, init="model", tol=1e-10, max_iter=3000, reg_covar=0.0, accelerate="squarem")
    assert plain.converged and fast.converged
    assert fast.loglik == pytest.approx(plain.loglik, abs=1e-5)
    assert fast.passes < plain.passes
    with pytest.raises(ValueError, match="needs n_mix"):
        dpgm.hmm(2, emissions={"x": "gmm"})
    with pytest.raises(ValueError, match="unknown emission settings"):
        dpgm.hmm(2, emissions={"x": {"family": "gmm", "n_mix": 2, "mixes": 3}})
    with pytest.raises(ValueError, match="n_mix must be a positive integer"):
        dpgm.hmm(2, emissions={"x": {"family": "gmm", "n_mix": 0}})
    from dpgm.errors import ConfigError, DataError

    with pytest.raises(ConfigError, match="incremental"):
        dpgm.fit(dpgm.hmm(2, emissions={("x", "y"): {"family": "gmm", "n_mix": 2}}), data, incremental=True)
    constant = data.assign(x=data["x"] * 0 + 1.5)
    with pytest.raises(DataError, match=r"too few for 2 hidden states x 2 mixes"):
        dpgm.fit(dpgm.hmm(2, emissions={"x": {"family": "gmm", "n_mix": 2}}), constant.assign(y=constant["x"]))
    with pytest.raises(DataError, match=r"hidden state '0': mix \d's covariance \(full\) is singular .*\['x'\]"):
        _fit(start, constant, init="model", reg_covar=0.0)
    infinite = data.copy(deep=True)
    infinite["y"][3, 4] = np.inf
    with pytest.raises(DataError, match=r"variable 'y', chunk 0: holds an infinite value"):
        _fit(start, infinite, init="model")


@pytest.mark.slow
@pytest.mark.usefixtures("shared_cluster")
def test_dpgm_fit_cli_takes_a_gmm_spec(tmp_path):
    """``dpgm fit`` on a YAML ``emissions:`` spec with a gmm family (a real subprocess on the session's cluster):
    the saved model is the Python API's fit of the same spec (rel 1e-10), and the reported log-likelihood is
    hmmlearn's GMMHMM score of the saved parameters (rel 1e-9)."""
    observations = _observations("diag", n=60, length=30, seed=17)
    dpgm.write_dataset(_dataset(observations), tmp_path / "d.zarr", chunk_rows=25)
    spec = tmp_path / "gmm.yaml"
    spec.write_text("model: hmm\nn_states: 2\nemissions:\n  x, y: {family: gmm, n_mix: 2, covariance_type: diag}\n"
                    "n_init: 2\nrandom_state: 3\ntol: 1.0e-6\nmax_iter: 200\n")
    run_dpgm("fit", spec, tmp_path / "d.zarr", "--out", tmp_path / "m.zarr", "--report", tmp_path / "r.json",
             check=True)
    saved = dpgm.load(str(tmp_path / "m.zarr"))
    assert saved.emissions[0].spec() == {"family": "gmm", "variables": ["x", "y"], "n_mix": 2,
                                         "covariance_type": "diag"}
    structure = dpgm.hmm(2, emissions={("x", "y"): {"family": "gmm", "n_mix": 2, "covariance_type": "diag"}})
    mine = _fit(structure, dpgm.open_dataset(tmp_path / "d.zarr"), n_init=2, random_state=3, tol=1e-6,
                max_iter=200).model
    for name, table in mine.emissions[0].tables().items():
        np.testing.assert_allclose(saved.emissions[0].tables()[name].values, table.values, rtol=1e-10)
    family = saved.emissions[0]
    reference = _gmmhmm({"startprob": saved.start.values, "transmat": saved.transition.values,
                         "weights": family.weights.values, "means": family.means.values,
                         "covars": family.covariances.values}, "diag")
    report = json.loads((tmp_path / "r.json").read_text())
    x, lengths = observations.reshape(-1, 2), [observations.shape[1]] * observations.shape[0]
    assert report["loglik"] == pytest.approx(reference.score(x, lengths), rel=1e-9)


def test_standard_errors_equal_a_numerical_hessian_of_hmmlearns_score():
    """The observed information's standard errors (each state's mix weights moved within their simplex) equal the
    inverse negative Hessian of hmmlearn's ``GMMHMM.score`` (statsmodels' ``approx_hess3``) in the 13 free
    parameters of 2 states x 2 mixes over one variable, carried to every entry by the delta method (rel 1e-4:
    two finite-difference Hessians with different steps)."""
    from statsmodels.tools.numdiff import approx_hess3

    truth = GMMHMM(n_components=2, n_mix=2, covariance_type="diag", init_params="")
    truth.startprob_, truth.transmat_ = np.array([0.6, 0.4]), np.array([[0.85, 0.15], [0.25, 0.75]])
    truth.weights_ = np.array([[0.35, 0.65], [0.5, 0.5]])
    truth.means_, truth.covars_ = np.array([[[0.0], [2.5]], [[6.0], [9.0]]]), np.array([[[1.0], [0.6]], [[0.9],
                                                                                                           [1.2]]])
    x = np.stack([truth.sample(20, random_state=100 + i)[0][:, 0] for i in range(60)])
    structure = dpgm.hmm(2, emissions={"x": {"family": "gmm", "n_mix": 2}})
    start = structure.with_parameters(np.array([0.5, 0.5]), np.array([[0.8, 0.2], [0.2, 0.8]]), [
        structure.emissions[0].with_arrays(np.full((2, 2), 0.5), np.array([[[0.5], [2.0]], [[5.0], [8.0]]]),
                                           np.ones((2, 2, 1)), structure.labels)])
    result = _fit(start, xr.Dataset({"x": (("row", "time"), x)}), init="model", tol=1e-13, max_iter=20000,
                  reg_covar=0.0, accelerate="squarem")
    assert result.converged
    family = result.model.emissions[0]

    def unpack(theta: np.ndarray) -> dict[str, np.ndarray]:
        return {"startprob": np.array([theta[0], 1 - theta[0]]),
                "transmat": np.array([[theta[1], 1 - theta[1]], [theta[2], 1 - theta[2]]]),
                "weights": np.array([[theta[3], 1 - theta[3]], [theta[4], 1 - theta[4]]]),
                "means": theta[5:9].reshape(2, 2, 1), "covars": theta[9:13].reshape(2, 2, 1)}

    def loglik(theta: np.ndarray) -> float:
        return float(_gmmhmm(unpack(theta), "diag").score(x.reshape(-1, 1), [x.shape[1]] * x.shape[0]))

    theta = np.concatenate([[result.model.start.values[0]], result.model.transition.values[:, 0],
                            family.weights.values[:, 0], family.means.values.ravel(), family.covariances.values.ravel()])
    jacobian = np.zeros((2 + 4 + 4 + 4 + 4, 13))
    jacobian[0, 0], jacobian[1, 0] = 1, -1
    for i in range(2):
        jacobian[2 + 2 * i, 1 + i], jacobian[3 + 2 * i, 1 + i] = 1, -1
        jacobian[6 + 2 * i, 3 + i], jacobian[7 + 2 * i, 3 + i] = 1, -1
    jacobian[10:, 5:] = np.eye(8)
    expected = np.sqrt(np.diag(jacobian @ np.linalg.inv(-approx_hess3(theta, loglik)) @ jacobian.T))
    errors = result.standard_errors
    np.testing.assert_allclose(errors["start"].values, expected[:2], rtol=1e-4)
    np.testing.assert_allclose(errors["transition"].values, expected[2:6].reshape(2, 2), rtol=1e-4)
    np.testing.assert_allclose(errors["emission0:weights"].values, expected[6:10].reshape(2, 2), rtol=1e-4)
    np.testing.assert_allclose(errors["emission0:means"].values, expected[10:14].reshape(2, 2, 1), rtol=1e-4)
    np.testing.assert_allclose(errors["emission0:covariances"].values, expected[14:].reshape(2, 2, 1), rtol=1e-4)

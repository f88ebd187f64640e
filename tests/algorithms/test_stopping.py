"""Each EM record's ``gap``: the estimated distance from its log-likelihood to the maximum.

Oracle: the maximum of the observed-data log-likelihood of a latent class model with missing values,
written here by enumeration of the class and maximised by SciPy's L-BFGS-B (analytic gradient in logits)
from EM's end point and from the true parameters; the distance of each EM record from it is the true gap
the recorded estimate is checked against.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import expit, logsumexp

import dpgm
from dpgm.models.parameters import with_parameters

QUESTIONS = {f"q{i}": ["a", "b"] for i in range(5)}
# P(q = a | class 0, 1): weakly separated classes, so plain EM is slow (hundreds of steps)
P_A = np.array([[0.7, 0.45], [0.65, 0.4], [0.6, 0.5], [0.7, 0.35], [0.55, 0.45]])
TOL = 1e-9
PRECISION = 1e-9  # relative: well above L-BFGS-B's own precision on the maximum
ROWS = 3000


def _data(seed: int):
    truth = with_parameters(dpgm.latent_class_model(QUESTIONS, 2),
                            {"table:class": np.array([0.45, 0.55]),
                             **{f"table:{q}": np.array([P_A[i], 1 - P_A[i]]) for i, q in enumerate(QUESTIONS)}})
    return dpgm.sample_bayesian_network(truth, ROWS, None, seed=seed, missing=0.1).drop_vars("class")


def _maximum(codes: np.ndarray, starts: list[np.ndarray]) -> float:
    """The largest log-likelihood L-BFGS-B reaches from ``starts`` (logits: class, then P(a | q, class))."""
    observed, is_a = codes >= 0, codes == 0

    def negative(theta):
        prior = theta[0] - np.logaddexp(0.0, theta[0])  # log P(class 0)
        log_prior = np.array([prior, np.log1p(-np.exp(prior))])
        eta = theta[1:].reshape(5, 2)
        p = expit(eta)  # P(a | q, class)
        log_p = np.where(is_a[:, :, None], -np.logaddexp(0.0, -eta)[None], -np.logaddexp(0.0, eta)[None])
        joint = log_prior[None, :] + np.where(observed[:, :, None], log_p, 0.0).sum(axis=1)
        total = logsumexp(joint, axis=1)
        r = np.exp(joint - total[:, None])  # class posteriors
        g_prior = np.sum(r[:, 0] - np.exp(log_prior[0]))
        g_eta = np.einsum("rc,rqc->qc", r, np.where(observed[:, :, None], is_a[:, :, None] - p[None], 0.0))
        return -float(total.sum()), -np.concatenate([[g_prior], g_eta.ravel()])

    best = -np.inf
    for start in starts:
        found = minimize(negative, start, jac=True, method="L-BFGS-B",
                         options={"gtol": 1e-12, "ftol": 1e-16, "maxiter": 20_000})
        best = max(best, -found.fun)
    return best


def _logits(model) -> np.ndarray:
    classes = [str(c) for c in model.cpds["class"].coords["class"].values]
    prior = float(model.cpds["class"].sel({"class": classes[0]}))
    p_a = np.array([[float(model.cpds[q].sel({q: "a", "class": c})) for c in classes] for q in QUESTIONS])
    return np.concatenate([[np.log(prior / (1 - prior))], np.log(p_a / (1 - p_a)).ravel()])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plain_em_gap_is_at_most_3x_short_of_the_true_distance(seed):
    """Plain EM on weakly separated classes (its rate creeps up to 0.9995): where a stopping rule would act
    (an estimate within 1e-6 |loglik|) and the true distance is above L-BFGS-B's precision, the true
    distance is at most 3x the estimate (earlier, before EM's linear phase, the estimate is shorter)."""
    data = _data(seed)
    codes = np.stack([data[q].values for q in QUESTIONS], axis=1)  # -1: missing
    start = dpgm.latent_class_model(QUESTIONS, 2).randomized(np.random.default_rng(seed))
    result = dpgm.fit(start, data, method="em", init="model", tol=TOL, max_iter=20_000, accelerate=None)
    maximum = _maximum(codes, [_logits(result.model), _logits(start)])
    assert maximum - result.loglik <= 1e-6 * ROWS  # EM got there (its rule is the relative change)
    judged = [r for r in result.history if r["gap"] is not None]
    assert len(judged) > 0.5 * len(result.history)
    checked = 0
    for record in judged:
        true = maximum - record["loglik"]
        if true > PRECISION * abs(maximum) and record["gap"] <= 1e-6 * abs(record["loglik"]):
            checked += 1
            assert true <= 3 * record["gap"], (record, true)
    assert checked >= 10


@pytest.mark.parametrize("accelerate", [None, "default"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_converged_fit_is_within_tol_of_the_maximum(seed, accelerate):
    """The stopping rule: ``converged`` means within ``tol`` (relative) of the L-BFGS-B maximum, for plain EM
    and for the default (SQUAREM, its estimate confirmed by plain EM steps). The former rule (relative change
    of one step at most tol) stopped 10⁻⁶ to 10⁻⁵ relative short here, where EM's rate is 0.999."""
    data = _data(seed)
    codes = np.stack([data[q].values for q in QUESTIONS], axis=1)
    start = dpgm.latent_class_model(QUESTIONS, 2).randomized(np.random.default_rng(seed))
    options = {} if accelerate == "default" else {"accelerate": accelerate}
    tol = 1e-9
    result = dpgm.fit(start, data, method="em", init="model", tol=tol, max_iter=20_000, **options)
    assert result.converged
    maximum = _maximum(codes, [_logits(result.model), _logits(start)])
    assert maximum - result.loglik <= tol * abs(maximum), (maximum - result.loglik) / abs(maximum)


def test_squarem_records_a_gap_for_each_image_of_an_extrapolated_point(client, tmp_path):
    """SQUAREM from Zarr on the 2-worker cluster: every accepted EM image after an extrapolation has a
    positive ``gap``; extrapolated points have none; the last one is below the distance at the start."""
    data = _data(3)
    dpgm.write_dataset(data, tmp_path / "lcm.zarr", chunk_rows=700)
    start = dpgm.latent_class_model(QUESTIONS, 2).randomized(np.random.default_rng(3))
    result = dpgm.fit(start, dpgm.open_dataset(tmp_path / "lcm.zarr"), method="em", init="model", tol=1e-10,
                      max_iter=2_000, accelerate="squarem", client=client)
    codes = np.stack([data[q].values for q in QUESTIONS], axis=1)
    maximum = _maximum(codes, [_logits(result.model), _logits(start)])
    assert all(r["gap"] is None for r in result.history if r["step"] == "extrapolated")
    images = [r for r in result.history if r["step"] == "em" and r["accepted"] and r["gap"] is not None]
    assert images and all(r["gap"] >= 0 for r in images)
    assert maximum - result.loglik <= 1e-6 * ROWS
    assert images[-1]["gap"] < maximum - result.history[0]["loglik"]
    drawn = {line.get_label(): line for line in result.plot().axes[1].get_lines()}
    line = drawn["estimated distance to the maximum"]  # the convergence plot's panel
    np.testing.assert_array_equal(line.get_ydata(), [r["gap"] for r in result.history if r["gap"]])

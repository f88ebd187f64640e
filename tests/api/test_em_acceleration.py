"""EM in fewer passes: SQUAREM and incremental EM reach plain EM's optimum, on Zarr data on a real cluster.

For each model kind (a Bayesian network with a latent variable and missing values,
a latent class model, a hidden Markov model, a Gaussian mixture), from the same
start: plain EM's final log-likelihood equals the log-likelihood of its returned
parameters computed independently (brute-force enumeration of the marginal
likelihood, or scipy's normal densities), and SQUAREM and incremental EM (alone on the
network, polished by SQUAREM on the other models) reach it within rel 1e-8 (all run to
tol 1e-13, where the remaining EM gain is far below that). SQUAREM's accepted points never lower the log-likelihood (rel 1e-9), and
``result.passes`` equals the passes counted independently from the cluster's task
stream (E-step map tasks / chunks).
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import xarray as xr
from distributed import get_task_stream
from scipy.special import logsumexp

import dpgm
from dpgm.errors import ConfigError, ConfigTypeError

pytestmark = pytest.mark.slow
SQUAREM = {"accelerate": "squarem"}
INCREMENTAL = {"incremental": True, "accelerate": None}
# incremental EM's polish is plain EM's loop (checked alone once, on the network) or SQUAREM's:
# together they reach the optimum in a tenth of the cluster passes
INCREMENTAL_SQUAREM = {"incremental": True, "accelerate": "squarem"}


def _fit(model, path, client, **options):
    """A fit on the cluster and the passes counted from the task stream: E-step map tasks / chunks."""
    data = dpgm.open_dataset(path)
    n_chunks = len(data[next(iter(data.data_vars))].chunks[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        with get_task_stream(client=client) as stream:
            result = dpgm.fit(model, data, method="em", client=client, tol=1e-13, max_iter=3000, **options)
    maps = sum(1 for task in stream.data if "dpgm-estep-map" in str(task["key"]))
    return result, maps / n_chunks


def _check_variants(model, path, client, oracle, incremental=INCREMENTAL_SQUAREM, **options):
    """Plain EM in memory (fast; its passes are its iterations), SQUAREM and incremental on the cluster."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        plain = dpgm.fit(model, dpgm.open_dataset(path).load(), method="em", accelerate=None, tol=1e-13,
                         max_iter=3000, **options)
    assert plain.passes == plain.n_iter
    results = {"plain": plain}
    for name, variant in (("squarem", SQUAREM), ("incremental", incremental)):
        result, counted = _fit(model, path, client, **options, **variant)
        assert result.passes == pytest.approx(counted, rel=1e-12)
        results[name] = result
    assert plain.converged
    assert plain.loglik == pytest.approx(oracle(plain.model), rel=1e-10)
    for variant, result in results.items():
        assert result.loglik == pytest.approx(plain.loglik, rel=1e-8), variant
        assert all("param_change" in h for h in result.history)
    accepted = np.array([h["loglik"] for h in results["squarem"].history if h["accepted"]])
    assert np.all(np.diff(accepted) >= -1e-9 * np.abs(accepted[1:]))
    assert any(h["step"] == "extrapolated" for h in results["squarem"].history)
    assert any(h["step"] == "incremental" for h in results["incremental"].history)
    assert (any(h["step"] == "extrapolated" for h in results["incremental"].history)
            == (incremental.get("accelerate") is not None))
    assert results["squarem"].passes < plain.passes
    return results


def _near(network: dpgm.BayesianNetwork, seed: int) -> dpgm.BayesianNetwork:
    """A start between the truth (60%) and a random draw (40%): EM converges in fewer passes."""
    other = network.randomized(np.random.default_rng(seed))
    return dpgm.BayesianNetwork({v: network.cpds[v].copy(data=0.6 * network.cpds[v].values
                                                         + 0.4 * other.cpds[v].values) for v in network.variables})


def _joint(network: dpgm.BayesianNetwork) -> np.ndarray:
    letters = {v: chr(ord("a") + i) for i, v in enumerate(network.variables)}
    return np.einsum(",".join("".join(letters[d] for d in network.cpds[v].dims) for v in network.variables) + "->"
                     + "".join(letters[v] for v in network.variables),
                     *[network.cpds[v].values for v in network.variables])


def _brute_force_loglik(network: dpgm.BayesianNetwork, codes: dict[str, np.ndarray], n: int) -> float:
    """Sum over rows of log P(observed values): the joint summed over latent and missing variables."""
    joint = _joint(network)
    patterns = pd.DataFrame({v: codes.get(v, np.full(n, -1)) for v in network.variables}).value_counts()
    total = 0.0
    for pattern, count in patterns.items():
        index = tuple(slice(None) if c < 0 else int(c) for c in pattern)
        total += count * np.log(joint[index].sum())
    return float(total)


def test_bayesian_network_with_latent_and_missing(tmp_path, client):
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, 6000, None, seed=3, missing=0.2).drop_vars("either")
    dpgm.write_dataset(ds, tmp_path / "b.zarr", chunk_rows=1000)
    codes = {v: ds[v].values for v in truth.variables if v != "either"}
    start = _near(truth, 4)
    _check_variants(start, tmp_path / "b.zarr", client, lambda m: _brute_force_loglik(m, codes, 6000),
                    incremental=INCREMENTAL, init="model")


def test_latent_class_model(tmp_path, client):
    questions = {f"q{i}": ["a", "b", "c"] for i in range(6)}
    truth = dpgm.latent_class_model(questions, 3).randomized(np.random.default_rng(1), concentration=0.5)
    ds = dpgm.sample_bayesian_network(truth, 4000, None, seed=2, missing=0.1).drop_vars("class")
    dpgm.write_dataset(ds, tmp_path / "l.zarr", chunk_rows=1000)
    codes = {q: ds[q].values for q in questions}
    start = _near(truth, 5)
    _check_variants(start, tmp_path / "l.zarr", client, lambda m: _brute_force_loglik(m, codes, 4000),
                    init="model")


def _hmm_brute_force(model: dpgm.HiddenMarkovModel, sequences: np.ndarray) -> float:
    """Sum over every hidden path of P(path, observations); missing observations (-1) contribute 1."""
    start, transition, emission = model.arrays()
    n, length = start.shape[0], sequences.shape[1]
    total = 0.0
    for sequence in sequences:
        emit = np.where(sequence[None, :] >= 0, emission[:, np.maximum(sequence, 0)], 1.0)  # (n, T)
        probability = 0.0
        for path in itertools.product(range(n), repeat=length):
            p = start[path[0]] * emit[path[0], 0]
            for t in range(1, length):
                p *= transition[path[t - 1], path[t]] * emit[path[t], t]
            probability += p
        total += np.log(probability)
    return float(total)


def test_hidden_markov_model(tmp_path, client):
    rng = np.random.default_rng(6)
    truth = dpgm.hmm(2, list("abc")).with_arrays(np.array([0.6, 0.4]), np.array([[0.8, 0.2], [0.3, 0.7]]),
                                                 np.array([[0.7, 0.2, 0.1], [0.1, 0.2, 0.7]]))
    n_sequences, length = 300, 6
    hidden = np.zeros((n_sequences, length), dtype=int)
    hidden[:, 0] = rng.random(n_sequences) < 0.4
    for t in range(1, length):
        hidden[:, t] = rng.random(n_sequences) < truth.transition.values[hidden[:, t - 1], 1]
    cumulative = truth.emission.values.cumsum(axis=1)[hidden]
    sequences = (rng.random((n_sequences, length))[..., None] > cumulative).sum(axis=2)
    sequences[rng.random(sequences.shape) < 0.1] = -1
    ds = xr.Dataset({"obs": (("row", "time"), sequences.astype(np.int8), {"states": list("abc")})})
    dpgm.write_dataset(ds, tmp_path / "h.zarr", chunk_rows=100)
    other = dpgm.hmm(2, list("abc")).randomized(np.random.default_rng(2))
    start = truth.with_arrays(*(0.6 * a + 0.4 * b for a, b in zip(truth.arrays(), other.arrays(), strict=True)))
    _check_variants(start, tmp_path / "h.zarr", client, lambda m: _hmm_brute_force(m, sequences), init="model")


def test_gaussian_mixture(tmp_path, client):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.multivariate_normal([0, 0], [[1, 0.4], [0.4, 1]], 900),
                        rng.multivariate_normal([1.5, 1.0], [[1, -0.2], [-0.2, 0.6]], 700),
                        rng.multivariate_normal([-1, 2], [[0.5, 0], [0, 0.5]], 400)])
    x = rng.permutation(x)
    dpgm.write_dataset(dpgm.from_pandas(pd.DataFrame(x, columns=["a", "b"])), tmp_path / "g.zarr", chunk_rows=500)
    init = {"weights": np.full(3, 1 / 3), "means": x[:3].copy(), "covariances": np.stack([np.eye(2)] * 3)}
    model = dpgm.GaussianMixture(3, ["a", "b"])

    def oracle(fitted) -> float:
        log_densities = np.stack([np.log(fitted.weights.values[c]) + scipy.stats.multivariate_normal(
            fitted.means.values[c], fitted.covariances.values[c]).logpdf(x) for c in range(3)], axis=1)
        return float(logsumexp(log_densities, axis=1).sum())

    _check_variants(model, tmp_path / "g.zarr", client, oracle, init=init)


def test_options_are_checked_before_any_pass():
    model = dpgm.latent_class_model({"q": ["a", "b"]}, 2)
    ds = xr.Dataset({"q": ("row", np.array([0, 1], dtype=np.int8), {"states": ["a", "b"]})})
    with pytest.raises(ConfigError, match="accelerate"):
        dpgm.fit(model, ds, method="em", accelerate="anderson")
    with pytest.raises(ConfigTypeError, match="incremental"):
        dpgm.fit(model, ds, method="em", incremental="yes")
    with pytest.raises(ConfigError, match="accelerate"):
        dpgm.fit(dpgm.BayesianNetwork.from_edges([("q", "r")], {"q": ["a", "b"], "r": ["a", "b"]}),
                 ds, method="mle", accelerate="squarem")


def _pruning_rule_met(histories: list[list[dict]], i: int, t: int) -> bool:
    """Restart i's best log-likelihood after iteration t plus 100 x its last EM step's gain < the leader's."""
    accepted = [k for k, h in enumerate(histories[i]) if h["accepted"] and h["step"] == "em"
                and h["iteration"] <= t]
    leader = max(h["loglik"] for r in histories for h in r
                 if h["accepted"] and h["step"] == "em" and h["iteration"] <= t)
    if not accepted or histories[i][accepted[-1]]["change"] is None:
        return False
    records, j = histories[i], accepted[-1]
    gain = (records[j]["loglik"] - records[j - 1]["loglik"] if records[j - 1]["step"] == "extrapolated"
            else records[j]["change"])
    return bool(records[j]["loglik"] + 100 * max(gain, 0.0) < leader)


@pytest.mark.parametrize("accelerate", [None, "squarem"])
def test_restart_pruning_drops_only_restarts_far_behind(accelerate):
    """The rule (dpgm.algorithms.em): dropped when loglik + 100 x the gain of its last EM step < the best loglik.

    The gain of an EM step is taken from the records: for the EM image of an extrapolated point, the
    image's log-likelihood minus the extrapolated point's (not the cycle's jump); otherwise the change
    over the previous accepted point.
    """
    questions = {f"q{i}": ["a", "b", "c"] for i in range(6)}
    truth = dpgm.latent_class_model(questions, 3).randomized(np.random.default_rng(1), concentration=0.3)
    ds = dpgm.sample_bayesian_network(truth, 3000, None, seed=2).drop_vars("class")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        full = dpgm.fit(dpgm.latent_class_model(questions, 3), ds, method="em", n_init=6, random_state=3,
                        tol=1e-12, max_iter=5000, accelerate=accelerate)
        pruned = dpgm.fit(dpgm.latent_class_model(questions, 3), ds, method="em", n_init=6, random_state=3,
                          tol=1e-12, max_iter=5000, prune_restarts=True, accelerate=accelerate)
    histories = pruned.info["restart_histories"]
    assert pruned.info["pruned_restarts"]
    for i, records in enumerate(histories):
        last = records[-1]["iteration"]  # a restart's last pass: it was pruned or converged there
        for t in range(5, last):  # the rule applies from iteration 5, after every pass
            assert not _pruning_rule_met(histories, i, t), (i, t)
        if i in pruned.info["pruned_restarts"]:
            assert _pruning_rule_met(histories, i, last), i
    # the best optimum is kept (to the stopping rule's precision: tol 1e-12 on the relative change)
    assert pruned.loglik == pytest.approx(full.loglik, rel=1e-9)
    assert sum(len(h) for h in pruned.info["restart_histories"]) <= sum(
        len(h) for h in full.info["restart_histories"])

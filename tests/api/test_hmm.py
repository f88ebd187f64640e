"""Hidden Markov models by distributed Baum-Welch, against hmmlearn's CategoricalHMM."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import xarray as xr
from hmmlearn.hmm import CategoricalHMM

import dpgm
from dpgm.inference.chain import forward_backward


def _sample(seed: int, n_sequences: int, length: int):
    rng = np.random.default_rng(seed)
    n, m = 3, 4
    truth = dpgm.hmm(n, list("abcd")).with_arrays(
        rng.dirichlet(np.full(n, 3.0)), rng.dirichlet(np.ones(n), n) * 0.5 + np.eye(n) * 0.5,
        rng.dirichlet(np.ones(m) * 0.7, n))
    generator = CategoricalHMM(n_components=n, n_features=m, init_params="")
    generator.startprob_, generator.transmat_, generator.emissionprob_ = truth.arrays()
    sequences = np.stack([generator.sample(length, random_state=seed * 1000 + i)[0][:, 0] for i in range(n_sequences)])
    ds = xr.Dataset({"obs": (("row", "time"), sequences.astype(np.int8), {"states": list("abcd")})})
    return truth, ds, sequences


def _hmmlearn_history(start: dpgm.HiddenMarkovModel, sequences: np.ndarray, n_iter: int):
    model = CategoricalHMM(n_components=start.n_states, n_features=4, init_params="", params="ste",
                           n_iter=n_iter, tol=-np.inf)
    model.startprob_, model.transmat_, model.emissionprob_ = start.arrays()
    model.fit(sequences.reshape(-1, 1), [sequences.shape[1]] * sequences.shape[0])
    return np.array(model.monitor_.history), model


def test_forward_backward_loglik_equals_hmmlearn_score():
    truth, _, sequences = _sample(1, 50, 30)
    start, transition, emission = truth.arrays()
    factors = emission.T[sequences]  # (B, T, n)
    loglik, counts, gamma = forward_backward(factors, np.zeros(sequences.shape), np.full(50, 30), start, transition)
    reference = CategoricalHMM(n_components=3, n_features=4, init_params="")
    reference.startprob_, reference.transmat_, reference.emissionprob_ = truth.arrays()
    assert loglik == pytest.approx(reference.score(sequences.reshape(-1, 1), [30] * 50), rel=1e-12)
    np.testing.assert_allclose(gamma.reshape(-1, 3), reference.predict_proba(sequences.reshape(-1, 1), [30] * 50),
                               rtol=1e-9, atol=1e-12)
    assert counts["start"].sum() == pytest.approx(50, rel=1e-12)
    assert counts["transition"].sum() == pytest.approx(50 * 29, rel=1e-12)


def test_baum_welch_matches_hmmlearn_per_iteration(tmp_path, client):
    _, ds, sequences = _sample(2, 300, 40)
    dpgm.write_dataset(ds, tmp_path / "seq.zarr", chunk_rows=70)
    start = dpgm.hmm(3, list("abcd")).randomized(np.random.default_rng(7))
    theirs, reference = _hmmlearn_history(start, sequences, 20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        on_cluster = dpgm.fit(start, dpgm.open_dataset(tmp_path / "seq.zarr"), init="model", tol=0, max_iter=20,
                              accelerate=None, client=client)
        in_memory = dpgm.fit(start, ds, init="model", tol=0, max_iter=20, accelerate=None)
    ours = np.array([h["loglik"] for h in on_cluster.history])
    np.testing.assert_allclose(ours, theirs, rtol=1e-8)
    np.testing.assert_allclose([h["loglik"] for h in in_memory.history], ours, rtol=1e-12)
    assert on_cluster.passes == 20


def test_restarts_keep_the_best_and_recover_parameters():
    truth, ds, sequences = _sample(3, 1500, 30)
    result = dpgm.fit(dpgm.hmm(3, list("abcd")), ds, n_init=4, random_state=0, tol=1e-7, max_iter=2000)
    assert result.converged
    assert result.loglik == max(result.info["restart_logliks"])
    # identify hidden labels by matching emission rows, then compare with the generating parameters
    fitted = result.model.emission.values
    order = [int(np.argmin(np.abs(fitted - row).sum(axis=1))) for row in truth.emission.values]
    assert sorted(order) == [0, 1, 2]
    error = np.abs(fitted[order] - truth.emission.values).max()
    assert error < 0.05  # 45,000 emissions: standard errors ~0.005-0.012 per entry
    # the truth's own log-likelihood cannot beat the MLE
    reference = CategoricalHMM(n_components=3, n_features=4, init_params="")
    reference.startprob_, reference.transmat_, reference.emissionprob_ = truth.arrays()
    true_loglik = reference.score(sequences.reshape(-1, 1), [sequences.shape[1]] * sequences.shape[0])  # hmmlearn
    assert result.loglik >= true_loglik - 1e-6


def test_loglik_never_decreases():
    _, ds, _ = _sample(4, 200, 25)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.fit(dpgm.hmm(3, list("abcd")), ds, random_state=3, tol=0, max_iter=40, accelerate=None)
    logliks = np.array([h["loglik"] for h in result.history])
    assert np.all(np.diff(logliks) >= -1e-9 * np.abs(logliks[1:]))


def test_cli_fit_killed_and_resumed_equals_uninterrupted(tmp_path):
    _, ds, _ = _sample(5, 400, 30)
    dpgm.write_dataset(ds, tmp_path / "seq.zarr", chunk_rows=100)
    spec = tmp_path / "hmm.yaml"
    spec.write_text("model: hmm\nn_states: 3\nsymbols: [a, b, c, d]\nvariable: obs\nrandom_state: 11\n"
                    "n_init: 2\nmax_iter: 30\ntol: 0.0\n")
    env = {**os.environ, "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "error"}
    command = [sys.executable, "-m", "dpgm.cli", "fit", str(spec), str(tmp_path / "seq.zarr"), "--workers", "2"]
    # the uninterrupted fit runs beside the one that is killed
    full_log = tmp_path / "full.log"
    with full_log.open("w") as log:  # a file, not a pipe nobody reads while waiting
        full = subprocess.Popen([*command, "--out", str(tmp_path / "full.zarr")], env=env,
                                stdout=subprocess.DEVNULL, stderr=log)
    checkpoint = tmp_path / "ckpt"
    killed = subprocess.Popen([*command, "--out", str(tmp_path / "part.zarr"), "--checkpoint", str(checkpoint)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline:
        latest = checkpoint / "LATEST"
        if latest.exists() and int(latest.read_text().splitlines()[0].split("-")[1]) >= 4:
            break
        time.sleep(0.05)
    killed.kill()
    killed.wait()
    assert not (tmp_path / "part.zarr").exists()
    full.wait(timeout=300)
    assert full.returncode == 3, full_log.read_text()  # tol 0: stops at max_iter, the documented exit code
    resumed = subprocess.run([*command, "--out", str(tmp_path / "resumed.zarr"), "--checkpoint", str(checkpoint),
                              "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 3, resumed.stderr
    a, b = dpgm.load(tmp_path / "full.zarr"), dpgm.load(tmp_path / "resumed.zarr")
    for x, y in zip(a.arrays(), b.arrays(), strict=True):
        np.testing.assert_array_equal(x, y)


def test_em_iterations_are_events_and_spans_on_the_cluster(tmp_path, client):
    """What a user watching the dashboard sees: one event per iteration, one span per pass."""
    _, ds, _ = _sample(6, 100, 20)
    dpgm.write_dataset(ds, tmp_path / "seq.zarr", chunk_rows=25)
    before = set(client.run_on_scheduler(
        lambda dask_scheduler: [s.id for s in dask_scheduler.extensions["spans"].spans.values()]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.fit(dpgm.hmm(3, list("abcd")), dpgm.open_dataset(tmp_path / "seq.zarr"), random_state=1,
                          tol=0, max_iter=4, client=client)
    events = [e for _, e in client.get_events("dpgm.fit") if e.get("restart") == 0]
    logged = [e["loglik"] for e in events][-4:]
    assert logged == [h["loglik"] for h in result.history]
    spans = client.run_on_scheduler(
        lambda dask_scheduler: [(s.id, s.name) for s in dask_scheduler.extensions["spans"].spans.values()]
    )
    new = {name for id_, name in spans if id_ not in before}
    assert {("dpgm-em", f"iteration-{k}") for k in range(1, 5)} <= new

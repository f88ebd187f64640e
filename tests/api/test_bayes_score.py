"""The Bayesian score (log marginal likelihood) of ``method="bayes"`` fits.

Oracles: pgmpy's ``BDeu`` and ``K2`` structure scores on samples of shipped networks,
closed-form sums of ``math.lgamma`` on tiny tables and on independently counted data.

pgmpy 1.1.2 (``pgmpy.structure_score``) counts with ``reindex=False``, i.e. over the
parent configurations and child states present in the data, and differs from the
textbook score (Cooper & Herskovits 1992; Heckerman, Geiger & Chickering 1995) in two
edge cases, both pinned in ``test_edge_cases_against_lgamma_and_pgmpy_conventions``:

* ``K2``: each unobserved parent configuration adds ``lgamma(r)`` (the textbook adds 0);
  no difference for binary children, since ``lgamma(2) = 0``.
* ``BDeu``: each child state never observed (child with parents) subtracts
  ``lgamma(ess / (r q))`` once per observed parent configuration (textbook: 0).
  Unobserved parent configurations are handled as in the textbook.

dpgm uses the textbook definition; the comparisons with pgmpy use samples where the
conventions agree, and check that they do.

Tolerance against pgmpy: 1e-6 absolute. The scores are sums of a few thousand
``lgamma`` terms of magnitude up to ~1e6, so float64 rounding in a different
summation order is ~1e-9; 1e-6 leaves room for that and nothing else.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from pgmpy.models import DiscreteBayesianNetwork
from pgmpy.structure_score import K2, BDeu

import dpgm
import dpgm.api.bayesian
from dpgm.api import fit

ABSOLUTE = 1e-6  # against pgmpy: see the module docstring
ROWS = {"asia": 5_000, "cancer": 5_000, "alarm": 100_000}  # alarm: every parent configuration seen


@pytest.fixture(scope="module", params=sorted(ROWS))
def sample(request):
    truth = dpgm.load_network(request.param)
    ds = dpgm.sample_bayesian_network(truth, ROWS[request.param], seed=3)
    return truth, ds


def _pgmpy_inputs(truth, ds):
    frame = dpgm.to_pandas(ds)[list(truth.variables)].astype(str)
    states = {v: list(truth.states[v]) for v in truth.variables}
    model = DiscreteBayesianNetwork(truth.edges)
    model.add_nodes_from(truth.variables)
    return frame, states, model


def _assert_conventions_agree(truth, frame):
    """The sample has no case where pgmpy's counting differs from the textbook's."""
    for variable in truth.variables:
        parents = list(truth.parents(variable))
        if not parents:
            continue
        r = truth.cardinality(variable)
        q = math.prod(truth.cardinality(p) for p in parents)
        assert frame[variable].nunique() == r, variable
        if r > 2:
            assert len(frame.groupby(parents).size()) == q, variable


@pytest.mark.parametrize(("prior", "options"), [
    ("BDeu", {"equivalent_sample_size": 1.0}),
    ("BDeu", {"equivalent_sample_size": 10.0}),
    ("K2", {}),
])
def test_score_equals_pgmpy(sample, prior, options):
    truth, ds = sample
    frame, states, model = _pgmpy_inputs(truth, ds)
    _assert_conventions_agree(truth, frame)
    result = fit(dpgm.BayesianNetwork.from_edges(truth.edges), ds, method="bayes", prior=prior, **options)
    scorer = {"BDeu": BDeu, "K2": K2}[prior](frame, state_names=states, **options)
    assert result.log_marginal_likelihood == pytest.approx(scorer.score(model), rel=0, abs=ABSOLUTE)


def _textbook_score(counts: np.ndarray, alpha: np.ndarray) -> float:
    """The Heckerman-Geiger-Chickering sum, one parent configuration (column) at a time."""
    counts, alpha = counts.reshape(counts.shape[0], -1), alpha.reshape(alpha.shape[0], -1)
    total = 0.0
    for j in range(counts.shape[1]):
        cells = [k for k in range(counts.shape[0]) if alpha[k, j] > 0]  # a = 0, n = 0: no term
        a_j = sum(alpha[k, j] for k in cells)
        n_j = sum(counts[k, j] for k in cells)
        if a_j > 0:
            total += math.lgamma(a_j) - math.lgamma(a_j + n_j)
        total += sum(math.lgamma(alpha[k, j] + counts[k, j]) - math.lgamma(alpha[k, j]) for k in cells)
    return total


def test_edge_cases_against_lgamma_and_pgmpy_conventions():
    """A -> B, A with an unobserved state (so B has an unobserved parent configuration) and
    B with an unobserved state: dpgm equals the textbook sum; pgmpy differs by exactly the
    terms described in the module docstring."""
    a_states, b_states = ["a0", "a1", "a2"], ["b0", "b1", "b2"]
    rows = [("a0", "b0")] * 3 + [("a0", "b1")] * 2 + [("a1", "b1")] * 4
    frame = pd.DataFrame(rows, columns=["A", "B"])
    ds = dpgm.from_pandas(frame.astype({"A": pd.CategoricalDtype(a_states), "B": pd.CategoricalDtype(b_states)}))
    structure = dpgm.BayesianNetwork.from_edges([("A", "B")])
    n_a = np.array([5.0, 4.0, 0.0])
    n_ba = np.array([[3.0, 0.0, 0.0], [2.0, 4.0, 0.0], [0.0, 0.0, 0.0]])  # rows b, columns a
    r, q, q_observed, r_observed = 3, 3, 2, 2
    pgmpy_model = DiscreteBayesianNetwork([("A", "B")])
    states = {"A": a_states, "B": b_states}

    k2 = _textbook_score(n_a, np.ones(3)) + _textbook_score(n_ba, np.ones((3, 3)))
    result = fit(structure, ds, method="bayes", prior="K2")
    assert result.log_marginal_likelihood == pytest.approx(k2, rel=1e-12)
    assert K2(frame, state_names=states).score(pgmpy_model) == pytest.approx(
        k2 + (q - q_observed) * math.lgamma(r), rel=1e-12)

    for ess in (1.0, 4.5):
        bdeu = _textbook_score(n_a, np.full(3, ess / 3)) + _textbook_score(n_ba, np.full((3, 3), ess / 9))
        result = fit(structure, ds, method="bayes", prior="BDeu", equivalent_sample_size=ess)
        assert result.log_marginal_likelihood == pytest.approx(bdeu, rel=1e-12)
        assert BDeu(frame, equivalent_sample_size=ess, state_names=states).score(pgmpy_model) == pytest.approx(
            bdeu - (r - r_observed) * q_observed * math.lgamma(ess / (r * q)), rel=1e-12)

    # Dirichlet pseudo-counts with zeros: a zero on an empty cell drops out, on a counted cell gives -inf
    alpha_ba = np.array([[1.0, 0.5, 0.0], [2.0, 0.5, 0.0], [0.0, 0.5, 0.0]])
    pseudo = {"A": 0.5, "B": xr.DataArray(alpha_ba, dims=["B", "A"])}
    result = fit(structure, ds, method="bayes", prior="dirichlet", pseudo_counts=pseudo)
    expected = _textbook_score(n_a, np.full(3, 0.5)) + _textbook_score(n_ba, alpha_ba)
    assert result.log_marginal_likelihood == pytest.approx(expected, rel=1e-12)
    alpha_ba[2, 0], alpha_ba[1, 1] = 1.0, 0.0  # b1 seen 4 times under a1, where its pseudo-count is now 0
    pseudo["B"] = xr.DataArray(alpha_ba, dims=["B", "A"])
    result = fit(structure, ds, method="bayes", prior="dirichlet", pseudo_counts=pseudo)
    assert result.log_marginal_likelihood == -math.inf


def test_dirichlet_prior_against_direct_lgamma_sum():
    """Pseudo-counts differing cell by cell (and one scalar); counts taken independently with NumPy."""
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, 4_000, seed=8)
    rng = np.random.default_rng(0)
    pseudo, expected = {}, 0.0
    for family in truth.families:
        shape = tuple(truth.cardinality(v) for v in family)
        alpha = np.full(shape, 0.7) if family[0] == "asia" else rng.uniform(0.2, 3.0, shape)
        pseudo[family[0]] = 0.7 if family[0] == "asia" else xr.DataArray(alpha, dims=family)
        counts = np.zeros(shape)
        np.add.at(counts, tuple(ds[v].values for v in family), 1.0)
        expected += _textbook_score(counts, alpha)
    result = fit(dpgm.BayesianNetwork.from_edges(truth.edges), ds, method="bayes", prior="dirichlet",
                 pseudo_counts=pseudo)
    assert result.log_marginal_likelihood == pytest.approx(expected, rel=1e-12)


def test_zarr_on_cluster_equals_in_memory(tmp_path, client):
    truth = dpgm.load_network("asia")
    in_memory = dpgm.sample_bayesian_network(truth, 20_000, seed=5)
    dpgm.write_dataset(in_memory, tmp_path / "asia.zarr", chunk_rows=3_000)  # ragged last chunk
    on_disk = dpgm.open_dataset(tmp_path / "asia.zarr")
    structure = dpgm.BayesianNetwork.from_edges(truth.edges)
    options = {"method": "bayes", "prior": "BDeu", "equivalent_sample_size": 10.0}
    expected = fit(structure, in_memory, **options).log_marginal_likelihood
    result = fit(structure, on_disk, client=client, **options)
    assert result.log_marginal_likelihood == pytest.approx(expected, rel=1e-12)  # same counts, other chunking


def test_reported_in_summary_and_to_dict_for_bayes_only(monkeypatch):
    truth = dpgm.load_network("cancer")
    ds = dpgm.sample_bayesian_network(truth, 2_000, seed=2)
    structure = dpgm.BayesianNetwork.from_edges(truth.edges)
    passes = []
    counts = dpgm.api.bayesian.complete_counts
    monkeypatch.setattr(dpgm.api.bayesian, "complete_counts", lambda *a, **k: passes.append(1) or counts(*a, **k))

    result = fit(structure, ds, method="bayes", prior="K2")
    assert len(passes) == 1  # the score reuses the estimate's counts
    assert isinstance(result.log_marginal_likelihood, float)
    assert f"log marginal likelihood (Bayesian score) {result.log_marginal_likelihood:.6f}" in result.summary()
    report = json.loads(json.dumps(result.to_dict()))
    assert report["log_marginal_likelihood"] == result.log_marginal_likelihood

    mle = fit(structure, ds)
    assert mle.log_marginal_likelihood is None
    assert "marginal likelihood" not in mle.summary()
    assert "log_marginal_likelihood" not in mle.to_dict()


def test_equivalent_sample_size_is_checked():
    truth = dpgm.load_network("cancer")
    ds = dpgm.sample_bayesian_network(truth, 100, seed=2)
    structure = dpgm.BayesianNetwork.from_edges(truth.edges)
    with pytest.raises(ValueError, match="equivalent_sample_size must be finite and positive, got 0"):
        fit(structure, ds, method="bayes", prior="BDeu", equivalent_sample_size=0)
    with pytest.raises(TypeError, match="equivalent_sample_size must be a number, got '10'"):
        fit(structure, ds, method="bayes", prior="BDeu", equivalent_sample_size="10")

"""One data source per fit: the schema is read once, however many iterations EM runs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conformance.builders import CASE_IDS, CASES

import dpgm
from dpgm.data.schema import Schema
from dpgm.stats.source import DataSource

QUESTIONS = {f"q{i}": ["a", "b", "c"] for i in range(5)}


@pytest.fixture
def schema_reads(monkeypatch):
    """How many times ``Schema.from_dataset`` runs (the real method, wrapped by a counter)."""
    calls = []
    read = Schema.from_dataset.__func__

    def counting(cls, ds):
        calls.append(1)
        return read(cls, ds)

    monkeypatch.setattr(Schema, "from_dataset", classmethod(counting))
    return calls


def _lca_store(tmp_path):
    truth = dpgm.latent_class_model(QUESTIONS, 3).randomized(np.random.default_rng(4), concentration=0.5)
    ds = dpgm.sample_bayesian_network(truth, 2500, None, seed=5, missing=0.1).drop_vars("class")
    dpgm.write_dataset(ds, tmp_path / "lca.zarr", chunk_rows=600)  # 5 chunks, a ragged last one
    return ds.to_dataframe()


def _brute_force_em(frame, start: dpgm.BayesianNetwork, n_iter: int):
    """Latent class EM by enumerating the class of every row of the pandas frame (missing answers skipped).

    Returns the log-likelihood at the start of each iteration and the parameters it was evaluated at.
    """
    codes = np.stack([frame[q].to_numpy() for q in QUESTIONS], axis=1).astype(int)
    prior = start.cpds["class"].values.copy()
    tables = [start.cpds[q].transpose(q, "class").values.copy() for q in QUESTIONS]
    logliks, parameters = [], []
    for _ in range(n_iter):
        parameters.append((prior, tables))
        joint = np.tile(prior, (len(codes), 1))  # P(row's observed answers, class)
        for j, table in enumerate(tables):
            seen = codes[:, j] >= 0
            joint[seen] *= table[codes[seen, j]]
        marginal = joint.sum(axis=1)
        logliks.append(float(np.log(marginal).sum()))
        post = joint / marginal[:, None]
        prior = post.sum(axis=0) / len(codes)
        # P(answer, class | row): the answer seen, or the class's answer distribution where it is missing
        answers = [np.where((codes[:, j] >= 0)[:, None, None], np.eye(len(table))[codes[:, j]][:, :, None],
                            table[None]) for j, table in enumerate(tables)]
        expected = [np.einsum("nsk,nk->sk", answer, post) for answer in answers]
        tables = [e / e.sum(axis=0, keepdims=True) for e in expected]
    return logliks, parameters


@pytest.mark.parametrize("max_iter", [3, 12])
def test_em_reads_the_schema_once_per_fit(tmp_path, client, schema_reads, max_iter):
    frame = _lca_store(tmp_path)
    store = dpgm.open_dataset(tmp_path / "lca.zarr")
    start = dpgm.latent_class_model(QUESTIONS, 3).randomized(np.random.default_rng(11))
    schema_reads.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.fit(start, store, method="em", init="model", tol=0, max_iter=max_iter, accelerate=None,
                          client=client)
    assert result.n_iter == max_iter
    assert len(schema_reads) == 1  # not once per iteration
    logliks, parameters = _brute_force_em(frame, start, max_iter)
    np.testing.assert_allclose([h["loglik"] for h in result.history], logliks, rtol=1e-10)
    assert result.loglik == pytest.approx(logliks[-1], rel=1e-10)
    prior, tables = parameters[-1]  # the model whose log-likelihood is result.loglik
    np.testing.assert_allclose(result.model.cpds["class"].values, prior, rtol=1e-9)
    for q, table in zip(QUESTIONS, tables, strict=True):
        np.testing.assert_allclose(result.model.cpds[q].transpose(q, "class").values, table, rtol=1e-9)


def test_a_complete_data_fit_reads_the_schema_once(schema_reads):
    truth = dpgm.load_network("asia")
    data = dpgm.sample_bayesian_network(truth, 5000, seed=1)
    schema_reads.clear()
    result = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), data)
    assert len(schema_reads) == 1
    frame = data.to_dataframe()
    # the MLE of P(dysp | bronc, either) is the frame's conditional frequency
    counts = frame.groupby(["bronc", "either"])["dysp"].value_counts().unstack(fill_value=0).to_numpy()
    expected = counts / counts.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(result.model.cpds["dysp"].transpose("bronc", "either", "dysp").values.reshape(4, 2),
                               expected, rtol=1e-12)


def test_a_source_of_a_source_is_itself_and_a_table_has_no_schema():
    data = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 200, seed=0)
    source = DataSource.of(data)
    assert DataSource.of(source) is source
    table = dpgm.counts(data, [("smoke", "lung")])[("smoke", "lung")]
    assert DataSource.of(table).schema is None
    assert DataSource.of(table).n_rows == table.size
    assert source.n_rows == 200 and source.states["smoke"] == ("yes", "no")


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_every_kind_reads_the_schema_once_per_fit(case, schema_reads):
    """Every registered kind (the conformance cases), iterative or not, in memory: one schema read per fit."""
    data = case.data()
    schema_reads.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.fit(case.model(), data, **case.options)
    assert len(schema_reads) == 1, f"{len(schema_reads)} schema reads in a fit of {result.n_iter} iteration(s)"

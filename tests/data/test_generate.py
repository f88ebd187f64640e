"""Forward sampling: deterministic for a seed on any number of workers, and faithful to the CPTs."""

from __future__ import annotations

import numpy as np
import pytest

import dpgm


def test_same_rows_on_one_and_two_workers_and_in_memory(tmp_path, client):
    from distributed import Client, LocalCluster

    model = dpgm.load_network("asia")
    two = dpgm.sample_bayesian_network(model, 5000, tmp_path / "two.zarr", seed=42, chunk_rows=700,
                                       missing=0.2, client=client)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster, set_as_default=False) as single:
            one = dpgm.sample_bayesian_network(model, 5000, tmp_path / "one.zarr", seed=42, chunk_rows=700,
                                               missing=0.2, client=single)
    memory = dpgm.sample_bayesian_network(model, 5000, None, seed=42, chunk_rows=700, missing=0.2)
    other_seed = dpgm.sample_bayesian_network(model, 5000, None, seed=43, chunk_rows=700, missing=0.2)
    for v in model.variables:
        np.testing.assert_array_equal(one[v].values, two[v].values)
        np.testing.assert_array_equal(memory[v].values, two[v].values)
    assert any((other_seed[v].values != memory[v].values).any() for v in model.variables)


def test_frequencies_match_the_network_within_sampling_error():
    """Oracle: the CPTs themselves; each conditional frequency within 5 binomial standard errors."""
    model = dpgm.load_network("sachs")
    n = 200_000
    ds = dpgm.sample_bayesian_network(model, n, None, seed=1, chunk_rows=30_000)
    tables = dpgm.counts(ds, model.families)
    for family in model.families:
        table = tables[family].values.astype(float)
        parent_totals = table.sum(axis=0, keepdims=True)
        cpd = model.cpds[family[0]].values
        seen = parent_totals > 500
        frequency = np.divide(table, parent_totals, out=np.zeros_like(table), where=parent_totals > 0)
        se = np.sqrt(cpd * (1 - cpd) / np.maximum(parent_totals, 1))
        ok = np.abs(frequency - cpd) <= 5 * se + 1e-12
        assert ok[np.broadcast_to(seen, ok.shape)].all(), family


def test_missing_fraction_is_respected():
    model = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(model, 40_000, None, seed=3, missing=0.25)
    n_missing = sum(int((ds[v].values == -1).sum()) for v in model.variables)
    total = 40_000 * len(model.variables)
    se = np.sqrt(0.25 * 0.75 / total)
    assert abs(n_missing / total - 0.25) < 5 * se


def test_bad_arguments():
    model = dpgm.load_network("asia")
    with pytest.raises(ValueError, match="missing"):
        dpgm.sample_bayesian_network(model, 10, None, missing=1.5)
    with pytest.raises(ValueError, match="chunk_rows"):
        dpgm.sample_bayesian_network(model, 10, None, chunk_rows=0)
    with pytest.raises(ValueError, match="no shipped network 'nope'"):
        dpgm.networks.network_path("nope")

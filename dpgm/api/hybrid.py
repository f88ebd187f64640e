"""Hybrid networks on complete data: every table and every GLM node fitted in the same passes."""

from __future__ import annotations

import numpy as np
import xarray as xr

from dpgm.algorithms.result import FitResult
from dpgm.api.checks import check_tabular
from dpgm.api.glm_node import GLMPlan, check_first_pass, glm_result, node, plan_glm
from dpgm.api.labels import align
from dpgm.api.results import fit_result
from dpgm.api.spec_checks import check_latent_not_observed, edge_pairs, spec_errors
from dpgm.data.schema import Schema
from dpgm.errors import DataError, SpecError
from dpgm.models.hybrid import HybridNetwork
from dpgm.stats.hybrid import HybridPlan
from dpgm.stats.source import DataSource

__all__ = ["fit_hybrid"]


def plan_network(model: HybridNetwork, schema: Schema) -> tuple[HybridPlan, dict[str, GLMPlan]]:
    """Check every node against the data and plan the joint pass."""
    tabular = [v for v in model.variables if v not in model.families]
    for v in tabular:
        check_tabular(model, v, schema)
    plans = {v: plan_glm(model.glm(v), schema) for v in model.glm_nodes}
    families = tuple((v, *model.parents(v)) for v in tabular)
    cardinality = tuple((v, schema[v].cardinality) for v in dict.fromkeys(x for f in families for x in f))
    return HybridPlan(families, cardinality, tuple((v, p.design) for v, p in plans.items())), plans


def cpd_from_counts(variable: str, family: tuple[str, ...], flat: np.ndarray,
                    states: dict[str, tuple[str, ...]]) -> tuple[xr.DataArray, float]:
    """The MLE table ``P(variable | parents)`` and its log-likelihood ``sum n log p``.

    A parent configuration never seen has no data to estimate from: its column is uniform.
    """
    shape = tuple(len(states[v]) for v in family)
    counts = flat.reshape(shape)
    totals = counts.sum(axis=0, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        table = np.where(totals > 0, counts / np.where(totals > 0, totals, 1), 1.0 / shape[0])
        loglik = float(np.sum(counts[counts > 0] * np.log(table[counts > 0])))
    coords = {v: list(states[v]) for v in family}
    return xr.DataArray(table, dims=family, coords=coords), loglik


def fit_hybrid(model: HybridNetwork, source: DataSource, method: str | None, *, tol, max_iter, callback,
               missing: str = "refuse") -> FitResult:
    """Fit a hybrid network: see :func:`dpgm.fit` and :class:`~dpgm.HybridNetwork`."""
    from dpgm.stats.hybrid import hybrid_pass

    if method not in (None, "mle"):
        raise ValueError(f"a HybridNetwork is fitted by method='mle' (complete data) or 'em', not {method!r}")
    if source.is_table:
        raise TypeError(f"a HybridNetwork is fitted to a dataset of rows, got a {type(source.data).__name__}")
    schema = source.schema
    latent = [v for v in model.variables if v not in schema]
    if latent:
        raise DataError(f"model variables {latent} are not in the data; latent variables need method='em'; "
                        f"data variables: {sorted(schema)}")
    # states declared for observed variables: matched by label, the tables handed back in the declared order
    model, order = align(model, source.data, states=schema.states,
                         variables=[v for v in model.states if v in schema])
    plan, plans = plan_network(model, schema)
    nodes = {v: node(p, tol=tol, max_iter=max_iter) for v, p in plans.items()}
    statistics = hybrid_pass(source, plan, {v: None for v in nodes}, count=True)
    passes, history = 1, []
    counted = statistics["counts"]
    n_rows = (next(iter(statistics["glm"].values()))["rows"] if statistics["glm"] else
              float(sum(t.sum() + m for t, m in counted.values())) / max(len(counted), 1))
    for family in plan.families:
        incomplete = counted["|".join(family)][1]
        if incomplete:
            raise DataError(f"{incomplete:,.0f} rows have missing values in {list(family)}; complete-data "
                            "methods refuse them rather than drop them")
    while True:
        for v, glm in statistics["glm"].items():
            if nodes[v].passes == 0:
                check_first_pass(plans[v], glm, missing)
            nodes[v].update(glm)
        active = {v: n.request() for v, n in nodes.items() if not n.done}
        record = {"iteration": float(passes), "active_nodes": float(len(active)),
                  "deviance": float(sum(n.deviance for n in nodes.values() if n.passes > 1))}
        history.append(record)
        if callback is not None:
            callback(record)
        if not active:  # each node stops by its own tol or max_iter
            break
        statistics = hybrid_pass(source, plan, active, count=False)
        passes += 1
    states = schema.states
    tables, loglik = {}, 0.0
    for family in plan.families:
        tables[family[0]], part = cpd_from_counts(family[0], family, counted["|".join(family)][0], states)
        loglik += part
    results = {}
    for v, n in nodes.items():
        results[v] = glm_result(plans[v], n.result(), tol=tol)
        loglik += results[v].loglik
    fitted = model.with_parameters(tables, {v: r.model for v, r in results.items()})
    # each GLM node warned for itself, naming it
    result = fit_result(fitted, "mle", loglik=loglik, converged=all(r.converged for r in results.values()),
                        n_iter=max((r.n_iter for r in results.values()), default=0), n_rows=n_rows,
                        n_params=fitted.n_free_parameters(), history=history, passes=passes,
                        info={"nodes": results, "node_logliks": {v: r.loglik for v, r in results.items()}},
                        warn=False)
    return order.restore(result)


def hybrid_network_from_spec(spec: dict, states: dict[str, tuple[str, ...]], continuous: list[str] | None
                             ) -> tuple[HybridNetwork, str | None]:
    """A ``model: hybrid_network`` specification: ``edges``, the GLM nodes' ``families``, ``latent`` roots (then
    fitted by EM) and the ridge penalty ``l2``."""
    edges, families = edge_pairs(spec, "hybrid_network"), spec.get("families") or {}
    if not isinstance(families, dict):
        raise SpecError("'families' must map each GLM node to its family")
    latent = spec.get("latent") or {}
    check_latent_not_observed(list(latent), states)
    with spec_errors("hybrid_network"):
        model = HybridNetwork(edges, families, nodes=spec.get("variables", ()),
                              states={k: [str(x) for x in v] for k, v in latent.items()}, l2=spec.get("l2", 0.0))
    return model, "em" if latent else None

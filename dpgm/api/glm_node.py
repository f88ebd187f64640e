"""One GLM node on the driver, shared by GLM conditionals and hybrid networks: its design planned against
the data's schema, the checks of its first pass, its IRLS state and its :class:`~dpgm.FitResult`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import xarray as xr

from dpgm.algorithms.irls import IRLSNode, IRLSResult
from dpgm.algorithms.result import FitResult
from dpgm.api.results import fit_result, warn_convergence
from dpgm.data.schema import Schema
from dpgm.errors import DataError
from dpgm.models.glm import GLMConditional
from dpgm.stats.irls import Design

__all__ = ["GLMPlan", "check_first_pass", "glm_design", "glm_result", "node", "plan_glm"]


def glm_design(model: GLMConditional, schema: Schema) -> Design:
    """Plan the design matrix from the dataset's schema; refuse unknown or unsuitable variables."""
    unknown = [v for v in model.variables if v not in schema]
    if unknown:
        raise DataError(f"the GLM conditional names variables {unknown} not in the data; "
                        f"known: {sorted(schema)}")
    if schema.weight in model.variables:
        raise DataError("is the dataset's frequency weight, not a variable", variable=schema.weight)
    parents, terms = [], ["Intercept"]
    for p in model.parents:
        variable = schema[p]
        if variable.categorical:
            states = variable.states or ()
            if len(states) < 2:
                raise DataError(f"a categorical parent needs at least two states, has {list(states)}", variable=p)
            parents.append((p, len(states)))
            terms += [f"{p}[{s}]" for s in states[1:]]
        else:
            parents.append((p, 0))
            terms.append(p)
    child = schema[model.child]
    values, n_classes = None, 0
    family = model.glm
    if child.categorical:
        try:
            values = family.child_values(tuple(child.states or ()))
        except ValueError as error:
            raise DataError(str(error), variable=model.child) from None
        n_classes = child.cardinality if family.multiclass else 0
    elif family.continuous_child_problem():
        raise DataError(family.continuous_child_problem(), variable=model.child)
    return Design(model.child, model.family, tuple(parents), tuple(terms), values, n_classes)


@dataclass
class GLMPlan:
    """What the driver knows of one GLM node before any pass: its design, labels and penalty."""

    model: GLMConditional
    design: Design
    labels: list[str]
    states: list[str]
    penalty: np.ndarray
    child_states: tuple[str, ...] | None = None


def plan_glm(model: GLMConditional, schema: Schema) -> GLMPlan:
    """The design of ``model`` on the data's schema, the coefficients' labels and the ridge penalty."""
    design = glm_design(model, schema)
    labels = list(design.terms)
    states: list[str] = []
    if design.glm.multiclass:
        states = list(schema[model.child].states or ())[1:]
        labels = [f"{model.child}={s}: {t}" for s in states for t in design.terms]
    penalty = np.tile(np.r_[0.0, np.full(design.n_terms - 1, model.l2)], max(design.n_classes - 1, 1))
    child = schema[model.child]
    return GLMPlan(model, design, labels, states, penalty, tuple(child.states or ()) if child.categorical else None)


def check_first_pass(plan: GLMPlan, statistics: dict, missing: str) -> None:
    """Refuse rows with missing values (unless listwise) and a node without complete rows."""
    variables = list(plan.model.variables)
    if statistics["missing"] and missing == "refuse":
        raise DataError(f"{statistics['missing']:,.0f} rows have a missing value in {variables}; "
                        "missing='listwise' fits the complete rows (counted in result.info)")
    if statistics["n"] <= 0:
        raise DataError(f"no complete rows in {variables}")


def node(plan: GLMPlan, *, tol: float, max_iter: int, callback=None) -> IRLSNode:
    """The driver's IRLS state for one planned GLM node."""
    return IRLSNode(labels=plan.labels, penalty=plan.penalty, tol=tol, max_iter=max_iter,
                    closed_form=plan.design.glm.closed_form, callback=callback)


def glm_result(plan: GLMPlan, run: IRLSResult, *, tol: float) -> FitResult:
    """The fitted conditional and its FitResult from an IRLS run; warns on separation or non-convergence."""
    model, design, labels, states = plan.model, plan.design, plan.labels, plan.states
    statistics, beta = run.statistics, run.coefficients
    n, p = float(statistics["n"]), len(beta)
    scale = 1.0
    covariance = run.covariance
    if design.glm.has_scale:
        rss = float(statistics["deviance"])  # at beta, from the residuals (see IRLSNode)
        deviance, scale = rss, rss / n
        if n <= p:
            raise DataError(f"{n:,.0f} complete rows for {p} coefficients: the residual variance is undefined",
                            variable=model.child)
        covariance = covariance * (rss / (n - p))  # statsmodels' scale: Pearson X^2 / residual df
        loglik = -0.5 * n * (math.log(2 * math.pi * scale) + 1.0) if scale > 0 else math.inf
    else:
        deviance, loglik = float(statistics["deviance"]), float(statistics["loglik"])
    errors = np.sqrt(np.clip(np.diag(covariance), 0.0, None))
    if design.glm.multiclass:
        shape, dims = (len(states), design.n_terms), ("state", "term")
        coords = {"term": list(design.terms), "state": states}
        coefficients = xr.DataArray(beta.reshape(shape), dims=dims, coords=coords).transpose("term", "state")
        standard_errors = xr.DataArray(errors.reshape(shape), dims=dims, coords=coords).transpose("term", "state")
    else:
        coords = {"term": list(design.terms)}
        coefficients = xr.DataArray(beta, dims="term", coords=coords)
        standard_errors = xr.DataArray(errors, dims="term", coords=coords)
    fitted = model.with_parameters(coefficients, standard_errors, scale=scale, deviance=deviance,
                                   child_states=plan.child_states)
    result = fit_result(fitted, "irls", loglik=loglik, converged=run.converged, n_iter=run.n_iter, n_rows=n,
                        n_params=fitted.n_free_parameters(), history=run.history, passes=run.passes, g2=deviance,
                        df=int(round(n)) - p, info={"n_missing": float(statistics["missing"]), "scale": scale,
                                                    "covariance": covariance}, warn=False)
    separated = float(statistics.get("separated", 0.0))
    if design.glm.has_states and separated > 0:
        # perfect or quasi-complete separation: rows fitted with probability ~0 or 1, coefficients run off
        slopes = np.abs(beta) * (np.arange(p) % design.n_terms != 0)
        worst = labels[int(np.argmax(slopes))]
        result.info["separated_rows"] = separated
        warn_convergence(f"GLM node {model.child!r}: {separated:,.0f} rows are fitted with probability 0 or 1 "
                         f"(perfect or quasi-complete separation; largest coefficient at the parent term {worst!r}): "
                         "the coefficients are not identified; add an l2 penalty or drop that parent")
    elif not run.converged:
        warn_convergence(f"IRLS for GLM node {model.child!r} stopped after {run.n_iter} iterations without meeting "
                         f"tol={tol:g}")
    return result

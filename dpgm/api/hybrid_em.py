"""EM for a hybrid network with a latent categorical variable: mixtures of regressions, latent class regression.

The latent variable ``z`` (a root, absent from the data, its states given) switches
the coefficients of each GLM child: one coefficient vector (and, gaussian, one
variance) per state. Each iteration is one pass for every restart
(:func:`dpgm.stats.hybrid_em.latent_pass`): the E step weighs every row's latent
states by the likelihood of its observed children; the M step on the driver
normalizes the expected counts and takes, per GLM node and latent state, the IRLS
step with weights ``w r_k`` -- exact weighted least squares for a gaussian child
(so the iteration is EM proper), one Newton step for the logit and log links (a
generalized EM step). The loop, restarts and stopping rule are
:func:`dpgm.algorithms.em.em`'s (:class:`HybridEM` is the family).

References
----------
DeSarbo, W. S. and Cron, W. L. (1988). A maximum likelihood methodology for
clusterwise linear regression. Journal of Classification 5, 249-282.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import xarray as xr

from dpgm.algorithms.em import EMFamily
from dpgm.algorithms.irls import solve_normal_equations
from dpgm.algorithms.result import FitResult
from dpgm.api.checks import tabular_families
from dpgm.api.glm_node import GLMPlan, plan_glm
from dpgm.api.labels import align
from dpgm.data.schema import Schema
from dpgm.errors import DataError
from dpgm.models.glm import GLMConditional
from dpgm.models.hybrid import HybridNetwork
from dpgm.stats.hybrid_em import LatentPlan
from dpgm.stats.source import DataSource

__all__ = ["fit_hybrid_em"]

# smallest variance of a gaussian child in one latent state, relative to its pooled variance
MIN_RELATIVE_VARIANCE = 1e-10


def _plan(model: HybridNetwork, schema: Schema) -> tuple[LatentPlan, dict[str, GLMPlan]]:
    latent = [v for v in model.variables if v not in schema]
    if len(latent) != 1:
        raise DataError(f"EM on a HybridNetwork needs exactly one latent variable (absent from the data), found "
                        f"{latent}; data variables: {sorted(schema)}")
    z = latent[0]
    if z in model.families:
        raise DataError("is latent: a latent variable must be tabular (categorical), not a GLM node", variable=z)
    if model.parents(z):
        raise DataError(f"is latent with parents {list(model.parents(z))}: a latent variable must be a root",
                        variable=z)
    if len(model.states.get(z, ())) < 2:
        raise DataError(f"is latent: give its states, HybridNetwork(..., states={{{z!r}: [...]}}) (at least two)",
                        variable=z)
    k = len(model.states[z])
    tables = []
    for family in tabular_families(model, schema, z):
        tables.append((family, tuple(k if p == z else schema[p].cardinality for p in family)))
    tables.insert(0, ((z,), (k,)))
    plans = {}
    for v in model.glm_nodes:
        parents = [p for p in model.parents(v) if p != z]
        plans[v] = plan_glm(GLMConditional(v, parents, model.families[v], model.l2), schema)
    glms = tuple((v, p.design, z in model.parents(v)) for v, p in plans.items())
    return LatentPlan(z, k, tuple(tables[1:]), glms), plans


def _mstep(plan: LatentPlan, plans: dict[str, GLMPlan], previous: dict | None, stats: dict) -> dict:
    """New parameters of one restart from its pass's statistics (``previous`` None: a random start)."""
    prior = np.asarray(stats["prior"], np.float64)
    params: dict = {"log_prior": np.log(prior / prior.sum()), "tables": {}, "glm": {}}
    with np.errstate(divide="ignore", invalid="ignore"):
        for family, shape in plan.tables:
            counts = np.asarray(stats["tables"][family[0]], np.float64).reshape(shape)
            totals = counts.sum(axis=0, keepdims=True)
            table = np.where(totals > 0, counts / np.where(totals > 0, totals, 1), 1.0 / shape[0])
            params["tables"][family[0]] = np.log(table)
    for node, design, by_state in plan.glms:
        glm_plan = plans[node]
        betas, scales = [], []
        for z, part in enumerate(stats["glm"][node]):
            old = None if previous is None else (previous["glm"][node]["beta"][z] if by_state
                                                 else previous["glm"][node]["beta"])
            if not design.glm.closed_form:
                beta, _ = solve_normal_equations(part["xtwx"], part["xtwz"], glm_plan.penalty, glm_plan.labels)
                betas.append(beta)
                scales.append(1.0)
                continue
            if old is None:
                beta, _ = solve_normal_equations(part["xtwx"], part["xtwz"], glm_plan.penalty, glm_plan.labels)
                rss = part["yy"] - beta @ part["xtwz"]
            else:  # exact weighted least squares, as a correction from the residuals at the old coefficients
                delta, _ = solve_normal_equations(part["xtwx"], part["gradient"] - glm_plan.penalty * old,
                                                  glm_plan.penalty, glm_plan.labels)
                beta = old + delta
                rss = part["deviance"] - 2 * delta @ part["gradient"] + delta @ part["xtwx"] @ delta
            betas.append(beta)
            scales.append(max(float(rss), 0.0) / part["n"])
        floor = MIN_RELATIVE_VARIANCE * max(max(scales), 1e-300)
        scales = [max(s, floor) for s in scales]
        params["glm"][node] = ({"beta": np.array(betas), "scale": np.array(scales)} if by_state
                               else {"beta": betas[0], "scale": scales[0]})
    return params


def _labelled(model: HybridNetwork, plan: LatentPlan, plans: dict[str, GLMPlan], params: dict,
              schema: Schema) -> HybridNetwork:
    z, states = plan.latent, list(model.states[plan.latent])
    labels = {v: list(schema.states.get(v, ())) for v in schema.states} | {z: states}
    tables = {z: xr.DataArray(np.exp(params["log_prior"]), dims=(z,), coords={z: states})}
    for family, _ in plan.tables:
        tables[family[0]] = xr.DataArray(np.exp(params["tables"][family[0]]), dims=family,
                                         coords={v: labels[v] for v in family})
    conditionals = {}
    for node, design, by_state in plan.glms:
        glm_plan, glm = plans[node], params["glm"][node]
        betas = np.atleast_2d(glm["beta"])
        last = params["last"]["glm"][node] if "last" in params else []  # none: a checkpoint's parameters
        errors = [np.full(design.n_coefficients, np.nan)] * len(betas) if not last else []
        for s, part in enumerate(last):
            _, factor = solve_normal_equations(part["xtwx"], part["xtwz"], glm_plan.penalty, glm_plan.labels)
            covariance = scipy.linalg.cho_solve(factor, np.eye(design.n_coefficients))
            scale = float(np.atleast_1d(glm["scale"])[s]) if design.glm.has_scale else 1.0
            errors.append(np.sqrt(np.clip(np.diag(covariance) * scale, 0.0, None)))
        dims: tuple[str, ...] = ("term",)
        coords: dict = {"term": list(design.terms)}
        shape: tuple[int, ...] = (design.n_terms,)
        if design.glm.multiclass:
            dims, shape = ("state", "term"), (design.n_classes - 1, design.n_terms)
            coords["state"] = glm_plan.states
        if by_state:
            coefficients = xr.DataArray(betas.reshape(len(states), *shape), dims=(z, *dims), coords=coords | {z: states})
            standard_errors = coefficients.copy(data=np.array(errors).reshape(len(states), *shape))
        else:
            coefficients = xr.DataArray(betas[0].reshape(shape), dims=dims, coords=coords)
            standard_errors = coefficients.copy(data=errors[0].reshape(shape))
        order = [d for d in ("term", "state", z) if d in coefficients.dims]
        scale = glm["scale"]
        by = xr.DataArray(scale, dims=z, coords={z: states}) if by_state and design.glm.has_scale else None
        conditional = model.glm(node).with_parameters(
            coefficients.transpose(*order), standard_errors.transpose(*order),
            scale=float(np.mean(scale)), scale_by_state=by,
            deviance=float(sum(p["deviance"] for p in last)) if last else None,
            child_states=glm_plan.child_states)
        conditionals[node] = conditional
    return model.with_parameters(tables, conditionals)


def _parameters(plan: LatentPlan, network: HybridNetwork) -> dict:
    """The loop's parameters of a labelled network (a checkpoint's): the inverse of :func:`_labelled`."""
    z = plan.latent
    with np.errstate(divide="ignore"):
        params: dict = {"log_prior": np.log(network.tables[z].values), "tables": {}, "glm": {}}
        for family, _ in plan.tables:
            params["tables"][family[0]] = np.log(network.tables[family[0]].transpose(*family).values)
    for node, design, by_state in plan.glms:
        conditional = network.conditionals[node]
        order = [d for d in (z, "state", "term") if d in conditional.coefficients.dims]
        beta = conditional.coefficients.transpose(*order).values
        if by_state:
            scale = (conditional.scale_by_state.values if conditional.scale_by_state is not None
                     else np.ones(plan.n_states))
            params["glm"][node] = {"beta": beta.reshape(plan.n_states, -1), "scale": np.asarray(scale, float)}
        else:
            params["glm"][node] = {"beta": beta.ravel(), "scale": float(conditional.scale)}
    return params


class HybridEM(EMFamily):
    """The EM family of a hybrid network with one latent root (see :class:`dpgm.algorithms.em.EMFamily`)."""

    def __init__(self, model: HybridNetwork, plan: LatentPlan, plans, source: DataSource):
        self.model, self.plan, self.plans, self.source = model, plan, plans, source

    def estep(self, restarts: list[dict], iteration: int, rows=None) -> list[tuple[float, dict]]:
        from dpgm.cluster import iteration_span
        from dpgm.stats.hybrid_em import latent_pass

        if rows is not None:
            raise NotImplementedError("incremental EM is not offered for hybrid networks")
        with iteration_span("dpgm-em", iteration):
            results = latent_pass(self.source, self.plan, restarts)
        for params, stats in zip(restarts, results, strict=True):
            params["last"] = stats  # the statistics at the parameters: standard errors of the returned model
        return [(stats["loglik"], stats) for stats in results]

    def mstep(self, params: dict, stats: dict) -> dict:
        return _mstep(self.plan, self.plans, params, stats)

    def vector(self, params: dict) -> np.ndarray:
        return np.concatenate([np.nan_to_num(np.ravel(np.asarray(leaf, dtype=float)), neginf=-700.0)
                               for leaf in _leaves(_own(params))])

    def unconstrained(self, params: dict) -> np.ndarray:
        """Log-probabilities, coefficients and log-variances: any vector maps back (SQUAREM)."""
        own = _own(params)
        own["glm"] = {node: {"beta": glm["beta"], "scale": np.log(glm["scale"])} for node, glm in own["glm"].items()}
        return self.vector(own)

    def constrained(self, vector: np.ndarray, like: dict) -> dict:
        """Parameters from :meth:`unconstrained`'s vector: the tables renormalised, the variances exponentiated."""
        from scipy.special import logsumexp

        leaves, start = [], 0
        for leaf in _leaves(_own(like)):
            size = np.size(leaf)
            leaves.append(vector[start:start + size].reshape(np.shape(leaf)))
            start += size
        params = _rebuild(_own(like), iter(leaves))
        params["log_prior"] = params["log_prior"] - logsumexp(params["log_prior"])
        params["tables"] = {v: t - logsumexp(t, axis=0, keepdims=True) for v, t in params["tables"].items()}
        for glm in params["glm"].values():
            glm["scale"] = np.exp(glm["scale"]) if np.ndim(glm["scale"]) else float(np.exp(glm["scale"]))
        return params

    def to_model(self, params: dict) -> HybridNetwork:
        return _labelled(self.model, self.plan, self.plans, params, self.source.schema)

    def from_model(self, network: HybridNetwork) -> dict:
        return _parameters(self.plan, network)


def _leaves(tree) -> list:
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in _leaves(tree[key])]
    return [tree]


def _own(params: dict) -> dict:
    """The parameters proper: without the statistics the last pass left (``last``) or a start's ``seed``."""
    return {k: v for k, v in params.items() if k not in ("last", "seed")}


def _rebuild(tree, leaves):
    """``tree``'s nesting with its leaves taken in :func:`_leaves`' order from the iterator ``leaves``."""
    if isinstance(tree, dict):
        return {key: _rebuild(tree[key], leaves) for key in sorted(tree)}
    return next(leaves)


def fit_hybrid_em(model: HybridNetwork, source: DataSource, *, tol, max_iter, callback, n_init: int = 1,
                  random_state=None, init: str | None = None, persist: bool = False, checkpoint=None, resume=None,
                  accelerate="squarem", prune_restarts: bool = False) -> FitResult:
    """EM for a hybrid network with one latent root: see the module docstring and :func:`dpgm.fit`.

    ``accelerate="squarem"`` extrapolates on the log-probabilities, coefficients and
    log-variances (:meth:`HybridEM.unconstrained`); ``prune_restarts`` drops restarts
    that cannot draw level (:func:`dpgm.algorithms.em.em`). Incremental EM is not
    offered (the pass reads every row). ``init="model"`` starts from the given fitted
    network's parameters (one start, no start pass); None or ``"random"``: ``n_init``
    random responsibilities.
    """
    from dpgm.api.em_control import em_result, maybe_persist, run_em, total_rows
    from dpgm.cluster import current_client, iteration_span
    from dpgm.stats.hybrid_em import latent_pass

    if source.is_table:
        raise TypeError(f"a HybridNetwork is fitted to a dataset of rows, got a {type(source.data).__name__}")
    schema = source.schema
    # states declared for observed variables: matched by label, the tables handed back in the declared order
    model, order = align(model, source.data, states=schema.states,
                         variables=[v for v in model.states if v in schema])
    plan, plans = _plan(model, schema)
    source = maybe_persist(source.with_client(source.client or current_client()), plan.observed, persist)
    if init not in (None, "random", "model"):
        raise ValueError(f"init must be 'random' or 'model', got {init!r}")
    family = HybridEM(model, plan, plans, source)
    start_pass = resume is None and init != "model"
    models: list = [None] * n_init  # a resumed fit starts from the checkpoint's parameters
    if resume is None and init == "model":
        if n_init != 1:
            raise ValueError("init='model' starts from the given parameters: n_init must be 1")
        if not model.is_fitted:
            raise ValueError("init='model' needs a fitted HybridNetwork (every GLM node's coefficients)")
        models = [family.from_model(model)]
    elif start_pass:
        seeds = np.random.default_rng(random_state).integers(0, 2**62, size=n_init)
        with iteration_span("dpgm-em", 0):
            starts = latent_pass(source, plan, [{"seed": int(s)} for s in seeds])
        models = [_mstep(plan, plans, None, stats) for stats in starts]

    state = run_em(family, models, tol=tol, max_iter=max_iter, callback=callback, client=source.client,
                   checkpoint=checkpoint, resume=resume, accelerate=accelerate, prune_restarts=prune_restarts)
    state.passes += 1 if start_pass or resume is not None else 0  # the random starts' pass (a resumed loop
    # counts the passes before it too)
    fitted = state.models[state.best]
    result = em_result(state, "em", n_params=fitted.n_free_parameters(), n_rows=total_rows(source))
    result.info["latent"] = [plan.latent]
    return order.restore(result)

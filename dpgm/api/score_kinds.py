"""Each kind's per-row log-likelihood (the registry's ``Kind.score``): checks at the boundary, then one row map.

Every function here is ``score(model, data) -> (lazy (row,) values, attrs)``: ``data`` a
dataset over ``row``, the values built with :func:`dpgm.stats.rows.row_map` from a block
of :mod:`dpgm.stats.scores` (one task per chunk, ``dpgm-score`` in the dashboard), the
attrs what the result should say of how it was scored (the variables summed out). Each
is written as ``parts(model, data) -> RowScores`` (the columns, the block and its shared
object) and kept as the score function's ``parts``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import xarray as xr

from dpgm.api.checks import check_continuous
from dpgm.api.labels import align
from dpgm.data.schema import Schema
from dpgm.errors import DataError

if TYPE_CHECKING:
    import dask.array as da

__all__ = ["RowScores", "discrete_scores", "gaussian_scores", "glm_scores", "hybrid_scores", "linear_gaussian_scores",
           "mixture_scores", "sequence_scores"]

PREFIX = "dpgm-score"


class RowScores(NamedTuple):
    """What a kind's per-row log-likelihood reads and runs: the columns, the block of
    :mod:`dpgm.stats.scores`, its shared object (the model's arrays) and the result's attrs."""

    names: list[str]
    block: Any
    shared: Any
    attrs: dict


def _scorer(parts: Callable[[Any, xr.Dataset], RowScores]) -> Any:
    """``parts(model, data) -> RowScores`` as a score function ``(model, data) -> (lazy (row,) values, attrs)``.

    The function keeps ``parts`` as its attribute ``parts``: a pass that evaluates many
    models at once (:mod:`dpgm.api.observed_information`) runs their blocks itself.
    """

    @functools.wraps(parts)
    def score(model: Any, data: xr.Dataset) -> tuple[da.Array, dict]:
        found = parts(model, data)
        return _map(data, found.names, found.block, found.shared), found.attrs

    score.parts = parts
    return score


def _map(data: xr.Dataset, names: list[str], block: Any, shared: Any) -> da.Array:
    from dpgm.stats.rows import constant_map, row_map

    if not names:  # nothing observed: every row scores log 1
        return constant_map(data, np.zeros((1, 1)))[:, 0]
    return row_map(data, names, block, 1, shared=shared, prefix=PREFIX)[:, 0]


def _schema(data: xr.Dataset) -> Schema:
    return Schema.from_dataset(data)


@_scorer
def discrete_scores(model: Any, data: xr.Dataset) -> RowScores:
    """A Bayesian network's, Markov network's or log-linear model's ``log P(observed values) `` per row."""
    from dpgm.inference.batched import BatchedTree
    from dpgm.models.bayesian_network import BayesianNetwork
    from dpgm.stats.scores import discrete_block

    if isinstance(model, BayesianNetwork) and not model.is_parameterized:
        raise TypeError("score needs a parameterized BayesianNetwork (a structure has no tables)")
    schema = _schema(data)
    observed = [v for v in model.variables if v in data.data_vars]
    model, _ = align(model, data, states=schema.states, variables=observed)
    cards = {v: len(model.states[v]) for v in model.variables}
    tree = BatchedTree(model.variables, cards, model.factors())
    log_z = float(tree.posteriors(np.zeros((1, 0), dtype=np.int8), [], targets=[])[0][0])
    block = functools.partial(discrete_block, observed=tuple(observed),
                              cardinalities=tuple(cards[v] for v in observed))
    summed = [v for v in model.variables if v not in observed]
    families = _family_tables(model, observed) if isinstance(model, BayesianNetwork) and not summed else None
    return RowScores(observed, block, (tree, log_z, families), {"summed_out": summed})


def _family_tables(model: Any, observed: list[str]) -> Any:
    """The network's log tables by family, indexed by the columns of ``observed`` (complete rows' fast path)."""
    from dpgm.stats.scores import FamilyTables

    tables, columns, strides = [], [], []
    for v in model.variables:
        table = model.cpds[v]
        dims = [str(d) for d in table.dims]
        with np.errstate(divide="ignore"):
            tables.append(np.log(np.ascontiguousarray(table.values, dtype=np.float64)).ravel())
        columns.append(tuple(observed.index(d) for d in dims))
        strides.append(np.array([int(np.prod(table.shape[i + 1:])) for i in range(len(dims))], dtype=np.int64))
    return FamilyTables(tuple(tables), tuple(columns), tuple(strides))


def _sequence_checks(model: Any, data: xr.Dataset) -> Any:
    """The model aligned to the data's labels, after the checks of its layout."""
    schema = _schema(data)
    if not model.is_fitted:
        raise TypeError("score needs a fitted HiddenMarkovModel (its continuous emissions have no parameters)")
    wanted = ("row",) if model.sequence is not None else ("row", "time")
    for variable in [*model.variables, *([model.sequence] if model.sequence is not None else [])]:
        if variable not in data.data_vars:
            raise DataError(f"the sequence variable {variable!r} is not in the data; known: {sorted(schema)}",
                            variable=variable)
        if data[variable].dims != wanted:
            raise DataError(f"must have dims {wanted!r} (the layout the model was fitted on), has "
                            f"{data[variable].dims!r}", variable=variable)
    model, _ = align(model, data, states=schema.states, variables=list(model.categorical_variables))
    return model


@_scorer
def _row_sequence_scores(model: Any, data: xr.Dataset) -> RowScores:
    from dpgm.api.hmm import restart_arrays
    from dpgm.inference.chain import sequence_logliks
    from dpgm.stats.scores import sequence_block

    if model.sequence is not None:
        raise ValueError("the long layout (one row per step) has no per-row scores: a sequence spans rows")
    model = _sequence_checks(model, data)
    block = functools.partial(sequence_block, forward=sequence_logliks)
    return RowScores(list(model.variables), block, restart_arrays(model), {"summed_out": []})


def sequence_scores(model: Any, data: xr.Dataset) -> tuple[Any, dict]:
    """A hidden Markov model's log-likelihood of each sequence.

    Sequences stored as rows of ``(row, time)`` variables: one value per row. The long
    layout (``model.sequence`` set, one row per step): an ``xarray.DataArray`` over the
    sequence-id variable, one value per sequence labelled by its id (a categorical id
    variable: its label), in row order, from the passes of the long E step
    (:func:`dpgm.stats.long_scores.long_sequence_scores`).
    """
    if model.sequence is None:
        return _row_sequence_scores(model, data)
    from dpgm.api.hmm import long_log_emission, restart_arrays
    from dpgm.inference import FORWARD_BACKWARD
    from dpgm.stats.long_scores import long_sequence_scores
    from dpgm.stats.source import DataSource

    model = _sequence_checks(model, data)
    values, ids = long_sequence_scores(DataSource.of(data), list(model.variables), model.sequence,
                                       restart_arrays(model), long_log_emission, segments=FORWARD_BACKWARD,
                                       prefix=PREFIX)
    labels = _schema(data).states.get(model.sequence)
    coordinate = np.asarray(labels)[ids] if labels else ids
    return xr.DataArray(values, dims=(model.sequence,), coords={model.sequence: coordinate}), {"summed_out": []}


sequence_scores.parts = _row_sequence_scores.parts  # type: ignore[attr-defined]


def _normal(data: xr.Dataset, variables: tuple[str, ...], kind: str, weights, means, covariances) -> RowScores:
    from dpgm.stats.mixture import ComponentParameters
    from dpgm.stats.scores import gaussian_block

    check_continuous(variables, _schema(data), kind)
    params = ComponentParameters.build(np.asarray(weights, float), np.asarray(means, float),
                                       np.asarray(covariances, float))
    block = functools.partial(gaussian_block, variables=tuple(variables))
    return RowScores(list(variables), block, params, {"summed_out": []})


def _fitted(model: Any, kind: str) -> None:
    if not model.is_fitted:
        raise TypeError(f"score needs a fitted {kind} (a structure has no parameters): fit it with dpgm.fit")


@_scorer
def gaussian_scores(model: Any, data: xr.Dataset) -> RowScores:
    """A Gaussian graphical model's log density of each row's observed coordinates."""
    _fitted(model, "GaussianGraphicalModel")
    return _normal(data, model.variables, "GaussianGraphicalModel", [1.0], model.mean.values[None],
                   model.covariance.values[None])


def joint_normal(model: Any) -> tuple[np.ndarray, np.ndarray]:
    """The mean and covariance of the joint normal a linear-Gaussian network defines.

    With ``x = c + B x + e`` (``B[v, p]`` the coefficient of parent ``p`` of ``v``, ``e ~ N(0, D)``):
    ``mean = (I - B)^-1 c`` and ``covariance = (I - B)^-1 D (I - B)^-T``.
    """
    index = {v: i for i, v in enumerate(model.variables)}
    p = len(index)
    b, c, d = np.zeros((p, p)), np.zeros(p), np.zeros(p)
    for v, parameters in model.parameters.items():
        c[index[v]], d[index[v]] = parameters["intercept"], parameters["variance"]
        coefficients = parameters["coefficients"]
        for parent, value in zip(coefficients.coords["parent"].values, coefficients.values, strict=True):
            b[index[v], index[str(parent)]] = value
    inverse = np.linalg.inv(np.eye(p) - b)
    covariance = inverse @ np.diag(d) @ inverse.T
    return inverse @ c, (covariance + covariance.T) / 2


@_scorer
def linear_gaussian_scores(model: Any, data: xr.Dataset) -> RowScores:
    """A linear-Gaussian network's log density of each row's observed coordinates (its joint normal's marginal)."""
    _fitted(model, "LinearGaussianNetwork")
    mean, covariance = joint_normal(model)
    return _normal(data, model.variables, "LinearGaussianNetwork", [1.0], mean[None], covariance[None])


@_scorer
def mixture_scores(model: Any, data: xr.Dataset) -> RowScores:
    """A Gaussian mixture's log density of each row's observed coordinates (log-sum-exp over components)."""
    from dpgm.models.mixture import full_covariances

    _fitted(model, "GaussianMixture")
    k, p = model.n_components, len(model.variables)
    covariances = full_covariances(model.covariances.values, model.covariance_type, k, p)
    return _normal(data, model.variables, "GaussianMixture", model.weights.values, model.means.values,
                   covariances)


# ---------------------------------------------------------------- directed networks of tables and GLM nodes


def _response(conditional: Any, schema: Schema) -> np.ndarray | None:
    """Each data code of a categorical child -> its response in the fit's order (a number, or a class)."""
    child = schema[conditional.child]
    if not child.categorical:
        if conditional.glm.has_states and conditional.glm.multiclass:
            raise DataError("is continuous in the data; a categorical GLM child needs codes", variable=child.name)
        return None
    data_states = list(child.states or ())
    fitted = list(conditional.child_states or data_states)
    if sorted(fitted) != sorted(data_states):
        raise DataError(f"the data's states {data_states} are not the fitted ones {fitted}",
                        variable=conditional.child)
    position = np.array([fitted.index(s) for s in data_states])
    if conditional.glm.multiclass:
        return position.astype(np.intp)
    try:
        values = conditional.glm.child_values(tuple(fitted))
    except ValueError as error:
        raise DataError(str(error), variable=conditional.child) from None
    return np.asarray(values if values is not None else range(len(fitted)), dtype=np.float64)[position]


def _glm_term(conditional: Any, schema: Schema, latent: str | None, states: tuple[str, ...]):
    """A GLM node's :class:`~dpgm.stats.scores.GLMTerm`: its design and coefficients on the data, per latent state."""
    from dpgm.api.glm_predict import prediction_design
    from dpgm.models.glm import GLMConditional
    from dpgm.stats.scores import GLMTerm

    coefficients = conditional.coefficients
    if latent is None or latent not in coefficients.dims:
        design, beta = prediction_design(conditional, schema)
        parts = ((design, beta, float(conditional.scale)),)
    else:
        parents = [p for p in conditional.parents if p != latent]
        parts = []
        for s in states:
            scale = (float(conditional.scale_by_state.sel({latent: s})) if conditional.scale_by_state is not None
                     else float(conditional.scale))
            one = GLMConditional(conditional.child, parents, conditional.family, conditional.l2,
                                 coefficients=coefficients.sel({latent: s}, drop=True),
                                 standard_errors=coefficients.sel({latent: s}, drop=True) * np.nan, scale=scale,
                                 child_states=conditional.child_states)
            design, beta = prediction_design(one, schema)
            parts.append((design, beta, scale))
        parts = tuple(parts)
    return GLMTerm(conditional.child, parts, _response(conditional, schema))


@_scorer
def glm_scores(model: Any, data: xr.Dataset) -> RowScores:
    """A GLM conditional's ``log p(child | parents)`` per row (0 where the child is missing)."""
    from dpgm.api.glm_predict import fitted_conditional
    from dpgm.stats.scores import NetworkPlan, network_block

    conditional = fitted_conditional(model, None)
    schema = _schema(data)
    if conditional.child not in schema:
        raise DataError(f"is not in the data; known: {sorted(schema)}", variable=conditional.child)
    plan = NetworkPlan(None, np.zeros(1), (), (_glm_term(conditional, schema, None, ()),))
    return RowScores(plan.columns, network_block, plan, {"summed_out": []})


@_scorer
def hybrid_scores(model: Any, data: xr.Dataset) -> RowScores:
    """A hybrid network's sum of node terms per row, log-sum-exp over the states of a latent root."""
    from dpgm.api.checks import check_labels, tabular_families
    from dpgm.models.state_order import reorder_table
    from dpgm.stats.scores import NetworkPlan, TableTerm, network_block

    if not model.is_fitted:
        raise TypeError("score needs a fitted HybridNetwork: fit it with dpgm.fit")
    schema = _schema(data)
    absent = [v for v in model.variables if v not in data.data_vars]
    latent = [v for v in absent if v not in model.families and not model.parents(v) and v in model.states]
    if len(latent) > 1 or len(absent) > len(latent):
        bad = next((v for v in absent if v not in latent), latent[-1] if latent else None)
        raise DataError(f"is not in the data: a hybrid network sums out one latent root (a tabular variable with "
                        f"states and no parents), not {absent}; data variables: {sorted(schema)}", variable=bad)
    z = latent[0] if latent else None
    model, _ = align(model, data, states=schema.states, variables=[v for v in model.states if v in schema])
    states = tuple(model.states[z]) if z else ()
    with np.errstate(divide="ignore"):
        log_prior = np.log(model.tables[z].values) if z else np.zeros(1)
        tables = []
        for family in tabular_families(model, schema, z):
            table = model.tables[family[0]]
            labels = {u: schema.states[u] for u in family if u != z}
            for u, wanted in labels.items():
                check_labels(u, [str(s) for s in table.coords[u].values], wanted)
            tables.append(TableTerm(family, np.log(reorder_table(table, labels).transpose(*family).values)))
    glms = tuple(_glm_term(model.conditionals[v], schema, z, states) for v in model.glm_nodes)
    plan = NetworkPlan(z, log_prior, tuple(tables), glms)
    return RowScores(plan.columns, network_block, plan, {"summed_out": [z] if z else []})

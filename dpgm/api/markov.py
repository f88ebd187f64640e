"""Markov networks: tree IPF, closed form, or the log-linear methods on indicator features; the fitted
potentials in canonical form and their asymptotic standard errors."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import xarray as xr

from dpgm.algorithms.features import FeatureSet
from dpgm.algorithms.goodness import saturated_goodness_of_fit
from dpgm.algorithms.result import FitResult
from dpgm.algorithms.tables import JointEngine, engine_for, loglik_from_potentials, zero_offsets
from dpgm.algorithms.weights import WEIGHT_METHODS, fit_weights
from dpgm.api.checks import (
    counts_with_zeros,
    saturated_scope,
    structural_zeros_for,
)
from dpgm.api.labels import align
from dpgm.api.results import fit_result
from dpgm.api.spec_checks import scopes_in_data
from dpgm.inference.triangulation import build_tree
from dpgm.models.log_linear import hierarchical_free_parameters
from dpgm.models.markov import MarkovNetwork
from dpgm.stats.source import DataSource

_MARKOV_METHODS = ("ipf", "closed_form", *WEIGHT_METHODS)


def fit_markov_network(model: MarkovNetwork, source: DataSource, method, *, tol, max_iter, callback,
                        structural_zeros=None, l1: float = 0.0, l2: float = 0.0, goodness_of_fit=True,
                        loglik_tol: float = 0.0) -> FitResult:
    from dpgm.algorithms.decomposable import decomposable_mle
    from dpgm.algorithms.tree_ipf import tree_ipf

    if method not in _MARKOV_METHODS:
        raise ValueError(f"unknown method {method!r} for a MarkovNetwork; expected one of {_MARKOV_METHODS}")
    states = source.states
    model, order = align(model, source.data, states=states)
    scopes = model.scopes
    zeros = structural_zeros_for(model, structural_zeros, states)
    if not loglik_tol >= 0:
        raise ValueError(f"loglik_tol must be a nonnegative number, got {loglik_tol!r}")
    if loglik_tol and method != "ipf":
        raise ValueError(f"loglik_tol applies to method='ipf', not {method!r}")
    if method == "closed_form" and zeros is not None:
        raise ValueError("closed_form does not take structural zeros; use method='ipf'")
    offsets = zero_offsets(zeros)
    cards = {v: model.cardinality(v) for v in model.variables}
    # the junction tree before the pass: a model too dense for exact IPF is refused (TreeTooLarge)
    # in O(model) time, before anything reads the data
    structure = build_tree(model.variables, cards, [*scopes, *offsets]) if method == "ipf" else None
    saturated = saturated_scope(model.variables, states) if goodness_of_fit else None
    tables = counts_with_zeros(source, list(scopes) + ([saturated] if saturated else []), zeros)
    n = float(tables.n_rows)
    counts = {s: np.asarray(tables[s], dtype=float) for s in scopes}
    engine = engine_for(model.variables, states, offsets)
    n_params = hierarchical_free_parameters(scopes, model.states)
    # one indicator per margin cell, as LogLinearModel.from_margins (without its labels): the weights
    # methods fit them; goodness of fit uses only the design's rank
    joint = isinstance(engine, JointEngine)
    features = (FeatureSet.indicators({s: counts[s].shape for s in scopes})
                if method in WEIGHT_METHODS or (saturated and joint) else None)
    loglik = None
    if method in WEIGHT_METHODS:
        run = fit_weights(features, features.expectations(counts) / n, engine, method,
                          theta=np.zeros(features.n_features), n=n, max_iter=max_iter, tol=tol, callback=callback,
                          l1=l1, l2=l2)
        log_potentials = features.log_potentials(run.parameters)
        loglik, history, converged, n_iter = run.loglik, run.history, run.converged, run.n_iter
    else:
        with np.errstate(divide="ignore"):
            init = {s: np.log(model.potentials[s].values) for s in scopes}
        if method == "closed_form":
            if any(np.isneginf(t).any() for t in init.values()):
                raise ValueError("closed_form does not take potentials with zeros; use method='ipf'")
            log_potentials = decomposable_mle(scopes, counts)
            history, converged, n_iter = [], True, 0
        else:
            state = tree_ipf(counts, model.variables, cards, init=init, max_iter=max_iter, tol=tol,
                             loglik_tol=loglik_tol, callback=callback, fixed=offsets, structure=structure)
            log_potentials, history, converged, n_iter = (state.log_potentials, state.history, state.converged,
                                                          state.n_iter)
    fitted = model.with_structural_zeros(zeros).with_log_potentials(log_potentials)
    log_potentials = {s: log_potentials[s] for s in scopes}
    if loglik is None:
        _, log_z = engine(log_potentials, [])
        loglik = loglik_from_potentials(counts, log_potentials, log_z, n)
    goodness = (saturated_goodness_of_fit(features, engine, log_potentials, tables[saturated], saturated, n_params)
                if saturated and joint else None)
    result = order.restore(fit_result(fitted, method, loglik=loglik, converged=converged, n_iter=n_iter, n_rows=n,
                                      n_params=n_params, history=history, goodness=goodness))
    # the canonical form in the model's own state order (its first states the reference)
    positive = _positive_off_zeros(result.model)
    if all((table.values > 0).all() for table in positive.potentials.values()):
        result.model = positive.canonical()
    if l1 == 0 and l2 == 0:  # a penalised estimate has none; the MLE's are formed when asked for
        result.info["standard_errors"] = functools.partial(potential_errors, result.model, n)
    return result


def _positive_off_zeros(model: MarkovNetwork) -> MarkovNetwork:
    """The network with 1 in place of the zero entries of its potentials that only cells fixed at zero by its
    structural zeros hold (the weights methods put them there; any value gives the same distribution)."""
    zeros = model.structural_zeros
    if zeros is None or all((table.values > 0).all() for table in model.potentials.values()):
        return model
    tables = {}
    for scope, table in model.potentials.items():
        outside = [d for d in zeros.dims if d not in scope]
        held = zeros.all(dim=outside) if outside else zeros  # cells of the scope whose every completion is zero
        forbidden = held.broadcast_like(table).transpose(*scope).values
        tables[scope] = table.copy(data=np.where((table.values == 0) & forbidden, 1.0, table.values))
    return MarkovNetwork(tables, zeros)


def treatment_features(model: MarkovNetwork) -> dict[tuple[str, ...], np.ndarray]:
    """Each scope's treatment-coded features in canonical form: ``(k_S, cells_S)``, one row per cell of each of
    its :meth:`~dpgm.MarkovNetwork.canonical_terms` with every variable past its first state (the indicator
    of that cell), so that a canonical log potential is ``features.T @ lambda_S``."""
    out = {}
    for scope, terms in model.canonical_terms().items():
        shape = [model.cardinality(v) for v in scope]
        coordinates = np.indices(shape).reshape(len(scope), -1)
        rows = []
        for term in terms:
            axes = [scope.index(v) for v in term]
            sub = coordinates[axes]
            nonreference = (sub > 0).all(axis=0)
            cell = np.ravel_multi_index(sub, [shape[a] for a in axes])
            levels = itertools.product(*(range(1, shape[a]) for a in axes))
            wanted = [np.ravel_multi_index(level, [shape[a] for a in axes]) for level in levels]
            rows.append((cell[None, :] == np.array(wanted)[:, None]) & nonreference)
        out[scope] = (np.concatenate(rows).astype(float) if rows else np.zeros((0, math.prod(shape))))
    return out


def positive_potentials(model: MarkovNetwork) -> None:
    """Refuse a network with a zero potential entry: its log-linear terms are infinite.

    Raises
    ------
    ValueError
        Naming the potential.
    """
    for scope, table in model.potentials.items():
        if (table.values <= 0).any():
            raise ValueError(f"the fitted potential on {scope!r} has zero entries (an empty cell of a margin, "
                             "or cells the structural zeros leave without mass): the estimate is on the boundary, "
                             "its log-linear terms are infinite and have no asymptotic standard errors "
                             "(dpgm.bootstrap gives standard errors)")


def potential_errors(model: MarkovNetwork, n: float) -> dict[str, xr.DataArray]:
    """Standard errors of a fitted network's potentials in canonical form, by the delta method:
    ``se(phi) = phi se(log phi)``, where ``log phi_S(x) = sum_A lambda_A(x_A)`` and the ``lambda``'s
    covariance is the inverse of ``n Cov_p(F)`` (:func:`~dpgm.algorithms.information.feature_moments`, the
    treatment-coded features :func:`treatment_features`); named as
    :func:`dpgm.models.parameters.parameter_tables` names the potentials. An entry fixed at 1 by the
    canonical form has 0, one the features cannot identify (structural zeros) NaN.

    Raises
    ------
    ValueError
        A potential has a zero entry, or the model has more than
        :data:`~dpgm.algorithms.information.MAX_INFORMATION_PARAMETERS` free parameters.
    """
    from dpgm.algorithms.information import (
        MAX_INFORMATION_PARAMETERS,
        combination_errors,
        feature_moments,
        inverse_information,
    )
    from dpgm.models.parameters import parameter_tables

    positive_potentials(model)
    n_params = model.n_free_parameters()
    if n_params > MAX_INFORMATION_PARAMETERS:
        raise ValueError(f"{n_params:,} free parameters: the information matrix is not formed beyond "
                         f"{MAX_INFORMATION_PARAMETERS:,} (dpgm.bootstrap gives standard errors)")
    features = treatment_features(model)
    cards = {v: model.cardinality(v) for v in model.variables}
    _, covariance = feature_moments(model.variables, cards, model.factors(), features)
    inverse, null = inverse_information(covariance, n)
    names = {(name[len("table:"):] if name.startswith("table:") else name): name for name in parameter_tables(model)}
    errors, start = {}, 0
    for scope, matrix in features.items():
        block = slice(start, start + len(matrix))
        start += len(matrix)
        table = model.potentials[scope]
        log_errors = combination_errors(inverse[block, block], null[block], matrix.T).reshape(table.shape)
        errors[names[",".join(scope)]] = table.copy(data=table.values * log_errors)
    return errors


def markov_network_from_spec(spec: dict, states: dict[str, tuple[str, ...]], continuous: list[str] | None
                             ) -> tuple[MarkovNetwork, None]:
    """A ``model: markov_network`` specification: its ``cliques``, each a list of categorical variables."""
    return MarkovNetwork.from_cliques(scopes_in_data(spec, "cliques", "markov_network", states), states), None

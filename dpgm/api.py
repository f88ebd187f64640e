"""``dpgm.fit``: one entry point that validates, gathers statistics and dispatches by method."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from dpgm.data.schema import Schema
from dpgm.errors import DataError
from dpgm.fit.bayesian import PRIORS, bayesian_network_estimate, result_for
from dpgm.fit.features import FeatureSet
from dpgm.fit.gis import gis
from dpgm.fit.goodness import MAX_SATURATED_CELLS, deviance_and_pearson
from dpgm.fit.gradient import lbfgs, newton, proximal_gradient
from dpgm.fit.result import FitResult
from dpgm.fit.tables import MAX_JOINT_CELLS, JointEngine, Scope, TreeEngine
from dpgm.models.bayesian_network import BayesianNetwork
from dpgm.models.hmm import HiddenMarkovModel
from dpgm.models.log_linear import LogLinearModel
from dpgm.models.markov import MarkovNetwork
from dpgm.stats.counts import Counts, counts

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["fit", "predict_proba"]


def _data_states(data: xr.Dataset | xr.DataArray) -> dict[str, tuple[str, ...]]:
    if isinstance(data, xr.DataArray):
        return {str(d): tuple(str(s) for s in data.coords[d].values) for d in data.dims if d in data.coords}
    return Schema.from_dataset(data).states


def _check_variables(variables: Sequence[str], model_states: dict, data_states: dict) -> None:
    absent = [v for v in variables if v not in data_states]
    if absent:
        raise DataError(
            f"model variables {absent} are not in the data; latent variables need method='em'; "
            f"data variables: {sorted(data_states)}"
        )
    for v in variables:
        if v in model_states and tuple(model_states[v]) != tuple(data_states[v]):
            raise DataError(
                f"the model's states {tuple(model_states[v])!r} differ from the data's {tuple(data_states[v])!r}",
                variable=v,
            )


def _complete_counts(data, scopes, client, progress) -> Counts:
    tables = counts(data, scopes, client=client, progress=progress)
    incomplete = {s: m for s, m in tables.n_missing.items() if m}
    if incomplete:
        scope, missing = next(iter(incomplete.items()))
        raise DataError(
            f"{missing:,} rows have missing values in {scope!r} ({len(incomplete)} scopes affected); "
            "complete-data methods refuse them rather than drop them: fit with method='em'"
        )
    return tables


def _saturated_scope(variables: Sequence[str], states: dict) -> tuple[str, ...] | None:
    cells = math.prod(len(states[v]) for v in variables)
    return tuple(variables) if cells <= MAX_SATURATED_CELLS else None


def _bn_joint(model: BayesianNetwork, order: Sequence[str]) -> np.ndarray:
    letters = {v: chr(ord("a") + i) if i < 26 else chr(ord("A") + i - 26) for i, v in enumerate(order)}
    operands, subscripts = [], []
    for v in model.variables:
        table = model.cpds[v]
        operands.append(table.values)
        subscripts.append("".join(letters[d] for d in table.dims))
    return np.einsum(",".join(subscripts) + "->" + "".join(letters[v] for v in order), *operands)


def fit(
    model: Any,
    data: xr.Dataset | xr.DataArray,
    method: str | None = None,
    *,
    tol: float = 1e-8,
    max_iter: int = 1000,
    client: Client | None = None,
    progress: bool = False,
    callback: Callable[[dict[str, float]], None] | None = None,
    **options: Any,
) -> FitResult:
    """Fit a model's parameters to data.

    Parameters
    ----------
    model
        A :class:`~dpgm.BayesianNetwork` (parameterized, or a structure from
        ``BayesianNetwork.from_edges`` whose states come from the data), or a
        :class:`~dpgm.LogLinearModel`.
    data
        A dataset (lazy Zarr-backed or in memory) or a labelled contingency table.
    method
        Bayesian networks: ``"mle"`` (default) or ``"bayes"`` (posterior mean under
        a Dirichlet prior: ``prior="BDeu"`` with ``equivalent_sample_size``,
        ``"K2"``, or ``"dirichlet"`` with ``pseudo_counts={variable: table}``).
        Log-linear models: ``"lbfgs"`` (default; ``l2=`` ridge and ``l1=`` lasso
        penalties, the latter by proximal gradient), ``"newton"`` (small models),
        ``"gis"``. ``structural_zeros=`` a boolean DataArray of cells fixed at zero.
    tol, max_iter
        Stopping rule of iterative methods.
    client
        Dask client for the pass(es) over the data.
    progress
        Show progress of the passes.
    callback
        Called with each iteration's history record.
    **options
        Method options (see above).

    Returns
    -------
    FitResult

    Raises
    ------
    DataError
        Model variables absent from the data, states that differ, missing values
        with a complete-data method.
    ValueError
        An unknown method or option.

    Examples
    --------
    >>> import dpgm
    >>> truth = dpgm.load_network("asia")
    >>> data = dpgm.sample_bayesian_network(truth, 10_000, seed=0)
    >>> result = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), data)
    >>> result.converged, result.n_params
    (True, 18)
    """
    if isinstance(model, BayesianNetwork):
        if method == "em":
            return _fit_bayesian_network_em(model, data, tol=tol, max_iter=max_iter, client=client,
                                            progress=progress, callback=callback, **options)
        return _fit_bayesian_network(model, data, method or "mle", client=client, progress=progress, **options)
    if isinstance(model, HiddenMarkovModel):
        if method not in (None, "em"):
            raise ValueError(f"a HiddenMarkovModel is fitted by method='em' (Baum-Welch), not {method!r}")
        return _fit_hmm(model, data, tol=tol, max_iter=max_iter, client=client, progress=progress,
                        callback=callback, **options)
    if isinstance(model, MarkovNetwork | LogLinearModel) and method == "em":
        return _fit_undirected_em(model, data, tol=tol, max_iter=max_iter, client=client, progress=progress,
                                  callback=callback, **options)
    if isinstance(model, MarkovNetwork):
        return _fit_markov_network(model, data, method or "ipf", tol=tol, max_iter=max_iter, client=client,
                                   progress=progress, callback=callback, **options)
    if isinstance(model, LogLinearModel):
        return _fit_log_linear(model, data, method or "lbfgs", tol=tol, max_iter=max_iter, client=client,
                               progress=progress, callback=callback, **options)
    raise TypeError(
        f"cannot fit a {type(model).__name__}; expected a BayesianNetwork, MarkovNetwork, LogLinearModel "
        "or HiddenMarkovModel"
    )


def _engine(variables: Sequence[str], states: dict, offsets: dict[Scope, np.ndarray] | None = None):
    """Marginals engine for a model over ``variables``: the enumerated joint when small enough."""
    cards = {v: len(states[v]) for v in variables}
    if math.prod(cards.values()) > MAX_JOINT_CELLS:
        if offsets:
            raise ValueError("structural_zeros on a model too large to enumerate: give them as zeros "
                             "of a start table and fit with method='ipf'")
        return TreeEngine(variables, cards)
    engine = JointEngine(variables, cards)
    if not offsets:
        return engine

    def with_offsets(log_potentials, scopes):
        merged = dict(log_potentials)
        for scope, table in offsets.items():
            merged[scope] = merged[scope] + table if scope in merged else table
        return engine(merged, scopes)

    with_offsets.variables, with_offsets.shape, with_offsets.joint_engine = engine.variables, engine.shape, engine
    return with_offsets


def _structural_zero_offsets(structural_zeros: xr.DataArray | None, variables, states) -> dict[Scope, np.ndarray]:
    if structural_zeros is None:
        return {}
    if not isinstance(structural_zeros, xr.DataArray):
        raise TypeError(f"structural_zeros must be a boolean xarray.DataArray, got {type(structural_zeros).__name__}")
    unknown = [str(d) for d in structural_zeros.dims if d not in variables]
    if unknown:
        raise ValueError(f"structural_zeros names variables not in the model: {unknown}")
    scope = tuple(sorted(map(str, structural_zeros.dims), key=list(variables).index))
    mask = structural_zeros.transpose(*scope)
    for v in scope:
        if tuple(map(str, mask.coords[v].values)) != tuple(states[v]):
            raise DataError("structural_zeros labels differ from the data's", variable=v)
    return {scope: np.where(mask.values.astype(bool), -np.inf, 0.0)}


_LOG_LINEAR_METHODS = ("gis", "lbfgs", "newton")


def _fit_log_linear(model: LogLinearModel, data, method, *, tol, max_iter, client, progress, callback,
                    l1: float = 0.0, l2: float = 0.0, structural_zeros=None, goodness_of_fit=True) -> FitResult:
    if method not in _LOG_LINEAR_METHODS:
        raise ValueError(f"unknown method {method!r} for a LogLinearModel; expected one of {_LOG_LINEAR_METHODS}")
    states = _data_states(data)
    _check_variables(model.variables, model.states, states)
    features, order = model.feature_set()
    saturated = _saturated_scope(model.variables, states) if goodness_of_fit else None
    tables = _complete_counts(data, list(features.scopes) + ([saturated] if saturated else []), client, progress)
    n = float(tables.n_rows)
    counts = {s: np.asarray(tables[s].values, dtype=float) for s in features.scopes}
    empirical = features.expectations(counts) / n
    offsets = _structural_zero_offsets(structural_zeros, model.variables, states)
    engine = _engine(model.variables, states, offsets)
    start = model.theta(order)
    options = {"theta": start, "n": n, "max_iter": max_iter, "tol": tol, "callback": callback}
    if method == "gis":
        if l1 or l2:
            raise ValueError("gis fits the unpenalized likelihood; use method='lbfgs' for l1/l2 penalties")
        theta, history, converged, n_iter = gis(features, empirical, engine, **options)
    elif method == "newton":
        theta, history, converged, n_iter = newton(features, empirical, getattr(engine, "joint_engine", engine),
                                                   l2=l2, **options) if not offsets else _refuse_newton()
    elif l1 > 0:
        theta, history, converged, n_iter = proximal_gradient(features, empirical, engine, l1=l1, l2=l2, **options)
    else:
        theta, history, converged, n_iter = lbfgs(features, empirical, engine, l2=l2, **options)
    fitted = model.with_weights(order, theta)
    return _log_linear_result(fitted, features, theta, empirical, engine, tables, saturated, offsets,
                              method, history, converged, n_iter, n)


def _goodness_of_fit(result: FitResult, features: FeatureSet, joint_engine: JointEngine,
                     log_potentials: dict, offsets: dict, observed: xr.DataArray, saturated: Scope) -> None:
    """G^2, X^2 and df against the saturated table (structural zeros left out)."""
    probabilities = joint_engine.joint(log_potentials)
    observed = np.transpose(observed.values, [saturated.index(v) for v in joint_engine.variables])
    zeros = None
    if offsets:
        zeros = np.zeros(joint_engine.shape, dtype=bool)
        for scope, table in offsets.items():
            zeros |= np.broadcast_to(_expand_mask(table, scope, joint_engine.variables), joint_engine.shape)
    result.g2, result.pearson = deviance_and_pearson(observed, probabilities, zeros)
    result.df = int(observed.size - 1 - result.n_params)
    if zeros is not None:
        _adjust_for_structural_zeros(result, features, joint_engine, zeros)


def _adjust_for_structural_zeros(result: FitResult, features: FeatureSet, joint_engine: JointEngine,
                                 zeros: np.ndarray) -> None:
    """Cells fixed at zero leave the table and the parameters they alone carried become
    unidentifiable: df = kept cells - rank of the design on them (statsmodels' GLM agrees).
    R's loglin convention, without the adjustment, is kept in ``info["df_unadjusted"]``."""
    result.info["df_unadjusted"] = result.df
    kept = ~zeros.ravel()
    design = features.design(joint_engine.variables, joint_engine.shape)[:, kept]
    rank = int(np.linalg.matrix_rank(np.vstack([np.ones(int(kept.sum())), design])))
    result.n_params = rank - 1
    result.df = int(kept.sum()) - rank
    result.info["structural_zero_cells"] = int(zeros.sum())


def _refuse_newton():
    raise ValueError("method='newton' does not take structural_zeros; use 'lbfgs', 'gis' or 'ipf'")


def _log_linear_result(fitted, features: FeatureSet, theta, empirical, engine, tables, saturated, offsets,
                       method, history, converged, n_iter, n) -> FitResult:
    _, log_z = engine(features.log_potentials(theta), [])
    finite = np.isfinite(theta)
    loglik = n * (float(theta[finite] @ empirical[finite]) - log_z)
    n_params = fitted.n_free_parameters()
    result = FitResult(model=fitted, method=method, loglik=loglik, converged=converged, n_iter=n_iter,
                       n_rows=n, n_params=n_params, history=history)
    if saturated and not isinstance(engine, TreeEngine):
        joint_engine = getattr(engine, "joint_engine", engine)
        log_potentials = features.log_potentials(theta)
        for scope, table in offsets.items():
            log_potentials[scope] = log_potentials.get(scope, 0.0) + table
        _goodness_of_fit(result, features, joint_engine, log_potentials, offsets, tables[saturated], saturated)
    if not converged:
        import warnings

        from dpgm.errors import ConvergenceWarning

        warnings.warn(f"{method} stopped after {n_iter} iterations without meeting tol", ConvergenceWarning,
                      stacklevel=3)
    return result


def _expand_mask(table: np.ndarray, scope: Scope, variables) -> np.ndarray:
    from dpgm.fit.tables import expand

    return expand(np.isneginf(table), scope, variables)


def _fit_bayesian_network(model, data, method, *, client, progress, prior=None, equivalent_sample_size=5.0,
                          pseudo_counts=None, goodness_of_fit=True) -> FitResult:
    methods = ("mle", "bayes")
    if method not in methods:
        raise ValueError(f"unknown method {method!r} for a BayesianNetwork; expected one of {methods} (or 'em')")
    if method == "bayes" and prior is None:
        prior = "BDeu"
    if method == "mle" and prior is not None:
        method = "bayes"
    if prior is not None and prior not in PRIORS:
        raise ValueError(f"unknown prior {prior!r}; expected one of {PRIORS}")
    states = _data_states(data)
    _check_variables(model.variables, model.states, states)
    families = model.families
    saturated = _saturated_scope(model.variables, states) if goodness_of_fit else None
    scopes = families + ([saturated] if saturated else [])
    tables = _complete_counts(data, scopes, client, progress)
    estimate, info = bayesian_network_estimate(
        model, tables, prior=prior, equivalent_sample_size=equivalent_sample_size,
        pseudo_counts_by_variable=pseudo_counts,
    )
    result = result_for(estimate, tables, float(tables.n_rows), method, info)
    if saturated:
        observed = tables[saturated].values
        result.g2, result.pearson = deviance_and_pearson(observed, _bn_joint(estimate, saturated))
        result.df = int(observed.size - 1 - result.n_params)
    return result


def _event_callback(client, callback):
    """Each EM record goes to the user's callback and, on a cluster, to its event log."""

    def report(record: dict) -> None:
        if callback is not None:
            callback(record)
        if client is not None:
            client.log_event("dpgm.fit", record)

    return report


def _initial_models(model, n_init: int, random_state, init):
    if init == "model":
        if n_init != 1:
            raise ValueError("init='model' starts from the given parameters: n_init must be 1")
        return [model]
    if init not in (None, "random"):
        raise ValueError(f"init must be 'random' or 'model', got {init!r}")
    if n_init < 1:
        raise ValueError(f"n_init must be at least 1, got {n_init!r}")
    rng = np.random.default_rng(random_state)
    return [model.randomized(rng) for _ in range(n_init)]


def _fit_hmm(model: HiddenMarkovModel, data, *, tol, max_iter, client, progress, callback, n_init: int = 1,
             random_state=None, init=None, checkpoint=None, resume=None, persist: bool = False) -> FitResult:
    from dpgm.cluster import current_client, iteration_span
    from dpgm.fit.em import em
    from dpgm.stats.expected import sequence_expected_counts

    states = _data_states(data)
    if model.variable not in states:
        raise DataError(f"the sequence variable {model.variable!r} is not in the data; known: {sorted(states)}")
    if tuple(states[model.variable]) != model.states[model.variable]:
        raise DataError(f"the model's symbols {model.states[model.variable]!r} differ from the data's "
                        f"{tuple(states[model.variable])!r}", variable=model.variable)
    client = client or current_client()
    data = _maybe_persist(data, [model.variable], persist, client)

    def estep(models, iteration):
        with iteration_span("dpgm-em", iteration):
            return sequence_expected_counts(data, [m.arrays() for m in models], model.variable, client=client,
                                            progress=progress)

    def mstep(current: HiddenMarkovModel, counts: dict) -> HiddenMarkovModel:
        return current.with_arrays(_normalize(counts["start"], current.start.values),
                                   _normalize(counts["transition"], current.transition.values),
                                   _normalize(counts["emission"], current.emission.values))

    starts = _initial_models(model, n_init, random_state, init)
    state = em(starts, estep, mstep, max_iter=max_iter, tol=tol, callback=_event_callback(client, callback),
               checkpoint=checkpoint, resume=resume)
    return _em_result(state, "em", n_params=model.n_states * (model.n_states + model.emission.shape[1] - 1) - 1)


def _normalize(counts: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """Rows of expected counts as distributions; a row with no expected count keeps its values."""
    totals = counts.sum(axis=-1, keepdims=True)
    return np.where(totals > 0, counts / np.where(totals > 0, totals, 1.0), previous)


def _maybe_persist(data, variables, persist: bool, client):
    if not persist or not isinstance(data, xr.Dataset):
        return data
    subset = data[[*variables, *(["weight"] if "weight" in data else [])]]
    if client is not None:
        return client.persist(subset)
    return subset.persist()


def _em_result(state, method: str, n_params: int) -> FitResult:
    import warnings

    from dpgm.errors import ConvergenceWarning

    best = state.best
    history = state.histories[best]
    result = FitResult(
        model=state.models[best], method=method, loglik=history[-1]["loglik"], converged=state.converged[best],
        n_iter=len(history), n_rows=float("nan"), n_params=n_params, history=history, passes=state.passes,
        info={"restart": best, "restart_logliks": [h[-1]["loglik"] for h in state.histories],
              "restart_histories": state.histories},
    )
    if not result.converged:
        warnings.warn(f"EM stopped after {result.n_iter} iterations without meeting tol", ConvergenceWarning,
                      stacklevel=3)
    return result


def _bn_factors(model: BayesianNetwork) -> list[tuple[tuple[str, ...], np.ndarray]]:
    return [(tuple(map(str, model.cpds[v].dims)), model.cpds[v].values) for v in model.variables]


def _fit_bayesian_network_em(model: BayesianNetwork, data, *, tol, max_iter, client, progress, callback,
                             n_init: int = 1, random_state=None, init=None, checkpoint=None, resume=None,
                             persist: bool = False, prior=None, equivalent_sample_size: float = 5.0,
                             pseudo_counts=None) -> FitResult:
    from dpgm.cluster import current_client, iteration_span
    from dpgm.fit.em import em
    from dpgm.inference.evidence import BatchedTree
    from dpgm.stats.expected import expected_counts

    if not model.is_parameterized:
        raise ValueError("EM needs the states of every variable, latent ones included: "
                         "give BayesianNetwork.from_edges(edges, states)")
    if prior is not None and prior not in PRIORS:
        raise ValueError(f"unknown prior {prior!r}; expected one of {PRIORS}")
    states = _data_states(data)
    observed = [v for v in model.variables if v in states]
    latent = [v for v in model.variables if v not in states]
    if not observed:
        raise DataError(f"none of the model's variables are in the data; data variables: {sorted(states)}")
    _check_variables(observed, model.states, states)
    cards = {v: model.cardinality(v) for v in model.variables}
    structure = BatchedTree(model.variables, cards, _bn_factors(model)).structure
    client = client or current_client()
    data = _maybe_persist(data, observed, persist, client)

    def estep(models, iteration):
        trees = [BatchedTree(m.variables, cards, _bn_factors(m), structure) for m in models]
        with iteration_span("dpgm-em", iteration):
            results = expected_counts(data, trees, observed, client=client, progress=progress)
        return [(loglik, (tree, counts)) for tree, (loglik, counts) in zip(trees, results, strict=True)]

    def mstep(current: BayesianNetwork, statistics) -> BayesianNetwork:
        tree, clique_counts = statistics
        families = tree.family_counts(clique_counts, current.families)
        labelled = {f: xr.DataArray(t, dims=f, coords={v: list(current.states[v]) for v in f})
                    for f, t in families.items()}
        estimate, _ = bayesian_network_estimate(current, labelled, prior=prior,
                                                equivalent_sample_size=equivalent_sample_size,
                                                pseudo_counts_by_variable=pseudo_counts)
        return estimate

    starts = _initial_models(model, n_init, random_state, init)
    state = em(starts, estep, mstep, max_iter=max_iter, tol=tol, callback=_event_callback(client, callback),
               checkpoint=checkpoint, resume=resume)
    from dpgm.fit.bayesian import n_free_parameters

    result = _em_result(state, "em", n_params=n_free_parameters(model))
    result.info["latent"] = latent
    result.info["tree_width"] = structure.width
    return result


def predict_proba(
    model: BayesianNetwork,
    data: xr.Dataset,
    variable: str,
    *,
    write: bool = False,
    name: str | None = None,
    client: Client | None = None,
) -> xr.DataArray:
    """Posterior probabilities of one variable for every row, given the row's observed values.

    Parameters
    ----------
    model
        A fitted Bayesian network (e.g. a latent class model after EM).
    data
        The dataset; model variables absent from it (and ``-1`` values) are summed out.
    variable
        The variable whose posterior is wanted (typically the latent class).
    write
        Also write the result into the dataset's Zarr store as a new variable
        ``name`` (default ``"<variable>_proba"``), by a distributed pass.
    name
        Name of the written variable.
    client
        Dask client for the write.

    Returns
    -------
    xarray.DataArray
        Lazy ``(row, <variable>)`` probabilities, labelled with the variable's states.

    Examples
    --------
    >>> import dpgm
    >>> truth = dpgm.load_network("asia")
    >>> rows = dpgm.sample_bayesian_network(truth, 5, seed=0).drop_vars("tub")
    >>> dpgm.predict_proba(truth, rows, "tub").shape
    (5, 2)
    """
    from dpgm.data.io import add_variables
    from dpgm.inference.evidence import BatchedTree
    from dpgm.stats.posterior import posterior_map

    if not isinstance(model, BayesianNetwork) or not model.is_parameterized:
        raise TypeError("predict_proba needs a parameterized BayesianNetwork")
    if variable not in model.variables:
        raise ValueError(f"{variable!r} is not a variable of the model; variables: {list(model.variables)}")
    states = _data_states(data)
    observed = [v for v in model.variables if v in states and v != variable]
    _check_variables(observed, model.states, states)
    tree = BatchedTree(model.variables, {v: model.cardinality(v) for v in model.variables}, _bn_factors(model))
    values = posterior_map(data, tree, observed, variable, model.cardinality(variable))
    labels = list(model.states[variable])
    result = xr.DataArray(values, dims=("row", variable), coords={variable: labels},
                          name=name or f"{variable}_proba")
    if write:
        store = data.encoding.get("dpgm_store")
        if store is None:
            raise ValueError("write=True needs a dataset opened with dpgm.open_dataset (it writes into that store)")
        new = xr.Dataset({result.name: result.drop_vars(variable).rename({variable: f"{variable}_state"})})
        new[result.name].attrs.update({"posterior_of": variable, "labels": labels})
        from dpgm.cluster import compute

        compute(add_variables(new, store.path, overwrite=True, storage_options=store.storage_options,
                              compute=False), client=client)
    return result


_MARKOV_METHODS = ("ipf", "closed_form", "gis", "lbfgs", "newton")


def _fit_markov_network(model: MarkovNetwork, data, method, *, tol, max_iter, client, progress, callback,
                        structural_zeros=None, l1: float = 0.0, l2: float = 0.0, goodness_of_fit=True) -> FitResult:
    from dpgm.fit.decomposable import decomposable_mle
    from dpgm.fit.tree_ipf import tree_ipf

    if method not in _MARKOV_METHODS:
        raise ValueError(f"unknown method {method!r} for a MarkovNetwork; expected one of {_MARKOV_METHODS}")
    states = _data_states(data)
    _check_variables(model.variables, model.states, states)
    scopes = model.scopes
    hierarchical = LogLinearModel.from_margins(scopes, {v: model.states[v] for v in model.variables})
    if method in ("gis", "lbfgs", "newton"):
        result = _fit_log_linear(hierarchical, data, method, tol=tol, max_iter=max_iter, client=client,
                                 progress=progress, callback=callback, l1=l1, l2=l2,
                                 structural_zeros=structural_zeros, goodness_of_fit=goodness_of_fit)
        log_potentials = {k: v.values for k, v in result.model.log_potentials().items()}
        result.model = model.with_log_potentials({s: _align(log_potentials, s) for s in scopes})
        return result
    saturated = _saturated_scope(model.variables, states) if goodness_of_fit else None
    tables = _complete_counts(data, list(scopes) + ([saturated] if saturated else []), client, progress)
    n = float(tables.n_rows)
    counts = {s: np.asarray(tables[s].values, dtype=float) for s in scopes}
    with np.errstate(divide="ignore"):
        init = {s: np.log(model.potentials[s].values) for s in scopes}
    offsets = _structural_zero_offsets(structural_zeros, model.variables, states)
    for mask_scope, table in offsets.items():
        holder = next((s for s in scopes if set(mask_scope) <= set(s)), None)
        if holder is None:
            raise ValueError(f"structural zeros on {mask_scope!r} must lie inside one of the model's scopes")
        init[holder] = init[holder] + _expand_to(table, mask_scope, holder)
    if method == "closed_form":
        if offsets or any(np.isneginf(t).any() for t in init.values()):
            raise ValueError("closed_form does not take structural zeros; use method='ipf'")
        log_potentials = decomposable_mle(scopes, counts)
        history, converged, n_iter = [], True, 0
    else:
        state = tree_ipf(counts, model.variables, {v: model.cardinality(v) for v in model.variables}, init=init,
                         max_iter=max_iter, tol=tol, callback=callback)
        log_potentials, history, converged, n_iter = (state.log_potentials, state.history, state.converged,
                                                      state.n_iter)
    fitted = model.with_log_potentials(log_potentials)
    features, order = hierarchical.feature_set()
    engine = _engine(model.variables, states) if saturated else TreeEngine(
        model.variables, {v: len(states[v]) for v in model.variables})
    _, log_z = engine({s: log_potentials[s] for s in scopes}, [])
    from dpgm.fit.tables import loglik_from_potentials

    result = FitResult(model=fitted, method=method, loglik=loglik_from_potentials(counts, log_potentials, log_z, n),
                       converged=converged, n_iter=n_iter, n_rows=n, n_params=hierarchical.n_free_parameters(),
                       history=history)
    if saturated:
        _goodness_of_fit(result, features, engine, {s: log_potentials[s] for s in scopes}, offsets,
                         tables[saturated], saturated)
    if not converged:
        import warnings

        from dpgm.errors import ConvergenceWarning

        warnings.warn(f"ipf stopped after {n_iter} sweeps without meeting tol", ConvergenceWarning, stacklevel=3)
    return result


def _align(log_potentials: dict, scope: tuple[str, ...]) -> np.ndarray:
    """The log table of ``scope`` from tables keyed by the same variables in canonical order."""
    key = next(k for k in log_potentials if set(k) == set(scope))
    return np.transpose(log_potentials[key], [key.index(v) for v in scope])


def _expand_to(table: np.ndarray, scope: tuple[str, ...], target: tuple[str, ...]) -> np.ndarray:
    from dpgm.fit.tables import expand

    return expand(table, scope, target)


def _undirected_factors(model) -> list[tuple[tuple[str, ...], np.ndarray]]:
    if isinstance(model, MarkovNetwork):
        return [(s, model.potentials[s].values) for s in model.scopes]
    return [(s, np.exp(t.values)) for s, t in model.log_potentials().items()]


def _fit_undirected_em(model, data, *, tol, max_iter, client, progress, callback, m_step: str | None = None,
                       inner_iter: int = 5, n_init: int = 1, random_state=None, init=None, checkpoint=None,
                       resume=None, persist: bool = False) -> FitResult:
    """EM for Markov networks (IPF M step) and log-linear models (GIS M step), warm-started inner loops."""
    from dpgm.cluster import current_client, iteration_span
    from dpgm.fit.em import em
    from dpgm.fit.tree_ipf import tree_ipf
    from dpgm.inference.evidence import BatchedTree
    from dpgm.stats.expected import expected_counts

    markov = isinstance(model, MarkovNetwork)
    m_step = m_step or ("ipf" if markov else "gis")
    if (markov and m_step != "ipf") or (not markov and m_step != "gis"):
        raise ValueError(f"m_step={m_step!r}: Markov networks use 'ipf', log-linear models 'gis'")
    states = _data_states(data)
    observed = [v for v in model.variables if v in states]
    if not observed:
        raise DataError(f"none of the model's variables are in the data; data variables: {sorted(states)}")
    _check_variables(observed, model.states, states)
    cards = {v: len(model.states[v]) for v in model.variables}
    structure = BatchedTree(model.variables, cards, _undirected_factors(model)).structure
    client = client or current_client()
    data = _maybe_persist(data, observed, persist, client)
    empty = np.zeros((1, 0), dtype=np.int64)

    def estep(models, iteration):
        trees = [BatchedTree(model.variables, cards, _undirected_factors(m), structure) for m in models]
        with iteration_span("dpgm-em", iteration):
            results = expected_counts(data, trees, observed, client=client, progress=progress)
        out = []
        for tree, (loglik, clique_counts) in zip(trees, results, strict=True):
            log_z, _ = tree.expected_counts(empty, [])
            n = float(next(iter(clique_counts.values())).sum())
            out.append((loglik - n * log_z, (tree, clique_counts, n)))
        return out

    def mstep(current, statistics):
        tree, clique_counts, n = statistics
        if markov:
            scopes = current.scopes
            targets = tree.family_counts(clique_counts, scopes)
            with np.errstate(divide="ignore"):
                start = {s: np.log(current.potentials[s].values) for s in scopes}
            state = tree_ipf(targets, current.variables, cards, init=start, max_iter=inner_iter, tol=0.0)
            return current.with_log_potentials(state.log_potentials)
        features, order = current.feature_set()
        targets = tree.family_counts(clique_counts, features.scopes)
        empirical = features.expectations(targets) / n
        engine = _engine(current.variables, {v: current.states[v] for v in current.variables})
        theta, *_ = gis(features, empirical, engine, theta=current.theta(order), max_iter=inner_iter, tol=0.0)
        return current.with_weights(order, theta)

    starts = _initial_undirected(model, n_init, random_state, init)
    state = em(starts, estep, mstep, max_iter=max_iter, tol=tol, callback=_event_callback(client, callback),
               checkpoint=checkpoint, resume=resume)
    n_params = (LogLinearModel.from_margins(model.scopes, model.states).n_free_parameters() if markov
                else model.n_free_parameters())
    result = _em_result(state, "em", n_params=n_params)
    result.info["latent"] = [v for v in model.variables if v not in states]
    result.info["m_step"] = m_step
    return result


def _initial_undirected(model, n_init: int, random_state, init):
    if init == "model":
        if n_init != 1:
            raise ValueError("init='model' starts from the given parameters: n_init must be 1")
        return [model]
    rng = np.random.default_rng(random_state)
    starts = []
    for _ in range(n_init):
        if isinstance(model, MarkovNetwork):
            starts.append(model.with_log_potentials(
                {s: np.log(model.potentials[s].values) + rng.normal(0, 1, model.potentials[s].shape)
                 for s in model.scopes}))
        else:
            features, order = model.feature_set()
            starts.append(model.with_weights(order, model.theta(order) + rng.normal(0, 1, len(order))))
    return starts

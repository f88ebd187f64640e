"""Validation and statistics shared by every fit: data states, model/data agreement, complete counts,
options, checkpoints, structural zeros and the tabular nodes of a hybrid network."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import xarray as xr

from dpgm.algorithms.goodness import MAX_SATURATED_CELLS
from dpgm.data.schema import Schema
from dpgm.errors import DataError
from dpgm.models.hybrid import HybridNetwork
from dpgm.models.zeros import check_structural_zeros, merge_structural_zeros
from dpgm.stats.counts import Counts, count_arrays


def data_states(data: xr.Dataset | xr.DataArray) -> dict[str, tuple[str, ...]]:
    if isinstance(data, xr.DataArray):
        return {str(d): tuple(str(s) for s in data.coords[d].values) for d in data.dims if d in data.coords}
    return Schema.from_dataset(data).states


def check_variables(variables: Sequence[str], model_states: dict, data_states: dict, *, data=None,
                    kind: str = "model") -> None:
    """Every variable is a categorical variable of the data, with the model's labels (in any order).

    Raises
    ------
    DataError
        A variable continuous in ``data`` (saying so, for a ``kind`` that needs categorical
        codes), absent from the data, or whose labels differ from the model's as a set
        (naming both lists and what each side lacks). The order of the labels may differ:
        :mod:`dpgm.api.labels` permutes the model into the data's.
    """
    absent = [v for v in variables if v not in data_states]
    continuous = [v for v in absent if isinstance(data, xr.Dataset) and v in data.data_vars]
    if continuous:
        v = continuous[0]
        raise DataError(
            f"is continuous in the data ({data[v].dtype}); a {kind} needs categorical codes: convert it with "
            f"--categorical {v} (dpgm convert), or give dpgm.from_pandas a categorical column "
            f"(df[{v!r}].astype('category'))", variable=v,
        )
    if absent:
        raise DataError(
            f"model variables {absent} are not in the data; latent variables need method='em'; "
            f"data variables: {sorted(data_states)}"
        )
    for v in variables:
        if v in model_states:
            check_labels(v, model_states[v], data_states[v])


def check_labels(variable: str, model_labels: Sequence[str], data_labels: Sequence[str]) -> None:
    """The model's and the data's labels of one variable are the same set (their order may differ)."""
    model_labels, data_labels = [str(s) for s in model_labels], [str(s) for s in data_labels]
    if sorted(model_labels) == sorted(data_labels) and len(set(model_labels)) == len(model_labels):
        return
    lacks = [f"the model lacks {[s for s in data_labels if s not in model_labels]}"] * any(
        s not in model_labels for s in data_labels)
    lacks += [f"the data lacks {[s for s in model_labels if s not in data_labels]}"] * any(
        s not in data_labels for s in model_labels)
    raise DataError(f"the data's states {data_labels} and the model's {model_labels} are not the same labels "
                    f"(matched by name, in any order): {'; '.join(lacks) or 'a label repeats'}", variable=variable)


def complete_counts(data, scopes, client, progress, labelled: bool = True) -> Counts:
    tables = count_arrays(data, scopes, client=client, progress=progress, labelled=labelled)
    incomplete = {s: m for s, m in tables.n_missing.items() if m}
    if incomplete:
        scope, missing = next(iter(incomplete.items()))
        raise DataError(
            f"{missing:,} rows have missing values in {scope!r} ({len(incomplete)} scopes affected); "
            "complete-data methods refuse them rather than drop them: fit with method='em'"
        )
    return tables


# the counting pass holds a table with one extra 'missing' state per variable
MAX_SATURATED_COUNTED_CELLS = 1 << 24


def saturated_scope(variables: Sequence[str], states: dict) -> tuple[str, ...] | None:
    """All variables, when their table is small enough to count for G^2 and X^2 (else None).

    Two bounds: the table itself (``MAX_SATURATED_CELLS``) and the table the counting
    kernel holds per chunk, with a 'missing' state on every axis (20 binary variables:
    2**20 cells but 3**20 counted, 26 GiB; refused here rather than allocated).
    """
    cells = math.prod(len(states[v]) for v in variables)
    counted = math.prod(len(states[v]) + 1 for v in variables)
    small = cells <= MAX_SATURATED_CELLS and counted <= MAX_SATURATED_COUNTED_CELLS
    return tuple(variables) if small else None


# ---------------------------------------------------------------- options of dpgm.fit, by (model kind, method)


class _Constraint:
    """One option's rule: ``check(name, value)`` raises ConfigError / ConfigTypeError naming the option."""

    description = "?"

    def check(self, name: str, value) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class Interval(_Constraint):
    """A real (``kind=float``) or integer number in ``[low, high]`` (``low_open``: ``low`` excluded)."""

    def __init__(self, kind: type, low: float | None = None, high: float | None = None, *, low_open: bool = False):
        self.kind, self.low, self.high, self.low_open = kind, low, high, low_open
        self.noun = "an integer" if kind is int else "a number"
        if kind is float and low == 0 and high is None:
            self.description = "finite and positive" if low_open else "a nonnegative number"
        else:
            bounds = [f"{'>' if low_open else '>='} {low:g}"] if low is not None else []
            bounds += [f"<= {high:g}"] if high is not None else []
            self.description = " ".join([self.noun, " and ".join(bounds)]).strip()

    def check(self, name: str, value) -> None:
        import numbers

        from dpgm.errors import ConfigError, ConfigTypeError

        wanted = numbers.Integral if self.kind is int else numbers.Real
        if isinstance(value, bool) or not isinstance(value, wanted):
            raise ConfigTypeError(f"{name} must be {self.noun}, got {value!r}")
        below = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        above = self.high is not None and value > self.high
        if not math.isfinite(value) or below or above:
            raise ConfigError(f"{name} must be {self.description}, got {value!r}")


class OneOf(_Constraint):
    """One of a few values (strings, or None)."""

    def __init__(self, *values):
        self.values = values
        self.description = f"one of {list(values)!r}"

    def check(self, name: str, value) -> None:
        from dpgm.errors import ConfigError, ConfigTypeError

        if not isinstance(value, str | type(None)):
            raise ConfigTypeError(f"{name} must be {self.description}, got {value!r}")
        if value not in self.values:
            raise ConfigError(f"{name} must be {self.description}, got {value!r}")


class InstanceOf(_Constraint):
    """An instance of the given types (``bool`` only if listed)."""

    def __init__(self, *types: type, description: str):
        self.types, self.description = types, description

    def check(self, name: str, value) -> None:
        from dpgm.errors import ConfigTypeError

        if not isinstance(value, self.types) or (isinstance(value, bool) and bool not in self.types):
            raise ConfigTypeError(f"{name} must be {self.description}, got {value!r}")


class RandomState(_Constraint):
    description = "None, an integer >= 0 or a numpy Generator"

    def check(self, name: str, value) -> None:
        import numpy as np

        if value is None or isinstance(value, np.random.Generator | np.random.SeedSequence):
            return
        Interval(int, 0).check(name, value)


def _parameter_constraints() -> dict[tuple[str, str], dict[str, _Constraint]]:
    """The one table of :func:`dpgm.fit`'s options: ``(model kind, method) -> {option: constraint}``."""
    import os

    stop = {"tol": Interval(float, 0.0), "max_iter": Interval(int, 1)}
    from fsspec.mapping import FSMap

    folder = InstanceOf(str, os.PathLike, FSMap, type(None),
                        description="a folder path, an fsspec URL or fsspec.get_mapper(url, ...), or None")
    flag = InstanceOf(bool, description="True or False")
    em = stop | {"n_init": Interval(int, 1), "random_state": RandomState(), "init": OneOf(None, "random", "model"),
                 "checkpoint": folder, "resume": folder, "persist": flag,
                 "accelerate": OneOf(None, "squarem"), "incremental": flag, "prune_restarts": flag}
    goodness = {"goodness_of_fit": flag}
    missing = {"missing": OneOf("refuse", "listwise")}
    zeros = {"structural_zeros": _Anything("a boolean DataArray of cells fixed at zero, or None")}
    prior = {"prior": OneOf(None, "BDeu", "K2", "dirichlet"),
             "equivalent_sample_size": Interval(float, 0.0, low_open=True),
             "pseudo_counts": InstanceOf(dict, type(None),
                                         description="a mapping variable -> table of pseudo-counts, or None")}
    table = {
        ("BayesianNetwork", "mle"): prior | goodness,
        ("BayesianNetwork", "bayes"): prior | goodness,
        ("BayesianNetwork", "em"): em | prior,
        ("MarkovNetwork", "ipf"): stop | zeros | goodness | {"loglik_tol": Interval(float, 0.0)},
        ("MarkovNetwork", "closed_form"): goodness,
        ("LogLinearModel", "lbfgs"): stop | zeros | goodness | {"l1": Interval(float, 0.0), "l2": Interval(float, 0.0)},
        ("LogLinearModel", "newton"): stop | zeros | goodness | {"l2": Interval(float, 0.0)},
        ("LogLinearModel", "gis"): stop | zeros | goodness,
        ("HiddenMarkovModel", "em"): em,
        ("GaussianGraphicalModel", "closed_form"): missing,
        ("GaussianGraphicalModel", "ipf"): stop | missing,
        ("GaussianGraphicalModel", "glasso"): stop | missing | {"alpha": Interval(float, 0.0)},
        ("LinearGaussianNetwork", "mle"): missing,
        ("GLMConditional", "irls"): stop | missing,
        ("HybridNetwork", "mle"): stop | missing,
        ("HybridNetwork", "em"): {k: v for k, v in em.items() if k != "init"},
        ("GaussianMixture", "em"): em | {"init": _Anything("None, 'k-means++', 'random', 'model' or a dict of "
                                                            "weights, means and covariances or precisions"),
                                         "reg_covar": Interval(float, 0.0)},
    }
    for method in ("lbfgs", "newton", "gis"):
        table[("MarkovNetwork", method)] = table[("LogLinearModel", method)]
    for kind, m_step in (("MarkovNetwork", "ipf"), ("LogLinearModel", "gis")):
        table[(kind, "em")] = em | zeros | {"m_step": OneOf(None, m_step), "inner_iter": Interval(int, 1)}
    return table


class _Anything(_Constraint):
    """Checked by the method itself (e.g. structural zeros, against the model's variables and states)."""

    def __init__(self, description: str):
        self.description = description

    def check(self, name: str, value) -> None:
        return


DEFAULT_METHODS = {"BayesianNetwork": "mle", "MarkovNetwork": "ipf", "LogLinearModel": "lbfgs",
                   "HiddenMarkovModel": "em", "GaussianGraphicalModel": "ipf",
                   "LinearGaussianNetwork": "mle", "GaussianMixture": "em", "GLMConditional": "irls",
                   "HybridNetwork": "mle"}

# options that do not change what a fit converges to: a checkpoint may be resumed with other values
RESUMABLE_OPTIONS = ("tol", "max_iter", "loglik_tol", "checkpoint", "resume", "persist", "accelerate", "incremental",
                     "prune_restarts")
# options every call of dpgm.fit passes (its keyword defaults): checked for their values, whatever the method
ALWAYS_PASSED = ("tol", "max_iter")


def model_kind(model) -> str:
    """The name under which :data:`DEFAULT_METHODS` and the option table know ``model``'s class."""
    for kind in type(model).__mro__:
        if kind.__name__ in DEFAULT_METHODS:
            return kind.__name__
    from dpgm.errors import ConfigTypeError

    raise ConfigTypeError(f"cannot fit a {type(model).__name__}; expected a BayesianNetwork, MarkovNetwork, "
                          "LogLinearModel, HiddenMarkovModel, GaussianGraphicalModel or LinearGaussianNetwork")


def methods_of(kind: str) -> list[str]:
    """The methods a model kind is fitted by."""
    return [m for k, m in _parameter_constraints() if k == kind]


def options_of(kind: str, method: str) -> list[str]:
    """The options of one method of one model kind (``[]`` for an unknown pair)."""
    return sorted(_parameter_constraints().get((kind, method), {}))


def check_fit_options(model, method: str | None, options: dict, *, given: Iterable[str] | None = None) -> str:
    """Check ``dpgm.fit``'s method and options against the table for the model's kind, before any pass.

    Parameters
    ----------
    model
        The model to fit (its class selects the table).
    method
        The method, or None for the kind's default.
    options
        Every option, ``tol`` and ``max_iter`` included (their values are checked
        whatever the method).
    given
        The names the caller set explicitly (default: every name in ``options`` but
        ``tol`` and ``max_iter``): each must be an option of the method.

    Returns
    -------
    str
        The method (the kind's default for ``None``).

    Raises
    ------
    ConfigError
        An unknown method, an option that does not apply to the method, or a value
        out of range, naming the option and listing the valid ones.
    ConfigTypeError
        A value of the wrong type, naming the option.
    """
    from dpgm.errors import ConfigError, ConfigTypeError

    kind = model_kind(model)
    if method is not None and not isinstance(method, str):
        raise ConfigTypeError(f"method must be a string, got {method!r}")
    method = method or DEFAULT_METHODS[kind]
    table = _parameter_constraints()
    if (kind, method) not in table:
        raise ConfigError(f"unknown method {method!r} for a {kind}; expected one of {methods_of(kind)}")
    constraints = table[(kind, method)]
    given = [k for k in options if k not in ALWAYS_PASSED] if given is None else list(given)
    for name in given:
        if name not in constraints:
            elsewhere = [m for (k, m), c in table.items() if k == kind and name in c]
            if elsewhere:
                others = f" (or {', '.join(map(repr, elsewhere[1:]))})" if len(elsewhere) > 1 else ""
                where = f"{name} applies to method={elsewhere[0]!r}{others}, not {method!r}"
            else:
                where = f"unknown option {name!r} for method {method!r}"
            raise ConfigError(f"{where} of a {kind}; the options of {method!r}: {sorted(constraints)}")
    every = {**{k: c for (_, _), t in table.items() for k, c in t.items() if k in ALWAYS_PASSED}, **constraints}
    for name, value in options.items():
        if name in every:
            every[name].check(name, value)
    if options.get("init") == "model" and options.get("n_init", 1) != 1:
        raise ConfigError(f"n_init must be 1 with init='model' (one start: the given parameters), "
                          f"got {options['n_init']!r}")
    return method


# ---------------------------------------------------------------- checkpoint fingerprints


def _jsonable(value):
    """A JSON-able rendering of an option value (arrays and labelled tables by their contents)."""
    import numpy as np

    if isinstance(value, xr.DataArray):
        return {"dims": list(map(str, value.dims)), "values": np.asarray(value.values).tolist()}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def model_fingerprint(model, method: str, options: dict) -> dict:
    """What identifies a fit apart from its data: model kind, variables, states, structure, method, options.

    The stopping rule and where checkpoints go (:data:`RESUMABLE_OPTIONS`) are left
    out: a resumed fit may run longer or to a tighter tolerance.
    """
    kind = model_kind(model)
    if kind == "BayesianNetwork":
        structure = [list(e) for e in model.edges]
    elif kind == "HiddenMarkovModel":
        structure = {"hidden": model.hidden, "variable": model.variable, "n_states": model.n_states}
    elif kind == "GaussianMixture":
        structure = {"n_components": model.n_components, "covariance_type": model.covariance_type}
    elif kind == "HybridNetwork":
        structure = {"edges": [list(e) for e in model.edges], "families": model.families, "l2": model.l2}
    else:
        structure = [list(s) for s in model.scopes]
    states = getattr(model, "states", {}) or {}
    return {
        "kind": kind,
        "method": method,
        "variables": list(getattr(model, "variables", states)),
        "states": {str(v): list(map(str, s)) for v, s in states.items()},
        "structure": structure,
        "options": {k: _jsonable(v) for k, v in sorted(options.items()) if k not in RESUMABLE_OPTIONS},
    }


def data_fingerprint(data) -> dict:
    """The data part of a checkpoint's fingerprint (a store's path, rows, chunking, schema; a table's contents)."""
    import hashlib

    import numpy as np

    if isinstance(data, xr.DataArray):
        values = np.ascontiguousarray(data.values)
        return {"table": {"dims": list(map(str, data.dims)), "shape": list(values.shape),
                          "sha256": hashlib.sha256(values.tobytes()).hexdigest()}}
    from dpgm.data.integrity import dataset_fingerprint

    return dataset_fingerprint(data)


def check_checkpoint(model, data, method: str, options: dict, extra: dict | None = None) -> None:
    """Refuse to resume a checkpoint of other data or another model; record the fingerprint of a new one.

    With ``resume=`` the checkpoint's fingerprint must equal this fit's (data, model
    and the parts in ``extra``, e.g. the CLI's specification); with ``checkpoint=``
    the fingerprint is recorded for the iterations to come. Cheap: metadata only.

    Raises
    ------
    CheckpointMismatch
        The checkpoint was written for other data, another model or other options.
    FileNotFoundError
        ``resume=`` names a folder without a complete checkpoint.
    """
    import warnings

    from dpgm.algorithms.checkpoint import check_fingerprint, set_fingerprint
    from dpgm.errors import DpgmWarning

    checkpoint, resume = options.get("checkpoint"), options.get("resume")
    if checkpoint is None and resume is None:
        return
    # compared in this order: the first difference named is the most telling one
    fingerprint = {"data": data_fingerprint(data), **(extra or {}), "model": model_fingerprint(model, method, options)}
    if resume is not None and not check_fingerprint(resume, fingerprint):
        warnings.warn(f"the checkpoint {str(resume)!r} has no fingerprint (written by an earlier dpgm): cannot "
                      "check it was written for this data and model", DpgmWarning, stacklevel=3)
    if checkpoint is not None:
        set_fingerprint(checkpoint, fingerprint)


def structural_zeros_for(model, structural_zeros: xr.DataArray | None, states: dict) -> xr.DataArray | None:
    """The model's own structural zeros joined with those given to ``fit`` (checked against the data's states)."""
    given = check_structural_zeros(structural_zeros, model.variables, states)
    return merge_structural_zeros(model.structural_zeros, given, model.variables)


def check_zero_cells_empty(zeros: xr.DataArray | None, tables) -> None:
    """Refuse data with rows in cells the model fixes at zero: such a model cannot have produced them."""
    if zeros is None:
        return
    scope = tuple(map(str, zeros.dims))
    observed = np.asarray(tables[scope], dtype=float)
    inside = observed[zeros.values]
    if inside.sum() > 0:
        cell = np.argwhere(zeros.values & (observed > 0))[0]
        labels = {v: str(zeros.coords[v].values[i]) for v, i in zip(scope, cell, strict=True)}
        raise DataError(
            f"{inside.sum():g} rows fall in cells that structural_zeros fixes at zero (first: {labels}); "
            "a structural zero must have no observations"
        )


def counts_with_zeros(data, scopes: list, zeros: xr.DataArray | None, client, progress):
    """Complete-data counts (plain arrays) of ``scopes`` and, in the same pass, of the zeros' scope (checked
    empty)."""
    extra = [tuple(map(str, zeros.dims))] if zeros is not None else []
    tables = complete_counts(data, list(dict.fromkeys([*scopes, *extra])), client, progress, labelled=False)
    check_zero_cells_empty(zeros, tables)
    return tables


def check_tabular(model: HybridNetwork, variable: str, schema: Schema) -> None:
    """A tabular node is a categorical variable with categorical parents."""
    if not schema[variable].categorical:
        raise DataError("is continuous: a tabular node must be categorical; give it a GLM family "
                        f"(families={{{variable!r}: 'gaussian'}} or 'poisson')", variable=variable)
    continuous = [p for p in model.parents(variable) if p in schema and not schema[p].categorical]
    if continuous:
        raise DataError(f"has continuous parents {continuous}: a table cannot condition on them; give it a logit "
                        f"family (families={{{variable!r}: 'bernoulli'}} or 'categorical')", variable=variable)


# ---------------------------------------------------------------- sizes of hidden and latent variables, before any pass

# one restart's parameters and expected statistics (every restart's are held together): 1 GiB of float64
MAX_PARAMETER_CELLS = 1 << 27
# an E step's arrays for one chunk (rows x states x restarts: posteriors, forward-backward messages): 2 GiB
MAX_CHUNK_CELLS = 1 << 28


def _too_large(what: str, cells: int, limit: int, advice: str) -> None:
    from dpgm.errors import TableTooLarge
    from dpgm.stats.counts import _bytes

    if cells > limit:
        raise TableTooLarge(f"{what}: {cells:,} cells ({_bytes(8 * cells)} of float64), over the limit of "
                            f"{limit:,} cells; {advice}")


def check_hidden_states(n_states: int, n_symbols: int, *, hidden: str = "state", n_init: int = 1) -> None:
    """An HMM's parameters (start, transition ``n x n``, emission ``n x m``) fit in memory, before they exist."""
    cells = n_init * (n_states + n_states * n_states + n_states * n_symbols)
    _too_large(f"the hidden variable {hidden!r} has {n_states:,} states (n_states): its transition and emission tables "
               f"({n_init} restart(s)) need", cells, MAX_PARAMETER_CELLS, "use fewer hidden states")


def check_latent_states(variable: str, n_states: int, cells_per_state: int, *, n_init: int = 1,
                        kind: str = "latent variable") -> None:
    """A latent variable's tables (``cells_per_state`` cells for each of its states) fit in memory."""
    _too_large(f"the {kind} {variable!r} has {n_states:,} states: its tables ({n_init} restart(s)) need",
               n_init * n_states * cells_per_state, MAX_PARAMETER_CELLS, f"give {variable!r} fewer states")


def _chunk_rows(data) -> int:
    """Rows of the largest chunk a pass hands one task (a table's cells become rows for EM)."""
    if isinstance(data, xr.DataArray):
        return int(data.size)
    chunks = data.chunks.get("row") if data.chunks else None
    return int(max(chunks)) if chunks else int(data.sizes.get("row", 0))


def check_sizes(model, data, method: str | None, options: dict) -> None:
    """Refuse, before any pass or allocation of the fit, hidden and latent variables whose tables or per-chunk
    E-step arrays cannot be held: an HMM's hidden states, the latent variables of a Bayesian network (latent
    class models), a hybrid network's latent root, a Gaussian mixture's components x dimensions.

    Raises
    ------
    TableTooLarge
        (a :class:`~dpgm.errors.ConfigError`, CLI exit 78) naming the variable, its states and the cells.
    """
    from dpgm.models.bayesian_network import BayesianNetwork
    from dpgm.models.hmm import HiddenMarkovModel
    from dpgm.models.mixture import GaussianMixture

    restarts = int(options.get("n_init", 1)) if isinstance(options.get("n_init", 1), int) else 1
    rows = _chunk_rows(data)
    if isinstance(model, HiddenMarkovModel):
        n, m = model.n_states, int(model.emission.shape[1])
        check_hidden_states(n, m, hidden=model.hidden, n_init=restarts)
        steps = rows * int(data.sizes.get("time", 1)) if isinstance(data, xr.Dataset) else rows
        _too_large(f"the hidden variable {model.hidden!r} has {n:,} states: forward-backward over a chunk of "
                   f"{rows:,} sequences ({restarts} restart(s)) needs", restarts * steps * n, MAX_CHUNK_CELLS,
                   "use fewer hidden states, or smaller chunks")
    elif isinstance(model, GaussianMixture):
        k, p = model.n_components, len(model.variables)
        per = 1 + p + (p * p if model.covariance_type in ("full", "tied") else p)
        _too_large(f"a Gaussian mixture of {k:,} components over {p} variables ({restarts} restart(s)) needs",
                   restarts * k * per, MAX_PARAMETER_CELLS, "use fewer components")
        _too_large(f"a Gaussian mixture of {k:,} components: the responsibilities of a chunk of {rows:,} rows "
                   f"({restarts} restart(s)) need", restarts * rows * k, MAX_CHUNK_CELLS,
                   "use fewer components, or smaller chunks")
    elif isinstance(model, BayesianNetwork | HybridNetwork) and method == "em":
        known = data_states(data)
        observed = set(data.dims) if isinstance(data, xr.DataArray) else set(map(str, data.variables))
        states = {v: len(s) for v, s in known.items()} | {v: len(s) for v, s in (model.states or {}).items()}
        glm = model.families if isinstance(model, HybridNetwork) else {}
        latent = [v for v in model.variables if v not in observed and v in states]
        for v in sorted(latent, key=lambda v: -states[v]):
            widths = [math.prod(states.get(u, 1) for u in (c, *model.parents(c))) for c in model.variables
                      if (c == v or v in model.parents(c)) and c not in glm]
            terms = [1 + sum(states[u] - 1 if u in known else 1 for u in model.parents(c) if u != v)
                     for c in glm if v in model.parents(c)]  # a GLM child's X'WX for each latent state
            per_state = sum(widths) // states[v] + sum(p * p + p for p in terms)
            check_latent_states(v, states[v], per_state, n_init=restarts)
            _too_large(f"the latent variable {v!r} has {states[v]:,} states: the E step of a chunk of {rows:,} "
                       f"rows ({restarts} restart(s)) needs", restarts * rows * max([states[v], *widths]),
                       MAX_CHUNK_CELLS, f"give {v!r} fewer states, or use smaller chunks")

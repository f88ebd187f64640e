"""Validation and statistics shared by every fit: data states, model/data agreement, complete counts,
structural zeros, the tabular nodes of a hybrid network and the sizes of hidden and latent variables
(options and checkpoints: :mod:`dpgm.api.options`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import xarray as xr

from dpgm.algorithms.goodness import MAX_SATURATED_CELLS
from dpgm.data.schema import Schema
from dpgm.errors import DataError
from dpgm.models.hybrid import HybridNetwork
from dpgm.models.zeros import check_structural_zeros, merge_structural_zeros
from dpgm.stats.counts import Counts, count_arrays
from dpgm.stats.source import DataSource


def data_states(data: xr.Dataset | xr.DataArray) -> dict[str, tuple[str, ...]]:
    """State labels of every categorical variable of a dataset or table (a fit reads its source's instead)."""
    return DataSource.of(data).states


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


def check_continuous(variables: Sequence[str], schema: Schema, kind: str) -> None:
    """Every variable is a continuous variable of the data (a :class:`DataError` naming the first that is not)."""
    for v in variables:
        if v not in schema:
            raise DataError(f"is not in the data; continuous variables: {schema.continuous}", variable=v)
        if schema[v].categorical:
            raise DataError(f"is categorical; a {kind} needs continuous variables: {schema.continuous}",
                            variable=v)


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


def complete_counts(source: DataSource, scopes, labelled: bool = True) -> Counts:
    """Counts of ``scopes`` in one pass over ``source``, refusing rows with missing values."""
    tables = count_arrays(source, scopes, labelled=labelled)
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


class Anything(_Constraint):
    """Checked by the method itself (e.g. structural zeros, against the model's variables and states)."""

    def __init__(self, description: str):
        self.description = description

    def check(self, name: str, value) -> None:
        return


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


def counts_with_zeros(source: DataSource, scopes: list, zeros: xr.DataArray | None):
    """Complete-data counts (plain arrays) of ``scopes`` and, in the same pass, of the zeros' scope (checked
    empty)."""
    extra = [tuple(map(str, zeros.dims))] if zeros is not None else []
    tables = complete_counts(source, list(dict.fromkeys([*scopes, *extra])), labelled=False)
    check_zero_cells_empty(zeros, tables)
    return tables


def tabular_families(model: HybridNetwork, schema: Schema, latent: str | None = None) -> list[tuple[str, ...]]:
    """``(node, *parents)`` of every tabular node of a hybrid network but ``latent``, each checked
    (:func:`check_tabular`)."""
    families = []
    for v in model.variables:
        if v in model.families or v == latent:
            continue
        check_tabular(model, v, schema)
        families.append((v, *model.parents(v)))
    return families


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


def hidden_state_sizes(model, source, restarts: int, rows: int) -> None:
    """An HMM's tables and one chunk's forward-backward arrays fit in memory (see :func:`latent_sizes`)."""
    data = source.data
    n = model.n_states
    m = -(-(model.n_free_parameters() - n * n + 1) // n)  # the emission parameters per state
    check_hidden_states(n, m, hidden=model.hidden, n_init=restarts)
    steps = rows * int(data.sizes.get("time", 1)) if isinstance(data, xr.Dataset) else rows
    _too_large(f"the hidden variable {model.hidden!r} has {n:,} states: forward-backward over a chunk of "
               f"{rows:,} sequences ({restarts} restart(s)) needs", restarts * steps * n, MAX_CHUNK_CELLS,
               "use fewer hidden states, or smaller chunks")


def component_sizes(model, source, restarts: int, rows: int) -> None:
    """A Gaussian mixture's parameters and one chunk's responsibilities fit in memory."""
    k, p = model.n_components, len(model.variables)
    per = 1 + p + (p * p if model.covariance_type in ("full", "tied") else p)
    _too_large(f"a Gaussian mixture of {k:,} components over {p} variables ({restarts} restart(s)) needs",
               restarts * k * per, MAX_PARAMETER_CELLS, "use fewer components")
    _too_large(f"a Gaussian mixture of {k:,} components: the responsibilities of a chunk of {rows:,} rows "
               f"({restarts} restart(s)) need", restarts * rows * k, MAX_CHUNK_CELLS,
               "use fewer components, or smaller chunks")


def latent_sizes(model, source, restarts: int, rows: int) -> None:
    """The tables of a Bayesian or hybrid network's latent variables (absent from ``source``'s data) and one
    chunk's E-step arrays fit in memory.

    Like :func:`hidden_state_sizes` and :func:`component_sizes`, run before any pass or allocation of an EM
    fit (:attr:`dpgm.api.kinds.Method.check_sizes`).

    Raises
    ------
    TableTooLarge
        (a :class:`~dpgm.errors.ConfigError`, CLI exit 78) naming the variable, its states and the cells.
    """
    data, known = source.data, source.states
    observed = set(data.dims) if source.is_table else set(map(str, data.variables))
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

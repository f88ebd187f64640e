"""The dataset schema: which variables a dataset holds, their states, and checks on it.

A dataset is an ``xarray.Dataset`` with dimension ``row`` (and ``time`` for
sequences). A categorical variable holds signed integer codes (int8/int16/int32)
with ``-1`` for missing; its state labels are the attribute ``states`` (a list of
strings, authoritative) mirrored as CF ``flag_values`` / ``flag_meanings``. A
continuous variable is float with NaN for missing. An optional ``weight``
variable holds frequency weights.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import xarray as xr

from dpgm.errors import DataError

__all__ = ["SCHEMA_VERSION", "WEIGHT", "Schema", "Variable", "state_attrs"]

SCHEMA_VERSION = 1
WEIGHT = "weight"
ROW = "row"
_CODE_DTYPES = (np.dtype("int8"), np.dtype("int16"), np.dtype("int32"))


@dataclass(frozen=True)
class Variable:
    """One variable of a dataset.

    Attributes
    ----------
    name
        The variable's name.
    states
        State labels of a categorical variable (code ``i`` is ``states[i]``);
        ``None`` for a continuous one.
    dtype
        Storage dtype.
    """

    name: str
    states: tuple[str, ...] | None
    dtype: np.dtype

    @property
    def categorical(self) -> bool:
        """True for a categorical variable."""
        return self.states is not None

    @property
    def cardinality(self) -> int:
        """Number of states (categorical variables only)."""
        if self.states is None:
            raise DataError("is continuous and has no states", variable=self.name)
        return len(self.states)


def state_attrs(states: Sequence[str], dtype: np.dtype | str = "int8") -> dict:
    """The attributes that label a categorical variable's codes (``states`` and CF flags)."""
    states = [str(s) for s in states]
    return {
        "states": states,
        "flag_values": np.arange(len(states), dtype=np.dtype(dtype)).tolist(),
        "flag_meanings": " ".join(s.replace(" ", "_") for s in states),
    }


def smallest_code_dtype(cardinality: int, name: str) -> np.dtype:
    """int8 up to 127 states, int16 up to 32767; more is refused."""
    if cardinality <= 127:
        return np.dtype("int8")
    if cardinality <= 32767:
        return np.dtype("int16")
    raise DataError(f"has {cardinality} states; at most 32767 are supported", variable=name)


def _read_states(name: str, array: xr.DataArray) -> tuple[str, ...] | None:
    attrs = array.attrs
    if "states" in attrs:
        states = attrs["states"]
        if isinstance(states, str) or not isinstance(states, Iterable):
            raise DataError(f"attribute 'states' must be a list of labels, got {states!r}", variable=name)
        return tuple(str(s) for s in states)
    if "flag_meanings" in attrs:
        meanings = str(attrs["flag_meanings"]).split()
        values = list(np.ravel(attrs.get("flag_values", range(len(meanings)))))
        if [int(v) for v in values] != list(range(len(meanings))):
            raise DataError(
                f"flag_values {values!r} are not the codes 0..{len(meanings) - 1}; "
                "recode the variable to consecutive codes",
                variable=name,
            )
        return tuple(meanings)
    return None


class Schema(Mapping[str, Variable]):
    """Variables of a dataset (name -> :class:`Variable`), read from its attributes.

    Parameters
    ----------
    variables
        The variables, in dataset order.
    weight
        Name of the frequency-weight variable, or ``None``.
    n_rows
        Number of rows.
    """

    def __init__(self, variables: Iterable[Variable], weight: str | None, n_rows: int):
        self._variables = {v.name: v for v in variables}
        self.weight = weight
        self.n_rows = n_rows

    def __getitem__(self, name: str) -> Variable:
        return self._variables[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._variables)

    def __len__(self) -> int:
        return len(self._variables)

    def __repr__(self) -> str:
        parts = [
            f"{v.name}[{len(v.states)}]" if v.states is not None else f"{v.name}:float"
            for v in self._variables.values()
        ]
        weight = f", weight={self.weight!r}" if self.weight else ""
        return f"Schema({self.n_rows} rows: {', '.join(parts)}{weight})"

    @property
    def states(self) -> dict[str, tuple[str, ...]]:
        """State labels of every categorical variable."""
        return {n: v.states for n, v in self._variables.items() if v.states is not None}

    @property
    def categorical(self) -> list[str]:
        """Names of the categorical variables."""
        return [n for n, v in self._variables.items() if v.categorical]

    @property
    def continuous(self) -> list[str]:
        """Names of the continuous variables."""
        return [n for n, v in self._variables.items() if not v.categorical]

    @classmethod
    def from_dataset(cls, ds: xr.Dataset) -> Schema:
        """Read and check the schema of a dataset (metadata only, no pass over the data).

        Raises
        ------
        DataError
            A variable with integer codes but no state labels, labels on a float
            variable, a variable without the ``row`` dimension, or a dask array
            chunked along a dimension other than ``row``.
        """
        if not isinstance(ds, xr.Dataset):
            raise TypeError(f"expected an xarray.Dataset, got {type(ds).__name__}")
        if ROW not in ds.dims:
            raise DataError(f"the dataset has no {ROW!r} dimension; dims: {sorted(map(str, ds.dims))}")
        variables = []
        weight = None
        for name in ds.data_vars:
            array = ds.variables[name]  # a Variable: no copy of the attributes
            name = str(name)
            if not array.dims or array.dims[0] != ROW:
                raise DataError(f"must have {ROW!r} as its first dimension, has {array.dims!r}", variable=name)
            chunks = getattr(array.data, "chunks", None)
            if chunks is not None:
                for dim, dim_chunks in zip(array.dims[1:], chunks[1:], strict=True):
                    if len(dim_chunks) > 1:
                        raise DataError(
                            f"is chunked along {dim!r}; chunk along {ROW!r} only", variable=name
                        )
            if name == WEIGHT:
                if array.dtype.kind not in "fiu":
                    raise DataError(f"weights must be numeric, got dtype {array.dtype}", variable=name)
                weight = name
                continue
            states = _read_states(name, array)
            if array.dtype.kind == "f":
                if states is not None:
                    raise DataError(
                        f"has state labels but dtype {array.dtype}; categorical codes must be "
                        f"one of {[str(d) for d in _CODE_DTYPES]}",
                        variable=name,
                    )
            elif array.dtype in _CODE_DTYPES:
                if states is None:
                    raise DataError(
                        "has integer codes but no state labels (attribute 'states' or "
                        "'flag_meanings'); categorical variables need their labels",
                        variable=name,
                    )
            else:
                raise DataError(
                    f"has dtype {array.dtype}; expected integer codes "
                    f"{[str(d) for d in _CODE_DTYPES]} or float",
                    variable=name,
                )
            variables.append(Variable(name, states, array.dtype))
        return cls(variables, weight, int(ds.sizes[ROW]))

    def check_scopes(self, scopes: Iterable[Sequence[str]]) -> list[tuple[str, ...]]:
        """Normalize scopes to tuples of categorical variables of this schema.

        Raises
        ------
        TypeError
            A scope that is not a sequence of names.
        DataError
            An unknown variable, a continuous one, or a repeated one.
        """
        checked = []
        for scope in scopes:
            if isinstance(scope, str) or not isinstance(scope, Sequence | frozenset | set):
                raise TypeError(f"a scope must be a tuple of variable names, got {scope!r}")
            scope = tuple(scope)
            unknown = [v for v in scope if v not in self._variables]
            if unknown:
                raise DataError(
                    f"scope {scope!r} names variables not in the dataset: {unknown}; "
                    f"known: {sorted(self._variables)}"
                )
            continuous = [v for v in scope if not self._variables[v].categorical]
            if continuous:
                raise DataError(f"scope {scope!r} names continuous variables {continuous}; counts need categorical ones")
            if len(set(scope)) != len(scope):
                raise DataError(f"scope {scope!r} repeats a variable")
            checked.append(scope)
        return checked

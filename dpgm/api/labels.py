"""Labels, not positions: where a model meets data, states are matched by label.

The data's codes number its labels in the data's order (``dpgm convert`` and
``dpgm.from_pandas`` may order the same labels differently); a model states its
own order. Every entry that fits or predicts calls :func:`align` once: it checks
that each variable has the same labels in the model and the data (a
:class:`~dpgm.DataError` naming the variable and what each side lacks otherwise),
permutes the model's tables into the data's order (each kind's
``with_state_order``: a permutation by label, no arithmetic), and returns the
:class:`StateOrder` that hands the fitted model back in the model's own order.
EM's random starts are drawn in the model's order and then permuted, so a seed
gives the same starts, by label, whatever the data's order. A model without
states of its own (a structure) takes the data's order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from dpgm.algorithms.result import FitResult
from dpgm.api.checks import check_variables, data_states
from dpgm.models.state_order import check_same_labels, reorder_array, reorder_table

__all__ = ["StateOrder", "align"]


class StateOrder:
    """The permutation between a model's order of its labels and the data's, for the variables they share.

    Parameters
    ----------
    model_states, data_states
        Labels of each variable in the model's and in the data's order.
    variables
        The variables the model and the data share (others are ignored).
    """

    def __init__(self, model_states: Mapping[str, Sequence[str]], data_states: Mapping[str, Sequence[str]],
                 variables: Iterable[str]):
        self.model: dict[str, tuple[str, ...]] = {}
        self.data: dict[str, tuple[str, ...]] = {}
        for v in variables:
            if v in model_states and v in data_states:
                mine, theirs = tuple(map(str, model_states[v])), tuple(map(str, data_states[v]))
                if mine != theirs:
                    self.model[v], self.data[v] = mine, theirs

    def __bool__(self) -> bool:
        """Whether any shared variable has its labels in another order in the data."""
        return bool(self.model)

    def __repr__(self) -> str:
        return f"StateOrder({ {v: (self.model[v], self.data[v]) for v in self.model} })"

    def to_data(self, model: Any) -> Any:
        """``model`` with its labels in the data's order."""
        return model.with_state_order(self.data) if self else model

    def to_model(self, model: Any) -> Any:
        """A model in the data's order put back into the model's own order."""
        return model.with_state_order(self.model) if self else model

    def restore(self, result: FitResult) -> FitResult:
        """The fit's result with its model in the model's own order (everything else is order-free)."""
        if self:
            result.model = self.to_model(result.model)
        return result

    def array(self, values: np.ndarray, dims: Sequence[str]) -> np.ndarray:
        """A plain table over ``dims`` in the model's order, permuted into the data's."""
        return reorder_array(values, dims, self.model, self.data) if self else values

    def tables(self, tables: Mapping[str, Any] | None, dims: Mapping[str, Sequence[str]],
               states: Mapping[str, Sequence[str]]) -> Mapping[str, Any] | None:
        """Tables given as options (e.g. Dirichlet pseudo-counts, ``variable -> table``) in the data's order.

        A ``DataArray`` is matched by its labels; a plain array is read in the model's
        order of ``dims[variable]``; a number is left as it is.

        Raises
        ------
        ValueError
            A labelled table whose labels are not the data's.
        """
        if not tables:
            return tables
        out = {}
        for name, table in tables.items():
            if isinstance(table, xr.DataArray):
                labelled = {str(d): states[str(d)] for d in table.dims if str(d) in states and d in table.coords}
                for d, labels in labelled.items():
                    check_same_labels(d, [str(s) for s in table.coords[d].values], labels)
                out[name] = reorder_table(table, labelled)
            elif np.ndim(table) > 0 and name in dims:
                out[name] = self.array(np.asarray(table, dtype=float), dims[name])
            else:
                out[name] = table
        return out


def align(model: Any, data: xr.Dataset | xr.DataArray, *, states: Mapping[str, Sequence[str]] | None = None,
          variables: Sequence[str] | None = None) -> tuple[Any, StateOrder]:
    """Check ``model`` against the data by label and put it into the data's order.

    Parameters
    ----------
    model
        A model with ``states`` and ``with_state_order``.
    data
        The dataset or labelled table it meets.
    states
        The data's states, if already read (:func:`~dpgm.api.checks.data_states`).
    variables
        The model's variables that are in the data (default: all of them; latent ones
        are left out by the caller).

    Returns
    -------
    model, StateOrder
        The model in the data's order, and the order that puts a fitted model back.

    Raises
    ------
    DataError
        A variable absent from the data, continuous there, or with other labels than
        the model's (see :func:`~dpgm.api.checks.check_variables`).
    """
    states = data_states(data) if states is None else states
    variables = list(model.variables if variables is None else variables)
    check_variables(variables, model.states, states, data=data, kind=type(model).__name__)
    order = StateOrder(model.states, states, variables)
    return order.to_data(model), order

"""Hidden Markov models over categorical sequences stored as (``row``, ``time``) arrays."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from dpgm.models.description import edge_lists, state_lists
from dpgm.models.saving import model_kind

__all__ = ["HiddenMarkovModel", "hmm"]


@model_kind
class HiddenMarkovModel:
    """A hidden chain ``z_1..z_T`` with one categorical emission per step.

    Parameters
    ----------
    start
        ``p(z_1)``: DataArray over ``(hidden,)``.
    transition
        ``p(z_t | z_{t-1})``: DataArray over ``(hidden, hidden + "_next")``; rows sum to 1.
    emission
        ``p(x_t | z_t)``: DataArray over ``(hidden, variable)``; rows sum to 1.

    Examples
    --------
    >>> model = hmm(2, ["a", "b", "c"], variable="letter")
    >>> model.transition.dims, model.emission.dims
    (('state', 'state_next'), ('state', 'letter'))
    """

    def __init__(self, start: xr.DataArray, transition: xr.DataArray, emission: xr.DataArray):
        if start.ndim != 1 or transition.ndim != 2 or emission.ndim != 2:
            raise ValueError("start must be 1-D, transition and emission 2-D")
        self.hidden = str(start.dims[0])
        self.variable = str(emission.dims[1])
        expected = (self.hidden, self.hidden + "_next")
        if transition.dims != expected or emission.dims[0] != self.hidden:
            raise ValueError(
                f"transition must have dims {expected!r} and emission ({self.hidden!r}, variable); "
                f"got {transition.dims!r} and {emission.dims!r}"
            )
        for name, table, axis in [("start", start, 0), ("transition", transition, 1), ("emission", emission, 1)]:
            values = np.asarray(table.values, dtype=float)
            if (values < 0).any() or not np.allclose(values.sum(axis=axis), 1.0, rtol=0, atol=1e-9):
                raise ValueError(f"{name} must hold probabilities summing to 1 over its last axis")
        self.start = start.astype(float)
        self.transition = transition.astype(float)
        self.emission = emission.astype(float)

    @property
    def n_states(self) -> int:
        """Number of hidden states."""
        return int(self.start.size)

    @property
    def states(self) -> dict[str, tuple[str, ...]]:
        """State labels of the hidden and the observed variable."""
        return {
            self.hidden: tuple(map(str, self.start.coords[self.hidden].values)),
            self.variable: tuple(map(str, self.emission.coords[self.variable].values)),
        }

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(start, transition, emission)`` as plain arrays."""
        return self.start.values, self.transition.values, self.emission.values

    def with_arrays(self, start: np.ndarray, transition: np.ndarray, emission: np.ndarray) -> HiddenMarkovModel:
        """A copy with new parameters."""
        return HiddenMarkovModel(
            self.start.copy(data=start), self.transition.copy(data=transition), self.emission.copy(data=emission)
        )

    def with_state_order(self, states: Mapping[str, Sequence[str]]) -> HiddenMarkovModel:
        """The same model with the labels of the hidden states and/or the symbols in the given order.

        ``states`` maps :attr:`hidden` and/or :attr:`variable` to their labels in the
        wanted order; the tables are permuted by label (exact, no arithmetic). Other
        names are ignored.

        Raises
        ------
        ValueError
            The labels given are not a permutation of the model's.
        """
        from dpgm.models.state_order import changed_orders, reorder_table

        wanted = changed_orders(self.states, states)
        if wanted is None:
            return self
        if self.hidden in wanted:
            wanted[self.hidden + "_next"] = wanted[self.hidden]
        return HiddenMarkovModel(reorder_table(self.start, wanted), reorder_table(self.transition, wanted),
                                 reorder_table(self.emission, wanted))

    def randomized(self, rng: np.random.Generator) -> HiddenMarkovModel:
        """Parameters drawn from flat Dirichlet distributions (a random EM start)."""
        n, m = self.emission.shape
        return self.with_arrays(rng.dirichlet(np.ones(n)), rng.dirichlet(np.ones(n), n), rng.dirichlet(np.ones(m), n))

    def save(self, path: str, *, mode: str = "w-") -> None:
        """Write the model to a Zarr group."""
        from dpgm.models.saving import save

        save(self, path, mode=mode)

    def _describe(self) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """Variables, structure and whether fitted, for :func:`dpgm.models.description.describe`."""
        structure = {"hidden": self.hidden, "observed": self.variable, "n_states": self.n_states,
                     "edges": edge_lists([(f"{self.hidden}_t", f"{self.hidden}_t+1"),
                                          (f"{self.hidden}_t", f"{self.variable}_t")])}
        return state_lists(self.states, (self.hidden, self.variable)), structure, True

    def _to_store(self) -> dict[str, Any]:
        return {"start": self.start, "transition": self.transition, "emission": self.emission}

    @classmethod
    def _from_store(cls, tables: dict[str, Any], attrs: dict[str, Any]) -> HiddenMarkovModel:
        return cls(tables["start"], tables["transition"], tables["emission"])

    def n_free_parameters(self) -> int:
        """Start (``n - 1``), transition (``n (n - 1)``) and emission (``n (m - 1)``) probabilities."""
        n, m = self.emission.shape
        return n * (n + m - 1) - 1

    def summary(self, digits: int = 6) -> str:
        """Start, transition and emission probabilities as text, ``digits`` significant digits."""
        from dpgm.models.summary import labelled_block, render

        n, m = self.emission.shape
        header = (f"HiddenMarkovModel: {n} hidden states of {self.hidden!r}, {m} symbols of {self.variable!r}, "
                  f"{self.n_free_parameters()} free parameters")
        return render(header, [
            labelled_block(f"start P({self.hidden}_1)", self.start, digits=digits),
            labelled_block(f"transition P({self.hidden}_t+1 | {self.hidden}_t)", self.transition, digits=digits),
            labelled_block(f"emission P({self.variable}_t | {self.hidden}_t)", self.emission, digits=digits)])

    def __repr__(self) -> str:
        return f"HiddenMarkovModel({self.n_states} hidden states, {self.emission.shape[1]} symbols of {self.variable!r})"


def hmm(
    n_states: int, emission_states: Sequence[str], *, variable: str = "obs", hidden: str = "state"
) -> HiddenMarkovModel:
    """A hidden Markov model with uniform parameters (EM starts from random ones).

    Parameters
    ----------
    n_states
        Hidden states (labelled ``"0"``, ``"1"``, ...).
    emission_states
        Labels of the observed symbols.
    variable
        Name of the observed (``row``, ``time``) variable in the data.
    hidden
        Name of the hidden variable.
    """
    if n_states < 1:
        raise ValueError(f"n_states must be at least 1, got {n_states!r}")
    labels = [str(i) for i in range(n_states)]
    symbols = [str(s) for s in emission_states]
    n, m = n_states, len(symbols)
    return HiddenMarkovModel(
        xr.DataArray(np.full(n, 1 / n), dims=[hidden], coords={hidden: labels}),
        xr.DataArray(np.full((n, n), 1 / n), dims=[hidden, hidden + "_next"],
                     coords={hidden: labels, hidden + "_next": labels}),
        xr.DataArray(np.full((n, m), 1 / m), dims=[hidden, variable], coords={hidden: labels, variable: symbols}),
    )

"""Hidden Markov models: a hidden chain and emission families (:mod:`dpgm.models.emissions`), over sequences
stored as (``row``, ``time``) arrays."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from dpgm.models.description import CONTINUOUS, edge_lists, state_lists
from dpgm.models.emissions import (
    CategoricalEmission,
    Emission,
    GaussianEmission,
    GaussianMixtureEmission,
    PoissonEmission,
    emission_from_store,
)
from dpgm.models.saving import model_kind

__all__ = ["HiddenMarkovModel", "hmm"]


@model_kind
class HiddenMarkovModel:
    """A hidden chain ``z_1..z_T`` and, at each step, observations independent given ``z_t``.

    Parameters
    ----------
    start
        ``p(z_1)``: DataArray over ``(hidden,)``.
    transition
        ``p(z_t | z_{t-1})``: DataArray over ``(hidden, hidden + "_next")``; rows sum to 1.
    emission
        One categorical observation per step: ``p(x_t | z_t)``, a DataArray over
        ``(hidden, variable)`` whose rows sum to 1. Or give ``emissions``.
    emissions
        The emission families (:mod:`dpgm.models.emissions`): categorical, Gaussian,
        Gaussian mixture, Poisson, each over its own variables, independent given the state.
    sequence
        The sequence-id variable of the long layout the model was fitted on (one row per
        step, ``dpgm.fit(..., sequence=...)``); None for sequences stored as rows.

    Examples
    --------
    >>> model = hmm(2, ["a", "b", "c"], variable="letter")
    >>> model.transition.dims, model.emission.dims
    (('state', 'state_next'), ('state', 'letter'))
    >>> sensor = hmm(3, emissions={"status": ["ok", "fault"], ("x", "y"): "gaussian", "count": "poisson"})
    >>> sensor.variables, sensor.is_fitted
    (('status', 'x', 'y', 'count'), False)
    """

    def __init__(self, start: xr.DataArray, transition: xr.DataArray, emission: xr.DataArray | None = None, *,
                 emissions: Sequence[Emission] | None = None, sequence: str | None = None):
        if (emission is None) == (emissions is None):
            raise ValueError("give either emission (one categorical table) or emissions (the families)")
        if start.ndim != 1 or transition.ndim != 2:
            raise ValueError("start must be 1-D and transition 2-D")
        self.hidden = str(start.dims[0])
        expected = (self.hidden, self.hidden + "_next")
        if transition.dims != expected:
            raise ValueError(f"transition must have dims {expected!r}; got {transition.dims!r}")
        families = (CategoricalEmission(emission),) if emission is not None else tuple(emissions)
        if not families:
            raise ValueError("an HMM needs at least one emission family")
        tables = [("start", start, 0), ("transition", transition, 1)]
        for family in families:
            if isinstance(family, CategoricalEmission):
                table = family.table
                if table.ndim != 2 or table.dims[0] != self.hidden:
                    raise ValueError(f"a categorical emission must have dims ({self.hidden!r}, variable); "
                                     f"got {table.dims!r}")
                tables.append((f"emission of {table.dims[1]!r}", table, 1))
        for name, table, axis in tables:
            values = np.asarray(table.values, dtype=float)
            if (values < 0).any() or not np.allclose(values.sum(axis=axis), 1.0, rtol=0, atol=1e-9):
                raise ValueError(f"{name} must hold probabilities summing to 1 over its last axis")
        seen = [v for f in families for v in f.variables]
        if len(set(seen)) != len(seen) or self.hidden in seen:
            raise ValueError(f"each observed variable belongs to one emission family; got {seen}")
        self.start = start.astype(float)
        self.transition = transition.astype(float)
        self.sequence = sequence
        self.emissions = tuple(CategoricalEmission(f.table.astype(float)) if isinstance(f, CategoricalEmission)
                               else f for f in families)

    @property
    def n_states(self) -> int:
        """Number of hidden states."""
        return int(self.start.size)

    @property
    def labels(self) -> tuple[str, ...]:
        """The hidden states' labels."""
        return tuple(map(str, self.start.coords[self.hidden].values))

    @property
    def variables(self) -> tuple[str, ...]:
        """Every observed variable, family by family."""
        return tuple(v for f in self.emissions for v in f.variables)

    @property
    def categorical_variables(self) -> tuple[str, ...]:
        """The observed variables of the categorical families (their labels are matched to the data's)."""
        return tuple(v for f in self.emissions if isinstance(f, CategoricalEmission) for v in f.variables)

    @property
    def variable(self) -> str:
        """The first observed variable (the only one of a categorical HMM)."""
        return self.variables[0]

    @property
    def emission(self) -> xr.DataArray:
        """The emission table of an HMM with one categorical observation."""
        if len(self.emissions) != 1 or not isinstance(self.emissions[0], CategoricalEmission):
            raise AttributeError("emission is the table of an HMM with one categorical observation; this one has "
                                 f"{[f.family for f in self.emissions]} families: see emissions")
        return self.emissions[0].table

    @property
    def is_categorical(self) -> bool:
        """One categorical observation per step (the layout of :attr:`emission`)."""
        return len(self.emissions) == 1 and isinstance(self.emissions[0], CategoricalEmission)

    @property
    def is_fitted(self) -> bool:
        """Every emission family has parameters (a continuous one built without them has none until fitted)."""
        return all(f.is_fitted for f in self.emissions)

    @property
    def states(self) -> dict[str, tuple[str, ...]]:
        """State labels of the hidden and the categorical observed variables."""
        out = {self.hidden: self.labels}
        for family in self.emissions:
            out.update(family.states())
        return out

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(start, transition, emission)`` as plain arrays (one categorical observation)."""
        return self.start.values, self.transition.values, self.emission.values

    def with_arrays(self, start: np.ndarray, transition: np.ndarray, emission: np.ndarray) -> HiddenMarkovModel:
        """A copy with new parameters (one categorical observation)."""
        return self.with_parameters(start, transition, [self.emissions[0].with_tables({"table": emission})])

    def with_parameters(self, start: np.ndarray, transition: np.ndarray, emissions: Sequence[Emission]
                        ) -> HiddenMarkovModel:
        """A copy with new start and transition probabilities and emission families."""
        return HiddenMarkovModel(self.start.copy(data=start), self.transition.copy(data=transition),
                                 emissions=emissions, sequence=self.sequence)

    def with_sequence(self, sequence: str | None) -> HiddenMarkovModel:
        """The same model, read from the long layout with ``sequence`` the sequence-id variable (None: as rows)."""
        return HiddenMarkovModel(self.start, self.transition, emissions=self.emissions, sequence=sequence)

    def with_state_order(self, states: Mapping[str, Sequence[str]]) -> HiddenMarkovModel:
        """The same model with the labels of the hidden states and/or a categorical variable's symbols in the
        given order.

        ``states`` maps :attr:`hidden` and/or categorical variables to their labels in the
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
                                 emissions=[f.with_state_order(wanted) for f in self.emissions],
                                 sequence=self.sequence)

    def randomized(self, rng: np.random.Generator) -> HiddenMarkovModel:
        """Start, transition and categorical emission probabilities drawn from flat Dirichlet distributions (a
        random EM start; continuous families are started from the data by :func:`dpgm.fit`)."""
        n = self.n_states
        start, transition = rng.dirichlet(np.ones(n)), rng.dirichlet(np.ones(n), n)
        families = [f.randomized(rng) if isinstance(f, CategoricalEmission) else f for f in self.emissions]
        return self.with_parameters(start, transition, families)

    def save(self, path: str, *, mode: str = "w-") -> None:
        """Write the model to a Zarr group."""
        from dpgm.models.saving import save

        save(self, path, mode=mode)

    def _describe(self) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """Variables, structure and whether fitted, for :func:`dpgm.models.description.describe`."""
        edges = [(f"{self.hidden}_t", f"{self.hidden}_t+1")] + [(f"{self.hidden}_t", f"{v}_t") for v in self.variables]
        structure = {"hidden": self.hidden, "observed": self.variable if self.is_categorical else list(self.variables),
                     "n_states": self.n_states, "emissions": [f.spec() for f in self.emissions],
                     "edges": edge_lists(edges)}
        lists = state_lists(self.states, (self.hidden, *self.variables))
        for family in self.emissions:
            if not isinstance(family, CategoricalEmission):
                lists.update({v: CONTINUOUS for v in family.variables})
        return lists, structure, self.is_fitted

    def _to_store(self) -> dict[str, Any]:
        tables = {"start": self.start, "transition": self.transition}
        layout = {"sequence": self.sequence} if self.sequence is not None else {}
        if self.is_categorical:
            return tables | {"emission": self.emission} | ({"__attrs__": layout} if layout else {})
        for i, family in enumerate(self.emissions):
            for name, table in family.tables().items():
                # families' dims of the same name (``variable``, ``mix``) may differ in length: one store holds them
                renamed = {"variable": f"variable@{i}", "variable_": f"variable@{i}_", "mix": f"mix@{i}"}
                tables[f"emission{i}:{name}"] = table.rename({d: r for d, r in renamed.items() if d in table.dims})
        return tables | {"__attrs__": {"emissions": [f.spec() for f in self.emissions], **layout}}

    @classmethod
    def _from_store(cls, tables: dict[str, Any], attrs: dict[str, Any]) -> HiddenMarkovModel:
        if "emissions" not in attrs:
            return cls(tables["start"], tables["transition"], tables["emission"], sequence=attrs.get("sequence"))
        hidden, n = str(tables["start"].dims[0]), int(tables["start"].size)
        families = [emission_from_store(spec, {k.split(":", 1)[1]: t.rename({d: d.replace(f"@{i}", "") for d in t.dims
                                                                             if f"@{i}" in str(d)})
                                               for k, t in tables.items() if k.startswith(f"emission{i}:")},
                                        hidden, n)
                    for i, spec in enumerate(attrs["emissions"])]
        return cls(tables["start"], tables["transition"], emissions=families, sequence=attrs.get("sequence"))

    def n_free_parameters(self) -> int:
        """Start (``n - 1``), transition (``n (n - 1)``) and every emission family's free parameters."""
        n = self.n_states
        return n * n - 1 + sum(f.n_free_parameters() for f in self.emissions)

    def summary(self, digits: int = 6) -> str:
        """Start, transition and emission parameters as text, ``digits`` significant digits."""
        from dpgm.models.summary import labelled_block, render

        families = ", ".join(f"{f.family} {list(f.variables)}" for f in self.emissions)
        header = (f"HiddenMarkovModel: {self.n_states} hidden states of {self.hidden!r}, emissions {families}, "
                  f"{self.n_free_parameters()} free parameters")
        blocks = [labelled_block(f"start P({self.hidden}_1)", self.start, digits=digits),
                  labelled_block(f"transition P({self.hidden}_t+1 | {self.hidden}_t)", self.transition, digits=digits)]
        for family in self.emissions:
            for name, table in family.tables().items():
                title = (f"emission P({family.variables[0]}_t | {self.hidden}_t)" if name == "table"
                         else f"{family.family} {name} of {list(family.variables)}")
                blocks.append(labelled_block(title, table, digits=digits))
            if not family.is_fitted:
                blocks.append(f"{family.family} emission of {list(family.variables)}: not fitted")
        return render(header, blocks)

    def __repr__(self) -> str:
        if self.is_categorical:
            return (f"HiddenMarkovModel({self.n_states} hidden states, {self.emission.shape[1]} symbols of "
                    f"{self.variable!r})")
        return f"HiddenMarkovModel({self.n_states} hidden states, emissions of {list(self.variables)})"


def hmm(
    n_states: int, emission_states: Sequence[str] | None = None, *, variable: str = "obs", hidden: str = "state",
    emissions: Mapping[Any, Any] | None = None,
) -> HiddenMarkovModel:
    """A hidden Markov model with uniform start, transition and categorical emission probabilities (EM
    starts from random ones, or from the data for continuous emissions).

    Parameters
    ----------
    n_states
        Hidden states (labelled ``"0"``, ``"1"``, ...).
    emission_states
        Labels of the observed symbols of one categorical ``variable``; or give ``emissions``.
    variable
        Name of the observed variable in the data (with ``emission_states``).
    hidden
        Name of the hidden variable.
    emissions
        Observed variable (or a tuple of them) -> its family: a list of labels (categorical),
        ``"gaussian"`` (diagonal covariance), ``"poisson"``, or a dict ``{"family":
        "gaussian", "covariance_type": "full" | "diag" | "spherical" | "tied"}``, or a
        mixture of Gaussians per state ``{"family": "gmm", "n_mix": 2, "covariance_type":
        "diag"}`` (hmmlearn's ``GMMHMM``).

    Raises
    ------
    ValueError
        No states, an unknown family, or a variable given twice.
    """
    if isinstance(n_states, bool) or not isinstance(n_states, int) or n_states < 1:
        raise ValueError(f"n_states must be a positive integer, got {n_states!r}")
    if (emission_states is None) == (emissions is None):
        raise ValueError("give emission_states (one categorical variable) or emissions (variable -> family)")
    if emissions is None:
        emissions = {variable: list(emission_states)}
    labels = [str(i) for i in range(n_states)]
    n = n_states
    families: list[Emission] = []
    for key, how in emissions.items():
        names = tuple(str(v) for v in ((key,) if isinstance(key, str) else key))
        if isinstance(how, list | tuple) and not isinstance(how, str):
            if len(names) != 1:
                raise ValueError(f"a categorical emission is over one variable, got {list(names)}")
            symbols = [str(s) for s in how]
            families.append(CategoricalEmission(xr.DataArray(
                np.full((n, len(symbols)), 1 / len(symbols)), dims=[hidden, names[0]],
                coords={hidden: labels, names[0]: symbols})))
            continue
        spec = {"family": how} if isinstance(how, str) else dict(how)
        family = spec.pop("family", None)
        if family == "gaussian":
            families.append(GaussianEmission(names, spec.pop("covariance_type", "diag"), hidden, n))
        elif family == "gmm":
            if "n_mix" not in spec:
                raise ValueError(f"a gmm emission of {list(names)} needs n_mix (mixed Gaussians per state): "
                                 "{'family': 'gmm', 'n_mix': 2}")
            families.append(GaussianMixtureEmission(names, spec.pop("n_mix"), spec.pop("covariance_type", "diag"),
                                                    hidden, n))
        elif family == "poisson":
            families.append(PoissonEmission(names, hidden, n))
        else:
            raise ValueError(f"unknown emission family {family!r} for {list(names)}: expected a list of labels "
                             "(categorical), 'gaussian', 'gmm' or 'poisson'")
        if spec:
            raise ValueError(f"unknown emission settings {sorted(spec)} for {list(names)}")
    return HiddenMarkovModel(
        xr.DataArray(np.full(n, 1 / n), dims=[hidden], coords={hidden: labels}),
        xr.DataArray(np.full((n, n), 1 / n), dims=[hidden, hidden + "_next"],
                     coords={hidden: labels, hidden + "_next": labels}),
        emissions=families,
    )

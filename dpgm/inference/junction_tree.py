"""A model compiled to a junction tree: labelled queries and the batched entry points EM calls.

``JunctionTree(model)`` triangulates the model's interaction graph, builds the
tree and the flat index maps of the compiled kernel once
(:mod:`dpgm.inference.batched`); :meth:`JunctionTree.with_model` swaps in new
parameters of the same structure without redoing any of that, and the object
pickles (it is what an EM iteration ships to every Dask worker).

Evidence in the labelled methods is a dict ``variable -> value``:

* a state label (``str``): hard evidence;
* a likelihood vector over the variable's states (list, NumPy array, or
  ``xarray.DataArray`` with the variable as its one dim, matched by label):
  soft (virtual) evidence, multiplied into the model, ``P(x | e) ∝ P(x) λ(x_v)``.

In the batched methods evidence is an integer code matrix ``codes`` of shape
``(B, k)`` for ``k`` observed ``variables`` (the column order), ``-1`` = missing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import xarray as xr

from dpgm.inference.batched import BatchedTree, ImpossibleEvidenceError
from dpgm.inference.triangulation import MAX_TABLE_SIZE, build_tree
from dpgm.potentials import labelled_table, marginal

__all__ = ["FactorModel", "JunctionTree"]


Factor = tuple[tuple[str, ...], np.ndarray]


@runtime_checkable
class FactorModel(Protocol):
    """What the junction tree needs of a discrete model: its variables, their states, its factors.

    ``factors()`` returns ``(scope, table)`` pairs over the model's variables, a table's axes in
    scope order and sized by the variables' states; the model is their normalized product
    (a model with structural zeros includes the indicator of its allowed cells as a factor).
    :class:`~dpgm.BayesianNetwork`, :class:`~dpgm.MarkovNetwork` and
    :class:`~dpgm.LogLinearModel` (and the latent class model, a BayesianNetwork) implement it.
    """

    @property
    def variables(self) -> Sequence[str]: ...

    @property
    def states(self) -> Mapping[str, Sequence[str]]: ...

    def factors(self) -> list[Factor]: ...


def _factors_of(model: Any) -> list[Factor]:
    if not isinstance(model, FactorModel):
        raise TypeError(f"expected a BayesianNetwork, MarkovNetwork or LogLinearModel, got {type(model).__name__}: "
                        "a model must offer variables, states and factors()")
    return model.factors()


class JunctionTree:
    """A model compiled to a junction tree, for labelled queries and batches of evidence rows.

    Parameters
    ----------
    model
        A :class:`FactorModel`: a :class:`~dpgm.BayesianNetwork`, :class:`~dpgm.MarkovNetwork` or
        :class:`~dpgm.LogLinearModel`.
    extra_scopes
        Additional scopes the tree must hold in one clique (e.g. a query scope
        no factor covers); they get all-ones factors.
    max_table_size
        Refuse (``ValueError``, before allocating anything) a triangulation whose
        clique tables hold more cells than this in total (default 2**27 cells,
        1 GiB of float64).

    Attributes
    ----------
    model
        The model whose parameters the tree holds.
    variables
        The model's variables (column order of :meth:`map_batch`).
    states
        Variable -> state labels.
    scopes
        The model's factor scopes (BN families ``(v, *parents)``, MN potential scopes).

    Notes
    -----
    Triangulation: greedy min-weight and weighted min-fill, the one with the
    smaller total table size kept (:mod:`dpgm.inference.triangulation`).
    Calibration: Hugin with per-message rescaling (:mod:`dpgm.inference.batched`).
    Check :attr:`width` and :attr:`total_table_size` before inference on a new
    model: memory per row block is ``8 * total_table_size * 64`` bytes at most.

    Examples
    --------
    >>> import dpgm
    >>> tree = JunctionTree(dpgm.load_network("alarm"))
    >>> tree.width, tree.total_table_size
    (4, 1020)
    >>> codes = np.array([[0, 1], [-1, 0]])          # rows of evidence, -1 = missing
    >>> log_evidence, post = tree.posteriors(codes, ["HR", "BP"], targets=["HYPOVOLEMIA"])
    >>> post["HYPOVOLEMIA"].shape
    (2, 2)
    """

    def __init__(self, model: Any, extra_scopes: Sequence[Sequence[str]] = (), *, max_table_size: int = MAX_TABLE_SIZE):
        factors = _factors_of(model)
        self.model = model
        self.variables: tuple[str, ...] = tuple(model.variables)
        self.states: dict[str, tuple[str, ...]] = {v: tuple(model.states[v]) for v in self.variables}
        self.scopes: list[tuple[str, ...]] = [s for s, _ in factors]
        extra = []
        for scope in extra_scopes:
            scope = _check_scope(self, scope)
            extra.append((scope, np.ones([len(self.states[v]) for v in scope])))
        self._extra = extra
        self._max_table_size = max_table_size
        cards = {v: len(self.states[v]) for v in self.variables}
        everything = [*factors, *extra]
        structure = build_tree(self.variables, cards, [s for s, _ in everything], max_table_size=max_table_size)
        self.tree = BatchedTree(self.variables, cards, everything, structure)

    # -- structure ---------------------------------------------------------------------

    def with_model(self, model: Any) -> JunctionTree:
        """The same compiled tree with the parameters of ``model`` (same scopes and states).

        No re-triangulation and no recompilation: what EM does every iteration.

        Raises
        ------
        ValueError
            If ``model`` has different variables, states or scopes.

        Examples
        --------
        >>> import dpgm
        >>> alarm = dpgm.load_network("alarm")
        >>> tree = JunctionTree(alarm)
        >>> new = tree.with_model(alarm.randomized(np.random.default_rng(0)))
        >>> new.cliques == tree.cliques
        True
        """
        factors = _factors_of(model)
        if tuple(model.variables) != self.variables or any(
                tuple(model.states[v]) != self.states[v] for v in self.variables):
            raise ValueError("with_model needs a model with the same variables and states; "
                             f"expected variables {list(self.variables)}, got {list(model.variables)}")
        scopes = [s for s, _ in factors]
        if scopes != self.scopes:
            raise ValueError(f"with_model needs the same scopes in the same order: expected {self.scopes!r}, "
                             f"got {scopes!r}")
        new = object.__new__(JunctionTree)
        new.model, new.variables, new.states, new.scopes, new._extra, new._max_table_size = (
            model, self.variables, self.states, self.scopes, self._extra, self._max_table_size)
        new.tree = self.tree.with_factors([*factors, *self._extra])
        return new

    @property
    def width(self) -> int:
        """Largest clique size minus one (the width of this triangulation)."""
        return self.tree.width

    @property
    def total_table_size(self) -> int:
        """Cells of all clique tables together."""
        return self.tree.total_table_size

    @property
    def cliques(self) -> tuple[tuple[str, ...], ...]:
        """The maximal cliques, each a tuple of variables in model order."""
        return self.tree.structure.cliques

    @property
    def separators(self) -> dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[str, ...]]:
        """``(child clique, parent clique) -> separator scope`` for every tree edge."""
        structure = self.tree.structure
        return {(structure.cliques[c], structure.cliques[p]): structure.separator(c)
                for c, p in enumerate(structure.parent) if p >= 0}

    def __repr__(self) -> str:
        return (f"JunctionTree({len(self.variables)} variables, {len(self.cliques)} cliques, "
                f"width {self.width}, total table size {self.total_table_size})")

    # -- batched entry points ------------------------------------------------------------

    def expected_counts(
        self, codes: np.ndarray, variables: Sequence[str], weights: np.ndarray | None = None, *,
        errors: str = "ignore",
    ) -> tuple[float, dict[tuple[str, ...], np.ndarray]]:
        """Weighted log-likelihood and weighted sum over rows of every clique's posterior (EM's E step).

        Parameters
        ----------
        codes
            ``(B, k)`` integer codes, ``-1`` = missing.
        variables
            The ``k`` observed variables, in column order (latent ones absent).
        weights
            ``(B,)`` frequency weights (default 1).
        errors
            What a row of probability zero does (with positive weight): ``"ignore"``
            makes the log-likelihood ``-inf`` and adds nothing to the counts;
            ``"raise"`` raises :class:`~dpgm.inference.ImpossibleEvidenceError`
            naming the first such row.

        Returns
        -------
        (float, dict)
            ``sum_b w_b log P(e_b)`` and ``{clique scope: sum_b w_b P(x_C | e_b)}``
            (arrays with axes in clique-scope order).

        Examples
        --------
        >>> import dpgm
        >>> tree = JunctionTree(dpgm.load_network("asia"))
        >>> loglik, counts = tree.expected_counts(np.array([[0], [1], [1]]), ["xray"])
        >>> round(sum(float(t.sum()) for t in counts.values()) / len(counts), 12)
        3.0
        """
        _check_errors(errors)
        return self.tree.expected_counts(codes, variables, weights, errors=errors)

    def family_counts(
        self, clique_counts: Mapping[tuple[str, ...], np.ndarray], scopes: Sequence[Sequence[str]] | None = None
    ) -> dict[tuple[str, ...], np.ndarray]:
        """Tables over ``scopes`` (default: the model's own scopes) summed out of clique tables.

        Every model scope lies inside some clique; the table of a BN family
        ``(v, *parents)`` comes back with axes in that order.
        """
        return self.tree.family_counts(clique_counts, self.scopes if scopes is None else scopes)

    def expected_family_counts(
        self, codes: np.ndarray, variables: Sequence[str], weights: np.ndarray | None = None, *,
        errors: str = "ignore",
    ) -> tuple[float, dict[tuple[str, ...], np.ndarray]]:
        """:meth:`expected_counts` reduced to the model's scopes: what the M step needs.

        Clique sums are a monoid (add them across chunks), and so are these.

        Examples
        --------
        >>> import dpgm
        >>> tree = JunctionTree(dpgm.load_network("asia"))
        >>> loglik, families = tree.expected_family_counts(np.array([[0, -1], [1, 1]]), ["xray", "dysp"])
        >>> families[("either", "lung", "tub")].shape, round(float(families[("asia",)].sum()), 12)
        ((2, 2, 2), 2.0)
        """
        loglik, cliques = self.expected_counts(codes, variables, weights, errors=errors)
        return loglik, self.family_counts(cliques)

    def posteriors(
        self, codes: np.ndarray, variables: Sequence[str], targets: Sequence[str] | None = None, *,
        soft: Mapping[str, np.ndarray] | None = None, errors: str = "ignore",
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Per row: log P(evidence) ``(B,)`` and each target's posterior ``{v: (B, card)}``.

        ``targets`` defaults to every variable; ``soft`` maps variables to
        likelihoods ``(card,)`` or ``(B, card)``. A row of probability zero gets
        ``-inf`` and NaN posteriors with ``errors="ignore"``, or
        :class:`~dpgm.inference.ImpossibleEvidenceError` with ``errors="raise"``.

        Examples
        --------
        >>> import dpgm
        >>> tree = JunctionTree(dpgm.load_network("asia"))
        >>> log_evidence, post = tree.posteriors(np.array([[0], [1]]), ["xray"], targets=["lung"])
        >>> post["lung"].shape, bool(post["lung"][0, 0] > post["lung"][1, 0])
        ((2, 2), True)
        """
        _check_errors(errors)
        log_evidence, tables = self.tree.posteriors(codes, variables, soft=soft, targets=targets)
        if errors == "raise":
            _raise_impossible(log_evidence, codes, variables)
        return log_evidence, tables

    def map_batch(
        self, codes: np.ndarray, variables: Sequence[str], *, soft: Mapping[str, np.ndarray] | None = None,
        return_log_value: bool = False,
    ):
        """Most probable joint assignment per row, ``(B, n_variables)`` codes (max-product).

        Columns follow :attr:`variables`; rows of probability zero are all ``-1``.
        With ``return_log_value`` also the log of the model's unnormalized value at
        each assignment ``(B,)`` (``log P(x*)`` for a BayesianNetwork).

        Examples
        --------
        >>> import dpgm
        >>> tree = JunctionTree(dpgm.load_network("asia"))
        >>> best = tree.map_batch(np.array([[0, 0], [-1, -1]]), ["xray", "dysp"])
        >>> best.shape, int(best[0, tree.variables.index("xray")])
        ((2, 8), 0)
        """
        return self.tree.map_batch(codes, variables, soft=soft, return_log_value=return_log_value)

    # -- labelled queries ----------------------------------------------------------------

    def _evidence(self, evidence: Mapping[str, Any] | None):
        hard, soft = split_evidence(self, evidence)
        observed = list(hard)
        codes = np.array([[self.states[v].index(hard[v]) for v in observed]], dtype=np.int64).reshape(1, -1)
        return codes, observed, {v: x.reshape(1, -1) for v, x in soft.items()}

    def _impossible(self, evidence) -> ImpossibleEvidenceError:
        return ImpossibleEvidenceError(
            f"the evidence {dict(evidence or {})!r} has probability zero under the model", 0)

    def log_partition(self, evidence: Mapping[str, Any] | None = None) -> float:
        """log of the model's unnormalized sum over the states consistent with ``evidence``.

        Soft evidence weighs each state by its likelihood. For a Bayesian network
        this is ``log P(evidence)`` (0 without evidence); ``-inf`` for impossible evidence.
        """
        codes, observed, soft = self._evidence(evidence)
        log_evidence, _ = self.tree.posteriors(codes, observed, soft=soft, targets=())
        return float(log_evidence[0])

    def clique_marginals(self, evidence: Mapping[str, Any] | None = None) -> dict[tuple[str, ...], xr.DataArray]:
        """Every clique's normalized posterior marginal, labelled, from one calibration."""
        codes, observed, soft = self._evidence(evidence)
        loglik, counts = self.tree.expected_counts(codes, observed, soft=soft)
        if not math.isfinite(loglik):
            raise self._impossible(evidence)
        return {c: self._label(t / t.sum(), c) for c, t in counts.items()}

    def separator_marginals(
        self, evidence: Mapping[str, Any] | None = None
    ) -> dict[tuple[tuple[str, ...], tuple[str, ...]], xr.DataArray]:
        """Every separator's posterior marginal, keyed like :attr:`separators`."""
        cliques = self.clique_marginals(evidence)
        return {edge: marginal(cliques[edge[0]], scope)
                for edge, scope in self.separators.items()}

    def marginals(self, evidence: Mapping[str, Any] | None = None) -> dict[str, xr.DataArray]:
        """Every variable's posterior marginal, labelled."""
        codes, observed, soft = self._evidence(evidence)
        log_evidence, tables = self.tree.posteriors(codes, observed, soft=soft)
        if not np.isfinite(log_evidence[0]):
            raise self._impossible(evidence)
        return {v: self._label(tables[v][0], (v,)) for v in self.variables}

    def marginal(self, scope: Sequence[str], evidence: Mapping[str, Any] | None = None) -> xr.DataArray:
        """The posterior marginal of ``scope`` (dims in the given order).

        A scope no clique holds is answered by a tree re-triangulated with the
        scope as an extra (all-ones) factor.
        """
        scope = _check_scope(self, scope)
        holders = [c for c in self.cliques if set(scope) <= set(c)]
        if not holders:
            return JunctionTree(self.model, [*[s for s, _ in self._extra], scope],
                                max_table_size=self._max_table_size).marginal(scope, evidence)
        clique = min(holders, key=self.tree.structure.table_size)
        codes, observed, soft = self._evidence(evidence)
        loglik, counts = self.tree.expected_counts(codes, observed, soft=soft)
        if not math.isfinite(loglik):
            raise self._impossible(evidence)
        table = self.tree.family_counts({clique: counts[clique]}, [scope])[scope]
        return self._label(table / table.sum(), scope)

    def map_assignment(self, evidence: Mapping[str, Any] | None = None) -> dict[str, str]:
        """The most probable joint assignment given ``evidence``, as state labels."""
        codes, observed, soft = self._evidence(evidence)
        best = self.tree.map_batch(codes, observed, soft=soft)[0]
        if best[0] < 0:
            raise self._impossible(evidence)
        return {v: self.states[v][int(best[j])] for j, v in enumerate(self.variables)}

    def _label(self, table: np.ndarray, scope: Sequence[str]) -> xr.DataArray:
        return labelled_table(table, scope, self.states)


def _check_errors(errors: str) -> None:
    if errors not in ("ignore", "raise"):
        raise ValueError(f"errors={errors!r}: expected 'ignore' or 'raise'")


def _raise_impossible(log_evidence: np.ndarray, codes: np.ndarray, variables: Sequence[str]) -> None:
    impossible = ~np.isfinite(log_evidence)
    if impossible.any():
        row = int(np.argmax(impossible))
        raise ImpossibleEvidenceError(
            f"row {row} (codes {np.asarray(codes)[row].tolist()!r} of {list(variables)!r}) "
            "has probability zero under the model", row)


def _check_scope(tree: JunctionTree, scope: Sequence[str]) -> tuple[str, ...]:
    if isinstance(scope, str):
        scope = (scope,)
    scope = tuple(scope)
    if not scope:
        raise ValueError("the scope is empty; give at least one variable")
    unknown = [v for v in scope if v not in tree.states]
    if unknown:
        raise ValueError(f"scope {scope!r} names variables not in the model: {unknown}; "
                         f"variables: {list(tree.variables)}")
    if len(set(scope)) != len(scope):
        raise ValueError(f"scope {scope!r} names a variable twice")
    return scope


def split_evidence(tree: Any, evidence: Mapping[str, Any] | None) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """Hard evidence (state labels) and soft evidence (likelihood vectors), validated.

    Raises
    ------
    ValueError
        An unknown variable or label, or a likelihood vector of the wrong length,
        negative or non-finite.
    TypeError
        A value that is neither a label nor a vector.
    """
    if evidence is not None and not isinstance(evidence, Mapping):
        raise TypeError(f"evidence must be a dict variable -> label or likelihoods, got {type(evidence).__name__}")
    hard: dict[str, str] = {}
    soft: dict[str, np.ndarray] = {}
    for variable, value in dict(evidence or {}).items():
        if variable not in tree.states:
            raise ValueError(f"evidence on {variable!r}, which is not a model variable; "
                             f"variables: {list(tree.variables)}")
        labels = list(tree.states[variable])
        if isinstance(value, str):
            if value not in labels:
                raise ValueError(f"{value!r} is not a state of {variable!r}; states: {labels}")
            hard[variable] = value
            continue
        if isinstance(value, xr.DataArray):
            if value.dims != (variable,):
                raise ValueError(f"soft evidence on {variable!r} must be a DataArray with dims "
                                 f"({variable!r},), got {value.dims!r}")
            found = [str(s) for s in value.coords[variable].values] if variable in value.coords else labels
            if sorted(found) != sorted(labels):
                raise ValueError(f"soft evidence on {variable!r} has states {found!r}; states: {labels}")
            value = np.asarray(value.values, dtype=float)[[found.index(s) for s in labels]]
        elif not isinstance(value, (list, tuple, np.ndarray)):
            raise TypeError(f"evidence on {variable!r} must be a state label (str) or a likelihood vector, "
                            f"got {value!r}")
        vector = np.asarray(value, dtype=float)
        if vector.shape != (len(labels),) or (vector < 0).any() or not np.isfinite(vector).all():
            raise ValueError(f"soft evidence on {variable!r} must be {len(labels)} nonnegative finite "
                             f"likelihoods (states {labels}), got {value!r}")
        soft[variable] = vector
    return hard, soft

"""Hypothesis strategies for random small discrete models, and binary grids with their transfer-matrix
oracle (shared by the inference tests)."""

from __future__ import annotations

import numpy as np
import xarray as xr
from hypothesis import strategies as st

import dpgm


def _labels(variable: str, card: int) -> list[str]:
    return [f"{variable}s{k}" for k in range(card)]


def _table(rng: np.random.Generator, shape, zeros: bool) -> np.ndarray:
    values = rng.gamma(0.7, 1.0, shape)
    if zeros:
        values[rng.random(shape) < 0.15] = 0.0
    return values


@st.composite
def markov_networks(draw, max_variables: int = 7, max_cells: int = 40_000):
    """Non-decomposable Markov networks: a cycle over >= 4 variables plus random extra scopes.

    2-5 states per variable, random gamma potentials with some exact zeros.
    """
    n = draw(st.integers(4, max_variables))
    variables = [f"v{i}" for i in range(n)]
    cards = [draw(st.integers(2, 5)) for _ in variables]
    while np.prod(cards) > max_cells:
        cards[int(np.argmax(cards))] -= 1
    cycle = draw(st.integers(4, n))
    scopes = [(variables[i], variables[(i + 1) % cycle]) for i in range(cycle)]
    scopes += [tuple(draw(st.lists(st.sampled_from(variables), min_size=1, max_size=3, unique=True)))
               for _ in range(draw(st.integers(0, 3)))]
    scopes += [(v,) for v in variables[cycle:]]  # every variable in some scope
    scopes = list(dict.fromkeys(scopes))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    zeros = draw(st.booleans())
    card = dict(zip(variables, cards, strict=True))
    potentials = {}
    for scope in scopes:
        table = _table(rng, [card[v] for v in scope], zeros)
        table.flat[0] = max(table.flat[0], 0.1)  # keep Z > 0
        potentials[scope] = xr.DataArray(table, dims=scope, coords={v: _labels(v, card[v]) for v in scope})
    return dpgm.MarkovNetwork(potentials)


@st.composite
def bayesian_networks(draw, max_variables: int = 7, max_cells: int = 40_000):
    """Random DAGs (up to 3 parents) with 2-5 states and random CPTs (some exact zeros)."""
    n = draw(st.integers(3, max_variables))
    variables = [f"b{i}" for i in range(n)]
    cards = [draw(st.integers(2, 5)) for _ in variables]
    while np.prod(cards) > max_cells:
        cards[int(np.argmax(cards))] -= 1
    card = dict(zip(variables, cards, strict=True))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    parents = {v: [variables[j] for j in sorted(rng.choice(i, size=min(i, int(rng.integers(0, 4))), replace=False))]
               for i, v in enumerate(variables)}
    zeros = draw(st.booleans())
    tables = {}
    for v in variables:
        raw = _table(rng, [card[v], *(card[p] for p in parents[v])], zeros)
        raw[0] += 0.05  # every column sums to > 0
        tables[v] = raw / raw.sum(axis=0, keepdims=True)
    states = {v: _labels(v, card[v]) for v in variables}
    return dpgm.BayesianNetwork.from_arrays(parents, states, tables)


models = st.one_of(markov_networks(), bayesian_networks())


@st.composite
def evidence_for(draw, model, soft: bool = True):
    """Hard evidence on a random subset, sometimes soft evidence on one more variable."""
    variables = list(model.variables)
    observed = draw(st.lists(st.sampled_from(variables), max_size=len(variables) - 1, unique=True))
    evidence = {v: draw(st.sampled_from(list(model.states[v]))) for v in observed}
    rest = [v for v in variables if v not in evidence]
    if soft and rest and draw(st.booleans()):
        v = draw(st.sampled_from(rest))
        evidence[v] = [draw(st.floats(0.05, 1.0)) for _ in model.states[v]]
    return evidence


def random_codes(rng: np.random.Generator, model, variables, rows: int) -> np.ndarray:
    """Codes for ``variables``, each entry missing (-1) with probability 1/3."""
    codes = np.stack([rng.integers(0, len(model.states[v]), rows) for v in variables], axis=1)
    return np.where(rng.random(codes.shape) < 1 / 3, -1, codes)


def grid_tables(rng: np.random.Generator, rows: int, columns: int, zeros: float
                ) -> tuple[dict[tuple[int, int], np.ndarray], dict[tuple[int, int], np.ndarray]]:
    """Random 2 x 2 tables on the edges of a ``rows`` x ``columns`` grid of binary variables.

    ``vertical[(i, j)]`` joins rows ``i`` and ``i + 1`` of column ``j``; ``horizontal[(i, j)]`` joins
    columns ``j`` and ``j + 1`` of row ``i``. Entries go down to 1e-300, a share ``zeros`` of them
    is exactly zero, and each table's cell (0, 0) is at least 1e-3.
    """

    def table():
        values = rng.random((2, 2)) * np.where(rng.random((2, 2)) < 0.3, 1e-300, 1.0)
        values[rng.random((2, 2)) < zeros] = 0.0
        values[0, 0] = max(values[0, 0], 1e-3)  # keep every table from vanishing entirely
        return values

    vertical = {(i, j): table() for i in range(rows - 1) for j in range(columns)}
    horizontal = {(i, j): table() for i in range(rows) for j in range(columns - 1)}
    return vertical, horizontal


def grid_transfer(vertical, horizontal, rows: int, columns: int) -> tuple[float, np.ndarray, np.ndarray]:
    """log Z of the grid by column transfer matrices (rescaled at every column), the distribution of the
    last column's states, and those states (``(2**rows, rows)``, bit ``i`` of state ``s`` is row ``i``)."""
    states = np.array([[(s >> i) & 1 for i in range(rows)] for s in range(2**rows)])

    def within(j):
        return np.array([np.prod([vertical[(i, j)][s[i], s[i + 1]] for i in range(rows - 1)]) for s in states])

    vector, total = within(0), 0.0
    for j in range(1, columns):
        step = np.array([[np.prod([horizontal[(i, j - 1)][a[i], b[i]] for i in range(rows)]) for b in states]
                         for a in states])
        vector = (vector @ step) * within(j)
        scale = vector.sum()
        total += np.log(scale)
        vector = vector / scale
    total += np.log(vector.sum())
    return total, vector / vector.sum(), states

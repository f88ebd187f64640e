"""Hypothesis strategies for random small discrete models (shared by the inference tests)."""

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

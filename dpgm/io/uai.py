"""The UAI inference-competition format (``BAYES`` and ``MARKOV`` networks).

UAI files carry no variable names or state labels: reading names variables
``x0, x1, ...`` (or the given ``names``) and states ``"0", "1", ...``; writing
keeps the model's variable order and state order. In a ``BAYES`` file each
table's scope lists the parents first and the child last, values in row-major
order (last variable fastest).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from dpgm.data.schema import state_index
from dpgm.models.bayesian_network import BayesianNetwork
from dpgm.models.markov import MarkovNetwork

__all__ = ["read_uai", "write_uai"]


def read_uai(path: str | os.PathLike[str], names: Sequence[str] | None = None) -> BayesianNetwork | MarkovNetwork:
    """Read a ``BAYES`` file as a BayesianNetwork or a ``MARKOV`` file as a MarkovNetwork.

    Raises
    ------
    ValueError
        An unknown network type, a truncated file, or a table of the wrong length.
    """
    tokens = Path(path).read_text().split()
    position = 0

    def take(count: int = 1) -> list[str]:
        nonlocal position
        if position + count > len(tokens):
            raise ValueError(f"{os.fspath(path)!r} ends early (token {position})")
        out = tokens[position : position + count]
        position += count
        return out

    kind = take()[0].upper()
    if kind not in ("BAYES", "MARKOV"):
        raise ValueError(f"{os.fspath(path)!r}: network type {kind!r} is not BAYES or MARKOV")
    n = int(take()[0])
    cards = [int(x) for x in take(n)]
    names = list(names) if names is not None else [f"x{i}" for i in range(n)]
    if len(names) != n:
        raise ValueError(f"{len(names)} names for {n} variables")
    states = {v: tuple(str(k) for k in range(c)) for v, c in zip(names, cards, strict=True)}
    scopes = []
    for _ in range(int(take()[0])):
        size = int(take()[0])
        scopes.append([names[int(i)] for i in take(size)])
    tables = []
    for scope in scopes:
        count = int(take()[0])
        shape = [cards[names.index(v)] for v in scope]
        if count != int(np.prod(shape)):
            raise ValueError(f"a table over {scope} has {count} entries, expected {int(np.prod(shape))}")
        tables.append(np.array([float(x) for x in take(count)]).reshape(shape))
    coords = {v: state_index(v, states[v]) for v in names}
    if kind == "MARKOV":
        return MarkovNetwork({tuple(s): xr.DataArray(t, dims=s, coords={v: coords[v] for v in s})
                              for s, t in zip(scopes, tables, strict=True)})
    cpds = {}
    for scope, table in zip(scopes, tables, strict=True):
        child, parents = scope[-1], scope[:-1]
        dims = [child, *parents]
        cpds[child] = xr.DataArray(np.moveaxis(table, -1, 0), dims=dims, coords={v: coords[v] for v in dims})
    return BayesianNetwork(cpds)


def write_uai(model: Any, path: str | os.PathLike[str]) -> None:
    """Write a BayesianNetwork (``BAYES``) or MarkovNetwork (``MARKOV``); values with 17 significant digits."""
    if isinstance(model, BayesianNetwork):
        kind = "BAYES"
        tables = [((*model.parents(v), v), np.moveaxis(model.cpds[v].values, 0, -1)) for v in model.variables]
    elif isinstance(model, MarkovNetwork):
        kind = "MARKOV"
        tables = [(s, model.potentials[s].values) for s in model.scopes]
    else:
        raise TypeError(f"cannot write a {type(model).__name__} as UAI")
    index = {v: i for i, v in enumerate(model.variables)}
    lines = [kind, str(len(model.variables)), " ".join(str(len(model.states[v])) for v in model.variables),
             str(len(tables))]
    lines += [f"{len(s)} " + " ".join(str(index[v]) for v in s) for s, _ in tables]
    lines.append("")
    for _, table in tables:
        lines.append(str(table.size))
        lines.append(" ".join(f"{x:.17g}" for x in table.ravel()))
        lines.append("")
    Path(path).write_text("\n".join(lines))

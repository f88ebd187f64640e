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

from dpgm.models.bayesian_network import BayesianNetwork
from dpgm.models.markov import MarkovNetwork
from dpgm.potentials import state_index

__all__ = ["read_uai", "write_uai"]


def read_uai(
    path: str | os.PathLike[str], names: Sequence[str] | None = None, tolerance: float = 1e-5
) -> BayesianNetwork | MarkovNetwork:
    """Read a ``BAYES`` file as a BayesianNetwork or a ``MARKOV`` file as a MarkovNetwork.

    Parameters
    ----------
    path
        A UAI model file.
    names
        Variable names, in file order (default ``x0, x1, ...``).
    tolerance
        In a ``BAYES`` file, a table column (one parent configuration) whose sum is
        off by more than 1e-12 but within ``tolerance`` of 1 is renormalized exactly (published files print
        rounded numbers, as BIF files do); farther off is an error.

    Returns
    -------
    BayesianNetwork or MarkovNetwork

    Raises
    ------
    ValueError
        An unknown network type, a truncated file, a table of the wrong length, or
        a ``BAYES`` column that does not sum to 1 within ``tolerance``.

    Examples
    --------
    >>> import tempfile, pathlib, dpgm
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "asia.uai"
    >>> dpgm.write_uai(dpgm.load_network("asia"), path)
    >>> read_uai(path, names=dpgm.load_network("asia").variables).cpds["lung"].dims
    ('lung', 'smoke')
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
        values = np.moveaxis(table, -1, 0)
        sums = values.sum(axis=0)
        off = np.abs(sums - 1.0)
        if (off > tolerance).any():
            worst = np.unravel_index(int(np.argmax(off)), off.shape) if off.ndim else ()
            configuration = {p: states[p][int(k)] for p, k in zip(parents, worst, strict=True)}
            raise ValueError(f"{os.fspath(path)!r}: the table of {child!r} sums to {float(sums[worst])!r} "
                             f"for parents {configuration!r}, not 1 within {tolerance!r}")
        if (off > 1e-12).any():  # as read_bif: leave columns that are 1 up to rounding untouched
            values = values / np.where(off > 1e-12, sums, 1.0)
        cpds[child] = xr.DataArray(values, dims=dims, coords={v: coords[v] for v in dims})
    return BayesianNetwork(cpds)


def write_uai(model: Any, path: str | os.PathLike[str]) -> None:
    """Write a BayesianNetwork (``BAYES``) or MarkovNetwork (``MARKOV``).

    Values are printed with 17 significant digits, so :func:`read_uai` reads the
    same doubles back. Variable names and state labels are not part of the
    format: keep ``model.variables`` to pass as ``names`` when reading.

    Raises
    ------
    TypeError
        Any other kind of model.

    Examples
    --------
    >>> import tempfile, pathlib, dpgm
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "cancer.uai"
    >>> write_uai(dpgm.load_network("cancer"), path)
    >>> path.read_text().split()[:2]
    ['BAYES', '5']
    """
    if isinstance(model, BayesianNetwork):
        kind = "BAYES"
        tables = [((*model.parents(v), v), np.moveaxis(model.cpds[v].values, 0, -1)) for v in model.variables]
    elif isinstance(model, MarkovNetwork):
        kind = "MARKOV"
        tables = [(s, model.potentials[s].values) for s in model.scopes]
        if model.structural_zeros is not None:  # UAI has no zeros of its own: one more 0/1 factor
            mask = model.structural_zeros
            tables.append((tuple(map(str, mask.dims)), (~mask.values).astype(float)))
    else:
        raise TypeError(f"cannot write a {type(model).__name__} as UAI; expected a BayesianNetwork or MarkovNetwork")
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

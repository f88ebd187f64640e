"""The Bayesian Interchange Format (BIF) for discrete Bayesian networks.

Published BIF files print probabilities rounded to a few digits, so a column of a
table (one parent configuration) often sums to 1 only up to about 1e-7. ``read_bif``
renormalizes every column whose sum is off by more than 1e-12 and within ``tolerance`` of 1 (default 1e-5) and
refuses any farther off, naming the variable and the parent configuration.
"""

from __future__ import annotations

import gzip
import itertools
import os
import re
from pathlib import Path

import numpy as np

from dpgm.models.bayesian_network import BayesianNetwork

__all__ = ["read_bif", "write_bif"]

_VARIABLE = re.compile(
    r"variable\s+([^\s{]+)\s*\{\s*type\s+discrete\s*\[\s*(\d+)\s*\]\s*\{([^}]*)\}\s*;", re.S
)
_PROBABILITY = re.compile(r"probability\s*\(\s*([^)]*)\)\s*\{([^}]*)\}", re.S)
_ENTRY = re.compile(r"\s*(?:\(([^)]*)\)|(table)|(default))\s*([^;]*);", re.S)


def _read_text(source: str | os.PathLike[str]) -> str:
    path = Path(source)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8")


def _numbers(text: str, where: str) -> list[float]:
    try:
        return [float(x) for x in re.split(r"[\s,]+", text.strip()) if x]
    except ValueError as error:
        raise ValueError(f"{where}: cannot parse probabilities {text.strip()!r}") from error


def read_bif(path: str | os.PathLike[str], tolerance: float = 1e-5) -> BayesianNetwork:
    """Read a discrete Bayesian network from a BIF file (optionally gzipped).

    Parameters
    ----------
    path
        A ``.bif`` or ``.bif.gz`` file.
    tolerance
        Columns of a table whose sum is within this of 1 are renormalized exactly;
        farther off is an error.

    Returns
    -------
    BayesianNetwork

    Raises
    ------
    ValueError
        On a syntax the reader does not know, an unknown state label, a table of
        the wrong length, or a column that is not a distribution.

    Examples
    --------
    >>> from dpgm.networks import network_path
    >>> read_bif(network_path("asia")).variables[:3]
    ('asia', 'tub', 'smoke')
    """
    text = re.sub(r"//[^\n]*", "", _read_text(path))
    states: dict[str, list[str]] = {}
    for name, size, labels in _VARIABLE.findall(text):
        names = [s.strip() for s in labels.split(",") if s.strip()]
        if len(names) != int(size):
            raise ValueError(f"variable {name!r} declares {size} states but lists {names!r}")
        states[name] = names
    if not states:
        raise ValueError(f"{os.fspath(path)!r} declares no discrete variables")
    tables: dict[str, np.ndarray] = {}
    parents: dict[str, list[str]] = {}
    for head, body in _PROBABILITY.findall(text):
        names = [s for s in re.split(r"[\s|,]+", head.strip()) if s]
        variable, family = names[0], names[1:]
        for name in names:
            if name not in states:
                raise ValueError(f"the table of {variable!r} names an undeclared variable {name!r}")
        shape = [len(states[v]) for v in names]
        table = np.full([len(states[p]) for p in family] + [shape[0]], np.nan)
        for config, is_table, is_default, numbers in _ENTRY.findall(body):
            values = _numbers(numbers, f"table of {variable!r}")
            if is_table:
                if len(values) != int(np.prod(shape)):
                    raise ValueError(
                        f"the table of {variable!r} has {len(values)} numbers, expected {int(np.prod(shape))}"
                    )
                table[...] = np.moveaxis(np.reshape(values, shape), 0, -1)
            elif is_default:
                missing = np.isnan(table[..., 0])
                table[missing] = values
            else:
                labels = [s.strip() for s in config.split(",")]
                try:
                    index = tuple(states[p].index(s) for p, s in zip(family, labels, strict=True))
                except ValueError as error:
                    raise ValueError(
                        f"the table of {variable!r} has an unknown parent configuration {labels!r}"
                    ) from error
                if len(values) != shape[0]:
                    raise ValueError(
                        f"the table of {variable!r} at {labels!r} has {len(values)} numbers, expected {shape[0]}"
                    )
                table[index] = values
        if np.isnan(table).any():
            where = np.argwhere(np.isnan(table[..., 0]))[0]
            labels = [states[p][i] for p, i in zip(family, where, strict=True)]
            raise ValueError(f"the table of {variable!r} gives no values for parents {labels!r}")
        sums = table.sum(axis=-1, keepdims=True)
        bad = np.abs(sums[..., 0] - 1) > tolerance
        if bad.any():
            where = np.argwhere(bad)[0]
            labels = [states[p][i] for p, i in zip(family, where, strict=True)]
            raise ValueError(
                f"the table of {variable!r} at parents {labels!r} sums to "
                f"{float(sums[tuple(where)][0])!r}, not 1 (tolerance {tolerance})"
            )
        # columns already normalized to rounding stay bit-identical (write/read round trip)
        sums = np.where(np.abs(sums - 1) > 1e-12, sums, 1.0)
        tables[variable] = np.moveaxis(table / sums, -1, 0)
        parents[variable] = family
    undeclared = sorted(set(states) - set(tables))
    if undeclared:
        raise ValueError(f"variables {undeclared} have no probability table")
    return BayesianNetwork.from_arrays(parents, states, tables)


def write_bif(model: BayesianNetwork, path: str | os.PathLike[str]) -> None:
    """Write a Bayesian network to a BIF file (gzipped when the name ends in ``.gz``).

    Probabilities are printed with 17 significant digits, so ``read_bif`` returns
    the same doubles.
    """
    lines = ["network unknown {", "}"]
    for variable in model.variables:
        labels = ", ".join(model.states[variable])
        lines += [f"variable {variable} {{",
                  f"  type discrete [ {model.cardinality(variable)} ] {{ {labels} }};", "}"]
    for variable in model.variables:
        family = model.parents(variable)
        table = np.moveaxis(model.cpds[variable].values, 0, -1)
        head = variable + (" | " + ", ".join(family) if family else "")
        lines.append(f"probability ( {head} ) {{")
        if not family:
            lines.append("  table " + ", ".join(f"{x:.17g}" for x in table) + ";")
        else:
            for index in itertools.product(*(range(s) for s in table.shape[:-1])):
                labels = ", ".join(model.states[p][i] for p, i in zip(family, index, strict=True))
                values = ", ".join(f"{x:.17g}" for x in table[index])
                lines.append(f"  ({labels}) {values};")
        lines.append("}")
    text = "\n".join(lines) + "\n"
    data = text.encode("utf-8")
    if os.fspath(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    Path(path).write_bytes(data)


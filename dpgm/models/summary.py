"""Parameter tables as text: what every model's ``summary()`` prints, and free-parameter counts.

A summary is a header (what the model is: its kind, variables, free parameters)
followed by *blocks*, each a title line, a header line and one line per row,
separated by blank lines::

    P(tub | asia)
    asia | yes       no
    yes  | 0.05      0.95
    no   | 0.01      0.99

Row labels (one column per row dimension) stand left of the ``|``, values right
of it, one column per label of the column dimension; numbers are printed with
``digits`` significant digits (``inf``, ``-inf`` and ``nan`` as such). The model
kinds build their blocks with :func:`labelled_block` (a labelled ``DataArray``)
or :func:`block` (rows and columns given) and join them with :func:`render`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

__all__ = ["DIGITS", "block", "format_number", "hierarchical_free_parameters", "labelled_block", "render",
           "table_free_parameters", "zeros_blocks"]

DIGITS = 6


def format_number(value: float, digits: int = DIGITS) -> str:
    """``value`` with ``digits`` significant digits (``1e-07``, ``0.25``, ``-inf``)."""
    return f"{float(value):.{digits}g}"


def block(title: str, row_header: Sequence[str], rows: Sequence[Sequence[str]], columns: Sequence[str],
          values: np.ndarray, digits: int = DIGITS) -> str:
    """One table as text: ``rows`` (tuples of labels, one per ``row_header`` name) by ``columns``.

    ``values`` has shape ``(len(rows), len(columns))``.
    """
    values = np.asarray(values, dtype=float).reshape(len(rows), len(columns))
    cells = [[format_number(v, digits) for v in row] for row in values]
    label_widths = [max([len(h), *(len(str(r[i])) for r in rows)]) for i, h in enumerate(row_header)]
    value_widths = [max([len(str(c)), *(len(row[j]) for row in cells)]) for j, c in enumerate(columns)]

    def line(labels: Sequence[str], entries: Sequence[str], align: str) -> str:
        left = "  ".join(f"{str(s):<{w}}" for s, w in zip(labels, label_widths, strict=True))
        right = "  ".join(f"{str(s):{align}{w}}" for s, w in zip(entries, value_widths, strict=True))
        return f"{left} | {right}".rstrip() if left else f"| {right}".rstrip()

    lines = [title, line(row_header, columns, "<")]
    lines += [line(labels, row, ">") for labels, row in zip(rows, cells, strict=True)]
    return "\n".join(lines)


def labelled_block(title: str, table: xr.DataArray, columns: str | None = None, digits: int = DIGITS) -> str:
    """A labelled table as text: one column per label of ``columns`` (default: its last dimension), one row
    per combination of the other dimensions' labels (first dimension slowest); a 0-d table is one value."""
    dims = [str(d) for d in table.dims]
    if not dims:
        return block(title, [], [()], ["value"], np.asarray(table.values).reshape(1, 1), digits)
    columns = dims[-1] if columns is None else columns
    row_dims = [d for d in dims if d != columns]
    ordered = table.transpose(*row_dims, columns)
    labels = {d: [str(s) for s in table.coords[d].values] if d in table.coords else [str(i) for i in
                                                                                      range(table.sizes[d])]
              for d in dims}
    rows = list(itertools.product(*(labels[d] for d in row_dims)))
    return block(title, row_dims, rows, labels[columns], np.asarray(ordered.values).reshape(len(rows), -1), digits)


def zeros_blocks(structural_zeros: xr.DataArray | None, digits: int = DIGITS) -> list[str]:
    """The block of a structural-zero pattern (1 = cell fixed at zero), titled with its scope and how many
    cells it fixes; none without a pattern."""
    if structural_zeros is None:
        return []
    title = (f"structural zeros on ({', '.join(map(str, structural_zeros.dims))}): "
             f"{int(structural_zeros.sum())} cells fixed at zero")
    return [labelled_block(title, structural_zeros.astype(float), digits=digits)]


def render(header: str | Sequence[str], blocks: Sequence[str]) -> str:
    """A summary: the header line(s), then each block after a blank line."""
    head = [header] if isinstance(header, str) else list(header)
    return "\n\n".join(["\n".join(head), *blocks]) if blocks else "\n".join(head)


def table_free_parameters(shapes: Sequence[Sequence[int]]) -> int:
    """Free parameters of conditional probability tables shaped ``(variable, *parents)``: ``(k - 1)`` per
    parent configuration."""
    return int(sum((shape[0] - 1) * math.prod(shape[1:]) for shape in shapes))


def hierarchical_free_parameters(margins: Sequence[Sequence[str]], states: Mapping[str, Sequence[str]]) -> int:
    """Free parameters of the hierarchical model of ``margins``: one per cell of every term in their
    closure under subsets, each axis less its reference state (``prod (k_v - 1)``)."""
    terms = {tuple(sorted(sub)) for m in margins for k in range(1, len(m) + 1) for sub in itertools.combinations(m, k)}
    return int(sum(math.prod(len(states[v]) - 1 for v in term) for term in terms))

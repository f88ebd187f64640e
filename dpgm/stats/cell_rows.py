"""A table of cells x columns held as the rows of the cells one chunk reached, the others zero.

A chunk of 500,000 alarm rows reaches about 1,300 of the 8,704 cells of alarm's
count tables: every bootstrap replicate's tables of the chunk (cells x 201 int32)
are 7 MB dense but 1 MB as those rows. :class:`CellRows` is what a chunk task
returns and the tree reduction adds up (``+``, as :func:`dpgm.stats.engine.add_partials`
adds NumPy arrays); ``numpy.asarray`` gives the dense table.

Examples
--------
>>> import numpy as np
>>> from dpgm.stats.cell_rows import CellRows
>>> a = CellRows(np.array([0, 2]), np.array([[1, 1], [2, 2]]), 4)
>>> b = CellRows(np.array([2, 3]), np.array([[5, 5], [7, 7]]), 4)
>>> np.asarray(a + b).tolist()
[[1, 1], [0, 0], [7, 7], [7, 7]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CellRows"]


class CellRows:
    """The rows ``values[i]`` of cells ``cells[i]`` (ascending) of an ``(n_cells, columns)`` table, others zero.

    Parameters
    ----------
    cells
        The cells held, ascending, no repeats.
    values
        Their rows, ``(len(cells), columns)``.
    n_cells
        Rows of the whole table.
    """

    __slots__ = ("cells", "n_cells", "values")

    def __init__(self, cells: np.ndarray, values: np.ndarray, n_cells: int) -> None:
        if values.ndim != 2 or len(cells) != values.shape[0]:
            raise ValueError(f"{len(cells)} cells for {values.shape[0]} rows of values")
        self.cells, self.values, self.n_cells = cells, values, int(n_cells)

    @property
    def shape(self) -> tuple[int, int]:
        return self.n_cells, self.values.shape[1]

    def __add__(self, other: CellRows) -> CellRows:
        if not isinstance(other, CellRows):
            return NotImplemented
        return CellRows.sum_of([self, other])

    @classmethod
    def sum_of(cls, parts: list[CellRows]) -> CellRows:
        """The sum of several (one union of their cells, each part added once)."""
        first = parts[0]
        if any(p.shape != first.shape for p in parts):
            raise ValueError(f"tables of shapes {sorted({p.shape for p in parts})} do not add up")
        dtype = np.result_type(*(p.values for p in parts))
        if all(np.array_equal(p.cells, first.cells) for p in parts[1:]):
            return cls(first.cells, sum((p.values for p in parts[1:]), first.values.astype(dtype)), first.n_cells)
        cells = np.unique(np.concatenate([p.cells for p in parts]))
        values = np.zeros((len(cells), first.values.shape[1]), dtype=dtype)
        for part in parts:
            values[np.searchsorted(cells, part.cells)] += part.values
        return cls(cells, values, first.n_cells)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        dense = np.zeros(self.shape, dtype=dtype or self.values.dtype)
        dense[self.cells] = self.values
        return dense

    def __reduce__(self):
        return CellRows, (self.cells, self.values, self.n_cells)

"""Labelled results as a Zarr store that ``xarray.open_zarr`` reads back as written.

A model store (:mod:`dpgm.data.table_store`) renames its tables and keeps its labels in
attributes, for dpgm to read; a results store, such as the replicates ``dpgm bootstrap
--out`` writes, is for anyone: the ``xarray.Dataset`` itself in Zarr v3, its variables,
dimensions, labels and attributes as they are, so ``xr.open_zarr(path)`` gives it back.

* Names are kept as they are (``table:asia``, ``a,b``, ``coefficients.c``). A name a Zarr
  store would read as a path (a ``/`` or ``\\``, dots only), one starting with ``__``
  (reserved by the format) or holding a control character is refused
  (:func:`dpgm.data.names.problem`), never changed: dpgm's names of results are made of
  variable names, which its datasets never let be such names.
* String labels are stored as Zarr v3's variable-length strings (read back as NumPy
  strings, equal to the labels): the fixed-width NumPy type has no Zarr v3 specification
  yet and would warn on every write.
* Like every store dpgm writes (:mod:`dpgm.data.integrity`): each chunk ends with its
  CRC-32C, the group is created marked incomplete and marked complete, with its chunk
  manifest, after its last array (so ``dpgm verify`` checks it); then its metadata are
  consolidated, which ``xr.open_zarr`` reads without a warning.
* Arrays whose first dimension is ``chunk_dim`` are chunked along it, each chunk at most
  :data:`CHUNK_VALUES` values; the others are one chunk.

Examples
--------
>>> import os, tempfile
>>> import xarray as xr
>>> path = os.path.join(tempfile.mkdtemp(), "r.zarr")
>>> ds = xr.Dataset({"table:a": (("replicate", "a"), [[0.25, 0.75], [0.5, 0.5]])},
...                 coords={"a": ["yes", "no"]}, attrs={"random_state": 0})
>>> write_results(ds, path)
>>> back = xr.open_zarr(path)
>>> back["table:a"].values.tolist(), back["a"].values.tolist(), back.attrs["random_state"]
([[0.25, 0.75], [0.5, 0.5]], ['yes', 'no'], 0)
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import xarray as xr

from dpgm.data.integrity import COMPLETE, checksum_codec, mark_complete
from dpgm.data.names import problem
from dpgm.data.schema import ROW

__all__ = ["CHUNK_VALUES", "write_results"]

CHUNK_VALUES = 1 << 20
"""Values per chunk of an array chunked along ``chunk_dim``, at most (8 MiB of float64)."""


def write_results(ds: xr.Dataset, path: str | os.PathLike[str], *, chunk_dim: str = "replicate",
                  storage_options: dict[str, Any] | None = None) -> None:
    """Write ``ds`` as a new Zarr v3 store at ``path`` (see the module's docstring).

    Raises
    ------
    ValueError
        A variable's name the store cannot hold as it is, naming it.
    FileExistsError
        Something is at ``path`` already (the caller writes beside and swaps).
    """
    import zarr
    from zarr.codecs import ZstdCodec

    for name in ds.variables:
        why = None if name == ROW else problem(str(name))
        if why is not None:
            raise ValueError(f"cannot store the results' variable {name!r}: it {why}")
    ds = ds.copy()
    ds = ds.assign_coords({name: coord.astype(object) for name, coord in ds.coords.items() if coord.dtype.kind == "U"})
    ds.attrs = {**ds.attrs, COMPLETE: False}  # marked complete after the last array
    encoding: dict[str, dict[str, Any]] = {}
    for name, variable in ds.variables.items():
        variable.encoding = {}
        encoding[str(name)] = {"compressors": [ZstdCodec(), checksum_codec()]}
        if name in ds.data_vars and variable.dims and variable.dims[0] == chunk_dim:
            entries = math.prod(variable.shape[1:])
            along = max(1, min(variable.shape[0], CHUNK_VALUES // max(entries, 1)))
            encoding[str(name)]["chunks"] = (along, *variable.shape[1:])
    path = os.fspath(path)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
        ds.to_zarr(path, mode="w-", zarr_format=3, consolidated=False, encoding=encoding,
                   storage_options=storage_options)
        mark_complete(path, storage_options)
        zarr.consolidate_metadata(zarr.open_group(path, mode="r+", storage_options=storage_options).store)

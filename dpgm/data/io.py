"""Opening and writing datasets in Zarr v3 stores, and in-memory conversions."""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from dpgm.data.claim import claim, location, writing
from dpgm.data.columns import ZarrStore
from dpgm.data.encoding import column_encoding, stored_chunk_rows, zarr_encoding
from dpgm.data.integrity import COMPLETE, check_complete, mark_complete
from dpgm.data.kinds import (
    REPORT,
    ColumnKind,
    ConversionReport,
    check_options,
    code_lookup,
    decide,
    series_column,
)
from dpgm.data.manifest import (
    MANIFEST,
    SCHEMA,
    ChunkFiles,
    ChunkRecord,
    added_records,
    check_chunks,
    check_records,
    dropped_records,
)
from dpgm.data.manifest_store import open_store
from dpgm.data.names import check_columns, check_variables, pandas_rename
from dpgm.data.schema import ROW, SCHEMA_VERSION, WEIGHT, Schema, smallest_code_dtype, state_attrs
from dpgm.errors import DataError, DpgmWarning, StoreUnreachable, unreachable

__all__ = [
    "add_variables",
    "from_pandas",
    "from_table",
    "open_dataset",
    "to_pandas",
    "write_dataset",
    "column_encoding",
    "zarr_encoding",
]


def _quiet_zarr():
    """Zarr v3 warns about consolidated metadata it does not use: keep that out of user output."""
    context = warnings.catch_warnings()
    context.__enter__()
    warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
    # a directory without zarr.json: open_dataset refuses it by name if it is a recorded variable
    warnings.filterwarnings("ignore", message=".*not recognized as a component of a Zarr hierarchy.*")
    return context


def open_dataset(
    path_or_url: str | os.PathLike[str],
    *,
    chunk_rows: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> xr.Dataset:
    """Open a dpgm dataset lazily (dask-backed) from a Zarr store.

    Parameters
    ----------
    path_or_url
        A local path or an fsspec URL (``s3://…``, ``gs://…``, ``memory://…``).
    chunk_rows
        Rows per Dask chunk; by default one chunk per Zarr chunk. Use a multiple of
        the Zarr chunk size.
    storage_options
        Passed to fsspec for URLs.

    Returns
    -------
    xarray.Dataset
        Categorical codes stay integers (``-1`` = missing); nothing is read yet
        beyond metadata.

    Raises
    ------
    FileNotFoundError
        No store at the path.
    DataError
        The store is not a valid dpgm dataset (see :class:`dpgm.data.Schema`), its
        writer marked it incomplete, its metadata cannot be read, a variable its
        ``variables`` attribute records has no array, or an array's metadata (labels,
        dtype, shape, chunking, fill value) changed after its writer marked it complete
        (see :mod:`dpgm.data.integrity`). Reading a chunk that the store's manifest
        records but whose file is gone raises a ``DataError`` too, naming the variable,
        the chunk and the file.
    """
    path = os.fspath(path_or_url)
    if "://" not in path and not os.path.exists(path):
        raise FileNotFoundError(f"no dataset at {path!r}")
    where = location(path)  # absolute: workers running in another folder read the same store
    chunks: Any = {} if chunk_rows is None else {ROW: int(chunk_rows)}
    context = _quiet_zarr()
    try:
        store = open_store(where, storage_options)  # every Zarr read of it is held to its manifest, once checked
        ds = xr.open_zarr(
            store,
            consolidated=False,
            chunks=chunks,
            mask_and_scale=False,
            decode_times=False,
        )
        version = _zarr_format(store)
    except FileNotFoundError:
        raise
    except Exception as error:  # unreadable metadata (truncated, not JSON, not Zarr v3)
        if (failure := unreachable(error)) is not None:
            raise StoreUnreachable(f"cannot reach the store of {path!r}: {_one_line(failure)}") from None
        raise DataError(f"cannot open {path!r} as a Zarr dataset: {_one_line(error)}") from None
    finally:
        context.__exit__(None, None, None)
    if version != 3:  # whatever the installed Zarr still reads: dpgm's checksums and manifest are v3's
        raise DataError(f"{path!r} is a Zarr v{version} store; dpgm reads the Zarr v3 stores it writes: rewrite it "
                        "with dpgm.write_dataset(xarray.open_zarr(path), new_path) or dpgm convert")
    check_complete(ds.attrs, path, "dataset")
    ds = _listed_variables(ds, path)
    chunks = check_records(ds.attrs, path, storage_options, map(str, ds.variables))
    Schema.from_dataset(ds)
    if chunks is not None:
        _check_loaded(ds, path, storage_options, chunks)
        store.records = chunks
    for key in (MANIFEST, SCHEMA):  # they describe this store's files: never copied to another store's
        ds.attrs.pop(key, None)
    ds.encoding["dpgm_store"] = ZarrStore(
        path=where,
        storage_options=storage_options,
        names={str(v): ds.variables[v].data.name for v in ds.data_vars},
        token=uuid.uuid4().hex,
    )
    return ds


def _check_loaded(ds: xr.Dataset, path: str, storage_options: dict[str, Any] | None,
                  chunks: dict[str, ChunkRecord]) -> None:
    """Arrays xarray read while opening (index coordinates), before the store held reads to the
    manifest: every chunk the manifest records is there (the lazy arrays are checked as read)."""
    files = ChunkFiles(path, storage_options)
    for name, variable in ds.variables.items():
        if not hasattr(variable.data, "dask") and str(name) in chunks:
            record = chunks[str(name)]
            check_chunks(files, record, record.all_chunks())


def _zarr_format(store: Any) -> int:
    """The Zarr format version of the group at ``store`` (2 or 3)."""
    import zarr

    return int(zarr.open_group(store, mode="r").metadata.zarr_format)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _listed_variables(ds: xr.Dataset, path: str) -> xr.Dataset:
    """The store's variables in the order its ``variables`` attribute records them.

    A listed variable without an array (its ``zarr.json`` lost) is refused; arrays
    the list does not record (a write of added variables that never finished) are
    left out with a warning.
    """
    listed = ds.attrs.get("variables")
    if not isinstance(listed, list):
        return ds
    found = set(map(str, ds.data_vars))
    missing = [v for v in listed if v not in found]
    if missing:
        raise DataError(
            f"the store {path!r} records this variable but has no array for it (its metadata "
            f"{os.path.join(path, missing[0], 'zarr.json')!r} is missing); restore it or rewrite the store",
            variable=missing[0],
        )
    unlisted = sorted(found - set(listed))
    if unlisted:
        warnings.warn(
            f"ignoring arrays {unlisted} of {path!r}: the store does not record them as variables "
            "(left by an unfinished write; write them again)",
            DpgmWarning,
            stacklevel=3,
        )
    return ds[listed]


def write_dataset(
    ds: xr.Dataset,
    path: str | os.PathLike[str],
    *,
    chunk_rows: int = 1_000_000,
    mode: str = "w-",
    storage_options: dict[str, Any] | None = None,
    compute: bool = True,
):
    """Write a dataset to a Zarr v3 store, chunked along ``row``.

    Parameters
    ----------
    ds
        A dataset in dpgm's format (see :func:`from_pandas`, :func:`from_table`).
        Dask-backed datasets are written chunk by chunk in parallel.
    path
        Local path or fsspec URL.
    chunk_rows
        Rows per Zarr chunk (and per Dask chunk on write); cut to the rows of ``ds`` if longer,
        since Zarr decodes whole chunks.
    mode
        ``"w-"`` refuses to overwrite (default), ``"w"`` replaces an existing store
        once the new one is complete.
    storage_options
        Passed to fsspec for URLs.
    compute
        If False, only the metadata is written and a dask object is returned:
        computing it writes the chunks, then marks the store complete.

    Raises
    ------
    DataError
        The dataset is not in dpgm's format, or a variable's name cannot be stored
        (``/``, dots only, ``__...``: :func:`dpgm.data.names.problem`).
    FileExistsError
        The store exists and ``mode`` is ``"w-"``; :class:`~dpgm.data.claim.OutputBusy`
        (a ``FileExistsError``) if another writer holds it.

    Notes
    -----
    The store is created marked incomplete (``dpgm_complete: false``) and marked
    complete only after its last chunk is written, so a write killed midway
    leaves a store that :func:`open_dataset` refuses. The output is claimed for
    the write (:mod:`dpgm.data.claim`: a second writer is refused); ``mode="w"``
    over an existing store writes the new one beside it and swaps the two only
    once it is complete, so a failed write leaves the old store as it was (with
    ``compute=False`` an existing store is refused: the swap could not wait for
    the chunks).
    """
    Schema.from_dataset(ds)
    check_variables(map(str, ds.data_vars), "dataset variable", hint="ds.rename({old: new})")
    chunk_rows = int(chunk_rows)
    if chunk_rows <= 0:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows!r}")
    with writing(path, mode=mode, storage_options=storage_options) as target:
        if not compute and target != location(path):
            raise ValueError(f"mode='w' with compute=False cannot replace the existing store {os.fspath(path)!r} "
                             "safely; write with compute=True, or remove it first")
        written = create_store(ds, target, chunk_rows, storage_options, compute=compute)
        if compute:
            mark_complete(target, storage_options)
    if compute:
        return written
    return _then(written, _mark_complete, target, storage_options)


def create_store(ds: xr.Dataset, target: str, chunk_rows: int, storage_options: dict[str, Any] | None, *,
                 compute: bool = False):
    """Create the store ``target`` (which must not exist: claimed by :func:`dpgm.data.claim.writing`) marked
    incomplete; with ``compute`` write the chunks too. The caller marks it complete after its last chunk.

    A chunk is never longer than the data (``chunk_rows`` is cut to the row count): Zarr stores and
    decodes whole chunks, so 100 rows in a chunk of 10⁶ would be read back, on every pass, as a
    decoded array of 10⁶ rows (``benchmarks/results/small_chunks.md``). A caller splitting its writes
    by the uncut ``chunk_rows`` then writes that one chunk whole, as before."""
    chunk_rows = stored_chunk_rows(chunk_rows, int(ds.sizes.get(ROW, 0)))
    out = ds.copy()
    out.attrs = {**ds.attrs, "dpgm_schema_version": SCHEMA_VERSION, "variables": list(map(str, ds.data_vars)),
                 COMPLETE: False}
    if any(getattr(a.data, "chunks", None) is not None for a in ds.data_vars.values()):
        out = out.chunk({ROW: chunk_rows})
    for array in out.data_vars.values():
        array.encoding = {}
    context = _quiet_zarr()
    try:
        return out.to_zarr(
            target,
            mode="w-",
            zarr_format=3,
            consolidated=False,
            encoding=zarr_encoding(out, chunk_rows),
            storage_options=storage_options,
            compute=compute,
        )
    finally:
        context.__exit__(None, None, None)


def _then(written: Any, finish: Any, *args: Any):
    """A dask object that runs ``written`` (the chunk writes), then ``finish(written, *args)``."""
    import dask

    token = dask.base.tokenize(written, finish, *args)
    return dask.delayed(finish, pure=True)(written, *args, dask_key_name=f"dpgm-finish-write-{token}")


def _mark_complete(written: Any, path: str, storage_options: dict[str, Any] | None) -> None:
    mark_complete(path, storage_options)


def _list_added(written: Any, path: str, storage_options: dict[str, Any] | None, order: list[str],
                added: list[str]) -> None:
    """List the added variables, and record their chunks and schema, once their chunks are written."""
    import zarr

    group = zarr.open_group(path, mode="r+", storage_options=storage_options)
    group.attrs.update({"variables": order, **added_records(dict(group.attrs), path, storage_options, added)})


def add_variables(
    new: xr.Dataset,
    path: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    compute: bool = True,
):
    """Add variables (e.g. posteriors computed by a pass) to an existing dataset store.

    Parameters
    ----------
    new
        Variables with dimension ``row`` of the store's length, chunked like the store
        (each Dask chunk lands in whole Zarr chunks; writes run in parallel).
    path
        The dataset's Zarr store.
    overwrite
        Replace variables of the same names; otherwise they are refused.
    storage_options
        Passed to fsspec for URLs.
    compute
        If False, return the dask object that writes them.

    Raises
    ------
    DataError
        A name already taken (without ``overwrite``), or a row count that differs.
    """
    if not compute:
        return _add_variables(new, path, overwrite, storage_options, compute=False)
    # one writer at a time; a writer that died is taken over (the store is checked when opened)
    with claim(path, take_stale=True, storage_options=storage_options):
        return _add_variables(new, path, overwrite, storage_options, compute=True)


def _add_variables(new: xr.Dataset, path: str | os.PathLike[str], overwrite: bool,
                   storage_options: dict[str, Any] | None, *, compute: bool):
    import zarr

    existing = open_dataset(path, storage_options=storage_options)
    path = location(path)
    taken = sorted(set(map(str, new.data_vars)) & set(map(str, existing.data_vars)))
    if taken and not overwrite:
        raise DataError(f"variables {taken} already exist in {os.fspath(path)!r}; pass overwrite=True")
    if new.sizes.get(ROW) != existing.sizes[ROW]:
        raise DataError(f"new variables have {new.sizes.get(ROW)} rows, the dataset {existing.sizes[ROW]}")
    group = zarr.open_group(os.fspath(path), mode="r+", storage_options=storage_options)
    order = [str(v) for v in existing.data_vars if str(v) not in taken] + [str(v) for v in new.data_vars]
    kept = dict(group.attrs)  # xarray's append replaces the group's attributes with the new dataset's
    if taken:  # the replaced variables are unlisted (and unrecorded) before they go, listed again once rewritten
        kept.update({"variables": order[: len(order) - len(new.data_vars)], **dropped_records(kept, taken)})
        group.attrs.update(kept)
    for name in map(str, new.data_vars):  # replaced, or left by an unfinished earlier write
        if name in group:
            del group[name]
    chunk_rows = int(existing[next(iter(existing.data_vars))].encoding.get("chunks", (existing.sizes[ROW],))[0])
    new = new.chunk({ROW: chunk_rows})
    for array in new.data_vars.values():
        array.encoding = {}
    new.attrs = kept
    context = _quiet_zarr()
    try:
        written = new.to_zarr(os.fspath(path), mode="a", consolidated=False, storage_options=storage_options,
                              encoding=zarr_encoding(new, chunk_rows), compute=compute)
    finally:
        context.__exit__(None, None, None)
    added = [str(v) for v in new.data_vars]
    if compute:  # listed (and recorded) only once written: an unfinished write adds no variable
        _list_added(written, os.fspath(path), storage_options, order, added)
        return written
    return _then(written, _list_added, os.fspath(path), storage_options, order, added)


def _declared(series: pd.Series) -> tuple[np.ndarray, tuple[str, ...]]:
    """Codes and labels of a pandas ``Categorical``: its declared categories, in their order."""
    states = tuple(str(s) for s in series.cat.categories)
    if len(set(states)) != len(states):
        raise DataError(f"two states print as the same label: {states!r}", variable=str(series.name))
    dtype = smallest_code_dtype(len(states), str(series.name))
    return series.cat.codes.to_numpy().astype(dtype), states


def from_pandas(
    df: pd.DataFrame,
    *,
    weight: str | None = None,
    categorical: Sequence[str] = (),
    continuous: Sequence[str] = (),
    na_values: Sequence[str] = (),
    label_order: str = "sorted",
) -> xr.Dataset:
    """A pandas DataFrame as an in-memory dpgm dataset, by the rule :func:`dpgm.convert` follows.

    Each column's kind is decided as :mod:`dpgm.data.kinds` says, so a CSV converted by
    :func:`dpgm.convert` and the frame ``pandas.read_csv`` reads from it give the same
    dataset: float columns are continuous (NaN = missing); integer columns are
    continuous above 50 distinct values, else categorical; text and boolean columns are
    categorical; a text column of numbers but for a few tokens is refused (read the
    tokens as missing with ``na_values`` or name the column categorical). Labels are
    sorted (numbers numerically, then text as strings) unless ``label_order="appearance"``;
    a pandas ``Categorical`` keeps its declared categories, in their order. Missing
    categorical values become code ``-1``. What was decided and why is the dataset's
    :class:`~dpgm.data.ConversionReport` (``ConversionReport.from_dataset(ds)``).

    pandas reads an integer column with gaps as floats (so continuous); read the file
    with ``dtype_backend="numpy_nullable"`` to keep it integer, as :func:`dpgm.convert` does.

    Parameters
    ----------
    df
        The table, one row per observation.
    weight
        Column of frequency weights, stored as ``weight``; a column already named
        ``weight`` is taken as weights too.
    categorical, continuous
        Columns whose kind is given rather than decided by the rule.
    na_values
        Values read as missing (as text, or numbers equal to them), e.g. ``["NA?"]``.
    label_order
        ``"sorted"`` or ``"appearance"``.

    Returns
    -------
    xarray.Dataset

    Raises
    ------
    DataError
        A column of numbers but for a few text tokens (naming the column, rows and
        tokens), text in a column named continuous, an unknown column named.
    ConfigError
        An unknown ``label_order``, or a column named both categorical and continuous.

    Examples
    --------
    >>> import pandas as pd
    >>> ds = from_pandas(pd.DataFrame({"smoker": ["yes", "no", None], "kids": [10, 2, 2]}))
    >>> ds.smoker.values.tolist(), ds.smoker.attrs["states"], ds.kids.attrs["states"]
    ([1, 0, -1], ['no', 'yes'], ['2', '10'])
    """

    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame, got {type(df).__name__}")
    categorical, continuous, missing, label_order = check_options(categorical, continuous, na_values, label_order)
    names = list(map(str, df.columns))
    unknown = sorted((set(categorical) | set(continuous)) - set(names))
    if unknown:
        raise DataError(f"columns {unknown} are not in the frame; columns: {names}")
    if weight is not None and weight not in df.columns:
        raise DataError(f"weight column {weight!r} not in the frame; columns: {names}")
    check_columns(names, weight=None if weight is None else str(weight), how=pandas_rename)
    data_vars = {}
    report = []
    for column in df.columns:
        series = df[column]
        name = str(column)
        if name == WEIGHT or column == weight:
            values = series.to_numpy(dtype=np.float64, na_value=np.nan)
            _check_weights(values, 0)
            data_vars[WEIGHT] = xr.Variable(ROW, values)
            report.append(ColumnKind(name, WEIGHT, "weight", "frequency weights"))
            continue
        if isinstance(series.dtype, pd.CategoricalDtype) and name not in continuous:
            codes, states = _declared(series)
            data_vars[name] = xr.Variable(ROW, codes, attrs=state_attrs(states, codes.dtype))
            report.append(ColumnKind(name, name, "categorical",
                                     f"pandas categorical, {len(states)} categories (their order)"))
            continue
        if isinstance(series.dtype, pd.CategoricalDtype):
            series = series.astype(object)
        read = series_column(series, missing, with_labels=name in categorical)
        plan = decide(name, read.summary(), categorical=name in categorical, continuous=name in continuous,
                      label_order=label_order)
        report.append(plan.report)
        if plan.labels is None:
            data_vars[name] = xr.Variable(ROW, read.numbers)
            continue
        dtype = smallest_code_dtype(len(plan.labels), name)
        codes = code_lookup(plan, read.labels)[read.indices].astype(dtype)
        data_vars[name] = xr.Variable(ROW, codes, attrs=state_attrs(plan.labels, dtype))
    attrs = {"dpgm_schema_version": SCHEMA_VERSION, REPORT: ConversionReport(tuple(report)).to_attrs()}
    return xr.Dataset(data_vars, attrs=attrs)


def to_pandas(ds: xr.Dataset) -> pd.DataFrame:
    """A dataset as a DataFrame with categorical columns (loads it into memory: small data only)."""
    schema = Schema.from_dataset(ds)
    columns = {}
    for name in ds.data_vars:
        values = np.asarray(ds[name].values)
        variable = schema.get(str(name))
        if variable is not None and variable.categorical:
            columns[name] = pd.Categorical.from_codes(values.astype(np.int64), categories=list(variable.states))
        else:
            columns[name] = values
    return pd.DataFrame(columns)


def _check_weights(values: np.ndarray, chunk: int) -> None:
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        first = int(np.argmax(bad))
        raise DataError(
            f"weights must be finite and nonnegative; row {first} has {values[first]!r}",
            variable=WEIGHT,
            chunk=chunk,
        )


def from_table(counts: xr.DataArray) -> xr.Dataset:
    """A labelled contingency table as a weighted dataset, one row per cell.

    Parameters
    ----------
    counts
        Nonnegative counts; dims are variable names and coords their state labels.

    Returns
    -------
    xarray.Dataset
        One row per cell (zero cells included) with the cell's codes and its
        count as ``weight``.

    Examples
    --------
    >>> import xarray as xr
    >>> table = xr.DataArray([[3, 1], [0, 2]], dims=["a", "b"],
    ...                      coords={"a": ["x", "y"], "b": ["u", "v"]})
    >>> from_table(table).weight.values.tolist()
    [3.0, 1.0, 0.0, 2.0]
    """
    _check_table(counts)
    values = np.asarray(counts.values, dtype=np.float64)
    _check_weights(values.ravel(), 0)
    index = np.indices(values.shape).reshape(values.ndim, -1)
    data_vars = {}
    for axis, dim in enumerate(counts.dims):
        states = [str(s) for s in counts.coords[dim].values]
        dtype = smallest_code_dtype(len(states), str(dim))
        data_vars[str(dim)] = xr.Variable(ROW, index[axis].astype(dtype), attrs=state_attrs(states, dtype))
    data_vars[WEIGHT] = xr.Variable(ROW, values.ravel())
    return xr.Dataset(data_vars, attrs={"dpgm_schema_version": SCHEMA_VERSION})


def _check_table(counts: xr.DataArray) -> None:
    if not isinstance(counts, xr.DataArray):
        raise TypeError(f"expected an xarray.DataArray of counts, got {type(counts).__name__}")
    for dim in counts.dims:
        if dim not in counts.coords:
            raise DataError("the table has no state labels (coordinate) for this dimension", variable=str(dim))
        if str(dim) == WEIGHT:
            raise DataError("a table dimension may not be called 'weight'", variable=WEIGHT)

"""Conversion of CSV and Parquet files (one, a directory, or a glob) to Zarr datasets, on the cluster.

The input is cut into *blocks*: a Parquet row group, a byte range of an
uncompressed CSV (``blocksize`` bytes at most, a sixteenth of the input down to
16 MiB, cut at line ends), or a whole compressed
CSV. Two passes, one task per block each:

1. **discover**: each block reports, per column, a :class:`~dpgm.data.kinds.Summary`
   (distinct values in order of first appearance, rows of numbers, of text and
   missing, the first text tokens and their rows) and its row count; the driver
   merges them in block order and decides each column's kind and labels from the
   merged summary of the whole input (:func:`dpgm.data.kinds.decide`), so neither
   depends on how the input is cut into blocks;
2. **encode**: each block is read again and encoded with the final labels
   (int8 codes up to 127 states, else int16) and writes the Zarr chunks that
   lie wholly inside it; a chunk shared by neighbouring blocks is written by one
   small task from their pieces (no rechunking graph, one write per chunk).

Text columns are read dictionary-encoded (pyarrow's CSV reader builds the
dictionaries while parsing; Parquet's own dictionary pages are kept), other
columns get one ``pyarrow.compute.dictionary_encode``; only the dictionary is
then looked at value by value (labels, number parsing), and the codes are one
``take`` of a small lookup table, written straight to the Zarr chunks.

So conversion scales with workers, and nothing holds more than a block. Column
kinds and label order follow :mod:`dpgm.data.kinds` (the rule :func:`dpgm.from_pandas`
follows too): floats continuous, integers continuous above 50 distinct values,
text categorical, labels sorted; a column of numbers but for a few text tokens is
refused before anything is written. A value the first pass did not see (the input
changed in between) is an error naming the column, row and chunk.
The store is marked complete after its last chunk and its labels (see
:mod:`dpgm.data.integrity`): a conversion that stops midway leaves a store that
readers refuse.

CSV byte ranges are cut at newlines: a quoted field holding a line break would be
split (as in ``dask.dataframe.read_csv``); give such files whole
(``blocksize=None``).
"""

from __future__ import annotations

import math
import operator
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from dpgm.data.kinds import (
    REPORT,
    Column,
    ConversionReport,
    Missing,
    Plan,
    Summary,
    check_options,
    code_lookup,
    decide,
    float_column,
    labelled_column,
)
from dpgm.data.manifest import stored_digests
from dpgm.data.schema import ROW, WEIGHT, state_attrs
from dpgm.errors import DataError

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["convert", "default_chunk_rows", "input_variables"]

_CSV = (".csv", ".csv.gz", ".tsv", ".tsv.gz", ".csv.bz2", ".csv.zst")
_PARQUET = (".parquet", ".pq")
_COMPRESSED = (".gz", ".bz2", ".zst")


def default_chunk_rows(n_rows: int, *, largest: int = 1_000_000, smallest: int = 10_000) -> int:
    """Rows per chunk: at most ``largest`` and at most a sixteenth of the rows, so a cluster of
    up to 8 workers gets at least two chunks each; never below ``smallest`` rows (tiny data:
    one chunk). Independent of the cluster, so generated data stay reproducible anywhere.

    Examples
    --------
    >>> default_chunk_rows(10**6), default_chunk_rows(10**9), default_chunk_rows(1000)
    (62500, 1000000, 1000)
    """
    return int(max(min(largest, math.ceil(n_rows / 16)), min(n_rows, smallest), 1))


@dataclass(frozen=True)
class _Block:
    """A piece of the input one task reads: a row group, a byte range or a whole file."""

    path: str
    kind: str  # "parquet" or "csv"
    row_group: int = -1
    start: int = 0
    end: int = -1  # -1: to the end of the file


def _files(source: str, storage_options: dict | None) -> list[str]:
    import fsspec

    fs, _, paths = fsspec.get_fs_token_paths(source, storage_options=storage_options)
    if any(ch in source for ch in "*?["):
        files = sorted(paths)
    elif fs.isdir(paths[0]):
        files = sorted(p for p in fs.find(paths[0]) if p.endswith(_CSV + _PARQUET))
    elif fs.exists(paths[0]):
        files = [paths[0]]
    else:
        raise FileNotFoundError(f"no file at {source!r}")
    if not files:
        raise FileNotFoundError(f"no .csv or .parquet files at {source!r}")
    protocol = fs.protocol[0] if isinstance(fs.protocol, tuple) else fs.protocol
    if "://" in source:
        files = [f if "://" in f else f"{protocol}://{f}" for f in files]
    kinds = {"parquet" if f.endswith(_PARQUET) else "csv" if f.endswith(_CSV) else "" for f in files}
    if "" in kinds:
        bad = next(f for f in files if not f.endswith(_CSV + _PARQUET))
        raise ValueError(f"cannot tell the format of {bad!r}: expected .csv, .csv.gz, .tsv or .parquet")
    if len(kinds) > 1:
        raise ValueError(f"{source!r} mixes CSV and Parquet files; convert them separately")
    return files


BLOCKS = 16
"""Byte ranges an uncompressed CSV input is cut into at least (as chunks: several per worker) ..."""
SMALLEST_BLOCK = 16 * 2**20
"""... unless they would be smaller than this (16 MiB): a small file is a few tasks."""


def _blocks(files: list[str], blocksize: int | None, storage_options: dict | None) -> list[_Block]:
    import fsspec
    import pyarrow.parquet as pq

    sizes = {path: fsspec.filesystem(fsspec.utils.get_protocol(path), **(storage_options or {})).size(path)
             for path in files if not path.endswith(_PARQUET)}
    if blocksize is not None and sizes:
        uncompressed = sum(size for path, size in sizes.items() if not path.endswith(_COMPRESSED))
        blocksize = max(min(blocksize, max(uncompressed // BLOCKS, SMALLEST_BLOCK)), 1)
    blocks = []
    for path in files:
        if path.endswith(_PARQUET):
            with fsspec.open(path, "rb", **(storage_options or {})) as handle:
                groups = pq.ParquetFile(handle).num_row_groups
            blocks += [_Block(path, "parquet", row_group=g) for g in range(max(groups, 1))]
            continue
        size = sizes[path]
        if blocksize is None or path.endswith(_COMPRESSED) or size <= blocksize:
            blocks.append(_Block(path, "csv"))
        else:
            blocks += [_Block(path, "csv", start=s, end=min(s + blocksize, size)) for s in range(0, size, blocksize)]
    return blocks


# what pandas' readers take for missing (``keep_default_na``): the same input gives the same store
_NULL_STRINGS = ["", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>",
                 "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"]


def _csv_names(handle, delimiter: str, path: str) -> tuple[bytes, list[str]]:
    """The header line of a CSV file and its column names."""
    import csv

    header = handle.readline()
    if not header.strip():
        raise DataError(f"{path!r} is empty: no header line with the column names")
    return header, next(csv.reader([header.decode("utf-8-sig").rstrip("\r\n")], delimiter=delimiter))


def _read_csv(source, names: list[str], delimiter: str):
    import pyarrow as pa
    import pyarrow.csv as pcsv

    # text read straight into dictionaries: each distinct value is hashed once, no string per row
    text = pa.dictionary(pa.int32(), pa.string())
    return pcsv.read_csv(
        source, parse_options=pcsv.ParseOptions(delimiter=delimiter),
        convert_options=pcsv.ConvertOptions(column_types={n: text for n in names},
                                            null_values=_NULL_STRINGS, strings_can_be_null=True,
                                            quoted_strings_can_be_null=True))


def _read_block(block: _Block, storage_options: dict | None):
    """The block's rows as a ``pyarrow.Table``: every CSV column as dictionary-encoded text
    (null = missing), Parquet columns in their stored types (text columns dictionary-encoded)."""
    import fsspec

    if block.kind == "parquet":
        import pyarrow.parquet as pq

        with fsspec.open(block.path, "rb", **(storage_options or {})) as handle:
            parquet = pq.ParquetFile(handle)
            if not parquet.num_row_groups:
                return parquet.schema_arrow.empty_table()
            text = [f.name for f in parquet.schema_arrow if _is_text(f.type)]
            if text:  # as the file's own dictionary pages hold them: no string per row
                parquet = pq.ParquetFile(handle, read_dictionary=text)
            return parquet.read_row_group(block.row_group)
    import pyarrow as pa

    delimiter = "\t" if block.path.endswith((".tsv", ".tsv.gz")) else ","
    if block.end < 0:
        with fsspec.open(block.path, "rb", compression="infer", **(storage_options or {})) as handle:
            header, names = _csv_names(handle, delimiter, block.path)
            return _read_csv(pa.BufferReader(header + handle.read()), names, delimiter)
    with fsspec.open(block.path, "rb", **(storage_options or {})) as handle:
        header, names = _csv_names(handle, delimiter, block.path)
        start = max(block.start, len(header))
        handle.seek(start - 1)
        if handle.read(1) != b"\n":  # a line that began before this block belongs to the previous one
            handle.readline()
        body = b""
        if handle.tell() < block.end:
            body = handle.read(block.end - handle.tell())
            if not body.endswith(b"\n"):
                body += handle.readline()
    return _read_csv(pa.BufferReader(header + body), names, delimiter)


def _header(path: str, storage_options: dict | None) -> list[str]:
    """The column names of an input file (its header line, its Parquet schema), read on the driver."""
    import fsspec

    if path.endswith(_PARQUET):
        import pyarrow.parquet as pq

        with fsspec.open(path, "rb", **(storage_options or {})) as handle:
            return list(map(str, pq.ParquetFile(handle).schema_arrow.names))
    delimiter = "\t" if path.endswith((".tsv", ".tsv.gz")) else ","
    with fsspec.open(path, "rb", compression="infer", **(storage_options or {})) as handle:
        return _csv_names(handle, delimiter, path)[1]


def _text_of(array):
    """Values of another type as the text pandas would print (bool: "True"), for labels."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(array.type):
        return _text_of(array.dictionary_decode())
    if pa.types.is_boolean(array.type):
        return pc.if_else(array, pa.scalar("True", pa.large_string()), pa.scalar("False", pa.large_string()))
    if pa.types.is_integer(array.type) or pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return array
    text = array.to_pandas().astype("string")  # dates and other types: as pandas prints them
    return pa.array(text, type=pa.large_string(), from_pandas=True)


def _is_text(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _in_order_of_appearance(chunked) -> tuple[np.ndarray, list[str]]:
    """A dictionary-encoded text column as (index of each row's label or -1, labels in order of first appearance)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    unified = chunked.unify_dictionaries()  # one dictionary for all chunks
    if unified.num_chunks == 0:
        return np.empty(0, dtype=np.int64), []
    dictionary = unified.chunk(0).dictionary
    indices = pa.chunked_array([c.indices for c in unified.chunks]).combine_chunks()
    order = pc.unique(pc.drop_null(indices)).to_numpy(zero_copy_only=False).astype(np.int64)
    relabel = np.full(len(dictionary) + 1, -1, dtype=np.int64)  # the last entry: missing
    relabel[order] = np.arange(len(order))
    positions = pc.fill_null(indices, len(dictionary)).to_numpy(zero_copy_only=False)
    return relabel[positions], dictionary.take(pa.array(order, type=pa.int64())).to_pylist()


def _column(chunked, missing: Missing, *, with_labels: bool = True) -> Column:
    """Read one column with pyarrow's kernels: text columns arrive dictionary-encoded (CSV reader,
    Parquet dictionary pages); other columns get one ``dictionary_encode``; then only the dictionary
    is looked at value by value. A float column is read without labels unless ``with_labels``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not isinstance(chunked, pa.ChunkedArray):
        chunked = pa.chunked_array([chunked])
    if pa.types.is_dictionary(chunked.type) and _is_text(chunked.type.value_type):
        indices, labels = _in_order_of_appearance(chunked)
        return labelled_column("text", labels, indices, missing)
    array = chunked.combine_chunks()
    if pa.types.is_floating(array.type) and not with_labels:
        return float_column(pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False), missing)
    kind = array.type
    storage = ("float" if pa.types.is_floating(kind) else "integer" if pa.types.is_integer(kind)
               else "boolean" if pa.types.is_boolean(kind) else "text" if _is_text(kind) or pa.types.is_null(kind)
               else "other")
    if storage not in ("float", "integer"):
        array = _text_of(array)
    encoded = pc.dictionary_encode(array)
    indices = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if storage in ("float", "integer"):  # numbers as the input stores them, labelled as pandas prints them
        values = encoded.dictionary.to_numpy(zero_copy_only=False)
        labels = [str(float(v)) for v in values] if storage == "float" else [str(v) for v in values.tolist()]
        return labelled_column(storage, labels, indices, missing, values=values)
    return labelled_column(storage, [str(v) for v in encoded.dictionary.to_pylist()], indices, missing)


def _discover(block: _Block, storage_options: dict | None, missing: Missing, labelled: frozenset[str]) -> dict:
    """Pass 1 on one block: its rows, its column names, and each column's :class:`Summary`
    (float columns get labels only if ``labelled`` names them)."""
    table = _read_block(block, storage_options)
    twice = sorted({str(n) for n in table.column_names if table.column_names.count(n) > 1})
    if twice:
        raise DataError(f"{block.path!r} has the column {twice[0]!r} twice")
    columns = {str(name): _column(table.column(name), missing, with_labels=str(name) in labelled).summary()
               for name in table.column_names}
    return {"rows": table.num_rows, "names": list(map(str, table.column_names)), "columns": columns}


def _encode(block: _Block, storage_options: dict | None, plan: dict[str, Plan], missing: Missing,
            start: int, chunk_rows: int) -> dict[str, np.ndarray]:
    """Pass 2 on one block (its first row is ``start``): every column's codes (or floats) with the
    final labels. A value the first pass did not see (the input changed between the passes) is
    refused, naming column, row and chunk."""
    table = _read_block(block, storage_options)
    out = {}
    for name, column_plan in plan.items():
        column = _column(table.column(name), missing, with_labels=column_plan.labels is not None)
        if column_plan.labels is None:
            bad = column.first_text_row()
            if bad >= 0:
                row = start + bad
                raise DataError(f"holds text {column.labels[column.indices[bad]]!r} at row {row} where the first "
                                "pass saw only numbers: the input changed during conversion",
                                variable=name, chunk=row // chunk_rows)
            out[column_plan.variable] = column.numbers
            continue
        # the block's labels -> the final ones (a short lookup), then one take over the rows
        lookup = code_lookup(column_plan, column.labels)
        codes = lookup[column.indices]
        unseen = (codes < 0) & (column.indices >= 0)
        if unseen.any():
            row = int(np.argmax(unseen))
            raise DataError(f"holds {column.labels[column.indices[row]]!r} at row {start + row}, a label the first "
                            "pass did not see: the input changed during conversion",
                            variable=name, chunk=(start + row) // chunk_rows)
        out[column_plan.variable] = codes.astype(_dtype(column_plan))
    return out


def _encode_and_write(block: _Block, storage_options: dict | None, plan: dict[str, Plan], missing: Missing,
                      target: str, start: int, stop: int, chunk_rows: int) -> dict[str, dict[str, np.ndarray]]:
    """Pass 2 on one block (rows ``start:stop``): write the chunks that lie wholly inside it
    straight to the store, return the pieces of the chunks it shares with its neighbours."""
    import zarr

    columns = _encode(block, storage_options, plan, missing, start, chunk_rows)
    first_full = -(-start // chunk_rows) * chunk_rows
    last_full = max(stop // chunk_rows * chunk_rows, first_full)
    output = _output_options(target, storage_options)
    group = zarr.open_group(target, mode="r+", storage_options=output)
    edges: dict[str, Any] = {"head": {}, "tail": {}, "digests": {}}
    for name, values in columns.items():
        if last_full > first_full:
            array = group[name]
            array[first_full:last_full] = values[first_full - start:last_full - start]
            edges["digests"].update(stored_digests(target, output, name, array, [
                (k,) for k in range(first_full // chunk_rows, last_full // chunk_rows)]))
        edges["head"][name] = values[: min(first_full, stop) - start]
        edges["tail"][name] = values[max(last_full, first_full) - start:] if last_full < stop else values[:0]
    return edges


def _write_edge(chunk: int, chunk_rows: int, target: str, storage_options: dict | None,
                pieces: list[tuple[int, Any]]) -> dict[str, dict[str, int | None]]:
    """Write one chunk shared by several blocks from their pieces ``(first row, {name: values})``;
    its digests (for the manifest)."""
    import zarr

    output = _output_options(target, storage_options)
    group = zarr.open_group(target, mode="r+", storage_options=output)
    digests = {}
    for name in pieces[0][1]:
        values = np.concatenate([piece[name] for _, piece in sorted(pieces, key=lambda p: p[0])])
        start = chunk * chunk_rows
        array = group[name]
        array[start:start + len(values)] = values
        digests.update(stored_digests(target, output, name, array, [(chunk,)]))
    return digests


def _edge_writes(written: list, offsets: np.ndarray, chunk_rows: int, target: str,
                 storage_options: dict | None) -> list:
    """One task per chunk that no single block holds whole, fed by the blocks' head/tail pieces."""
    import dask

    pieces: dict[int, list] = {}
    for index, task in enumerate(written):
        start, stop = int(offsets[index]), int(offsets[index + 1])
        if stop == start:
            continue
        first_full = -(-start // chunk_rows) * chunk_rows
        last_full = max(stop // chunk_rows * chunk_rows, first_full)
        if start < first_full:  # the head shares chunk start // chunk_rows with earlier blocks
            pieces.setdefault(start // chunk_rows, []).append((start, dask.delayed(operator.getitem)(task, "head")))
        if last_full < stop:  # the tail starts the chunk that later blocks finish
            pieces.setdefault(last_full // chunk_rows, []).append(
                (last_full, dask.delayed(operator.getitem)(task, "tail")))
    return [dask.delayed(_write_edge, pure=True)(chunk, chunk_rows, target, storage_options, parts)
            for chunk, parts in sorted(pieces.items())]


def convert(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    chunk_rows: int | None = None,
    categorical: Sequence[str] = (),
    continuous: Sequence[str] = (),
    na_values: Sequence[str] = (),
    label_order: str = "sorted",
    weight: str | None = None,
    rename: Mapping[str, str] | None = None,
    mode: str = "w-",
    storage_options: dict[str, Any] | None = None,
    blocksize: int | None = 64 * 2**20,
    client: Client | None = None,
    progress: bool | None = None,
) -> xr.Dataset:
    """Convert CSV/TSV (optionally compressed) or Parquet input to a Zarr dataset, on the cluster.

    Each column's kind is decided by the rule of :mod:`dpgm.data.kinds` (shared with
    :func:`dpgm.from_pandas`) from the whole first pass; what was decided and why is the
    returned dataset's :class:`~dpgm.data.ConversionReport`
    (``ConversionReport.from_dataset(ds)``, kept in the attribute ``dpgm_conversion``).

    Parameters
    ----------
    source
        A ``.csv``, ``.csv.gz``, ``.tsv`` or ``.parquet`` file, a directory of such
        files (e.g. a partitioned Parquet folder), or a glob (``"parts/*.csv"``);
        paths or fsspec URLs. Files are read in sorted order and must share their columns.
    target
        The Zarr store to create.
    chunk_rows
        Rows per Zarr chunk; default :func:`default_chunk_rows` of the row count
        (at least 16 chunks of at most 10^6 rows, so every worker gets several).
    categorical, continuous
        Columns whose kind is given rather than decided by the rule.
    na_values
        Values read as missing in every column, besides pandas' defaults (``""``,
        ``NA``, ``NaN``, ``n/a``, ``null``, ...), e.g. ``["NA?", "-"]``; a number
        (``"-999"``) also matches the same number written otherwise (``-999.0``).
    label_order
        ``"sorted"`` (numbers in numeric order, then text as strings) or
        ``"appearance"`` (order of first appearance in the input).
    weight
        Column of frequency weights (a column named ``weight`` is taken as weights too).
    rename
        ``{column: variable}``: the names the input's columns take in the store (the other
        options name input columns). A column named ``row`` or with a name the store cannot
        hold (``/``, dots only, ``__...``) is refused until renamed.
    mode
        ``"w-"`` refuses to overwrite, ``"w"`` writes the new store beside the existing one and
        replaces it only once complete (:func:`dpgm.data.claim.writing`): a failed conversion
        leaves the old store as it was.
    storage_options
        Passed to fsspec, for the input and the store.
    blocksize
        Bytes of uncompressed CSV one task reads at most (None: whole files); smaller
        where that gives the input fewer than 16 blocks, down to 16 MiB, so every
        worker gets several.
    client
        Dask client whose workers read and write the blocks (default: the active
        client, else Dask's threads).
    progress
        Show progress of the two passes. None (default): a bar where stderr is a terminal or in Jupyter, nothing in a script.

    Returns
    -------
    xarray.Dataset
        The new dataset, opened lazily.

    Raises
    ------
    DataError
        Before anything is written: a column name that cannot be a variable (``row``, ``/``,
        dots only, twice in the input, a second weight column), a column of numbers except for a few text tokens
        (naming the column, its first rows holding them, their chunk and the tokens),
        text in a column named continuous or in the weights, too many states, files
        whose columns differ, or no rows.
    ConfigError
        An unknown ``label_order``, or a column named both categorical and continuous.
    FileNotFoundError
        No such file, or no input files in a directory or glob.
    FileExistsError
        ``target`` exists and ``mode`` is ``"w-"``; :class:`~dpgm.data.claim.OutputBusy` if another
        writer holds it.
    """
    from dpgm.data.claim import location, writing
    from dpgm.data.io import open_dataset

    categorical, continuous, missing, label_order = check_options(categorical, continuous, na_values, label_order)
    source, target = os.fspath(source), location(target)
    files = _files(source, storage_options)
    variables = input_variables(files[0], rename=rename, weight=weight, storage_options=storage_options)
    with writing(target, mode=mode, storage_options=_output_options(target, storage_options)) as where:
        _convert(files, where, variables, chunk_rows=chunk_rows, categorical=categorical, continuous=continuous,
                 missing=missing, label_order=label_order, storage_options=storage_options, blocksize=blocksize,
                 client=client, progress=progress, source=source)
    return open_dataset(target, storage_options=_output_options(target, storage_options))


def _output_options(target: str, storage_options: dict | None) -> dict | None:
    """``storage_options`` for the store ``target`` when it is a URL; a local store takes none (the options
    given for a remote input, ``anon`` say, are no Zarr options of a local one)."""
    from dpgm.data.claim import is_remote

    return storage_options if is_remote(target) else None


def input_variables(source: str | os.PathLike[str], *, rename: Mapping[str, str] | None = None,
                    weight: str | None = None, storage_options: dict[str, Any] | None = None) -> dict[str, str]:
    """The variable each column of ``source`` (its first file's header) becomes in :func:`convert`'s store,
    refusing, before any pass, names that cannot be stored and columns that would clash
    (:func:`dpgm.data.names.check_columns`)."""
    from dpgm.data.names import check_columns

    first = _files(os.fspath(source), storage_options)[0]
    return check_columns(_header(first, storage_options), rename=rename, weight=weight)


def _convert(files: list[str], target: str, variables: dict[str, str], *, chunk_rows: int | None,
             categorical: frozenset | Sequence[str], continuous: frozenset | Sequence[str], missing: Missing,
             label_order: str, storage_options: dict | None, blocksize: int | None, client: Client | None,
             progress: bool, source: str) -> None:
    """The two passes of :func:`convert` into the new store ``target`` (claimed), marked complete last."""
    import dask
    import dask.array as dsa

    from dpgm.cluster import compute
    from dpgm.data.integrity import mark_complete
    from dpgm.data.io import create_store
    from dpgm.data.manifest import merge_digests, merge_tree

    blocks = _blocks(files, blocksize, storage_options)
    labelled = frozenset(categorical)
    found = compute(dask.delayed(list)([dask.delayed(_discover, pure=True)(
        b, storage_options, missing, labelled,
        dask_key_name=f"dpgm-convert-discover-{dask.base.tokenize(b, storage_options, missing, labelled)}")
        for b in blocks]), client=client, progress=progress)
    names = found[0]["names"]
    for block, report in zip(blocks, found, strict=True):
        if report["names"] != names:
            raise DataError(f"{block.path!r} has columns {report['names']}, the first file {names}")
    unknown = sorted((set(categorical) | set(continuous)) - set(names))
    if unknown:
        raise DataError(f"columns {unknown} are not in the input; columns: {names}")
    n_rows = sum(r["rows"] for r in found)
    if n_rows == 0:
        raise DataError(f"{source!r} has no rows")
    chunk_rows = int(chunk_rows) if chunk_rows is not None else default_chunk_rows(n_rows)
    if chunk_rows <= 0:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows!r}")
    offsets = np.cumsum([0] + [r["rows"] for r in found])
    plan: dict[str, Plan] = {}
    for name in names:  # decided from the whole first pass: the same whatever the blocks
        is_weight = variables[name] == WEIGHT
        summary = Summary.merge([r["columns"][name] for r in found], offsets[:-1], name)
        plan[name] = decide(name, summary, variable=variables[name],
                            categorical=name in categorical, continuous=name in continuous, weight=is_weight,
                            label_order=label_order, chunk_rows=chunk_rows)
    report = ConversionReport(tuple(p.report for p in plan.values()))
    template = xr.Dataset({
        p.variable: xr.Variable(ROW, dsa.zeros(n_rows, dtype=_dtype(p), chunks=chunk_rows),
                                attrs=state_attrs(p.labels, _dtype(p)) if p.labels is not None else {})
        for p in plan.values()}, attrs={REPORT: report.to_attrs()})
    create_store(template, target, chunk_rows, _output_options(target, storage_options))  # metadata only, incomplete
    written = []
    run = uuid.uuid4().hex
    for index, block in enumerate(blocks):
        # a write is a side effect: keys unique to this run, so a scheduler still holding an earlier
        # identical conversion's results can never skip this one's writes
        token = dask.base.tokenize(block, storage_options, plan, missing, target, chunk_rows, run)
        written.append(dask.delayed(_encode_and_write, pure=True)(
            block, storage_options, plan, missing, target, int(offsets[index]), int(offsets[index + 1]),
            chunk_rows, dask_key_name=f"dpgm-convert-encode-{token}"))
    edges = _edge_writes(written, offsets, chunk_rows, target, storage_options)
    # only the chunks' digests come back: the pieces travel between workers, never through the driver
    digests = compute(merge_tree(edges + [dask.delayed(operator.getitem)(w, "digests") for w in written],
                                 merge_digests, "dpgm-convert-digests", run), client=client, progress=progress)
    mark_complete(target, _output_options(target, storage_options), digests=digests)  # last: after every chunk; the manifest from the digests


def _dtype(plan: Plan) -> str:
    if plan.labels is None:
        return "float64"
    return "int8" if len(plan.labels) <= 127 else "int16"

"""How a column is stored in Zarr: its chunks, fill value and codecs."""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from dpgm.data.integrity import checksum_codec
from dpgm.data.schema import WEIGHT

__all__ = ["column_encoding", "stored_chunk_rows", "zarr_encoding"]


def stored_chunk_rows(chunk_rows: int, n_rows: int) -> int:
    """The rows of a stored chunk: ``chunk_rows``, cut to the ``n_rows`` of the data (at least 1)."""
    return max(min(int(chunk_rows), n_rows), 1)


def zarr_encoding(ds: xr.Dataset, chunk_rows: int) -> dict[str, dict]:
    """Encoding that keeps codes as integers with ``-1`` as the Zarr fill value.

    ``_FillValue: None`` stops xarray from decoding codes to float with NaN, and
    ``fill_value: -1`` makes unwritten chunks read back as missing, not as state 0.
    """
    encoding = {}
    for name, array in ds.data_vars.items():
        encoding[name] = column_encoding(array.dtype, (chunk_rows, *array.shape[1:]), weight=name == WEIGHT)
    return encoding


def column_encoding(dtype: np.dtype, chunks: tuple[int, ...], *, weight: bool = False) -> dict[str, Any]:
    """Zarr encoding of one column: fill value, chunks and compressor.

    Codes are compressed with Blosc LZ4 after bit-shuffling: categorical codes use
    a few bits of each byte, so bit planes compress well (about 5x on 4-state
    int8 codes, a little better than Zarr's default zstd) and decompress about
    twice as fast, which is most of a counting pass. Floats use byte shuffling.
    Every chunk ends with a CRC-32C of its compressed bytes (Zarr's ``crc32c``
    codec), checked on every read.
    """
    from zarr.codecs import BloscCodec

    if np.dtype(dtype).kind in "iu" and not weight:
        compressor = BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle")
        return {"_FillValue": None, "fill_value": -1, "chunks": chunks, "compressors": [compressor, checksum_codec()]}
    compressor = BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")
    return {"_FillValue": None, "fill_value": np.nan, "chunks": chunks, "compressors": [compressor, checksum_codec()]}

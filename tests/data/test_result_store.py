"""``write_results``: a labelled dataset of results in Zarr v3, read back by ``xarray.open_zarr`` as written.

Oracle: the dataset itself (``xr.testing.assert_equal`` after the read; the store adds only dpgm's
completion records) and Zarr's own view of the arrays' chunking and codecs.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import xarray as xr
import zarr

from dpgm.data.result_store import CHUNK_VALUES, write_results


def test_names_labels_and_numbers_come_back_and_large_arrays_are_chunked_along_replicates(tmp_path):
    rng = np.random.default_rng(0)
    ds = xr.Dataset({"table:a": (("replicate", "a"), rng.random((5, 2))),
                     "a,b": (("replicate", "a", "b"), rng.random((5, 2, 3))),
                     "coefficients.c": (("replicate", "parents_of_c"), rng.random((5, 1))),
                     "wide": (("replicate", "cell"), rng.random((5, CHUNK_VALUES // 2))),
                     "converged": ("replicate", [True, False, True, True, True])},
                    coords={"a": ["yes", "no"], "b": np.array(["x", "y", "z"], dtype=object),
                            "parents_of_c": ["a"], "replicate": np.arange(5)},
                    attrs={"random_state": 3, "method": "mle"})
    write_results(ds, tmp_path / "r.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # consolidated: no warning on a plain open
        back = xr.open_zarr(tmp_path / "r.zarr").load()
    xr.testing.assert_equal(back, ds)
    assert back.attrs["dpgm_complete"] is True and back.attrs["random_state"] == 3
    assert back["converged"].dtype == bool
    group = zarr.open_group(tmp_path / "r.zarr", mode="r")
    assert group["wide"].chunks == (2, CHUNK_VALUES // 2) and group["table:a"].chunks == (5, 2)
    assert type(group["table:a"].compressors[-1]).__name__ == "Crc32cCodec"


@pytest.mark.parametrize("name", ["a/b", "..", "__x"])
def test_a_name_the_store_cannot_hold_is_refused_before_anything_is_written(name, tmp_path):
    with pytest.raises(ValueError, match=f"variable {name!r}"):
        write_results(xr.Dataset({name: ("replicate", [1.0, 2.0])}), tmp_path / "r.zarr")
    assert not (tmp_path / "r.zarr").exists()

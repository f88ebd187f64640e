"""Stores in a format dpgm does not write are refused by dpgm itself, whatever the installed Zarr reads.

Zarr-python 3 still opens Zarr v2 stores; a v2 copy of a dpgm dataset (its attributes copied, so it
claims to be complete) has neither the chunk checksums nor the v3 metadata dpgm's integrity checks
rest on. Text (object or string) arrays are no dpgm encoding either.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import dpgm
from dpgm.errors import DataError


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame({"a": rng.choice(["no", "yes"], 500), "b": rng.choice(["lo", "mid", "hi"], 500)})


def test_a_zarr_v2_copy_of_a_dataset_is_refused_naming_the_format(tmp_path):
    frame = _frame()
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "v3.zarr", chunk_rows=100)
    opened = dpgm.open_dataset(tmp_path / "v3.zarr")
    # oracle: pandas' own counts of the v3 store's rows, read through dpgm
    assert int(opened["a"].sum()) == int((frame["a"] == "yes").sum())
    copy = xr.open_zarr(tmp_path / "v3.zarr", mask_and_scale=False).load()
    for array in copy.data_vars.values():
        array.encoding = {}
    copy.to_zarr(tmp_path / "v2.zarr", zarr_format=2, consolidated=False)
    assert xr.open_zarr(tmp_path / "v2.zarr").attrs["dpgm_complete"] is True  # it claims to be complete
    with pytest.raises(DataError, match=r"v2\.zarr' is a Zarr v2 store; dpgm reads the Zarr v3"):
        dpgm.open_dataset(tmp_path / "v2.zarr")


def test_a_text_array_is_refused_naming_the_variable(tmp_path):
    ds = xr.Dataset({"a": ("row", np.array(["x", "y", "x"], dtype=object)),
                     "b": ("row", np.array([0, 1, 0], dtype="int8"), {"states": ["n", "y"]})},
                    attrs={"dpgm_complete": True, "variables": ["a", "b"], "dpgm_schema_version": 1})
    ds.to_zarr(tmp_path / "text.zarr", zarr_format=3, consolidated=False)
    with pytest.raises(DataError, match=r"variable 'a': has dtype .*; expected integer codes"):
        dpgm.open_dataset(tmp_path / "text.zarr")


def test_cli_refuses_a_zarr_v2_store_with_exit_65(tmp_path):
    import subprocess
    import sys

    frame = _frame()
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "v3.zarr", chunk_rows=100)
    copy = xr.open_zarr(tmp_path / "v3.zarr", mask_and_scale=False).load()
    for array in copy.data_vars.values():
        array.encoding = {}
    copy.to_zarr(tmp_path / "v2.zarr", zarr_format=2, consolidated=False)
    result = subprocess.run([sys.executable, "-m", "dpgm.cli", "info", str(tmp_path / "v2.zarr")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 65, result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith("dpgm convert"), result.stderr


@pytest.mark.parametrize("writer", ["write_dataset", "sample_bayesian_network", "convert"])
def test_a_store_smaller_than_a_chunk_is_stored_as_one_chunk_of_its_rows(tmp_path, writer):
    """Zarr decodes whole chunks: 500 rows written with chunk_rows 10⁶ (the default of write_dataset and
    sample_bayesian_network) are one chunk of 500 rows, as Zarr itself reads the array's metadata, and
    read back equal to what was written."""
    import zarr

    frame = _frame()
    path = tmp_path / "small.zarr"
    if writer == "write_dataset":
        dpgm.write_dataset(dpgm.from_pandas(frame), path)
    elif writer == "convert":
        frame.to_csv(tmp_path / "small.csv", index=False)
        dpgm.convert(tmp_path / "small.csv", path, chunk_rows=1_000_000)
    else:
        network = dpgm.BayesianNetwork.from_edges([("a", "b")], states={"a": ["no", "yes"], "b": ["lo", "mid", "hi"]})
        frame = dpgm.to_pandas(dpgm.sample_bayesian_network(network.randomized(np.random.default_rng(0)), 500, path))
    for name in ("a", "b"):
        array = zarr.open_array(str(path / name), mode="r")
        assert array.shape == (500,) and array.chunks == (500,), (name, array.chunks)
    back = dpgm.to_pandas(dpgm.open_dataset(path))
    for name in ("a", "b"):
        assert back[name].astype(str).tolist() == frame[name].astype(str).tolist()

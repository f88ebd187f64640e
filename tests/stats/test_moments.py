"""dpgm.moments: one pass of counts, means and centred cross-products, against NumPy, pandas and exact sums."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dpgm


def _frame(n: int, seed: int, offset: float = 0.0, missing: float = 0.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    values = rng.multivariate_normal([1.0, -2.0, 0.5], [[2.0, 0.6, -0.3], [0.6, 1.0, 0.2], [-0.3, 0.2, 0.5]], n)
    frame = pd.DataFrame(values + offset, columns=["x", "y", "z"])
    if missing:
        frame = frame.mask(rng.random(frame.shape) < missing)
    return frame


def test_listwise_moments_equal_numpy_on_complete_rows():
    frame = _frame(5000, 1, missing=0.05)
    m = dpgm.moments(dpgm.from_pandas(frame), ["x", "y", "z"])
    complete = frame.dropna().to_numpy()
    assert m.n == len(complete) and m.n_missing == len(frame) - len(complete) and m.n_rows == len(frame)
    np.testing.assert_allclose(m.mean.values, complete.mean(axis=0), rtol=1e-13)
    # np.cov with bias=True is the divisor-n covariance
    np.testing.assert_allclose(m.covariance.values, np.cov(complete.T, bias=True), rtol=1e-12)
    assert m.cross.dims == ("variable", "variable_") and list(m.mean.coords["variable"].values) == ["x", "y", "z"]


def test_a_large_offset_keeps_full_precision():
    """Mean 1e8, variance ~1: exact rational arithmetic is the oracle (naive sums of squares lose every digit)."""
    frame = _frame(20_000, 2, offset=1e8)
    store = dpgm.from_pandas(frame)
    m = dpgm.moments(store.chunk({"row": 1500}), ["x", "y"])  # 14 chunks, ragged last one
    x = [Fraction(v) for v in frame["x"]]
    y = [Fraction(v) for v in frame["y"]]
    mean_x, mean_y = sum(x) / len(x), sum(y) / len(y)
    cxx = sum((a - mean_x) ** 2 for a in x) / len(x)
    cxy = sum((a - mean_x) * (b - mean_y) for a, b in zip(x, y, strict=True)) / len(x)
    assert m.mean.values[0] == pytest.approx(float(mean_x), rel=1e-15)
    # a value near 1e8 carries ~1.5e-8 of rounding; relative error on a variance ~2 stays near 1e-8 / sqrt(n)
    assert m.covariance.values[0, 0] == pytest.approx(float(cxx), rel=1e-9)
    assert m.covariance.values[0, 1] == pytest.approx(float(cxy), rel=1e-9)


def test_frequency_weights_equal_repeated_rows():
    frame = _frame(300, 3, missing=0.1)
    weights = np.random.default_rng(4).integers(0, 5, len(frame)).astype(float)
    weighted = dpgm.from_pandas(frame.assign(weight=weights), weight="weight")
    repeated = dpgm.from_pandas(frame.loc[frame.index.repeat(weights.astype(int))].reset_index(drop=True))
    a, b = dpgm.moments(weighted, ["x", "y", "z"]), dpgm.moments(repeated, ["x", "y", "z"])
    assert a.n == b.n and a.n_missing == b.n_missing and a.n_rows == b.n_rows == weights.sum()
    np.testing.assert_allclose(a.mean.values, b.mean.values, rtol=1e-13)
    np.testing.assert_allclose(a.cross.values, b.cross.values, rtol=1e-12)


def test_pairwise_moments_equal_pandas_pairwise_covariance():
    frame = _frame(4000, 5, missing=0.2)
    m = dpgm.moments(dpgm.from_pandas(frame).chunk({"row": 999}), ["x", "y", "z"], pairwise=True)
    present = frame.notna().to_numpy().astype(int)
    np.testing.assert_array_equal(m.n.values, present.T @ present)
    # pandas' cov() drops missing values pair by pair, with divisor n - 1
    unbiased = frame.cov().to_numpy()
    np.testing.assert_allclose(m.cross.values / (m.n.values - 1), unbiased, rtol=1e-12)
    for i, a in enumerate("xyz"):
        for j, b in enumerate("xyz"):
            both = frame[[a, b]].dropna()
            assert m.mean.values[i, j] == pytest.approx(both[a].mean(), rel=1e-13)


def test_zarr_on_the_cluster_equals_memory_on_any_chunking(tmp_path, client):
    frame = _frame(10_007, 6, offset=50.0, missing=0.02)
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "m.zarr", chunk_rows=1000)
    on_cluster = dpgm.moments(dpgm.open_dataset(tmp_path / "m.zarr"), ["x", "z"], client=client)
    for chunks in (10_007, 7, 1000):
        in_memory = dpgm.moments(dpgm.from_pandas(frame).chunk({"row": chunks}), ["x", "z"])
        assert on_cluster.n == in_memory.n and on_cluster.n_missing == in_memory.n_missing
        np.testing.assert_allclose(on_cluster.mean.values, in_memory.mean.values, rtol=1e-12)
        np.testing.assert_allclose(on_cluster.cross.values, in_memory.cross.values, rtol=1e-12)


def test_bad_requests_are_refused_by_name():
    frame = _frame(50, 7).assign(c=pd.Categorical(["a", "b"] * 25))
    ds = dpgm.from_pandas(frame)
    with pytest.raises(dpgm.DataError, match="variable 'c'.*categorical"):
        dpgm.moments(ds, ["x", "c"])
    with pytest.raises(dpgm.DataError, match="variable 'nope'"):
        dpgm.moments(ds, ["nope"])
    with pytest.raises(dpgm.DataError, match="variable 'y', chunk 0.*infinite"):
        dpgm.moments(dpgm.from_pandas(frame.assign(y=np.inf)), ["x", "y"])

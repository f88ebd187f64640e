"""Factor algebra: laws checked against NumPy einsum on the same arrays (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from dpgm import potentials as pt

CARDS = {"a": 2, "b": 3, "c": 4, "d": 2}


def _potential(rng, scope, log=False):
    values = rng.gamma(1.0, 1.0, [CARDS[v] for v in scope])
    values[rng.random(values.shape) < 0.2] = 0.0
    return xr.DataArray(np.log(values) if log else values, dims=scope,
                        coords={v: [f"{v}{i}" for i in range(CARDS[v])] for v in scope})


scopes = st.lists(st.sampled_from(list(CARDS)), min_size=1, max_size=3, unique=True).map(tuple)


@settings(max_examples=60, deadline=None)
@given(scopes, scopes, st.integers(0, 2**16))
def test_product_then_marginalize_equals_einsum(first, second, seed):
    rng = np.random.default_rng(seed)
    f, g = _potential(rng, first), _potential(rng, second)
    joint = pt.product(f, g)
    dims = list(dict.fromkeys(first + second))
    assert list(joint.dims) == dims
    expression = f"{''.join(first)},{''.join(second)}->{''.join(dims)}"
    np.testing.assert_allclose(joint.values, np.einsum(expression, f.values, g.values), rtol=1e-14)
    keep = dims[:1]
    summed = pt.marginalize(joint, dims[1:])
    np.testing.assert_allclose(summed.values, np.einsum(f"{''.join(dims)}->{''.join(keep)}", joint.values), rtol=1e-12)
    # log-space versions agree with the linear ones
    with np.errstate(divide="ignore"):
        log_joint = pt.log_product(np.log(f), np.log(g))
        np.testing.assert_allclose(np.exp(pt.log_marginalize(log_joint, dims[1:]).values), summed.values,
                                   rtol=1e-12, atol=1e-300)
    # commutativity of the product
    xr.testing.assert_allclose(pt.product(g, f).transpose(*dims), joint)


def test_log_marginalize_is_stable_for_extreme_values():
    values = xr.DataArray([[-1000.0, -1001.0], [-np.inf, -np.inf]], dims=["a", "b"],
                          coords={"a": ["0", "1"], "b": ["0", "1"]})
    out = pt.log_marginalize(values, ["b"])
    assert out.values[0] == pytest.approx(-1000.0 + np.log1p(np.exp(-1.0)), rel=1e-15)
    assert out.values[1] == -np.inf
    normalized = pt.log_normalize(values)
    assert float(np.exp(normalized).sum()) == pytest.approx(1.0, rel=1e-14)


def test_divide_zero_over_zero_and_errors():
    a = xr.DataArray([0.0, 2.0, 3.0], dims=["a"], coords={"a": ["x", "y", "z"]})
    b = xr.DataArray([0.0, 4.0, 1.0], dims=["a"], coords={"a": ["x", "y", "z"]})
    assert pt.divide(a, b).values.tolist() == [0.0, 0.5, 3.0]
    with pytest.raises(ValueError, match="nonzero entry by zero"):
        pt.divide(a, b.copy(data=[1.0, 0.0, 1.0]))
    other = xr.DataArray([1.0, 1.0, 1.0], dims=["a"], coords={"a": ["x", "y", "w"]})
    with pytest.raises(ValueError, match="variable 'a' has states"):
        pt.product(a, other)


def test_reduce_and_normalize():
    rng = np.random.default_rng(1)
    f = _potential(rng, ("a", "b"))
    reduced = pt.reduce(f, {"b": "b2", "zzz": "ignored"})
    np.testing.assert_array_equal(reduced.values, f.values[:, 2])
    with pytest.raises(ValueError, match="not a state of 'b'"):
        pt.reduce(f, {"b": "nope"})
    f = f + 0.1
    assert float(pt.normalize(f).sum()) == pytest.approx(1.0, rel=1e-14)


@settings(max_examples=40, deadline=None)
@given(scopes, scopes, scopes, st.integers(0, 2**16))
def test_product_is_associative_and_divide_undoes_it(first, second, third, seed):
    """Oracle: the same laws evaluated with np.einsum on the raw arrays."""
    rng = np.random.default_rng(seed)
    f, g, h = _potential(rng, first), _potential(rng, second), _potential(rng, third)
    left = pt.product(pt.product(f, g), h)
    right = pt.product(f, pt.product(g, h))
    xr.testing.assert_allclose(left, right.transpose(*left.dims), rtol=1e-14)
    dims = "".join(left.dims)
    expected = np.einsum(f"{''.join(first)},{''.join(second)},{''.join(third)}->{dims}", f.values, g.values, h.values)
    np.testing.assert_allclose(left.values, expected, rtol=1e-14)
    # (f * g) / g == f wherever g != 0, and 0 where g == 0 (0/0 = 0)
    ratio = pt.divide(pt.product(f, g), g)
    mask = (g != 0).broadcast_like(ratio).transpose(*ratio.dims)
    expected = xr.where(mask, f.broadcast_like(ratio), 0.0).transpose(*ratio.dims)
    np.testing.assert_allclose(ratio.values, expected.values, rtol=1e-13)
    with np.errstate(divide="ignore"):
        log_ratio = pt.log_divide(np.log(pt.product(f, g)), np.log(g))
    np.testing.assert_allclose(np.exp(log_ratio.values), ratio.values, rtol=1e-12)


def test_mismatched_cardinality_or_label_order_names_the_variable():
    a = xr.DataArray([1.0, 2.0], dims=["b"], coords={"b": ["b0", "b1"]})
    longer = _potential(np.random.default_rng(0), ("b",))
    with pytest.raises(ValueError, match=r"variable 'b' has states \('b0', 'b1'\) in one potential and "
                                         r"\('b0', 'b1', 'b2'\)"):
        pt.product(a, longer)
    with pytest.raises(ValueError, match="variable 'b' has states"):
        pt.divide(a, a.copy().assign_coords(b=["b1", "b0"]))
    with pytest.raises(TypeError, match="must be an xarray.DataArray, got ndarray"):
        pt.product(a, np.ones(2))
    with pytest.raises(ValueError, match=r"cannot sum out \['zz'\]: .*variables: \['b'\]"):
        pt.marginalize(a, ["zz"])
    with pytest.raises(ValueError, match="sums to 0.0"):
        pt.normalize(a * 0)
    with pytest.raises(ValueError, match="log-sum-exp is -inf"):
        pt.log_normalize(a * -np.inf)
    with pytest.raises(ValueError, match="nonzero entry by zero"):
        pt.log_divide(a, a.copy(data=[0.0, -np.inf]))


@settings(max_examples=60, deadline=None)
@given(st.permutations(list(CARDS)), st.lists(st.sampled_from(list(CARDS)), unique=True), st.integers(0, 2**16))
def test_plain_reduce_to_and_expand_equal_einsum(scope, target, seed):
    """reduce_to sums a table to a sub-scope (axes in the sub-scope's order), expand broadcasts one back up."""
    rng = np.random.default_rng(seed)
    scope = tuple(scope)
    table = rng.random([CARDS[v] for v in scope])
    target = tuple(target)
    reduced = pt.reduce_to(table, scope, target)
    np.testing.assert_allclose(reduced, np.einsum(f"{''.join(scope)}->{''.join(target)}", table), rtol=1e-12)
    small = rng.random([CARDS[v] for v in target])
    np.testing.assert_array_equal(table * pt.expand(small, target, scope),
                                  np.einsum(f"{''.join(scope)},{''.join(target)}->{''.join(scope)}", table, small))


def test_labelled_marginal_and_labelled_table():
    rng = np.random.default_rng(3)
    f = _potential(rng, ("a", "b", "c"))
    out = pt.marginal(f, ["c", "a"])
    assert out.dims == ("c", "a")
    np.testing.assert_allclose(out.values, np.einsum("abc->ca", f.values), rtol=1e-12)
    assert list(out.coords["c"].values) == list(f.coords["c"].values)
    with pytest.raises(ValueError, match="not in the potential"):
        pt.marginal(f, ["zzz"])
    states = {v: [f"{v}{i}" for i in range(CARDS[v])] for v in "ab"}
    labelled = pt.labelled_table(f.values.sum(axis=2), ("a", "b"), states)
    xr.testing.assert_identical(labelled, xr.DataArray(f.values.sum(axis=2), dims=("a", "b"), coords=states))

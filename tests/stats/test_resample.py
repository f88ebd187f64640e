"""The replicate count kernel (:func:`dpgm.stats.resample.replicate_count_chunk`) against ``np.bincount``.

Oracle: each replicate's weights recomputed without dpgm (a pure-Python SplitMix64 on integers mod
2**64 and SciPy's ``poisson.ppf`` at the midpoint uniforms of the outputs' 16-bit quarters), and
each table counted by ``np.bincount`` of the rows' mixed-radix cells with those weights. Whole
weights: equal exactly; frequency weights: ``rtol=1e-12`` (float sums in another order). The
cases reach the kernel's edges: replicates in two blocks (more than 256), patterns whose weights
add up past its uint16 lanes (in one pattern, and over the patterns of one cell), pattern keys of several 64-bit words, no variables at all.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
from poisson_oracle import oracle_weights

from dpgm.stats.kernels import CountPlan
from dpgm.stats.resample import poisson_weights, replicate_count_chunk


def _weights(positions: np.ndarray, replicate: int, random_state: int) -> np.ndarray:
    return oracle_weights(positions, replicate, random_state)


def _bincount_tables(codes: list[np.ndarray], plan: CountPlan, weights: np.ndarray) -> np.ndarray:
    """Every table of ``plan`` over extended states (missing = the last index), by ``np.bincount``."""
    tables = []
    for scope in plan.scopes:
        cell = np.zeros(len(weights), dtype=np.int64)
        for j in scope:
            k = plan.cardinalities[j]
            cell = cell * (k + 1) + np.where(codes[j] < 0, k, codes[j])
        size = int(np.prod([plan.cardinalities[j] + 1 for j in scope]))
        tables.append(np.bincount(cell, weights=weights, minlength=size))
    return np.concatenate(tables) if tables else np.zeros(0)


def _assert_replicates(every, codes, plan, positions, random_state, replicates, base=None):
    for b in replicates:
        w = _weights(positions, b, random_state) * (1.0 if base is None else base)
        expected = _bincount_tables(codes, plan, w)
        if base is None:
            np.testing.assert_array_equal(every["tables"][:, b], expected, err_msg=f"replicate {b}")
            assert every["rows"][b] == w.sum()
        else:
            np.testing.assert_allclose(every["tables"][:, b], expected, rtol=1e-12, err_msg=f"replicate {b}")
            assert every["rows"][b] == pytest.approx(w.sum(), rel=1e-12)


def test_replicates_in_two_blocks_with_missing_codes_and_frequency_weights():
    rng = np.random.default_rng(1)
    n = 1500
    codes = [rng.integers(-1, 3, n).astype(np.int8), rng.integers(-1, 2, n).astype(np.int8),
             rng.integers(0, 5, n).astype(np.int16)]
    plan = CountPlan(("a", "b", "c"), (3, 2, 5), ((0, 1), (1, 2), (0, 2)))
    positions = np.arange(10_000, 10_000 + n)
    base = rng.gamma(2.0, size=n)
    for weights in (None, base):
        every = replicate_count_chunk(codes, positions, plan, 301, 9, weights)
        assert every["tables"].shape == (int(plan.offsets[-1]), 301)
        # the first and last lane of the first block (256 replicates), the second block's first and last
        _assert_replicates(every, codes, plan, positions, 9, (0, 3, 255, 256, 299, 300), weights)


def test_the_chunks_own_tables_come_last_with_own():
    """``own=True``: one more column, the chunk's tables weighted by its frequency weights alone (by
    ``np.bincount``), the replicates' columns unchanged."""
    rng = np.random.default_rng(5)
    n = 2000
    codes = [rng.integers(-1, 3, n).astype(np.int8), rng.integers(0, 2, n).astype(np.int8),
             rng.integers(-1, 4, n).astype(np.int16)]
    plan = CountPlan(("a", "b", "c"), (3, 2, 4), ((0, 1), (1, 2), (2,)))
    positions = np.arange(300, 300 + n)
    base = rng.gamma(2.0, size=n)
    for weights in (None, base):
        every = replicate_count_chunk(codes, positions, plan, 7, 2, weights, own=True)
        assert every["tables"].shape == (int(plan.offsets[-1]), 8) and every["rows"].shape == (8,)
        _assert_replicates(every, codes, plan, positions, 2, range(7), weights)
        mine = np.ones(n) if weights is None else weights
        if weights is None:
            np.testing.assert_array_equal(every["tables"][:, 7], _bincount_tables(codes, plan, mine))
            assert every["rows"][7] == n
            whole = replicate_count_chunk(codes, positions, plan, 7, 2, None, own=True, integer=True)
            assert whole["tables"].dtype == np.int32
            np.testing.assert_array_equal(whole["tables"], every["tables"])
        else:
            np.testing.assert_allclose(every["tables"][:, 7], _bincount_tables(codes, plan, mine), rtol=1e-12)
            assert every["rows"][7] == pytest.approx(mine.sum(), rel=1e-12)


def test_patterns_of_more_rows_than_the_uint16_lanes_hold_at_once():
    """140,000 rows in 3 patterns: two of about 69,000 rows, whose weights add up past 2**16 - 1."""
    rng = np.random.default_rng(2)
    n = 140_000
    codes = [rng.choice(np.array([-1, 0, 1], dtype=np.int8), n, p=[0.02, 0.49, 0.49])]
    plan = CountPlan(("a",), (2,), ((0,),))
    positions = np.arange(n) * 3 + 5  # any positions: an in-memory engine's slices
    every = replicate_count_chunk(codes, positions, plan, 2, 0)
    assert every["tables"].max() > 2**16
    _assert_replicates(every, codes, plan, positions, 0, range(2))


def test_many_small_patterns_of_one_cell_add_up_past_the_uint16_lanes():
    """150,000 rows in about 200 patterns of (a, b), counted in a's table alone: each cell of it gathers
    patterns of about 700 rows until their weights would pass 2**16 - 1 (then they are added to the
    tables), and one pattern of 15,000 rows that is added directly; B = 300, two blocks of replicates."""
    rng = np.random.default_rng(4)
    n = 150_000
    a = rng.integers(0, 2, n).astype(np.int8)
    b = rng.integers(0, 100, n).astype(np.int8)
    a[:15_000], b[:15_000] = 0, 0
    b[rng.random(n) < 0.01] = -1
    codes = [a, b]
    plan = CountPlan(("a", "b"), (2, 100), ((0,),))
    positions = np.arange(n)
    every = replicate_count_chunk(codes, positions, plan, 300, 9)
    assert every["tables"].max() > 2**16
    _assert_replicates(every, codes, plan, positions, 9, [0, 1, 255, 256, 299])


def test_pattern_keys_of_several_words_and_no_variables():
    """40 variables of 4 states (5 with missing): 93 bits of a pattern, two key words."""
    rng = np.random.default_rng(3)
    n = 3000
    base = rng.integers(0, 4, (6, 40))  # few distinct rows, each many times, some codes missing
    rows = base[rng.integers(0, 6, n)]
    rows[rng.random((n, 40)) < 0.01] = -1
    codes = [rows[:, j].astype(np.int8) for j in range(40)]
    plan = CountPlan(tuple(f"v{j}" for j in range(40)), (4,) * 40, ((0, 39), (5, 17, 38), (20,)))
    positions = np.arange(n)
    every = replicate_count_chunk(codes, positions, plan, 5, 4)
    _assert_replicates(every, codes, plan, positions, 4, range(5))
    nothing = replicate_count_chunk([], positions, CountPlan((), (), ()), 5, 4)
    assert nothing["tables"].shape == (0, 5)
    np.testing.assert_array_equal(nothing["rows"], [_weights(positions, b, 4).sum() for b in range(5)])


def test_tables_do_not_depend_on_how_the_rows_are_chunked():
    """The whole chunk's tables equal the sums of any split's, exactly: each row's weights are its own."""
    rng = np.random.default_rng(4)
    n = 4000
    codes = [rng.integers(-1, 3, n).astype(np.int8), rng.integers(0, 2, n).astype(np.int8)]
    plan = CountPlan(("a", "b"), (3, 2), ((0, 1), (1,)))
    positions = np.arange(50, 50 + n)
    whole = replicate_count_chunk(codes, positions, plan, 70, 2)
    for cuts in ([1], [333, 334, 2900], [1000, 2000, 3000]):
        bounds = [0, *cuts, n]
        parts = [replicate_count_chunk([c[a:b] for c in codes], positions[a:b], plan, 70, 2)
                 for a, b in zip(bounds, bounds[1:], strict=False)]
        np.testing.assert_array_equal(sum(p["tables"] for p in parts), whole["tables"])
        np.testing.assert_array_equal(sum(p["rows"] for p in parts), whole["rows"])
    # and each replicate's column is the bincount of the NumPy definition's weights
    for b in (0, 69):
        expected = _bincount_tables(codes, plan, poisson_weights(positions, b, 2).astype(np.float64))
        np.testing.assert_array_equal(whole["tables"][:, b], expected)


def test_sparse_tables_hold_the_cells_the_rows_reach_and_add_up_over_chunks_to_the_bincount_tables():
    """``sparse=True``: a :class:`~dpgm.stats.cell_rows.CellRows` of exactly the cells some row of the chunk falls
    in (by ``np.bincount`` of the chunk's rows); chunks reaching different cells, added up as the tree reduction
    adds them (:func:`dpgm.stats.engine.add_partials`), give every replicate's ``np.bincount`` table of all the
    rows, exactly, and their own tables last."""
    from dpgm.stats.cell_rows import CellRows
    from dpgm.stats.engine import add_partials

    rng = np.random.default_rng(6)
    n = 3000
    a = rng.integers(-1, 4, n).astype(np.int8)
    a[:1000] = np.minimum(a[:1000], 1)  # the first chunk never reaches a's states 2 and 3
    codes = [a, rng.integers(0, 3, n).astype(np.int8), rng.integers(-1, 2, n).astype(np.int16)]
    plan = CountPlan(("a", "b", "c"), (4, 3, 2), ((0, 1), (1, 2), (0,)))
    positions = np.arange(7, 7 + n)
    parts = []
    for start, stop in ((0, 1000), (1000, 2200), (2200, n)):
        chunk = [c[start:stop] for c in codes]
        part = replicate_count_chunk(chunk, positions[start:stop], plan, 9, 3, own=True, integer=True, sparse=True)
        reached = np.flatnonzero(_bincount_tables(chunk, plan, np.ones(stop - start)))
        assert isinstance(part["tables"], CellRows)
        np.testing.assert_array_equal(part["tables"].cells, reached)
        parts.append(part)
    assert len(parts[0]["tables"].cells) < len(parts[1]["tables"].cells)
    total = add_partials(*parts)
    tables = np.asarray(total["tables"])
    assert tables.shape == (int(plan.offsets[-1]), 10) and tables.dtype == np.int32
    _assert_replicates({"tables": tables, "rows": total["rows"]}, codes, plan, positions, 3, range(9))
    np.testing.assert_array_equal(tables[:, 9], _bincount_tables(codes, plan, np.ones(n)))
    assert total["rows"][9] == n
    # frequency weights: float64 rows, the replicates' bincount tables to rtol 1e-12
    base = rng.gamma(2.0, size=n)
    parts = [replicate_count_chunk([c[a:b] for c in codes], positions[a:b], plan, 9, 3, base[a:b], sparse=True)
             for a, b in ((0, 1000), (1000, n))]
    total = add_partials(*parts)
    assert total["tables"].values.dtype == np.float64
    _assert_replicates({"tables": np.asarray(total["tables"]), "rows": total["rows"]}, codes, plan, positions, 3,
                       range(9), base)


def test_tables_held_two_by_two_add_up_to_each_tables_bincount_table():
    """Tables that share variables are held in pairs (one row per distinct pair of cells, added to both
    cells after each block of replicates): the first table among them, replicates in two blocks, with
    and without frequency weights, the replicates' and the chunk's own tables equal ``np.bincount``'s."""
    from dpgm.stats.code_patterns import compact_cells, pair_tables

    rng = np.random.default_rng(8)
    n = 4000
    codes = [rng.integers(-1, 3, n).astype(np.int8) for _ in range(8)]
    # (0, 1) and (0, 2) share a; (3, 4) and (3, 5, 6) share d; (7,) stays alone
    plan = CountPlan(tuple("abcdefgh"), (3,) * 8, ((0, 1), (0, 2), (3, 4), (3, 5, 6), (7,)))
    positions = np.arange(50, 50 + n)
    # the pairing the kernel sees: two pairs of tables, the first table in one of them
    matrix = np.stack(codes)
    cells = np.stack([_bincount_cells(matrix, plan, scope) for scope in plan.scopes])  # tables x rows
    cells = np.ascontiguousarray(np.unique(cells, axis=1).astype(np.int32))  # tables x patterns
    used = compact_cells(cells, np.empty(int(plan.offsets[-1]), dtype=np.int32))
    columns, pairs = pair_tables(cells, np.searchsorted(used, plan.offsets), plan.scopes)
    assert columns.shape == (cells.shape[1], 3) and 0 < len(pairs) < cells.shape[1] / 2
    for weights in (None, rng.gamma(2.0, size=n)):
        every = replicate_count_chunk(codes, positions, plan, 301, 4, weights, own=True)
        _assert_replicates(every, codes, plan, positions, 4, (0, 1, 255, 256, 300), weights)
        mine = np.ones(n) if weights is None else weights
        np.testing.assert_allclose(every["tables"][:, 301], _bincount_tables(codes, plan, mine), rtol=1e-12)


def test_rows_nearly_all_distinct_stop_the_pattern_search_and_recurring_rows_still_add_up():
    """Past the first :data:`~dpgm.stats.code_patterns.DISTINCT_ROWS` rows, when 9 rows in 10 were distinct, each row is
    its own pattern: rows repeated after that point (copies of the first ones) are counted once each, and
    the tables still equal ``np.bincount``'s."""
    from dpgm.stats.code_patterns import DISTINCT_ROWS

    rng = np.random.default_rng(9)
    n = DISTINCT_ROWS + 8000
    codes = [rng.integers(-1, 4, n).astype(np.int8) for _ in range(9)]
    for c in codes:
        c[DISTINCT_ROWS + 1000: DISTINCT_ROWS + 3000] = c[:2000]  # rows seen before, after the search stops
    plan = CountPlan(tuple("abcdefghi"), (4,) * 9, ((0, 1, 2), (2, 3), (4, 5, 6), (7,), (8, 0)))
    positions = np.arange(n)
    every = replicate_count_chunk(codes, positions, plan, 3, 11, own=True)
    _assert_replicates(every, codes, plan, positions, 11, range(3))
    np.testing.assert_array_equal(every["tables"][:, 3], _bincount_tables(codes, plan, np.ones(n)))


def _bincount_cells(matrix: np.ndarray, plan: CountPlan, scope: tuple[int, ...]) -> np.ndarray:
    """Each row's flat cell of the table over ``scope`` (missing = the last index), offset as in ``plan``."""
    t = plan.scopes.index(scope)
    cell = np.zeros(matrix.shape[1], dtype=np.int64)
    for j in scope:
        k = plan.cardinalities[j]
        cell = cell * (k + 1) + np.where(matrix[j] < 0, k, matrix[j])
    return cell + plan.offsets[t]


def test_cell_rows_add_up_like_their_dense_tables():
    """Sums of :class:`~dpgm.stats.cell_rows.CellRows` (two at a time, several at once, the same cells or
    overlapping ones) equal NumPy's sums of the dense tables; a pickled one is equal; other shapes refuse."""
    import pickle

    from dpgm.stats.cell_rows import CellRows

    rng = np.random.default_rng(7)
    dense, parts = [], []
    for cells in ([0, 3, 4], [3, 4, 9], [0, 3, 4], [1], [2, 3, 5, 6, 7, 8, 9]):
        values = rng.integers(0, 100, (len(cells), 3)).astype(np.int32)
        part = CellRows(np.asarray(cells), values, 10)
        table = np.zeros((10, 3), dtype=np.int32)
        table[cells] = values
        dense.append(table)
        parts.append(part)
        np.testing.assert_array_equal(np.asarray(pickle.loads(pickle.dumps(part))), table)
    np.testing.assert_array_equal(np.asarray(CellRows.sum_of(parts)), np.sum(dense, axis=0))
    np.testing.assert_array_equal(np.asarray(parts[0] + parts[2]), dense[0] + dense[2])
    np.testing.assert_array_equal(np.asarray(parts[1] + parts[3]), dense[1] + dense[3])
    with pytest.raises(ValueError, match="do not add up"):
        parts[0] + CellRows(np.asarray([0]), np.zeros((1, 3)), 11)


def test_poisson_weights_are_the_distribution_function_rounded_to_multiples_of_two_to_the_minus_16():
    """Every 16-bit uniform's draw against SciPy: ``P(w <= k)`` is ``round(2**16 F(k)) / 2**16``; mean exactly 1."""
    from dpgm.stats.resample import POISSON_CDF

    m = np.arange(2**16)
    draws = np.searchsorted(POISSON_CDF, (m + 0.5) / 2**16, side="right")
    np.testing.assert_array_equal(draws, scipy.stats.poisson.ppf((m + 0.5) / 2**16, 1.0))
    cumulative = np.cumsum(np.bincount(draws, minlength=9))
    np.testing.assert_array_equal(cumulative, np.round(scipy.stats.poisson.cdf(np.arange(9), 1.0) * 2**16))
    assert draws.max() == 8 and draws.sum() == 2**16  # mean exactly 1


def test_the_quarters_of_an_output_are_its_16_bit_fields_from_the_lowest():
    """The explicit split (big-endian machines) equals NumPy's shifts, and so the little-endian in-place view."""
    from dpgm.stats.resample import _quarters

    words = np.random.default_rng(5).integers(0, 2**63, 7, dtype=np.int64).astype(np.uint64) * np.uint64(3)
    uniforms = np.zeros(28, dtype=np.uint16)
    _quarters(words, 7, uniforms)
    expected = [(int(w) >> (16 * j)) & 0xFFFF for w in words for j in range(4)]
    np.testing.assert_array_equal(uniforms, expected)
    np.testing.assert_array_equal(words.astype("<u8").view("<u2"), expected)

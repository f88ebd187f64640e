"""UAI files: round trips, and files written and read by pgmpy's UAI reader/writer."""

from __future__ import annotations

import numpy as np
import pytest

import dpgm


def test_bayes_round_trip_is_exact(tmp_path):
    model = dpgm.load_network("alarm")
    dpgm.write_uai(model, tmp_path / "alarm.uai")
    again = dpgm.read_uai(tmp_path / "alarm.uai", names=model.variables)
    for v in model.variables:
        assert again.cpds[v].dims == model.cpds[v].dims
        np.testing.assert_array_equal(again.cpds[v].values, model.cpds[v].values)


def test_markov_round_trip_and_queries(tmp_path):
    rng = np.random.default_rng(0)
    states = {v: ["0", "1", "2"] for v in "abcd"}
    model = dpgm.MarkovNetwork.from_cliques([("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")], states)
    model = model.with_log_potentials({s: rng.normal(size=(3, 3)) for s in model.scopes})
    dpgm.write_uai(model, tmp_path / "cycle.uai")
    again = dpgm.read_uai(tmp_path / "cycle.uai", names=list("abcd"))
    assert dpgm.log_partition(again) == pytest.approx(dpgm.log_partition(model), rel=1e-14)


SPEC_EXAMPLE = """MARKOV
3
2 2 3
3
1 0
2 0 1
2 1 2

2
 0.436 0.564

4
 0.128 0.872
 0.920 0.080

6
 0.210 0.333 0.457
 0.811 0.000 0.189
"""


def test_the_format_description_example(tmp_path):
    """The example of the UAI 2008 format description, against a hand enumeration of its numbers."""
    (tmp_path / "spec.uai").write_text(SPEC_EXAMPLE)
    model = dpgm.read_uai(tmp_path / "spec.uai")
    f0 = np.array([0.436, 0.564])
    f1 = np.array([[0.128, 0.872], [0.920, 0.080]])
    f2 = np.array([[0.210, 0.333, 0.457], [0.811, 0.000, 0.189]])
    z = sum(f0[a] * f1[a, b] * f2[b, c] for a in range(2) for b in range(2) for c in range(3))
    assert dpgm.log_partition(model) == pytest.approx(np.log(z), rel=1e-14)
    np.testing.assert_array_equal(model.potentials[("x1", "x2")].values, f2)


def test_bayes_scope_lists_parents_first(tmp_path):
    """In a BAYES file the child is the last variable of its scope, values with the last variable fastest."""
    (tmp_path / "bn.uai").write_text("BAYES\n2\n2 3\n2\n1 0\n2 0 1\n\n2\n0.25 0.75\n6\n0.1 0.2 0.7 0.5 0.5 0.0\n")
    model = dpgm.read_uai(tmp_path / "bn.uai", names=["parent", "child"])
    np.testing.assert_array_equal(model.cpds["child"].transpose("parent", "child").values,
                                  [[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]])
    expected = 0.25 * np.array([0.1, 0.2, 0.7]) + 0.75 * np.array([0.5, 0.5, 0.0])
    np.testing.assert_allclose(dpgm.marginals(model)["child"].values, expected, rtol=1e-14)
    with pytest.raises(ValueError, match="ends early"):
        (tmp_path / "short.uai").write_text("BAYES\n2\n2 3\n")
        dpgm.read_uai(tmp_path / "short.uai")


def test_markov_files_agree_with_pgmpy_reader_and_writer(tmp_path):
    """Oracle: pgmpy's independent UAI reader and writer, factor by factor.

    Only MARKOV files: pgmpy 1.1.2's reader takes a BAYES table's values as
    child-major, contrary to the format description (the child is the last
    variable of the scope and varies fastest, see test_bayes_scope_lists_parents_first),
    so its CPDs come out transposed.
    """
    from pgmpy.readwrite import UAIReader, UAIWriter

    rng = np.random.default_rng(3)
    states = {"a": ["0", "1"], "b": ["0", "1", "2"], "c": ["0", "1", "2", "3"], "d": ["0", "1"]}
    model = dpgm.MarkovNetwork.from_cliques([("a", "b"), ("b", "c", "d"), ("d", "a"), ("c",)], states)
    model = model.with_log_potentials({s: rng.normal(size=[len(states[v]) for v in s]) for s in model.scopes})
    dpgm.write_uai(model, tmp_path / "ours.uai")
    theirs = UAIReader(path=str(tmp_path / "ours.uai")).get_model()
    names = {f"var_{i}": v for i, v in enumerate(model.variables)}
    factors = {tuple(names[v] for v in f.scope()): f for f in theirs.get_factors()}
    assert set(factors) == set(model.scopes)
    for scope, factor in factors.items():
        np.testing.assert_allclose(factor.values, model.potentials[scope].values, rtol=1e-15)
    (tmp_path / "pgmpy.uai").write_text(str(UAIWriter(theirs)))
    again = dpgm.read_uai(tmp_path / "pgmpy.uai", names=[names[f"var_{i}"] for i in range(len(names))])
    assert dpgm.log_partition(again) == pytest.approx(dpgm.log_partition(model), rel=1e-6)  # pgmpy prints ~7 digits


def test_rounded_bayes_columns_are_renormalized_and_bad_ones_refused(tmp_path):
    (tmp_path / "rounded.uai").write_text("BAYES\n1\n3\n1\n1 0\n\n3\n0.3333333 0.3333333 0.3333333\n")
    model = dpgm.read_uai(tmp_path / "rounded.uai")
    np.testing.assert_allclose(model.cpds["x0"].values, [1 / 3] * 3, rtol=1e-15)
    (tmp_path / "bad.uai").write_text("BAYES\n2\n2 2\n2\n1 0\n2 0 1\n\n2\n0.5 0.5\n4\n0.2 0.8 0.5 0.4\n")
    with pytest.raises(ValueError, match=r"the table of 'x1' sums to 0.9 for parents \{'x0': '1'\}, not 1"):
        dpgm.read_uai(tmp_path / "bad.uai")

"""``BayesianNetwork.to_pgmpy`` / ``dpgm.from_pgmpy`` / ``BayesianNetwork.to_pyagrum`` against the peers'
own inference on the converted models.

Oracles: pgmpy's ``VariableElimination`` and pyAgrum's ``LazyPropagation`` run on the converted models
(posteriors with evidence equal dpgm's ``marginals`` to 1e-9; observed differences are rounding,
~1e-15), pgmpy's ``TabularCPD.get_value`` read cell by cell at the labels, pgmpy's own BIF reader,
and brute-force enumeration of a Markov network's joint with NumPy. Round trips dpgm -> pgmpy -> dpgm
are equal to 1e-12 (the tables are copied as doubles: observed 0).
"""

from __future__ import annotations

import gzip
import itertools
import math
import sys

import numpy as np
import pyagrum as gum
import pytest
import xarray as xr
from pgmpy.factors.discrete import DiscreteFactor, TabularCPD
from pgmpy.inference import VariableElimination
from pgmpy.models import (
    DiscreteBayesianNetwork,
    DiscreteMarkovNetwork,
    LinearGaussianBayesianNetwork,
)
from pgmpy.readwrite import BIFReader

import dpgm
from dpgm.networks import network_path

NETWORKS = ["asia", "alarm", "child"]
ROUND_TRIP = 1e-12
POSTERIOR = 1e-9


def _random_network(seed: int, n: int = 9) -> dpgm.BayesianNetwork:
    """A random DAG (up to 3 parents each), 2-4 states with labels of our own, Dirichlet tables."""
    rng = np.random.default_rng(seed)
    names = [f"v{i}" for i in range(n)]
    states = {v: [f"{v}_s{k}" for k in range(int(rng.integers(2, 5)))] for v in names}
    parents = {v: list(rng.choice(names[:i], size=min(i, int(rng.integers(0, 4))), replace=False))
               for i, v in enumerate(names)}
    tables = {}
    for v in names:
        shape = [len(states[p]) for p in parents[v]]
        tables[v] = np.moveaxis(rng.dirichlet(np.full(len(states[v]), 0.7), size=shape or None), -1, 0)
    return dpgm.BayesianNetwork.from_arrays(parents, states, tables)


def _network(name: str) -> dpgm.BayesianNetwork:
    return dpgm.load_network(name) if not name.startswith("random") else _random_network(int(name[-1]))


def _sample_row(model: dpgm.BayesianNetwork, rng: np.random.Generator) -> dict[str, str]:
    """One row drawn from the network (evidence taken from it has positive probability)."""
    codes: dict[str, int] = {}
    for v in model.variables:
        column = model.cpds[v].values[(slice(None), *(codes[p] for p in model.parents(v)))]
        codes[v] = int(rng.choice(len(column), p=column / column.sum()))
    return {v: model.states[v][k] for v, k in codes.items()}


@pytest.mark.parametrize("name", ["alarm", "random0", "random1", "random2"])
def test_round_trip_through_pgmpy_is_exact_and_pgmpy_reads_the_same_cells(name):
    model = _network(name)
    theirs = model.to_pgmpy()
    assert isinstance(theirs, DiscreteBayesianNetwork)
    assert set(theirs.nodes()) == set(model.variables) and set(theirs.edges()) == set(model.edges)
    for v in model.variables:  # pgmpy's reading of every cell, at the labels
        cpd = theirs.get_cpds(v)
        table = model.cpds[v]
        assert cpd.state_names[v] == list(model.states[v])
        for cell in itertools.product(*(range(n) for n in table.shape)):
            labels = {d: model.states[d][k] for d, k in zip(table.dims, cell, strict=True)}
            assert cpd.get_value(**labels) == table.values[cell]
    back = dpgm.from_pgmpy(theirs)
    assert isinstance(back, dpgm.BayesianNetwork)
    assert back.states == model.states and back.edges == model.edges
    for v in model.variables:
        assert back.cpds[v].dims == model.cpds[v].dims
        np.testing.assert_allclose(back.cpds[v].values, model.cpds[v].values, rtol=0, atol=ROUND_TRIP)


@pytest.mark.parametrize("name", NETWORKS)
def test_posteriors_with_evidence_equal_pgmpy_variable_elimination_on_the_converted_network(name):
    model = dpgm.load_network(name)
    engine = VariableElimination(model.to_pgmpy())
    rng = np.random.default_rng(7 + len(name))
    row = _sample_row(model, rng)
    observed = rng.choice(model.variables, size=min(5, len(model.variables) - 2), replace=False)
    evidence = {str(v): row[str(v)] for v in observed}
    ours = dpgm.marginals(model, evidence)
    queried = [v for v in model.variables if v not in evidence]
    for v in rng.choice(queried, size=min(12, len(queried)), replace=False):
        theirs = engine.query([str(v)], evidence=evidence, show_progress=False)
        for k, label in enumerate(theirs.state_names[v]):
            assert float(ours[v].sel({v: label})) == pytest.approx(theirs.values[k], abs=POSTERIOR)


@pytest.mark.parametrize("name", NETWORKS)
def test_posteriors_with_evidence_equal_pyagrum_lazy_propagation_on_the_converted_network(name):
    model = dpgm.load_network(name)
    theirs = model.to_pyagrum()
    assert isinstance(theirs, gum.BayesNet)
    for v in model.variables:
        assert tuple(theirs.variable(v).labels()) == model.states[v]
    rng = np.random.default_rng(11 + len(name))
    row = _sample_row(model, rng)
    observed = rng.choice(model.variables, size=min(6, len(model.variables) - 2), replace=False)
    for evidence in ({}, {str(v): row[str(v)] for v in observed}):
        engine = gum.LazyPropagation(theirs)
        engine.setEvidence(evidence)
        engine.makeInference()
        ours = dpgm.marginals(model, evidence)
        for v in model.variables:
            posterior = engine.posterior(v)
            labels = posterior.variable(0).labels()
            np.testing.assert_allclose(ours[v].sel({v: list(labels)}).values, posterior.toarray(), rtol=0,
                                       atol=POSTERIOR)
        if evidence:
            assert dpgm.log_partition(model, evidence) == pytest.approx(math.log(engine.evidenceProbability()),
                                                                        rel=POSTERIOR)


@pytest.mark.parametrize("name", ["asia", "child"])
def test_from_pgmpy_reads_a_network_pgmpy_built_from_bif(name):
    """A pgmpy model dpgm did not write: pgmpy's own BIF reader. Both keep the printed decimals (those of
    asia and child sum to 1 exactly), so the tables agree to rounding."""
    text = gzip.decompress(network_path(name).read_bytes()).decode()
    ours = dpgm.from_pgmpy(BIFReader(string=text).get_model())
    shipped = dpgm.load_network(name)
    assert ours.states == shipped.states and sorted(ours.edges) == sorted(shipped.edges)
    for v in shipped.variables:
        table = ours.cpds[v].transpose(*shipped.cpds[v].dims)
        np.testing.assert_allclose(table.values, shipped.cpds[v].values, rtol=0, atol=1e-15)


def _cycle_markov_network(seed: int) -> DiscreteMarkovNetwork:
    """pgmpy Markov network on the 4-cycle a-b-c-d-a (not chordal), random factors with state names, two
    factors on {a, b} in different variable orders and a unary factor on c."""
    rng = np.random.default_rng(seed)
    states = {"a": ["lo", "hi"], "b": ["x", "y", "z"], "c": ["0", "1"], "d": ["p", "q", "r"]}
    scopes = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"), ("b", "a"), ("c",)]
    network = DiscreteMarkovNetwork([("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")])
    factors = [DiscreteFactor(list(s), [len(states[v]) for v in s],
                              rng.gamma(1.0, size=math.prod(len(states[v]) for v in s)) + 0.05,
                              state_names={v: states[v] for v in s}) for s in scopes]
    network.add_factors(*factors)
    return network


def _brute_force(network: DiscreteMarkovNetwork, evidence: dict[str, str]) -> tuple[dict, float]:
    """Marginals given evidence and log P(evidence) * Z, from the product of every factor over the joint."""
    variables = ["a", "b", "c", "d"]
    states = {v: network.get_cardinality(v) for v in variables}
    names = {}
    joint = np.ones([states[v] for v in variables])
    for factor in network.get_factors():
        names.update({str(v): factor.state_names[v] for v in factor.variables})
        axes = [variables.index(v) for v in factor.variables]
        shape = [1] * len(variables)
        for axis, v in zip(axes, factor.variables, strict=True):
            shape[axis] = states[v]
        order = np.argsort(axes)
        joint = joint * np.transpose(factor.values, order).reshape(shape)
    for v, label in evidence.items():
        mask = np.zeros(states[v])
        mask[names[v].index(label)] = 1
        joint = joint * mask.reshape([-1 if u == v else 1 for u in variables])
    marginals = {v: dict(zip(names[v], joint.sum(axis=tuple(i for i in range(4) if variables[i] != v))
                             / joint.sum(), strict=True)) for v in variables}
    return marginals, math.log(joint.sum())


@pytest.mark.parametrize("seed", [0, 1])
def test_markov_network_from_pgmpy_equals_brute_force_and_pgmpy_variable_elimination(seed):
    theirs = _cycle_markov_network(seed)
    ours = dpgm.from_pgmpy(theirs)
    assert isinstance(ours, dpgm.MarkovNetwork)
    assert ours.states == {"a": ("lo", "hi"), "b": ("x", "y", "z"), "c": ("0", "1"), "d": ("p", "q", "r")}
    assert sorted(map(sorted, ours.scopes)) == [["a", "b"], ["a", "d"], ["b", "c"], ["c"], ["c", "d"]]
    engine = VariableElimination(theirs)
    for evidence in ({}, {"c": "1"}, {"a": "hi", "d": "r"}):
        expected, log_mass = _brute_force(theirs, evidence)
        marginals = dpgm.marginals(ours, evidence)
        for v, probabilities in expected.items():
            if v in evidence:
                continue
            for label, p in probabilities.items():
                assert float(marginals[v].sel({v: label})) == pytest.approx(p, abs=POSTERIOR)
            query = engine.query([v], evidence=evidence or None, show_progress=False)
            theirs_p = query.values / query.values.sum()  # pgmpy leaves a Markov network's factor unnormalized
            for k, label in enumerate(query.state_names[v]):
                assert float(marginals[v].sel({v: label})) == pytest.approx(theirs_p[k], abs=POSTERIOR)
        assert dpgm.log_partition(ours, evidence) == pytest.approx(log_mass, rel=POSTERIOR)


def test_missing_libraries_and_other_models_are_refused_clearly(monkeypatch):
    asia = dpgm.load_network("asia")
    with pytest.raises(ValueError, match="no tables"):
        dpgm.BayesianNetwork.from_edges([("a", "b")]).to_pgmpy()
    with pytest.raises(TypeError, match="DiscreteBayesianNetwork or DiscreteMarkovNetwork"):
        dpgm.from_pgmpy(LinearGaussianBayesianNetwork([("a", "b")]))
    with pytest.raises(TypeError, match="DiscreteBayesianNetwork or DiscreteMarkovNetwork"):
        dpgm.from_pgmpy(asia)
    incomplete = DiscreteBayesianNetwork([("a", "b")])
    incomplete.add_cpds(TabularCPD("a", 2, [[0.5], [0.5]]))
    with pytest.raises(ValueError, match=r"no TabularCPD for \['b'\]"):
        dpgm.from_pgmpy(incomplete)
    monkeypatch.setitem(sys.modules, "pgmpy.models", None)  # as if pgmpy were not installed
    with pytest.raises(ImportError, match="pip install pgmpy"):
        asia.to_pgmpy()
    with pytest.raises(ImportError, match="pip install pgmpy"):
        dpgm.from_pgmpy(incomplete)
    monkeypatch.setitem(sys.modules, "pyagrum", None)
    with pytest.raises(ImportError, match="pip install pyagrum"):
        asia.to_pyagrum()


def test_structural_zeros_and_labels_survive_the_way_to_pyagrum():
    """A deterministic table (zeros) and labels with spaces and punctuation keep their meaning in pyAgrum."""
    states = {"gate": ["open door", "shut-1"], "light": ["on", "off (dim)"]}
    model = dpgm.BayesianNetwork.from_arrays(
        {"light": ["gate"]}, states, {"gate": np.array([0.3, 0.7]), "light": np.array([[1.0, 0.25], [0.0, 0.75]])})
    theirs = model.to_pyagrum()
    engine = gum.LazyPropagation(theirs)
    engine.setEvidence({"light": "off (dim)"})
    engine.makeInference()
    posterior = engine.posterior("gate")
    expected = dpgm.marginals(model, {"light": "off (dim)"})["gate"]
    assert float(expected.sel(gate="open door")) == 0.0
    np.testing.assert_allclose(expected.sel(gate=list(posterior.variable(0).labels())).values, posterior.toarray(),
                               rtol=0, atol=POSTERIOR)
    assert isinstance(expected, xr.DataArray)

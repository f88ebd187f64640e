"""``dpgm.score`` for discrete models (Bayesian networks, latent class models, Markov networks, log-linear models).

Oracles: brute-force enumeration of the joint (``dpgm.testing.joint_table``, the product of the
model's tables by einsum) summed over each row's unobserved and latent variables, and pgmpy's
``DiscreteBayesianNetwork.get_state_probability`` on complete rows (pgmpy 1.1 has no
``BayesianModelProbability``; ``get_state_probability`` is the joint probability of one full
assignment). Tolerances: ``rtol=1e-10`` against enumeration (the junction tree rescales every
message, ~1e-15 relative each), ``rtol=1e-9`` against pgmpy (its tables are copies, summed
by pgmpy's own code).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import dpgm
from dpgm.errors import DataError
from dpgm.testing import joint_table


def _brute_scores(model, data: xr.Dataset) -> np.ndarray:
    """``log sum of the joint over the cells each row agrees with`` less ``log sum of the joint``."""
    joint = joint_table(model)
    values = joint.values
    observed = [v for v in model.variables if v in data.data_vars]
    out = []
    for r in range(data.sizes["row"]):
        index = []
        for v in model.variables:
            code = int(data[v].values[r]) if v in observed else -1
            if code < 0:
                index.append(slice(None))
            else:  # the data's label of the code, at the model's position of that label
                label = data[v].attrs["flag_meanings"].split()[code] if "flag_meanings" in data[v].attrs else None
                label = label if label is not None else dpgm.Schema.from_dataset(data).states[v][code]
                index.append(list(map(str, joint.coords[v].values)).index(label))
        out.append(np.log(values[tuple(index)].sum()) - np.log(values.sum()))
    return np.array(out)


def _with_missing(data: xr.Dataset, fraction: float, seed: int) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    out = data.copy()
    for v in data.data_vars:
        codes = data[v].values.copy()
        codes[rng.random(len(codes)) < fraction] = -1
        out[v] = data[v].copy(data=codes)
    return out


@pytest.fixture(scope="module")
def cancer():
    return dpgm.load_network("cancer").randomized(np.random.default_rng(3), 1.0)


def test_bayesian_network_with_missing_values_and_a_latent_variable_equals_enumeration(cancer):
    """``Smoker`` absent from the data (latent), 30% of the other codes -1: each row sums them out."""
    data = _with_missing(dpgm.sample_bayesian_network(cancer, 300, seed=1).drop_vars("Smoker").compute(), 0.3, 2)
    scores = dpgm.score(cancer, data)
    np.testing.assert_allclose(scores.values, _brute_scores(cancer, data), rtol=1e-10)
    assert scores.attrs["summed_out"] == ["Smoker"] and scores.attrs["model"] == "BayesianNetwork"
    assert float(scores.total) == pytest.approx(float(scores.values.sum()), rel=1e-12)
    assert float(scores.rows) == 300 and float(scores.mean_per_row) == pytest.approx(float(scores.total) / 300)


def test_latent_class_model_after_em_equals_enumeration():
    items = {f"q{i}": ["a", "b", "c"] for i in range(4)}
    truth = dpgm.latent_class_model(items, 2, latent="class").randomized(np.random.default_rng(0), 0.5)
    data = dpgm.sample_bayesian_network(truth, 500, seed=0).drop_vars("class").compute()
    fitted = dpgm.fit(dpgm.latent_class_model(items, 2, latent="class"), data, method="em", random_state=0,
                      n_init=2, tol=1e-10).model
    holdout = _with_missing(dpgm.sample_bayesian_network(truth, 200, seed=9).drop_vars("class").compute(), 0.2, 1)
    scores = dpgm.score(fitted, holdout)
    np.testing.assert_allclose(scores.values, _brute_scores(fitted, holdout), rtol=1e-10)
    # on the training data the total is the fit's log-likelihood (the E step's sum over the same rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        first = dpgm.fit(fitted, data, method="em", init="model", max_iter=1).history[0]["loglik"]
    assert float(dpgm.score(fitted, data).total) == pytest.approx(first, rel=1e-9)


def test_complete_rows_equal_pgmpy_state_probability():
    from pgmpy.models import DiscreteBayesianNetwork  # noqa: F401  (to_pgmpy builds one)

    asia = dpgm.load_network("asia")
    data = dpgm.sample_bayesian_network(asia, 60, seed=4).compute()
    scores = dpgm.score(asia, data).values
    theirs = asia.to_pgmpy()
    frame = dpgm.to_pandas(data)
    expected = [np.log(theirs.get_state_probability({v: str(row[v]) for v in asia.variables}))
                for _, row in frame.iterrows()]
    np.testing.assert_allclose(scores, expected, rtol=1e-9)


def test_markov_network_subtracts_log_z_and_sums_out_missing_values():
    rng = np.random.default_rng(5)
    states = {"a": ["x", "y", "z"], "b": ["u", "v"], "c": ["p", "q", "r"], "d": ["m", "n"]}
    model = dpgm.MarkovNetwork.from_cliques([("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")], states)
    model = model.with_log_potentials({s: rng.normal(0, 1, t.shape) for s, t in model.potentials.items()})
    frame = pd.DataFrame({v: pd.Categorical(rng.choice(s, 250), categories=s) for v, s in states.items()})
    data = _with_missing(dpgm.from_pandas(frame), 0.25, 6)
    scores = dpgm.score(model, data)
    np.testing.assert_allclose(scores.values, _brute_scores(model, data), rtol=1e-10)
    # the probabilities of every complete assignment sum to one
    grid = pd.MultiIndex.from_product(states.values(), names=list(states)).to_frame(index=False)
    every = dpgm.from_pandas(grid.astype({v: pd.CategoricalDtype(s) for v, s in states.items()}))
    assert np.exp(dpgm.score(model, every).values).sum() == pytest.approx(1.0, rel=1e-12)


def test_log_linear_model_fitted_equals_enumeration_and_labels_in_another_order_score_the_same():
    rng = np.random.default_rng(7)
    states = {"a": ["s0", "s1", "s2"], "b": ["s0", "s1"], "c": ["s0", "s1", "s2"]}
    a = rng.integers(0, 3, 800)
    b = np.where(rng.random(800) < 0.6, a % 2, rng.integers(0, 2, 800))
    c = np.where(rng.random(800) < 0.5, (a + b) % 3, rng.integers(0, 3, 800))
    frame = pd.DataFrame({v: pd.Categorical([states[v][x] for x in codes], categories=states[v])
                          for v, codes in (("a", a), ("b", b), ("c", c))})
    model = dpgm.LogLinearModel.from_margins([("a", "b"), ("b", "c"), ("c", "a")], states)
    fitted = dpgm.fit(model, dpgm.from_pandas(frame), tol=1e-10).model
    data = _with_missing(dpgm.from_pandas(frame.head(200)), 0.3, 8)
    scores = dpgm.score(fitted, data)
    np.testing.assert_allclose(scores.values, _brute_scores(fitted, data), rtol=1e-10)
    reversed_labels = frame.head(200).astype({"a": pd.CategoricalDtype(states["a"][::-1])})
    other = dpgm.from_pandas(reversed_labels)
    np.testing.assert_allclose(dpgm.score(fitted, other).values,
                               dpgm.score(fitted, dpgm.from_pandas(frame.head(200))).values, rtol=1e-12)


def test_weights_weigh_the_total_and_the_rows(cancer):
    data = dpgm.sample_bayesian_network(cancer, 100, seed=2).compute()
    weights = np.random.default_rng(0).integers(0, 4, 100).astype(float)
    weighted = data.assign(weight=("row", weights))
    scores = dpgm.score(cancer, weighted)
    assert float(scores.total) == pytest.approx(float(weights @ scores.values), rel=1e-12)
    assert float(scores.rows) == weights.sum()
    assert float(scores.mean_per_row) == pytest.approx(float(weights @ scores.values) / weights.sum(), rel=1e-12)


def test_bad_input_is_a_data_error_naming_the_variable(cancer):
    data = dpgm.sample_bayesian_network(cancer, 50, seed=2).compute()
    continuous = data.assign(Xray=("row", np.linspace(0, 1, 50)))
    with pytest.raises(DataError, match="Xray"):
        dpgm.score(cancer, continuous)
    codes = data["Dyspnoea"].values.copy()
    codes[7] = 5
    with pytest.raises(DataError, match=r"Dyspnoea.*chunk 0|chunk 0.*Dyspnoea"):
        dpgm.score(cancer, data.assign(Dyspnoea=data["Dyspnoea"].copy(data=codes))).compute()
    with pytest.raises(TypeError, match="parameterized"):
        dpgm.score(dpgm.BayesianNetwork.from_edges(cancer.edges), data)

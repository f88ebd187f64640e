"""Hybrid networks (tables and GLM nodes) against per-node statsmodels fits and the tables' closed-form MLE.

The network's log-likelihood factorizes over nodes, so it must equal the sum of
statsmodels' ``llf`` of every GLM node (fitted alone, in memory) plus
``sum n log(n / n_parents)`` of every table (pandas counts): rel 1e-8 after fitting
to ``tol=1e-12``; coefficients rel 1e-8 as in tests/api/test_glm.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

import dpgm
from dpgm.errors import DataError

EDGES = [("region", "smoker"), ("age", "income"), ("region", "income"), ("income", "default"),
         ("smoker", "default"), ("age", "visits"), ("smoker", "visits")]
FAMILIES = {"age": "gaussian", "income": "gaussian", "default": "bernoulli", "visits": "poisson"}


def _frame(n: int = 6000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    region = rng.choice(3, n, p=[0.5, 0.3, 0.2])
    smoker = (rng.random(n) < np.array([0.2, 0.35, 0.5])[region]).astype(int)
    age = rng.normal(45, 12, n)
    income = 20 + 0.5 * age + np.array([0.0, 5.0, -3.0])[region] + rng.normal(0, 6, n)
    eta = -4 + 0.08 * income + 0.7 * smoker
    default = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int)
    visits = rng.poisson(np.exp(-1 + 0.03 * age + 0.4 * smoker)).astype(float)
    return pd.DataFrame({
        "region": pd.Categorical.from_codes(region, ["north", "south", "west"]),
        "smoker": pd.Categorical.from_codes(smoker, ["no", "yes"]),
        "age": age, "income": income,
        "default": pd.Categorical.from_codes(default, ["no", "yes"]), "visits": visits,
    })


def _design(frame: pd.DataFrame, parents: list[str]) -> np.ndarray:
    columns = [np.ones(len(frame))]
    for p in parents:
        if isinstance(frame[p].dtype, pd.CategoricalDtype):
            codes = frame[p].cat.codes.values
            columns += [(codes == k).astype(float) for k in range(1, len(frame[p].cat.categories))]
        else:
            columns.append(frame[p].values)
    return np.column_stack(columns)


def _oracle(frame: pd.DataFrame) -> tuple[float, dict]:
    """Sum of per-node statsmodels log-likelihoods and the tables' MLE log-likelihood; the GLM fits."""
    fits = {}
    parents = {v: [p for p, c in EDGES if c == v] for v in FAMILIES}
    families = {"gaussian": sm.families.Gaussian(), "bernoulli": sm.families.Binomial(),
                "poisson": sm.families.Poisson()}
    for v, family in FAMILIES.items():
        y = frame[v].cat.codes.values.astype(float) if family == "bernoulli" else frame[v].values
        fits[v] = sm.GLM(y, _design(frame, parents[v]), family=families[family]).fit(tol=1e-13)
    loglik = sum(f.llf for f in fits.values())
    counts = frame["region"].value_counts().values
    loglik += float(np.sum(counts * np.log(counts / counts.sum())))
    joint = pd.crosstab(frame["smoker"], frame["region"]).values.astype(float)
    loglik += float(np.sum(joint * np.log(joint / joint.sum(axis=0, keepdims=True))))
    return loglik, fits


@pytest.mark.slow
def test_hybrid_network_from_zarr_on_two_workers_equals_statsmodels_per_node(tmp_path, client):
    frame = _frame()
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "h.zarr", chunk_rows=1700)  # ragged last chunk
    data = dpgm.open_dataset(tmp_path / "h.zarr")
    result = dpgm.fit(dpgm.HybridNetwork(EDGES, FAMILIES), data, client=client, tol=1e-12)
    loglik, fits = _oracle(frame)
    assert result.loglik == pytest.approx(loglik, rel=1e-8)
    network = result.model
    for v, fit in fits.items():
        np.testing.assert_allclose(network.conditionals[v].coefficients.values, fit.params, rtol=1e-8)
        np.testing.assert_allclose(network.conditionals[v].standard_errors.values, fit.bse, rtol=1e-6)
        assert result.info["nodes"][v].g2 == pytest.approx(fit.deviance, rel=1e-9)
    table = pd.crosstab(frame["smoker"], frame["region"], normalize="columns")
    np.testing.assert_allclose(network.tables["smoker"].transpose("smoker", "region").values, table.values,
                               rtol=1e-12)
    # all GLM nodes iterate in the same passes: as many passes as the slowest node needs, not their sum
    node_passes = [r.passes for r in result.info["nodes"].values()]
    assert result.passes == max(node_passes) < sum(node_passes)
    assert result.converged
    # free parameters: tables 2 + 3; coefficients age 1, income 4, default 3, visits 3; 2 variances
    assert result.n_params == 2 + 3 + 1 + 4 + 3 + 3 + 2


def test_hybrid_network_in_memory_round_trips_and_refuses_bad_nodes(tmp_path):
    frame = _frame(n=3000, seed=1)
    data = dpgm.from_pandas(frame)
    result = dpgm.fit(dpgm.HybridNetwork(EDGES, FAMILIES), data, tol=1e-12)
    loglik, fits = _oracle(frame)
    assert result.loglik == pytest.approx(loglik, rel=1e-8)
    design = _design(frame, ["income", "smoker"])  # a GLM node's prediction from its parents
    np.testing.assert_allclose(dpgm.predict_proba(result.model, data, "default").values[:, 1],
                               fits["default"].predict(design), rtol=1e-8)
    result.model.save(str(tmp_path / "net.zarr"))
    back = dpgm.load(str(tmp_path / "net.zarr"))
    for v in FAMILIES:
        assert back.conditionals[v].coefficients.equals(result.model.conditionals[v].coefficients)
    assert back.tables["smoker"].equals(result.model.tables["smoker"])
    families = dict(FAMILIES)
    families.pop("default")  # a categorical child of a continuous parent must be a logit GLM
    with pytest.raises(DataError, match="default.*continuous parents"):
        dpgm.fit(dpgm.HybridNetwork(EDGES, families), data)
    families = dict(FAMILIES)
    families.pop("age")  # a continuous variable cannot be a table
    with pytest.raises(DataError, match="age.*continuous"):
        dpgm.fit(dpgm.HybridNetwork(EDGES, families), data)

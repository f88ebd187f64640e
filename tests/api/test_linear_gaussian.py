"""Linear-Gaussian Bayesian networks from one moments pass, against statsmodels OLS per node."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import statsmodels.api as sm

import dpgm

EDGES = [("a", "c"), ("b", "c"), ("c", "d"), ("a", "d"), ("d", "e")]


def _data(n: int = 5000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = rng.normal(2.0, 1.0, n)
    b = rng.normal(-1.0, 2.0, n)
    c = 0.5 + 1.5 * a - 0.7 * b + rng.normal(0, 0.5, n)
    d = -2.0 + 0.3 * c + 0.8 * a + rng.normal(0, 1.0, n)
    e = 1e3 + 2.0 * d + rng.normal(0, 0.1, n)  # a large intercept
    return pd.DataFrame({"a": a, "b": b, "c": c, "d": d, "e": e})


def test_every_node_equals_ordinary_least_squares():
    frame = _data()
    network = dpgm.LinearGaussianNetwork(EDGES)
    result = dpgm.fit(network, dpgm.from_pandas(frame))
    for v in network.variables:
        parents = list(network.parents(v))
        design = sm.add_constant(frame[parents].to_numpy(), has_constant="add") if parents else np.ones((len(frame), 1))
        ols = sm.OLS(frame[v].to_numpy(), design).fit()
        fitted = result.model.parameters[v]
        assert fitted["intercept"] == pytest.approx(ols.params[0], rel=1e-10)
        np.testing.assert_allclose(fitted["coefficients"].values, ols.params[1:], rtol=1e-10)
        # the MLE residual variance has divisor n (OLS's scale divides by n - k)
        assert fitted["variance"] == pytest.approx(ols.ssr / len(frame), rel=1e-10)
    # the log-likelihood is the sum of the nodes' Gaussian log-densities at the fit (SciPy)
    total = 0.0
    for v in network.variables:
        p = result.model.parameters[v]
        prediction = p["intercept"] + frame[list(network.parents(v))].to_numpy() @ p["coefficients"].values
        total += scipy.stats.norm(prediction, np.sqrt(p["variance"])).logpdf(frame[v].to_numpy()).sum()
    assert result.loglik == pytest.approx(total, rel=1e-11)
    assert result.n_params == 5 * 2 + len(EDGES)


def test_zarr_on_the_cluster_and_save_load(tmp_path, client):
    frame = _data(n=30_000, seed=1)
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "lg.zarr", chunk_rows=4000)
    network = dpgm.LinearGaussianNetwork(EDGES)
    on_cluster = dpgm.fit(network, dpgm.open_dataset(tmp_path / "lg.zarr"), client=client)
    in_memory = dpgm.fit(network, dpgm.from_pandas(frame))
    for v in network.variables:
        np.testing.assert_allclose(on_cluster.model.parameters[v]["coefficients"].values,
                                   in_memory.model.parameters[v]["coefficients"].values, rtol=1e-10)
    on_cluster.model.save(tmp_path / "model.zarr")
    again = dpgm.load(tmp_path / "model.zarr")
    assert again.edges == on_cluster.model.edges
    for v in network.variables:
        assert again.parameters[v]["variance"] == on_cluster.model.parameters[v]["variance"]
        np.testing.assert_array_equal(again.parameters[v]["coefficients"].values,
                                      on_cluster.model.parameters[v]["coefficients"].values)


def test_bad_structures_and_data_are_refused():
    with pytest.raises(ValueError, match="cycle"):
        dpgm.LinearGaussianNetwork([("a", "b"), ("b", "a")])
    frame = _data(n=100).assign(f=lambda f: 2.0 * f["a"])
    with pytest.raises(dpgm.DataError, match="variable 'f'.*exact linear function"):
        dpgm.fit(dpgm.LinearGaussianNetwork([("a", "f")]), dpgm.from_pandas(frame))
    with pytest.raises(dpgm.DataError, match="variable 'g'.*collinear"):
        dpgm.fit(dpgm.LinearGaussianNetwork([("a", "g"), ("f", "g")]),
                 dpgm.from_pandas(frame.assign(g=frame["b"])))
    with pytest.raises(dpgm.DataError, match="1 rows have a missing value"):
        dpgm.fit(dpgm.LinearGaussianNetwork(EDGES), dpgm.from_pandas(_data(n=50).mask(lambda f: np.arange(len(f))[:, None] == np.where(f.columns == "c", 3, -1))))

"""GLM conditionals fitted by IRLS against statsmodels (GLM, MNLogit), from memory and from Zarr on a cluster.

Tolerances: both sides are run to convergence far below rounding (dpgm ``tol=1e-12``
on the relative deviance change, statsmodels ``tol=1e-13``/``1e-14``), so they agree
to rounding: coefficients rel 1e-8, standard errors rel 1e-6 (statsmodels takes X'WX
one iterate earlier), deviance and log-likelihood rel 1e-9. The same statistics
summed over other chunkings agree to rel 1e-10.
"""

from __future__ import annotations

import dask
import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

import dpgm
from dpgm.errors import ConvergenceWarning, DataError

TRUE = np.array([0.3, 0.8, -0.5, 0.4, -0.3])  # Intercept, x, g[b], g[c], z


def _frame(n: int = 4000, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """Rows with a continuous x, z and a 3-state g; responses of every family; the design matrix."""
    rng = np.random.default_rng(seed)
    x, z = rng.normal(size=n), rng.uniform(-1, 1, size=n)
    g = pd.Categorical(rng.choice(["a", "b", "c"], n), categories=["a", "b", "c"])
    design = np.column_stack([np.ones(n), x, g.codes == 1, g.codes == 2, z]).astype(float)
    eta = design @ TRUE
    coefficients = np.array([[0.3, 0.8, -0.5, 0.4, 0.2], [-0.2, -0.6, 0.3, 0.9, -0.4]])
    scores = np.column_stack([np.zeros(n), design @ coefficients.T])
    prob = np.exp(scores - scores.max(1, keepdims=True))
    prob /= prob.sum(1, keepdims=True)
    cls = (rng.random(n)[:, None] > prob.cumsum(1)).sum(1)
    frame = pd.DataFrame({
        "x": x, "g": g, "z": z,
        "gaussian": eta + rng.normal(size=n),
        "bernoulli": (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float),
        "poisson": rng.poisson(np.exp(eta)).astype(float),
        "categorical": pd.Categorical.from_codes(cls, ["lo", "mid", "hi"]),
        "weight": rng.integers(1, 4, size=n).astype(float),
    })
    return frame, design


FAMILIES = {"gaussian": sm.families.Gaussian(), "bernoulli": sm.families.Binomial(), "poisson": sm.families.Poisson()}
TERMS = ["Intercept", "x", "g[b]", "g[c]", "z"]


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("weighted", [False, True])
def test_each_family_equals_statsmodels_glm(family, weighted):
    frame, design = _frame(seed=1)
    data = dpgm.from_pandas(frame if weighted else frame.drop(columns="weight"))
    result = dpgm.fit(dpgm.GLMConditional(family, ["x", "g", "z"], family=family), data, tol=1e-12)
    oracle = sm.GLM(frame[family].values, design, family=FAMILIES[family],
                    freq_weights=frame["weight"].values if weighted else None).fit(tol=1e-13)
    model = result.model
    assert list(model.coefficients.coords["term"].values) == TERMS
    assert model.coefficients.dims == ("term",)
    np.testing.assert_allclose(model.coefficients.values, oracle.params, rtol=1e-8)
    np.testing.assert_allclose(model.standard_errors.values, oracle.bse, rtol=1e-6)
    assert result.g2 == pytest.approx(oracle.deviance, rel=1e-9)
    assert result.loglik == pytest.approx(oracle.llf, rel=1e-9)
    assert result.n_rows == pytest.approx(oracle.model.wnobs if weighted else len(frame))
    assert result.converged
    if family == "gaussian":  # normal equations and one refinement; the MLE variance (divisor n) as scale
        assert result.passes == 2
        assert model.scale == pytest.approx(oracle.deviance / oracle.model.wnobs, rel=1e-9)
    else:  # statsmodels' AIC counts the coefficients; dpgm's adds the gaussian variance
        assert result.aic == pytest.approx(oracle.aic, rel=1e-9)
        assert result.passes == result.n_iter + 1


def test_categorical_child_equals_statsmodels_mnlogit():
    frame, design = _frame(seed=2)
    data = dpgm.from_pandas(frame.drop(columns="weight"))
    result = dpgm.fit(dpgm.GLMConditional("categorical", ["x", "g", "z"], family="multinomial"), data, tol=1e-12)
    codes = frame["categorical"].cat.codes.values
    oracle = sm.MNLogit(codes, design).fit(method="newton", tol=1e-14, maxiter=100, disp=0)
    model = result.model
    assert model.family == "categorical"
    assert model.coefficients.dims == ("term", "state")
    assert list(model.coefficients.coords["state"].values) == ["mid", "hi"]
    np.testing.assert_allclose(model.coefficients.values, oracle.params, rtol=1e-8)
    np.testing.assert_allclose(model.standard_errors.values, oracle.bse, rtol=1e-6)
    assert result.loglik == pytest.approx(oracle.llf, rel=1e-9)
    assert result.g2 == pytest.approx(-2 * oracle.llf, rel=1e-9)
    assert result.n_params == 10
    table = model.summary()
    assert "categorical=hi" in table and "g[c]" in table and "std err" in table


def test_frequency_weights_equal_repeated_rows_for_the_categorical_family():
    frame, _ = _frame(n=1500, seed=3)
    weighted = dpgm.fit(dpgm.GLMConditional("categorical", ["x", "g"], family="categorical"),
                        dpgm.from_pandas(frame), tol=1e-12)
    repeated = frame.loc[frame.index.repeat(frame["weight"].astype(int))].drop(columns="weight")
    expanded = dpgm.fit(dpgm.GLMConditional("categorical", ["x", "g"], family="categorical"),
                        dpgm.from_pandas(repeated.reset_index(drop=True)), tol=1e-12)
    np.testing.assert_allclose(weighted.model.coefficients.values, expanded.model.coefficients.values, rtol=1e-9)
    np.testing.assert_allclose(weighted.model.standard_errors.values, expanded.model.standard_errors.values,
                               rtol=1e-9)


def test_zarr_on_the_cluster_equals_memory(tmp_path, client):
    frame, _ = _frame(n=10_000, seed=4)
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "glm.zarr", chunk_rows=3000)  # ragged last chunk
    stored = dpgm.open_dataset(tmp_path / "glm.zarr")
    for family in ("bernoulli", "categorical", "gaussian"):
        glm = dpgm.GLMConditional(family, ["x", "g", "z"], family=family)
        on_cluster = dpgm.fit(glm, stored, client=client, tol=1e-12)
        in_memory = dpgm.fit(glm, dpgm.from_pandas(frame), tol=1e-12)
        np.testing.assert_allclose(on_cluster.model.coefficients.values, in_memory.model.coefficients.values,
                                   rtol=1e-10)
        np.testing.assert_allclose(on_cluster.model.standard_errors.values,
                                   in_memory.model.standard_errors.values, rtol=1e-10)
        assert on_cluster.g2 == pytest.approx(in_memory.g2, rel=1e-10)
        assert on_cluster.passes == in_memory.passes


def test_count_child_stored_as_integer_states_is_a_poisson_response():
    frame, design = _frame(n=2000, seed=5)
    counts = frame.assign(poisson=frame["poisson"].astype(int)).drop(columns="weight")
    data = dpgm.from_pandas(counts)
    assert data["poisson"].attrs["states"]  # integers become categorical states "0", "1", ...
    result = dpgm.fit(dpgm.GLMConditional("poisson", ["x", "g", "z"], family="poisson"), data, tol=1e-12)
    oracle = sm.GLM(frame["poisson"].values, design, family=sm.families.Poisson()).fit(tol=1e-13)
    np.testing.assert_allclose(result.model.coefficients.values, oracle.params, rtol=1e-8)


def test_missing_rows_are_refused_with_their_count_or_dropped_listwise():
    frame, _ = _frame(n=2000, seed=6)
    frame = frame.drop(columns="weight")
    frame.loc[[3, 10, 11], "x"] = np.nan
    frame.loc[[10, 20], "bernoulli"] = np.nan
    glm = dpgm.GLMConditional("bernoulli", ["x", "g"], family="logistic")
    with pytest.raises(DataError, match="4 rows have a missing value"):
        dpgm.fit(glm, dpgm.from_pandas(frame))
    listwise = dpgm.fit(glm, dpgm.from_pandas(frame), missing="listwise", tol=1e-12)
    complete = dpgm.fit(glm, dpgm.from_pandas(frame.dropna().reset_index(drop=True)), tol=1e-12)
    assert listwise.info["n_missing"] == 4
    np.testing.assert_allclose(listwise.model.coefficients.values, complete.model.coefficients.values, rtol=1e-12)


def test_l2_penalty_is_ridge_on_all_terms_but_the_intercept():
    frame, design = _frame(n=1000, seed=7)
    result = dpgm.fit(dpgm.GLMConditional("gaussian", ["x", "g", "z"], l2=5.0), dpgm.from_pandas(
        frame.drop(columns="weight")))
    penalty = np.diag([0.0, 5.0, 5.0, 5.0, 5.0])
    ridge = np.linalg.solve(design.T @ design + penalty, design.T @ frame["gaussian"].values)
    np.testing.assert_allclose(result.model.coefficients.values, ridge, rtol=1e-10)


def test_save_and_load_round_trip(tmp_path):
    frame, _ = _frame(n=1000, seed=8)
    for family in ("categorical", "poisson"):
        fitted = dpgm.fit(dpgm.GLMConditional(family, ["x", "g"], family=family), dpgm.from_pandas(frame)).model
        fitted.save(tmp_path / f"{family}.zarr")
        again = dpgm.load(tmp_path / f"{family}.zarr")
        assert isinstance(again, dpgm.GLMConditional)
        assert (again.child, again.parents, again.family, again.deviance) == (
            fitted.child, fitted.parents, fitted.family, fitted.deviance)
        assert again.coefficients.identical(fitted.coefficients)
        assert again.standard_errors.identical(fitted.standard_errors)


def test_bad_input_is_refused_clearly():
    frame, _ = _frame(n=500, seed=9)
    data = dpgm.from_pandas(frame.assign(one=pd.Categorical(["only"] * len(frame))))
    with pytest.raises(DataError, match="at least two states"):
        dpgm.fit(dpgm.GLMConditional("one", ["x"], family="categorical"), data)
    with pytest.raises(DataError, match=r"\['nope'\] not in the data"):
        dpgm.fit(dpgm.GLMConditional("bernoulli", ["x", "nope"], family="bernoulli"), data)
    with pytest.raises(DataError, match="exactly two states"):
        dpgm.fit(dpgm.GLMConditional("categorical", ["x"], family="bernoulli"), data)
    with pytest.raises(DataError, match="needs a continuous child"):
        dpgm.fit(dpgm.GLMConditional("g", ["x"], family="gaussian"), data)
    with pytest.raises(DataError, match=r"must lie in \[0, 1\]"):
        dpgm.fit(dpgm.GLMConditional("poisson", ["x"], family="bernoulli"), data)
    with pytest.raises(ValueError, match="unknown family 'probit'"):
        dpgm.GLMConditional("bernoulli", ["x"], family="probit")
    with pytest.raises(ValueError, match="among its own parents"):
        dpgm.GLMConditional("x", ["x"])
    with pytest.raises(dpgm.errors.ConfigError, match="max_iter"):
        dpgm.fit(dpgm.GLMConditional("gaussian", ["x"]), data, max_iter=0)


def test_perfect_separation_warns_naming_the_parent_term():
    rng = np.random.default_rng(10)
    x = rng.normal(size=400)
    frame = pd.DataFrame({"x": x, "z": rng.normal(size=400), "y": (x > 0).astype(float)})
    with pytest.warns(ConvergenceWarning, match=r"GLM node 'y'.*separation.*parent term 'x'"):
        result = dpgm.fit(dpgm.GLMConditional("y", ["x", "z"], family="bernoulli"), dpgm.from_pandas(frame))
    assert result.info["separated_rows"] > 0
    assert np.isfinite(result.model.coefficients.values).all()
    # in a hybrid network the same node, in the passes shared with the other nodes, warns the same way
    network = dpgm.HybridNetwork([("x", "y"), ("z", "y")], {"x": "gaussian", "z": "gaussian", "y": "bernoulli"})
    with pytest.warns(ConvergenceWarning, match=r"GLM node 'y'.*separation.*parent term 'x'"):
        fitted = dpgm.fit(network, dpgm.from_pandas(frame))
    assert np.isfinite(fitted.model.conditionals["y"].coefficients.values).all()


def test_stopping_at_max_iter_warns_naming_the_node():
    frame, _ = _frame(n=2000, seed=14)
    data = dpgm.from_pandas(frame.drop(columns="weight"))
    with pytest.warns(ConvergenceWarning, match=r"IRLS for GLM node 'poisson' stopped after 2 iterations"):
        result = dpgm.fit(dpgm.GLMConditional("poisson", ["x", "g", "z"], family="poisson"), data, max_iter=2)
    assert not result.converged and result.n_iter == 2


def test_one_compute_per_irls_pass(tmp_path, monkeypatch):
    import dpgm.cluster

    frame, _ = _frame(n=3000, seed=11)
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "glm.zarr", chunk_rows=700)
    calls = []
    compute = dpgm.cluster.compute
    monkeypatch.setattr(dpgm.cluster, "compute", lambda *a, **k: calls.append(1) or compute(*a, **k))
    with dask.config.set(scheduler="sync"):
        result = dpgm.fit(dpgm.GLMConditional("poisson", ["x", "g", "z"], family="poisson"),
                          dpgm.open_dataset(tmp_path / "glm.zarr"), tol=1e-10)
    assert len(calls) == result.passes == result.n_iter + 1


def test_gaussian_response_with_a_large_offset_keeps_its_digits():
    """Mean 1e8, residual sd 1: the RSS from sums of squares would lose ~16 digits; from residuals it keeps them.

    Oracle: statsmodels on the response with the offset removed (exact in float64), whose
    slopes, deviance and standard errors the offset does not change; the intercept moves by 1e8.
    """
    frame, design = _frame(n=5000, seed=12)
    offset = 1e8
    shifted = frame.drop(columns="weight").assign(gaussian=frame["gaussian"] + offset)
    result = dpgm.fit(dpgm.GLMConditional("gaussian", ["x", "g", "z"]), dpgm.from_pandas(shifted), tol=1e-12)
    oracle = sm.GLM(frame["gaussian"].values, design, family=sm.families.Gaussian()).fit()
    expected = np.asarray(oracle.params).copy()
    expected[0] += offset
    beta = result.model.coefficients.values
    assert beta[0] == pytest.approx(expected[0], rel=1e-14)
    np.testing.assert_allclose(beta[1:], expected[1:], rtol=1e-8)
    assert result.g2 == pytest.approx(oracle.deviance, rel=1e-8)
    assert result.loglik == pytest.approx(oracle.llf, rel=1e-10)
    np.testing.assert_allclose(result.model.standard_errors.values, oracle.bse, rtol=1e-8)


def test_predictions_equal_statsmodels_and_are_written_back_into_the_store(tmp_path, client):
    """predict (means) and predict_proba (state probabilities) against statsmodels' predict on new rows.

    The fit and the oracle are the same model (coefficients rel 1e-8), so the predictions
    agree to rel 1e-8; the written variables read back equal to what was returned.
    """
    frame, design = _frame(n=5000, seed=13)
    dpgm.write_dataset(dpgm.from_pandas(frame.drop(columns="weight")), tmp_path / "glm.zarr", chunk_rows=1300)
    stored = dpgm.open_dataset(tmp_path / "glm.zarr")
    models = {}
    for family in ("gaussian", "poisson", "bernoulli"):
        fitted = models[family] = dpgm.fit(dpgm.GLMConditional(family, ["x", "g", "z"], family=family), stored, client=client,
                          tol=1e-12).model
        oracle = sm.GLM(frame[family].values, design, family=FAMILIES[family]).fit(tol=1e-13)
        expected = oracle.predict(design)
        if family == "bernoulli":
            probabilities = dpgm.predict_proba(fitted, stored, family, write=True, client=client)
            np.testing.assert_allclose(probabilities.values, np.column_stack([1 - expected, expected]), rtol=1e-8)
            assert list(probabilities.coords[family].values) == ["0", "1"]
            predicted = dpgm.predict(fitted, stored, write=True, client=client)
            np.testing.assert_array_equal(predicted.values, (expected > 0.5).astype(int))
        else:
            predicted = dpgm.predict(fitted, stored, write=True, client=client)
            np.testing.assert_allclose(predicted.values, expected, rtol=1e-8)
        reread = dpgm.open_dataset(tmp_path / "glm.zarr")
        np.testing.assert_array_equal(reread[f"{family}_predicted"].values, predicted.values)
    assert dpgm.Schema.from_dataset(reread)["bernoulli_predicted"].states == ("0", "1")
    codes = frame["categorical"].cat.codes.values
    multinomial = dpgm.fit(dpgm.GLMConditional("categorical", ["x", "g", "z"], family="categorical"), stored,
                           client=client, tol=1e-12).model
    oracle = sm.MNLogit(codes, design).fit(method="newton", tol=1e-14, maxiter=100, disp=False)
    probabilities = dpgm.predict_proba(multinomial, stored, "categorical")
    np.testing.assert_allclose(probabilities.values, oracle.predict(design), rtol=1e-7)
    assert list(probabilities.coords["categorical"].values) == ["lo", "mid", "hi"]
    np.testing.assert_array_equal(dpgm.predict(multinomial, stored).values, oracle.predict(design).argmax(axis=1))
    with pytest.raises(TypeError, match="dpgm.predict gives its mean"):
        dpgm.predict_proba(models["poisson"], stored, "poisson")

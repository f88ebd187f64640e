"""``dpgm fit`` with ``model: glm`` / ``model: hybrid_network`` specifications, in real subprocesses.

Oracle: statsmodels GLM on the same rows (coefficients rel 1e-8 after tol=1e-12).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from cli_runs import run_dpgm

import dpgm

pytestmark = pytest.mark.usefixtures("shared_cluster")  # commands on the session's cluster (cli_runs)

def run(*args, check=True):
    return run_dpgm(*args, check=check, timeout=180)


def _rows(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    g = rng.integers(0, 3, n)
    eta = -0.3 + 0.9 * x + np.array([0.0, 0.5, -0.4])[g]
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int)
    return pd.DataFrame({"x": x, "g": pd.Categorical.from_codes(g, ["a", "b", "c"]),
                         "y": pd.Categorical.from_codes(y, ["no", "yes"]), "w": 2.0 * x + rng.normal(size=n)})


@pytest.mark.slow
def test_fit_glm_and_hybrid_specifications_from_the_command_line(tmp_path):
    frame = _rows()
    store = tmp_path / "rows.zarr"
    dpgm.write_dataset(dpgm.from_pandas(frame), store, chunk_rows=1000)
    design = np.column_stack([np.ones(len(frame)), frame["x"], frame["g"].cat.codes == 1,
                              frame["g"].cat.codes == 2]).astype(float)
    oracle = sm.GLM(frame["y"].cat.codes.values.astype(float), design, family=sm.families.Binomial()).fit(tol=1e-13)
    (tmp_path / "glm.yaml").write_text("model: glm\nchild: y\nparents: [x, g]\nfamily: logistic\ntol: 1e-12\n")
    run("fit", tmp_path / "glm.yaml", store, "--out", tmp_path / "glm_model", "--report", tmp_path / "glm.json",
        "--workers", "2")
    fitted = dpgm.load(str(tmp_path / "glm_model"))
    np.testing.assert_allclose(fitted.coefficients.values, oracle.params, rtol=1e-8)
    report = json.loads((tmp_path / "glm.json").read_text())
    assert report["loglik"] == pytest.approx(oracle.llf, rel=1e-9)
    (tmp_path / "net.toml").write_text('model = "hybrid_network"\nedges = [["x", "y"], ["g", "y"], ["x", "w"]]\n'
                                       'families = {y = "bernoulli", w = "gaussian", x = "gaussian"}\n'
                                       "tol = 1e-12\n")
    run("fit", tmp_path / "net.toml", store, "--out", tmp_path / "net_model", "--workers", "2")
    network = dpgm.load(str(tmp_path / "net_model"))
    np.testing.assert_allclose(network.conditionals["y"].coefficients.values, oracle.params, rtol=1e-8)
    slope = sm.OLS(frame["w"].values, np.column_stack([np.ones(len(frame)), frame["x"]])).fit().params
    np.testing.assert_allclose(network.conditionals["w"].coefficients.values, slope, rtol=1e-8)
    # the fitted GLM node's probabilities written back by `dpgm predict`
    run("predict", tmp_path / "glm_model", store, "--variable", "y", "--workers", "2")
    written = dpgm.open_dataset(store)["y_proba"].values
    np.testing.assert_allclose(written[:, 1], oracle.predict(design), rtol=1e-8)
    bad = run("fit", tmp_path / "glm.yaml", store, "--out", tmp_path / "again", "--method", "em", check=False)
    assert bad.returncode == 78 and "GLMConditional" in bad.stderr


@pytest.mark.parametrize("spec, message", [
    ({"model": "glm", "child": "y", "parents": ["x"], "family": "probit"}, "unknown family 'probit'"),
    ({"model": "glm", "parents": ["x"]}, "needs 'child'"),
    ({"model": "glm", "child": "y", "parents": ["x"], "n_init": 3}, "n_init"),
    ({"model": "hybrid_network", "edges": [["x", "y"]], "families": {"y": "cauchy"}}, "unknown family 'cauchy'"),
    ({"model": "hybrid_network", "edges": [["x", "y"]], "latent": {"x": ["a", "b"]}}, "latent variable 'x'"),
])
def test_glm_specifications_are_checked_before_any_pass(spec, message):
    from dpgm.spec import SpecError, build_model

    with pytest.raises(SpecError, match=message):
        build_model(spec, {"x": ("a", "b"), "y": ("no", "yes")})


def test_l2_is_the_glm_penalty_and_stays_a_log_linear_option():
    from dpgm.spec import build_model

    model, _, options = build_model({"model": "glm", "child": "y", "parents": ["x"], "l2": "1e-3"}, {})
    assert model.l2 == 1e-3 and options == {}
    _, _, options = build_model({"model": "log_linear", "margins": [["x"]], "l2": 0.5}, {"x": ("a", "b")})
    assert options == {"l2": 0.5}

"""`dpgm fit` on continuous data in real subprocesses: Gaussian graphical models, mixtures and linear-Gaussian
networks from YAML specifications on a Zarr store, saved with --out, loaded back and compared with NumPy,
scikit-learn and SciPy; `dpgm info` on continuous columns; bad input refused by name."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from sklearn.covariance import graphical_lasso as sklearn_graphical_lasso
from sklearn.mixture import GaussianMixture as SklearnGaussianMixture
from test_cli import _one_line_error, run

import dpgm

pytestmark = pytest.mark.usefixtures("shared_cluster")  # commands on the session's cluster (cli_runs)

VARIABLES = ["a", "b", "c", "d", "e"]


def _frame(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    """Rows from a sparse precision (a 5-cycle plus a chord), a nonzero mean, and a categorical column."""
    rng = np.random.default_rng(seed)
    precision = np.eye(5) * 2.0
    for i, j, w in [(0, 1, 0.6), (1, 2, -0.5), (2, 3, 0.4), (3, 4, 0.5), (4, 0, -0.3), (1, 3, 0.3)]:
        precision[i, j] = precision[j, i] = w
    values = rng.multivariate_normal([1.0, -1.0, 0.0, 3.0, 10.0], np.linalg.inv(precision), n)
    frame = pd.DataFrame(values, columns=VARIABLES)
    return frame.assign(k=pd.Categorical(rng.choice(["x", "y"], n)))


def _store(tmp_path, frame: pd.DataFrame, chunk_rows: int = 700):
    path = tmp_path / "data.zarr"
    dpgm.write_dataset(dpgm.from_pandas(frame), path, chunk_rows=chunk_rows, mode="w")
    return path


def _spec(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def _adjacency(edges: list[tuple[str, str]]) -> np.ndarray:
    on = np.eye(5, dtype=bool)
    for a, b in edges:
        on[VARIABLES.index(a), VARIABLES.index(b)] = on[VARIABLES.index(b), VARIABLES.index(a)] = True
    return on


@pytest.mark.slow
def test_gaussian_graphical_specs_ipf_closed_form_and_glasso(tmp_path):
    frame = _frame()
    store = _store(tmp_path, frame)
    s = np.cov(frame[VARIABLES].to_numpy().T, bias=True)
    # ipf on a non-decomposable graph (a 5-cycle with one chord): Dempster's conditions characterise the MLE --
    # the fitted covariance equals S on the diagonal and every edge, the precision is zero off the graph
    edges = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("e", "a"), ("b", "d")]
    spec = _spec(tmp_path, "ggm.yaml", "model: gaussian_graphical\n"
                 f"edges: {json.dumps([list(e) for e in edges])}\nmethod: ipf\ntol: 1e-13\nmax_iter: 5000\n")
    run("fit", spec, store, "--out", tmp_path / "ggm.zarr", "--report", tmp_path / "ggm.json", "--workers", "2")
    model = dpgm.load(tmp_path / "ggm.zarr")
    report = json.loads((tmp_path / "ggm.json").read_text())
    covariance = model.covariance.transpose("variable", "variable_").values
    precision = np.linalg.inv(covariance)
    on = _adjacency(edges)
    assert list(model.variables) == VARIABLES
    np.testing.assert_allclose(covariance[on], s[on], rtol=1e-8)
    assert np.abs(precision[~on]).max() <= 1e-10 * np.abs(precision).max()
    np.testing.assert_allclose(model.mean.values, frame[VARIABLES].mean().to_numpy(), rtol=1e-12)
    expected = scipy.stats.multivariate_normal(frame[VARIABLES].mean().to_numpy(), covariance).logpdf(
        frame[VARIABLES].to_numpy()).sum()
    assert report["loglik"] == pytest.approx(expected, rel=1e-10)

    # closed form on a decomposable graph given by its cliques: the textbook formula (Lauritzen, Prop. 5.9)
    cliques = [["a", "b", "c"], ["b", "c", "d"], ["d", "e"]]
    spec = _spec(tmp_path, "chordal.yaml", f"model: gaussian_graphical\ncliques: {json.dumps(cliques)}\n"
                 "method: closed_form\n")
    run("fit", spec, store, "--out", tmp_path / "chordal.zarr", "--workers", "2")
    fitted = dpgm.load(tmp_path / "chordal.zarr").covariance.transpose("variable", "variable_").values

    def block(names):
        index = [VARIABLES.index(v) for v in names]
        out = np.zeros((5, 5))
        out[np.ix_(index, index)] = np.linalg.inv(s[np.ix_(index, index)])
        return out

    textbook = block(cliques[0]) + block(cliques[1]) + block(cliques[2]) - block(["b", "c"]) - block(["d"])
    np.testing.assert_allclose(fitted, np.linalg.inv(textbook), rtol=1e-10)

    # the graphical lasso on the complete graph equals scikit-learn's at the same penalty; the specification's
    # method is overridden on the command line
    spec = _spec(tmp_path, "lasso.yaml", "model: gaussian_graphical\n"
                 f"cliques: [{json.dumps(VARIABLES)}]\nalpha: 0.05\ntol: 1e-12\nmax_iter: 500\n")
    run("fit", spec, store, "--method", "glasso", "--out", tmp_path / "lasso.zarr", "--workers", "1")
    ours = dpgm.load(tmp_path / "lasso.zarr").precision.transpose("variable", "variable_").values
    _, theirs = sklearn_graphical_lasso(s, alpha=0.05, tol=1e-12, enet_tol=1e-12, max_iter=1000)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-8)


@pytest.mark.slow
def test_gaussian_mixture_spec_reaches_scikit_learns_optimum(tmp_path):
    rng = np.random.default_rng(4)
    means = np.array([[0.0, 0.0, 0.0], [6.0, 0.0, -3.0], [0.0, 7.0, 3.0]])
    x = np.concatenate([rng.multivariate_normal(m, np.eye(3) * (1 + i), 700) for i, m in enumerate(means)])
    x = x[rng.permutation(len(x))]
    frame = pd.DataFrame(x, columns=["x0", "x1", "x2"]).assign(k=pd.Categorical(rng.choice(["u", "v"], len(x))))
    store = _store(tmp_path, frame, chunk_rows=500)
    # variables default to every continuous column of the data (the categorical 'k' is not one of them)
    spec = _spec(tmp_path, "gmm.yaml", "model: gaussian_mixture\nn_components: 3\ncovariance_type: full\n"
                 "n_init: 3\nrandom_state: 0\nreg_covar: 1e-6\ntol: 1e-10\nmax_iter: 500\n")
    run("fit", spec, store, "--out", tmp_path / "gmm.zarr", "--report", tmp_path / "gmm.json", "--workers", "2")
    model = dpgm.load(tmp_path / "gmm.zarr")
    report = json.loads((tmp_path / "gmm.json").read_text())
    assert model.variables == ("x0", "x1", "x2") and model.n_components == 3
    reference = SklearnGaussianMixture(3, covariance_type="full", n_init=10, reg_covar=1e-6, tol=1e-12,
                                       max_iter=1000, random_state=0).fit(x)
    order = np.argsort(model.means.values[:, 0] + 10 * model.means.values[:, 1])
    theirs = np.argsort(reference.means_[:, 0] + 10 * reference.means_[:, 1])
    # the two EM runs stop by different rules near the same optimum: parameters agree to 1e-5 (the means'
    # standard errors are ~0.04), log-likelihoods to 1e-8
    np.testing.assert_allclose(model.weights.values[order], reference.weights_[theirs], rtol=1e-5)
    np.testing.assert_allclose(model.means.values[order], reference.means_[theirs], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.covariances.values[order], reference.covariances_[theirs], rtol=1e-4,
                               atol=1e-5)
    # the reported log-likelihood is the saved parameters' on the data (SciPy's densities), rel 1e-9
    density = sum(w * scipy.stats.multivariate_normal(m, c).pdf(x) for w, m, c in
                  zip(model.weights.values, model.means.values, model.covariances.values, strict=True))
    assert report["loglik"] == pytest.approx(np.log(density).sum(), rel=1e-9)
    assert report["loglik"] == pytest.approx(reference.score(x) * len(x), rel=1e-8)


@pytest.mark.slow
def test_linear_gaussian_spec_equals_least_squares_and_info_describes_continuous_columns(tmp_path):
    frame = _frame(n=2000, seed=3)
    store = _store(tmp_path, frame)
    info = run("info", store).stdout
    for v in VARIABLES:
        assert any(line.split()[:3] == [v, "float64", "continuous"] for line in info.splitlines()), info
    assert any(line.split()[:2] == ["k", "int8"] and "states: x, y" in line for line in info.splitlines())
    spec = _spec(tmp_path, "lg.toml", 'model = "linear_gaussian"\nedges = [["a", "c"], ["b", "c"], ["c", "d"]]\n'
                 'variables = ["a", "b", "c", "d", "e"]\n')
    run("fit", spec, store, "--out", tmp_path / "lg.zarr", "--workers", "2")
    model = dpgm.load(tmp_path / "lg.zarr")
    assert set(model.variables) == set(VARIABLES)
    for child, parents in [("c", ["a", "b"]), ("d", ["c"]), ("a", []), ("e", [])]:
        design = np.column_stack([np.ones(len(frame)), frame[parents].to_numpy()])
        beta, rss, *_ = np.linalg.lstsq(design, frame[child].to_numpy(), rcond=None)
        fitted = model.parameters[child]
        assert fitted["intercept"] == pytest.approx(beta[0], rel=1e-10)
        np.testing.assert_allclose(fitted["coefficients"].sel(parent=parents).values, beta[1:], rtol=1e-10)
        assert fitted["variance"] == pytest.approx(rss[0] / len(frame), rel=1e-10)


@pytest.mark.slow
def test_bad_continuous_specs_and_data_are_refused_by_name(tmp_path):
    frame = _frame(n=1000, seed=5)
    store = _store(tmp_path, frame, chunk_rows=300)
    spec = _spec(tmp_path, "bad.yaml", "model: gaussian_graphical\nedges: [[a, k]]\n")
    line = _one_line_error(run("fit", spec, store, "--out", tmp_path / "m.zarr", "--workers", "1", check=False), 78)
    assert "['k'] are categorical" in line
    spec = _spec(tmp_path, "bad2.yaml", "model: gaussian_mixture\nn_components: 2\nvariables: [a, z]\n")
    line = _one_line_error(run("fit", spec, store, "--out", tmp_path / "m.zarr", "--workers", "1", check=False), 78)
    assert "['z'] are not in the data" in line
    spec = _spec(tmp_path, "bad3.yaml", "model: gaussian_graphical\nedges: [[a, b]]\nalpha: 0.1\n")
    line = _one_line_error(run("fit", spec, store, "--out", tmp_path / "m.zarr", "--workers", "1", check=False), 78)
    assert "alpha applies to method='glasso'" in line
    # an infinite value is refused naming the variable and its chunk (row 700: the third chunk of 300 rows)
    bad = frame.copy()
    bad.loc[700, "c"] = np.inf
    infinite = _store(tmp_path / "inf", bad, chunk_rows=300)
    spec = _spec(tmp_path, "ok.yaml", "model: gaussian_graphical\nedges: [[a, b], [b, c]]\n")
    line = _one_line_error(run("fit", spec, infinite, "--out", tmp_path / "m.zarr", "--workers", "1", check=False),
                           65)
    assert "variable 'c'" in line and "chunk 2" in line and "infinite" in line
    # a singular covariance: 'e' an exact copy of 'd' -- named, or regularised by reg_covar in a mixture
    singular = _store(tmp_path / "singular", frame.assign(e=frame["d"]), chunk_rows=300)
    spec = _spec(tmp_path, "sing.yaml", "model: gaussian_graphical\ncliques: [[c, d, e]]\n")
    line = _one_line_error(run("fit", spec, singular, "--out", tmp_path / "m.zarr", "--workers", "1", check=False),
                           65)
    assert "singular" in line and "['c', 'd', 'e']" in line
    assert not (tmp_path / "m.zarr").exists()

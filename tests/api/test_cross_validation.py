"""``dpgm.cross_validate`` against peers fitted and scored fold by fold on the same folds.

Oracles: pgmpy's ``BayesianEstimator`` (BDeu) on each fold's training rows and its
``get_state_probability`` on the held-out rows (rtol 1e-9: the same closed form, summed in
another order); scikit-learn's ``graphical_lasso`` on each training fold's covariance and SciPy's
``multivariate_normal.logpdf`` on the held-out rows (rtol 1e-6: both solvers stop at 1e-12 but
take other paths), and ``GraphicalLassoCV`` on the same folds; scikit-learn's ``GaussianMixture``
(its BIC, its parameter count, its ``score_samples``); statsmodels' Poisson GLM for nested
log-linear models (deviance differences, rel 1e-8). The pass count is read from the cluster's
task stream: reads of a data variable's chunks over the number of chunks.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.stats

import dpgm
from dpgm.errors import ConfigError, ConfigTypeError
from dpgm.stats.folds import fold_of


def _asia(n: int = 3000, seed: int = 0):
    return dpgm.sample_bayesian_network(dpgm.load_network("asia"), n, seed=seed).compute()


def _pgmpy_held_out(edges, variables, states, frame: pd.DataFrame, fold: np.ndarray, k: int) -> float:
    from pgmpy.estimators import BayesianEstimator
    from pgmpy.models import DiscreteBayesianNetwork

    network = DiscreteBayesianNetwork(edges)
    network.add_nodes_from(variables)
    estimator = BayesianEstimator(network, frame[fold != k], state_names=states)
    network.add_cpds(*(estimator.estimate_cpd(v, prior_type="BDeu", equivalent_sample_size=5) for v in variables))
    test = frame[fold == k]
    configurations = test.value_counts()
    return float(sum(count * np.log(network.get_state_probability(dict(zip(test.columns, row, strict=True))))
                     for row, count in configurations.items()))


def test_bayesian_network_folds_equal_pgmpy_and_take_two_passes(tmp_path, client):
    from dask.utils import key_split
    from distributed import get_task_stream

    truth = dpgm.load_network("asia")
    data = _asia()
    dpgm.write_dataset(data, tmp_path / "asia.zarr", chunk_rows=400)
    structures = {"truth": truth.edges, "chain": [("smoke", "lung"), ("lung", "either"), ("either", "xray")],
                  "empty": []}
    candidates = {name: dpgm.Candidate(dpgm.BayesianNetwork.from_edges(edges, variables=truth.variables), "bayes")
                  for name, edges in structures.items()}
    stored = dpgm.open_dataset(tmp_path / "asia.zarr")
    n_chunks = len(stored.chunks["row"])
    with get_task_stream(client=client) as stream:
        result = dpgm.cross_validate(candidates, stored, folds=4, random_state=3, client=client, progress=False)
    reads = sum(1 for task in stream.data if key_split(task["key"]) == "open_dataset-smoke")
    assert reads / n_chunks == 2 == result.attrs["passes"]  # 4 folds x 3 candidates (+3 refits): one pass, then scores
    frame = dpgm.to_pandas(data).astype(str)
    states = {v: list(truth.states[v]) for v in truth.variables}
    fold = fold_of(np.arange(len(frame)), 4, 3)
    for name, edges in structures.items():
        expected = [_pgmpy_held_out(edges, truth.variables, states, frame, fold, k) for k in range(4)]
        np.testing.assert_allclose(result.loglik.sel(candidate=name).values, expected, rtol=1e-9)
    np.testing.assert_array_equal(result.rows.values[0], np.bincount(fold, minlength=4))
    assert str(result.chosen.values) == "truth"
    per_row = result.loglik / result.rows
    assert float(result.standard_error.sel(candidate="chain")) == pytest.approx(
        float(per_row.sel(candidate="chain").std(ddof=1)) / 2, rel=1e-12)


def test_folds_are_the_same_whatever_the_chunking(tmp_path):
    data = _asia(1500, seed=2)
    truth = dpgm.load_network("asia")
    results = []
    for chunk_rows in (200, 777):
        path = tmp_path / f"{chunk_rows}.zarr"
        dpgm.write_dataset(data, path, chunk_rows=chunk_rows)
        results.append(dpgm.cross_validate([dpgm.Candidate(truth, "bayes")], dpgm.open_dataset(path), folds=5))
    np.testing.assert_array_equal(results[0].rows.values, results[1].rows.values)
    np.testing.assert_allclose(results[0].loglik.values, results[1].loglik.values, rtol=1e-12)
    # the folds are a uniform draw: their sizes pass a chi-square test against 1/5 each
    sizes = results[0].rows.values[0]
    assert scipy.stats.chisquare(sizes).pvalue > 1e-3


def test_frequency_weights_weigh_the_fold_fits_and_the_held_out_rows():
    """Oracle: pgmpy on each training fold with every row repeated ``weight`` times, scored on the held-out
    fold's rows repeated likewise."""
    truth = dpgm.load_network("asia")
    data = _asia(800, seed=6)
    weights = np.random.default_rng(6).integers(0, 4, data.sizes["row"])
    weighted = data.assign(weight=(("row",), weights.astype(np.float64)))
    result = dpgm.cross_validate([dpgm.Candidate(dpgm.BayesianNetwork.from_edges(truth.edges), "bayes")], weighted,
                                 folds=3)
    frame = dpgm.to_pandas(data).astype(str)
    fold = fold_of(np.arange(len(frame)), 3, 0)
    repeated, repeated_fold = frame.loc[frame.index.repeat(weights)], np.repeat(fold, weights)
    states = {v: list(truth.states[v]) for v in truth.variables}
    expected = [_pgmpy_held_out(truth.edges, truth.variables, states, repeated.reset_index(drop=True),
                                repeated_fold, k) for k in range(3)]
    np.testing.assert_allclose(result.loglik.values[0], expected, rtol=1e-9)
    np.testing.assert_array_equal(result.rows.values[0], np.bincount(fold, weights=weights, minlength=3))


def _gaussian(n: int = 1200, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    precision = np.eye(5) + np.diag([0.4] * 4, 1) + np.diag([0.4] * 4, -1)
    x = rng.multivariate_normal(np.arange(5.0), np.linalg.inv(precision), n)
    return pd.DataFrame(x, columns=list("abcde"))


def test_glasso_alpha_path_equals_scikit_learn_fold_by_fold_and_graphical_lasso_cv_chooses_the_same():
    from sklearn.covariance import GraphicalLassoCV, graphical_lasso

    frame = _gaussian()
    alphas = [0.005, 0.05, 0.2, 0.6]
    model = dpgm.GaussianGraphicalModel([tuple("abcde")])
    candidates = [dpgm.Candidate(model, "glasso", {"alpha": a, "tol": 1e-12}, name=f"{a}") for a in alphas]
    result = dpgm.cross_validate(candidates, dpgm.from_pandas(frame), folds=5)
    x = frame.to_numpy()
    fold = fold_of(np.arange(len(x)), 5, 0)
    for alpha in alphas:
        expected = []
        for k in range(5):
            train, test = x[fold != k], x[fold == k]
            covariance = np.cov(train, rowvar=False, bias=True)
            _, precision = graphical_lasso(covariance, alpha, tol=1e-12, enet_tol=1e-12, max_iter=1000)
            expected.append(scipy.stats.multivariate_normal.logpdf(test, train.mean(axis=0),
                                                                   np.linalg.inv(precision)).sum())
        np.testing.assert_allclose(result.loglik.sel(candidate=f"{alpha}").values, expected, rtol=1e-6)
    splits = [(np.flatnonzero(fold != k), np.flatnonzero(fold == k)) for k in range(5)]
    peer = GraphicalLassoCV(alphas=alphas, cv=splits, tol=1e-12, enet_tol=1e-12, max_iter=1000).fit(x)
    assert float(str(result.chosen.values)) == peer.alpha_


def _clusters(n: int = 900, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [5.0, 1.0], [1.0, 6.0]])
    return centres[rng.integers(0, 3, n)] + rng.normal(0, [0.8, 1.2], (n, 2))


@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_mixture_components_by_bic_and_by_cross_validation_agree_with_scikit_learn(covariance_type):
    from sklearn.mixture import GaussianMixture as SklearnMixture

    x = _clusters()
    data = dpgm.from_pandas(pd.DataFrame(x, columns=["u", "v"]))
    options = {"n_init": 5, "random_state": 0, "tol": 1e-10, "max_iter": 2000}
    candidates = {f"k={k}": dpgm.Candidate(dpgm.GaussianMixture(k, ["u", "v"], covariance_type), "em", options)
                  for k in (1, 2, 3, 4)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.cross_validate(candidates, data, folds=4)
    peers = {k: SklearnMixture(k, covariance_type=covariance_type, n_init=5, tol=1e-10, max_iter=2000,
                               random_state=0).fit(x) for k in (1, 2, 3, 4)}
    for k, peer in peers.items():
        assert int(result.n_params.sel(candidate=f"k={k}")) == peer._n_parameters()
    for k in (1, 3):  # one optimum (the data's three clusters): the same BIC; k=2 and 4 have several optima
        assert float(result.bic.sel(candidate=f"k={k}")) == pytest.approx(peers[k].bic(x), rel=1e-7)
    assert min(peers, key=lambda k: peers[k].bic(x)) == 3 == int(result.bic.argmin()) + 1
    assert str(result.chosen.values) == "k=3"
    # the held-out scores of k=3 are scikit-learn's score_samples of the fold's fitted model on the fold
    fold = fold_of(np.arange(len(x)), 4, 0)
    for k in range(4):
        refit = dpgm.fit(candidates["k=3"].model, data.isel(row=np.flatnonzero(fold != k)), "em", **options).model
        peer = SklearnMixture(3, covariance_type=covariance_type)
        peer.weights_, peer.means_ = refit.weights.values, refit.means.values
        peer.covariances_ = refit.covariances.values
        from sklearn.mixture._gaussian_mixture import _compute_precision_cholesky

        peer.precisions_cholesky_ = _compute_precision_cholesky(peer.covariances_, covariance_type)
        expected = peer.score_samples(x[fold == k]).sum()
        assert float(result.loglik.sel(candidate="k=3", fold=k)) == pytest.approx(expected, rel=1e-9)


def test_em_fold_fits_advance_in_the_same_passes_on_the_cluster(tmp_path, client):
    """Passes from the task stream (reads of a variable's chunks over the chunks): the k-means++ starts' sample
    pass, the longest fold fit's EM passes and one scoring pass, whatever the number of folds and candidates."""
    from dask.utils import key_split
    from distributed import get_task_stream

    x = _clusters(1200, seed=3)
    dpgm.write_dataset(dpgm.from_pandas(pd.DataFrame(x, columns=["u", "v"])), tmp_path / "x.zarr", chunk_rows=300)
    data = dpgm.open_dataset(tmp_path / "x.zarr")
    options = {"n_init": 2, "random_state": 0, "tol": 1e-6, "max_iter": 200}
    candidates = {f"k={k}": dpgm.Candidate(dpgm.GaussianMixture(k, ["u", "v"], "diag"), "em", options)
                  for k in (2, 3)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        with get_task_stream(client=client) as stream:
            result = dpgm.cross_validate(candidates, data, folds=3, refit=False, client=client, progress=False)
    reads = sum(1 for task in stream.data if key_split(task["key"]) == "open_dataset-u")
    assert result.attrs["passes"] == 1 + int(result.fit_passes.max()) + 1 == reads / 4
    assert int(result.fit_passes.min()) < int(result.fit_passes.max())  # fits of other lengths shared passes


def test_nested_log_linear_models_deviances_equal_statsmodels_poisson_glm():
    import statsmodels.api as sm
    import statsmodels.formula.api as smf

    rng = np.random.default_rng(4)
    n = 4000
    a = rng.integers(0, 3, n)
    b = np.where(rng.random(n) < 0.5, a % 2, rng.integers(0, 2, n))
    c = np.where(rng.random(n) < 0.4, (a + b) % 3, rng.integers(0, 3, n))
    frame = pd.DataFrame({v: pd.Categorical([f"s{x}" for x in codes], categories=[f"s{i}" for i in range(m)])
                          for v, codes, m in (("a", a, 3), ("b", b, 2), ("c", c, 3))})
    data = dpgm.from_pandas(frame)
    states = {v: list(frame[v].cat.categories) for v in frame}
    margins = {"independence": [("a",), ("b",), ("c",)], "ab+c": [("a", "b"), ("c",)],
               "ab+bc+ac": [("a", "b"), ("b", "c"), ("a", "c")]}
    formulas = {"independence": "a + b + c", "ab+c": "a * b + c", "ab+bc+ac": "a * b + b * c + a * c"}
    candidates = {name: dpgm.Candidate(dpgm.LogLinearModel.from_margins(m, states), "newton", {"tol": 1e-12})
                  for name, m in margins.items()}
    result = dpgm.cross_validate(candidates, data, folds=3)
    table = frame.value_counts().rename("n").reset_index()
    glms = {name: smf.glm(f"n ~ {f}", table, family=sm.families.Poisson()).fit(tol=1e-12)
            for name, f in formulas.items()}
    names = list(margins)
    for small, big in zip(names, names[1:], strict=False):  # G^2 between nested candidates
        g2 = 2 * float(result.fit_loglik.sel(candidate=big) - result.fit_loglik.sel(candidate=small))
        assert g2 == pytest.approx(glms[small].deviance - glms[big].deviance, rel=1e-8)
        extra = int(result.n_params.sel(candidate=big) - result.n_params.sel(candidate=small))
        assert extra == glms[big].df_model - glms[small].df_model
        assert float(result.aic.sel(candidate=big) - result.aic.sel(candidate=small)) == pytest.approx(
            glms[big].aic - glms[small].aic, rel=1e-8)
    assert str(result.chosen.values) == "ab+bc+ac"


def test_bad_candidates_and_folds_are_refused_before_any_pass():
    data = _asia(200)
    truth = dpgm.load_network("asia")
    with pytest.raises(ConfigError, match="at least one candidate"):
        dpgm.cross_validate([], data)
    with pytest.raises(ConfigError, match="folds must be between 2"):
        dpgm.cross_validate([truth], data, folds=1)
    with pytest.raises(ConfigTypeError, match="folds must be an integer"):
        dpgm.cross_validate([truth], data, folds=2.5)
    with pytest.raises(ConfigError, match=r"candidate 'bad'.*'alpha'"):
        dpgm.cross_validate({"bad": dpgm.Candidate(truth, "mle", {"alpha": 1.0})}, data)
    with pytest.raises(ConfigError, match="'checkpoint'"):
        dpgm.cross_validate([dpgm.Candidate(truth, "mle", {"checkpoint": "x"})], data)
    narrow = dpgm.BayesianNetwork.from_edges([("smoke", "lung")])
    with pytest.raises(ConfigError, match=r"candidate 'narrow' models \[lung, smoke\].*not comparable"):
        dpgm.cross_validate({"asia": truth, "narrow": narrow}, data)
    with pytest.raises(TypeError, match="reads rows"):
        dpgm.cross_validate([truth], dpgm.counts(data, [("smoke", "lung")])[("smoke", "lung")])


def test_a_fold_fit_that_fails_names_the_candidate_and_the_fold():
    data = _asia(300)
    data["smoke"].values[5] = -1  # a missing value: complete-data methods refuse it
    model = dpgm.BayesianNetwork.from_edges(dpgm.load_network("asia").edges)
    with pytest.raises(dpgm.DataError, match="missing values") as raised:
        dpgm.cross_validate({"asia": dpgm.Candidate(model, "mle")}, data, folds=3)
    assert any("candidate 'asia'" in note for note in raised.value.__notes__)

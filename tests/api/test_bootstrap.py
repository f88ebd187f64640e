"""``dpgm.bootstrap`` against independent recomputations and closed-form standard errors.

Oracles: the Poisson weights recomputed by a pure-Python SplitMix64 (integers mod 2**64) and
SciPy's ``poisson.ppf`` at the midpoint uniforms of the outputs' 16-bit quarters (exact); each replicate equal to a plain weighted :func:`dpgm.fit` on
those weights (rtol 1e-12 for closed forms); bootstrap standard errors against the asymptotic
ones within their Monte Carlo error: a multinomial proportion's ``sqrt(p (1 - p) / n)``,
statsmodels' OLS ``bse``, a mean's ``s / sqrt(n)``. The standard error of a bootstrap standard
error from ``B`` replicates is about ``se / sqrt(2 (B - 1))``; each entry is allowed 4 of them.
The pass count is read from the cluster's task stream.
"""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import xarray as xr
from poisson_oracle import oracle_weights

import dpgm
from dpgm.errors import ConfigError, ConfigTypeError


def _weights(n: int, replicate: int, random_state: int) -> np.ndarray:
    """Replicate ``replicate``'s weights of rows ``0 .. n - 1``, recomputed without dpgm (``tests/poisson_oracle.py``)."""
    return oracle_weights(np.arange(n), replicate, random_state)


def _with_weights(data: xr.Dataset, weights: np.ndarray) -> xr.Dataset:
    return data.assign(weight=xr.DataArray(weights.astype(np.float64), dims=("row",)))


def _asia(n: int, seed: int = 0) -> xr.Dataset:
    return dpgm.sample_bayesian_network(dpgm.load_network("asia"), n, seed=seed).compute()


def test_poisson_weights_equal_an_independent_splitmix64_and_poisson_quantile():
    from dpgm.stats.resample import poisson_weights

    for replicate, random_state in ((0, 0), (5, 0), (3, 11), (2, 7), (257, 1)):  # every quarter of an output
        np.testing.assert_array_equal(poisson_weights(np.arange(3000), replicate, random_state),
                                      _weights(3000, replicate, random_state))


def test_poisson_weights_are_poisson_one_and_independent_across_replicates():
    from dpgm.stats.resample import poisson_weights

    draws = np.stack([poisson_weights(np.arange(200_000), b, 7) for b in range(2)])
    observed = np.bincount(np.minimum(draws[0], 6), minlength=7)
    expected = scipy.stats.poisson.pmf(np.arange(7), 1.0) * draws.shape[1]
    expected[6] = scipy.stats.poisson.sf(5, 1.0) * draws.shape[1]
    assert scipy.stats.chisquare(observed, expected).pvalue > 1e-3
    assert abs(np.corrcoef(draws)[0, 1]) < 4 / np.sqrt(draws.shape[1])  # independent replicates


def test_bayesian_network_replicates_from_zarr_take_one_pass_and_equal_weighted_fits(tmp_path, client):
    from dask.utils import key_split
    from distributed import get_task_stream

    data = _asia(2000)
    dpgm.write_dataset(data, tmp_path / "asia.zarr", chunk_rows=300)
    stored = dpgm.open_dataset(tmp_path / "asia.zarr")
    model = dpgm.BayesianNetwork.from_edges(dpgm.load_network("asia").edges)
    with get_task_stream(client=client) as stream:
        result = dpgm.bootstrap(model, stored, replicates=25, random_state=4, client=client, progress=False)
    n_chunks = len(stored.chunks["row"])
    assert result.passes == 1  # the fit on the data and 25 replicates
    # every replicate's tables and the estimate's from one kernel per chunk, reading the store's chunks
    # themselves (no separate read tasks, no count kernel of the estimate's own)
    kernels = Counter(key_split(task["key"]) for task in stream.data)
    assert kernels["dpgm-replicate-counts-map"] == n_chunks and kernels["dpgm-counts-map"] == 0, kernels
    assert not any(name.startswith("open_dataset") for name in kernels), kernels
    for b in (0, 13, 24):
        expected = dpgm.fit(model, _with_weights(data, _weights(2000, b, 4))).model
        for variable in model.variables:
            np.testing.assert_allclose(result.replicates[f"table:{variable}"].isel(replicate=b).values,
                                       expected.cpds[variable].values, rtol=1e-12)
        assert float(result.replicates.loglik[b]) == pytest.approx(
            dpgm.fit(model, _with_weights(data, _weights(2000, b, 4))).loglik, rel=1e-12)
    np.testing.assert_allclose(result.estimate.model.cpds["lung"].values, dpgm.fit(model, data).model.cpds["lung"].values,
                               rtol=1e-12)


def test_replicates_are_the_same_whatever_the_chunking(tmp_path):
    data = _asia(1500, seed=2)
    model = dpgm.BayesianNetwork.from_edges([("smoke", "lung"), ("lung", "either")])
    results = []
    for chunk_rows in (200, 700):
        path = tmp_path / f"asia-{chunk_rows}.zarr"
        dpgm.write_dataset(data, path, chunk_rows=chunk_rows)
        results.append(dpgm.bootstrap(model, dpgm.open_dataset(path)[["smoke", "lung", "either"]], replicates=6,
                                      progress=False))
    xr.testing.assert_allclose(results[0].replicates, results[1].replicates, rtol=1e-12)


def test_cpt_standard_errors_agree_with_the_multinomial_closed_form():
    """se(p_jk) = sqrt(p_jk (1 - p_jk) / n_j) for the MLE of a CPT entry with n_j rows of its parents' states."""
    data = _asia(20_000, seed=5)
    model = dpgm.BayesianNetwork.from_edges([("smoke", "lung"), ("smoke", "bronc"), ("bronc", "dysp")])
    replicates = 400
    result = dpgm.bootstrap(model, data[["smoke", "lung", "bronc", "dysp"]], replicates=replicates,
                            random_state=1, progress=False)
    frame = dpgm.to_pandas(data)
    relative = 4 / np.sqrt(2 * (replicates - 1))
    checked = 0
    for child, parent in (("lung", "smoke"), ("bronc", "smoke"), ("dysp", "bronc")):
        table = pd.crosstab(frame[child], frame[parent])
        p = table / table.sum(axis=0)
        asymptotic = np.sqrt(p * (1 - p) / table.sum(axis=0))
        boot = result.standard_errors[f"table:{child}"].to_pandas()
        for state in table.index:
            for given in table.columns:
                if table.loc[state, given] >= 30 and table[given].sum() - table.loc[state, given] >= 30:
                    ratio = boot.loc[state, given] / asymptotic.loc[state, given]
                    assert abs(ratio - 1) < relative, (child, state, given, ratio)
                    checked += 1
    assert checked >= 8
    interval = result.confidence_interval(0.9)["table:lung"]
    estimate = result.estimate.model.cpds["lung"]
    assert ((interval.sel(bound="lower") <= estimate) & (estimate <= interval.sel(bound="upper"))).all()


def test_glm_coefficient_standard_errors_agree_with_statsmodels():
    import statsmodels.api as sm

    rng = np.random.default_rng(3)
    n = 3000
    x, z = rng.normal(size=n), rng.normal(size=n)
    y = 0.5 + 1.5 * x - 0.7 * z + rng.normal(scale=0.8, size=n)
    data = dpgm.from_pandas(pd.DataFrame({"x": x, "z": z, "y": y}))
    replicates = 300
    result = dpgm.bootstrap(dpgm.GLMConditional("y", ["x", "z"], "gaussian"), data, replicates=replicates,
                            random_state=2, progress=False)
    ols = sm.OLS(y, sm.add_constant(np.column_stack([x, z]))).fit()
    boot = result.standard_errors["coefficients"].values
    np.testing.assert_allclose(boot / ols.bse, 1.0, atol=4 / np.sqrt(2 * (replicates - 1)))
    np.testing.assert_allclose(result.estimate.model.coefficients.values, ols.params, rtol=1e-8)


def test_gaussian_mean_standard_errors_agree_with_s_over_root_n():
    rng = np.random.default_rng(8)
    x = rng.multivariate_normal([0.0, 3.0, -1.0], [[1.0, 0.4, 0.0], [0.4, 2.0, 0.3], [0.0, 0.3, 0.5]], 4000)
    data = dpgm.from_pandas(pd.DataFrame(x, columns=["a", "b", "c"]))
    replicates = 300
    result = dpgm.bootstrap(dpgm.GaussianGraphicalModel([("a", "b"), ("b", "c")]), data, replicates=replicates,
                            method="closed_form", progress=False)
    expected = x.std(axis=0, ddof=1) / np.sqrt(len(x))
    np.testing.assert_allclose(result.standard_errors["mean"].values / expected, 1.0,
                               atol=4 / np.sqrt(2 * (replicates - 1)))


def test_mixture_replicates_start_from_the_estimate_and_keep_its_labels(tmp_path, client):
    from dask.utils import key_split
    from distributed import get_task_stream

    rng = np.random.default_rng(4)
    first = rng.random(900) < 0.35
    x = np.where(first[:, None], rng.normal([0.0, 0.0], 1.0, (900, 2)), rng.normal([5.0, 4.0], 0.8, (900, 2)))
    data = dpgm.from_pandas(pd.DataFrame(x, columns=["u", "v"]))
    dpgm.write_dataset(data, tmp_path / "x.zarr", chunk_rows=300)
    model = dpgm.GaussianMixture(2, ["u", "v"], "diag")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        with get_task_stream(client=client) as stream:
            result = dpgm.bootstrap(model, dpgm.open_dataset(tmp_path / "x.zarr"), replicates=8, random_state=0,
                                    client=client, progress=False, options={"n_init": 2, "tol": 1e-8})
    estimate = result.estimate
    expected = dpgm.fit(estimate.model, _with_weights(data, _weights(900, 5, 0)), init="model", n_init=1,
                        tol=1e-8).model
    np.testing.assert_allclose(result.replicates.means.isel(replicate=5).values, expected.means.values, rtol=1e-6)
    # the k-means++ starts' sample pass and the estimate's EM passes, then the longest replicate's EM passes
    tasks = Counter(key_split(task["key"]) for task in stream.data)
    # the replicates' merged passes read each chunk once per pass (through the dataset's arrays, their weights
    # attached; the fit on the data reads the store directly): as many reads as the longest replicate's passes
    assert tasks["open_dataset-u"] / 3 == int(result.replicates.passes.max())
    # every fit's E steps: the estimate's and each replicate's, one reduction per pass
    assert tasks["dpgm-estep-combine"] == estimate.passes + int(result.replicates.passes.sum())
    assert result.passes == 1 + estimate.passes + int(result.replicates.passes.max())
    assert int(result.replicates.passes.min()) < int(result.replicates.passes.max())
    # every replicate's components keep the estimate's order: the means stay near the estimate's
    spread = np.abs(result.replicates.means - estimate.model.means).max()
    assert float(spread) < 0.5


def test_bad_options_are_refused_before_any_pass():
    data = _asia(200)
    model = dpgm.BayesianNetwork.from_edges([("smoke", "lung")])
    subset = data[["smoke", "lung"]]
    with pytest.raises(ConfigError, match="replicates must be between 2"):
        dpgm.bootstrap(model, subset, replicates=1)
    with pytest.raises(ConfigTypeError, match="replicates must be an integer"):
        dpgm.bootstrap(model, subset, replicates=2.5)
    with pytest.raises(ConfigError, match="bootstrap: option 'checkpoint'"):
        dpgm.bootstrap(model, subset, replicates=3, options={"checkpoint": "x"})
    with pytest.raises(ConfigError, match="bootstrap"):
        dpgm.bootstrap(model, subset, replicates=3, options={"alpha": 0.1})
    result = dpgm.bootstrap(model, subset, replicates=3, progress=False)
    with pytest.raises(ConfigError, match="level must be"):
        result.confidence_interval(1.5)


def test_every_replicates_tables_in_one_kernel_equal_bincount_with_its_weights():
    """The fused kernel against ``np.bincount`` of each replicate's cells, with missing codes and frequency weights."""
    from dpgm.stats.kernels import CountPlan
    from dpgm.stats.resample import replicate_count_chunk

    rng = np.random.default_rng(0)
    n = 5000
    codes = [rng.integers(-1, 3, n).astype(np.int8), rng.integers(-1, 2, n).astype(np.int8),
             rng.integers(0, 4, n).astype(np.int16)]
    plan = CountPlan(("a", "b", "c"), (3, 2, 4), ((0, 1), (1, 2), (2,)))
    positions = np.arange(700, 700 + n)
    base = rng.gamma(2.0, size=n)
    for weights in (None, base):
        every = replicate_count_chunk(codes, positions, plan, 9, 6, weights)
        for b in (0, 4, 8):
            w = _weights(700 + n, b, 6)[700:] * (1.0 if weights is None else weights)
            expected = []
            for scope in plan.scopes:
                cell = np.zeros(n, dtype=np.int64)
                for j in scope:
                    k = plan.cardinalities[j]
                    cell = cell * (k + 1) + np.where(codes[j] < 0, k, codes[j])
                size = int(np.prod([plan.cardinalities[j] + 1 for j in scope]))
                expected.append(np.bincount(cell, weights=w, minlength=size))
            np.testing.assert_allclose(every["tables"][:, b], np.concatenate(expected), rtol=1e-12)
            assert every["rows"][b] == pytest.approx(w.sum(), rel=1e-12)


@pytest.mark.parametrize(("method", "options"), [
    ("mle", {}),
    ("bayes", {"prior": "BDeu", "equivalent_sample_size": 3.0}),
    ("bayes", {"prior": "dirichlet", "pseudo_counts": {"a": 0.5, "b": 2.0, "c": 0.25}}),
])
def test_replicates_fitted_together_equal_weighted_fits_with_empty_parent_configurations(tmp_path, client, method,
                                                                                          options):
    """Every replicate of a Bayesian network's closed-form fit (all fitted at once from the stacked count tables)
    against a plain weighted ``dpgm.fit`` with its oracle weights times the data's own: tables (rel 1e-12; a parent
    configuration with no weight in a replicate is uniform under the MLE, as in the plain fit) and log-likelihood
    (rel 1e-12). The model's labels of ``b`` are in the reverse of the data's order."""
    rng = np.random.default_rng(11)
    n = 400
    a = rng.choice(["x", "y"], n).astype(object)
    a[[17, 230]] = "rare"  # two rows: some replicates draw neither
    b = np.where(rng.random(n) < np.where(a == "x", 0.8, 0.3), "on", "off")
    c = rng.choice(["p", "q", "r"], n)
    frame = pd.DataFrame({"a": a, "b": b, "c": c})
    base = rng.integers(1, 4, n).astype(np.float64)
    weighted = dpgm.from_pandas(frame).assign(weight=xr.DataArray(base, dims=("row",)))
    dpgm.write_dataset(weighted, tmp_path / "abc.zarr", chunk_rows=90)
    stored = dpgm.open_dataset(tmp_path / "abc.zarr")
    data = stored.compute()
    states = {v: list(data[v].attrs.get("states", [])) or sorted(set(frame[v])) for v in "abc"}
    states["b"] = states["b"][::-1]
    model = dpgm.BayesianNetwork.from_edges([("a", "b"), ("a", "c"), ("b", "c")], states)
    replicates = 40
    result = dpgm.bootstrap(model, stored, replicates=replicates, random_state=9, method=method, options=options,
                            client=client, progress=False)
    assert result.passes == 1
    assert result.replicates["table:b"].dims == ("replicate", *model.cpds["b"].dims)
    empty = 0
    for r in range(replicates):
        w = _weights(n, r, 9)
        expected = dpgm.fit(model, data.assign(weight=xr.DataArray(w * base, dims=("row",))), method, **options)
        for variable in model.variables:
            got = result.replicates[f"table:{variable}"].isel(replicate=r)
            want = expected.model.cpds[variable]
            assert got.dims == want.dims
            for dim in want.dims:
                assert list(got[dim].values) == list(want[dim].values)
            np.testing.assert_allclose(got.values, want.values, rtol=1e-12, atol=0)
        assert float(result.replicates.loglik[r]) == pytest.approx(expected.loglik, rel=1e-12)
        if w[a == "rare"].sum() == 0:
            empty += 1
            if method == "mle":  # no row of a = rare: b and c given it uniform
                np.testing.assert_array_equal(result.replicates["table:b"].isel(replicate=r).sel(a="rare").values,
                                              [0.5, 0.5])
    assert empty >= 3, empty  # P(both rare rows drawn 0) = e**-2: about 5 of 40
    # the fit on the data, its tables from the same kernel: the plain fit of the data with their own weights
    plain = dpgm.fit(model, data, method, **options)
    for variable in model.variables:
        np.testing.assert_allclose(result.estimate.model.cpds[variable].transpose(*model.cpds[variable].dims).values,
                                   plain.model.cpds[variable].values, rtol=1e-12, atol=0)
    assert result.estimate.loglik == pytest.approx(plain.loglik, rel=1e-12)
    assert result.estimate.n_rows == pytest.approx(base.sum(), rel=1e-12)
    assert (result.replicates.converged.values.all() and (result.replicates.passes.values == 1).all())

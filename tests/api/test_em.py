"""EM for Bayesian networks with latent variables and missing values."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dpgm
from dpgm.inference.families import FamilyPlan
from dpgm.testing import joint_table

QUESTIONS = {f"q{i}": ["a", "b", "c"] for i in range(6)}


def _lca_data(n: int, seed: int, missing: float = 0.0):
    truth = dpgm.latent_class_model(QUESTIONS, 3).randomized(np.random.default_rng(seed), concentration=0.4)
    ds = dpgm.sample_bayesian_network(truth, n, None, seed=seed + 1, missing=missing).drop_vars("class")
    return truth, ds


def _reference_lca_em(codes: np.ndarray, prior: np.ndarray, tables: list[np.ndarray], n_iter: int):
    """An independent vectorized EM for latent class models (tables[j] is (states, classes)).

    Missing answers are imputed in expectation (the complete-data E step), as in Dempster et al. (1977).
    """
    logliks = []
    for _ in range(n_iter):
        log_post = np.log(prior)[None, :].repeat(len(codes), 0)
        for j, table in enumerate(tables):
            seen = codes[:, j] >= 0
            log_post[seen] += np.log(table[codes[seen, j]])
        top = log_post.max(axis=1, keepdims=True)
        weights = np.exp(log_post - top)
        total = weights.sum(axis=1, keepdims=True)
        logliks.append(float((np.log(total) + top).sum()))
        post = weights / total
        prior = post.sum(axis=0) / len(codes)
        new = []
        for j, table in enumerate(tables):
            counts = np.zeros_like(table)
            seen = codes[:, j] >= 0
            np.add.at(counts, codes[seen, j], post[seen])
            # a missing answer counts in expectation: P(class | row) * P(answer | class)
            counts += table * post[~seen].sum(axis=0)[None, :]
            new.append(counts / counts.sum(axis=0, keepdims=True))
        tables = new
    return logliks


def test_latent_class_em_matches_an_independent_reference_per_iteration():
    _, ds = _lca_data(3000, seed=3, missing=0.15)
    start = dpgm.latent_class_model(QUESTIONS, 3).randomized(np.random.default_rng(9))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.fit(start, ds, method="em", accelerate=None, init="model", tol=0, max_iter=25)
    codes = np.stack([ds[q].values for q in QUESTIONS], axis=1).astype(int)
    tables = [start.cpds[q].transpose(q, "class").values for q in QUESTIONS]
    reference = _reference_lca_em(codes, start.cpds["class"].values, tables, 25)
    np.testing.assert_allclose([h["loglik"] for h in result.history], reference, rtol=1e-10)


def _separated_truth() -> dpgm.BayesianNetwork:
    """Three well separated classes: class k answers state k with probability 0.7."""
    truth = dpgm.latent_class_model(QUESTIONS, 3)
    cpds = {"class": truth.cpds["class"].copy(data=[0.5, 0.3, 0.2])}
    for i, q in enumerate(QUESTIONS):
        table = np.full((3, 3), 0.15)
        for k in range(3):
            table[(k + i) % 3, k] = 0.7
        cpds[q] = truth.cpds[q].copy(data=table)
    return dpgm.BayesianNetwork(cpds)


def test_best_restart_reaches_the_reference_optimum_and_recovers_parameters():
    truth = _separated_truth()
    ds = dpgm.sample_bayesian_network(truth, 10_000, None, seed=6).drop_vars("class")
    result = dpgm.fit(dpgm.latent_class_model(QUESTIONS, 3), ds, method="em", n_init=3, random_state=1,
                      tol=1e-10, max_iter=1000)
    assert result.converged
    assert result.loglik == max(result.info["restart_logliks"])
    codes = np.stack([ds[q].values for q in QUESTIONS], axis=1).astype(int)
    tables = [truth.cpds[q].transpose(q, "class").values for q in QUESTIONS]
    reference = _reference_lca_em(codes, truth.cpds["class"].values, tables, 400)
    assert result.loglik == pytest.approx(reference[-1], rel=1e-6)
    true_rows = np.concatenate([truth.cpds[q].transpose("class", q).values for q in QUESTIONS], axis=1)
    fitted_rows = np.concatenate([result.model.cpds[q].transpose("class", q).values for q in QUESTIONS], axis=1)
    permutation = [int(np.argmin(np.abs(fitted_rows - row).sum(axis=1))) for row in true_rows]
    assert sorted(permutation) == [0, 1, 2]
    # 10,000 rows, classes of >= 2,000: binomial standard errors <= 0.011 per entry; 4.5 of them
    assert np.abs(fitted_rows[permutation] - true_rows).max() < 0.05
    np.testing.assert_allclose(result.model.cpds["class"].values[permutation], [0.5, 0.3, 0.2], atol=0.03)


@pytest.mark.parametrize("network", ["asia", "sachs"])
def test_loglik_never_decreases_with_latent_and_missing(network):
    truth = dpgm.load_network(network)
    hidden = truth.variables[len(truth.variables) // 2]
    ds = dpgm.sample_bayesian_network(truth, 4000, None, seed=2, missing=0.2).drop_vars(hidden)
    structure = dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.fit(structure, ds, method="em", accelerate=None, random_state=0, tol=0, max_iter=30)
    logliks = np.array([h["loglik"] for h in result.history])
    assert np.all(np.diff(logliks) >= -1e-9 * np.abs(logliks[1:]))
    assert result.info["latent"] == [hidden]


def test_first_loglik_equals_brute_force_marginal_likelihood():
    """Oracle: enumerate asia's joint, sum out the latent variable and every missing value, row by row."""
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, 300, None, seed=4, missing=0.3).drop_vars("either")
    start = truth.randomized(np.random.default_rng(2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.fit(start, ds, method="em", init="model", tol=0, max_iter=1)
    letters = {v: chr(ord("a") + i) for i, v in enumerate(start.variables)}
    joint = np.einsum(",".join("".join(letters[d] for d in start.cpds[v].dims) for v in start.variables) + "->"
                      + "".join(letters[v] for v in start.variables), *[start.cpds[v].values for v in start.variables])
    total = 0.0
    for r in range(300):
        index = tuple(slice(None) if v == "either" or ds[v].values[r] < 0 else int(ds[v].values[r])
                      for v in start.variables)
        total += np.log(joint[index].sum())
    assert result.history[0]["loglik"] == pytest.approx(total, rel=1e-12)


def test_mcar_fit_is_close_to_truth_and_same_on_cluster_and_in_memory(tmp_path, client):
    truth = dpgm.load_network("asia")
    n = 60_000
    dpgm.sample_bayesian_network(truth, n, tmp_path / "a.zarr", seed=7, missing=0.2, chunk_rows=8000, client=client)
    on_disk = dpgm.open_dataset(tmp_path / "a.zarr")
    in_memory = on_disk.load()
    structure = dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)
    options = {"method": "em", "random_state": 3, "tol": 1e-10, "max_iter": 400}
    cluster = dpgm.fit(structure, on_disk, client=client, **options)
    memory = dpgm.fit(structure, in_memory, **options)
    for v in truth.variables:
        np.testing.assert_allclose(cluster.model.cpds[v].values, memory.model.cpds[v].values, rtol=1e-9, atol=1e-12)
    # parameters within 4 standard errors of the generating ones. Each column's standard error is the
    # complete-case one, sqrt(p (1 - p) / m) with m the rows whose family is fully observed in that
    # parent configuration: EM uses those rows and more, so its error is no larger.
    for v in ["smoke", "bronc", "dysp", "xray"]:
        dims = truth.cpds[v].dims
        true = truth.cpds[v].values
        fitted = cluster.model.cpds[v].transpose(*dims).values
        codes = np.stack([in_memory[d].values for d in dims], axis=1).astype(np.int64)
        complete = codes[(codes >= 0).all(axis=1)]
        configuration = (np.ravel_multi_index(tuple(complete[:, 1:].T), true.shape[1:]) if len(dims) > 1
                         else np.zeros(len(complete), dtype=np.int64))
        m = np.bincount(configuration, minlength=int(np.prod(true.shape[1:]))).reshape(true.shape[1:])
        assert m.min() > 500, v  # every column is estimated from many rows: the bound below is tight
        standard_error = np.sqrt(true * (1 - true) / m[None])
        assert np.all(np.abs(fitted - true) <= 4 * standard_error), (v, np.abs(fitted - true) / standard_error)


@pytest.mark.usefixtures("shared_cluster")  # the dpgm command on the session's cluster (cli_runs)
def test_predict_proba_equals_bayes_rule_and_is_written_back(tmp_path, client):
    """Oracle: P(class | answers) by Bayes' rule, row by row, from the fitted tables."""
    truth = _separated_truth()
    dpgm.sample_bayesian_network(truth, 3000, tmp_path / "d.zarr", seed=8, missing=0.1, chunk_rows=700,
                                 client=client)
    ds = dpgm.open_dataset(tmp_path / "d.zarr").drop_vars("class")
    fitted = dpgm.fit(dpgm.latent_class_model(QUESTIONS, 3), ds, method="em", random_state=0, tol=1e-6,
                      max_iter=500, client=client).model
    fitted.save(tmp_path / "m.zarr")
    proba = dpgm.predict_proba(fitted, ds, "class").values
    codes = np.stack([ds[q].values for q in QUESTIONS], axis=1).astype(int)
    log_post = np.log(fitted.cpds["class"].values)[None, :].repeat(len(codes), 0)
    for j, q in enumerate(QUESTIONS):
        table = fitted.cpds[q].transpose(q, "class").values
        seen = codes[:, j] >= 0
        log_post[seen] += np.log(table[codes[seen, j]])
    expected = np.exp(log_post - log_post.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(proba, expected, rtol=1e-10, atol=1e-14)
    from cli_runs import run_dpgm

    run_dpgm("predict", tmp_path / "m.zarr", tmp_path / "d.zarr", "--variable", "class", check=True, timeout=180)
    written = dpgm.open_dataset(tmp_path / "d.zarr")
    assert written.class_proba.attrs["labels"] == ["0", "1", "2"]
    np.testing.assert_allclose(written.class_proba.values, expected, rtol=1e-10, atol=1e-14)


def _cycle_with_latent(n: int, seed: int):
    """A 4-cycle a-b-c-h with h never observed; rows drawn from the enumerated joint."""
    import xarray as xr

    rng = np.random.default_rng(seed)
    states = {v: ["0", "1"] for v in "abch"}
    structure = dpgm.MarkovNetwork.from_cliques([("a", "b"), ("b", "c"), ("c", "h"), ("h", "a")], states)
    truth = structure.with_log_potentials({s: rng.normal(0, 1.5, (2, 2)) for s in structure.scopes})
    joint = joint_table(truth).transpose(*"abch").values  # brute force (dpgm.testing)
    joint = joint / joint.sum()
    cells = np.array(np.unravel_index(rng.choice(16, n, p=joint.ravel()), (2, 2, 2, 2))).T
    ds = xr.Dataset({v: ("row", cells[:, i].astype(np.int8), {"states": ["0", "1"]}) for i, v in enumerate("abc")})
    return structure, ds


@pytest.mark.parametrize("kind", ["markov_ipf", "log_linear_gis"])
def test_undirected_em_loglik_is_monotone_and_exact(kind):
    structure, ds = _cycle_with_latent(3000, 4)
    model = structure if kind == "markov_ipf" else dpgm.LogLinearModel.from_margins(structure.scopes, structure.states)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.fit(model, ds, method="em", accelerate=None, random_state=2, tol=0, max_iter=40)
    logliks = np.array([h["loglik"] for h in result.history])
    assert np.all(np.diff(logliks) >= -1e-9 * np.abs(logliks[1:]))
    # oracle: the returned model's log-likelihood by enumerating the joint and summing out h
    if kind == "markov_ipf":
        joint = joint_table(result.model)
    else:  # the model's potentials exp(log potential) (0 where a cell never seen has -inf: the MLE on the boundary)
        joint = joint_table(dpgm.MarkovNetwork({s: np.exp(t) for s, t in result.model.log_potentials().items()}))
    joint = joint.transpose(*"abch").values
    marginal = joint.sum(axis=3) / joint.sum()
    codes = np.stack([ds[v].values for v in "abc"], axis=1)
    expected = float(np.log(marginal[codes[:, 0], codes[:, 1], codes[:, 2]]).sum())
    assert result.loglik == pytest.approx(expected, rel=1e-10)


def test_same_result_on_synchronous_scheduler_and_cluster_and_with_persist(tmp_path, client):
    import dask

    truth = dpgm.load_network("asia")
    dpgm.sample_bayesian_network(truth, 5000, tmp_path / "a.zarr", seed=9, missing=0.2, chunk_rows=900,
                                 client=client)
    ds = dpgm.open_dataset(tmp_path / "a.zarr").drop_vars("either")
    structure = dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)
    options = {"method": "em", "random_state": 5, "tol": 0, "max_iter": 8}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        with dask.config.set(scheduler="sync"):
            synchronous = dpgm.fit(structure, ds, **options)
        cluster = dpgm.fit(structure, ds, client=client, **options)
        persisted = dpgm.fit(structure, ds, client=client, persist=True, **options)
    for other in (cluster, persisted):
        np.testing.assert_allclose([h["loglik"] for h in other.history], [h["loglik"] for h in synchronous.history],
                                   rtol=1e-12)
        for v in truth.variables:
            np.testing.assert_allclose(other.model.cpds[v].values, synchronous.model.cpds[v].values, rtol=1e-10)


def _random_network(seed: int) -> dpgm.BayesianNetwork:
    """7 variables, 2-3 states, each with up to 3 earlier parents; some tables with zeros."""
    rng = np.random.default_rng(seed)
    names = [f"v{i}" for i in range(7)]
    states = {v: [str(s) for s in range(int(rng.integers(2, 4)))] for v in names}
    edges = [(names[j], names[i]) for i in range(1, 7)
             for j in rng.choice(i, size=min(i, int(rng.integers(0, 4))), replace=False)]
    network = dpgm.BayesianNetwork.from_edges(edges, states).randomized(rng, concentration=0.7)
    cpds = dict(network.cpds)
    table = cpds["v3"].values.copy()
    table[0] = 0.0  # a state v3 never takes: rows observing it are impossible
    table /= table.sum(axis=0, keepdims=True)
    cpds["v3"] = cpds["v3"].copy(data=table)
    return dpgm.BayesianNetwork(cpds)


def _brute_force_family_counts(network: dpgm.BayesianNetwork, observed: list[str], codes: np.ndarray,
                               weights: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
    """``sum_r w_r log P(e_r)`` and each family's ``sum_r w_r P(x_family | e_r)``, by enumerating the joint
    (dpgm.testing.joint_table); variables not in ``observed`` or coded -1 are summed out."""
    joint = joint_table(network).values  # dims in network.variables order
    expected_loglik = 0.0
    expected = {v: np.zeros(network.cpds[v].shape) for v in network.variables}
    for r in range(len(codes)):
        index = tuple(slice(None) if v not in observed or codes[r, observed.index(v)] < 0
                      else slice(int(codes[r, observed.index(v)]), int(codes[r, observed.index(v)]) + 1)
                      for v in network.variables)
        evidence = np.zeros_like(joint)
        evidence[index] = joint[index]
        total = evidence.sum()
        expected_loglik += weights[r] * np.log(total)
        for v, family in zip(network.variables, network.families, strict=True):
            axes = tuple(i for i, u in enumerate(network.variables) if u not in family)
            kept = [u for u in network.variables if u in family]
            table = np.transpose(evidence.sum(axis=axes), [kept.index(u) for u in family])
            expected[v] += weights[r] * table / total
    return expected_loglik, expected


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("limit", [None, 0, 6, 1 << 12])
def test_expected_family_counts_equal_brute_force(seed, limit):
    """Oracle: each row's posterior over every family by enumerating the joint (dpgm.testing.joint_table).

    ``limit`` 0 sends every row through the junction tree, 4096 enumerates every row's unobserved
    non-leaf variables, 6 mixes the two paths within one call. Sums of a few hundred products of
    tables: rtol 1e-12.
    """
    from dpgm.inference.families import FamilyPlan

    network = _random_network(seed)
    rng = np.random.default_rng(100 + seed)
    latent = network.variables[int(rng.integers(0, 7))]
    observed = [v for v in network.variables if v != latent]
    n = 150
    codes = np.stack([rng.integers(0, network.cardinality(v), n) for v in observed], axis=1)
    codes[rng.random(codes.shape) < 0.35] = -1
    if latent != "v3":  # v3 = 0 has probability zero: keep the rows possible
        codes[codes[:, observed.index("v3")] == 0, observed.index("v3")] = 1
    weights = rng.random(n)
    weights[:5] = 0.0
    plan = FamilyPlan(network.variables, {v: network.cardinality(v) for v in network.variables},
                      {v: network.parents(v) for v in network.variables}, enumeration_limit=limit)
    theta = plan.flatten({v: network.cpds[v].values for v in network.variables})
    loglik, counts, tree_rows = plan.expected_counts(theta, codes.astype(np.int16), observed, weights)
    assert (tree_rows == 0) == (limit == 1 << 12) or limit is None

    expected_loglik, expected = _brute_force_family_counts(network, observed, codes, weights)
    assert loglik == pytest.approx(expected_loglik, rel=1e-12)
    for v, table in plan.tables(counts).items():
        np.testing.assert_allclose(table, expected[v], rtol=1e-12, atol=1e-12 * n)


@pytest.mark.parametrize("limit", [1 << 12, 0])
def test_repeated_rows_reduced_to_their_patterns_give_the_brute_force_counts(limit):
    """Rows that repeat (40 distinct ones, 60,000 rows over 3 observed variables: few enough possible
    patterns that the E step runs once per pattern) against the brute-force oracle of the 40 rows with
    their summed weights: rtol 1e-11. ``limit`` 4096 enumerates every pattern, 0 sends every one through
    the junction tree, whose ``tree_rows`` still counts rows, not patterns."""
    from dpgm.inference.families import FamilyPlan, few_patterns

    network = _random_network(1)
    rng = np.random.default_rng(7)
    observed = [v for v in network.variables if v != "v3"][-3:]  # v3 = 0 is impossible
    base = np.stack([rng.integers(0, network.cardinality(v), 40) for v in observed], axis=1)
    base[rng.random(base.shape) < 0.3] = -1
    index = rng.integers(0, 40, 60_000)
    weights = rng.random(60_000)
    plan = FamilyPlan(network.variables, {v: network.cardinality(v) for v in network.variables},
                      {v: network.parents(v) for v in network.variables}, enumeration_limit=limit)
    assert few_patterns(plan.card[[plan.index[v] for v in observed]], len(index))
    theta = plan.flatten({v: network.cpds[v].values for v in network.variables})
    loglik, counts, tree_rows = plan.expected_counts(theta, base[index].astype(np.int16), observed, weights)
    assert tree_rows == (60_000 if limit == 0 else 0)
    expected_loglik, expected = _brute_force_family_counts(network, observed, base,
                                                           np.bincount(index, weights, minlength=40))
    assert loglik == pytest.approx(expected_loglik, rel=1e-11)
    for v, table in plan.tables(counts).items():
        np.testing.assert_allclose(table, expected[v], rtol=1e-11, atol=1e-11 * len(index))


@pytest.mark.parametrize("limit", [0, 1 << 12])
def test_impossible_row_gives_minus_infinite_loglik_on_both_paths(limit):
    from dpgm.inference.families import FamilyPlan

    network = _random_network(0)
    plan = FamilyPlan(network.variables, {v: network.cardinality(v) for v in network.variables},
                      {v: network.parents(v) for v in network.variables}, enumeration_limit=limit)
    theta = plan.flatten({v: network.cpds[v].values for v in network.variables})
    observed = [v for v in network.variables if v != "v0"]
    codes = np.full((3, len(observed)), -1, dtype=np.int16)
    codes[1, observed.index("v3")] = 0
    loglik, counts, _ = plan.expected_counts(theta, codes, observed)
    assert loglik == -np.inf
    assert np.isfinite(counts).all()


def test_bayesian_network_em_resumed_from_a_checkpoint_equals_uninterrupted(tmp_path):
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, 2000, None, seed=3, missing=0.2).drop_vars("either")
    structure = dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)
    options = {"method": "em", "random_state": 4, "n_init": 2, "tol": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        full = dpgm.fit(structure, ds, max_iter=9, **options)
        dpgm.fit(structure, ds, max_iter=4, checkpoint=str(tmp_path / "ckpt"), **options)
        resumed = dpgm.fit(structure, ds, max_iter=9, resume=str(tmp_path / "ckpt"), **options)
    assert [h["loglik"] for h in resumed.history] == [h["loglik"] for h in full.history]
    for v in truth.variables:
        np.testing.assert_array_equal(resumed.model.cpds[v].values, full.model.cpds[v].values)


def test_em_results_count_rows_and_weights_for_aic_and_bic():
    """n_rows is the rows (or total weight) EM saw; AIC and BIC follow their definitions."""
    import math

    truth = dpgm.load_network("asia")
    data = dpgm.sample_bayesian_network(truth, 1500, seed=3).drop_vars("tub")
    plain = dpgm.fit(truth, data, method="em", random_state=0, tol=1e-6, max_iter=1000)
    assert plain.n_rows == 1500
    k = plain.n_params
    assert plain.aic == pytest.approx(-2 * plain.loglik + 2 * k, rel=1e-15)
    assert plain.bic == pytest.approx(-2 * plain.loglik + k * math.log(1500), rel=1e-15)
    weights = np.random.default_rng(1).integers(1, 4, 1500).astype(float)
    weighted = dpgm.fit(truth, data.assign(weight=("row", weights)), method="em", random_state=0, tol=1e-6,
                        max_iter=1000)
    assert weighted.n_rows == weights.sum()
    assert weighted.bic == pytest.approx(-2 * weighted.loglik + k * math.log(weights.sum()), rel=1e-15)


class _InterruptedPlan(FamilyPlan):
    """A plan pickled (into ``copies``) in the middle of building its tree, as another thread could."""

    copies: list[bytes] = []

    def _clique_maps(self, layout):
        import pickle

        type(self).copies.append(pickle.dumps(self))
        maps = super()._clique_maps(layout)
        type(self).copies.append(pickle.dumps(self))
        return maps


def test_a_plan_pickled_while_its_tree_is_built_still_runs():
    """A worker may send the E step's shared plan to another worker (pickling it in its communication
    thread) while its own task is building the plan's junction tree. A copy taken at any point of that
    build must run and give the expected family counts of brute-force enumeration of the joint (rtol
    1e-12, as above); before, a copy taken between the layout and the count maps failed on arrival with
    a missing attribute."""
    import pickle

    network = _random_network(0)
    cards = {v: network.cardinality(v) for v in network.variables}
    rng = np.random.default_rng(7)
    observed = network.variables[1:]
    codes = np.stack([rng.integers(0, cards[v], 60) for v in observed], axis=1).astype(np.int16)
    codes[rng.random(codes.shape) < 0.5] = -1
    codes[codes[:, observed.index("v3")] == 0, observed.index("v3")] = 1
    copies = _InterruptedPlan.copies = []
    plan = _InterruptedPlan(network.variables, cards, {v: network.parents(v) for v in network.variables},
                       enumeration_limit=0)  # every row through the tree
    theta = plan.flatten({v: network.cpds[v].values for v in network.variables})
    plan.build_tree()
    copies.append(pickle.dumps(plan))
    _InterruptedPlan.copies = []  # the copies' own builds record elsewhere
    results = [pickle.loads(c).expected_counts(theta, codes, observed) for c in copies]
    assert len(results) == 3 and all(r[2] == len(codes) for r in results)
    expected_loglik, expected = _brute_force_family_counts(network, observed, codes, np.ones(len(codes)))
    for loglik, counts, _ in results:
        assert loglik == pytest.approx(expected_loglik, rel=1e-12)
        for v, table in plan.tables(counts).items():
            np.testing.assert_allclose(table, expected[v], rtol=1e-12, atol=1e-12 * len(codes))

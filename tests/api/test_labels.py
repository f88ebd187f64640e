"""Labels, not positions: a model meets data whose states are in another order.

Every fit, EM start, structural-zero mask and prediction matches states by label.
Each test fits the same rows written with labels in two orders (recoded through
pandas categoricals and ``dpgm.from_pandas``, or built directly with
``state_attrs`` as ``dpgm convert`` writes labels in order of appearance) and
compares the two fits label by label, and against an oracle: pgmpy's estimators,
statsmodels' Poisson GLM, hmmlearn, pandas counts, or the log-likelihood and
posteriors of the fitted model by brute-force enumeration of its joint.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import xarray as xr
from hmmlearn.hmm import CategoricalHMM
from pgmpy.estimators import BayesianEstimator, MaximumLikelihoodEstimator
from pgmpy.models import DiscreteBayesianNetwork

import dpgm
from dpgm.data.schema import state_attrs
from dpgm.testing import condition, joint_table

# ---------------------------------------------------------------- helpers


def relabel(ds: xr.Dataset, orders: dict[str, list[str]]) -> xr.Dataset:
    """The same rows with each named variable's labels in ``orders[variable]`` (codes recoded), labelled
    with ``state_attrs`` as a store written in order of first appearance is."""
    out = ds.copy()
    for variable, order in orders.items():
        old = list(ds[variable].attrs["states"])
        assert sorted(old) == sorted(order)
        codes = np.asarray(ds[variable].values)
        lookup = np.array([order.index(s) for s in old] + [-1], dtype=codes.dtype)  # code -1 stays -1
        out[variable] = xr.Variable(ds[variable].dims, lookup[codes], attrs=state_attrs(order, codes.dtype))
    return out


def by_label(table: xr.DataArray, like: xr.DataArray) -> np.ndarray:
    """``table``'s values on ``like``'s labelled cells, in ``like``'s order."""
    assert set(map(str, table.dims)) == set(map(str, like.dims))
    return table.sel({d: list(like.coords[d].values) for d in like.dims}).transpose(*like.dims).values


def reversed_model(model):
    """The same model with every variable's labels in reverse order (a permutation of its tables)."""
    if isinstance(model, dpgm.BayesianNetwork):
        return dpgm.BayesianNetwork({v: t.isel({d: slice(None, None, -1) for d in t.dims})
                                     for v, t in model.cpds.items()})
    raise TypeError(type(model).__name__)


def frame_of(ds: xr.Dataset) -> pd.DataFrame:
    """The rows as labelled pandas categoricals (None = missing)."""
    return dpgm.to_pandas(ds)


def brute_loglik(model, frame: pd.DataFrame) -> float:
    """sum over rows of log P(row's observed values), by enumerating the model's normalized joint."""
    joint = joint_table(model)
    joint = joint / float(joint.sum())
    observed = [c for c in frame.columns if c in model.variables]
    total = 0.0
    for key, group in frame.groupby(observed, dropna=False, observed=True):
        key = key if isinstance(key, tuple) else (key,)
        evidence = {v: str(k) for v, k in zip(observed, key, strict=True) if pd.notna(k)}
        total += len(group) * np.log(float(condition(joint, evidence).sum()))
    return total


def brute_posterior(model, frame: pd.DataFrame, variable: str) -> np.ndarray:
    """Each row's posterior of ``variable`` (columns in the model's order of its labels), by enumeration."""
    joint = joint_table(model)
    observed = [c for c in frame.columns if c in model.variables and c != variable]
    out = np.empty((len(frame), len(model.states[variable])))
    for i, row in enumerate(frame[observed].itertuples(index=False)):
        evidence = {v: str(k) for v, k in zip(observed, row, strict=True) if pd.notna(k)}
        table = condition(joint, evidence).sum([d for d in joint.dims if d != variable])
        out[i] = table.sel({variable: list(model.states[variable])}).values / float(table.sum())
    return out


def latent_class_frame(seed: int, n_rows: int, questions: list[str], order: list[str]) -> pd.DataFrame:
    """Answers of a 3-class latent class model, categories in ``order``."""
    rng = np.random.default_rng(seed)
    classes = rng.choice(3, n_rows, p=[0.5, 0.3, 0.2])
    pattern = np.array([[1, 1, 0, 0, 1, 0], [0, 1, 1, 0, 0, 1], [1, 0, 1, 1, 0, 0]])[:, :len(questions)]
    p_yes = np.where(pattern == 1, 0.85, 0.12) + rng.uniform(-0.03, 0.03, pattern.shape)  # well separated
    answers = rng.random((n_rows, len(questions))) < p_yes[classes]
    return pd.DataFrame({q: pd.Categorical(np.where(answers[:, j], "yes", "no"), categories=order)
                         for j, q in enumerate(questions)})


# ---------------------------------------------------------------- Bayesian networks


@pytest.fixture(scope="module")
def asia():
    truth = dpgm.load_network("asia")
    return truth, dpgm.sample_bayesian_network(truth, 3000, None, seed=3)


def test_bayesian_network_mle_matches_states_by_label_and_equals_pgmpy(asia):
    truth, ds = asia
    mine = {v: list(reversed(truth.states[v])) for v in truth.variables}  # every variable: the other order
    result = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges, mine), ds)
    assert result.model.states == {v: tuple(s) for v, s in mine.items()}  # handed back in the model's order
    same_order = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges, mine), relabel(ds, mine))
    frame = frame_of(ds).astype(str)
    oracle = MaximumLikelihoodEstimator(DiscreteBayesianNetwork(truth.edges), frame, state_names=mine)
    for v in truth.variables:
        ours = result.model.cpds[v]
        assert [list(map(str, ours.coords[d].values)) for d in ours.dims] == [mine[d] for d in ours.dims]
        np.testing.assert_allclose(ours.values, by_label(same_order.model.cpds[v], ours), rtol=1e-12)
        cpd = oracle.estimate_cpd(v)  # pgmpy's table in mine's order: variable first, then its evidence
        theirs = xr.DataArray(cpd.values, dims=cpd.variables, coords={d: cpd.state_names[d] for d in cpd.variables})
        np.testing.assert_allclose(ours.values, by_label(theirs, ours), rtol=1e-12, atol=1e-15)
    assert result.loglik == pytest.approx(same_order.loglik, rel=1e-12)
    assert result.g2 == pytest.approx(same_order.g2, rel=1e-9, abs=1e-9)
    # a structure without states keeps the data's order
    structure = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), relabel(ds, mine)).model
    assert structure.states["asia"] == tuple(mine["asia"])


def test_bayesian_network_bdeu_and_dirichlet_pseudo_counts_by_label(asia):
    truth, ds = asia
    mine = {v: list(reversed(truth.states[v])) for v in truth.variables}
    model = dpgm.BayesianNetwork.from_edges(truth.edges, mine)
    bdeu = dpgm.fit(model, ds, method="bayes", prior="BDeu", equivalent_sample_size=7.0)
    oracle = BayesianEstimator(DiscreteBayesianNetwork(truth.edges), frame_of(ds).astype(str), state_names=mine)
    for v in truth.variables:
        cpd = oracle.estimate_cpd(v, prior_type="BDeu", equivalent_sample_size=7.0)
        theirs = xr.DataArray(cpd.values, dims=cpd.variables, coords={d: cpd.state_names[d] for d in cpd.variables})
        np.testing.assert_allclose(bdeu.model.cpds[v].values, by_label(theirs, bdeu.model.cpds[v]), rtol=1e-12)
    # asymmetric Dirichlet pseudo-counts: an array is read in the model's order, a DataArray by its labels
    pseudo = np.array([[1.0, 3.0], [5.0, 0.5]])  # (either, lung) in mine's order
    labelled = xr.DataArray(pseudo[::-1, ::-1], dims=("either", "lung"),
                            coords={"either": mine["either"][::-1], "lung": mine["lung"][::-1]})
    small = dpgm.BayesianNetwork.from_edges([("lung", "either")], {v: mine[v] for v in ("lung", "either")})
    rows = ds[["lung", "either"]]
    fits = [dpgm.fit(small, rows, method="bayes", prior="dirichlet", pseudo_counts={"either": p, "lung": 1.0})
            for p in (pseudo, labelled)]
    counts = pd.crosstab(frame_of(rows)["either"], frame_of(rows)["lung"]).astype(float)
    counts = xr.DataArray(counts.values, dims=("either", "lung"),
                          coords={"either": list(counts.index.astype(str)), "lung": list(counts.columns.astype(str))})
    expected = counts.sel(either=mine["either"], lung=mine["lung"]).values + pseudo
    expected = expected / expected.sum(axis=0)
    for result in fits:
        table = result.model.cpds["either"]
        assert list(table.coords["either"].values) == mine["either"]
        np.testing.assert_allclose(table.transpose("either", "lung").values, expected, rtol=1e-12)


def test_readme_latent_class_model_on_reversed_labels_from_zarr_on_two_workers(tmp_path, client):
    """docs/em.md's ``latent_class_model({q: ["no", "yes"]})`` on data labelled ("yes", "no"), read from
    Zarr on a 2-worker cluster: the same fit as on data labelled ("no", "yes") (same random starts, by
    label), its log-likelihood the brute-force one of the returned model."""
    questions = [f"q{i}" for i in range(1, 7)]
    frame = latent_class_frame(5, 1500, questions, ["yes", "no"])
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "answers.zarr", chunk_rows=400)
    stored = dpgm.open_dataset(tmp_path / "answers.zarr")
    assert dpgm.Schema.from_dataset(stored)["q1"].states == ("yes", "no")
    model = dpgm.latent_class_model({q: ["no", "yes"] for q in questions}, n_classes=3)
    # plain EM: SQUAREM's jumps turn the cluster's and memory's rounding differences into differences of order
    # tol, and two restarts at the same maximum (the classes in another order) may swap places
    options = {"method": "em", "n_init": 3, "random_state": 0, "tol": 1e-10, "max_iter": 2000, "accelerate": None}
    ours = dpgm.fit(model, stored, client=client, **options)
    same_order = dpgm.fit(model, relabel(dpgm.from_pandas(frame), {q: ["no", "yes"] for q in questions}), **options)
    assert ours.converged and same_order.converged
    assert ours.model.states["q1"] == ("no", "yes")
    assert ours.info["restart"] == same_order.info["restart"]
    np.testing.assert_allclose(ours.info["restart_logliks"], same_order.info["restart_logliks"], rtol=1e-9)
    for v in model.variables:
        np.testing.assert_allclose(ours.model.cpds[v].values, by_label(same_order.model.cpds[v], ours.model.cpds[v]),
                                   rtol=1e-6, atol=1e-9)
    assert ours.loglik == pytest.approx(brute_loglik(ours.model, frame), rel=1e-10)


def test_em_init_model_in_another_order_than_the_data(asia):
    """``init="model"``: a start whose labels are in the other order is the same start, by label."""
    truth, _ = asia
    ds = dpgm.sample_bayesian_network(truth, 1500, None, seed=8, missing=0.15)
    start = reversed_model(truth.randomized(np.random.default_rng(2)))
    flipped = {v: list(start.states[v]) for v in start.variables}
    ours = dpgm.fit(start, ds, method="em", init="model", tol=1e-11, max_iter=3000)
    same_order = dpgm.fit(start, relabel(ds, flipped), method="em", init="model", tol=1e-11, max_iter=3000)
    assert ours.converged
    assert ours.model.states == start.states
    for v in truth.variables:
        np.testing.assert_allclose(ours.model.cpds[v].values, by_label(same_order.model.cpds[v], ours.model.cpds[v]),
                                   rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose([h["loglik"] for h in ours.history], [h["loglik"] for h in same_order.history],
                               rtol=1e-11)
    assert ours.loglik == pytest.approx(brute_loglik(ours.model, frame_of(ds)), rel=1e-10)


def test_predict_proba_with_a_model_in_another_order_than_the_data():
    questions = ["q1", "q2", "q3"]
    frame = latent_class_frame(9, 40, questions, ["yes", "no"])
    frame.loc[[3, 7], "q2"] = None
    data = dpgm.from_pandas(frame)
    rng = np.random.default_rng(4)
    model = dpgm.latent_class_model({q: ["no", "yes"] for q in questions}, n_classes=3).randomized(rng)
    proba = dpgm.predict_proba(model, data, "class")
    assert list(proba.coords["class"].values) == ["0", "1", "2"]
    np.testing.assert_allclose(proba.values, brute_posterior(model, frame, "class"), rtol=1e-12)
    # an observed variable's posterior given the others: columns in the model's order of its labels
    answer = dpgm.predict_proba(model, data, "q1")
    assert list(answer.coords["q1"].values) == ["no", "yes"]
    np.testing.assert_allclose(answer.values, brute_posterior(model, frame, "q1"), rtol=1e-12)


# ---------------------------------------------------------------- Markov networks and log-linear models


def _grid_data(seed: int, n_rows: int):
    """Rows from a random 3x3 binary grid Markov network, its cells labelled ("0", "1")."""
    variables = [f"r{i}c{j}" for i in range(3) for j in range(3)]
    pairs = [(f"r{i}c{j}", f"r{i}c{j + 1}") for i in range(3) for j in range(2)]
    pairs += [(f"r{i}c{j}", f"r{i + 1}c{j}") for i in range(2) for j in range(3)]
    rng = np.random.default_rng(seed)
    truth = dpgm.MarkovNetwork({p: xr.DataArray(rng.uniform(0.3, 3.0, (2, 2)), dims=p, coords={v: ["0", "1"] for v in p})
                                for p in pairs})
    joint = joint_table(truth)
    cells = rng.choice(joint.size, n_rows, p=(joint.values / joint.values.sum()).ravel())
    codes = np.unravel_index(cells, joint.shape)
    frame = pd.DataFrame({v: pd.Categorical(np.array(["0", "1"])[c], categories=["0", "1"])
                          for v, c in zip(joint.dims, codes, strict=True)})
    return variables, pairs, frame


def _empirical(frame: pd.DataFrame, scope) -> xr.DataArray:
    counts = frame.groupby(list(scope), observed=False).size()
    table = counts.to_xarray().astype(float)
    return table / float(table.sum())


@pytest.mark.parametrize("method", ["ipf", "lbfgs", "newton"])
def test_readme_from_cliques_on_data_labelled_in_order_of_appearance(method):
    """``MarkovNetwork.from_cliques(pairs, {v: ["0", "1"]})`` on rows whose labels appear as ("1", "0"):
    the fitted pair marginals are the empirical ones, by label (the MLE's moment matching)."""
    variables, pairs, frame = _grid_data(1, 4000)
    data = dpgm.from_pandas(frame)
    appearance = relabel(data, {v: ["1", "0"] for v in variables})
    grid = dpgm.MarkovNetwork.from_cliques(pairs, {v: ["0", "1"] for v in variables})
    ours = dpgm.fit(grid, appearance, method=method, tol=1e-10)
    same_order = dpgm.fit(grid, data, method=method, tol=1e-10)
    assert ours.model.states == grid.states
    assert ours.loglik == pytest.approx(same_order.loglik, rel=1e-12)
    for pair in pairs:
        fitted = dpgm.marginal(ours.model, pair)
        assert list(fitted.coords[pair[0]].values) == ["0", "1"]
        np.testing.assert_allclose(fitted.values, by_label(_empirical(frame, pair), fitted), rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(fitted.values, by_label(dpgm.marginal(same_order.model, pair), fitted),
                                   rtol=1e-9)


def test_closed_form_on_reversed_labels_equals_pandas_clique_frequencies():
    _, _, frame = _grid_data(2, 3000)
    chain = [("r0c0", "r0c1"), ("r0c1", "r0c2"), ("r0c2", "r1c2")]
    variables = ["r0c0", "r0c1", "r0c2", "r1c2"]
    data = relabel(dpgm.from_pandas(frame[variables]), {v: ["1", "0"] for v in variables})
    model = dpgm.MarkovNetwork.from_cliques(chain, {v: ["0", "1"] for v in variables})
    result = dpgm.fit(model, data, method="closed_form")
    for scope in chain:
        fitted = dpgm.marginal(result.model, scope)
        assert list(fitted.coords[scope[1]].values) == ["0", "1"]
        np.testing.assert_allclose(fitted.values, by_label(_empirical(frame, scope), fitted), rtol=1e-12)


def test_undirected_em_on_reversed_labels_equals_the_same_order_fit_and_brute_force():
    """A Markov network with a latent corner and missing cells, random starts drawn from the model: the
    fit does not depend on the data's label order."""
    variables, pairs, frame = _grid_data(3, 800)
    frame = frame.drop(columns="r0c0")
    frame.loc[frame.index[::7], "r1c1"] = None
    data = dpgm.from_pandas(frame)
    observed = [v for v in variables if v != "r0c0"]
    states = {v: ["0", "1"] for v in variables}
    for kind, model in [("markov", dpgm.MarkovNetwork.from_cliques(pairs, states)),
                        ("log-linear", dpgm.LogLinearModel.from_margins(pairs, states))]:
        # plain EM: the latent corner's two labellings are equally good, and SQUAREM's jumps, taken from
        # parameters equal up to rounding, may end in either one
        options = {"method": "em", "n_init": 2, "random_state": 3, "tol": 1e-10, "max_iter": 4000, "accelerate": None}
        ours = dpgm.fit(model, relabel(data, {v: ["1", "0"] for v in observed}), **options)
        same_order = dpgm.fit(model, data, **options)
        assert ours.model.states == model.states, kind
        np.testing.assert_allclose(ours.info["restart_logliks"], same_order.info["restart_logliks"], rtol=1e-10)
        # the latent corner's tables are not identified (its two labellings, and a ridge of equal
        # likelihood: fits that agree to 1e-10 in log-likelihood above end at different latent tables,
        # depending on rounding, which differs between machines): the observed pairs are compared, to
        # 2e-5 as plain EM stops on that ridge (4e-6 apart measured on an AMD EPYC machine)
        for pair in [p for p in pairs if "r0c0" not in p]:
            fitted = dpgm.marginal(ours.model, pair)
            np.testing.assert_allclose(fitted.values, by_label(dpgm.marginal(same_order.model, pair), fitted),
                                       rtol=2e-5, atol=1e-9, err_msg=f"{kind} {pair}")
        assert ours.loglik == pytest.approx(brute_loglik(ours.model, frame), rel=1e-9), kind


def _poisson_quasi_independence(table: xr.DataArray, mask: xr.DataArray) -> xr.DataArray:
    """statsmodels' Poisson GLM ``count ~ a + b`` on the cells that are not structural zeros, by label."""
    frame = table.to_dataframe("count").reset_index()
    frame["zero"] = mask.sel(a=frame["a"].to_xarray(), b=frame["b"].to_xarray()).values
    kept = frame[~frame["zero"]]
    design = pd.get_dummies(kept[["a", "b"]], drop_first=True).astype(float)
    fitted = sm.GLM(kept["count"], sm.add_constant(design), family=sm.families.Poisson()).fit(tol=1e-13)
    frame["fitted"] = 0.0
    frame.loc[~frame["zero"], "fitted"] = fitted.fittedvalues
    return frame.set_index(["a", "b"])["fitted"].to_xarray()


@pytest.mark.parametrize("kind, method", [("markov", "ipf"), ("markov", "lbfgs"), ("log-linear", "lbfgs"),
                                          ("log-linear", "gis")])
def test_structural_zeros_given_in_a_third_order_land_on_the_same_labelled_cells(kind, method):
    rng = np.random.default_rng(6)
    table_order = {"a": ["x", "y", "z", "w"], "b": ["p", "q", "r"]}
    model_order = {"a": ["w", "z", "y", "x"], "b": ["r", "p", "q"]}
    mask_order = {"a": ["y", "w", "x", "z"], "b": ["q", "r", "p"]}
    zero_cells = [("x", "q"), ("y", "r"), ("w", "p")]  # no two in one row or column: every margin is free
    mask = xr.DataArray(np.zeros((4, 3), dtype=bool), dims=("a", "b"), coords=mask_order)
    for a, b in zero_cells:
        mask.loc[{"a": a, "b": b}] = True
    table = xr.DataArray(rng.integers(5, 60, (4, 3)).astype(float), dims=("a", "b"), coords=table_order)
    table = table.where(~by_label(mask, table), 0.0)
    if kind == "markov":
        model = dpgm.MarkovNetwork.from_cliques([("a",), ("b",)], model_order)
    else:
        model = dpgm.LogLinearModel.from_margins([("a",), ("b",)], model_order)
    result = dpgm.fit(model, table, method=method, structural_zeros=mask, tol=1e-11, max_iter=20000)
    zeros = result.model.structural_zeros
    assert {d: list(zeros.coords[d].values) for d in zeros.dims} == model_order
    np.testing.assert_array_equal(zeros.values, by_label(mask, zeros))
    fitted = dpgm.marginal(result.model, ("a", "b")) * float(table.sum())
    np.testing.assert_allclose(fitted.values, by_label(_poisson_quasi_independence(table, mask), fitted),
                               rtol=1e-7, atol=1e-8)
    assert result.df == 12 - 3 - (1 + 3 + 2)


def test_structural_zeros_in_another_order_in_undirected_em():
    variables, pairs, frame = _grid_data(4, 600)
    frame = frame.drop(columns="r2c2")
    model = dpgm.MarkovNetwork.from_cliques(pairs, {v: ["0", "1"] for v in variables})
    mask = xr.DataArray([[False, False], [True, False]], dims=("r2c1", "r2c2"),
                        coords={"r2c1": ["1", "0"], "r2c2": ["1", "0"]})  # the cell (0, 1), by label
    options = {"method": "em", "init": "model", "tol": 1e-10, "max_iter": 3000, "structural_zeros": mask}
    ours = dpgm.fit(model, relabel(dpgm.from_pandas(frame), {"r0c0": ["1", "0"]}), **options)
    same_order = dpgm.fit(model, dpgm.from_pandas(frame), **options)
    zeros = ours.model.structural_zeros
    assert bool(zeros.sel(r2c1="0", r2c2="1")) and int(zeros.sum()) == 1
    assert float(dpgm.marginal(ours.model, ("r2c1", "r2c2")).sel(r2c1="0", r2c2="1")) == 0.0
    assert ours.loglik == pytest.approx(same_order.loglik, rel=1e-10)
    assert ours.loglik == pytest.approx(brute_loglik(ours.model, frame), rel=1e-9)


# ---------------------------------------------------------------- hidden Markov models


def _sequences(seed: int, n_sequences: int, length: int):
    rng = np.random.default_rng(seed)
    truth = dpgm.hmm(2, list("abc"), variable="obs").with_arrays(
        np.array([0.7, 0.3]), np.array([[0.85, 0.15], [0.2, 0.8]]), rng.dirichlet(np.ones(3) * 0.6, 2))
    generator = CategoricalHMM(n_components=2, n_features=3, init_params="")
    generator.startprob_, generator.transmat_, generator.emissionprob_ = truth.arrays()
    sequences = np.stack([generator.sample(length, random_state=seed * 100 + i)[0][:, 0] for i in range(n_sequences)])
    return xr.Dataset({"obs": (("row", "time"), sequences.astype(np.int8), state_attrs(list("abc")))}), sequences


def test_hmm_symbols_in_another_order_match_hmmlearn_by_label():
    data, sequences = _sequences(1, 200, 30)
    appearance = relabel(data, {"obs": ["c", "a", "b"]})
    start = dpgm.hmm(2, list("abc"), variable="obs").randomized(np.random.default_rng(5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        ours = dpgm.fit(start, appearance, init="model", tol=0, max_iter=15, accelerate=None)
    references = []
    for n_iter in (15, 14):  # the returned model is the one the last log-likelihood was computed at
        reference = CategoricalHMM(n_components=2, n_features=3, init_params="", params="ste", n_iter=n_iter,
                                   tol=-np.inf)
        reference.startprob_, reference.transmat_, reference.emissionprob_ = start.arrays()
        references.append(reference.fit(sequences.reshape(-1, 1), [sequences.shape[1]] * sequences.shape[0]))
    np.testing.assert_allclose([h["loglik"] for h in ours.history], references[0].monitor_.history, rtol=1e-8)
    assert ours.model.states["obs"] == ("a", "b", "c")
    np.testing.assert_allclose(ours.model.emission.values, references[1].emissionprob_, rtol=1e-7)
    np.testing.assert_allclose(ours.model.transition.values, references[1].transmat_, rtol=1e-7)


def test_hmm_random_starts_do_not_depend_on_the_data_order():
    data, _ = _sequences(2, 150, 25)
    model = dpgm.hmm(2, ["b", "c", "a"], variable="obs")  # the model's own order, neither the data's
    # plain EM: SQUAREM's jumps turn the two orders' rounding differences into differences of order tol
    options = {"n_init": 3, "random_state": 1, "tol": 1e-10, "max_iter": 3000, "accelerate": None}
    ours = dpgm.fit(model, relabel(data, {"obs": ["c", "a", "b"]}), **options)
    same_order = dpgm.fit(model, relabel(data, {"obs": ["b", "c", "a"]}), **options)
    assert ours.model.states["obs"] == ("b", "c", "a")
    np.testing.assert_allclose(ours.info["restart_logliks"], same_order.info["restart_logliks"], rtol=1e-10)
    np.testing.assert_allclose(ours.model.emission.values, by_label(same_order.model.emission, ours.model.emission),
                               rtol=1e-6, atol=1e-9)


# ---------------------------------------------------------------- GLMs and hybrid networks


def _regression_frame(seed: int, n_rows: int, regions: list[str]) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    region = rng.choice(["north", "south", "east"], n_rows, p=[0.5, 0.3, 0.2])
    x = rng.normal(size=n_rows)
    effect = pd.Series(region).map({"north": 0.0, "south": 0.8, "east": -0.6}).to_numpy()
    default = rng.random(n_rows) < 1 / (1 + np.exp(-(0.3 + effect - 0.9 * x)))
    income = 2.0 + 1.5 * x + 3 * effect + rng.normal(size=n_rows)
    kind = np.where(rng.random(n_rows) < 0.3 + 0.4 * (region == "south"), "rent", "own")
    return pd.DataFrame({"region": pd.Categorical(region, categories=regions), "x": x, "income": income,
                         "housing": pd.Categorical(kind, categories=["own", "rent"]),
                         "default": pd.Categorical(np.where(default, "yes", "no"), categories=["no", "yes"])})


def test_glm_predictions_on_data_whose_parent_labels_are_in_another_order():
    frame = _regression_frame(2, 600, ["north", "south", "east"])
    glm = dpgm.fit(dpgm.GLMConditional("default", ["region", "x"], family="bernoulli"), dpgm.from_pandas(frame),
                   tol=1e-12).model
    other = dpgm.from_pandas(frame.assign(region=frame["region"].cat.reorder_categories(["east", "north", "south"])))
    proba = dpgm.predict_proba(glm, other, "default")
    beta = glm.coefficients
    region = frame["region"].astype(str)
    eta = float(beta.sel(term="Intercept")) + float(beta.sel(term="x")) * frame["x"].to_numpy()
    for label in ("south", "east"):  # north, the data's first label when fitted, is the reference
        eta = eta + np.where(region == label, float(beta.sel(term=f"region[{label}]")), 0.0)
    expected = 1 / (1 + np.exp(-eta))
    assert list(proba.coords["default"].values) == ["no", "yes"]
    np.testing.assert_allclose(proba.values[:, 1], expected, rtol=1e-12)
    means = dpgm.fit(dpgm.GLMConditional("income", ["region", "x"]), dpgm.from_pandas(frame), tol=1e-12).model
    np.testing.assert_allclose(dpgm.predict(means, other).values, dpgm.predict(means, dpgm.from_pandas(frame)).values,
                               rtol=1e-12)


def test_hybrid_network_tables_come_back_in_the_declared_order():
    frame = _regression_frame(3, 800, ["north", "south", "east"])
    declared = {"region": ["south", "east", "north"], "housing": ["rent", "own"]}
    network = dpgm.HybridNetwork([("region", "housing"), ("region", "income"), ("x", "income")],
                                 families={"income": "gaussian", "x": "gaussian"}, states=declared)
    ours = dpgm.fit(network, relabel(dpgm.from_pandas(frame), {"region": ["east", "north", "south"]}), tol=1e-12)
    same_order = dpgm.fit(network, relabel(dpgm.from_pandas(frame), declared), tol=1e-12)
    for v in ("region", "housing"):
        table = ours.model.tables[v]
        assert {d: list(table.coords[d].values) for d in table.dims} == {d: declared[d] for d in table.dims}
        np.testing.assert_allclose(table.values, by_label(same_order.model.tables[v], table), rtol=1e-12)
    shares = frame.groupby("region", observed=False)["housing"].value_counts(normalize=True).to_xarray()
    np.testing.assert_allclose(ours.model.tables["housing"].values,
                               by_label(shares.rename(housing="housing"), ours.model.tables["housing"]), rtol=1e-12)
    assert ours.loglik == pytest.approx(same_order.loglik, rel=1e-10)
    np.testing.assert_allclose(dpgm.predict(ours.model, dpgm.from_pandas(frame), "income").values,
                               dpgm.predict(same_order.model, dpgm.from_pandas(frame), "income").values, rtol=1e-9)


def test_hybrid_em_declared_states_of_an_observed_child():
    frame = _regression_frame(4, 600, ["north", "south", "east"])
    declared = {"z": ["b", "a"], "housing": ["rent", "own"]}
    network = dpgm.HybridNetwork([("z", "housing"), ("z", "income"), ("x", "income")],
                                 families={"income": "gaussian", "x": "gaussian"}, states=declared)
    options = {"method": "em", "n_init": 2, "random_state": 0, "tol": 1e-13, "max_iter": 5000}
    rows = dpgm.from_pandas(frame[["housing", "income", "x"]])
    ours = dpgm.fit(network, rows, **options)
    same_order = dpgm.fit(network, relabel(rows, {"housing": ["rent", "own"]}), **options)
    table = ours.model.tables["housing"]
    assert list(table.coords["housing"].values) == ["rent", "own"]
    assert list(table.coords["z"].values) == ["b", "a"]
    # the random starts hash each row's codes, so the two fits may name the latent states the other way round
    theirs = by_label(same_order.model.tables["housing"], table)
    swapped = not np.allclose(table.values, theirs, rtol=1e-6)
    np.testing.assert_allclose(table.values, theirs[:, ::-1] if swapped else theirs, rtol=1e-6)
    assert ours.loglik == pytest.approx(same_order.loglik, rel=1e-10)


# ---------------------------------------------------------------- refusals


def test_label_sets_that_differ_are_refused_naming_the_variable_and_both_sides():
    frame = latent_class_frame(1, 50, ["q1", "q2"], ["no", "yes"])
    data = dpgm.from_pandas(frame)
    extra = dpgm.from_pandas(frame.assign(q1=frame["q1"].cat.add_categories("maybe")))
    model = dpgm.latent_class_model({"q1": ["no", "yes"], "q2": ["no", "yes"]}, 2)
    with pytest.raises(dpgm.DataError, match=r"variable 'q1'.*\['no', 'yes', 'maybe'\].*\['no', 'yes'\].*"
                                             r"the model lacks \['maybe'\]"):
        dpgm.fit(model, extra, method="em")
    bigger = dpgm.latent_class_model({"q1": ["yes", "maybe", "no"], "q2": ["no", "yes"]}, 2)
    with pytest.raises(dpgm.DataError, match=r"variable 'q1'.*the data lacks \['maybe'\]"):
        dpgm.fit(bigger, data, method="em")
    with pytest.raises(dpgm.DataError, match=r"variable 'q1'.*the data lacks \['maybe'\]"):
        dpgm.predict_proba(bigger, data, "class")
    grid = dpgm.MarkovNetwork.from_cliques([("q1", "q2")], {"q1": ["no", "yes", "maybe"], "q2": ["no", "yes"]})
    with pytest.raises(dpgm.DataError, match=r"variable 'q1'.*the data lacks \['maybe'\]"):
        dpgm.fit(grid, data)
    data, _ = _sequences(1, 5, 10)
    with pytest.raises(dpgm.DataError, match=r"variable 'obs'.*the model lacks \['c'\].*the data lacks \['d'\]"):
        dpgm.fit(dpgm.hmm(2, list("abd"), variable="obs"), data)


def test_a_float_column_named_by_a_network_is_called_continuous():
    frame = pd.DataFrame({"smoker": pd.Categorical(["no", "yes", "no", "yes"]), "age": [31.0, 45.5, 52.0, 28.0]})
    data = dpgm.from_pandas(frame)
    message = (r"variable 'age'.*continuous in the data \(float64\); a BayesianNetwork needs categorical codes: "
               r"convert it with --categorical age")
    with pytest.raises(dpgm.DataError, match=message):
        dpgm.fit(dpgm.BayesianNetwork.from_edges([("age", "smoker")]), data)
    with pytest.raises(dpgm.DataError, match=r"variable 'age'.*continuous in the data \(float64\); a MarkovNetwork"):
        dpgm.fit(dpgm.MarkovNetwork.from_cliques([("age", "smoker")], {"age": ["0", "1"], "smoker": ["no", "yes"]}),
                 data)
    sequences = xr.Dataset({"obs": (("row", "time"), np.ones((3, 4)))})
    with pytest.raises(dpgm.DataError, match=r"variable 'obs'.*continuous in the data \(float64\); a HiddenMarkovModel"):
        dpgm.fit(dpgm.hmm(2, ["a", "b"], variable="obs"), sequences)

"""A Markov network's potentials in canonical form and their asymptotic standard errors; log-linear weights'
standard errors from the junction tree.

Oracles: statsmodels' Poisson GLM on the contingency table with the treatment-coded hierarchical design built
here (a canonical log potential is a sum of the GLM's coefficients; its variance the quadratic form of the GLM's
``cov_params``; rel 1e-6); a :class:`~dpgm.LogLinearModel` with the same treatment-coded features fitted by
Newton (its weights, rel 1e-6); brute-force enumeration of the joint written here with NumPy (the distribution
the canonical form keeps, rel 1e-12; the inverse of ``n Cov(F)`` over the enumerated joint, rel 1e-9); and on a
40-variable chain, whose 2^40-cell joint is never enumerated, the delta method on the pairwise tables'
multinomial covariance, computed from the chain's transition matrices (rel 1e-8).
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import statsmodels.api as sm
import xarray as xr

import dpgm

STATES = {"a": ["a0", "a1", "a2"], "b": ["b0", "b1"], "c": ["c0", "c1", "c2"], "d": ["d0", "d1"]}
CYCLE = [("b", "a"), ("b", "c", "d"), ("d", "a")]  # not decomposable: (a, b, d) is a triangle of no scope
DECOMPOSABLE = [("a", "b"), ("b", "c", "d")]


def _terms(cliques) -> dict[tuple, list[tuple]]:
    """Each clique's terms: its nonempty subsets (clique order) that no earlier clique contains."""
    terms = {}
    for j, clique in enumerate(cliques):
        subsets = [tuple(clique[i] for i in chosen) for size in range(1, len(clique) + 1)
                   for chosen in itertools.combinations(range(len(clique)), size)]
        terms[clique] = [a for a in subsets if not any(set(a) <= set(c) for c in cliques[:j])]
    return terms


def _columns(cliques, states) -> list[tuple[tuple, tuple]]:
    """The treatment-coded design's columns: (term, a cell of it with every variable past its first state)."""
    return [(term, cell) for terms in _terms(cliques).values() for term in terms
            for cell in itertools.product(*(states[v][1:] for v in term))]


def _table(seed: int, states=STATES) -> xr.DataArray:
    rng = np.random.default_rng(seed)
    shape = [len(states[v]) for v in states]
    return xr.DataArray(rng.poisson(rng.uniform(20, 120, shape)).astype(float), dims=list(states), coords=states)


def _glm(table: xr.DataArray, cliques):
    frame = table.to_dataframe(name="n").reset_index()
    columns = _columns(cliques, {v: list(table.coords[v].values) for v in table.dims})
    design = np.column_stack([np.ones(len(frame))] + [
        np.all([frame[v].to_numpy() == x for v, x in zip(term, cell, strict=True)], axis=0).astype(float)
        for term, cell in columns])
    return sm.GLM(frame["n"].to_numpy(), design, family=sm.families.Poisson()).fit(tol=1e-13, maxiter=100), columns


def _combination(terms: list[tuple], cell: dict, columns) -> np.ndarray:
    """Which columns a canonical log potential's entry sums: its scope's ``terms`` at ``cell``."""
    return np.array([float(term in terms and all(cell[v] == x for v, x in zip(term, at, strict=True)))
                     for term, at in columns])


@pytest.mark.parametrize("method,cliques", [("ipf", CYCLE), ("lbfgs", CYCLE), ("newton", CYCLE), ("gis", CYCLE),
                                            ("closed_form", DECOMPOSABLE)])
def test_potentials_and_errors_equal_the_poisson_glm_of_the_treatment_coded_design(method, cliques):
    table = _table(1)
    glm, columns = _glm(table, cliques)
    terms = _terms(cliques)
    result = dpgm.fit(dpgm.MarkovNetwork.from_cliques(cliques, STATES), dpgm.from_table(table), method=method,
                      tol=1e-12, max_iter=100_000)
    errors = result.standard_errors
    interval = result.confidence_interval(0.9)
    z = scipy.stats.norm.ppf(0.95)
    assert sorted(errors.data_vars) == sorted(",".join(c) for c in cliques)
    covariance = glm.cov_params()
    for clique in cliques:
        name = ",".join(clique)
        potential = result.model.potentials[clique]
        for cell in itertools.product(*(STATES[v] for v in clique)):
            at = dict(zip(clique, cell, strict=True))
            combination = np.concatenate([[0.0], _combination(terms[clique], at, columns)])  # no intercept
            expected = np.exp(combination @ glm.params)
            se = expected * np.sqrt(combination @ covariance @ combination)
            assert float(potential.sel(at)) == pytest.approx(expected, rel=1e-6)
            assert float(errors[name].sel(at)) == pytest.approx(se, rel=1e-6, abs=1e-12)
            low, high = interval[name].sel(at).values
            assert [low, high] == pytest.approx([expected - z * se, expected + z * se], rel=1e-6, abs=1e-12)
    # the first-states cell of every potential is 1 exactly, its standard error 0
    for clique in cliques:
        first = {v: STATES[v][0] for v in clique}
        assert float(result.model.potentials[clique].sel(first)) == pytest.approx(1.0, abs=1e-12)
        assert float(errors[",".join(clique)].sel(first)) == 0.0


def test_canonical_potentials_are_the_weights_of_the_same_log_linear_model():
    table = _table(2)
    states = {v: list(table.coords[v].values) for v in table.dims}
    features = {}
    for term, cell in _columns(CYCLE, states):
        feature = xr.DataArray(np.zeros([len(states[v]) for v in term]), dims=term, coords={v: states[v] for v in term})
        feature.loc[dict(zip(term, cell, strict=True))] = 1.0
        features[(term, cell)] = feature
    names = {key: ":".join(f"{v}={x}" for v, x in zip(*key, strict=True)) for key in features}
    log_linear = dpgm.fit(dpgm.LogLinearModel({names[k]: f for k, f in features.items()}), dpgm.from_table(table),
                          method="newton", tol=1e-12)
    weight_errors = log_linear.standard_errors["weights"]
    terms = _terms(CYCLE)
    for method in ("ipf", "lbfgs"):
        markov = dpgm.fit(dpgm.MarkovNetwork.from_cliques(CYCLE, STATES), dpgm.from_table(table), method=method,
                          tol=1e-12, max_iter=100_000)
        errors = markov.standard_errors
        for clique in CYCLE:
            potential = markov.model.potentials[clique]
            for cell in itertools.product(*(STATES[v] for v in clique)):
                at = dict(zip(clique, cell, strict=True))
                used = [key for key in features if key[0] in terms[clique]
                        and all(at[v] == x for v, x in zip(*key, strict=True))]
                total = sum(log_linear.model.weights[names[key]] for key in used)
                assert np.log(float(potential.sel(at))) == pytest.approx(total, rel=1e-6, abs=1e-9)
                if len(used) == 1:  # an entry that is one weight: the same standard error
                    se_log = float(errors[",".join(clique)].sel(at)) / float(potential.sel(at))
                    assert se_log == pytest.approx(float(weight_errors.sel(feature=names[used[0]])), rel=1e-6)


def _einsum_joint(potentials: dict, variables: list[str]) -> np.ndarray:
    letters = dict(zip(variables, "abcdefgh", strict=False))
    terms = ",".join("".join(letters[v] for v in scope) for scope in potentials)
    joint = np.einsum(terms + "->" + "".join(letters[v] for v in variables), *potentials.values())
    return joint / joint.sum()


def test_canonical_form_keeps_the_distribution_and_puts_each_term_in_its_first_scope():
    rng = np.random.default_rng(5)
    states = {"p": ["0", "1"], "q": ["0", "1", "2"], "r": ["0", "1"], "s": ["0", "1", "2"], "t": ["0", "1"]}
    scopes = [("r", "p", "q"), ("q", "s"), ("s", "r"), ("t",), ("p", "q"), ("t", "p")]
    network = dpgm.MarkovNetwork({s: xr.DataArray(rng.uniform(0.1, 3.0, [len(states[v]) for v in s]), dims=s,
                                                  coords={v: states[v] for v in s}) for s in scopes})
    canonical = network.canonical()
    variables = list(states)
    before = _einsum_joint({s: t.values for s, t in network.potentials.items()}, variables)
    after = _einsum_joint({s: t.values for s, t in canonical.potentials.items()}, variables)
    np.testing.assert_allclose(after, before, rtol=1e-12)
    terms = _terms(scopes)
    assert terms[("p", "q")] == []  # every subset of (p, q) lies in (r, p, q)
    for scope, table in canonical.potentials.items():
        log_table = np.log(table.values)
        for cell in itertools.product(*(range(len(states[v])) for v in scope)):
            past_first = {v for v, i in zip(scope, cell, strict=True) if i > 0}
            if not any(set(term) <= past_first for term in terms[scope]):
                assert log_table[cell] == pytest.approx(0.0, abs=1e-12), (scope, cell)
    # the canonical form of a canonical network is itself
    again = canonical.canonical()
    for scope in scopes:
        np.testing.assert_allclose(again.potentials[scope].values, canonical.potentials[scope].values, rtol=1e-12)


def _enumerated_errors(log_joint: np.ndarray, design: np.ndarray, n: float) -> np.ndarray:
    """``(n Cov_p(F))^-1`` with ``p`` and ``F`` over the enumerated joint (cells x features)."""
    p = np.exp(log_joint.ravel() - log_joint.max())
    p /= p.sum()
    mean = design.T @ p
    covariance = (design * p[:, None]).T @ design - np.outer(mean, mean)
    return np.linalg.inv(n * covariance)


FIVE = {"a": ["0", "1", "2"], "b": ["0", "1"], "c": ["0", "1", "2"], "d": ["0", "1"], "e": ["0", "1"]}
RING = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("e", "a")]  # (a, b) and (c, d) share no clique


def _ring_table(seed: int) -> xr.DataArray:
    rng = np.random.default_rng(seed)
    return xr.DataArray(rng.poisson(rng.uniform(5, 40, [len(FIVE[v]) for v in FIVE])).astype(float) + 1,
                        dims=list(FIVE), coords=FIVE)


def test_junction_tree_errors_equal_the_enumerated_joint_for_a_log_linear_model():
    """Dense random features on a ring: scopes that share no clique are read by conditioning."""
    rng = np.random.default_rng(7)
    features = {f"f{scope}{k}": xr.DataArray(rng.uniform(0, 1, [len(FIVE[v]) for v in scope]), dims=scope,
                                             coords={v: FIVE[v] for v in scope})
                for scope in RING for k in range(2)}
    table = _ring_table(3)
    result = dpgm.fit(dpgm.LogLinearModel(features), dpgm.from_table(table), method="newton", tol=1e-12)
    variables = list(FIVE)
    cells = [len(FIVE[v]) for v in variables]
    design = np.stack([f.broadcast_like(table).transpose(*variables).values.ravel() for f in features.values()], 1)
    weights = np.array([result.model.weights[name] for name in features])
    inverse = _enumerated_errors((design @ weights).reshape(cells), design, float(table.sum()))
    np.testing.assert_allclose(result.standard_errors["weights"].sel(feature=list(features)).values,
                               np.sqrt(np.diag(inverse)), rtol=1e-9)


def test_junction_tree_errors_equal_the_enumerated_joint_for_a_markov_network():
    table = _ring_table(4)
    result = dpgm.fit(dpgm.MarkovNetwork.from_cliques(RING, FIVE), dpgm.from_table(table), method="ipf", tol=1e-12)
    variables = list(FIVE)
    frame = table.to_dataframe(name="n").reset_index()
    columns = _columns(RING, FIVE)
    design = np.column_stack([np.all([frame[v].to_numpy() == x for v, x in zip(term, cell, strict=True)], axis=0)
                              for term, cell in columns]).astype(float)
    log_joint = sum(np.log(t.broadcast_like(table).transpose(*variables).values)
                    for t in result.model.potentials.values())
    inverse = _enumerated_errors(log_joint, design, float(table.sum()))
    terms = _terms(RING)
    for clique in RING:
        potential = result.model.potentials[clique]
        for cell in itertools.product(*(FIVE[v] for v in clique)):
            at = dict(zip(clique, cell, strict=True))
            combination = _combination(terms[clique], at, columns)
            expected = float(potential.sel(at)) * np.sqrt(combination @ inverse @ combination)
            assert float(result.standard_errors[",".join(clique)].sel(at)) == pytest.approx(expected, rel=1e-9,
                                                                                            abs=1e-15)


LENGTH = 40  # a chain of 40 binary variables: 2^40 cells, never enumerated
CHAIN = [f"x{i:02d}" for i in range(LENGTH)]


@pytest.fixture(scope="module")
def chain_rows() -> pd.DataFrame:
    """Rows of a binary Markov chain with transition probabilities in [0.2, 0.8]."""
    rng = np.random.default_rng(11)
    n = 6000
    values = np.empty((n, LENGTH), dtype=int)
    values[:, 0] = rng.random(n) < 0.4
    for i in range(1, LENGTH):
        up = rng.uniform(0.2, 0.8, 2)  # P(x_i = 1 | x_{i-1} = 0, 1)
        values[:, i] = rng.random(n) < up[values[:, i - 1]]
    return pd.DataFrame({v: pd.Categorical(np.array(["s0", "s1"])[values[:, i]], categories=["s0", "s1"])
                         for i, v in enumerate(CHAIN)})


def _chain_oracle(frame: pd.DataFrame) -> tuple[dict[str, float], dict[str, int], np.ndarray]:
    """The chain's treatment-coded terms (main effects ``x``, interactions ``x:y``) from its empirical pairwise
    tables ``q_i`` (the MLE of a decomposable model), and their covariance by the delta method:
    ``G Cov(q) G'`` with ``Cov(q) = (E[1_q 1_q'] - q q') / n`` under the fitted chain, read from its transition
    matrices (no enumeration)."""
    n = len(frame)
    codes = np.column_stack([frame[v].cat.codes.to_numpy() for v in CHAIN])
    q = np.stack([np.histogram2d(codes[:, i], codes[:, i + 1], bins=[2, 2], range=[[0, 2], [0, 2]])[0] / n
                  for i in range(LENGTH - 1)])  # (pairs, 2, 2)
    transition = q / q.sum(axis=2, keepdims=True)  # T_i[a, b] = P(x_{i+1} = b | x_i = a)

    def cell(i, a, b):
        return 4 * i + 2 * a + b

    # each term: [(coefficient, {cell: weight})]: sum of coefficient * log(sum of weight * q_cell)
    terms: dict[str, list] = {}
    for i in range(LENGTH - 1):
        terms[f"{CHAIN[i]}:{CHAIN[i + 1]}"] = [(1, {cell(i, 1, 1): 1}), (1, {cell(i, 0, 0): 1}),
                                               (-1, {cell(i, 0, 1): 1}), (-1, {cell(i, 1, 0): 1})]
    terms[CHAIN[0]] = [(1, {cell(0, 1, 0): 1}), (-1, {cell(0, 0, 0): 1})]
    for j in range(1, LENGTH - 1):  # log P(x_j = 1 | neighbours at s0) / P(x_j = 0 | neighbours at s0)
        terms[CHAIN[j]] = [(1, {cell(j - 1, 0, 1): 1}), (-1, {cell(j - 1, 0, 0): 1}),
                           (1, {cell(j, 1, 0): 1}), (-1, {cell(j, 1, 0): 1, cell(j, 1, 1): 1}),
                           (-1, {cell(j, 0, 0): 1}), (1, {cell(j, 0, 0): 1, cell(j, 0, 1): 1})]
    terms[CHAIN[-1]] = [(1, {cell(LENGTH - 2, 0, 1): 1}), (-1, {cell(LENGTH - 2, 0, 0): 1})]
    flat = q.ravel()
    names = list(terms)
    estimates, jacobian = {}, np.zeros((len(names), flat.size))
    for k, name in enumerate(names):
        estimates[name] = sum(c * np.log(sum(w * flat[i] for i, w in form.items())) for c, form in terms[name])
        for c, form in terms[name]:
            total = sum(w * flat[i] for i, w in form.items())
            for i, w in form.items():
                jacobian[k, i] += c * w / total
    second = np.zeros((flat.size, flat.size))
    for i in range(LENGTH - 1):
        between = np.eye(2)  # T_{i+1} ... T_{j-1}
        for j in range(i, LENGTH - 1):
            for a, b, c, d in itertools.product(range(2), repeat=4):
                if j == i:
                    value = q[i, a, b] * (a == c and b == d)
                else:
                    value = q[i, a, b] * between[b, c] * transition[j, c, d]
                second[cell(i, a, b), cell(j, c, d)] = second[cell(j, c, d), cell(i, a, b)] = value
            if j > i:
                between = between @ transition[j]
            else:
                between = np.eye(2)
    covariance = (second - np.outer(flat, flat)) / n
    return estimates, {name: k for k, name in enumerate(names)}, jacobian @ covariance @ jacobian.T


def test_chain_of_forty_variables_errors_equal_the_delta_method_on_its_pairwise_tables(chain_rows):
    estimates, index, covariance = _chain_oracle(chain_rows)
    result = dpgm.fit(dpgm.MarkovNetwork.from_cliques(list(zip(CHAIN, CHAIN[1:], strict=False)),
                                                      {v: ["s0", "s1"] for v in CHAIN}),
                      dpgm.from_pandas(chain_rows), method="closed_form")
    errors = result.standard_errors
    checked = 0
    for i, (x, y) in enumerate(zip(CHAIN, CHAIN[1:], strict=False)):
        # canonical entries: (s1, s0) x's main effect (the first pair only), (s0, s1) y's, (s1, s1) both and x:y
        entries = {(1, 0): [x] if i == 0 else [], (0, 1): [y], (1, 1): ([x] if i == 0 else []) + [y, f"{x}:{y}"]}
        for (a, b), used in entries.items():
            combination = np.zeros(len(index))
            combination[[index[name] for name in used]] = 1.0
            at = {x: f"s{a}", y: f"s{b}"}
            potential = float(result.model.potentials[(x, y)].sel(at))
            assert np.log(potential) == pytest.approx(sum(estimates[name] for name in used), rel=1e-8, abs=1e-12)
            expected = np.sqrt(combination @ covariance @ combination)
            assert float(errors[f"{x},{y}"].sel(at)) / potential == pytest.approx(expected, rel=1e-8, abs=1e-15)
            checked += 1
    assert checked == 3 * (LENGTH - 1)


def test_chain_of_forty_variables_as_a_log_linear_model(chain_rows):
    """The same chain as a LogLinearModel with the treatment-coded features, fitted by L-BFGS on the junction
    tree: its weights are the terms (abs 1e-6 on the log scale: L-BFGS stops within ~2e-7 of the MLE), their
    standard errors the delta method's (rel 1e-6)."""
    estimates, index, covariance = _chain_oracle(chain_rows)
    states = ["s0", "s1"]
    features = {}
    for name in index:
        scope = name.split(":")
        feature = xr.DataArray(np.zeros([2] * len(scope)), dims=scope, coords={v: states for v in scope})
        feature.loc[{v: "s1" for v in scope}] = 1.0
        features[name] = feature
    result = dpgm.fit(dpgm.LogLinearModel(features), dpgm.from_pandas(chain_rows), method="lbfgs", tol=1e-12,
                      max_iter=10_000, goodness_of_fit=False)
    names = list(index)
    np.testing.assert_allclose([result.model.weights[name] for name in names],
                               [estimates[name] for name in names], rtol=0, atol=1e-6)
    np.testing.assert_allclose(result.standard_errors["weights"].sel(feature=names).values,
                               np.sqrt(np.diag(covariance)), rtol=1e-6)


def test_beyond_the_parameter_cap_and_with_empty_cells_the_refusal_says_why_and_names_the_bootstrap():
    from dpgm.algorithms.information import MAX_INFORMATION_PARAMETERS

    states = {"a": [f"a{i}" for i in range(60)], "b": [f"b{i}" for i in range(60)]}
    rng = np.random.default_rng(0)
    table = xr.DataArray(rng.poisson(5.0, (60, 60)) + 1.0, dims=("a", "b"), coords=states)
    result = dpgm.fit(dpgm.MarkovNetwork.from_cliques([("a", "b")], states), dpgm.from_table(table),
                      method="closed_form")
    assert 59 * 59 + 2 * 59 > MAX_INFORMATION_PARAMETERS
    with pytest.raises(NotImplementedError, match=r"3,599 free parameters.*dpgm.bootstrap"):
        _ = result.standard_errors
    from dpgm.api.log_linear import weight_errors  # what a log-linear fit's standard_errors calls

    with pytest.raises(ValueError, match=r"3,600 weights.*dpgm.bootstrap"):
        weight_errors(dpgm.LogLinearModel.from_margins([("a", "b")], states), float(table.sum()))
    empty = _table(3)
    empty.loc[{"a": "a1", "b": "b1"}] = 0.0  # an empty cell of the margin (a, b): the MLE's potential is 0 there
    result = dpgm.fit(dpgm.MarkovNetwork.from_cliques(CYCLE, STATES), dpgm.from_table(empty), method="ipf")
    with pytest.raises(NotImplementedError, match=r"potential on \('b', 'a'\) has zero entries.*dpgm.bootstrap"):
        _ = result.standard_errors


@pytest.mark.parametrize("method", ["ipf", "lbfgs"])
def test_with_structural_zeros_identified_entries_equal_the_glm_on_the_remaining_cells(method):
    """Two cells of (a, b) fixed at zero: statsmodels' GLM on the other cells (its design rank-deficient, solved
    by pseudo-inverse); an entry is identified where its combination of columns lies in the row space of that
    design (NumPy's ``lstsq``), and there its value and standard error equal the GLM's (rel 1e-6); elsewhere the
    standard error is NaN."""
    import warnings

    table = _table(6)
    zeros = xr.DataArray(np.zeros((3, 2), dtype=bool), dims=("a", "b"), coords={v: STATES[v] for v in "ab"})
    zeros.loc[{"a": "a1", "b": "b1"}] = True
    zeros.loc[{"a": "a2", "b": "b0"}] = True
    table = table.where(~zeros.broadcast_like(table), 0.0).transpose(*STATES)
    result = dpgm.fit(dpgm.MarkovNetwork.from_cliques(CYCLE, STATES), dpgm.from_table(table), method=method,
                      structural_zeros=zeros, tol=1e-12, max_iter=100_000)
    frame = table.to_dataframe(name="n").reset_index()
    allowed = ~zeros.sel(a=xr.DataArray(frame["a"].to_numpy()), b=xr.DataArray(frame["b"].to_numpy())).values
    columns = _columns(CYCLE, STATES)
    design = np.column_stack([np.ones(len(frame))] + [
        np.all([frame[v].to_numpy() == x for v, x in zip(term, cell, strict=True)], axis=0).astype(float)
        for term, cell in columns])[allowed]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # statsmodels warns that the design is rank-deficient
        glm = sm.GLM(frame["n"].to_numpy()[allowed], design, family=sm.families.Poisson()).fit(tol=1e-13,
                                                                                                maxiter=100)
    terms = _terms(CYCLE)
    identified = unidentified = 0
    for clique in CYCLE:
        name = ",".join(clique)
        for cell in itertools.product(*(STATES[v] for v in clique)):
            at = dict(zip(clique, cell, strict=True))
            combination = np.concatenate([[0.0], _combination(terms[clique], at, columns)])
            coefficients = np.linalg.lstsq(design.T, combination, rcond=None)[0]
            got = float(result.standard_errors[name].sel(at))
            if np.abs(design.T @ coefficients - combination).max() > 1e-9:
                assert np.isnan(got), (clique, cell)
                unidentified += 1
                continue
            expected = np.exp(combination @ glm.params)
            assert float(result.model.potentials[clique].sel(at)) == pytest.approx(expected, rel=1e-6)
            se = expected * np.sqrt(combination @ glm.cov_params() @ combination)
            assert got == pytest.approx(se, rel=1e-6, abs=1e-12)
            identified += 1
    assert identified > 10 and unidentified > 0


def test_bootstrap_standard_errors_of_the_canonical_potentials_agree_with_the_asymptotic_ones():
    """The canonical form makes each bootstrap replicate's potentials comparable: their standard deviation over
    B = 200 Poisson replicates (``dpgm.bootstrap``) is within 4 Monte Carlo standard errors of the asymptotic
    standard error, ``|sd / se - 1| < 4 / sqrt(2 (B - 1))``, for every entry the form does not fix at 1."""
    rows = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 5000, seed=12).compute()
    cliques = [("smoke", "lung"), ("smoke", "bronc"), ("lung", "bronc", "dysp")]
    model = dpgm.MarkovNetwork.from_cliques(cliques, dpgm.load_network("asia").states)
    boot = dpgm.bootstrap(model, rows, replicates=200, random_state=3, method="ipf", options={"tol": 1e-10})
    asymptotic = dpgm.fit(model, rows, method="ipf", tol=1e-10).standard_errors
    bootstrapped = boot.standard_errors
    bound = 4 / np.sqrt(2 * (200 - 1))
    checked = 0
    for clique in cliques:
        name = ",".join(clique)
        se, sd = asymptotic[name].values.ravel(), bootstrapped[name].transpose(*clique).values.ravel()
        fixed = se == 0
        np.testing.assert_allclose(sd[fixed], 0.0, atol=1e-12)  # entries fixed at 1 in every replicate
        assert np.all(np.abs(sd[~fixed] / se[~fixed] - 1) < bound), (name, sd / se)
        checked += int((~fixed).sum())
    assert checked == 10

"""One small model and data set per specification name of the kind registry: the suite's cases.

Each :class:`Case` holds an unfitted model as a user gives it to :func:`dpgm.fit`,
the options of the fit (the method included), the specification that names the
same model and fit for ``dpgm fit``, and a generator of its data (in memory; the
suite writes it to Zarr where a store is needed). Data come from dpgm's own
sampler of a random network (Bayesian networks, latent class models) or from
NumPy draws; the cases are small, so each fit takes well under a second.

:data:`METHOD_CASES` holds one :class:`MethodCase` per (kind, method) pair of the
registry (``dpgm.api.kinds.kinds()``): the kind's case with that method, or a model
and data of its own where the method needs them (a decomposable structure for
``closed_form``, an observed discrete variable for a hybrid network's ``mle``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from treatment_features import treatment_coded_features

import dpgm


@dataclass(frozen=True)
class Case:
    """A model kind's conformance case.

    Attributes
    ----------
    spec_name
        The specification's ``model:`` value (a key of the registry's ``spec_names``).
    model
        Builds the unfitted model given to :func:`dpgm.fit`.
    data
        Builds the in-memory dataset.
    options
        :func:`dpgm.fit`'s keyword options (``method`` included).
    spec
        The same model and fit as a specification (YAML-able).
    variable
        An observed variable of the model (bad-input checks corrupt or remove it).
    chunk_rows
        Rows per chunk of the Zarr copy (several chunks, so two workers share the pass).
    absent_is_latent
        A model variable absent from the data is latent (this kind fits it by EM), so an
        absent variable is not bad input.
    """

    spec_name: str
    model: Callable[[], Any]
    data: Callable[[], xr.Dataset]
    options: dict
    spec: dict
    variable: str
    chunk_rows: int = 250
    absent_is_latent: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def method(self) -> str | None:
        return self.options.get("method")


def _asia_rows(seed: int = 0, n: int = 2000) -> xr.Dataset:
    return dpgm.sample_bayesian_network(dpgm.load_network("asia"), n, seed=seed).compute()


_ITEMS = {f"q{i}": ["s0", "s1", "s2"] for i in range(1, 5)}


def _latent_class_rows(seed: int = 1, n: int = 1200) -> xr.Dataset:
    truth = dpgm.latent_class_model(_ITEMS, 2, latent="class").randomized(np.random.default_rng(seed), 0.5)
    return dpgm.sample_bayesian_network(truth, n, seed=seed).drop_vars("class").compute()


def _categorical_rows(seed: int = 2, n: int = 1500) -> xr.Dataset:
    """Three dependent categorical variables (b and c copy a's code with noise)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = np.where(rng.random(n) < 0.6, a % 2, rng.integers(0, 2, n))
    c = np.where(rng.random(n) < 0.5, (a + b) % 3, rng.integers(0, 3, n))
    frame = pd.DataFrame({v: pd.Categorical([f"s{x}" for x in codes], categories=[f"s{i}" for i in range(k)])
                          for v, codes, k in (("a", a, 3), ("b", b, 2), ("c", c, 3))})
    return dpgm.from_pandas(frame)


def _sequence_rows(seed: int = 3, n: int = 80, length: int = 15) -> xr.Dataset:
    """Sequences of a two-state chain emitting three symbols, as a (row, time) variable ``obs``."""
    rng = np.random.default_rng(seed)
    transition, emission = np.array([[0.85, 0.15], [0.2, 0.8]]), np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    hidden = np.zeros((n, length), dtype=int)
    hidden[:, 0] = rng.random(n) < 0.4
    for t in range(1, length):
        hidden[:, t] = rng.random(n) < transition[hidden[:, t - 1], 1]
    draws = rng.random((n, length))
    symbols = (draws[..., None] > np.cumsum(emission[hidden], axis=-1)).sum(axis=-1)
    return xr.Dataset({"obs": (("row", "time"), symbols.astype(np.int8), {"states": list("abc")})})


def _gaussian_rows(seed: int = 4, n: int = 800) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    covariance = np.array([[1.0, 0.5, 0.2, 0.4], [0.5, 1.0, 0.5, 0.1], [0.2, 0.5, 1.0, 0.5], [0.4, 0.1, 0.5, 1.0]])
    x = rng.multivariate_normal([0.0, 1.0, -1.0, 2.0], covariance, n)
    return dpgm.from_pandas(pd.DataFrame(x, columns=list("abcd")))


def _mixture_rows(seed: int = 5, n: int = 600) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    first = rng.random(n) < 0.4
    x = np.where(first[:, None], rng.normal([0.0, 0.0], 1.0, (n, 2)), rng.normal([4.0, 3.0], 0.7, (n, 2)))
    return dpgm.from_pandas(pd.DataFrame(x, columns=["x0", "x1"]))


def _regression_rows(seed: int = 6, n: int = 700) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, n)
    g = rng.integers(0, 3, n)
    y = 1.0 + 0.8 * x + np.array([0.0, 0.5, -1.0])[g] + rng.normal(0, 0.6, n)
    return dpgm.from_pandas(pd.DataFrame({"x": x, "g": pd.Categorical([f"g{v}" for v in g]), "y": y}))


def _switching_rows(seed: int = 7, n: int = 700, *, with_state: bool = False) -> xr.Dataset:
    """A mixture of two regressions of y on x (the latent state is not in the data unless ``with_state``: then
    it is the categorical ``z``, ``b`` for the first regression)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, n)
    z = rng.random(n) < 0.4
    y = np.where(z, 1.0 + 2.0 * x, -0.5 - 1.0 * x) + rng.normal(0, np.where(z, 0.5, 0.8))
    columns = {"x": x, "y": y}
    if with_state:
        columns["z"] = pd.Categorical(np.where(z, "b", "a"), categories=["a", "b"])
    return dpgm.from_pandas(pd.DataFrame(columns))


_CYCLE = [["a", "b"], ["b", "c"], ["c", "a"]]
_SQUARE = [["a", "b"], ["b", "c"], ["c", "d"], ["d", "a"]]
_EM = {"n_init": 2, "random_state": 0, "tol": 1e-8, "max_iter": 300}
_SWITCH = {"edges": [["z", "y"], ["x", "y"]], "families": {"x": "gaussian", "y": "gaussian"}}

CASES = [
    Case("bayesian_network", lambda: dpgm.BayesianNetwork.from_edges(dpgm.load_network("asia").edges), _asia_rows,
         {"method": "mle"}, {"model": "bayesian_network", "network": "asia", "method": "mle"}, "smoke"),
    Case("latent_class", lambda: dpgm.latent_class_model(_ITEMS, 2, latent="class"), _latent_class_rows,
         {"method": "em", **_EM},
         {"model": "latent_class", "n_classes": 2, "observed": list(_ITEMS), "variable": "class", **_EM}, "q1",
         absent_is_latent=True),
    Case("markov_network", lambda: dpgm.MarkovNetwork.from_cliques([tuple(c) for c in _CYCLE],
                                                                   {"a": ["s0", "s1", "s2"], "b": ["s0", "s1"],
                                                                    "c": ["s0", "s1", "s2"]}),
         _categorical_rows, {"method": "ipf", "tol": 1e-10},
         {"model": "markov_network", "cliques": _CYCLE, "method": "ipf", "tol": 1e-10}, "b"),
    Case("log_linear", lambda: dpgm.LogLinearModel.from_margins([tuple(c) for c in _CYCLE],
                                                                {"a": ["s0", "s1", "s2"], "b": ["s0", "s1"],
                                                                 "c": ["s0", "s1", "s2"]}),
         _categorical_rows, {"method": "lbfgs", "tol": 1e-9},
         {"model": "log_linear", "margins": _CYCLE, "method": "lbfgs", "tol": 1e-9}, "c"),
    Case("hmm", lambda: dpgm.hmm(2, list("abc"), variable="obs"), _sequence_rows, {"method": "em", **_EM, "tol": 1e-6},
         {"model": "hmm", "n_states": 2, "symbols": list("abc"), "variable": "obs", **_EM, "tol": 1e-6}, "obs",
         chunk_rows=20),
    Case("gaussian_graphical", lambda: dpgm.GaussianGraphicalModel([tuple(e) for e in _SQUARE]), _gaussian_rows,
         {"method": "ipf", "tol": 1e-10},
         {"model": "gaussian_graphical", "edges": _SQUARE, "method": "ipf", "tol": 1e-10}, "c"),
    Case("gaussian_mixture", lambda: dpgm.GaussianMixture(2, ["x0", "x1"], "full"), _mixture_rows,
         {"method": "em", **_EM},
         {"model": "gaussian_mixture", "n_components": 2, "variables": ["x0", "x1"], "covariance_type": "full",
          **_EM}, "x1"),
    Case("linear_gaussian", lambda: dpgm.LinearGaussianNetwork([("a", "c"), ("b", "c"), ("c", "d")]),
         _gaussian_rows, {"method": "mle"},
         {"model": "linear_gaussian", "edges": [["a", "c"], ["b", "c"], ["c", "d"]], "method": "mle"}, "b"),
    Case("glm", lambda: dpgm.GLMConditional("y", ["x", "g"], "gaussian"), _regression_rows,
         {"method": "irls", "tol": 1e-10},
         {"model": "glm", "child": "y", "parents": ["x", "g"], "family": "gaussian", "method": "irls", "tol": 1e-10},
         "x"),
    Case("hybrid_network", lambda: dpgm.HybridNetwork([tuple(e) for e in _SWITCH["edges"]], _SWITCH["families"],
                                                      states={"z": ["a", "b"]}),
         _switching_rows, {"method": "em", **_EM},
         {"model": "hybrid_network", **_SWITCH, "latent": {"z": ["a", "b"]}, "method": "em", **_EM}, "x"),
]
CASE_IDS = [case.spec_name for case in CASES]


def case_named(spec_name: str) -> Case:
    return next(case for case in CASES if case.spec_name == spec_name)


@dataclass(frozen=True)
class MethodCase:
    """A (kind, method) pair's case: a small model of the kind and the data it is fitted to by the method.

    Attributes
    ----------
    model
        Builds the unfitted model given to :func:`dpgm.fit`.
    data
        Builds the in-memory dataset.
    options
        :func:`dpgm.fit`'s keyword options, ``method`` included (each accepted by the method's ``Method.options``).
    """

    model: Callable[[], Any]
    data: Callable[[], xr.Dataset]
    options: dict

    @property
    def method(self) -> str:
        return self.options["method"]


def _with_method(spec_name: str, method: str, **options: Any) -> MethodCase:
    """The kind's case (:func:`case_named`) fitted by ``method`` with ``options`` (the case's own are dropped)."""
    case = case_named(spec_name)
    return MethodCase(case.model, case.data, {"method": method, **options})


_STATES = {"a": ["s0", "s1", "s2"], "b": ["s0", "s1"], "c": ["s0", "s1", "s2"]}  # _categorical_rows' variables
_DECOMPOSABLE = [["a", "b"], ["b", "c"]]
_GAUSSIAN_CHAIN = [("a", "b"), ("b", "c"), ("c", "d")]  # decomposable, unlike the 4-cycle _SQUARE
# converged far below the differences the standard-error comparisons allow
_TIGHT = {"tol": 1e-12, "max_iter": 100_000}
_TIGHT_EM = {"tol": 1e-12, "max_iter": 5000, "n_init": 1, "random_state": 0}


def _asia_model(with_states: bool = False) -> dpgm.BayesianNetwork:
    asia = dpgm.load_network("asia")
    return dpgm.BayesianNetwork.from_edges(asia.edges, asia.states if with_states else None)


def _log_linear_model() -> dpgm.LogLinearModel:
    """The 3-cycle's margins as identified features (``from_margins``' one indicator per margin cell identifies
    no single weight: its standard errors are NaN)."""
    return dpgm.LogLinearModel(treatment_coded_features(_CYCLE, _STATES))


# every (kind, method) pair of the registry. Pairs of one kind whose methods reach the same maximum-likelihood
# estimate share the model and the data (EM on complete data included), so their standard errors can be compared.
METHOD_CASES: dict[tuple[str, str], MethodCase] = {
    ("BayesianNetwork", "mle"): _with_method("bayesian_network", "mle"),
    ("BayesianNetwork", "bayes"): _with_method("bayesian_network", "bayes", equivalent_sample_size=4.0),  # BDeu
    # EM needs every variable's states; on complete data it reaches the MLE
    ("BayesianNetwork", "em"): MethodCase(lambda: _asia_model(with_states=True), _asia_rows,
                                          {"method": "em", **_TIGHT_EM}),
    ("MarkovNetwork", "ipf"): _with_method("markov_network", "ipf", **_TIGHT),
    ("MarkovNetwork", "closed_form"): MethodCase(
        lambda: dpgm.MarkovNetwork.from_cliques([tuple(c) for c in _DECOMPOSABLE], _STATES), _categorical_rows,
        {"method": "closed_form"}),
    ("MarkovNetwork", "lbfgs"): _with_method("markov_network", "lbfgs", **_TIGHT),
    ("MarkovNetwork", "newton"): _with_method("markov_network", "newton", **_TIGHT),
    ("MarkovNetwork", "gis"): _with_method("markov_network", "gis", **_TIGHT),
    ("MarkovNetwork", "em"): _with_method("markov_network", "em", **_TIGHT_EM),  # complete data
    ("LogLinearModel", "lbfgs"): MethodCase(_log_linear_model, _categorical_rows, {"method": "lbfgs", **_TIGHT}),
    ("LogLinearModel", "newton"): MethodCase(_log_linear_model, _categorical_rows, {"method": "newton", **_TIGHT}),
    ("LogLinearModel", "gis"): MethodCase(_log_linear_model, _categorical_rows, {"method": "gis", **_TIGHT}),
    ("LogLinearModel", "em"): MethodCase(_log_linear_model, _categorical_rows, {"method": "em", **_TIGHT_EM}),
    ("HiddenMarkovModel", "em"): _with_method("hmm", "em", **(_EM | {"tol": 1e-6})),
    ("GaussianGraphicalModel", "closed_form"): MethodCase(lambda: dpgm.GaussianGraphicalModel(_GAUSSIAN_CHAIN),
                                                          _gaussian_rows, {"method": "closed_form"}),
    ("GaussianGraphicalModel", "ipf"): _with_method("gaussian_graphical", "ipf", **_TIGHT),
    ("GaussianGraphicalModel", "glasso"): _with_method("gaussian_graphical", "glasso", alpha=0.1),
    ("LinearGaussianNetwork", "mle"): _with_method("linear_gaussian", "mle"),
    ("GaussianMixture", "em"): _with_method("gaussian_mixture", "em", **_EM),
    ("GLMConditional", "irls"): _with_method("glm", "irls", **_TIGHT),
    # complete-data fit: the state z is observed
    ("HybridNetwork", "mle"): MethodCase(case_named("hybrid_network").model,
                                         lambda: _switching_rows(with_state=True), {"method": "mle", **_TIGHT}),
    ("HybridNetwork", "em"): _with_method("hybrid_network", "em", **_EM),
}


def parameters(model: Any) -> dict[str, Any]:
    """Every table a model is saved as, as plain arrays, and every number among its saved attributes.

    Numbers of the attributes (a variance, a deviance) are parameters too: arrays under
    ``attrs:<path>``; the rest of the attributes (names, structure) under ``attrs``, as JSON.
    """
    tables = dict(model._to_store())
    attrs = json.loads(json.dumps(tables.pop("__attrs__", {})))
    found: dict[str, Any] = {key: np.asarray(table.values) for key, table in tables.items()}

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, f"{path}/{k}") for k, v in value.items()}
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return value
        if isinstance(value, int | float) or (isinstance(value, list) and value
                                              and all(isinstance(v, int | float) for v in value)):
            found[f"attrs:{path}"] = np.asarray(value, dtype=float)
            return "<number>"
        if isinstance(value, list):
            return [walk(v, f"{path}/{i}") for i, v in enumerate(value)]
        return value

    found["attrs"] = walk(attrs, "")
    return found


def assert_same_parameters(first: Any, second: Any, *, rtol: float, atol: float) -> None:
    """The two models' saved tables and numbers agree to ``rtol`` / ``atol`` (0, 0: bit for bit), the rest of
    their saved attributes exactly."""
    a, b = parameters(first), parameters(second)
    assert sorted(a) == sorted(b)
    assert a.pop("attrs") == b.pop("attrs")
    for key in a:
        assert a[key].shape == b[key].shape, key
        if rtol == 0 and atol == 0:
            assert np.array_equal(a[key], b[key], equal_nan=True), key
        else:
            np.testing.assert_allclose(a[key], b[key], rtol=rtol, atol=atol, err_msg=key)

"""Model specifications for batch jobs: small YAML or TOML files naming a model and its fit.

A Bayesian network::

    model: bayesian_network
    edges: [[smoke, lung], [smoke, bronc]]     # or: network: alarm  (structure of a shipped net / BIF file)
    method: bayes                              # mle (default) | bayes
    prior: BDeu                                # BDeu | K2
    equivalent_sample_size: 10

A Markov network or a log-linear model (states come from the data)::

    model: markov_network          # or: log_linear, with 'margins:' instead of 'cliques:'
    cliques: [[a, b], [b, c], [c, d], [d, a]]
    method: ipf                    # closed_form | ipf | gis | lbfgs | newton
    tol: 1.0e-10

A latent class model, or a Bayesian network with latent variables (fitted by EM)::

    model: latent_class
    n_classes: 3
    observed: [q1, q2, q3, q4]     # default: every categorical variable of the data
    n_init: 8

    model: bayesian_network
    edges: [[H, a], [H, b], [a, c]]
    latent: {H: [low, high]}

A hidden Markov model over a (``row``, ``time``) variable, fitted by EM::

    model: hmm
    n_states: 3
    symbols: [a, b, c, d]
    variable: obs
    n_init: 4
    random_state: 0
    max_iter: 200
    tol: 1.0e-8

A GLM conditional (fitted by IRLS), or a hybrid network of tables and GLM nodes::

    model: glm
    child: default
    parents: [income, region]
    family: bernoulli              # gaussian | bernoulli | categorical | poisson
    l2: 0.0

    model: hybrid_network
    edges: [[region, income], [age, income], [income, default]]
    families: {age: gaussian, income: gaussian, default: bernoulli}   # other variables: tables
    latent: {z: [a, b]}            # optional: a latent root, fitted by EM (mixture of regressions)

An observed column is made latent by dropping it from the data first (the CLI's
``--drop`` does the same)::

    model: bayesian_network
    network: asia
    drop: [either]
    latent: {either: ["yes", "no"]}

Continuous variables (states are not needed; the fitted model is saved like any other)::

    model: gaussian_graphical      # covariance selection
    edges: [[a, b], [b, c], [c, d], [d, a]]    # or cliques: [[a, b, c], [c, d]]
    variables: [a, b, c, d, e]     # default: the variables the graph names
    method: ipf                    # ipf (default) | closed_form (decomposable graphs) | glasso
    tol: 1.0e-10
    alpha: 0.05                    # glasso's penalty

    model: gaussian_mixture
    n_components: 5
    variables: [x0, x1, x2]        # default: every continuous variable of the data
    covariance_type: full          # full | diag | spherical | tied
    n_init: 10
    random_state: 0
    reg_covar: 1.0e-6

    model: linear_gaussian         # each node a least-squares regression on its parents
    edges: [[age, bp], [weight, bp]]

Keys other than ``model``, the structure keys, ``drop`` and ``method`` are passed to
:func:`dpgm.fit` as options (``tol``, ``max_iter``, ...).
"""

from __future__ import annotations

import contextlib
import os
import tomllib
from pathlib import Path
from typing import Any

import yaml

from dpgm.errors import ConfigError

__all__ = ["SpecError", "build_model", "drop_variables", "read_spec"]



def structure_keys() -> dict[str, tuple[str, ...]]:
    """Each specification name -> the keys that describe its model (:attr:`dpgm.api.kinds.Kind.spec_names`);
    every other key is an option of :func:`dpgm.fit`, checked against the registry's schema of the
    (model kind, method)."""
    from dpgm.api.kinds import spec_names

    return dict(spec_names())


_CONTINUOUS_KINDS = ("gaussian_graphical", "gaussian_mixture", "linear_gaussian")
# options a specification cannot hold: they are the command line's (--checkpoint, --resume)
_COMMAND_LINE_OPTIONS = {"checkpoint": "--checkpoint", "resume": "--resume"}
# YAML 1.1 reads 1e-8 (no dot) as a string: accepted for these numeric options
_REAL_OPTIONS = ("tol", "loglik_tol", "l1", "l2", "equivalent_sample_size", "alpha", "reg_covar")


class SpecError(ConfigError):
    """A model specification that cannot be used (a ``ValueError``; the CLI exits 78)."""


def read_spec(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a YAML (``.yaml``/``.yml``) or TOML (``.toml``) specification into a dict."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no specification at {os.fspath(path)!r}")
    if path.is_dir():
        raise SpecError(f"{os.fspath(path)!r} is a folder, not a specification file")
    try:
        text = path.read_text()
    except UnicodeDecodeError as error:
        raise SpecError(f"{os.fspath(path)!r} is not a text file ({error.reason} at byte {error.start})") from None
    try:
        spec = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as error:
        raise SpecError(f"cannot parse {os.fspath(path)!r}: {error}") from None
    if not isinstance(spec, dict) or "model" not in spec:
        raise SpecError(f"{os.fspath(path)!r} must be a mapping with a 'model' key")
    return spec


def drop_variables(spec: dict[str, Any], ds: Any, also: Any = ()) -> tuple[dict[str, Any], Any]:
    """The specification without its ``drop`` key, and the dataset without those variables and ``also``.

    Raises
    ------
    SpecError
        ``drop`` is not a list of names, or names a variable the data do not have.
    """
    spec = dict(spec)
    drop = spec.pop("drop", None) or []
    if not isinstance(drop, list) or not all(isinstance(v, str) for v in drop):
        raise SpecError(f"'drop' must be a list of variable names, got {drop!r}")
    names = list(dict.fromkeys([*drop, *also]))
    unknown = [v for v in names if v not in ds.data_vars]
    if unknown:
        raise SpecError(f"cannot drop {unknown}: not variables of the data; variables: {sorted(map(str, ds.data_vars))}")
    return spec, (ds.drop_vars(names) if names else ds)


def _check_latent_not_observed(latent: list[str], states: dict[str, tuple[str, ...]]) -> None:
    """A latent variable present in the data would be fitted as observed: refuse it, naming it."""
    observed = [v for v in latent if v in states]
    if observed:
        raise SpecError(
            f"latent variable {observed[0]!r} is a variable of the data, so it would be fitted as observed; "
            f"rename it, remove it from 'latent' to fit it as observed, or drop it from the data "
            f"('drop: [{observed[0]}]' in the specification, or --drop {observed[0]})"
            + (f" (also in the data: {observed[1:]})" if len(observed) > 1 else "")
        )


def build_model(
    spec: dict[str, Any], states: dict[str, tuple[str, ...]] | None = None, method: str | None = None,
    continuous: list[str] | None = None,
) -> tuple[Any, str | None, dict[str, Any]]:
    """The model, method and fit options a specification names.

    ``states`` are the data's categorical variables and their labels; ``continuous``
    the data's continuous variables (None: not known, so not checked; a
    ``gaussian_mixture`` then needs its ``variables``).

    Everything is checked before any pass over the data: the keys of the model's
    kind, their types, and the options against :func:`dpgm.fit`'s table for the
    (model kind, method) — ``method`` overrides the specification's.

    Raises
    ------
    SpecError
        An unknown kind, key, method or option, or a value of the wrong type or out
        of range, naming the key.
    """
    override = method
    model, method, options = _build(spec, states, continuous)
    method = override or method
    from dpgm.api.options import check_fit_options

    try:
        check_fit_options(model, method, options, given=list(options))
    except ConfigError as error:
        raise SpecError(str(error)) from None
    return model, method, options


def _check_types(spec: dict[str, Any], kind: str) -> None:
    """Each structure key of the specification is of the type its kind needs, named if not."""
    def need(key: str, ok: bool, what: str) -> None:
        if key in spec and not ok:
            raise SpecError(f"{key!r} of a {kind} must be {what}, got {spec[key]!r}")

    def names(value: Any) -> bool:
        return isinstance(value, list) and all(isinstance(v, str) and v for v in value)

    def positive_int(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 1

    need("method", isinstance(spec.get("method"), str), "a method name (a string)")
    need("network", isinstance(spec.get("network"), str), "a shipped network's name or a BIF file")
    need("variables", names(spec.get("variables")), "a list of variable names")
    need("observed", names(spec.get("observed")), "a list of variable names")
    need("variable", isinstance(spec.get("variable"), str) and spec.get("variable"), "a variable name")
    need("n_classes", positive_int(spec.get("n_classes")) and spec.get("n_classes") >= 2, "an integer >= 2")
    need("n_states", positive_int(spec.get("n_states")), "an integer >= 1")
    need("n_components", positive_int(spec.get("n_components")), "an integer >= 1")
    need("covariance_type", spec.get("covariance_type") in ("full", "diag", "spherical", "tied"),
         "one of ['full', 'diag', 'spherical', 'tied']")
    need("symbols", isinstance(spec.get("symbols"), list) and spec.get("symbols")
         and all(isinstance(v, str | int) and not isinstance(v, bool) for v in spec["symbols"]),
         "a non-empty list of labels")
    need("latent", isinstance(spec.get("latent"), dict) and all(
        isinstance(k, str) and isinstance(v, list) and len(v) >= 1 for k, v in spec["latent"].items()),
        "a mapping of each latent variable to its state labels")


def _options(spec: dict[str, Any], kind: str) -> dict[str, Any]:
    """The specification's options (its keys other than the kind's structure keys), numbers read."""
    keys = structure_keys()
    options = {k: v for k, v in spec.items() if k not in keys[kind]}
    for key, flag in _COMMAND_LINE_OPTIONS.items():
        if key in options:
            raise SpecError(f"{key!r} cannot be set in a specification: use the command line's {flag}")
    for other, theirs in keys.items():
        misplaced = [k for k in options if k in theirs]
        if misplaced:
            raise SpecError(f"{misplaced[0]!r} is a key of a {other} specification, not of a {kind} "
                            f"(its keys: {list(keys[kind])} and fit options)")
    for key in _REAL_OPTIONS:
        if isinstance(options.get(key), str):
            with contextlib.suppress(ValueError):
                options[key] = float(options[key])
    return options


def _build(spec: dict[str, Any], states: dict[str, tuple[str, ...]] | None,
           continuous: list[str] | None = None) -> tuple[Any, str | None, dict]:
    states = dict(states or {})
    from dpgm.models.bayesian_network import BayesianNetwork
    from dpgm.networks import load_network

    kind, known = spec["model"], list(structure_keys())
    if not isinstance(kind, str):
        raise SpecError(f"'model' must be the name of a model kind (a string), got {kind!r}; expected one of {known}")
    if kind not in known:
        raise SpecError(f"unknown model kind {kind!r}; expected one of {known}")
    _check_types(spec, kind)
    options = _options(spec, kind)
    method = spec.get("method")
    if kind in _CONTINUOUS_KINDS:
        return _build_continuous(spec, kind, states, continuous), method, options
    if kind == "bayesian_network":
        latent = spec.get("latent") or {}
        if not isinstance(latent, dict):
            raise SpecError("'latent' must map each latent variable to its state labels")
        if "network" in spec and "edges" in spec:
            raise SpecError("a bayesian_network takes 'network' or 'edges', not both")
        if "network" in spec:
            try:
                network = load_network(str(spec["network"]))
            except (FileNotFoundError, ValueError) as error:
                raise SpecError(f"'network': {error}") from None
            edges, variables = network.edges, network.variables
        else:
            edges, variables = spec.get("edges"), spec.get("variables", ())
            if not isinstance(edges, list) or not all(isinstance(e, list | tuple) and len(e) == 2 for e in edges):
                raise SpecError("a bayesian_network needs 'edges': a list of [parent, child] pairs (or 'network')")
        _check_latent_not_observed(list(latent), states)
        if latent:
            names = {v for e in edges for v in e} | set(variables)
            missing = sorted(v for v in names if v not in states and v not in latent)
            if missing:
                raise SpecError(f"variables {missing} are neither in the data nor declared under 'latent'")
            all_states = {v: list(states[v]) for v in names if v in states} | {
                k: [str(x) for x in v] for k, v in latent.items()}
            return BayesianNetwork.from_edges(edges, all_states, variables=variables), method or "em", options
        return BayesianNetwork.from_edges(edges, variables=variables), method, options
    if kind in ("markov_network", "log_linear"):
        from dpgm.models.log_linear import LogLinearModel
        from dpgm.models.markov import MarkovNetwork

        key = "cliques" if kind == "markov_network" else "margins"
        scopes = spec.get(key)
        if not isinstance(scopes, list) or not all(isinstance(c, list) and c for c in scopes):
            raise SpecError(f"a {kind} needs '{key}': a list of variable lists")
        unknown = sorted({v for c in scopes for v in c} - set(states))
        if unknown:
            raise SpecError(f"{key} name variables not in the data: {unknown}; data variables: {sorted(states)}")
        build = MarkovNetwork.from_cliques if kind == "markov_network" else LogLinearModel.from_margins
        return build([tuple(c) for c in scopes], states), method, options
    if kind == "latent_class":
        from dpgm.models.bayesian_network import latent_class_model

        _check_latent_not_observed([spec.get("variable", "class")], states)
        observed = spec.get("observed") or sorted(states)
        unknown = sorted(set(observed) - set(states))
        if unknown or not isinstance(spec.get("n_classes"), int):
            raise SpecError(f"a latent_class model needs 'n_classes' (an integer) and observed variables of the "
                            f"data (unknown: {unknown})")
        from dpgm.api.checks import check_latent_states

        check_latent_states(spec.get("variable", "class"), spec["n_classes"],  # before its tables exist
                            1 + sum(len(states[v]) for v in observed), kind="latent class variable")
        model = latent_class_model({v: states[v] for v in observed}, spec["n_classes"],
                                   latent=spec.get("variable", "class"))
        return model, method or "em", options
    if kind == "hmm":
        from dpgm.models.hmm import hmm

        if not isinstance(spec.get("n_states"), int) or not isinstance(spec.get("symbols"), list):
            raise SpecError("an hmm needs 'n_states' (an integer) and 'symbols' (the observed labels)")
        from dpgm.api.checks import check_hidden_states

        check_hidden_states(spec["n_states"], len(spec["symbols"]))  # before its tables exist
        return hmm(spec["n_states"], spec["symbols"], variable=spec.get("variable", "obs")), method, options
    if kind in ("glm", "hybrid_network"):
        latent = kind == "hybrid_network" and bool(spec.get("latent"))
        return _build_glm(spec, kind, states, options), method or ("em" if latent else None), options
    raise AssertionError(kind)  # pragma: no cover - every specification name of the registry is built above


def _pairs(spec: dict[str, Any], key: str, kind: str, size: int | None) -> list[tuple[str, ...]]:
    """``spec[key]`` as a list of name tuples (``size``: each exactly that long), or a SpecError naming it."""
    value = spec.get(key)
    ok = isinstance(value, list) and all(
        isinstance(e, list) and e and all(isinstance(v, str) and v for v in e) and (size is None or len(e) == size)
        for e in value)
    if not ok:
        what = "a list of [parent, child] pairs" if size == 2 else "a list of variable lists"
        raise SpecError(f"{key!r} of a {kind} must be {what}, got {value!r}")
    return [tuple(e) for e in value]


def _build_continuous(spec: dict[str, Any], kind: str, states: dict[str, tuple[str, ...]],
                      continuous: list[str] | None) -> Any:
    """A GaussianGraphicalModel, GaussianMixture or LinearGaussianNetwork; its variables checked against the data."""
    from dpgm.models.gaussian import GaussianGraphicalModel
    from dpgm.models.linear_gaussian import LinearGaussianNetwork
    from dpgm.models.mixture import GaussianMixture

    variables = spec.get("variables")
    if kind == "gaussian_mixture":
        if "n_components" not in spec:
            raise SpecError("a gaussian_mixture needs 'n_components' (an integer >= 1)")
        if variables is None:
            if continuous is None:
                raise SpecError("a gaussian_mixture needs 'variables' (its continuous variables)")
            variables = list(continuous)
            if not variables:
                raise SpecError("the data have no continuous variable for a gaussian_mixture; "
                                f"categorical: {sorted(states)}")
        named = list(variables)
    elif kind == "gaussian_graphical":
        if ("edges" in spec) == ("cliques" in spec):
            raise SpecError("a gaussian_graphical model takes 'edges' or 'cliques' (one of them)")
        scopes = _pairs(spec, "edges" if "edges" in spec else "cliques", kind, 2 if "edges" in spec else None)
        named = list(dict.fromkeys([*(v for s in scopes for v in s), *(variables or ())]))
    else:
        if "edges" not in spec:
            raise SpecError("a linear_gaussian network needs 'edges': a list of [parent, child] pairs")
        scopes = _pairs(spec, "edges", kind, 2)
        named = list(dict.fromkeys([*(v for s in scopes for v in s), *(variables or ())]))
    categorical = [v for v in named if v in states]
    if categorical:
        raise SpecError(f"a {kind} needs continuous variables; {categorical} are categorical in the data")
    if continuous is not None:
        unknown = [v for v in named if v not in continuous]
        if unknown:
            raise SpecError(f"variables {unknown} are not in the data; continuous variables: {sorted(continuous)}")
    try:
        if kind == "gaussian_mixture":
            return GaussianMixture(spec["n_components"], variables, spec.get("covariance_type", "full"))
        if kind == "gaussian_graphical":
            return GaussianGraphicalModel(scopes, variables)
        return LinearGaussianNetwork(scopes, variables)
    except (TypeError, ValueError) as error:
        raise SpecError(f"{kind}: {error}") from None


def _build_glm(spec: dict[str, Any], kind: str, states: dict[str, tuple[str, ...]], options: dict[str, Any]) -> Any:
    """A GLMConditional or a HybridNetwork from its keys (families and parents checked by the model).

    ``l2`` is the model's ridge penalty, not an option of the fit: taken out of ``options``.
    """
    from dpgm.models.glm import GLMConditional
    from dpgm.models.hybrid import HybridNetwork

    l2 = options.pop("l2", 0.0)
    try:
        if kind == "glm":
            parents = spec.get("parents", [])
            if not isinstance(spec.get("child"), str) or not isinstance(parents, list):
                raise SpecError("a glm needs 'child' (a variable name) and 'parents' (a list of names)")
            return GLMConditional(spec["child"], parents, spec.get("family", "gaussian"), l2)
        edges, families = spec.get("edges"), spec.get("families") or {}
        if not isinstance(edges, list) or not all(isinstance(e, list | tuple) and len(e) == 2 for e in edges):
            raise SpecError("a hybrid_network needs 'edges': a list of [parent, child] pairs")
        if not isinstance(families, dict):
            raise SpecError("'families' must map each GLM node to its family")
        latent = spec.get("latent") or {}
        _check_latent_not_observed(list(latent), states)
        return HybridNetwork([tuple(e) for e in edges], families, nodes=spec.get("variables", ()),
                             states={k: [str(x) for x in v] for k, v in latent.items()}, l2=l2)
    except (TypeError, ValueError) as error:
        if isinstance(error, SpecError):
            raise
        raise SpecError(f"{kind}: {error}") from None

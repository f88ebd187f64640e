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

from dpgm.errors import ConfigError, SpecError

__all__ = ["SpecError", "build_model", "drop_variables", "read_spec"]


def structure_keys() -> dict[str, tuple[str, ...]]:
    """Each specification name -> the keys that describe its model (:attr:`dpgm.api.kinds.Kind.spec_names`);
    every other key is an option of :func:`dpgm.fit`, checked against the registry's schema of the
    (model kind, method)."""
    from dpgm.api.kinds import spec_names

    return dict(spec_names())


# options a specification cannot hold: they are the command line's (--checkpoint, --resume)
_COMMAND_LINE_OPTIONS = {"checkpoint": "--checkpoint", "resume": "--resume"}
# YAML 1.1 reads 1e-8 (no dot) as a string: accepted for these numeric options
_REAL_OPTIONS = ("tol", "loglik_tol", "l1", "l2", "equivalent_sample_size", "alpha", "reg_covar")


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
    """The model the registry's builder of ``spec['model']`` makes, the method it implies and the options."""
    from dpgm.api.kinds import spec_forms

    kind, forms = spec["model"], spec_forms()
    if not isinstance(kind, str):
        raise SpecError(f"'model' must be the name of a model kind (a string), got {kind!r}; expected one of "
                        f"{list(forms)}")
    if kind not in forms:
        raise SpecError(f"unknown model kind {kind!r}; expected one of {list(forms)}")
    _check_types(spec, kind)
    options = _options(spec, kind)
    model, implied = forms[kind].build({**spec, **options}, dict(states or {}), continuous)
    for key in forms[kind].model_options:
        options.pop(key, None)
    return model, spec.get("method") or implied, options

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

Keys other than ``model``, the structure keys and ``method`` are passed to
:func:`dpgm.fit` as options (``tol``, ``max_iter``, ...).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import yaml

__all__ = ["SpecError", "build_model", "read_spec"]

_STRUCTURE_KEYS = {"model", "edges", "network", "variables", "method", "cliques", "features", "states",
                   "n_states", "symbols", "variable", "margins", "latent", "n_classes", "observed"}


class SpecError(ValueError):
    """A model specification that cannot be used."""


def read_spec(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a YAML (``.yaml``/``.yml``) or TOML (``.toml``) specification into a dict."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no specification at {os.fspath(path)!r}")
    text = path.read_text()
    try:
        spec = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as error:
        raise SpecError(f"cannot parse {os.fspath(path)!r}: {error}") from None
    if not isinstance(spec, dict) or "model" not in spec:
        raise SpecError(f"{os.fspath(path)!r} must be a mapping with a 'model' key")
    return spec


def _check_latent_not_observed(latent: list[str], states: dict[str, tuple[str, ...]]) -> None:
    """A latent variable present in the data would be fitted as observed: refuse it, naming it."""
    observed = [v for v in latent if v in states]
    if observed:
        raise SpecError(
            f"latent variable {observed[0]!r} is a variable of the data, so it would be fitted as observed; "
            f"rename it, remove it from 'latent' to fit it as observed, or drop it from the data"
            + (f" (also in the data: {observed[1:]})" if len(observed) > 1 else "")
        )


def build_model(
    spec: dict[str, Any], states: dict[str, tuple[str, ...]] | None = None
) -> tuple[Any, str | None, dict[str, Any]]:
    """The model, method and fit options a specification names (``states``: the data's, for labels)."""
    states = dict(states or {})
    from dpgm.models.bayesian_network import BayesianNetwork
    from dpgm.networks import load_network

    kind = spec["model"]
    options = {k: v for k, v in spec.items() if k not in _STRUCTURE_KEYS}
    method = spec.get("method")
    if kind == "bayesian_network":
        latent = spec.get("latent") or {}
        if not isinstance(latent, dict):
            raise SpecError("'latent' must map each latent variable to its state labels")
        if "network" in spec:
            network = load_network(str(spec["network"]))
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
        model = latent_class_model({v: states[v] for v in observed}, spec["n_classes"],
                                   latent=spec.get("variable", "class"))
        return model, method or "em", options
    if kind == "hmm":
        from dpgm.models.hmm import hmm

        if not isinstance(spec.get("n_states"), int) or not isinstance(spec.get("symbols"), list):
            raise SpecError("an hmm needs 'n_states' (an integer) and 'symbols' (the observed labels)")
        return hmm(spec["n_states"], spec["symbols"], variable=spec.get("variable", "obs")), method, options
    raise SpecError(
        f"unknown model kind {kind!r}; expected one of "
        "['bayesian_network', 'markov_network', 'log_linear', 'latent_class', 'hmm']"
    )

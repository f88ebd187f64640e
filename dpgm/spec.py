"""Model specifications for batch jobs: small YAML or TOML files naming a model and its fit.

A Bayesian network::

    model: bayesian_network
    edges: [[smoke, lung], [smoke, bronc]]     # or: network: alarm  (structure of a shipped net / BIF file)
    method: bayes                              # mle (default) | bayes
    prior: BDeu                                # BDeu | K2
    equivalent_sample_size: 10

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
                   "n_states", "symbols", "variable", "margins"}


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


def build_model(spec: dict[str, Any]) -> tuple[Any, str | None, dict[str, Any]]:
    """The model, method and fit options a specification names."""
    from dpgm.models.bayesian_network import BayesianNetwork
    from dpgm.networks import load_network

    kind = spec["model"]
    options = {k: v for k, v in spec.items() if k not in _STRUCTURE_KEYS}
    method = spec.get("method")
    if kind == "bayesian_network":
        if "network" in spec:
            network = load_network(str(spec["network"]))
            return BayesianNetwork.from_edges(network.edges, variables=network.variables), method, options
        edges = spec.get("edges")
        if not isinstance(edges, list) or not all(isinstance(e, list | tuple) and len(e) == 2 for e in edges):
            raise SpecError("a bayesian_network needs 'edges': a list of [parent, child] pairs (or 'network')")
        return BayesianNetwork.from_edges(edges, variables=spec.get("variables", ())), method, options
    if kind == "hmm":
        from dpgm.models.hmm import hmm

        if not isinstance(spec.get("n_states"), int) or not isinstance(spec.get("symbols"), list):
            raise SpecError("an hmm needs 'n_states' (an integer) and 'symbols' (the observed labels)")
        return hmm(spec["n_states"], spec["symbols"], variable=spec.get("variable", "obs")), method, options
    raise SpecError(f"unknown model kind {kind!r}; expected one of ['bayesian_network', 'hmm']")

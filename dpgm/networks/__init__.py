"""Standard discrete Bayesian networks from the bnlearn repository, shipped as BIF."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from dpgm.io.bif import read_bif
from dpgm.models.bayesian_network import BayesianNetwork

__all__ = ["available_networks", "load_network", "network_path"]


def available_networks() -> list[str]:
    """Names of the shipped networks."""
    folder = resources.files(__name__)
    return sorted(p.name.removesuffix(".bif.gz") for p in folder.iterdir() if p.name.endswith(".bif.gz"))


def network_path(name: str) -> Path:
    """Path of a shipped network's BIF file."""
    names = available_networks()
    if name not in names:
        raise ValueError(f"no shipped network {name!r}; available: {names}")
    return Path(str(resources.files(__name__) / f"{name}.bif.gz"))


def load_network(name_or_path: str) -> BayesianNetwork:
    """A shipped network by name (``"alarm"``), or any BIF file by path."""
    if name_or_path in available_networks():
        return read_bif(network_path(name_or_path))
    path = Path(name_or_path)
    if not path.exists():
        raise ValueError(
            f"{name_or_path!r} is neither a shipped network nor a file; shipped: {available_networks()}"
        )
    return read_bif(path)

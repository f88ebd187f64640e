"""dpgm: probabilistic graphical models fitted on chunked Zarr datasets with Dask."""

from dpgm.errors import ConvergenceWarning, DataError, DpgmWarning
from dpgm.io import read_bif, write_bif
from dpgm.models import BayesianNetwork
from dpgm.networks import available_networks, load_network

__all__ = [
    "BayesianNetwork",
    "ConvergenceWarning",
    "DataError",
    "DpgmWarning",
    "available_networks",
    "load_network",
    "read_bif",
    "write_bif",
]

"""dpgm: probabilistic graphical models fitted on chunked Zarr datasets with Dask.

The public API lives here; see the README for a tour.
"""

from dpgm.algorithms.result import FitResult
from dpgm.api import fit, predict_proba
from dpgm.api.glm_predict import predict
from dpgm.cluster import compute, connect
from dpgm.data import Schema, from_pandas, from_table, open_dataset, to_pandas, write_dataset
from dpgm.data.convert import convert
from dpgm.data.kinds import ConversionReport
from dpgm.data.sample import sample_bayesian_network
from dpgm.errors import ConvergenceWarning, DataError, DpgmWarning
from dpgm.inference import (
    ImpossibleEvidenceError,
    JunctionTree,
    log_partition,
    map_assignment,
    marginal,
    marginals,
)
from dpgm.io import read_bif, read_uai, write_bif, write_uai
from dpgm.models import BayesianNetwork, latent_class_model
from dpgm.models.gaussian import GaussianGraphicalModel
from dpgm.models.glm import GLMConditional
from dpgm.models.hmm import HiddenMarkovModel, hmm
from dpgm.models.hybrid import HybridNetwork
from dpgm.models.linear_gaussian import LinearGaussianNetwork
from dpgm.models.log_linear import LogLinearModel
from dpgm.models.markov import MarkovNetwork
from dpgm.models.mixture import GaussianMixture
from dpgm.models.store import load
from dpgm.networks import available_networks, load_network
from dpgm.stats import Counts, Moments, counts, moments

__all__ = [
    "BayesianNetwork",
    "ConvergenceWarning",
    "ConversionReport",
    "Counts",
    "DataError",
    "DpgmWarning",
    "FitResult",
    "GLMConditional",
    "HybridNetwork",
    "GaussianGraphicalModel",
    "GaussianMixture",
    "HiddenMarkovModel",
    "ImpossibleEvidenceError",
    "JunctionTree",
    "LinearGaussianNetwork",
    "LogLinearModel",
    "MarkovNetwork",
    "Moments",
    "Schema",
    "available_networks",
    "compute",
    "connect",
    "convert",
    "counts",
    "from_pandas",
    "fit",
    "from_table",
    "hmm",
    "latent_class_model",
    "load",
    "load_network",
    "log_partition",
    "map_assignment",
    "marginal",
    "marginals",
    "moments",
    "open_dataset",
    "predict",
    "predict_proba",
    "read_bif",
    "read_uai",
    "sample_bayesian_network",
    "to_pandas",
    "write_dataset",
    "write_bif",
    "write_uai",
]

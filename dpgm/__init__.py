"""dpgm: probabilistic graphical models fitted on chunked Zarr datasets with Dask.

The public API lives here; see the README for a tour.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpgm.algorithms.result import FitResult
    from dpgm.api import fit, predict_proba
    from dpgm.api.bootstrap import BootstrapResult, bootstrap
    from dpgm.api.cross_validation import Candidate, cross_validate
    from dpgm.api.predict import predict
    from dpgm.api.score import score
    from dpgm.cluster import compute, connect
    from dpgm.data import Schema, from_pandas, from_table, open_dataset, to_pandas, write_dataset
    from dpgm.data.convert import convert
    from dpgm.data.kinds import ConversionReport
    from dpgm.data.sample import sample_bayesian_network
    from dpgm.data.verification import VerifyReport, verify
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
    from dpgm.io.peers import from_pgmpy
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
    from dpgm.stats import Counts, Moments
    from dpgm.stats.counts import counts
    from dpgm.stats.moments import moments

_PUBLIC = {  # name -> module: imported on first use, so `import dpgm` and `dpgm --help` stay fast
    "available_networks": "dpgm.networks",
    "BayesianNetwork": "dpgm.models",
    "BootstrapResult": "dpgm.api.bootstrap",
    "Candidate": "dpgm.api.cross_validation",
    "compute": "dpgm.cluster",
    "connect": "dpgm.cluster",
    "ConvergenceWarning": "dpgm.errors",
    "ConversionReport": "dpgm.data.kinds",
    "convert": "dpgm.data.convert",
    "Counts": "dpgm.stats",
    "counts": "dpgm.stats.counts",
    "bootstrap": "dpgm.api.bootstrap",
    "cross_validate": "dpgm.api.cross_validation",
    "DataError": "dpgm.errors",
    "DpgmWarning": "dpgm.errors",
    "fit": "dpgm.api",
    "FitResult": "dpgm.algorithms.result",
    "from_pandas": "dpgm.data",
    "from_pgmpy": "dpgm.io.peers",
    "from_table": "dpgm.data",
    "GaussianGraphicalModel": "dpgm.models.gaussian",
    "GaussianMixture": "dpgm.models.mixture",
    "GLMConditional": "dpgm.models.glm",
    "HiddenMarkovModel": "dpgm.models.hmm",
    "hmm": "dpgm.models.hmm",
    "HybridNetwork": "dpgm.models.hybrid",
    "ImpossibleEvidenceError": "dpgm.inference",
    "JunctionTree": "dpgm.inference",
    "latent_class_model": "dpgm.models",
    "LinearGaussianNetwork": "dpgm.models.linear_gaussian",
    "load": "dpgm.models.store",
    "load_network": "dpgm.networks",
    "log_partition": "dpgm.inference",
    "LogLinearModel": "dpgm.models.log_linear",
    "map_assignment": "dpgm.inference",
    "marginal": "dpgm.inference",
    "marginals": "dpgm.inference",
    "MarkovNetwork": "dpgm.models.markov",
    "Moments": "dpgm.stats",
    "moments": "dpgm.stats.moments",
    "open_dataset": "dpgm.data",
    "predict": "dpgm.api.predict",
    "predict_proba": "dpgm.api",
    "read_bif": "dpgm.io",
    "read_uai": "dpgm.io",
    "sample_bayesian_network": "dpgm.data.sample",
    "score": "dpgm.api.score",
    "Schema": "dpgm.data",
    "to_pandas": "dpgm.data",
    "verify": "dpgm.data.verification",
    "VerifyReport": "dpgm.data.verification",
    "write_bif": "dpgm.io",
    "write_dataset": "dpgm.data",
    "write_uai": "dpgm.io",
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        try:  # a subpackage used as an attribute (``dpgm.potentials``)
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


__all__ = [
    "BayesianNetwork",
    "BootstrapResult",
    "Candidate",
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
    "bootstrap",
    "cross_validate",
    "from_pandas",
    "from_pgmpy",
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
    "score",
    "to_pandas",
    "verify",
    "VerifyReport",
    "write_dataset",
    "write_bif",
    "write_uai",
]

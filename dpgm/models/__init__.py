"""Model classes: labelled parameters, no data inside."""

from dpgm.models.bayesian_network import BayesianNetwork, latent_class_model

__all__ = ["BayesianNetwork", "latent_class_model"]
from dpgm.models.markov import MarkovNetwork  # noqa: E402

__all__ += ["MarkovNetwork"]

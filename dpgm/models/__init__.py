"""Model classes: labelled parameters, no data inside."""

from dpgm.models.bayesian_network import BayesianNetwork

__all__ = ["BayesianNetwork"]

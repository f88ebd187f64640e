"""The response families of a generalized linear model, each an object with its canonical link.

A family knows its link, mean and variance functions, its log-likelihood and deviance, the
start of IRLS (statsmodels' ``mu0``, from the response alone), which responses it accepts and
how a prediction is laid out. Everything that depends on the family (the IRLS pass, the
driver's closed-form step, predictions, the hybrid network's E step, the model's parameter
count) asks the family object instead of comparing its name; a new family is one subclass
and one entry in :data:`FAMILIES`.

The linear predictor of the categorical family (multinomial logit against the first state)
has one column per state, the reference's held at zero; the others' are ``(n,)`` vectors.

Examples
--------
>>> import numpy as np
>>> family = glm_family("logistic")
>>> family.name, family.link
('bernoulli', 'logit')
>>> eta = np.array([0.0, np.log(3.0)])
>>> family.mean(eta)
array([0.5 , 0.75])
>>> family.predictions(eta)   # one column per state: P(0), P(1)
array([[0.5 , 0.5 ],
       [0.25, 0.75]])
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from scipy.special import expit, gammaln, xlogy

__all__ = ["FAMILIES", "GLMFamily", "canonical_family", "glm_family"]

# |eta| beyond which a logistic probability is within 1e-13 of 0 or 1: rows fitted "perfectly"
SEPARATED_ETA = 30.0


class GLMFamily:
    """One response family with its canonical link (see the module docstring).

    Attributes
    ----------
    name
        The family's name in :data:`FAMILIES`.
    link
        Its canonical link, for reports.
    aliases
        Other names a user may give it (``"logistic"``).
    has_scale
        Whether a dispersion is estimated (the gaussian residual variance): it counts
        as a free parameter.
    closed_form
        Whether one weighted least-squares solve is the maximum (no IRLS iterations).
    multiclass
        Whether the response is a state of ``K`` with ``K - 1`` coefficient vectors.
    has_states
        Whether a prediction is a distribution over the child's states (else its mean).
    """

    name: ClassVar[str]
    link: ClassVar[str]
    aliases: ClassVar[tuple[str, ...]] = ()
    has_scale: ClassVar[bool] = False
    closed_form: ClassVar[bool] = False
    multiclass: ClassVar[bool] = False
    has_states: ClassVar[bool] = False

    def __repr__(self) -> str:
        return f"glm_family({self.name!r})"

    def linear_predictor(self, x: np.ndarray, beta: np.ndarray, n_classes: int = 0) -> np.ndarray:
        """``eta = X beta`` (``(n, K)`` with the reference column at zero for the categorical family)."""
        return x @ beta

    def mean(self, eta: np.ndarray) -> np.ndarray:
        """The inverse link: ``E[y | eta]``."""
        raise NotImplementedError

    def variance(self, mu: np.ndarray) -> np.ndarray:
        """The variance function ``V(mu)`` (also the canonical link's IRLS weight)."""
        raise NotImplementedError

    def start(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(mu, eta)`` to start IRLS from the response alone (statsmodels' start)."""
        raise NotImplementedError

    def row_loglik(self, y: np.ndarray, eta: np.ndarray, scale: float = 1.0) -> np.ndarray:
        """Each row's log-density (log-probability) of ``y`` at the linear predictor ``eta``."""
        raise NotImplementedError

    def saturated(self, y: np.ndarray, w: np.ndarray) -> float:
        """The weighted log-likelihood of the saturated model (``mu = y``), for the deviance."""
        raise NotImplementedError

    def separated(self, eta: np.ndarray, w: np.ndarray) -> float:
        """Weight of the rows fitted with probability within 1e-13 of 0 or 1 (0 where that cannot be)."""
        return 0.0

    def response_problem(self, y: np.ndarray) -> str | None:
        """Why the numeric response ``y`` (missing rows dropped) cannot be this family's, or None."""
        return None

    def child_values(self, states: tuple[str, ...]) -> tuple[float, ...] | None:
        """The numeric response of each state of a categorical child, or None to use the codes.

        Raises
        ------
        ValueError
            The child's states cannot be this family's response (the message says why).
        """
        raise ValueError(f"the {self.name} family needs a continuous child; this one is categorical with "
                         f"states {list(states)} (family='categorical'?)")

    def continuous_child_problem(self) -> str | None:
        """Why a continuous child cannot be this family's response, or None."""
        return None

    def predictions(self, eta: np.ndarray) -> np.ndarray:
        """``(n, outputs)``: the mean (one column), or the probability of each state."""
        return self.mean(eta)[:, None]


class Gaussian(GLMFamily):
    """Normal response, identity link; the residual variance is estimated (closed form)."""

    name, link, aliases = "gaussian", "identity", ("normal",)
    has_scale = closed_form = True

    def mean(self, eta: np.ndarray) -> np.ndarray:
        return eta

    def variance(self, mu: np.ndarray) -> np.ndarray:
        return np.ones_like(mu)

    def start(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return y, y

    def row_loglik(self, y: np.ndarray, eta: np.ndarray, scale: float = 1.0) -> np.ndarray:
        return -0.5 * (math.log(2 * math.pi * scale) + (y - eta) ** 2 / scale)

    def saturated(self, y: np.ndarray, w: np.ndarray) -> float:
        return 0.0


class Bernoulli(GLMFamily):
    """A 0/1 response (or a two-state child, the second state the event), logit link."""

    name, link, aliases = "bernoulli", "logit", ("logistic", "binomial")
    has_states = True

    def mean(self, eta: np.ndarray) -> np.ndarray:
        return expit(eta)

    def variance(self, mu: np.ndarray) -> np.ndarray:
        return mu * (1 - mu)

    def start(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mu = (y + 0.5) / 2
        return mu, np.log(mu / (1 - mu))

    def row_loglik(self, y: np.ndarray, eta: np.ndarray, scale: float = 1.0) -> np.ndarray:
        return y * eta - np.logaddexp(0.0, eta)  # exact where mu rounds to 0 or 1

    def saturated(self, y: np.ndarray, w: np.ndarray) -> float:
        return float(w @ (xlogy(y, y) + xlogy(1 - y, 1 - y)))

    def separated(self, eta: np.ndarray, w: np.ndarray) -> float:
        return float(w[np.abs(eta) > SEPARATED_ETA].sum())

    def response_problem(self, y: np.ndarray) -> str | None:
        if ((y < 0) | (y > 1)).any():
            return "a bernoulli child must lie in [0, 1] (or be a two-state categorical variable)"
        return None

    def child_values(self, states: tuple[str, ...]) -> tuple[float, ...] | None:
        if len(states) != 2:
            raise ValueError(f"a bernoulli child needs exactly two states (the second is the event), has "
                             f"{list(states)}; family='categorical' fits more")
        return (0.0, 1.0)

    def predictions(self, eta: np.ndarray) -> np.ndarray:
        p = expit(eta)
        return np.column_stack([1 - p, p])


class Poisson(GLMFamily):
    """Nonnegative counts, log link."""

    name, link = "poisson", "log"

    def mean(self, eta: np.ndarray) -> np.ndarray:
        return np.exp(eta)

    def variance(self, mu: np.ndarray) -> np.ndarray:
        return mu

    def start(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mu = y + 0.5
        return mu, np.log(mu)

    def row_loglik(self, y: np.ndarray, eta: np.ndarray, scale: float = 1.0) -> np.ndarray:
        return y * eta - np.exp(eta) - gammaln(y + 1)

    def saturated(self, y: np.ndarray, w: np.ndarray) -> float:
        return float(w @ (xlogy(y, y) - y - gammaln(y + 1)))

    def response_problem(self, y: np.ndarray) -> str | None:
        return "a poisson child must be nonnegative" if (y < 0).any() else None

    def child_values(self, states: tuple[str, ...]) -> tuple[float, ...] | None:
        try:
            values = tuple(float(s) for s in states)
        except ValueError:
            raise ValueError(f"a poisson child holds counts; its states {list(states)} are not numbers") from None
        if any(v < 0 or not math.isfinite(v) for v in values):
            raise ValueError("a poisson child must be nonnegative")
        return values


class Categorical(GLMFamily):
    """A state of ``K``: multinomial logit against the first state (``K - 1`` coefficient vectors)."""

    name, link, aliases = "categorical", "multinomial logit", ("multinomial", "multinomial_logit")
    multiclass = has_states = True

    def linear_predictor(self, x: np.ndarray, beta: np.ndarray, n_classes: int = 0) -> np.ndarray:
        eta = np.zeros((len(x), n_classes))
        eta[:, 1:] = x @ beta.reshape(n_classes - 1, x.shape[1]).T
        return eta

    def mean(self, eta: np.ndarray) -> np.ndarray:
        return np.exp(eta - np.logaddexp.reduce(eta, axis=1, keepdims=True))

    def row_loglik(self, y: np.ndarray, eta: np.ndarray, scale: float = 1.0) -> np.ndarray:
        return eta[np.arange(len(y)), y] - np.logaddexp.reduce(eta, axis=1)

    def saturated(self, y: np.ndarray, w: np.ndarray) -> float:
        return 0.0

    def child_values(self, states: tuple[str, ...]) -> tuple[float, ...] | None:
        if len(states) < 2:
            raise ValueError(f"a categorical child needs at least two states, has {list(states)}")
        return None

    def continuous_child_problem(self) -> str | None:
        return "the categorical family needs a categorical child; this one is continuous (family='gaussian' or 'poisson'?)"

    def predictions(self, eta: np.ndarray) -> np.ndarray:
        return self.mean(eta)


FAMILIES: dict[str, GLMFamily] = {f.name: f for f in (Gaussian(), Bernoulli(), Poisson(), Categorical())}
_ALIASES = {alias: f.name for f in FAMILIES.values() for alias in f.aliases}


def canonical_family(family: str) -> str:
    """The family's name in :data:`FAMILIES` (``"logistic"`` -> ``"bernoulli"``, ``"multinomial"`` -> ``"categorical"``).

    Raises
    ------
    TypeError
        ``family`` is not a string.
    ValueError
        No family of that name or alias.
    """
    if not isinstance(family, str):
        raise TypeError(f"family must be a string, got {family!r}")
    name = _ALIASES.get(family.lower(), family.lower())
    if name not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {list(FAMILIES)} "
                         f"(aliases: {sorted(_ALIASES)})")
    return name


def glm_family(family: str | GLMFamily) -> GLMFamily:
    """The family object of a name or alias (an object is returned as it is)."""
    return family if isinstance(family, GLMFamily) else FAMILIES[canonical_family(family)]

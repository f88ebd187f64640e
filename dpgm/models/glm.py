"""A conditional distribution of one variable given its parents as a generalized linear model.

The child's natural parameter is linear in the parents' *terms*: an intercept,
each continuous parent as it is, and an indicator for every non-reference state of
a categorical parent (reference coding: the first state is dropped). The link is
the family's canonical one: identity (gaussian), logit (bernoulli), log (poisson)
and the multinomial logit against the child's first state (categorical).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import xarray as xr

from dpgm.glm_families import FAMILIES, GLMFamily, canonical_family, glm_family
from dpgm.models.description import CATEGORICAL, CONTINUOUS, edge_lists
from dpgm.models.saving import model_kind

__all__ = ["FAMILIES", "GLMConditional", "canonical_family"]


@model_kind
class GLMConditional:
    """``P(child | parents)`` as a generalized linear model with the family's canonical link.

    Parameters
    ----------
    child
        The modelled variable: continuous for ``"gaussian"``; 0/1 (continuous) or
        two-state categorical for ``"bernoulli"`` (the second state is the event);
        nonnegative counts for ``"poisson"`` (continuous, or categorical with
        integer state labels); categorical for ``"categorical"``.
    parents
        Explanatory variables, categorical (reference-coded indicators) or continuous.
    family
        ``"gaussian"``, ``"bernoulli"`` (alias ``"logistic"``), ``"poisson"`` or
        ``"categorical"`` (alias ``"multinomial"``).
    l2
        Ridge penalty ``l2 / 2 * ||beta||^2`` on every coefficient but the intercept
        (scaled like the log-likelihood, i.e. not divided by the number of rows).

    Attributes
    ----------
    coefficients, standard_errors
        After :func:`dpgm.fit`: ``DataArray``s over dim ``term`` (``"Intercept"``,
        continuous parents by name, ``"parent[state]"`` indicators), plus ``state``
        (the child's non-reference states) for the categorical family.
    scale
        The gaussian residual variance (maximum likelihood, divisor n); 1 otherwise.
    child_states
        After a fit, the state labels of a categorical child (the labels of
        :func:`dpgm.predict_proba`'s columns).
    scale_by_state
        In a :class:`~dpgm.HybridNetwork` fitted by EM, a gaussian child of a latent
        variable has one variance per latent state (a ``DataArray`` over it).
    deviance
        The fitted model's deviance.

    Examples
    --------
    >>> glm = GLMConditional("smoker", ["age", "region"], family="logistic")
    >>> glm.family, glm.link, glm.is_fitted
    ('bernoulli', 'logit', False)
    """

    def __init__(self, child: str, parents: Sequence[str] = (), family: str = "gaussian", l2: float = 0.0,
                 *, coefficients: xr.DataArray | None = None, standard_errors: xr.DataArray | None = None,
                 scale: float = 1.0, deviance: float | None = None, scale_by_state: xr.DataArray | None = None,
                 child_states: Sequence[str] | None = None):
        if not isinstance(child, str):
            raise TypeError(f"child must be a variable name (str), got {child!r}")
        if isinstance(parents, str):
            parents = [parents]
        parents = tuple(parents)
        bad = [p for p in parents if not isinstance(p, str)]
        if bad:
            raise TypeError(f"parents must be variable names (str), got {bad!r}")
        if child in parents:
            raise ValueError(f"the child {child!r} is among its own parents {list(parents)}")
        if len(set(parents)) != len(parents):
            raise ValueError(f"parents repeat: {list(parents)!r}")
        if isinstance(l2, bool) or not isinstance(l2, int | float) or not math.isfinite(l2) or l2 < 0:
            raise ValueError(f"l2 must be a finite number >= 0, got {l2!r}")
        self.child = child
        self.parents: tuple[str, ...] = parents
        self.family = canonical_family(family)
        self.l2 = float(l2)
        self.coefficients = coefficients
        self.standard_errors = standard_errors
        self.scale = float(scale)
        self.deviance = deviance
        self.scale_by_state = scale_by_state
        self.child_states = None if child_states is None else tuple(map(str, child_states))

    @property
    def link(self) -> str:
        """The canonical link of the family."""
        return self.glm.link

    @property
    def glm(self) -> GLMFamily:
        """The family object (:mod:`dpgm.glm_families`): link, mean, variance, log-likelihood."""
        return glm_family(self.family)

    @property
    def variables(self) -> tuple[str, ...]:
        """Child and parents."""
        return (self.child, *self.parents)

    @property
    def is_fitted(self) -> bool:
        """Whether the conditional has coefficients."""
        return self.coefficients is not None

    @property
    def terms(self) -> tuple[str, ...]:
        """Labels of the fitted coefficients along ``term``."""
        if self.coefficients is None:
            raise ValueError("the terms come from the data's states: fit the conditional first")
        return tuple(map(str, self.coefficients.coords["term"].values))

    def n_free_parameters(self) -> int:
        """Coefficients, plus the residual variance of the gaussian family."""
        if self.coefficients is None:
            raise ValueError("the conditional has no coefficients yet: fit it with dpgm.fit(conditional, data)")
        return int(self.coefficients.size) + self.glm.has_scale

    def with_parameters(self, coefficients: xr.DataArray, standard_errors: xr.DataArray, *, scale: float = 1.0,
                        deviance: float | None = None,
                        scale_by_state: xr.DataArray | None = None,
                        child_states: Sequence[str] | None = None) -> GLMConditional:
        """A copy with the given coefficients (a model is a value: fitting returns a new one)."""
        return GLMConditional(self.child, self.parents, self.family, self.l2, coefficients=coefficients,
                              standard_errors=standard_errors, scale=scale, deviance=deviance,
                              scale_by_state=scale_by_state, child_states=child_states or self.child_states)

    def with_state_order(self, states: Mapping[str, Sequence[str]]) -> GLMConditional:
        """The same conditional with its tables over other variables' states (the latent variable of a
        :class:`~dpgm.HybridNetwork` fitted by EM: one coefficient vector per state) in the given order.

        The coefficients, standard errors and per-state variances are permuted by label
        (exact). Categorical parents and child keep their coding: their terms are
        labelled (``"region[south]"``), so a reference state needs no order.

        Raises
        ------
        ValueError
            The labels given for a variable are not a permutation of its states.
        """
        from dpgm.models.state_order import reorder_table

        wanted = {v: s for v, s in states.items() if v not in ("term", "state")}
        tables = [None if t is None else reorder_table(t, wanted)
                  for t in (self.coefficients, self.standard_errors, self.scale_by_state)]
        if all(a is b for a, b in zip(tables, (self.coefficients, self.standard_errors, self.scale_by_state),
                                      strict=True)):
            return self
        return GLMConditional(self.child, self.parents, self.family, self.l2, coefficients=tables[0],
                              standard_errors=tables[1], scale=self.scale, deviance=self.deviance,
                              scale_by_state=tables[2], child_states=self.child_states)

    def summary(self) -> str:
        """A coefficient table like statsmodels': term, coef, std err, z, P>|z|."""
        from scipy.stats import norm

        if self.coefficients is None or self.standard_errors is None:
            raise ValueError("the conditional has no coefficients yet: fit it with dpgm.fit(conditional, data)")
        head = (f"GLMConditional {self.child!r} | {list(self.parents)}: family {self.family}, "
                f"link {self.link}" + (f", l2 {self.l2:g}" if self.l2 else ""))
        lines = [head]
        if self.deviance is not None:
            lines.append(f"  deviance {self.deviance:.6f}" + (f"   scale {self.scale:.6g}"
                                                                if self.glm.has_scale else ""))
        coefficients, errors = self.coefficients, self.standard_errors
        blocks = ([(None, coefficients, errors)] if "state" not in coefficients.dims else
                  [(s, coefficients.sel(state=s), errors.sel(state=s)) for s in coefficients.coords["state"].values])
        width = max(12, *(len(t) for t in self.terms)) + 2
        rule = "=" * (width + 44)
        for state, coef, err in blocks:
            lines.append(rule)
            label = f"{self.child}={state}" if state is not None else self.child
            lines.append(f"{label:<{width}}{'coef':>11}{'std err':>11}{'z':>11}{'P>|z|':>11}")
            lines.append("-" * (width + 44))
            for term, b, s in zip(self.terms, coef.values, err.values, strict=True):
                z = b / s if s > 0 else math.nan
                p = 2 * norm.sf(abs(z)) if math.isfinite(z) else math.nan
                lines.append(f"{term:<{width}}{b:>11.4f}{s:>11.3f}{z:>11.3f}{p:>11.3f}")
        lines.append(rule)
        return "\n".join(lines)

    def save(self, path: str, *, mode: str = "w-") -> None:
        """Write the conditional to a Zarr group."""
        from dpgm.models.saving import save

        save(self, path, mode=mode)

    def _described_variables(self) -> dict[str, Any]:
        """Child and parents: the child's states where it is categorical, else continuous; a parent is
        continuous when it is a term itself, ``"categorical"`` when it has indicator terms (``parent[state]``:
        its reference state is not stored); unknown (``None``) before a fit."""
        if not self.is_fitted:
            return dict.fromkeys(self.variables)
        terms = self.terms
        variables: dict[str, Any] = {
            self.child: list(self.child_states) if self.child_states is not None else CONTINUOUS}
        for p in self.parents:
            variables[p] = CONTINUOUS if p in terms else CATEGORICAL if any(t.startswith(f"{p}[") for t in terms) \
                else None
        return variables

    def _describe(self) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """Variables, structure and whether fitted, for :func:`dpgm.models.description.describe`."""
        structure = {"child": self.child, "parents": list(self.parents), "family": self.family, "link": self.link,
                     "terms": list(self.terms) if self.is_fitted else None,
                     "edges": edge_lists([(p, self.child) for p in self.parents])}
        return self._described_variables(), structure, self.is_fitted

    def _to_store(self) -> dict[str, Any]:
        tables: dict[str, Any] = {}
        if self.coefficients is not None and self.standard_errors is not None:
            tables = {"coefficients": self.coefficients, "standard_errors": self.standard_errors}
        return tables | {"__attrs__": {"child": self.child, "parents": list(self.parents), "family": self.family,
                                       "l2": self.l2, "scale": self.scale, "deviance": self.deviance,
                                       "child_states": None if self.child_states is None else list(self.child_states)}}

    @classmethod
    def _from_store(cls, tables: dict[str, Any], attrs: dict[str, Any]) -> GLMConditional:
        model = cls(attrs["child"], attrs["parents"], attrs["family"], attrs["l2"])
        if "coefficients" not in tables:
            return model
        order = [d for d in ("term", "state") if d in tables["coefficients"].dims]
        return model.with_parameters(tables["coefficients"].transpose(*order),
                                     tables["standard_errors"].transpose(*order), scale=attrs["scale"],
                                     deviance=attrs["deviance"], child_states=attrs.get("child_states"))

    def __repr__(self) -> str:
        state = "fitted" if self.is_fitted else "structure"
        return f"GLMConditional({self.child!r} | {list(self.parents)}, family={self.family!r}, {state})"


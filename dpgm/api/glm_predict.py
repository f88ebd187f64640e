"""Predictions of a GLM child from its parents, for every row, optionally written back into the store."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from dpgm.data.schema import Schema, state_attrs
from dpgm.errors import DataError
from dpgm.models.glm import GLMConditional
from dpgm.models.hybrid import HybridNetwork
from dpgm.stats.irls import Design

if TYPE_CHECKING:
    import dask.array as da

__all__ = ["glm_prediction", "glm_probabilities"]


def fitted_conditional(model: GLMConditional | HybridNetwork, variable: str | None) -> GLMConditional:
    """The fitted GLM that predicts ``variable`` (a conditional, or a GLM node of a hybrid network)."""
    if isinstance(model, HybridNetwork):
        if variable not in model.families:
            raise ValueError(f"{variable!r} is not a GLM node of the network; GLM nodes: {list(model.glm_nodes)}")
        if variable not in model.conditionals:
            raise ValueError(f"the network is not fitted: fit it with dpgm.fit(network, data) before predicting "
                             f"{variable!r}")
        conditional = model.conditionals[variable]
        extra = [d for d in conditional.coefficients.dims if d not in ("term", "state")]
        if extra:
            raise ValueError(f"{variable!r} has the latent parent(s) {extra}: its prediction from the observed "
                             "parents alone is not implemented")
        return conditional
    if not isinstance(model, GLMConditional):
        raise TypeError(f"expected a GLMConditional or HybridNetwork, got {type(model).__name__}")
    if variable not in (None, model.child):
        raise ValueError(f"the conditional predicts {model.child!r}, not {variable!r}")
    if not model.is_fitted:
        raise ValueError("the conditional has no coefficients yet: fit it with dpgm.fit(conditional, data)")
    return model


def prediction_design(conditional: GLMConditional, schema: Schema) -> tuple[Design, np.ndarray]:
    """The design of the fitted conditional's parents on this data, and its coefficients for that design.

    Categorical parents are matched by label: on data whose labels are in another order
    than the fit's, the coefficients are re-expressed against the data's first label as
    reference (each indicator's coefficient less the new reference's, the difference
    added to the intercept), which predicts exactly what the fit predicts for each
    labelled row.

    Raises
    ------
    DataError
        A parent absent from the data, categorical here and continuous in the fit (or
        the reverse), or with other labels than the fit's.
    """
    absent = [p for p in conditional.parents if p not in schema]
    if absent:
        raise DataError(f"the parents {absent} of {conditional.child!r} are not in the data; "
                        f"known: {sorted(schema)}")
    fitted = list(conditional.terms)
    c = conditional.coefficients
    table = (c.transpose("term", "state") if "state" in c.dims else c.expand_dims("state", axis=1)).values
    row = {t: table[i].astype(np.float64) for i, t in enumerate(fitted)}
    parents, terms, rows, used = [], ["Intercept"], [row["Intercept"].copy()], {"Intercept"}
    for p in conditional.parents:
        if not schema[p].categorical:
            if p not in row:
                raise DataError(f"is continuous in the data but categorical in the fit of {conditional.child!r} "
                                f"(fitted terms {fitted})", variable=p)
            parents.append((p, 0))
            terms.append(p)
            rows.append(row[p])
            used.add(p)
            continue
        states = list(schema[p].states or ())
        named = [s for s in states if f"{p}[{s}]" in row]
        if len(named) != len(states) - 1:
            raise DataError(f"the data's states {states} are not the fitted ones: the fit of {conditional.child!r} "
                            f"has terms for {named} and one reference state (fitted terms {fitted})", variable=p)
        effect = {s: row[f"{p}[{s}]"] if s in named else np.zeros_like(rows[0]) for s in states}
        rows[0] = rows[0] + effect[states[0]]  # zero when the data's first label is the fit's reference
        for s in states[1:]:
            rows.append(effect[s] - effect[states[0]])
            terms.append(f"{p}[{s}]")
        parents.append((p, len(states)))
        used.update(f"{p}[{s}]" for s in named)
    unknown = [t for t in fitted if t not in used]
    if unknown:
        raise DataError(f"the fitted terms {unknown} have no counterpart in the data's parents (other states?); "
                        f"the data's terms: {terms}", variable=conditional.child)
    n_classes = c.sizes.get("state", 0) + 1 if conditional.glm.multiclass else 0
    coefficients = np.stack(rows).T.ravel()  # state-major: each class's coefficients over the terms
    return Design(conditional.child, conditional.family, tuple(parents), tuple(terms), None, n_classes), coefficients


def glm_probabilities(model: GLMConditional | HybridNetwork, data: xr.Dataset, variable: str | None
                      ) -> tuple[da.Array, list[str]]:
    """Lazy ``(row, state)`` probabilities of a categorical or bernoulli GLM child, and its state labels."""
    from dpgm.stats.glm_predict import glm_prediction_map

    conditional = fitted_conditional(model, variable)
    if not conditional.glm.has_states:
        raise TypeError(f"{conditional.child!r} is a {conditional.family} child: it has no state probabilities; "
                        "dpgm.predict gives its mean")
    design, coefficients = prediction_design(conditional, Schema.from_dataset(data))
    if not conditional.glm.multiclass:
        labels = list(conditional.child_states or ("0", "1"))
    else:
        later = [str(s) for s in conditional.coefficients.coords["state"].values]
        labels = list(conditional.child_states or ("reference", *later))
    return glm_prediction_map(data, design, coefficients, len(labels)), labels


def _most_probable(block: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(block[:, 0]), -1, np.argmax(np.nan_to_num(block, nan=-1.0), axis=1)).astype(np.int8)


def glm_prediction(model: GLMConditional | HybridNetwork, data: xr.Dataset, variable: str | None,
                   name: str | None) -> xr.DataArray:
    """A fitted GLM child's prediction for every row (:func:`dpgm.predict` of a GLM or hybrid network): the mean
    of a gaussian or poisson child (NaN where a parent is missing), the most probable state's code of a
    bernoulli or categorical child (``-1`` where a parent is missing), lazy, over ``row``."""
    from dpgm.stats.glm_predict import glm_prediction_map

    conditional = fitted_conditional(model, variable)
    child = conditional.child
    attrs: dict = {"predicted_from": list(conditional.parents)}
    if not conditional.glm.has_states:
        design, coefficients = prediction_design(conditional, Schema.from_dataset(data))
        values = glm_prediction_map(data, design, coefficients, 1)[:, 0]
    else:
        probabilities, labels = glm_probabilities(model, data, variable)
        values = probabilities.map_blocks(_most_probable, drop_axis=1, dtype=np.int8)
        attrs |= state_attrs(labels)
    return xr.DataArray(values, dims=("row",), name=name or f"{child}_predicted", attrs=attrs)

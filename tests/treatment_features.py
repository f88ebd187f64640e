"""Treatment-coded indicator features of a hierarchical log-linear model, as statsmodels' design has them
(shared by the standard-error tests)."""

from __future__ import annotations

import itertools

import numpy as np
import xarray as xr


def treatment_coded_features(margins: list[list[str]], states: dict[str, list[str]]) -> dict[str, xr.DataArray]:
    """The hierarchical model with the given margins as identified indicator features: each margin's terms (its
    nonempty subsets no earlier margin holds), one indicator per cell of a term with every variable past its
    first state (treatment coding, as statsmodels' design of the same model)."""
    features, seen = {}, []
    for margin in margins:
        for size in range(1, len(margin) + 1):
            for term in itertools.combinations(margin, size):
                if any(set(term) <= set(m) for m in seen):
                    continue
                for cell in itertools.product(*(states[v][1:] for v in term)):
                    table = xr.DataArray(np.zeros([len(states[v]) for v in term]), dims=term,
                                         coords={v: states[v] for v in term})
                    table.loc[dict(zip(term, cell, strict=True))] = 1.0
                    features[":".join(f"{v}={x}" for v, x in zip(term, cell, strict=True))] = table
        seen.append(margin)
    return features

"""Using a fitted hidden Markov model: each step's state posteriors and each sequence's most probable path.

Both are per-row maps (one task per chunk, the parameters entering the graph once:
:func:`dpgm.stats.rows.row_map`) over the model's (``row``, ``time``) variables,
each step's missing values summed out. :func:`dpgm.predict_proba` with the hidden
variable gives ``(row, time, state)`` posteriors (forward-backward); :func:`dpgm.predict`
the Viterbi path ``(row, time)``, codes of the hidden states (``-1`` after a
sequence's last observed step). With ``write=True`` either is written into the
store as a new variable.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import xarray as xr

from dpgm.api.hmm import restart_arrays
from dpgm.api.labels import align
from dpgm.data.schema import Schema
from dpgm.errors import DataError
from dpgm.models.hmm import HiddenMarkovModel

__all__ = ["state_paths", "state_posteriors"]


def _prepared(model: HiddenMarkovModel, data: xr.Dataset, variable: str | None) -> tuple[HiddenMarkovModel, int]:
    if not isinstance(model, HiddenMarkovModel) or not model.is_fitted:
        raise TypeError("needs a fitted HiddenMarkovModel (its continuous emissions have no parameters)")
    if variable not in (None, model.hidden):
        raise ValueError(f"a hidden Markov model predicts its hidden variable {model.hidden!r}, not {variable!r}")
    schema = Schema.from_dataset(data)
    for v in model.variables:
        if v not in data.data_vars:
            raise DataError(f"the sequence variable {v!r} is not in the data; known: {sorted(schema)}", variable=v)
        if data[v].dims != ("row", "time"):
            raise DataError(f"must have dims ('row', 'time'), has {data[v].dims!r}", variable=v)
    model, _ = align(model, data, states=schema.states, variables=list(model.categorical_variables))
    return model, int(data.sizes["time"])


def state_posteriors(model: HiddenMarkovModel, data: xr.Dataset, variable: str | None) -> tuple[Any, list[str],
                                                                                                   tuple[str, ...]]:
    """Lazy ``(row, time, state)`` posteriors of the hidden state at every step, its labels and the dims."""
    from dpgm.inference.chain import forward_backward
    from dpgm.stats.rows import row_map
    from dpgm.stats.sequences import posterior_block

    model, length = _prepared(model, data, variable)
    n = model.n_states
    block = functools.partial(posterior_block, forward_backward=forward_backward)
    values = row_map(data, list(model.variables), block, length * n, shared=restart_arrays(model))
    return values.reshape(values.shape[0], length, n), list(model.labels), ("row", "time", model.hidden)


def state_paths(model: HiddenMarkovModel, data: xr.Dataset, variable: str | None, name: str | None
                ) -> xr.DataArray:
    """Lazy ``(row, time)`` Viterbi paths: codes of the hidden states (``-1`` past a sequence's end), labelled."""
    from dpgm.data.schema import state_attrs
    from dpgm.inference.chain import viterbi
    from dpgm.stats.rows import row_map
    from dpgm.stats.sequences import path_block

    model, length = _prepared(model, data, variable)
    block = functools.partial(path_block, viterbi=viterbi)
    dtype = np.int16 if model.n_states > 127 else np.int8
    values = row_map(data, list(model.variables), block, length, shared=restart_arrays(model), dtype=dtype)
    return xr.DataArray(values, dims=("row", "time"), name=name or f"{model.hidden}_path",
                        attrs={**state_attrs(list(model.labels)), "decoded_from": list(model.variables)})

"""Using a fitted hidden Markov model: each step's state posteriors and each sequence's most probable path.

A model fitted on the long layout (one row per step, ``sequence=``) reads the same layout: its
posteriors are ``(row, state)`` and its paths ``(row,)``, from the scan over chunk boundaries
(:func:`dpgm.stats.long_sequences.long_row_map`: one pass, then one map task per chunk).

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
    wanted = ("row",) if model.sequence is not None else ("row", "time")
    for v in [*model.variables, *([model.sequence] if model.sequence else [])]:
        if v not in data.data_vars:
            raise DataError(f"the sequence variable {v!r} is not in the data; known: {sorted(schema)}", variable=v)
        if data[v].dims != wanted:
            raise DataError(f"must have dims {wanted!r} (the layout the model was fitted on), has "
                            f"{data[v].dims!r}", variable=v)
    model, _ = align(model, data, states=schema.states, variables=list(model.categorical_variables))
    return model, int(data.sizes.get("time", 1))


def _long_map(model: HiddenMarkovModel, data: xr.Dataset, segments: Any) -> Any:
    """The long layout's per-row posteriors or path states (:func:`dpgm.stats.long_sequences.long_row_map`)."""
    from dpgm.api.hmm import long_log_emission
    from dpgm.stats.long_sequences import long_row_map
    from dpgm.stats.source import DataSource

    return long_row_map(DataSource.of(data), list(model.variables), model.sequence, restart_arrays(model),
                        long_log_emission, segments=segments)


def state_posteriors(model: HiddenMarkovModel, data: xr.Dataset, variable: str | None) -> tuple[Any, list[str],
                                                                                                   tuple[str, ...]]:
    """Lazy ``(row, time, state)`` posteriors of the hidden state at every step, its labels and the dims."""
    from dpgm.inference.chain import forward_backward
    from dpgm.stats.rows import row_map
    from dpgm.stats.sequences import posterior_block

    model, length = _prepared(model, data, variable)
    n = model.n_states
    if model.sequence is not None:  # one row per step: (row, state)
        from dpgm.inference import FORWARD_BACKWARD

        return _long_map(model, data, FORWARD_BACKWARD), list(model.labels), ("row", model.hidden)
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
    dtype = np.int16 if model.n_states > 127 else np.int8
    if model.sequence is not None:  # one row per step: (row,)
        from dpgm.inference import VITERBI

        values = _long_map(model, data, VITERBI)[:, 0].astype(dtype)
        dims: tuple[str, ...] = ("row",)
    else:
        block = functools.partial(path_block, viterbi=viterbi)
        values = row_map(data, list(model.variables), block, length, shared=restart_arrays(model), dtype=dtype)
        dims = ("row", "time")
    return xr.DataArray(values, dims=dims, name=name or f"{model.hidden}_path",
                        attrs={**state_attrs(list(model.labels)), "decoded_from": list(model.variables)})

"""Options and checkpoint fingerprints, read from the kind registry (:mod:`dpgm.api.kinds`).

:func:`check_fit_options` validates a fit's method and options once, before any
pass, against the schema its kind declares; :func:`check_checkpoint` records or
compares the fingerprint of a checkpointed fit (data, model kind and structure,
method, options).
"""

from __future__ import annotations

from collections.abc import Iterable

import xarray as xr

from dpgm.api.kinds import kind_named, kind_of, kinds

__all__ = ["ALWAYS_PASSED", "RESUMABLE_OPTIONS", "check_checkpoint", "check_fit_options", "check_sizes",
           "data_fingerprint", "methods_of", "model_fingerprint", "model_kind", "options_of"]

# options that do not change what a fit converges to: a checkpoint may be resumed with other values
RESUMABLE_OPTIONS = ("tol", "max_iter", "loglik_tol", "checkpoint", "resume", "persist", "accelerate", "incremental",
                     "prune_restarts")
# options every call of dpgm.fit passes (its keyword defaults): checked for their values, whatever the method
ALWAYS_PASSED = ("tol", "max_iter")


def model_kind(model) -> str:
    """The name of ``model``'s kind in the registry (:func:`dpgm.api.kinds.kind_of`)."""
    return kind_of(model).name


def methods_of(kind: str) -> list[str]:
    """The methods a model kind is fitted by."""
    return list(kind_named(kind).methods)


def options_of(kind: str, method: str) -> list[str]:
    """The options of one method of one model kind (``[]`` for an unknown pair)."""
    try:
        return sorted(kind_named(kind).methods[method].options)
    except KeyError:
        return []


def check_fit_options(model, method: str | None, options: dict, *, given: Iterable[str] | None = None) -> str:
    """Check ``dpgm.fit``'s method and options against the table for the model's kind, before any pass.

    Parameters
    ----------
    model
        The model to fit (its class selects the table).
    method
        The method, or None for the kind's default.
    options
        Every option, ``tol`` and ``max_iter`` included (their values are checked
        whatever the method).
    given
        The names the caller set explicitly (default: every name in ``options`` but
        ``tol`` and ``max_iter``): each must be an option of the method.

    Returns
    -------
    str
        The method (the kind's default for ``None``).

    Raises
    ------
    ConfigError
        An unknown method, an option that does not apply to the method, or a value
        out of range, naming the option and listing the valid ones.
    ConfigTypeError
        A value of the wrong type, naming the option.
    """
    from dpgm.errors import ConfigError, ConfigTypeError

    kind = kind_of(model)
    if method is not None and not isinstance(method, str):
        raise ConfigTypeError(f"method must be a string, got {method!r}")
    method = method or kind.default_method
    if method not in kind.methods:
        raise ConfigError(f"unknown method {method!r} for a {kind.name}; expected one of {list(kind.methods)}")
    constraints = kind.methods[method].options
    given = [k for k in options if k not in ALWAYS_PASSED] if given is None else list(given)
    for name in given:
        if name not in constraints:
            elsewhere = [m for m, other in kind.methods.items() if name in other.options]
            if elsewhere:
                others = f" (or {', '.join(map(repr, elsewhere[1:]))})" if len(elsewhere) > 1 else ""
                where = f"{name} applies to method={elsewhere[0]!r}{others}, not {method!r}"
            else:
                where = f"unknown option {name!r} for method {method!r}"
            raise ConfigError(f"{where} of a {kind.name}; the options of {method!r}: {sorted(constraints)}")
    every = {**{k: c for other in kinds() for m in other.methods.values() for k, c in m.options.items()
                if k in ALWAYS_PASSED}, **constraints}
    for name, value in options.items():
        if name in every:
            every[name].check(name, value)
    if options.get("init") == "model" and options.get("n_init", 1) != 1:
        raise ConfigError(f"n_init must be 1 with init='model' (one start: the given parameters), "
                          f"got {options['n_init']!r}")
    return method


# ---------------------------------------------------------------- checkpoint fingerprints


def _jsonable(value):
    """A JSON-able rendering of an option value (arrays and labelled tables by their contents)."""
    import numpy as np

    if isinstance(value, xr.DataArray):
        return {"dims": list(map(str, value.dims)), "values": np.asarray(value.values).tolist()}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def model_fingerprint(model, method: str, options: dict) -> dict:
    """What identifies a fit apart from its data: model kind, variables, states, structure, method, options.

    The stopping rule and where checkpoints go (:data:`RESUMABLE_OPTIONS`) are left
    out: a resumed fit may run longer or to a tighter tolerance.
    """
    kind = kind_of(model)
    states = getattr(model, "states", {}) or {}
    return {
        "kind": kind.name,
        "method": method,
        "variables": list(getattr(model, "variables", states)),
        "states": {str(v): list(map(str, s)) for v, s in states.items()},
        "structure": kind.structure(model),
        "options": {k: _jsonable(v) for k, v in sorted(options.items()) if k not in RESUMABLE_OPTIONS},
    }


def data_fingerprint(data) -> dict:
    """The data part of a checkpoint's fingerprint (a store's path, rows, chunking, schema; a table's contents).

    ``data``: a dataset, a table or a fit's :class:`~dpgm.stats.source.DataSource` (its schema is not read again).
    """
    import hashlib

    import numpy as np

    from dpgm.stats.source import DataSource

    schema = None
    if isinstance(data, DataSource):
        data, schema = data.data, data.schema
    if isinstance(data, xr.DataArray):
        values = np.ascontiguousarray(data.values)
        return {"table": {"dims": list(map(str, data.dims)), "shape": list(values.shape),
                          "sha256": hashlib.sha256(values.tobytes()).hexdigest()}}
    from dpgm.data.integrity import dataset_fingerprint

    return dataset_fingerprint(data, schema=schema)


def check_checkpoint(model, data, method: str, options: dict, extra: dict | None = None) -> None:
    """Refuse to resume a checkpoint of other data or another model; record the fingerprint of a new one.

    With ``resume=`` the checkpoint's fingerprint must equal this fit's (data, model
    and the parts in ``extra``, e.g. the CLI's specification); with ``checkpoint=``
    the fingerprint is recorded for the iterations to come. Cheap: metadata only.

    Raises
    ------
    CheckpointMismatch
        The checkpoint was written for other data, another model or other options.
    FileNotFoundError
        ``resume=`` names a folder without a complete checkpoint.
    """
    import warnings

    from dpgm.errors import DpgmWarning
    from dpgm.io.checkpoint import check_fingerprint, set_fingerprint

    checkpoint, resume = options.get("checkpoint"), options.get("resume")
    if checkpoint is None and resume is None:
        return
    # compared in this order: the first difference named is the most telling one
    fingerprint = {"data": data_fingerprint(data), **(extra or {}), "model": model_fingerprint(model, method, options)}
    if resume is not None and not check_fingerprint(resume, fingerprint):
        warnings.warn(f"the checkpoint {str(resume)!r} has no fingerprint (written by an earlier dpgm): cannot "
                      "check it was written for this data and model", DpgmWarning, stacklevel=3)
    if checkpoint is not None:
        set_fingerprint(checkpoint, fingerprint)


def check_sizes(model, source, method: str, options: dict) -> None:
    """Refuse, before any pass or allocation of the fit, hidden and latent variables whose tables or per-chunk
    E-step arrays cannot be held (the method's :attr:`~dpgm.api.kinds.Method.check_sizes`): an HMM's hidden
    states, the latent variables of a Bayesian network (latent class models), a hybrid network's latent root,
    a Gaussian mixture's components x dimensions.

    Raises
    ------
    TableTooLarge
        (a :class:`~dpgm.errors.ConfigError`, CLI exit 78) naming the variable, its states and the cells.
    """
    check = kind_of(model).methods[method].check_sizes
    if check is None:
        return
    restarts = int(options.get("n_init", 1)) if isinstance(options.get("n_init", 1), int) else 1
    check(model, source, restarts, source.chunk_rows)

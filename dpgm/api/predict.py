"""Per-row posteriors of one variable, optionally written back into the store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import xarray as xr

from dpgm.api.labels import align
from dpgm.models.bayesian_network import BayesianNetwork
from dpgm.models.log_linear import LogLinearModel
from dpgm.models.markov import MarkovNetwork
from dpgm.models.mixture import GaussianMixture
from dpgm.stats.source import DataSource

if TYPE_CHECKING:
    from distributed import Client


def predict_proba(
    model: BayesianNetwork | MarkovNetwork | LogLinearModel | GaussianMixture,
    data: xr.Dataset,
    variable: str,
    *,
    write: bool = False,
    name: str | None = None,
    client: Client | None = None,
    progress: bool | None = None,
) -> xr.DataArray:
    """Posterior probabilities of one variable for every row, given the row's observed values.

    Parameters
    ----------
    model
        A fitted Bayesian network (e.g. a latent class model after EM), Markov
        network or log-linear model (its structural zeros applied), a fitted
        bernoulli or categorical :class:`~dpgm.GLMConditional` (or such a GLM node of
        a fitted :class:`~dpgm.HybridNetwork`: the child's state probabilities
        given each row's parents; NaN where a parent is missing), or a fitted
        :class:`~dpgm.GaussianMixture` (``variable="component"``: each row's component
        posteriors given its observed coordinates; NaN coordinates are marginalised), or a
        fitted :class:`~dpgm.HiddenMarkovModel` (``variable`` its hidden variable: every
        step's state posteriors given the whole sequence, forward-backward; ``(row, time,
        state)``).
    data
        The dataset; model variables absent from it (and ``-1`` values) are summed out.
    variable
        The variable whose posterior is wanted (typically the latent class).
    write
        Also write the result into the dataset's Zarr store as a new variable
        ``name`` (default ``"<variable>_proba"``), by a distributed pass.
    name
        Name of the written variable.
    client
        Dask client for the write.
    progress
        Show a progress bar of the write. None (default): a bar where stderr is a
        terminal or in Jupyter, nothing in a script.

    Returns
    -------
    xarray.DataArray
        Lazy ``(row, <variable>)`` probabilities (an HMM's ``(row, time, <variable>)``),
        labelled with the variable's states.

    Examples
    --------
    >>> import dpgm
    >>> truth = dpgm.load_network("asia")
    >>> rows = dpgm.sample_bayesian_network(truth, 5, seed=0).drop_vars("tub")
    >>> dpgm.predict_proba(truth, rows, "tub").shape
    (5, 2)
    """
    from dpgm.api.kinds import kind_of, kinds

    kind = kind_of(model)
    if kind.predict_proba is None:
        able = [k.name for k in kinds() if k.predict_proba is not None]
        raise TypeError(f"predict_proba needs a fitted model of one of {able}, got a {kind.name}")
    values, labels, *dims = kind.predict_proba(model, data, variable)
    dims = tuple(dims[0]) if dims else ("row", variable)  # an HMM's: (row, time, state)
    result = xr.DataArray(values, dims=dims, coords={variable: labels}, name=name or f"{variable}_proba")
    if write:
        new = xr.Dataset({result.name: result.drop_vars(variable).rename({variable: f"{variable}_state"})})
        new[result.name].attrs.update({"posterior_of": variable, "labels": labels})
        write_back(new, data, client, progress)
    return result


def predict(
    model: Any,
    data: xr.Dataset,
    variable: str | None = None,
    *,
    write: bool = False,
    name: str | None = None,
    client: Client | None = None,
    progress: bool | None = None,
) -> xr.DataArray:
    """The prediction for every row: a fitted GLM child's given the row's parents, or a hidden Markov model's
    most probable state path of each sequence (Viterbi).

    Parameters
    ----------
    model
        A fitted :class:`~dpgm.GLMConditional`, a fitted :class:`~dpgm.HybridNetwork`
        with ``variable`` one of its GLM nodes, or a fitted :class:`~dpgm.HiddenMarkovModel`.
    data
        Rows holding the parents (the child itself is not read); an HMM's sequences.
    variable
        The child (default: the conditional's); an HMM's hidden variable (the default).
    write
        Also write the prediction into the dataset's Zarr store as ``name``
        (default ``"<variable>_predicted"``; an HMM's ``"<hidden>_path"``), by a distributed
        pass.
    name
        Name of the result and of the written variable.
    client
        Dask client for the write.
    progress
        Show a progress bar of the write. None (default): a bar where stderr is a
        terminal or in Jupyter, nothing in a script.

    Returns
    -------
    xarray.DataArray
        Lazy, over ``row``: the mean ``E[child | parents]`` of a gaussian or poisson
        child (NaN where a parent is missing); the most probable state's code of a
        bernoulli or categorical child (``-1`` where a parent is missing), labelled
        with the child's states, so a written prediction is a categorical variable. An
        HMM's: ``(row, time)``, each step's state on the sequence's most probable path
        (codes labelled with the hidden states; ``-1`` past a sequence's last observed
        step). :func:`dpgm.predict_proba` gives the state probabilities.

    Examples
    --------
    >>> import numpy as np, pandas as pd, dpgm
    >>> rows = pd.DataFrame({"x": np.arange(6.0), "y": 2.0 * np.arange(6.0) + 1})
    >>> glm = dpgm.fit(dpgm.GLMConditional("y", ["x"]), dpgm.from_pandas(rows)).model
    >>> np.round(dpgm.predict(glm, dpgm.from_pandas(rows.head(2))).values, 6)
    array([1., 3.])
    """
    from dpgm.api.kinds import kind_of, kinds

    kind = kind_of(model)
    if kind.predict is None:
        raise TypeError(f"predict needs a fitted model of one of {[k.name for k in kinds() if k.predict]}, got a "
                        f"{type(model).__name__}; dpgm.predict_proba gives a discrete model's posteriors")
    result = kind.predict(model, data, variable, name)
    if write:
        write_back(xr.Dataset({result.name: result}), data, client, progress)
    return result


def write_back(new: xr.Dataset, data: xr.Dataset, client: Client | None, progress: bool | None = False) -> None:
    """Write lazily computed per-row variables into the store ``data`` was opened from, in one pass."""
    from dpgm.cluster import compute

    compute(store_writer(new, data), client=client, progress=progress)


def store_writer(new: xr.Dataset, data: xr.Dataset):
    """The lazy write of per-row variables into the store ``data`` was opened from (run it with one compute)."""
    from dpgm.data.io import add_variables

    store = data.encoding.get("dpgm_store")
    if store is None:
        raise ValueError("write=True needs a dataset opened with dpgm.open_dataset (it writes into that store)")
    return add_variables(new, store.path, overwrite=True, storage_options=store.storage_options, compute=False)


def discrete_posteriors(model, data: xr.Dataset, variable: str) -> tuple:
    """Lazy posteriors of one variable of a discrete model, and its state labels."""
    from dpgm.inference.batched import BatchedTree
    from dpgm.inference.junction_tree import FactorModel
    from dpgm.stats.posterior import posterior_map

    if not isinstance(model, FactorModel):
        raise TypeError(f"predict_proba needs a BayesianNetwork, MarkovNetwork, LogLinearModel or GaussianMixture, "
                        f"got {type(model).__name__}")
    if isinstance(model, BayesianNetwork) and not model.is_parameterized:
        raise TypeError("predict_proba needs a parameterized BayesianNetwork (a structure has no tables)")
    if variable not in model.variables:
        raise ValueError(f"{variable!r} is not a variable of the model; variables: {list(model.variables)}")
    source = DataSource.of(data)  # the schema, read once
    if source.is_table:
        raise TypeError(f"predict_proba reads rows: expected an xarray.Dataset, got {type(data).__name__}")
    states = source.states
    observed = [v for v in model.variables if v in states and v != variable]
    model, _ = align(model, data, states=states, variables=observed)  # ``variable`` keeps the model's order
    factors = model.factors()
    tree = BatchedTree(model.variables, {v: len(model.states[v]) for v in model.variables}, factors)
    values = posterior_map(source, tree, observed, variable, len(model.states[variable]))
    return values, list(model.states[variable])

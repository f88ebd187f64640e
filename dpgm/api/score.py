"""``dpgm.score``: each row's log-likelihood under a fitted model, with its total and mean, in one pass."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import xarray as xr

from dpgm.api.sources import open_source
from dpgm.data.schema import WEIGHT

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["SUMMARY", "score"]

SUMMARY = ("total", "mean_per_row", "rows")
"""The scalar coordinates that come with the scores: ``sum w * loglik``, that over ``sum w``, and ``sum w``."""


def score(
    model: Any,
    data: xr.Dataset | str,
    *,
    client: Client | None = None,
    write: bool = False,
    name: str = "loglik",
    progress: bool | None = None,
) -> xr.DataArray:
    """Each row's log-likelihood under a fitted model, what is not observed summed out.

    Parameters
    ----------
    model
        A fitted model of any kind (:func:`dpgm.api.kinds.kinds`):

        * Bayesian network (a latent class model included), Markov network, log-linear
          model: ``log P(observed values of the row)``; ``-1`` values and model
          variables absent from the data (latent ones) are summed out by the batched
          junction tree, the normaliser ``log Z`` of an undirected model subtracted;
        * hidden Markov model: one value per sequence (a row of the ``(row, time)``
          variable), by the forward algorithm; missing steps (``-1``) summed out. A
          model fitted on the long layout (one row per step, ``sequence=``) reads that
          layout and gives one value per sequence over the sequence-id variable,
          labelled by the ids, in row order; a sequence crossing chunks is scored from
          the scan over the chunk boundaries (the passes of the long E step);
        * Gaussian graphical model, linear-Gaussian network, Gaussian mixture: the log
          density of the row's observed coordinates (the marginal of the joint normal,
          or log-sum-exp over the components of each one's marginal); a row with no
          coordinate observed scores 0;
        * GLM conditional: ``log p(child | parents)``; hybrid network: the sum over its
          nodes of ``log P(node | parents)``, log-sum-exp over the states of a latent
          root. A node whose value is missing is summed out where no node with an
          observed value has it (or another missing node) as parent; otherwise the
          row's score is NaN (a GLM conditional: a missing parent of an observed child).
    data
        A dataset over ``row`` (opened with :func:`dpgm.open_dataset`, or in memory), or the
        path of a Zarr store. Its ``weight`` variable, if any, weighs the total.
    client
        Dask client of the pass(es).
    write
        Also write the scores into the dataset's Zarr store as the variable ``name`` (the
        manifest updated, one writer at a time, as :func:`dpgm.predict_proba` writes); the
        same pass computes the total, so the result's summary is computed already.
    name
        Name of the result (and of the written variable).
    progress
        Show a progress bar of the write. None (default): a bar where stderr is a terminal
        or in Jupyter, nothing in a script.

    Returns
    -------
    xarray.DataArray
        Lazy, over ``row`` (the long layout's HMM: over its sequence-id variable, the
        ``rows`` being sequences): one pass computes it. Its scalar coordinates (lazy too, computed
        with the values by ``.compute()``, or alone by ``float(result.total)``) are the
        ``total`` log-likelihood ``sum w * loglik`` (weight 1 without a ``weight`` variable),
        the ``mean_per_row`` (``total / rows``) and the ``rows`` (``sum w``). ``attrs`` say
        which model kind scored the rows and which model variables were summed out.

    Raises
    ------
    DataError
        A model variable absent from the data (where it is not latent), categorical where the
        model needs continuous values or the reverse, labels that differ from the model's; a
        code out of range, naming the chunk.
    TypeError
        A model without parameters, or a table of counts (score reads rows).

    Examples
    --------
    >>> import dpgm
    >>> truth = dpgm.load_network("asia")
    >>> rows = dpgm.sample_bayesian_network(truth, 4, seed=0)
    >>> scores = dpgm.score(truth, rows)
    >>> scores.shape, bool(abs(float(scores.total) - float(scores.sum())) < 1e-9)
    ((4,), True)
    """
    from dpgm.api.kinds import kind_of
    from dpgm.stats.scores import score_summary

    data = open_source(data, client=client)
    if isinstance(data, xr.DataArray):
        raise TypeError("score reads rows: expected an xarray.Dataset, got a table of counts (a DataArray); "
                        "dpgm.from_table makes weighted rows of it")
    kind = kind_of(model)
    values, attrs = kind.score(model, data)
    dims, labels, what = ("row",), {}, "row"
    if isinstance(values, xr.DataArray):  # one value per sequence of the long layout, labelled
        dims, labels, what = values.dims, dict(values.coords), "sequence"
        values = values.data
        if write:
            raise ValueError("write=True writes one score per row; the long layout's scores are one per sequence "
                             f"(over {dims[0]!r}): save them with result.to_netcdf or .to_zarr")
    weights = data[WEIGHT].data if WEIGHT in data.data_vars else None
    summary = score_summary(values, weights)
    total, rows = summary[0], summary[1]
    coords = {**labels, "total": total, "mean_per_row": total / rows, "rows": rows}
    result = xr.DataArray(values, dims=dims, name=name, coords=coords,
                          attrs={"long_name": f"log-likelihood of the {what}", "model": kind.name, **attrs})
    if write:
        result = _write(result, data, client, progress)
    return result


def _write(result: xr.DataArray, data: xr.Dataset, client: Client | None, progress: bool | None) -> xr.DataArray:
    """Write the scores into ``data``'s store and compute their summary in the same pass."""
    from dpgm.api.predict import store_writer
    from dpgm.cluster import compute
    from dpgm.stats.scores import together

    values = result.drop_vars(list(SUMMARY))
    writer = store_writer(xr.Dataset({result.name: values}), data)
    _, total, mean, rows = compute(together(writer, *(result.coords[c].data for c in SUMMARY)),
                                   client=client, progress=progress)
    return result.assign_coords(total=float(total), mean_per_row=float(mean), rows=float(rows))

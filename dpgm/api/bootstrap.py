"""``dpgm.bootstrap``: the Poisson bootstrap of any fit, every replicate in the same passes.

Replicate ``b`` is the model's own fit on the data weighted by ``weight * w[:, b]``, where
``w[i, b]`` is a Poisson(1) draw from a hash of row ``i``'s position, ``b`` and
``random_state`` (:mod:`dpgm.stats.resample`), computed on the worker that reads the row.
All replicates run side by side (:class:`~dpgm.api.shared_passes.SharedPasses`) with the
fit on the data itself, their passes merged: a complete-data kind's ``B + 1`` fits take
**one** pass together, whatever ``B``. Where the fit is in closed form on count tables (a
Bayesian network's ``mle`` and ``bayes``), the replicates are not fitted one by one: their
stacked (cells x ``B``) tables from that pass are normalised together, in a few NumPy
operations per table. EM replicates start from the fit on the data
(``init="model"``, where the method takes it): they take a few passes each, advance
together, and their components or states keep the estimate's labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr

from dpgm.algorithms.result import FitResult
from dpgm.api.sources import open_source
from dpgm.data.schema import WEIGHT

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["BootstrapResult", "bootstrap"]


@dataclass
class BootstrapResult:
    """What :func:`dpgm.bootstrap` returns.

    Attributes
    ----------
    estimate
        The fit on the data itself (its own weights), run in the same passes.
    replicates
        Every parameter of every replicate's fit (:func:`dpgm.models.parameters.parameter_tables`),
        over ``replicate`` first, with ``loglik``, ``converged`` and ``passes`` per replicate.
    passes
        Passes over the data (all fits together; in memory, where each fit's passes run on their own,
        their sum).
    random_state
        Seed of the Poisson weights.
    """

    estimate: FitResult
    replicates: xr.Dataset
    passes: int
    random_state: int
    parameters: tuple[str, ...] = field(default=())

    @property
    def n_replicates(self) -> int:
        """Number of replicates ``B``."""
        return int(self.replicates.sizes["replicate"])

    @property
    def standard_errors(self) -> xr.Dataset:
        """Bootstrap standard errors: each parameter's standard deviation over the replicates (``ddof=1``)."""
        return self.replicates[list(self.parameters)].std("replicate", ddof=1)

    def confidence_interval(self, level: float = 0.95) -> xr.Dataset:
        """Percentile intervals: each parameter's ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles over
        the replicates, over ``bound`` (``lower``, ``upper``).

        Raises
        ------
        ConfigError
            ``level`` not strictly between 0 and 1.
        """
        from dpgm.errors import ConfigError

        if not isinstance(level, float | int) or isinstance(level, bool) or not 0 < level < 1:
            raise ConfigError(f"level must be a number strictly between 0 and 1, got {level!r}")
        tail = (1 - level) / 2
        bounds = self.replicates[list(self.parameters)].quantile([tail, 1 - tail], dim="replicate")
        return bounds.rename(quantile="bound").assign_coords(bound=["lower", "upper"]).assign_attrs(level=level)

    def summary(self, digits: int = 4, max_entries: int | None = None) -> str:
        """Each parameter's estimate, bootstrap standard error and interval (95 %), one line per entry; past
        ``max_entries`` entries, a last line says how many more there are."""
        from dpgm.models.parameters import parameter_tables

        estimate = parameter_tables(self.estimate.model)
        errors, interval = self.standard_errors, self.confidence_interval(0.95)
        lines = [f"{type(self.estimate.model).__name__}: {self.n_replicates} Poisson bootstrap replicates, "
                 f"{self.passes} pass(es) over {self.estimate.n_rows:,.0f} rows",
                 f"  {'parameter':<40} {'estimate':>12} {'s.e.':>12} {'2.5 %':>12} {'97.5 %':>12}"]
        total = 0
        for name in self.parameters:
            table = estimate[name]
            error = errors[name].transpose(*table.dims).values
            bounds = interval[name].transpose("bound", *table.dims).values
            for index in np.ndindex(table.shape):
                total += 1
                if max_entries is not None and total > max_entries:
                    continue
                where = [table[d].values[i] if d in table.coords else i for d, i in zip(table.dims, index,
                                                                                         strict=True)]
                label = name + (f"[{', '.join(str(v) for v in where)}]" if where else "")
                lines.append(f"  {label:<40} {float(table.values[index]):>12.{digits}g} "
                             f"{float(error[index]):>12.{digits}g} {float(bounds[(0, *index)]):>12.{digits}g} "
                             f"{float(bounds[(1, *index)]):>12.{digits}g}")
        if max_entries is not None and total > max_entries:
            lines.append(f"  ... {total - max_entries:,} more of the {total:,} parameter entries are not shown")
        return "\n".join(lines)


def _replicate_data(data: xr.Dataset, b: int, random_state: int, chunks: Any = None) -> xr.Dataset:
    """``data`` (its rows in ``chunks``) with each row's weight times its Poisson(1) weight in replicate ``b``."""
    from dpgm.stats.resample import replicate_weights

    draws = replicate_weights(int(data.sizes["row"]), chunks, b, random_state)
    weight = draws * data[WEIGHT].data if WEIGHT in data.data_vars else draws
    return data.assign({WEIGHT: xr.DataArray(weight.astype(np.float64), dims=("row",))})


def _replicate_source(data: xr.Dataset, b: int, replicates: int, random_state: int, chunks: Any,
                      stored: xr.Dataset | None = None) -> Any:
    """Replicate ``b``'s data source: its passes read ``data`` weighted by the replicate's Poisson weights, and
    its count tables come with every other replicate's from one kernel per chunk."""
    from dpgm.stats.source import DataSource, Resampling

    source = DataSource.of(_replicate_data(data, b, random_state, chunks))
    return dataclasses.replace(source, resampling=Resampling(data, b, replicates, random_state, stored))


def bootstrap(
    model: Any,
    data: xr.Dataset | str,
    *,
    replicates: int = 200,
    random_state: int = 0,
    method: str | None = None,
    options: Mapping[str, Any] | None = None,
    client: Client | None = None,
    progress: bool | None = None,
) -> BootstrapResult:
    """The Poisson bootstrap of ``dpgm.fit(model, data, method, **options)``: ``replicates`` refits in shared passes.

    Parameters
    ----------
    model
        A model of any kind, as for :func:`dpgm.fit`.
    data
        A dataset over ``row`` (opened with :func:`dpgm.open_dataset`, or in memory), or a Zarr
        store's path. Its ``weight`` variable, if any, multiplies the Poisson weights.
    replicates
        Number of replicates ``B`` (at least 2).
    random_state
        Seed of the Poisson weights (:func:`dpgm.stats.resample.poisson_weights`): replicate ``b``
        weighs row ``i`` the same whatever the chunking and the workers.
    method
        The fit method (None: the kind's default).
    client
        Dask client of the passes.
    progress
        Show each pass's progress. None (default): a bar where stderr is a terminal or in
        Jupyter, nothing in a script.
    options
        Options of :func:`dpgm.fit` (``tol``, ``max_iter`` and the method's, e.g. an EM fit's own
        ``random_state``), as a dict. EM replicates start from the fit on the data
        (``init="model"``, one start) where the method takes ``init``.

    Returns
    -------
    BootstrapResult
        ``estimate`` (the fit on the data), ``replicates`` (every parameter over ``replicate``),
        ``standard_errors``, ``confidence_interval(level)`` (percentile intervals), ``passes``.

    Raises
    ------
    ConfigError
        ``replicates`` below 2, a method or option the kind does not take, ``checkpoint`` /
        ``resume`` options.
    DataError
        As for :func:`dpgm.fit`; a replicate's error names the replicate.

    Examples
    --------
    >>> import dpgm
    >>> rows = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 2000, seed=0)
    >>> chain = dpgm.BayesianNetwork.from_edges([("smoke", "lung")])
    >>> boot = dpgm.bootstrap(chain, rows[["smoke", "lung"]], replicates=50)
    >>> boot.replicates["table:lung"].dims, boot.passes
    (('replicate', 'lung', 'smoke'), 1)
    """
    from dpgm.api.kinds import kind_of
    from dpgm.api.shared_passes import FitJob, check_fit, fit_together
    from dpgm.stats.resample import check_replicates
    from dpgm.stats.source import DataSource

    replicates, random_state = check_replicates(replicates, random_state)
    data = open_source(data, client=client)
    if isinstance(data, xr.DataArray):
        raise TypeError("bootstrap resamples rows: expected an xarray.Dataset, got a table of counts (a "
                        "DataArray); dpgm.from_table makes weighted rows of it")
    checked = check_fit(model, method, dict(options or {}), "bootstrap")
    stored, data = data, data.copy()
    data.encoding = {}  # the passes read the chunks through the dataset's arrays: merged passes share those reads
    chunks = data.chunks.get("row") if data.chunks else None
    kind = kind_of(model)
    start_from_estimate = checked[0] in kind.em_methods and "init" in kind.methods[checked[0]].options
    # the fit on the data reads the store's chunks directly where it can, as dpgm.fit does
    estimate_job = FitJob(model, *checked, DataSource.of(stored), None)

    def replicate(b: int) -> DataSource:
        return _replicate_source(data, b, replicates, random_state, chunks, stored)

    together = _together(model, checked[0])
    if together is not None:  # every replicate's fit at once, from their stacked count tables
        # the fit on the data takes its tables from the replicates' kernel (its replicate -1): one read per chunk
        mine = dataclasses.replace(replicate(0).resampling, replicate=-1)
        estimate_job = dataclasses.replace(estimate_job, base=dataclasses.replace(estimate_job.base, resampling=mine))
        replicate_job = FitJob(model, *checked, replicate(0), 0)
        return _closed_form(estimate_job, replicate_job, together, client, progress, replicates, random_state)
    if start_from_estimate:  # the replicates start where the estimate ended: two stages
        (outcome,), passes = fit_together([estimate_job], client, progress)
        estimate = _unwrap(outcome, "the fit on the data")
        method_, options_, tol, max_iter = checked
        options_ = {**options_, "init": "model", "n_init": 1}
        jobs = [FitJob(estimate.model, method_, options_, tol, max_iter, replicate(b), b) for b in range(replicates)]
        outcomes, more = fit_together(jobs, client, progress)
        passes += more
    else:
        jobs = [estimate_job] + [FitJob(model, *checked, replicate(b), b) for b in range(replicates)]
        outcomes, passes = fit_together(jobs, client, progress)
        estimate = _unwrap(outcomes.pop(0), "the fit on the data")
    fits = [_unwrap(outcome, f"replicate {b}") for b, outcome in enumerate(outcomes)]
    return _result(estimate, fits, passes, random_state)


def _together(model: Any, method: str) -> Any:
    """The function fitting every replicate at once from their stacked count tables, where the fit is in closed
    form on the counts (a Bayesian network's ``mle`` and ``bayes``); None: one fit per replicate."""
    from dpgm.models.bayesian_network import BayesianNetwork

    if isinstance(model, BayesianNetwork) and method in ("mle", "bayes"):
        from dpgm.api.bayesian import bayesian_network_replicates

        return bayesian_network_replicates
    return None


def _closed_form(estimate_job: Any, replicate_job: Any, together: Any, client: Any, progress: Any,
                 replicates: int, random_state: int) -> BootstrapResult:
    """The fit on the data and every replicate's (``together``, on replicate 0's source: its counts are every
    replicate's), side by side: their passes merged, one in all."""
    from dpgm.api.kinds import kind_of
    from dpgm.api.options import check_sizes
    from dpgm.api.shared_passes import SharedPasses

    shared = SharedPasses(client, progress)
    jobs = (estimate_job, replicate_job)
    sources = [shared.source(job.base, index, group=job.group) for index, job in enumerate(jobs)]
    for job, source in zip(jobs, sources, strict=True):
        check_sizes(job.model, source, job.method, dict(job.options))
    job = estimate_job
    run = kind_of(job.model).methods[job.method].run
    calls = [lambda: run(job.model, sources[0], job.method, tol=job.tol, max_iter=job.max_iter, callback=None,
                         **job.options),
             lambda: together(job.model, sources[1], job.method, **job.options)]
    estimate_outcome, replicate_outcome = shared.run(calls)
    estimate = _unwrap(estimate_outcome, "the fit on the data")
    ok, value = replicate_outcome
    if not ok:
        if isinstance(value, Exception):
            value.add_note("bootstrap: the replicates")
        raise value
    tables, loglik = value
    return _stacked_result(estimate, tables, sources[1].states, loglik, shared.passes, random_state)


def _stacked_result(estimate: FitResult, tables: Mapping[str, tuple], labels: Mapping[str, Sequence[str]],
                    loglik: np.ndarray, passes: int, random_state: int) -> BootstrapResult:
    """:func:`_result` of replicates fitted together: ``tables`` (name -> ``(dims, values)``, ``replicate``
    first, each other dimension in the order of ``labels``) by the estimate's labels, built as one dataset
    (labelled arrays one by one, then merged, cost ten times more); each replicate converged in its one
    (shared) pass."""
    from dpgm.models.parameters import parameter_tables

    template = parameter_tables(estimate.model)
    names = tuple(template)
    variables: dict[str, Any] = {}
    coords: dict[str, Any] = {}
    for name in names:
        first = template[name]
        dims, values = tables[name]
        values = np.asarray(values)
        if tuple(dims[1:]) != first.dims:
            values = np.transpose(values, [0, *(1 + list(dims[1:]).index(d) for d in first.dims)])
        for axis, dim in enumerate(first.dims, start=1):
            if dim in first.indexes:
                wanted = list(first.indexes[dim])
                if list(labels[dim]) != wanted:
                    values = np.take(values, pd.Index(labels[dim]).get_indexer(wanted), axis=axis)
        variables[name] = (("replicate", *first.dims), values)
        coords.update({d: first.coords[d].variable for d in first.dims if d in first.coords and d not in coords})
    n = len(loglik)
    variables["loglik"] = (("replicate",), np.asarray(loglik, dtype=np.float64),
                           {"long_name": "the replicate's weighted log-likelihood"})
    variables["converged"] = (("replicate",), np.ones(n, dtype=bool))
    variables["passes"] = (("replicate",), np.ones(n, dtype=np.int64),
                           {"long_name": "passes the replicate's fit asked for (shared)"})
    dataset = xr.Dataset(variables, coords={**coords, "replicate": np.arange(n)})
    dataset.attrs.update({"random_state": random_state, "passes": passes, "method": estimate.method,
                          "model": type(estimate.model).__name__})
    return BootstrapResult(estimate, dataset, passes, random_state, names)


def _unwrap(outcome: tuple[bool, Any], where: str) -> FitResult:
    ok, value = outcome
    if not ok:
        if isinstance(value, Exception):
            value.add_note(f"bootstrap: {where}")
        raise value
    return value


def _like(table: xr.DataArray, template: xr.DataArray) -> xr.DataArray:
    """``table`` with ``template``'s dimension order and labels (a copy's own order, if it differs)."""
    if table.dims != template.dims:
        table = table.transpose(*template.dims)
    for dim in template.dims:
        if dim in template.indexes and not table.indexes[dim].equals(template.indexes[dim]):
            return table.reindex_like(template)
    return table


def _result(estimate: FitResult, fits: list[FitResult], passes: int, random_state: int) -> BootstrapResult:
    from dpgm.models.parameters import parameter_tables

    tables = [parameter_tables(fit.model) for fit in fits]
    template = parameter_tables(estimate.model)
    names = tuple(template)
    variables: dict[str, Any] = {}
    for name in names:  # every replicate's table by the estimate's labels, stacked (xr.concat costs far more)
        first = template[name]
        stacked = np.stack([np.asarray(_like(t[name], first).values) for t in tables])
        variables[name] = xr.DataArray(stacked, dims=("replicate", *first.dims),
                                       coords={d: first.coords[d] for d in first.dims if d in first.coords})
    replicate = np.arange(len(fits))
    variables["loglik"] = xr.DataArray([f.loglik for f in fits], dims=("replicate",),
                                       attrs={"long_name": "the replicate's weighted log-likelihood"})
    variables["converged"] = xr.DataArray([f.converged for f in fits], dims=("replicate",))
    variables["passes"] = xr.DataArray([f.passes for f in fits], dims=("replicate",),
                                       attrs={"long_name": "passes the replicate's fit asked for (shared)"})
    dataset = xr.Dataset(variables).assign_coords(replicate=replicate)
    dataset.attrs.update({"random_state": random_state, "passes": passes, "method": estimate.method,
                          "model": type(estimate.model).__name__})
    return BootstrapResult(estimate, dataset, passes, random_state, names)

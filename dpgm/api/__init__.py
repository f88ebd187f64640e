"""``dpgm.fit``: one entry point that validates, gathers statistics and dispatches by method."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import xarray as xr

from dpgm.algorithms.result import FitResult
from dpgm.api.kinds import kind_of
from dpgm.api.options import check_checkpoint, check_fit_options, check_sizes
from dpgm.api.predict import predict_proba
from dpgm.api.sources import open_source
from dpgm.progress import FitProgress
from dpgm.stats.source import DataSource

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["fit", "predict_proba"]


def fit(
    model: Any,
    data: xr.Dataset | xr.DataArray,
    method: str | None = None,
    *,
    tol: float = 1e-8,
    max_iter: int = 1000,
    client: Client | None = None,
    progress: bool | None = None,
    callback: Callable[[dict[str, float]], None] | None = None,
    convert: bool = False,
    **options: Any,
) -> FitResult:
    """Fit a model's parameters to data.

    Parameters
    ----------
    model
        A :class:`~dpgm.BayesianNetwork` (parameterized, or a structure from
        ``BayesianNetwork.from_edges`` whose states come from the data), a
        :class:`~dpgm.MarkovNetwork`, a :class:`~dpgm.LogLinearModel` or a
        :class:`~dpgm.HiddenMarkovModel`, a :class:`~dpgm.GLMConditional` (IRLS) or a
        :class:`~dpgm.HybridNetwork` (tables and GLM nodes in the same passes;
        ``method="em"`` with a latent variable). Model variables absent from the data are
        latent (``method="em"``).
    data
        A dataset (lazy Zarr-backed or in memory) or a labelled contingency table.
    method
        Bayesian networks: ``"mle"`` (default) or ``"bayes"`` (posterior mean under
        a Dirichlet prior: ``prior="BDeu"`` with ``equivalent_sample_size``,
        ``"K2"``, or ``"dirichlet"`` with ``pseudo_counts={variable: table}``).
        Markov networks: ``"ipf"`` (default; ``loglik_tol=`` adds a stopping rule on
        the relative log-likelihood change per sweep), ``"closed_form"``
        (decomposable models), or the log-linear methods on indicator features.
        Log-linear models: ``"lbfgs"`` (default; ``l2=`` ridge and ``l1=`` lasso
        penalties, the latter by proximal gradient), ``"newton"`` (small models),
        ``"gis"``. ``structural_zeros=`` a boolean DataArray of cells fixed at zero.
        Any model with latent variables or missing values: ``"em"`` (``n_init``,
        ``random_state``, ``init``, ``checkpoint``, ``resume``, ``persist``;
        ``m_step="ipf"`` / ``"gis"`` for Markov / log-linear models); a
        HiddenMarkovModel is always fitted by EM (Baum-Welch).
    tol, max_iter
        Stopping rule of iterative methods: the largest marginal (or feature
        expectation) error for IPF/GIS/gradient methods. For EM, ``converged`` means
        the log-likelihood is within ``tol · |loglik|`` of the maximum EM is heading
        to: each record's ``gap`` estimates that distance (Aitken's estimate at EM's
        rate) and the fit stops when twice the estimate is within it. EM takes
        SQUAREM steps by default (``accelerate="squarem"``; ``accelerate=None``:
        plain EM), its estimate confirmed by 3 plain EM steps.
    client
        Dask client for the pass(es) over the data.
    progress
        Say what the fit is doing on stderr: one line per iteration of the best
        restart (``iteration 5  loglik -199,472.84  change +373  0.9 s/pass``),
        restarts summarised, the outcome at the end; under a counter of iterations
        in a terminal (tqdm's notebook widget in Jupyter), timestamped plain lines
        elsewhere. None (default): on in an interactive session (stderr a terminal,
        IPython, Jupyter), off in a script whose stderr is not a terminal. Every
        line also goes to the ``dpgm`` logger at INFO (each restart's own record at
        DEBUG), whatever ``progress`` says: ``logging.basicConfig(level=logging.INFO)``
        shows them in a script. See :mod:`dpgm.progress`.
    callback
        Called with each iteration's history record. On a distributed cluster
        (``client=`` or the default client) every record is also logged as a
        ``"dpgm.fit"`` event, with the fit id, method, restart, elapsed time and
        rows/s of the last pass, for the dashboard's ``/dpgm`` page.
    convert
        ``data`` may also be a path: a Zarr store is opened; CSV/TSV/Parquet input (a
        file, a folder or a glob) is refused with what to do, or, with ``convert=True``,
        converted on the cluster into ``<stem>.zarr`` next to it (never over an existing
        store) and fitted (see :func:`dpgm.api.sources.open_source`).
    **options
        Method options (see above).

    Returns
    -------
    FitResult

    Raises
    ------
    DataError
        Model variables absent from the data, states that differ, missing values
        with a complete-data method.
    ConfigError
        (a ``ValueError``) An unknown method, an option the method does not take,
        or a value out of range (``max_iter=0``, ``tol=-1``, ``n_init=0``), naming
        the option, before any pass over the data; :class:`ConfigTypeError` (also a
        ``TypeError``) for a value of the wrong type.
    CheckpointMismatch
        ``resume=`` names a checkpoint written for other data, another model or
        other options (the stopping rule aside); ``checkpoint=`` records this fit's
        fingerprint for a later resume.

    Examples
    --------
    >>> import dpgm
    >>> truth = dpgm.load_network("asia")
    >>> data = dpgm.sample_bayesian_network(truth, 10_000, seed=0)
    >>> result = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), data)
    >>> result.converged, result.n_params
    (True, 18)
    """
    data = open_source(data, convert=convert, client=client)
    resolved = check_fit_options(model, method, {"tol": tol, "max_iter": max_iter, **options})
    source = DataSource.of(data, client=client)  # a dataset's schema is read here, once per fit
    check_sizes(model, source, resolved, options)  # hidden and latent states, mixture components: before any pass
    check_checkpoint(model, source, resolved, {"tol": tol, "max_iter": max_iter, **options})
    if method == "em" and source.is_table:
        from dpgm.data import from_table

        data = from_table(data)  # EM reads rows: a table's cells become weighted rows
        source = DataSource.of(data, client=client)
    watch = FitProgress.start(progress, method=resolved, tol=tol)  # every pass and record told to it
    source = dataclasses.replace(source, progress=watch)
    told = watch.watch(callback)
    reporter = _reporter(model, data, resolved, client, told)
    try:
        result = _dispatch(model, source, resolved, tol=tol, max_iter=max_iter,
                           callback=told if reporter is None else reporter, **options)
    except BaseException as error:
        watch.fail(error)
        if reporter is not None:
            reporter.finish("failed", error=f"{type(error).__name__}: {error}")
        raise
    watch.finish(result)
    if reporter is not None:
        reporter.finish("converged" if result.converged else "stopped", converged=result.converged,
                        n_iter=result.n_iter)
    return result


def _reporter(model, data, method, client, callback):
    """On a cluster, a callback that also logs every iteration for the dashboard's ``/dpgm`` page.

    ``None`` without a distributed client (given or default) or for a method without
    iterations (:attr:`dpgm.api.kinds.Method.iterative`); see :mod:`dpgm.dashboard`.
    """
    if not kind_of(model).methods[method].iterative:
        return None
    try:
        from dpgm.cluster import current_client
        from dpgm.dashboard import FitReporter

        client = client or current_client()
        if client is None or getattr(client, "asynchronous", False) or client.status != "running":
            return None
        rows = data.sizes.get("row") if isinstance(data, xr.Dataset) else None
        return FitReporter(client, method, type(model).__name__, rows, callback)
    except Exception:  # watching a fit must never stop it
        return None


def _dispatch(model, source: DataSource, method: str, *, tol, max_iter, callback, **options) -> FitResult:
    """Run the registered fit function of ``model``'s kind and ``method`` (checked by :func:`check_fit_options`)."""
    return kind_of(model).methods[method].run(model, source, method, tol=tol, max_iter=max_iter, callback=callback,
                                               **options)

"""``dpgm.fit``: one entry point that validates, gathers statistics and dispatches by method."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import xarray as xr

from dpgm.algorithms.result import FitResult
from dpgm.api.bayesian import fit_bayesian_network, fit_bayesian_network_em
from dpgm.api.checks import check_checkpoint, check_fit_options, check_sizes
from dpgm.api.gaussian import fit_gaussian, fit_linear_gaussian
from dpgm.api.glm import fit_glm
from dpgm.api.hmm import fit_hmm
from dpgm.api.hybrid import fit_hybrid
from dpgm.api.hybrid_em import fit_hybrid_em
from dpgm.api.log_linear import fit_log_linear
from dpgm.api.markov import fit_markov_network
from dpgm.api.mixture import fit_gaussian_mixture
from dpgm.api.predict import predict_proba
from dpgm.api.sources import open_source
from dpgm.api.undirected_em import fit_undirected_em
from dpgm.models.bayesian_network import BayesianNetwork
from dpgm.models.gaussian import GaussianGraphicalModel
from dpgm.models.glm import GLMConditional
from dpgm.models.hmm import HiddenMarkovModel
from dpgm.models.hybrid import HybridNetwork
from dpgm.models.linear_gaussian import LinearGaussianNetwork
from dpgm.models.log_linear import LogLinearModel
from dpgm.models.markov import MarkovNetwork
from dpgm.models.mixture import GaussianMixture
from dpgm.progress import FitProgress

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
        expectation) error for IPF/GIS/gradient methods, the relative
        log-likelihood change for EM.
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
    check_sizes(model, data, resolved, options)  # hidden and latent states, mixture components: before any pass
    check_checkpoint(model, data, resolved, {"tol": tol, "max_iter": max_iter, **options})
    if method == "em" and isinstance(data, xr.DataArray):
        from dpgm.data import from_table

        data = from_table(data)  # EM reads rows: a table's cells become weighted rows
    watch = FitProgress.start(progress, method=resolved, tol=tol)  # every pass and record told to it
    told = watch.watch(callback)
    reporter = _reporter(model, data, method, client, told)
    try:
        result = _dispatch(model, data, method, tol=tol, max_iter=max_iter, client=client, progress=watch,
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
    iterations; see :mod:`dpgm.dashboard`.
    """
    defaults = [(HiddenMarkovModel, "em"), (MarkovNetwork, "ipf"), (LogLinearModel, "lbfgs"),
                (GaussianMixture, "em"), (HybridNetwork, "mle")]
    iterative = method or next((name for kind, name in defaults if isinstance(model, kind)), None)
    if iterative is None or (isinstance(model, BayesianNetwork) and iterative != "em"):
        return None
    try:
        from dpgm.cluster import current_client
        from dpgm.dashboard import FitReporter

        client = client or current_client()
        if client is None or getattr(client, "asynchronous", False) or client.status != "running":
            return None
        rows = data.sizes.get("row") if isinstance(data, xr.Dataset) else None
        return FitReporter(client, iterative, type(model).__name__, rows, callback)
    except Exception:  # watching a fit must never stop it
        return None


def _dispatch(model, data, method, *, tol, max_iter, client, progress, callback, **options) -> FitResult:
    if isinstance(model, BayesianNetwork):
        if method == "em":
            return fit_bayesian_network_em(model, data, tol=tol, max_iter=max_iter, client=client,
                                            progress=progress, callback=callback, **options)
        return fit_bayesian_network(model, data, method or "mle", client=client, progress=progress, **options)
    if isinstance(model, HiddenMarkovModel):
        if method not in (None, "em"):
            raise ValueError(f"a HiddenMarkovModel is fitted by method='em' (Baum-Welch), not {method!r}")
        return fit_hmm(model, data, tol=tol, max_iter=max_iter, client=client, progress=progress,
                        callback=callback, **options)
    if isinstance(model, MarkovNetwork | LogLinearModel) and method == "em":
        return fit_undirected_em(model, data, tol=tol, max_iter=max_iter, client=client, progress=progress,
                                  callback=callback, **options)
    if isinstance(model, MarkovNetwork):
        return fit_markov_network(model, data, method or "ipf", tol=tol, max_iter=max_iter, client=client,
                                   progress=progress, callback=callback, **options)
    if isinstance(model, LogLinearModel):
        return fit_log_linear(model, data, method or "lbfgs", tol=tol, max_iter=max_iter, client=client,
                               progress=progress, callback=callback, **options)
    if isinstance(model, GaussianGraphicalModel):
        return fit_gaussian(model, data, method, tol=tol, max_iter=max_iter, client=client, progress=progress,
                            callback=callback, **options)
    if isinstance(model, LinearGaussianNetwork):
        return fit_linear_gaussian(model, data, method, tol=tol, max_iter=max_iter, client=client,
                                   progress=progress, callback=callback, **options)
    if isinstance(model, GLMConditional):
        return fit_glm(model, data, method, tol=tol, max_iter=max_iter, client=client, progress=progress,
                       callback=callback, **options)
    if isinstance(model, HybridNetwork) and method == "em":
        return fit_hybrid_em(model, data, tol=tol, max_iter=max_iter, client=client, progress=progress,
                             callback=callback, **options)
    if isinstance(model, HybridNetwork):
        return fit_hybrid(model, data, method, tol=tol, max_iter=max_iter, client=client, progress=progress,
                          callback=callback, **options)
    if isinstance(model, GaussianMixture):
        if method not in (None, "em"):
            raise ValueError(f"a GaussianMixture is fitted by method='em', not {method!r}")
        return fit_gaussian_mixture(model, data, tol=tol, max_iter=max_iter, client=client, progress=progress,
                                    callback=callback, **options)
    raise TypeError(
        f"cannot fit a {type(model).__name__}; expected a BayesianNetwork, MarkovNetwork, LogLinearModel, "
        "HiddenMarkovModel, GaussianGraphicalModel, LinearGaussianNetwork, GaussianMixture or GLMConditional"
    )

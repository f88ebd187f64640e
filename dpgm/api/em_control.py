"""What every EM fit shares: restarts, events, persisted data, the result."""

from __future__ import annotations

import numpy as np

from dpgm.algorithms.result import FitResult
from dpgm.stats.source import DataSource


def event_callback(client, callback):
    """The callback EM reports each record to.

    ``dpgm.fit`` already wraps the user's callback in a :class:`dpgm.dashboard.FitReporter`
    that logs every record as a ``"dpgm.fit"`` event on the cluster (with the fit id
    and restart), for every iterative method; logging here too would count each point twice.
    """
    return callback


def initial_models(model, n_init: int, random_state, init, randomize=None):
    """Starting models: the given one (``init="model"``) or ``n_init`` random draws.

    ``randomize(model, rng)`` draws one start (default ``model.randomized(rng)``).
    """
    if init == "model":
        if n_init != 1:
            raise ValueError("init='model' starts from the given parameters: n_init must be 1")
        return [model]
    if init not in (None, "random"):
        raise ValueError(f"init must be 'random' or 'model', got {init!r}")
    if n_init < 1:
        raise ValueError(f"n_init must be at least 1, got {n_init!r}")
    rng = np.random.default_rng(random_state)
    if randomize is None:
        return [model.randomized(rng) for _ in range(n_init)]
    return [randomize(model, rng) for _ in range(n_init)]


def maybe_persist(source: DataSource, variables, persist: bool) -> DataSource:
    """``source`` with ``variables`` (and the weight) held in the cluster's memory if ``persist``."""
    if not persist or source.is_table:
        return source
    data = source.data
    subset = data[[*variables, *(["weight"] if "weight" in data else [])]]
    return source.with_data(source.client.persist(subset) if source.client is not None else subset.persist())


def total_rows(source: DataSource) -> float:
    """Rows of the data, or their total weight (one read of the ``weight`` column)."""
    from dpgm.cluster import compute

    data = source.data
    if source.is_table:
        return float(data.sum())
    if source.weight:  # fits of the same data side by side (cross-validation) read it once
        return source.memo(("total weight",),
                           lambda: float(compute(data[source.weight].data.sum(), client=source.client)))
    return float(source.n_rows)


def run_em(family, starts, *, tol, max_iter, callback, client, checkpoint=None, resume=None, accelerate="squarem",
           incremental: bool = False, prune_restarts: bool = False):
    """Run :func:`dpgm.algorithms.em.em` with ``dpgm.fit``'s EM options (one place for every model kind).

    ``checkpoint`` and ``resume`` are checkpoint folders (paths, fsspec URLs or mappers,
    :mod:`dpgm.io.checkpoint`): the loop's snapshot after every iteration is written to
    ``checkpoint``; ``resume``'s newest iteration, verified, is the state the loop goes on from.
    """
    from dpgm.algorithms.em import em

    return em(family, starts, max_iter=max_iter, tol=tol, callback=event_callback(client, callback),
              on_iteration=None if checkpoint is None else checkpoint_writer(checkpoint),
              resume_from=None if resume is None else saved_loop(resume),
              accelerate=accelerate, incremental=bool(incremental), prune_restarts=bool(prune_restarts))


def checkpoint_writer(folder):
    """The ``on_iteration`` hook that writes each :class:`~dpgm.algorithms.em.LoopSnapshot` into ``folder``."""
    from dpgm.io.checkpoint import write_checkpoint

    def write(snapshot) -> None:
        write_checkpoint(folder, snapshot.iteration, snapshot.models, snapshot.state, snapshot.loop)

    return write


def saved_loop(folder):
    """The loop state of the newest iteration in the checkpoint ``folder``, verified (a ``resume_from``).

    Raises
    ------
    FileNotFoundError
        No complete checkpoint in the folder.
    dpgm.io.checkpoint.CheckpointDamaged
        A file of the checkpoint is not what dpgm wrote (named).
    """
    from dpgm.algorithms.em import SavedLoop
    from dpgm.io.checkpoint import read_checkpoint

    iteration, _, saved = read_checkpoint(folder, models=False)
    return SavedLoop(iteration, saved["loop"], saved["histories"],
                     f"the checkpoint {str(getattr(folder, 'root', folder))!r}")


def em_result(state, method: str, n_params: int, n_rows: float) -> FitResult:
    from dpgm.api.results import fit_result

    best = state.best
    history = state.histories[best]
    passes = int(state.passes) if float(state.passes).is_integer() else float(state.passes)
    return fit_result(
        state.models[best], method, loglik=state.logliks[best], converged=state.converged[best],
        n_iter=len(history), n_rows=n_rows, n_params=n_params, history=history, passes=passes,
        info={"restart": best, "restart_logliks": list(state.logliks), "restart_histories": state.histories,
              "pruned_restarts": list(state.pruned), "tol": state.extras.get("tol")},
    )

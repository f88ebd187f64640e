"""The EM loop: one E step (one pass over the data) per iteration for all restarts at once.

The loop is independent of the model: ``estep(models, iteration) -> [(loglik, statistics)]``
runs one distributed pass computing every active restart's expected statistics
together, and ``mstep(model, statistics) -> model`` updates one restart on the
driver. "Model" is whatever the two functions exchange: a labelled model, or
raw parameter arrays with ``to_model`` / ``from_model`` converting at the edges
(checkpoints, resume and the result), so the loop itself builds no labels. Each
iteration's log-likelihood is that of the parameters the E step used; the model
returned is the one whose log-likelihood is reported.

Convergence: ``|loglik_t - loglik_{t-1}| <= tol * |loglik_t|``. A converged
restart leaves the pass; the loop ends when every restart has converged or
``max_iter`` iterations ran. The best restart (highest log-likelihood) wins.

References
----------
Dempster, A. P., Laird, N. M. and Rubin, D. B. (1977). Maximum likelihood from
incomplete data via the EM algorithm. *J. R. Statist. Soc. B* 39, 1-38.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dpgm.algorithms.checkpoint import read_checkpoint, write_checkpoint

__all__ = ["EMState", "em"]


@dataclass
class EMState:
    """Outcome of :func:`em`."""

    models: list[Any]
    histories: list[list[dict]]
    converged: list[bool]
    n_iter: int
    passes: int
    best: int = 0
    extras: dict = field(default_factory=dict)


def em(
    models: list[Any],
    estep: Callable[[list[Any], int], list[tuple[float, Any]]],
    mstep: Callable[[Any, Any], Any],
    *,
    max_iter: int = 100,
    tol: float = 1e-8,
    callback: Callable[[dict], None] | None = None,
    checkpoint: str | None = None,
    resume: str | None = None,
    to_model: Callable[[Any], Any] | None = None,
    from_model: Callable[[Any], Any] | None = None,
) -> EMState:
    """Run EM from ``models`` (one per restart).

    Parameters
    ----------
    models
        Starting parameters, one per restart.
    estep
        One pass: ``estep(models, iteration)`` -> the log-likelihood and expected
        statistics of each given model.
    mstep
        New parameters of one restart from its statistics.
    max_iter, tol
        Stopping rule (relative log-likelihood change).
    callback
        Called with each restart's record every iteration (``restart``,
        ``iteration``, ``loglik``, ``change``, ``seconds``).
    checkpoint
        Folder to checkpoint parameters and history into after every iteration.
    resume
        Folder of a checkpoint to continue from (its models replace ``models``).
    to_model, from_model
        Convert the loop's parameters to the model saved in checkpoints and
        returned (and back, on resume); identity by default.

    Returns
    -------
    EMState
    """
    histories: list[list[dict]] = [[] for _ in models]
    converged = [False] * len(models)
    evaluated = list(models)
    iteration = 0
    passes = 0
    if resume is not None:
        iteration, models, state = read_checkpoint(resume)
        if from_model is not None:
            models = [from_model(m) for m in models]
        histories = state["histories"]
        converged = state["converged"]
        evaluated = list(models)
    labelled = to_model or (lambda parameters: parameters)
    current = list(models)
    start = time.perf_counter()
    while iteration < max_iter and not all(converged):
        iteration += 1
        active = [i for i, done in enumerate(converged) if not done]
        results = estep([current[i] for i in active], iteration)
        passes += 1
        for i, (loglik, statistics) in zip(active, results, strict=True):
            previous = histories[i][-1]["loglik"] if histories[i] else None
            change = None if previous is None else loglik - previous
            record = {
                "restart": i,
                "iteration": iteration,
                "loglik": float(loglik),
                "change": change,
                "seconds": time.perf_counter() - start,
            }
            histories[i].append(record)
            if callback is not None:
                callback(record)
            evaluated[i] = current[i]
            if change is not None and abs(change) <= tol * abs(loglik):
                converged[i] = True
            else:
                current[i] = mstep(current[i], statistics)
        if checkpoint is not None:
            # evaluated models carry the reported logliks; unconverged restarts go on from current
            write_checkpoint(
                checkpoint,
                iteration,
                [labelled(current[i] if not converged[i] else evaluated[i]) for i in range(len(current))],
                {"histories": histories, "converged": converged},
            )
    finals = [h[-1]["loglik"] if h else float("-inf") for h in histories]
    best = max(range(len(finals)), key=finals.__getitem__)
    return EMState([labelled(m) for m in evaluated], histories, converged, iteration, passes, best)

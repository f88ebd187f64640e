"""One EM pass of a hybrid network with a latent categorical variable, for every restart at once.

Each chunk builds every GLM node's design once, then for each restart:

* E step: the log-probability of each row's observed values under every latent
  state ``k`` -- the latent prior, each table's entry, each GLM node's per-row
  log-likelihood at its state-``k`` coefficients (the continuous children enter as
  soft evidence on the latent variable) -- normalized to the row's posterior
  ``r_k``; the log-likelihood is ``sum w log sum_k exp(.)``;
* statistics of the M step: expected counts of every table, and for every GLM node
  and state ``k`` the IRLS statistics with weights ``w r_k`` at the state's
  coefficients (:func:`dpgm.stats.irls.irls_statistics`).

A restart given as ``{"seed": s}`` is a random start: the row's posteriors are
Dirichlet(1) draws keyed by a hash of the row's values (independent of chunking),
and the GLM statistics are taken at the IRLS start (no coefficients).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dpgm.errors import DataError
from dpgm.stats.engine import map_reduce
from dpgm.stats.irls import Design, design_matrix, irls_statistics

if TYPE_CHECKING:
    from dpgm.stats.source import DataSource

__all__ = ["LatentPlan", "latent_pass", "row_loglik"]


@dataclass(frozen=True)
class LatentPlan:
    """The latent variable, the tables (family, shape) and the GLM nodes (design, child of the latent?)."""

    latent: str
    n_states: int
    tables: tuple[tuple[tuple[str, ...], tuple[int, ...]], ...]
    glms: tuple[tuple[str, Design, bool], ...]

    @property
    def observed(self) -> list[str]:
        names = [v for f, _ in self.tables for v in f if v != self.latent]
        names += [v for _, d, _ in self.glms for v in (d.child, *(p for p, _ in d.parents))]
        return list(dict.fromkeys(names))


def row_loglik(x: np.ndarray, y: np.ndarray, beta: np.ndarray, scale: float, design: Design) -> np.ndarray:
    """Each row's log-density of its response under the GLM with coefficients ``beta``."""
    family = design.glm
    return family.row_loglik(y, family.linear_predictor(x, beta, design.n_classes), scale)


def _random_posteriors(columns: dict[str, np.ndarray], names: list[str], k: int, seed: int) -> np.ndarray:
    from dpgm.stats.mixture import _row_hash

    values = np.column_stack([np.asarray(columns[v], np.float64) for v in names])
    draws = np.column_stack([-np.log(_row_hash(values, seed * 7919 + j + 1)) for j in range(k)])
    return draws / draws.sum(axis=1, keepdims=True)


def latent_chunk(index: int, columns: dict[str, np.ndarray], shared: Any, plan: LatentPlan,
                 weight: str | None) -> list[dict[str, Any]]:
    """One chunk's E-step log-likelihood and M-step statistics, one dict per restart in ``shared``."""
    columns = dict(columns)
    if weight is not None:
        columns["__weight__"] = np.asarray(columns.pop(weight), np.float64)
    n = len(next(iter(columns.values())))
    w = columns.get("__weight__", np.ones(n))
    k = plan.n_states
    designs = {}
    for node, design, _ in plan.glms:
        x, y, _, missing = design_matrix(columns, design, index)
        if missing:
            raise DataError(f"{missing:,.0f} rows miss a value of {[design.child, *(p for p, _ in design.parents)]}; "
                            "EM with a latent variable needs every observed value", chunk=index)
        designs[node] = (x, y)
    flats = []
    for family, shape in plan.tables:
        codes = [np.asarray(columns[v]).astype(np.intp) if v != plan.latent else None for v in family]
        for v, c in zip(family, codes, strict=True):
            if c is not None and ((c < 0).any() or (c >= shape[family.index(v)]).any()):
                raise DataError(f"holds missing or out-of-range codes; EM with a latent variable needs every "
                                f"observed value (codes 0..{shape[family.index(v)] - 1})", variable=v, chunk=index)
        flats.append([np.ravel_multi_index([c if c is not None else np.full(n, z, np.intp) for c in codes], shape)
                      for z in range(k if plan.latent in family else 1)])
    out = []
    for params in shared:
        start = "seed" in params
        if start:
            post, loglik = _random_posteriors(columns, plan.observed, k, params["seed"]), 0.0
        else:
            logp = np.tile(params["log_prior"], (n, 1))
            for (family, _), flat in zip(plan.tables, flats, strict=True):
                table = params["tables"][family[0]].ravel()
                logp += np.column_stack([table[f] for f in flat])
            for node, design, by_state in plan.glms:
                x, y = designs[node]
                glm = params["glm"][node]
                if by_state:
                    logp += np.column_stack([row_loglik(x, y, glm["beta"][z], glm["scale"][z], design)
                                             for z in range(k)])
                else:
                    logp += row_loglik(x, y, glm["beta"], glm["scale"], design)[:, None]
            norm = np.logaddexp.reduce(logp, axis=1)
            post = np.exp(logp - norm[:, None])
            loglik = float(w @ norm)
        weighted = post * w[:, None]
        stats: dict[str, Any] = {"loglik": loglik, "prior": weighted.sum(axis=0), "tables": {}, "glm": {}}
        for (family, shape), flat in zip(plan.tables, flats, strict=True):
            size = math.prod(shape)
            if len(flat) == 1:
                stats["tables"][family[0]] = np.bincount(flat[0], weights=w, minlength=size)
            else:
                stats["tables"][family[0]] = sum(np.bincount(f, weights=weighted[:, z], minlength=size)
                                                 for z, f in enumerate(flat))
        for node, design, by_state in plan.glms:
            x, y = designs[node]
            glm = None if start else params["glm"][node]
            parts = []
            for z in range(k if by_state else 1):
                rw = weighted[:, z] if by_state else w
                beta = None if glm is None else (glm["beta"][z] if by_state else glm["beta"])
                part = irls_statistics(x, y, rw, beta, design)
                if design.glm.has_scale and beta is None:  # the residual variance's start
                    part["yy"] = float(rw @ (y * y))
                parts.append(part)
            stats["glm"][node] = parts
        out.append(stats)
    return out


def latent_pass(source: DataSource, plan: LatentPlan, restarts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One pass over ``source``: every restart's log-likelihood and M-step statistics (see the module docstring)."""
    kernel = functools.partial(latent_chunk, plan=plan, weight=source.weight)
    shared = [{key: value for key, value in r.items() if key != "last"} for r in restarts]
    return source.compute(map_reduce(source.columns(plan.observed), kernel, name="dpgm-hybrid-em", shared=shared))


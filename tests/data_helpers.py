"""Random categorical frames and an independent pandas count, the oracle for dpgm.counts."""

from __future__ import annotations

import numpy as np
import pandas as pd


def random_frame(rng: np.random.Generator, n_rows: int, cards: dict[str, int], missing: float, weighted: bool):
    """Frame of categorical columns (labels 's0', 's1', ...; None = missing), plus weights."""
    columns = {}
    for name, card in cards.items():
        codes = rng.integers(0, card, n_rows)
        labels = np.array([f"s{i}" for i in range(card)], dtype=object)[codes]
        labels[rng.random(n_rows) < missing] = None
        columns[name] = pd.Categorical(labels, categories=[f"s{i}" for i in range(card)])
    if weighted:
        columns["weight"] = rng.integers(0, 5, n_rows).astype(float) + rng.random(n_rows).round(2)
    return pd.DataFrame(columns)


def pandas_counts(frame: pd.DataFrame, scope: tuple[str, ...]) -> tuple[np.ndarray, float]:
    """Dense table of scope by pandas groupby over complete rows, and the missing rows (or weight)."""
    shape = [len(frame[v].cat.categories) for v in scope]
    complete = frame[list(scope)].notna().all(axis=1)
    weights = frame["weight"] if "weight" in frame else pd.Series(1, index=frame.index)
    table = np.zeros(shape, dtype=float if "weight" in frame else np.int64)
    sub = frame[complete]
    if len(sub):
        grouped = weights[complete].groupby([sub[v].cat.codes for v in scope]).sum()
        for key, value in grouped.items():
            key = key if isinstance(key, tuple) else (key,)
            table[key] = value
    return table, weights[~complete].sum()

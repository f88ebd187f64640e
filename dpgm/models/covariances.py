"""Covariance parameters shared by Gaussian mixtures and Gaussian emissions: the four types (scikit-learn's
and hmmlearn's shapes), their labelled dims, the full matrices they stand for, and the positive-definite check."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["COVARIANCE_TYPES", "check_covariances", "covariance_dims", "full_covariances"]

COVARIANCE_TYPES = ("full", "diag", "spherical", "tied")


def covariance_dims(covariance_type: str) -> tuple[str, ...]:
    """The dims of the ``covariances`` array of a covariance type (scikit-learn's shapes, labelled)."""
    return {"full": ("component", "variable", "variable_"), "diag": ("component", "variable"),
            "spherical": ("component",), "tied": ("variable", "variable_")}[covariance_type]


def full_covariances(covariances: np.ndarray, covariance_type: str, n_components: int, p: int) -> np.ndarray:
    """Every component's ``p x p`` covariance matrix, whatever the covariance type."""
    c = np.asarray(covariances, dtype=float)
    if covariance_type == "full":
        return c
    if covariance_type == "tied":
        return np.broadcast_to(c, (n_components, p, p)).copy()
    if covariance_type == "diag":
        return np.einsum("ki,ij->kij", c, np.eye(p))
    return c[:, None, None] * np.eye(p)[None]


def check_covariances(covariances: np.ndarray, covariance_type: str, variables: Sequence[str],
                      reg_covar: float | None) -> None:
    """Refuse a covariance that is not positive definite, with a clear error.

    Raises
    ------
    DataError
        Naming the component and the variables on which its covariance is singular
        (those with the largest loadings on its smallest eigenvector), and what to do.
    """
    from dpgm.errors import DataError

    variables = list(variables)
    p = len(variables)
    c = np.asarray(covariances, dtype=float)
    if covariance_type in ("diag", "spherical"):
        variances = c if covariance_type == "diag" else np.repeat(c[:, None], p, axis=1)
        bad = np.argwhere(~(variances > 0))
        if len(bad):
            k = int(bad[0][0])
            names = [variables[j] for j in np.nonzero(~(variances[k] > 0))[0]]
            raise DataError(_singular_message(k, names, reg_covar, covariance_type))
        return
    matrices = c[None] if covariance_type == "tied" else c
    for k, matrix in enumerate(matrices):
        try:
            factor = np.linalg.cholesky(matrix)
            if not np.all(np.diag(factor) > 0):
                raise np.linalg.LinAlgError
        except np.linalg.LinAlgError:
            values, vectors = np.linalg.eigh((matrix + matrix.T) / 2)
            loading = np.abs(vectors[:, 0])
            names = [variables[j] for j in np.nonzero(loading >= 0.5 * loading.max())[0]]
            raise DataError(_singular_message(None if covariance_type == "tied" else k, names, reg_covar,
                                              covariance_type)) from None


def _singular_message(component: int | None, names: list[str], reg_covar: float | None, kind: str) -> str:
    which = "the tied covariance" if component is None else f"component {component}'s covariance"
    hint = ("; give a positive reg_covar (added to the diagonal) or fewer components" if reg_covar is not None
            else "")
    regularised = f" with reg_covar={reg_covar!r}" if reg_covar is not None else ""
    return (f"{which} ({kind}) is singular{regularised}: not positive definite along variables {names} "
            f"(collapsed or constant there){hint}")

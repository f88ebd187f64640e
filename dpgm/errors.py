"""Exceptions and warnings raised by dpgm."""

from __future__ import annotations


class DpgmWarning(UserWarning):
    """Base class of every warning dpgm emits."""


class ConvergenceWarning(DpgmWarning):
    """An iterative fit stopped at ``max_iter`` without meeting ``tol``."""


class DataError(ValueError):
    """Bad input data: names the variable and, where known, the chunk.

    Parameters
    ----------
    message
        What is wrong and what was expected.
    variable
        The offending variable, if one.
    chunk
        Index of the first chunk (along ``row``) where the problem was seen.
    """

    def __init__(self, message: str, variable: str | None = None, chunk: int | None = None):
        where = []
        if variable is not None:
            where.append(f"variable {variable!r}")
        if chunk is not None:
            where.append(f"chunk {chunk}")
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(prefix + message)
        self.variable = variable
        self.chunk = chunk

    def __reduce__(self):  # keep fields when pickled across a cluster
        return (_rebuild_data_error, (self.args[0], self.variable, self.chunk))


def _rebuild_data_error(text: str, variable: str | None, chunk: int | None) -> DataError:
    error = DataError.__new__(DataError)
    ValueError.__init__(error, text)
    error.variable = variable
    error.chunk = chunk
    return error


class ConfigError(ValueError):
    """A bad option or specification value: names the option (CLI exit 78).

    Raised before any pass over the data, by the checks of :func:`dpgm.fit`'s
    options, model specifications and size limits.
    """


class ConfigTypeError(ConfigError, TypeError):
    """An option of the wrong type (``max_iter="ten"``): both a :class:`ConfigError` and a ``TypeError``."""


class SpecError(ConfigError):
    """A model specification that cannot be used (:mod:`dpgm.spec`; the CLI exits 78), naming the key."""


class TableTooLarge(ConfigError):
    """A table that cannot be allocated (e.g. a counts scope of 37 variables), refused before any pass."""


class StoreUnreachable(ConnectionError):
    """An object store (or any remote filesystem) that does not answer: no server at the endpoint, a refused
    connection or a time-out (CLI exit 69: the service is unavailable; a retry may help)."""


# the names of the connection failures of the remote filesystems' clients (botocore, aiohttp, requests, ...)
CONNECTION_FAILURES = frozenset({"ConnectionError", "EndpointConnectionError", "ConnectTimeoutError",
                                 "ClientConnectorError", "ServerTimeoutError", "ConnectTimeout"})


def unreachable(error: BaseException | None) -> BaseException | None:
    """The connection failure behind ``error`` (itself, its cause or context), if it is one."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ConnectionRefusedError | StoreUnreachable) or {
                cls.__name__ for cls in type(error).__mro__} & CONNECTION_FAILURES:
            return error
        error = error.__cause__ or error.__context__
    return None


class CheckpointMismatch(ValueError):
    """A checkpoint written for other data or another model specification than the resumed run's.

    Raised by the fingerprint check (:func:`dpgm.io.checkpoint.check_fingerprint`) and by
    the EM loop when a saved loop state does not fit the resumed fit's restarts.
    """

"""The ``dpgm`` command line: batch jobs on an embedded or a real Dask cluster.

Exit codes: :mod:`dpgm.cli.failures` lists and defines them (docs/exit-codes.md says which a retry
can help). Every output is checked before any work and written under a temporary name first: a
failed or interrupted command leaves none half-written.
"""

from __future__ import annotations

from dpgm.cli import datasets, demo, fitting, resampling, validation, verify  # noqa: F401  (each registers its commands on the group)
from dpgm.cli.entry import cli, main

__all__ = ["cli", "main"]

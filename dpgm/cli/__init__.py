"""The ``dpgm`` command line: batch jobs on an embedded or a real Dask cluster.

Exit codes (docs/exit-codes.md says which a retry can help):
0 success, 2 usage, 3 a fit stopped at its iteration limit without converging, 65 bad
data (incl. an incomplete or corrupted store), 66 missing input, 69 scheduler unreachable
or lost mid-run, 70 internal error (the traceback with -v), 73 an output cannot be created,
74 I/O error (disk full, read-only file system), 75 interrupted with a checkpoint to
--resume, 78 bad configuration (specification, options, sizes, or --resume of a
checkpoint written for other data or another specification), 130/143 interrupted by
SIGINT/SIGTERM with nothing to resume. Every output is checked before any work and
written under a temporary name first: a failed or interrupted command leaves none half-written.
"""

from __future__ import annotations

from dpgm.cli import datasets, demo, fitting, verify  # noqa: F401  (each registers its commands on the group)
from dpgm.cli.entry import cli, main

__all__ = ["cli", "main"]

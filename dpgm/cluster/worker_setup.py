"""What the embedded cluster's worker processes run before they start (a Dask worker preload).

``LocalCluster(silence_logs=...)`` silences only ``distributed.nanny`` in a worker process, so a worker
cut short by the command's end (an interrupt) could still log ``distributed.core``'s INFO lines
("Received 'close-stream'") after the command's last line. Here every ``distributed`` logger of the
worker process is kept to critical messages: a task's failure reaches the driver as the error it raises.
"""

from __future__ import annotations

import logging
from typing import Any

LEVEL = logging.CRITICAL


def dask_setup(worker: Any) -> None:
    """Keep the worker process's ``distributed`` logs to critical messages."""
    logging.getLogger("distributed").setLevel(LEVEL)

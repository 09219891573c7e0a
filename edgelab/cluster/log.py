"""Where an embedded cluster's Dask logs go: a file, not the notebook.

Dask's scheduler, nannies and workers log to stderr, and a notebook shows
stderr in red under whichever cell was running: a worker's heartbeat failing
as the cluster closes, the scheduler's notice that a killed device took its
data with it, a task that failed because its stage went with its device
(which edgelab then loads again). edgelab says what matters in its own lines
(a device lost, how long until it was back, the run repeated), so an embedded
cluster sends Dask's records to ``log_path()`` instead: warnings and errors
of the scheduler and nannies (this process) and of every worker process,
restarted ones included. Only a critical record still reaches stderr. Other
libraries' logging, and a cluster the user attaches to, are left as they are.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from distributed import WorkerPlugin

#: What reaches stderr from an embedded cluster's Dask loggers (its ``silence_logs``).
STDERR_LEVEL = logging.CRITICAL
#: What the log file keeps.
FILE_LEVEL = logging.WARNING
PLUGIN_NAME = "edgelab-cluster-log"
_FORMAT = "%(asctime)s %(process)d %(name)s %(levelname)s: %(message)s"


def log_path() -> Path:
    """``EDGELAB_CLUSTER_LOG``, or ``dask.log`` in the cache directory."""
    from edgelab.common.paths import cache_dir

    return Path(os.environ.get("EDGELAB_CLUSTER_LOG") or cache_dir() / "dask.log")


class _FileHandler(logging.Handler):
    """A file handler that is not a ``StreamHandler``: Dask's ``silence_logs`` lowers those to its level."""

    def __init__(self, path: Path) -> None:
        super().__init__(FILE_LEVEL)
        self.path = str(path.resolve())
        self._file = logging.FileHandler(path, delay=True)  # opened at the first record: a quiet run leaves no file
        self._file.setFormatter(logging.Formatter(_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:  # noqa: D102 - logging.Handler hook
        self._file.emit(record)

    def close(self) -> None:  # noqa: D102 - logging.Handler hook
        self._file.close()
        super().close()


def to_file(path: Path) -> None:
    """Send this process's Dask records of ``FILE_LEVEL`` and above to ``path`` too (once per process and path)."""
    logger = logging.getLogger("distributed")
    if any(isinstance(h, _FileHandler) and h.path == str(path.resolve()) for h in logger.handlers):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    logger.addHandler(_FileHandler(path))


class LogToFile(WorkerPlugin):
    """On every worker, restarted ones included: Dask's records to the cluster's log file."""

    name = PLUGIN_NAME

    def __init__(self, path: str) -> None:
        self.path = path

    def setup(self, worker: Any) -> None:  # noqa: D102 - WorkerPlugin hook
        to_file(Path(self.path))

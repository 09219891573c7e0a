"""Layer 0: errors, parameter checks, paths, seeding, environment, progress, the wire, the results store.

Layer 0, what every other package stands on: the error root and the one parameter check, where files go,
seeded model building, environment changes undone, progress lines, weights on the wire, and the results store.

Nothing here imports another edgelab package.
"""

from __future__ import annotations

from edgelab.common import checks
from edgelab.common.errors import ClusterError, ConfigError, DataError, EdgelabError, WorkerLostError
from edgelab.common.paths import REPO_ROOT, cache_dir, reports_dir, results_dir
from edgelab.common.results import ResultsStore, StoredRun

__all__ = [
    "ClusterError",
    "ConfigError",
    "DataError",
    "EdgelabError",
    "REPO_ROOT",
    "ResultsStore",
    "StoredRun",
    "WorkerLostError",
    "cache_dir",
    "checks",
    "reports_dir",
    "results_dir",
]

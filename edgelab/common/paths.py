"""Where edgelab keeps caches, results and reports (each overridable by environment)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """Dataset and framework cache: ``EDGELAB_CACHE_DIR`` or ``data/cache``."""
    return Path(os.environ.get("EDGELAB_CACHE_DIR") or REPO_ROOT / "data" / "cache")


def results_dir() -> Path:
    """Results store: ``EDGELAB_RESULTS_DIR`` or ``data/results``."""
    return Path(os.environ.get("EDGELAB_RESULTS_DIR") or REPO_ROOT / "data" / "results")


def reports_dir() -> Path:
    """Rendered figures, tables and the manifest: ``EDGELAB_REPORTS_DIR`` or ``reports``."""
    return Path(os.environ.get("EDGELAB_REPORTS_DIR") or REPO_ROOT / "reports")

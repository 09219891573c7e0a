"""Results store: one folder per run, keyed by the parameters that produced it.

A run's key is a hash of its parameters (canonical JSON), so re-running a
notebook with the same parameters finds and reuses what was computed, and a
sweep interrupted half-way resumes where it stopped. A run is written to a
temporary folder and renamed into place, so a reader sees a whole run or none,
never a partial one. Replacing a run takes two renames (old aside, new in); if
the process dies between them, the old run stays readable from where it was
moved aside until a later write replaces it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from edgelab.common.paths import results_dir

# Bump when the meaning of stored results changes, so old runs are not reused.
SCHEMA_VERSION = 1
ARRAYS_FILE = "arrays.npz"


def run_key(params: Mapping[str, Any]) -> str:
    """Stable key of a parameter set.

    Examples
    --------
    >>> run_key({"a": 1, "b": [1, 2]}) == run_key({"b": [1, 2], "a": 1})
    True
    """
    canonical = json.dumps({"schema": SCHEMA_VERSION, **params}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass
class StoredRun:
    """A run read back from the store: its parameters, summary and tables."""

    key: str
    params: dict[str, Any]
    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


class ResultsStore:
    """Runs on disk under ``root/<key>/`` (``run.json``, one CSV per table, ``arrays.npz``)."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else results_dir()

    def path(self, params: Mapping[str, Any]) -> Path:
        """Folder of the run with these parameters."""
        return self.root / run_key(params)

    def get(self, params: Mapping[str, Any]) -> StoredRun | None:
        """The stored run for ``params``, or ``None`` if there is none."""
        folder = self._readable_folder(self.path(params))
        if folder is None:
            return None
        try:
            meta = json.loads((folder / "run.json").read_text())
            tables = {name: _read_table(folder / f"{name}.csv") for name in meta["tables"]}
            arrays: dict[str, np.ndarray] = {}
            if meta.get("arrays"):
                with np.load(folder / ARRAYS_FILE, allow_pickle=False) as held:
                    arrays = {name: held[name] for name in meta["arrays"]}
            return StoredRun(self.path(params).name, meta["params"], meta["summary"], tables, arrays)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Written by another version, or damaged: not a result. Say so, and let the run be recomputed.
            warnings.warn(
                f"stored run {folder} cannot be read ({type(exc).__name__}: {exc}); it is treated as missing "
                "and will be recomputed (its folder is replaced when the new run is stored)",
                RuntimeWarning,
                stacklevel=2,
            )
            return None

    def _readable_folder(self, final: Path) -> Path | None:
        """``final`` if it holds a run, else a run left aside by an interrupted replace."""
        if (final / "run.json").is_file():
            return final
        aside = sorted(self.root.glob(f".{final.name}-old-*/run/run.json"), key=lambda p: p.stat().st_mtime)
        return aside[-1].parent if aside else None

    def put(
        self,
        params: Mapping[str, Any],
        summary: Mapping[str, Any],
        tables: Mapping[str, pd.DataFrame],
        arrays: Mapping[str, np.ndarray] | None = None,
    ) -> StoredRun:
        """Write a run atomically; an existing run with the same key is replaced.

        ``arrays`` (weights, images, predictions) go to one ``arrays.npz`` beside the tables.
        """
        arrays = dict(arrays or {})
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.path(params)
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=self.root))
        try:
            for name, table in tables.items():
                table.to_csv(staging / f"{name}.csv", index=False)
            if arrays:
                np.savez(staging / ARRAYS_FILE, **arrays)
            meta = {
                "params": dict(params),
                "summary": dict(summary),
                "tables": sorted(tables),
                "arrays": sorted(arrays),
            }
            (staging / "run.json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))
            if final.exists():
                # Move the old run aside first so the swap itself is a single rename.
                old = Path(tempfile.mkdtemp(prefix=f".{final.name}-old-", dir=self.root))
                os.replace(final, old / "run")
                try:
                    os.replace(staging, final)
                except BaseException:
                    # Put the earlier run back; if even that is interrupted, get() finds it aside.
                    if not final.exists():
                        os.rename(old / "run", final)
                    raise
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        for leftover in self.root.glob(f".{final.name}-old-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        return StoredRun(final.name, dict(params), dict(summary), dict(tables), arrays)


def make_readable(path: str | os.PathLike[str]) -> None:
    """Give a ``mkstemp`` file (private, 0600) the mode a plain ``open()`` would: results are for reading."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write a text file so that readers see the old or the new content, never a mix."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        make_readable(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_table(path: Path) -> pd.DataFrame:
    """A stored table; an empty one (no columns: nothing happened, e.g. no recovery) reads back empty."""
    if path.stat().st_size <= 1:
        return pd.DataFrame()
    return pd.read_csv(path)

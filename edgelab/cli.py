"""Command line: ``edgelab reproduce`` runs every notebook through papermill.

``--profile smoke`` runs each notebook with the parameters it carries (sizes
that finish in minutes on a laptop); ``--profile full`` injects the paper's
sizes. Smoke results go to ``reports/`` and full ones to
``reports/full-profile/``, so a paper-sized run never overwrites the smoke
reproduction (or the other way round): each notebook writes its figures, tables
and manifest entries there, and the executed notebooks go to its ``notebooks/``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgelab.paths import REPO_ROOT, reports_dir

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
PROFILES = ("smoke", "full")
FULL_PROFILE_DIR = "full-profile"


def _experiment(notebook: Path) -> Any:
    import importlib

    return importlib.import_module(f"edgelab.experiments.{notebook.stem}")


def full_parameters(notebook: Path) -> dict[str, Any]:
    """Paper-sized parameters of a notebook (its experiment module's ``FULL_PROFILE``)."""
    return dict(_experiment(notebook).FULL_PROFILE)


def missing_data(notebook: Path) -> str | None:
    """Why a notebook cannot run here (data no source supplies), or None: its module's ``missing_data``."""
    check = getattr(_experiment(notebook), "missing_data", None)
    return check() if check is not None else None


def profile_reports_dir(profile: str, root: Path) -> Path:
    """Where a profile's reports go: ``root`` for smoke, ``root/full-profile`` for full."""
    return root if profile == "smoke" else root / FULL_PROFILE_DIR


def notebook_parameters(profile: str, notebook: Path, reports: Path) -> dict[str, Any]:
    """Papermill parameters of one notebook under a profile, writing into ``reports``.

    Smoke injects nothing: the notebook runs as committed, and its own default
    (``edgelab.paths.reports_dir``) is the smoke reports directory.
    """
    if profile == "smoke":
        return {}
    return {**full_parameters(notebook), "reports_dir": str(reports)}


def reproduce(profile: str, notebooks: Sequence[Path], *, reports: Path) -> int:
    """Execute notebooks with papermill into ``reports``; return the number that failed."""
    import papermill

    out_dir = reports / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    failures = 0
    for nb in notebooks:
        reason = missing_data(nb)
        if reason:
            # Not a failure of the suite: the notebook's items stay "not run" in the manifest, and we say why.
            print(f"edgelab: skipping {nb.name}: {reason}", flush=True)
            continue
        params = notebook_parameters(profile, nb, reports)
        target = out_dir / nb.name
        start = time.perf_counter()
        print(f"edgelab: running {nb.relative_to(REPO_ROOT)} ({profile}) -> {target}", flush=True)
        try:
            papermill.execute_notebook(str(nb), str(target), parameters=params, cwd=str(nb.parent), progress_bar=False)
        except Exception as exc:  # report and go on with the other notebooks
            failures += 1
            print(f"edgelab: {nb.name} failed: {exc}", file=sys.stderr)
            continue
        print(f"edgelab: {nb.name} done in {time.perf_counter() - start:.0f} s", flush=True)
    return failures


def _print_manifest(root: Path) -> None:
    path = root / "manifest.json"
    if not path.is_file():
        return
    items = json.loads(path.read_text())["items"]
    print(f"\n{path}:")
    for item_id, entry in items.items():
        why = f" — {entry['why']}" if entry.get("why") else ""
        print(f"  {item_id:18} {entry['status']:10}{why}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``edgelab`` command."""
    parser = argparse.ArgumentParser(prog="edgelab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("reproduce", help="run every notebook with papermill and write reports/")
    rep.add_argument("--profile", choices=PROFILES, default="smoke")
    rep.add_argument(
        "--notebook", action="append", default=None, help="run only this notebook (name or path); may repeat"
    )
    args = parser.parse_args(argv)

    notebooks = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
    if args.notebook:
        wanted = {Path(n).stem for n in args.notebook}
        unknown = wanted - {nb.stem for nb in notebooks}
        if unknown:
            parser.error(f"--notebook {sorted(unknown)[0]!r} is not one of {[nb.stem for nb in notebooks]}")
        notebooks = [nb for nb in notebooks if nb.stem in wanted]
    reports = profile_reports_dir(args.profile, reports_dir())
    failures = reproduce(args.profile, notebooks, reports=reports)
    _print_manifest(reports)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())

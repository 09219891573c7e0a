"""Command line: ``edgelab reproduce`` runs every notebook through papermill.

``--profile smoke`` runs each notebook with the parameters it carries (sizes
that finish in minutes on a laptop); ``--profile full`` injects the paper's
sizes. Executed notebooks go to ``reports/notebooks/``; each notebook writes
its figures, tables and manifest entries to ``reports/``.
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


def full_parameters(notebook: Path) -> dict[str, Any]:
    """Paper-sized parameters of a notebook (its experiment module's ``FULL_PROFILE``)."""
    import importlib

    module = importlib.import_module(f"edgelab.experiments.{notebook.stem}")
    return dict(module.FULL_PROFILE)


def reproduce(profile: str, notebooks: Sequence[Path], *, out_dir: Path) -> int:
    """Execute notebooks with papermill; return the number that failed."""
    import papermill

    out_dir.mkdir(parents=True, exist_ok=True)
    failures = 0
    for nb in notebooks:
        params = {} if profile == "smoke" else full_parameters(nb)
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
    root = reports_dir()
    failures = reproduce(args.profile, notebooks, out_dir=root / "notebooks")
    _print_manifest(root)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())

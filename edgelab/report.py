"""The report contract: where rendered items go and what the manifest says of each.

Every rendered catalog id goes to ``reports/<doc>/<item>.<ext>`` and gets an
entry in ``reports/manifest.json``: its files, the data it ran on, the clock it
shows, whether the paper's values are shown beside, a status (``reproduced``,
``differs``, ``not judged``, each with its line why, or ``not run``), the
verdict it rests on (``edgelab.verdict``: fitted and predicted cells, checks
with their rules, noise) and the recoveries of lost devices during its runs. Later
notebooks add their ids to the same manifest; entries are merged, and the file
is replaced atomically.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from edgelab import catalog, verdict
from edgelab.errors import ConfigError
from edgelab.paths import reports_dir
from edgelab.results import atomic_write_text

STATUSES = (*verdict.STATUSES, "not run")

#: Every id of the park2020 catalog.
PARK2020_IDS = [i for i in catalog.IDS if i.startswith("park2020/")]


@dataclass
class ReportItem:
    """What the manifest records for one rendered id."""

    id: str
    files: list[str]
    data_source: dict[str, Any]
    clock: str
    paper_values_shown: bool
    status: str
    why: str = ""
    notebook: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    verdict: dict[str, Any] = field(default_factory=dict)
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    generated: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @classmethod
    def from_verdict(
        cls, item_id: str, files: list[Any], result: verdict.Verdict, *, paper_values_shown: bool, **rest: Any
    ) -> ReportItem:
        """The entry of an item whose status is its verdict's: status, why and the verdict itself from ``result``.

        ``rest`` holds the other fields (data_source, clock, notebook, parameters, recoveries).
        """
        return cls(
            item_id,
            [str(f) for f in files],
            paper_values_shown=paper_values_shown,
            status=result.status,
            why=result.why,
            verdict=result.to_dict(),
            **rest,
        )

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ConfigError("status", self.status, f"one of {', '.join(STATUSES)}")
        if self.status in ("differs", "not judged") and not self.why:
            raise ConfigError("why", self.why, f"one line saying why the item {self.status}")


def item_path(item_id: str, ext: str, root: Path | None = None) -> Path:
    """``reports/<doc>/<item>.<ext>`` for a catalog id such as ``park2020/table1``."""
    doc, _, item = item_id.partition("/")
    if not doc or not item or "/" in item:
        raise ConfigError("item_id", item_id, "'<doc>/<item>', e.g. 'park2020/table1'")
    return (root or reports_dir()) / doc / f"{item}.{ext}"


def placeholder(item_id: str) -> dict[str, Any]:
    """The manifest entry of an id nothing has rendered: not run, and the work that will render it."""
    return {
        "id": item_id,
        "files": [],
        "status": "not run",
        "why": catalog.not_yet(item_id),
        "paper_values_shown": False,
    }


def update_manifest(items: list[ReportItem], *, root: Path | None = None, known_ids: list[str] | None = None) -> Path:
    """Merge ``items`` into ``reports/manifest.json``; every catalog id never rendered is listed as not run.

    ``known_ids`` is kept for callers that name their document's ids; every
    catalog id (``edgelab.catalog.IDS``) is listed whether named or not.
    """
    root = root or reports_dir()
    path = root / "manifest.json"
    manifest: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {"items": {}}
    before = json.dumps(manifest.get("items"), sort_keys=True)
    entries: dict[str, Any] = manifest.setdefault("items", {})
    for item_id in dict.fromkeys([*catalog.IDS, *(known_ids or [])]):
        entry = entries.get(item_id)
        # A placeholder written by an older version says less than today's; a notebook's own "not run" stays.
        if entry is None or (entry["status"] == "not run" and not entry.get("files") and not entry.get("notebook")):
            entries[item_id] = placeholder(item_id)
    for item in items:
        entry = asdict(item)
        entry["files"] = [str(Path(f).resolve().relative_to(root.resolve())) for f in item.files]
        entries[item.id] = entry
    manifest["items"] = dict(sorted(entries.items()))
    if path.is_file() and json.dumps(manifest["items"], sort_keys=True) == before:
        return path  # nothing new: the file and its date stay (drawing the page must not touch a committed manifest)
    manifest["updated"] = datetime.now(UTC).isoformat(timespec="seconds")
    atomic_write_text(path, json.dumps(manifest, indent=1) + "\n")
    return path

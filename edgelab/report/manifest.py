"""The report contract: where rendered items go and what the manifest says of each.

Every rendered catalog id goes to ``reports/<doc>/<item>.<ext>`` and gets an
entry in ``reports/manifest.json``: its files, the data it ran on, the clock it
shows, whether the paper's values are shown beside, the verdict the one policy
gave it (``edgelab.report.verdict``: status, evidence, fitted and predicted cells,
modelling choices, checks with their kinds and rules, noise), how its run is
smaller than the paper's, and the recoveries of lost devices during its runs.
An id nothing rendered is ``not run``. Later notebooks add their ids to the
same manifest; entries are merged, and the file is replaced atomically. An
item whose correctness check failed is written, then raises
``WrongResultError``, so the notebook that made it fails.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from edgelab.common.errors import ConfigError, EdgelabError
from edgelab.common.paths import reports_dir
from edgelab.common.results import atomic_write_text
from edgelab.report import catalog, verdict

STATUSES = (*verdict.STATUSES, "not run")

#: Every id of the park2020 catalog.
PARK2020_IDS = [i for i in catalog.IDS if i.startswith("park2020/")]


@dataclass
class ReportItem:
    """What the manifest records for one rendered id: its files, and a verdict that only the policy makes.

    The status and its line why are the verdict's (``edgelab.report.verdict.decide``);
    no item can carry a status the policy did not give it. ``reduction`` says
    how the run is smaller than the paper's (empty at the paper's size).
    """

    id: str
    files: list[str]
    verdict: verdict.Verdict
    data_source: dict[str, Any]
    clock: str
    paper_values_shown: bool
    notebook: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    reduction: str = ""
    generated: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @classmethod
    def from_verdict(
        cls, item_id: str, files: list[Any], result: verdict.Verdict, *, paper_values_shown: bool, **rest: Any
    ) -> ReportItem:
        """The entry of an item judged by ``result``; ``rest`` holds data_source, clock, notebook, parameters ..."""
        return cls(item_id, [str(f) for f in files], result, paper_values_shown=paper_values_shown, **rest)

    def __post_init__(self) -> None:
        if not isinstance(self.verdict, verdict.Verdict):
            raise ConfigError("verdict", self.verdict, "an edgelab.report.verdict.Verdict, made by verdict.decide")
        self.files = [str(f) for f in self.files]

    @property
    def status(self) -> str:
        """The verdict's status."""
        return self.verdict.status

    @property
    def why(self) -> str:
        """The verdict's line why."""
        return self.verdict.why

    def to_dict(self) -> dict[str, Any]:
        """The manifest entry (files as given; ``update_manifest`` makes them relative to the reports)."""
        return {
            "id": self.id,
            "files": list(self.files),
            "data_source": self.data_source,
            "clock": self.clock,
            "paper_values_shown": self.paper_values_shown,
            "status": self.status,
            "why": self.why,
            "notebook": self.notebook,
            "parameters": self.parameters,
            "verdict": self.verdict.to_dict(),
            "recoveries": self.recoveries,
            "reduction": self.reduction,
            "generated": self.generated,
        }


class WrongResultError(EdgelabError):
    """A correctness check failed: the implementation computed something it must not (the item reads differs)."""


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
    catalog id (``edgelab.report.catalog.IDS``) is listed whether named or not.
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
        entry = item.to_dict()
        entry["files"] = [str(Path(f).resolve().relative_to(root.resolve())) for f in item.files]
        entries[item.id] = entry
    manifest["items"] = dict(sorted(entries.items()))
    if not (path.is_file() and json.dumps(manifest["items"], sort_keys=True) == before):
        # Unchanged, the file and its date stay (drawing the page must not touch a committed manifest).
        manifest["updated"] = datetime.now(UTC).isoformat(timespec="seconds")
        atomic_write_text(path, json.dumps(manifest, indent=1) + "\n")
    wrong = [f"{i.id} ({', '.join(c.line() for c in i.verdict.wrong)})" for i in items if i.verdict.wrong]
    if wrong:
        # Written first, so nothing computed is lost; then the notebook fails, as a wrong result must.
        raise WrongResultError("a correctness check failed: " + "; ".join(wrong))
    return path

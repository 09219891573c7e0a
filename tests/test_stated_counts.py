"""The status counts the README and docs/papers.md state are the committed manifests' counts.

A re-run that moves an id's status must move these counts with it: the
README's table still said 28 differs hours after an id had moved.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from edgelab.report import page

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"
STATUSES = ("reproduced", "consistent", "differs", "not judged", "not run")


def _counts(statuses: list[str]) -> tuple[int, ...]:
    counted = Counter(statuses)
    unknown = set(counted) - set(STATUSES)
    assert not unknown, f"statuses outside {STATUSES}: {unknown}"
    return tuple(counted[s] for s in STATUSES)


def _manifest_statuses(folder: Path, document: str = "") -> list[str]:
    items = json.loads((folder / "manifest.json").read_text())["items"]
    return [entry["status"] for item_id, entry in items.items() if item_id.startswith(document)]


def _row(text: str, label: str) -> tuple[int, ...]:
    """The numbers of the Markdown table row whose first cell starts with ``label``."""
    (line,) = [line for line in text.splitlines() if line.startswith(f"| {label}")]
    return tuple(int(cell) for cell in re.findall(r"\b\d+\b", line.split("|", 2)[2]))


def test_the_readme_states_the_smoke_full_and_page_counts() -> None:
    # Prepare
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    page_statuses = [shown.status for shown in page.collect(REPORTS)]

    # Execute
    stated = {label: _row(readme, label) for label in ("smoke", "paper-sized", "the page")}

    # Assert
    assert stated == {
        "smoke": _counts(_manifest_statuses(REPORTS)),
        "paper-sized": _counts(_manifest_statuses(REPORTS / page.FULL_PROFILE_DIR)),
        "the page": _counts(page_statuses),
    }


def test_docs_papers_states_each_documents_smoke_and_full_counts() -> None:
    # Prepare
    text = (ROOT / "docs" / "papers.md").read_text(encoding="utf-8")
    full = REPORTS / page.FULL_PROFILE_DIR

    for document in ("park2020", "zhang2018", "qiao", "jeon", "all 88"):
        prefix = "" if document == "all 88" else f"{document}/"

        # Execute: the row holds "smoke / full" pairs, status by status
        pairs = _row(text, document + " ")
        smoke, sized = pairs[0::2], pairs[1::2]

        # Assert
        assert smoke == _counts(_manifest_statuses(REPORTS, prefix)), document
        assert sized == _counts(_manifest_statuses(full, prefix)), document


def test_docs_papers_states_the_pages_counts() -> None:
    # Prepare
    text = " ".join((ROOT / "docs" / "papers.md").read_text(encoding="utf-8").split())
    shown = _counts([s.status for s in page.collect(REPORTS)])

    # Execute
    stated = re.search(
        r"The page, which shows .*? counts (\d+) reproduced, (\d+) consistent, (\d+) differs and (\d+) not judged", text
    )

    # Assert
    assert stated, "docs/papers.md no longer states the page's counts in the expected words"
    assert tuple(int(n) for n in stated.groups()) == shown[:4]
    assert shown[4] == 0, "an id the page shows as not run"

"""The survey's qualitative items: its list of abbreviations, Table 2-1 and Figure 2-1.

Qiao et al.'s chapter states these without numbers, so nothing here is judged:
the abbreviations are reference text (with the ones the chapter uses without
defining them), Table 2-1 is shown as the source has it with a column for the
measured proxy each row can have, and Figure 2-1 is drawn as the data path it
describes. The proxies (decision latency and upstream bytes, edge mode against
cloud mode; surviving a lost central worker) come from runs on the end/edge/cloud
hierarchy and from decentralized synchronization; no notebook reports them
side by side yet: the items say so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.common.paths import REPO_ROOT
from edgelab.report.manifest import ReportItem
from edgelab.report.reference import load_reference
from edgelab.report.style import markdown_table, save_figure, save_table
from edgelab.report.verdict import Noise, Verdict, decide

IDS = ["qiao/fig2-1", "qiao/table2-1", "qiao/table-abbrev"]
CLOCK = "none (the source's text; nothing measured)"
TEXT = Noise.none("the source's text: nothing measured")
HIERARCHY_PENDING = "not yet: no run reports this proxy side by side (the hierarchy runs are in zhang2018_schemes)"
# Table 2-1's proxies, row by row (the catalog's reading of what a run can measure).
PROXIES = [
    f"median decision latency, edge mode vs cloud mode (fig2-1) — {HIERARCHY_PENDING}",
    f"raw bytes leaving the device tier, edge mode vs cloud mode — {HIERARCHY_PENDING}",
    "whether a run finishes when the central worker stops (decentralized all-reduce or gossip) — not yet: "
    "decentralized synchronization is open work",
    "qualitative, not measured (no honest computed proxy)",
]
# Abbreviations the chapter uses beyond its list (the catalog's qiao/P9).
USED_UNDEFINED = ("DDNN", "DGC", "ESGD", "QSGD", "MoDNN", "5G", "AWS")
#: The chapter's text, in the documents' folder.
CHAPTER = "qiao-edge-distributed-intelligence.txt"


@dataclass(frozen=True)
class SurveyParams:
    """Where the documents' text is (default: ``../shared/papers`` beside the repository, when present)."""

    papers_dir: str | None = None


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = SurveyParams


@dataclass(frozen=True)
class SurveyPlan:
    """The chapter's text, if found: the abbreviations check reads it."""

    params: SurveyParams
    chapter: Path
    chapter_text: str | None

    def describe(self) -> str:
        """Where the chapter's text was read from, or that it was not found."""
        found = self.chapter if self.chapter_text is not None else "not found (the abbreviations check is left out)"
        return f"chapter text: {found}"


def prepare(papers_dir: str | None = None) -> SurveyPlan:
    """Read the chapter's text from ``papers_dir`` when it is there."""
    params = SurveyParams(papers_dir)
    chapter = Path(papers_dir or REPO_ROOT.parent / "shared" / "papers") / CHAPTER
    return SurveyPlan(params, chapter, chapter.read_text(encoding="utf-8") if chapter.is_file() else None)


def plan_facts(plan: SurveyPlan) -> str:
    """What nbval checks: the source's rows (the abbreviations, Table 2-1's value properties)."""
    rows = benefits()["value property"].to_string(index=False)
    return f"{abbreviations().to_string(index=False)}\n{rows}"


def _wide(item_id: str) -> pd.DataFrame:
    """A tidy reference table (id,row,column,value) as one row per source row."""
    rows = load_reference(item_id)
    rows = rows[rows["row"] != "all"]
    wide = rows.pivot(index="row", columns="column", values="value")
    wide.index = wide.index.astype(int)
    return wide.sort_index().reset_index(drop=True)


def abbreviations() -> pd.DataFrame:
    """The chapter's list of abbreviations, as the source has it."""
    return _wide("qiao/table-abbrev")[["abbreviation", "expansion"]]


def benefits() -> pd.DataFrame:
    """Table 2-1 with the measured-proxy column, one row per value property."""
    table = _wide("qiao/table2-1")[["value_property", "description_paraphrase"]].copy()
    table.columns = ["value property", "description (paraphrase)"]
    table["measured proxy"] = PROXIES
    return table


def undefined_in(text: str, defined: list[str]) -> list[str]:
    """Which of ``USED_UNDEFINED`` appear in ``text`` as words and are not in ``defined``."""
    return [a for a in USED_UNDEFINED if a not in defined and re.search(rf"\b{re.escape(a)}\b", text)]


def draw_data_path() -> Any:
    """Figure 2-1 as the data path it describes: devices -> edge -> cloud, raw data up vs decisions up."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.4))
    ax.set_axis_off()
    boxes = {"IoT devices": 0.1, "edge": 0.5, "cloud": 0.9}
    for name, x in boxes.items():
        ax.text(x, 0.5, name, ha="center", va="center", fontsize=12, bbox={"boxstyle": "round", "fc": "#eef"})
    arrows = [
        (0.17, 0.43, 0.66, "raw records (cloud mode)"),
        (0.57, 0.83, 0.66, "raw records (cloud mode)"),
        (0.17, 0.43, 0.34, "raw records (edge mode)"),
        (0.57, 0.83, 0.34, "decisions + anomalies (edge mode)"),
    ]
    for x0, x1, y, label in arrows:
        ax.annotate("", xy=(x1, y), xytext=(x0, y), arrowprops={"arrowstyle": "->"})
        ax.text((x0 + x1) / 2, y + 0.05, label, ha="center", fontsize=8)
    ax.text(
        0.5,
        0.05,
        "bytes per record on each arrow: not measured yet (no run reports them per arrow)",
        ha="center",
        fontsize=8,
        style="italic",
    )
    ax.set_title("qiao/fig2-1: data analytics from edge to cloud (drawn from the text)")
    return fig


def _qualitative(why: str) -> Verdict:
    """The verdict of an item with nothing checkable: not judged (qualitative), and why."""
    return decide([], fitted=[], predicted=[], noise=TEXT, reason=why, reason_class="qualitative")


def render_report(
    root: Path, plan: SurveyPlan, results: None, *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """The notebook's items (``edgelab.papers.notebook.report``): ``render`` with the chapter's text."""
    return render(root, notebook=notebook, parameters=parameters, chapter_text=plan.chapter_text)


def render(
    root: Path, *, notebook: str, parameters: dict[str, Any], chapter_text: str | None = None
) -> list[ReportItem]:
    """Write the three items under ``root`` and return their manifest entries."""
    common: dict[str, Any] = {
        "data_source": {"name": "qiao survey chapter", "source": "data/reference/qiao (transcribed from the catalog)"},
        "clock": CLOCK,
        "notebook": notebook,
        "parameters": parameters,
    }
    items = []

    abbrev = abbreviations()
    lines = [
        "# qiao/table-abbrev: List of Abbreviations",
        "",
        f"The source's {len(abbrev)} rows, as printed.",
        "",
        markdown_table(abbrev),
    ]
    if chapter_text is not None:
        missing = undefined_in(chapter_text, list(abbrev["abbreviation"]))
        lines += ["", f"Used in the chapter without an entry here: {', '.join(missing) or 'none found'}."]
    files = save_table(abbrev, "\n".join(lines) + "\n", "qiao/table-abbrev", root=root)
    items.append(
        ReportItem(
            "qiao/table-abbrev",
            [str(f) for f in files],
            paper_values_shown=True,
            verdict=_qualitative("reference text: nothing to measure"),
            **common,
        )
    )

    table = benefits()
    md = "\n".join(
        [
            "# qiao/table2-1: Benefits of Edge Enhanced AI",
            "",
            "Row labels as in the source; descriptions paraphrased (the catalog's); the last column is what a run "
            "can measure for each row.",
            "",
            markdown_table(table),
        ]
    )
    files = save_table(table, md + "\n", "qiao/table2-1", root=root)
    items.append(
        ReportItem(
            "qiao/table2-1",
            [str(f) for f in files],
            paper_values_shown=True,
            verdict=_qualitative("qualitative rows; no run reports their measured proxies side by side yet"),
            **common,
        )
    )

    png = save_figure(draw_data_path(), "qiao/fig2-1", root=root)
    items.append(
        ReportItem(
            "qiao/fig2-1",
            [str(png)],
            paper_values_shown=False,
            verdict=_qualitative(
                "drawn from the text; no run reports the bytes and latency of each mode side by side yet"
            ),
            **common,
        )
    )
    return items

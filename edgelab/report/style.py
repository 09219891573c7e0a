"""Shared look of every figure and the atomic writers for figures and tables."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.common.results import atomic_write_text, make_readable
from edgelab.report.manifest import item_path

PAPER_STYLE = {"color": "black", "marker": "s", "linestyle": "--", "label": "paper"}


def data_source(provenance: dict[str, Any]) -> dict[str, Any]:
    """What an item's manifest entry says of its data: a dataset's ``provenance()`` cut to name, source and notes."""
    return {"name": provenance.get("name"), "source": provenance.get("source"), "notes": provenance.get("notes", {})}


def apply_style() -> None:
    """Seaborn theme used by every edgelab figure."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")


def save_figure(fig: Any, item_id: str, *, root: Path | None = None) -> Path:
    """Write ``fig`` to ``reports/<doc>/<item>.png`` atomically and close it."""
    path = item_path(item_id, "png", root)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_png(fig, path)


def save_png(fig: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` atomically (a reader sees the old image or the new one), readable, and close it."""
    import matplotlib.pyplot as plt

    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
        make_readable(tmp)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
        plt.close(fig)
    return path


def save_table(table: pd.DataFrame, markdown: str, item_id: str, *, root: Path | None = None) -> list[Path]:
    """Write a tidy CSV and a Markdown rendering of one table id."""
    csv_path, md_path = item_path(item_id, "csv", root), item_path(item_id, "md", root)
    atomic_write_text(csv_path, table.to_csv(index=False))
    atomic_write_text(md_path, markdown)
    return [csv_path, md_path]


def markdown_table(frame: pd.DataFrame) -> str:
    """A plain pipe table (no extra dependency)."""
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join("" if pd.isna(v) else str(v) for v in row) + " |")
    return "\n".join(lines) + "\n"

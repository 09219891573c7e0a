"""Published reference values, as transcribed in the paper catalog.

The CSV files under ``data/reference/<paper>/`` are copied from the
"Reference values" section of ``papers/catalog/<paper>.md``; nothing in them
was measured by edgelab. ``derived_checks.csv`` holds numbers the cataloguer
computed (sums, ratios, Keras layer counts), not values printed in the paper.

Papers: Park, Lee and Kim, "Hardware Resource Analysis in Distributed Training
with Edge Devices", Electronics 9(1), 28, 2020, doi 10.3390/electronics9010028
(``park2020``); Jeon, Lee, Lee, Kim and Kim, "Implementation of AIoT Edge
Cluster System via Distributed Deep Learning Pipeline", Pusan National
University (``jeon``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from edgelab.common.errors import ConfigError
from edgelab.common.paths import REPO_ROOT

REFERENCE_DIR: Path = REPO_ROOT / "data" / "reference"

# Files holding rows for many items; their `id` column says which item a row belongs to.
_SHARED_FILES = ("figure_values.csv", "prose_values.csv", "derived_checks.csv")


def _read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path)


def _known_ids() -> list[str]:
    ids: set[str] = set()
    for paper_dir in sorted(p for p in REFERENCE_DIR.iterdir() if p.is_dir()):
        for csv in paper_dir.glob("*.csv"):
            if csv.name in _SHARED_FILES:
                ids.update(_read(csv)["id"].astype(str))
            else:
                ids.add(f"{paper_dir.name}/{csv.stem}")
    return sorted(ids)


def load_reference(item_id: str) -> pd.DataFrame:
    """Return the published values for one catalog item.

    Parameters
    ----------
    item_id : str
        ``"<paper>/<item>"``. An item with a file of its own
        (``"park2020/table1"``, ``"jeon/fig4"``) returns that file; any other id
        (``"park2020/fig4a"``, ``"park2020/text"``, ``"jeon/prose-train"``,
        ``"jeon/derived-split"``) returns the rows of ``figure_values.csv``,
        ``prose_values.csv`` or ``derived_checks.csv`` whose ``id`` equals it.

    Returns
    -------
    pandas.DataFrame
        The rows exactly as transcribed, with the catalog's columns, index 0..n-1.

    Raises
    ------
    ConfigError
        If ``item_id`` names no reference item.

    Examples
    --------
    >>> table1 = load_reference("park2020/table1")
    >>> len(table1)
    20
    """
    parts = item_id.split("/") if isinstance(item_id, str) else []
    papers = {p.name for p in REFERENCE_DIR.iterdir() if p.is_dir()}
    if len(parts) != 2 or parts[0] not in papers or not parts[1]:
        raise ConfigError("item_id", item_id, _allowed())
    paper, item = parts
    paper_dir = REFERENCE_DIR / paper

    # A table has a file of its own; the aggregate files are not items themselves.
    own_file = paper_dir / f"{item}.csv"
    if own_file.name not in _SHARED_FILES and own_file.is_file():
        return _read(own_file)

    for name in _SHARED_FILES:
        shared = paper_dir / name
        if shared.is_file():
            rows = _read(shared)
            rows = rows[rows["id"] == item_id]
            if not rows.empty:
                return rows.reset_index(drop=True)

    raise ConfigError("item_id", item_id, _allowed())


def _allowed() -> str:
    return "one of " + ", ".join(_known_ids()) + f" (files under {REFERENCE_DIR})"

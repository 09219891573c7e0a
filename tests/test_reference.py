"""Reference values load correctly and match the paper catalog they were copied from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edgelab.common.errors import ConfigError
from edgelab.report.reference import REFERENCE_DIR, load_reference

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CATALOG_DIR = SHARED / "papers" / "catalog"
PAPERS = ("park2020", "jeon", "qiao", "zhang2018")

# A "### name" heading (perhaps followed by a remark such as "(deployments)"), any text, then its ```csv block.
_CSV_BLOCK = re.compile(r"^### (\S+)[^\n]*\n.*?^```csv\n(.*?)^```", re.S | re.M)


def _catalog_blocks(paper: str) -> dict[str, str]:
    text = (CATALOG_DIR / f"{paper}.md").read_text(encoding="utf-8")
    section = text.split("\n## Reference values\n", 1)[1]
    return dict(_CSV_BLOCK.findall(section))


def test_table1_rows_and_cells() -> None:
    """Table 1 has its 20 rows and the published values."""
    # Execute
    table = load_reference("park2020/table1")

    # Assert
    assert len(table) == 20
    by_key = table.set_index(["devices", "metric"])["value"]
    assert by_key[(6, "elapsed_time_s")] == 287
    assert by_key[(10, "validation_accuracy")] == pytest.approx(0.971)


def test_figure_id_selects_its_rows() -> None:
    """A figure id returns only the figure_values rows carrying that id."""
    rows = load_reference("park2020/fig4a")
    assert len(rows) == 2
    assert set(rows["id"]) == {"park2020/fig4a"}
    assert list(rows["value"]) == [20, 14]


def test_jeon_table1_rows_and_cells() -> None:
    """Jeon Table 1 has its 3 models x 3 metrics and the published values."""
    # Execute
    table = load_reference("jeon/table1")

    # Assert
    assert len(table) == 9
    by_key = table.set_index(["row", "column"])["value"]
    assert by_key[("KCS", "Processing Time")] == 60
    assert by_key[("single processor", "F1-Score")] == pytest.approx(0.91)


@pytest.mark.parametrize(("item_id", "n_rows"), [("jeon/fig4", 25), ("jeon/fig5", 24), ("jeon/fig6", 28)])
def test_jeon_listings_load_from_their_files(item_id: str, n_rows: int) -> None:
    """Each kubectl listing has a file of its own, with every cell as text."""
    # Execute
    rows = load_reference(item_id)

    # Assert
    assert len(rows) == n_rows
    assert set(rows["id"]) == {item_id}


@pytest.mark.parametrize(
    ("item_id", "row", "column", "value"),
    [
        ("jeon/prose-data", "tomato images before preprocessing", "count", 16023),
        ("jeon/prose-train", "phase 2 learning rate", "value", 0.00001),
        ("jeon/derived-split", "all stages", "macs", 299507072),
        ("jeon/derived-speedup", "KCS vs single processor", "speed_ratio", 9.67),
    ],
)
def test_jeon_shared_files_select_rows_by_id(item_id: str, row: str, column: str, value: float) -> None:
    """prose_values.csv and derived_checks.csv are shared files keyed by their id column."""
    # Execute
    rows = load_reference(item_id)

    # Assert
    assert set(rows["id"]) == {item_id}
    cell = rows.set_index(["row", "column"]).loc[(row, column), "value"]
    assert float(cell) == pytest.approx(value)


@pytest.mark.parametrize("paper", PAPERS)
def test_files_equal_catalog_blocks(paper: str) -> None:
    """Each data/reference/<paper>/*.csv is byte-for-byte its catalog block."""
    # Prepare
    catalog = CATALOG_DIR / f"{paper}.md"
    if not catalog.is_file():
        pytest.skip(f"catalog not found at {catalog}")
    blocks = _catalog_blocks(paper)
    paths = (REFERENCE_DIR / paper).glob("*.csv")
    files = {p.stem: p.read_text(encoding="utf-8") for p in paths}

    # Assert
    assert sorted(files) == sorted(blocks)
    differing = [name for name in blocks if files[name] != blocks[name]]
    assert not differing, f"differ from {catalog}: {differing}"


@pytest.mark.parametrize(
    "item_id",
    ["park2020/table9", "park2020/fig1", "nopaper/table1", "park2020", "jeon/fig7", "jeon/derived_checks"],
)
def test_unknown_id_raises_config_error(item_id: str) -> None:
    """An unknown item id raises ConfigError naming the parameter."""
    with pytest.raises(ConfigError, match="item_id") as info:
        load_reference(item_id)
    assert info.value.parameter == "item_id"
    assert info.value.value == item_id

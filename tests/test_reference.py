"""Reference values load correctly and match the paper catalog they were copied from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edgelab.errors import ConfigError
from edgelab.reference import REFERENCE_DIR, load_reference

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CATALOG = SHARED / "papers" / "catalog" / "park2020.md"

# A "### name" heading, any text, then the ```csv block that belongs to it.
_CSV_BLOCK = re.compile(r"^### (\S+)\n.*?^```csv\n(.*?)^```", re.S | re.M)


def _catalog_blocks() -> dict[str, str]:
    text = CATALOG.read_text(encoding="utf-8")
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


@pytest.mark.skipif(not CATALOG.is_file(), reason=f"catalog not found at {CATALOG}")
def test_files_equal_catalog_blocks() -> None:
    """Each data/reference/park2020/*.csv is byte-for-byte its catalog block."""
    # Prepare
    blocks = _catalog_blocks()
    paths = (REFERENCE_DIR / "park2020").glob("*.csv")
    files = {p.stem: p.read_text(encoding="utf-8") for p in paths}

    # Assert
    assert sorted(files) == sorted(blocks)
    differing = [name for name in blocks if files[name] != blocks[name]]
    assert not differing, f"differ from {CATALOG}: {differing}"


@pytest.mark.parametrize("item_id", ["park2020/table9", "park2020/fig1", "nopaper/table1", "park2020"])
def test_unknown_id_raises_config_error(item_id: str) -> None:
    """An unknown item id raises ConfigError naming the parameter."""
    with pytest.raises(ConfigError, match="item_id") as info:
        load_reference(item_id)
    assert info.value.parameter == "item_id"
    assert info.value.value == item_id

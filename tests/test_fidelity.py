"""reports/fidelity.csv: each cell's paper and emulated values as its item's CSV has them, what is fitted, the page."""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from edgelab.common.paths import REPO_ROOT
from edgelab.report import fidelity
from edgelab.report import page as report_page

REPORTS = REPO_ROOT / "reports"

# How each item's CSV holds a cell, written out here again rather than taken from the module: the cell label's
# pattern (its named groups are the CSV's key columns, by position in KEYS), the paper's column, the emulated
# column, and the rows' metric.
WIDE: dict[str, tuple[str, tuple[str, ...], str, str, str]] = {
    "park2020/table3": (r"(\S+) devices=(\d+)", ("config", "devices"), "paper", "measured", "memory_usage_mb"),
    "park2020/table4": (
        r"(\S+) devices=(\d+) epoch=(\d+)",
        ("config", "devices", "epoch"),
        "paper",
        "measured",
        "elapsed_time_s",
    ),
    "park2020/fig5a": (r"(\S+) devices=(\d+)", ("config", "devices"), "paper", "measured", "elapsed_time_s"),
    "park2020/fig6b": (r"(\S+) devices=(\d+)", ("config", "devices"), "paper", "measured", "memory_usage_mb"),
    "zhang2018/table1": (r"(\w+)/(\S+)", ("tier", "network"), "report_ms", "report_ms", ""),
    "zhang2018/table4": (
        r"encrypt at (\w+) latency=([\d.]+)s",
        ("encrypt at", "latency (s)"),
        "report overhead (%)",
        "clock overhead (%)",
        "",
    ),
    "zhang2018/table5": (r"(\w+) failures=(\d+)", ("method", "failures"), "report_s", "duration_s", ""),
    "jeon/table1": (r"(.+)", ("model",), "paper_ratio", "vs_kcs_time_ratio", ""),
}
# Long CSVs (series, value): the emulated series and the metric; a cell is its device count.
LONG = {
    "park2020/table1": ("full device_model", "elapsed_time_s"),
    "park2020/table2": ("full device_model", "elapsed_time_s"),
    "park2020/fig4b": ("measured full device_model", "memory_usage_mb"),
}


def _value(text: Any) -> float:
    """A CSV cell as a number: "6.51 s" is 6.51."""
    return float(str(text).strip().removesuffix(" s"))


def _same(column: pd.Series, wanted: str) -> pd.Series:
    try:
        return pd.to_numeric(column, errors="coerce") == float(wanted)
    except ValueError:
        return column.astype(str) == wanted


def _wide_values(csv: pd.DataFrame, item_id: str, cell: str) -> tuple[float, float]:
    pattern, keys, paper, emulated, metric = WIDE[item_id]
    match = re.fullmatch(pattern, cell)
    assert match, f"{item_id}: cell {cell!r} is not {pattern}"
    mask = pd.Series(True, index=csv.index)
    if metric:
        mask &= csv["metric"] == metric
    for key, wanted in zip(keys, match.groups(), strict=True):
        mask &= _same(csv[key], wanted)
    (row,) = csv[mask].to_dict("records")
    return _value(row[paper]), _value(row[emulated])


def _long_values(csv: pd.DataFrame, item_id: str, cell: str) -> tuple[float, float]:
    series, metric = LONG[item_id]
    devices = int(re.fullmatch(r"devices=(\d+)", cell).group(1))  # type: ignore[union-attr]
    mine = csv[(csv["metric"] == metric) & (csv["devices"] == devices)]
    (paper,) = mine[mine["series"] == "paper"]["value"]
    repeats = mine[mine["series"] == series]["value"].tolist()
    return float(paper), statistics.median(repeats)


def _sync_async_values(csv: pd.DataFrame, cell: str) -> tuple[float, float]:
    """park2020/fig3a: the paper's "async" row against the measured dist_async ("ps_async") repeats."""
    model, method, what = re.fullmatch(r"(\w+) (sync|dist_async): (time|sync minus async time)", cell).groups()  # type: ignore[union-attr]
    metric = "mean_device_s" if what == "time" else "sync_minus_async_s"
    names = {
        "paper": "ps_sync" if method == "sync" else "async",
        "measured": "ps_sync" if method == "sync" else "ps_async",
    }
    mine = csv[(csv["model"] == model) & (csv["metric"] == metric)]
    (paper,) = mine[(mine["series"] == "paper") & (mine["strategy"] == names["paper"])]["value"]
    repeats = mine[(mine["series"] == "measured") & (mine["strategy"] == names["measured"])]["value"].tolist()
    return float(paper), statistics.median(repeats)


def _item_values(item_id: str, csv: pd.DataFrame, cell: str) -> tuple[float, float]:
    if item_id in LONG:
        return _long_values(csv, item_id, cell)
    if item_id == "park2020/fig3a":
        return _sync_async_values(csv, cell)
    if item_id == "zhang2018/table2":  # its key column joins the tier and the network
        if cell.endswith(" inference"):  # the tier's inference: one cell, the same on each of its latency's rows
            tier, network = cell.removesuffix(" inference").split("/")
            rows = csv[csv["device, network"] == f"{tier}, {network}"]
            pairs = zip(rows["report inference (ms/image)"], rows["clock inference (ms/image)"], strict=True)
            ((paper, clock),) = set(pairs)
            return paper, clock
        tier, network, latency = re.fullmatch(r"(\w+)/(\S+) latency=([\d.]+)s", cell).groups()  # type: ignore[union-attr]
        mask = (csv["device, network"] == f"{tier}, {network}") & (csv["latency (s)"] == float(latency))
        (row,) = csv[mask].to_dict("records")
        return row["report processing (ms/image)"], row["clock (ms/image)"]
    return _wide_values(csv, item_id, cell)


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return fidelity.collect(REPORTS)


def test_every_cell_holds_the_values_of_its_items_own_csv(rows: pd.DataFrame) -> None:
    # Prepare: every item the module reads has a rule of its own here
    assert set(rows["id"]) <= set(WIDE) | set(LONG) | {"zhang2018/table2", "park2020/fig3a"}
    assert len(rows) > 40

    for row in rows.to_dict("records"):
        # Execute: the item's CSV, read here
        csv = pd.read_csv(REPORTS / row["source"])
        paper, emulated = _item_values(row["id"], csv, row["cell"])

        # Assert
        assert row["paper"] == pytest.approx(paper, rel=1e-12), row
        assert row["emulated"] == pytest.approx(emulated, rel=1e-12), row


def test_the_committed_table_is_the_one_the_committed_items_give(rows: pd.DataFrame) -> None:
    # Execute: reports/fidelity.csv as committed (written by `edgelab report` or a reproduction)
    written = pd.read_csv(REPORTS / fidelity.CSV_NAME, keep_default_na=False)

    # Assert: the same cells in the same order, the same values and labels (a stale table fails here)
    assert list(zip(written["id"], written["cell"], strict=True)) == list(zip(rows["id"], rows["cell"], strict=True))
    for column in ("paper", "emulated", "abs_error"):
        assert written[column].astype(float).tolist() == pytest.approx(rows[column].astype(float).tolist(), rel=1e-9)
    for column in ("fitted", "paper_inconsistent", "profile", "source"):
        assert written[column].tolist() == rows[column].tolist(), column


def test_every_source_that_ran_gives_cells_and_the_paper_sized_run_wins(rows: pd.DataFrame) -> None:
    full = json.loads((REPORTS / "full-profile" / "manifest.json").read_text())["items"]
    for source in fidelity.SOURCES:
        mine = rows[rows["id"] == source.id]
        in_full = f"{source.id}.csv" in (full.get(source.id, {}).get("files") or [])
        if in_full:
            assert set(mine["profile"]) == {"full"}, source.id
            assert set(mine["source"]) == {f"full-profile/{source.id}.csv"}
        elif (REPORTS / f"{source.id}.csv").is_file():
            assert set(mine["profile"]) == {"smoke"}, source.id
        if in_full or (REPORTS / f"{source.id}.csv").is_file():
            assert len(mine) > 0, f"{source.id}: its CSV is there but no cell was read (a column renamed?)"


def test_the_fitted_cells_are_the_clocks_own(rows: pd.DataFrame) -> None:
    from edgelab.emulation.device_model import FIT_CELLS
    from edgelab.emulation.tier_clock import zhang2018_calibration
    from edgelab.papers.park2020.hardware_figures import fitted_cells

    # Prepare: the device model is fitted on the 1-device time of each of its cells' items, the memory model's
    # framework footprint on fig4b's one device
    park = rows[rows["id"].str.startswith("park2020/")]
    expected = {(cell[0], "devices=1") for cells in FIT_CELLS.values() for cell in cells}
    expected |= {("park2020/fig4b", f"devices={n}") for n in fitted_cells("park2020/fig4b")}
    tiers = rows[rows["id"].str.startswith("zhang2018/")]

    # Assert
    assert set(map(tuple, park[park["fitted"] == "yes"][["id", "cell"]].to_numpy())) == expected
    assert set(park["fitted"]) == {"yes", "no"}
    fitted_on = set(zhang2018_calibration().fitted_on)
    assert (tiers["fitted"] == "yes").tolist() == tiers["id"].isin(fitted_on).tolist()
    assert set(rows[~rows["id"].str.startswith(("park2020/", "zhang2018/"))]["fitted"]) == {"no"}


def test_the_error_is_relative_to_the_paper_and_the_summary_counts_predictions_only(rows: pd.DataFrame) -> None:
    # Execute
    summary = fidelity.summarize(rows).set_index(["id", "metric"])

    # Assert: |e - p| / p on every cell
    for row in rows.to_dict("records"):
        assert row["abs_error"] == pytest.approx(abs(row["emulated"] - row["paper"]) / row["paper"])
    # a summary's errors are over its cells that are neither fitted nor paper-inconsistent, one row per metric
    assert summary.index.is_unique and len(summary) > rows["id"].nunique()  # zhang2018/table2 has two metrics
    for item_id, group in rows.groupby(["id", "metric"]):
        records = group.to_dict("records")
        errors = [r["abs_error"] for r in records if r["fitted"] == "no" and r["paper_inconsistent"] == ""]
        assert summary.loc[item_id, "predicted"] == len(errors)
        assert summary.loc[item_id, "cells"] == len(group)
        if errors:
            assert summary.loc[item_id, "median_error"] == pytest.approx(statistics.median(errors))
            assert summary.loc[item_id, "worst_error"] == pytest.approx(max(errors))
        else:
            assert math.isnan(summary.loc[item_id, "median_error"])


def test_the_cells_the_paper_contradicts_itself_on_are_marked_with_why(rows: pd.DataFrame) -> None:
    marked = rows[rows["paper_inconsistent"] != ""].set_index(["id", "cell"])["paper_inconsistent"]

    assert "P15" in marked[("park2020/table3", "32x128 devices=10")]
    assert "9.67" in marked[("jeon/table1", "single processor")]
    # the ensemble's time, given three ways: every reading named beside the table's
    ensemble = marked[("jeon/table1", "ensemble (5 binary)")]
    assert "P4" in ensemble and all(reading in ensemble for reading in ("4.33x", "5 minutes", "3.33x"))
    jeon = rows[rows["id"] == "jeon/table1"].set_index("cell")
    assert jeon.loc["ensemble (5 binary)", "paper"] == 4.33  # the table's reading is the one kept in the cell
    assert jeon.loc["single processor", "paper"] == 9.67  # the 9.67x ratio, beyond the 5x of 5 stages
    assert jeon.loc["single processor", "paper"] > 5
    assert ("park2020/table3", "32x64 devices=10") not in marked.index


# ---------------------------------------------------------------- the extraction, on made-up CSVs


def test_a_long_and_a_wide_csv_give_one_cell_each_with_both_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: a long CSV with repeats, a wide one with a cell the paper has no value for, one it gives as Inf,
    # one emulated as "never" and one whose paper contradicts itself
    long_csv = tmp_path / "full-profile" / "demo" / "long.csv"
    long_csv.parent.mkdir(parents=True)
    long_csv.write_text(
        "series,devices,metric,value,repeat\n"
        "paper,1,elapsed_time_s,100,\npaper,2,elapsed_time_s,150,\npaper,3,elapsed_time_s,999,\n"
        "clock,1,elapsed_time_s,90,0\nclock,1,elapsed_time_s,120,1\nclock,1,elapsed_time_s,95,2\n"
        "clock,2,elapsed_time_s,150,0\nother,3,elapsed_time_s,5,0\npaper,1,accuracy,0.9,\nclock,1,accuracy,0.8,0\n"
    )
    wide_csv = tmp_path / "demo" / "wide.csv"
    wide_csv.parent.mkdir(parents=True)
    wide_csv.write_text(
        "method,failures,report_s,duration_s\nA,0,20,10.00 s\nA,1,Inf,never\nA,2,,5 s\nA,3,40,60 s\nB,0,-,1 s\n"
    )
    # the full profile's manifest does not list demo/wide: its smoke CSV is read
    (tmp_path / "full-profile" / "manifest.json").write_text(
        json.dumps({"items": {"demo/long": {"files": ["demo/long.csv"]}, "demo/wide": {"files": []}}})
    )
    sources = (
        fidelity.Source("demo/long", "elapsed_time_s", "paper", "clock", "devices={devices}", "pi3b",
                        "metric == 'elapsed_time_s'", long=True, fitted="devices == 1"),
        fidelity.Source("demo/wide", "elapsed_time_s", "report_s", "duration_s", "{method} failures={failures}", "end"),
    )  # fmt: skip
    monkeypatch.setitem(fidelity.PAPER_INCONSISTENT, ("demo/wide", "A failures=3"), "made up: a copied cell")

    # Execute
    got = fidelity.collect(tmp_path, sources).set_index(["id", "cell"])

    # Assert: only the cells with both values; a long cell's repeats at their median; numbers out of "10.00 s"
    assert list(got.index) == [
        ("demo/long", "devices=1"),
        ("demo/long", "devices=2"),
        ("demo/wide", "A failures=0"),
        ("demo/wide", "A failures=3"),
    ]
    assert got.loc[("demo/long", "devices=1"), ["paper", "emulated"]].tolist() == [100, 95]
    assert got.loc[("demo/wide", "A failures=0"), ["paper", "emulated", "abs_error"]].tolist() == [20, 10, 0.5]
    assert got.loc[("demo/long", "devices=1"), "fitted"] == "yes"
    assert got.loc[("demo/long", "devices=2"), "fitted"] == "no"
    assert got.loc[("demo/wide", "A failures=3"), "paper_inconsistent"] == "made up: a copied cell"
    assert got.xs("demo/long")["profile"].unique().tolist() == ["full"]
    assert got.xs("demo/wide")["profile"].unique().tolist() == ["smoke"]
    assert got.xs("demo/wide")["source"].unique().tolist() == ["demo/wide.csv"]
    summary = fidelity.summarize(got.reset_index()).set_index("id")
    assert summary.loc["demo/long", ["cells", "fitted", "predicted"]].tolist() == [2, 1, 1]
    assert summary.loc["demo/wide", ["cells", "paper_inconsistent", "predicted", "worst_error"]].tolist() == [
        2,
        1,
        1,
        0.5,
    ]


# ---------------------------------------------------------------- the page


def test_the_page_has_the_section_its_figure_and_the_contradictions_apart(tmp_path: Path) -> None:
    # Prepare: four items' paper-sized CSVs, as committed (Table 3's memory and Zhang's Table 2 processing times
    # are outside the core set, Table 2's inference times inside)
    for item_id in ("park2020/table1", "jeon/table1", "park2020/table3", "zhang2018/table2"):
        target = tmp_path / "full-profile" / f"{item_id}.csv"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPORTS / "full-profile" / f"{item_id}.csv", target)

    # Execute
    page = report_page.render(tmp_path).read_text()

    # Assert
    heading = '<h2 id="fidelity">How well the emulator predicts</h2>'
    section = page[page.index(heading) + len(heading) :]
    section = section[: section.index("<h2")]
    assert '<img src="fidelity.png"' in section
    assert (tmp_path / "fidelity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<td>park2020/table1</td>" in section and "<td>jeon/table1</td>" in section
    assert "predicted cells: median error" in section
    apart = section[section.index("Left apart") :]
    assert "jeon/table1 single processor" in apart and "9.67x" in apart
    written = pd.read_csv(tmp_path / "fidelity.csv", keep_default_na=False)
    assert set(written["id"]) == {"park2020/table1", "jeon/table1", "park2020/table3", "zhang2018/table2"}
    predicted = written[(written["fitted"] == "no") & (written["paper_inconsistent"] == "")]
    core = predicted[~predicted["metric"].isin(["memory_mb", "processing_ms_per_image"])]
    assert (core["id"] == "zhang2018/table2").sum() == 3  # one inference time per tier
    assert 0 < len(core) < len(predicted)
    assert f"Over the {len(predicted)} predicted cells: median error {predicted['abs_error'].median():.1%}" in section
    assert (
        f"Over the {len(core)} predicted training, inference and pipeline times"
        in " ".join(section.split())  # the sentence is wrapped in the page
    )
    assert f"median error {core['abs_error'].median():.1%}, worst {core['abs_error'].max():.1%}" in " ".join(
        section.split()
    )
    assert page.count('<section class="item"') == 88  # the section is not counted as an id


def test_with_no_cell_there_is_no_section_and_no_figure(tmp_path: Path) -> None:
    (tmp_path / "fidelity.png").write_bytes(b"stale")

    page = report_page.render(tmp_path).read_text()

    assert 'id="fidelity"' not in page
    assert not (tmp_path / "fidelity.png").exists()
    assert pd.read_csv(tmp_path / "fidelity.csv").empty

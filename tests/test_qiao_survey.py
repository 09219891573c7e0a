"""The survey's qualitative items: the source's rows exactly, and nothing claimed as measured."""

from __future__ import annotations

from pathlib import Path

from edgelab.papers.qiao import survey as qiao_survey


def test_abbreviations_are_the_sources_22_rows_in_order() -> None:
    # Execute
    table = qiao_survey.abbreviations()

    # Assert
    assert len(table) == 22
    assert list(table.iloc[0]) == ["AI", "Artificial Intelligence"]
    assert list(table.iloc[-1]) == ["VM", "Virtual Machine"]


def test_benefits_keep_the_four_row_labels_and_claim_no_measurement() -> None:
    # Execute
    table = qiao_survey.benefits()

    # Assert
    assert list(table["value property"]) == [
        "Lower response time",
        "Higher privacy and security",
        "Self-organized",
        "Higher flexibility",
    ]
    assert all("not yet" in p or "not measured" in p for p in table["measured proxy"])


def test_undefined_abbreviations_are_found_as_whole_words_only() -> None:
    # Execute
    found = qiao_survey.undefined_in("QSGD and DGC compress; AWSOME is not AWS-free; 5Ghz", ["DGC"])

    # Assert: DGC is defined, AWSOME and 5Ghz are other words; AWS- is the word AWS
    assert found == ["QSGD", "AWS"]


def test_render_writes_the_three_items_not_judged(tmp_path: Path) -> None:
    # Execute
    items = qiao_survey.render(tmp_path, notebook="notebooks/qiao_survey.ipynb", parameters={}, chapter_text="DDNN")

    # Assert
    assert [i.id for i in items] == ["qiao/table-abbrev", "qiao/table2-1", "qiao/fig2-1"]
    assert {i.status for i in items} == {"not judged"}
    assert {i.verdict.reason_class for i in items} == {"qualitative"} and not any(i.verdict.checks for i in items)
    assert all(Path(f).is_file() for i in items for f in i.files)
    assert "without an entry here: DDNN." in (tmp_path / "qiao" / "table-abbrev.md").read_text()

"""The project's own list of catalog ids: complete, in order, and every id accounted for in the report."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edgelab import cli
from edgelab.common.errors import ConfigError
from edgelab.common.paths import REPO_ROOT
from edgelab.report import catalog


def _shared_catalog() -> Path:
    env = os.environ.get("EDGELAB_PAPERS_DIR")
    papers = Path(env) if env else REPO_ROOT.parent / "shared" / "papers"
    return papers / "catalog"


def test_the_list_holds_88_distinct_ids_of_four_documents() -> None:
    # Assert
    assert len(catalog.IDS) == 88
    assert len(set(catalog.IDS)) == 88
    assert {i.partition("/")[0] for i in catalog.IDS} == set(catalog.DOCUMENTS)


def test_the_list_is_the_shared_catalog_in_its_order() -> None:
    folder = _shared_catalog()
    if not folder.is_dir():
        pytest.skip(f"no paper catalog at {folder} (set EDGELAB_PAPERS_DIR)")

    # Execute
    transcribed = catalog.read_catalog(folder)

    # Assert
    assert list(catalog.IDS) == transcribed


def test_every_id_is_rendered_by_a_notebook_or_planned() -> None:
    # Execute
    rendered = {i for ids in cli.NOTEBOOK_IDS.values() for i in ids}
    unaccounted = [i for i in catalog.IDS if i not in rendered and i not in catalog.PLANNED]

    # Assert: each id has exactly one of the two
    assert unaccounted == []
    assert set(catalog.PLANNED) <= set(catalog.IDS)
    assert rendered.isdisjoint(catalog.PLANNED)


def test_the_committed_manifest_lists_every_id() -> None:
    # Execute
    items = json.loads((REPO_ROOT / "reports" / "manifest.json").read_text())["items"]

    # Assert: each rendered or marked not yet, none forgotten
    assert [i for i in catalog.IDS if i not in items] == []
    for item_id in catalog.IDS:
        entry = items[item_id]
        assert entry["files"] or entry["why"].startswith("not yet"), item_id


def test_select_takes_documents_and_ids_in_catalog_order() -> None:
    # Execute
    chosen = catalog.select(["jeon/table1", "park2020"])

    # Assert
    assert chosen[:22] == [i for i in catalog.IDS if i.startswith("park2020/")]
    assert chosen[22:] == ["jeon/table1"]
    assert catalog.select(None) == list(catalog.IDS)


@pytest.mark.parametrize("name", ["park2021", "park2020/table9", ""])
def test_select_names_the_unknown_entry_and_what_is_allowed(name: str) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match=rf"only={name!r}.*park2020, zhang2018, qiao, jeon"):
        catalog.select(["park2020", name])

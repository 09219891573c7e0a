"""reports/index.html: every catalog id, each with its status and files, and a page a real browser loads cleanly."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from edgelab.common.paths import REPO_ROOT, cache_dir
from edgelab.report import catalog, verdict
from edgelab.report import page as report_page
from edgelab.report.manifest import ReportItem, update_manifest


def _item(root: Path, item_id: str, status: str = "reproduced", why: str = "", notebook: str = "") -> ReportItem:
    doc, _, name = item_id.partition("/")
    md = root / doc / f"{name}.md"
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(f"# {item_id}\n\n| devices | 1 |\n|---|---|\n| paper (s) | 105 |\n| edgelab (s) | 104 |\n")
    return ReportItem(
        item_id,
        [str(md)],
        _verdict(status, why),
        data_source={"name": "mnist", "source": "data_dir"},
        clock="emulated device time",
        paper_values_shown=True,
        notebook=notebook,
    )


def _verdict(status: str, why: str) -> verdict.Verdict:
    """A verdict of ``status`` from the policy itself: one counted check that holds or fails, or none."""
    if status == "not judged":
        return verdict.decide([], fitted=[], predicted=[], noise=verdict.Noise.none("a test"), reason=why,
                              reason_class="qualitative")  # fmt: skip
    basis = verdict.Basis.STRUCTURE if status == "consistent" else verdict.Basis.COUNTED
    check = verdict.Check("bytes", status != "differs", why or "as counted", "equal", basis=basis)
    made = verdict.decide([check], fitted=[], predicted=["N=1"], noise=verdict.Noise.none("counted"))
    assert made.status == status
    return made


def test_every_id_is_listed_in_order_and_the_paper_sized_result_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: table1 at both scales, table2 at smoke scale only; one id still waits for planned work
    monkeypatch.setitem(catalog.PLANNED, "qiao/fig3-4", "the survey's synchronization strategies")
    update_manifest([_item(tmp_path, "park2020/table1"), _item(tmp_path, "park2020/table2")], root=tmp_path)
    full = tmp_path / "full-profile"
    update_manifest([_item(full, "park2020/table1", "differs", "slope off")], root=full)

    # Execute
    shown = {s.id: s for s in report_page.collect(tmp_path)}

    # Assert
    assert list(shown) == list(catalog.IDS)
    assert (shown["park2020/table1"].scale, shown["park2020/table1"].status) == ("paper-sized", "differs")
    assert shown["park2020/table1"].tables == ["full-profile/park2020/table1.md"]
    assert shown["park2020/table1"].other == "park2020/table1.md"
    assert (shown["park2020/table2"].scale, shown["park2020/table2"].other) == ("smoke", "")
    assert shown["qiao/fig3-4"].status == "not run"  # an id no notebook renders yet: the planned work named
    assert shown["qiao/fig3-4"].why.startswith("not yet: the survey's synchronization strategies")
    # an id a notebook renders, not run here: said so
    assert shown["qiao/fig3-3"].why == "not yet: its notebook has not run here"


def test_a_manifest_is_written_again_only_when_an_item_changes(tmp_path: Path) -> None:
    # Prepare: a manifest with one item, its date set back as a committed one's would be
    path = update_manifest([_item(tmp_path, "park2020/table1")], root=tmp_path)
    manifest = json.loads(path.read_text())
    manifest["updated"] = "2026-01-01T00:00:00+00:00"
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    committed = path.read_bytes()

    # Execute: what drawing the page does (nothing new), then a changed item
    update_manifest([], root=tmp_path)
    unchanged = path.read_bytes()
    update_manifest([_item(tmp_path, "park2020/table1", "differs", "slope off")], root=tmp_path)

    # Assert: the first left the file as it was, byte for byte; the second wrote the item and a new date
    assert unchanged == committed
    changed = json.loads(path.read_text())
    assert changed["items"]["park2020/table1"]["status"] == "differs"
    assert changed["updated"] != "2026-01-01T00:00:00+00:00"


def test_the_page_counts_ids_by_status_and_escapes_what_it_shows(tmp_path: Path) -> None:
    # Prepare: a reason that looks like markup must be shown, not run
    update_manifest([_item(tmp_path, "park2020/table1", "differs", "<script>alert(1)</script> slope")], root=tmp_path)

    # Execute
    page = report_page.render(tmp_path).read_text()

    # Assert
    assert page.count('<section class="item"') == 88
    assert "<tr><td>differs</td><td>1</td></tr>" in page
    assert "<tr><td>not run</td><td>87</td></tr>" in page
    # The per-paper summary: park2020's row has its one differs, its 21 other ids not run
    assert "<tr><td>park2020</td><td>0</td><td>0</td><td>1</td>" in page
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; slope" in page
    assert "<td>105</td>" in page  # the Markdown table, rendered


def test_a_failed_notebook_is_shown_and_its_items_marked(tmp_path: Path) -> None:
    # Prepare
    item = _item(tmp_path, "park2020/fig3a", "reproduced", notebook="notebooks/park2020_async.ipynb")
    update_manifest([item], root=tmp_path)
    status = {
        "park2020_async": {"status": "failed", "error": "KilledWorker: boom", "finished": "now"},
        "park2020_lenet": {"status": "done", "seconds": 85.0, "finished": "then"},
        "jeon_pipeline": {"status": "skipped", "reason": "no PlantVillage images", "finished": "then"},
    }
    (tmp_path / "reproduce.json").write_text(json.dumps(status))

    # Execute
    page = report_page.render(tmp_path).read_text()

    # Assert
    assert "KilledWorker: boom" in page and "no PlantVillage images" in page
    assert "<td>park2020_lenet</td><td>smoke</td><td>done</td><td>then</td>\n<td>85.0</td><td></td>" in page
    section = page[page.index('id="park2020-fig3a"') :]
    assert "last run failed" in section[: section.index("</section>")]


def test_images_and_links_in_a_table_point_from_the_page_to_their_files(tmp_path: Path) -> None:
    # Prepare: a Markdown item that shows its figure by a path relative to its own folder
    item = _item(tmp_path, "jeon/fig1")
    md = tmp_path / "jeon" / "fig1.md"
    md.write_text("![jeon/fig1](fig1.png) see [the data](fig1.csv), [paper](https://example.org/p) and [top](#jeon)\n")
    update_manifest([item], root=tmp_path)

    # Execute
    page = report_page.render(tmp_path).read_text()

    # Assert
    assert 'src="jeon/fig1.png"' in page and 'href="jeon/fig1.csv"' in page
    assert 'href="https://example.org/p"' in page and 'href="#jeon"' in page


def test_a_notebook_that_did_not_finish_marks_its_items(tmp_path: Path) -> None:
    # Prepare: an interrupted notebook leaves "started" behind, never "done"
    item = _item(tmp_path, "park2020/fig3a", "reproduced", notebook="notebooks/park2020_async.ipynb")
    update_manifest([item], root=tmp_path)
    (tmp_path / "reproduce.json").write_text(json.dumps({"park2020_async": {"status": "started", "finished": "t"}}))

    # Execute
    page = report_page.render(tmp_path).read_text()

    # Assert
    section = page[page.index('id="park2020-fig3a"') :]
    assert "started, did not finish" in section[: section.index("</section>")]


def test_a_listed_file_that_is_gone_is_not_shown(tmp_path: Path) -> None:
    # Prepare
    update_manifest([_item(tmp_path, "park2020/table1")], root=tmp_path)
    (tmp_path / "park2020" / "table1.md").unlink()

    # Execute
    page = report_page.render(tmp_path).read_text()

    # Assert
    assert "park2020/table1.md" not in page


# ---------------------------------------------------------------- in a real browser


def _chromium() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser and driver:
        return browser, driver
    reason = "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
    if os.environ.get("CI"):
        pytest.fail(f"CI runs the browser test: it {reason}; .ci/run installs them")
    pytest.skip(reason)


def _browser(browser: str, driver: str, tmp: str) -> Any:
    """Headless Chromium through its driver; both keep their temporary files in ``tmp`` (a short path: a socket)."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1600"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=driver, env={**os.environ, "TMPDIR": tmp})
    return webdriver.Chrome(options=options, service=service)


@pytest.mark.integration
def test_the_committed_report_loads_in_chromium_with_no_console_error_and_every_image(tmp_path: Path) -> None:
    browser, driver = _chromium()
    # Prepare: the committed reports, their page drawn afresh
    root = tmp_path / "reports"
    shutil.copytree(REPO_ROOT / "reports", root)
    page = report_page.render(root)
    screenshot = cache_dir() / "test-artifacts" / "index.png"
    screenshot.parent.mkdir(parents=True, exist_ok=True)

    # Execute: the browser's own folder (its singleton socket) in one of the test's, removed after
    scratch = tempfile.TemporaryDirectory(prefix="edgelab-chromium-", ignore_cleanup_errors=True)
    chrome = _browser(browser, driver, scratch.name)
    try:
        chrome.get(page.as_uri())
        images = chrome.execute_script(
            "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0]);"
        )
        sections = chrome.execute_script("return document.querySelectorAll('section.item').length;")
        title = chrome.title
        console = [e for e in chrome.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        chrome.save_screenshot(str(screenshot))
    finally:
        chrome.quit()
        scratch.cleanup()

    # Assert
    assert title.startswith("edgelab")
    assert sections == 88
    assert images and [src for src, ok in images if not ok] == []
    assert console == []
    assert screenshot.stat().st_size > 10_000

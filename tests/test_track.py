"""benchmarks/track.py: the headlines read back from each benchmark's JSON, the history, and the page showing it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from edgelab.report import page as report_page

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SAVED = Path(__file__).resolve().parents[1] / "reports" / "benchmarks"


@pytest.fixture(scope="module")
def track():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import track

        yield track
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_sync_headlines_are_the_saved_numbers_with_their_targets(track) -> None:  # type: ignore[no-untyped-def]
    # Prepare
    result = json.loads((SAVED / "sync.json").read_text())

    # Execute
    rows = {h["name"]: h for h in track.sync_headlines(result)}

    # Assert: overhead per device count (direct transport, 2+ devices), and the peers
    direct = {c["devices"]: c for c in result["rounds"]["summary"] if c["transport"] == "direct"}
    for n in (2, 5, 10):
        row = rows[f"sync/{n} devices: overhead / floor"]
        assert row["value"] == pytest.approx(direct[n]["overhead_over_floor"], abs=1e-4)
        assert row["met"] == (direct[n]["overhead_over_floor"] <= 1.5)
    # Assert: the least plumbing's beside it, against the same target
    bare = {r["devices"]: r for r in result["rounds"]["bare_summary"]}
    for n in (2, 5, 10):
        row = rows[f"sync/{n} devices, the least plumbing (reference): overhead / floor"]
        assert row["value"] == pytest.approx(bare[n]["overhead_over_floor"], abs=1e-4)
        assert row["met"] == (bare[n]["overhead_over_floor"] <= 1.5) and row["target"] == "<= 1.5"
    assert "sync/1 devices, the least plumbing (reference): overhead / floor" not in rows
    assert rows["sync: edgelab / MWMS steps/s"]["value"] == pytest.approx(result["mwms"]["ratio"], abs=1e-4)
    assert rows["sync: edgelab / Flower rounds/s"]["target"] == ">= 1.0"


def test_training_and_pipeline_headlines(track) -> None:  # type: ignore[no-untyped-def]
    training = json.loads((SAVED / "training.json").read_text())
    pipeline = json.loads((SAVED / "pipeline.json").read_text())

    rows = track.training_headlines(training) + track.pipeline_headlines(pipeline)

    names = [r["name"] for r in rows]
    assert names == ["training/cnn: edgelab / Keras fit", "training/mlp: edgelab / Keras fit", names[-1]]
    assert rows[-1]["value"] == pytest.approx(pipeline["A_steady_over_bound_median"], abs=1e-4)
    assert rows[1]["met"] == (training["throughput"]["models"]["mlp"]["ratio"] >= 0.9)


def test_pipelined_training_headline_is_the_worst_configuration_against_its_target(track) -> None:  # type: ignore[no-untyped-def]
    result = json.loads((SAVED / "pipeline_training.json").read_text())

    (row,) = track.pipeline_training_headlines(result)

    worst = min(m["over_ideal"] for m in result["medians"])
    assert row["value"] == pytest.approx(worst, abs=1e-4)
    assert row["met"] == (worst >= 0.8) and row["target"] == ">= 0.8"


def test_the_scale_headline_is_flower_over_edgelab_at_each_size_both_ran(track) -> None:  # type: ignore[no-untyped-def]
    summary = [
        {"devices": 10, "side": "edgelab-virtual", "flower_compiled_over_edgelab": 2.5},
        {"devices": 10, "side": "flower-compiled"},
        {"devices": 100, "side": "edgelab-virtual", "flower_compiled_over_edgelab": 1.5},  # under twice: not met
        {"devices": 1000, "side": "edgelab-virtual", "flower_compiled_over_edgelab": 0.8},
        {"devices": 10000, "side": "edgelab-virtual"},  # Flower did not run at this size: no headline
    ]
    rows = track.scale_headlines({"summary": summary})
    assert [(r["name"], r["value"], r["target"], r["met"]) for r in rows] == [
        ("scale/10 devices: Flower / edgelab s/round", 2.5, ">= 1.0", True),
        ("scale/100 devices: Flower / edgelab s/round", 1.5, ">= 2.0", False),
        ("scale/1,000 devices: Flower / edgelab s/round", 0.8, ">= 2.0", False),
    ]


def test_saved_results_are_recorded_and_the_page_shows_the_history(track, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Prepare: the saved results, recorded twice (two runs of the history)
    out = tmp_path / "benchmarks"
    shutil.copytree(SAVED, out)
    (out / "history.jsonl").unlink(missing_ok=True)

    # Execute
    assert track.main(["--saved", "--out-dir", str(out)]) == 0
    assert track.main(["--saved", "--only", "pipeline", "--out-dir", str(out)]) == 0
    perf = report_page.performance(tmp_path)
    page = report_page.render(tmp_path).read_text()

    # Assert
    assert len(perf["runs"]) == 2
    pipeline = next(r for r in perf["rows"] if r["name"].startswith("pipeline"))
    assert len(pipeline["history"]) == 2 and all(pipeline["history"])
    mwms = next(r for r in perf["rows"] if "MWMS" in r["name"])
    assert mwms["history"][1] is None  # the second run did not measure it
    assert perf["runs"][0]["benchmarks"]["sync"]["outcome"].startswith("saved, 2026-")
    assert 'id="performance"' in page and "edgelab / MWMS steps/s" in page
    # The scaling plot is on the page, and not without its file
    assert '<img src="benchmarks/sync.png"' in page and '<img src="benchmarks/scale.png"' in page
    (out / "sync.png").unlink()
    (out / "scale.png").unlink()
    page = report_page.render(tmp_path).read_text()
    assert "benchmarks/sync.png" not in page and "benchmarks/scale.png" not in page

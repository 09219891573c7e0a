"""Tests for edgelab.common.results: run keys, the atomic results store and atomic text writes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from edgelab.common.results import ResultsStore, atomic_write_text, run_key

PARAMS = {"model": "mlp", "n_devices": 2, "batch_size": 32, "seed": 0, "lr": 0.05}


def _tables(offset: float = 0.0) -> dict[str, pd.DataFrame]:
    """Two small tables of mixed dtypes."""
    return {
        "records": pd.DataFrame(
            {"round": [0, 0, 1], "device": ["pi3b-0", "pi3b-1", "pi3b-0"], "cpu_s": [0.5 + offset, 0.25, 0.125]}
        ),
        "evaluations": pd.DataFrame({"epoch": [1], "accuracy": [0.75 + offset]}),
    }


def _entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


# ---------------------------------------------------------------- run_key


def test_run_key_stable_under_key_order() -> None:
    # Prepare
    reordered = dict(reversed(list(PARAMS.items())))

    # Execute / Assert
    assert list(reordered) != list(PARAMS)
    assert run_key(reordered) == run_key(PARAMS)
    assert run_key(PARAMS) == run_key(dict(PARAMS))
    assert len(run_key(PARAMS)) == 16


@pytest.mark.parametrize(
    ("key", "value"), [("model", "cnn"), ("n_devices", 3), ("lr", 0.050001), ("seed", 1), ("extra", None)]
)
def test_run_key_changes_with_any_value(key: str, value: Any) -> None:
    # Prepare
    changed = {**PARAMS, key: value}

    # Execute / Assert
    assert run_key(changed) != run_key(PARAMS)


# ---------------------------------------------------------------- ResultsStore


def test_put_then_get_round_trips(tmp_path: Path) -> None:
    # Prepare
    store = ResultsStore(tmp_path)
    summary = {"accuracy": 0.75, "rounds": 4, "note": "smoke"}
    tables = _tables()

    # Execute
    written = store.put(PARAMS, summary, tables)
    read = store.get(dict(reversed(list(PARAMS.items()))))

    # Assert
    assert read is not None
    assert read.key == written.key == run_key(PARAMS)
    assert read.params == PARAMS
    assert read.summary == summary
    assert sorted(read.tables) == sorted(tables)
    for name, table in tables.items():
        pd.testing.assert_frame_equal(read.tables[name], table)


def test_put_replaces_existing_run(tmp_path: Path) -> None:
    # Prepare
    store = ResultsStore(tmp_path)
    store.put(PARAMS, {"accuracy": 0.1}, _tables())

    # Execute
    store.put(PARAMS, {"accuracy": 0.9}, {"evaluations": _tables(offset=0.125)["evaluations"]})
    read = store.get(PARAMS)

    # Assert: only the new run is left, with no stale table or aside folder
    assert read is not None
    assert read.summary == {"accuracy": 0.9}
    assert list(read.tables) == ["evaluations"]
    pd.testing.assert_frame_equal(read.tables["evaluations"], _tables(offset=0.125)["evaluations"])
    assert _entries(tmp_path) == [run_key(PARAMS)]
    assert _entries(tmp_path / run_key(PARAMS)) == ["evaluations.csv", "run.json"]


def _fail_after_first_table(monkeypatch: pytest.MonkeyPatch) -> None:
    real = pd.DataFrame.to_csv
    calls = {"n": 0}

    def flaky(self: pd.DataFrame, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError("disk full")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", flaky)


def test_failed_write_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare
    store = ResultsStore(tmp_path)
    _fail_after_first_table(monkeypatch)

    # Execute
    with pytest.raises(OSError, match="disk full"):
        store.put(PARAMS, {"accuracy": 0.5}, _tables())

    # Assert
    assert _entries(tmp_path) == []
    assert store.get(PARAMS) is None


def test_failed_write_keeps_earlier_run_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare
    store = ResultsStore(tmp_path)
    store.put(PARAMS, {"accuracy": 0.5}, _tables())
    _fail_after_first_table(monkeypatch)

    # Execute
    with pytest.raises(OSError, match="disk full"):
        store.put(PARAMS, {"accuracy": 0.99}, _tables(offset=0.25))
    monkeypatch.undo()
    read = store.get(PARAMS)

    # Assert
    assert _entries(tmp_path) == [run_key(PARAMS)]
    assert read is not None
    assert read.summary == {"accuracy": 0.5}
    for name, table in _tables().items():
        pd.testing.assert_frame_equal(read.tables[name], table)


def test_interrupted_swap_keeps_earlier_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: the second rename of the swap is interrupted
    store = ResultsStore(tmp_path)
    store.put(PARAMS, {"accuracy": 0.5}, _tables())
    real = os.replace
    calls = {"n": 0}

    def interrupted(src: Any, dst: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(os, "replace", interrupted)

    # Execute
    with pytest.raises(KeyboardInterrupt):
        store.put(PARAMS, {"accuracy": 0.99}, _tables(offset=0.25))
    monkeypatch.undo()

    # Assert: the earlier run is back in place and readable
    read = store.get(PARAMS)
    assert read is not None and read.summary == {"accuracy": 0.5}
    assert store.path(PARAMS).is_dir()


def test_run_left_aside_by_a_killed_swap_stays_readable(tmp_path: Path) -> None:
    # Prepare: a process killed between the two renames leaves only the aside copy
    store = ResultsStore(tmp_path)
    store.put(PARAMS, {"accuracy": 0.5}, _tables())
    aside = tmp_path / f".{store.path(PARAMS).name}-old-killed"
    aside.mkdir()
    os.replace(store.path(PARAMS), aside / "run")

    # Execute
    read = store.get(PARAMS)
    store.put(PARAMS, {"accuracy": 0.75}, _tables())

    # Assert: the aside run is read, and the next write clears it away
    assert read is not None and read.summary == {"accuracy": 0.5}
    assert _entries(tmp_path) == [store.path(PARAMS).name]
    assert store.get(PARAMS).summary == {"accuracy": 0.75}


def test_get_missing_key_returns_none(tmp_path: Path) -> None:
    # Prepare
    store = ResultsStore(tmp_path / "never-created")

    # Execute / Assert
    assert store.get(PARAMS) is None


def test_get_ignores_a_folder_without_run_json(tmp_path: Path) -> None:
    # Prepare: a half-written folder under the run's key
    (tmp_path / run_key(PARAMS)).mkdir()
    (tmp_path / run_key(PARAMS) / "records.csv").write_text("a\n1\n")

    # Execute / Assert
    assert ResultsStore(tmp_path).get(PARAMS) is None


# ---------------------------------------------------------------- atomic_write_text


def test_atomic_write_text_writes_and_leaves_no_temp_files(tmp_path: Path) -> None:
    # Prepare
    target = tmp_path / "sub" / "manifest.txt"

    # Execute
    atomic_write_text(target, "first\n")
    atomic_write_text(target, "second\n")

    # Assert
    assert target.read_text() == "second\n"
    assert _entries(target.parent) == ["manifest.txt"]


def test_atomic_write_text_leaves_the_file_readable_as_open_would(tmp_path: Path) -> None:
    # A report written atomically must not end up private to its writer (mkstemp's 0600).
    import os

    target = tmp_path / "index.html"
    mask = os.umask(0o022)
    try:
        # Execute
        atomic_write_text(target, "page\n")
    finally:
        os.umask(mask)

    # Assert
    assert target.stat().st_mode & 0o777 == 0o644


def test_atomic_write_text_failure_keeps_old_content(tmp_path: Path) -> None:
    # Prepare
    target = tmp_path / "manifest.txt"
    atomic_write_text(target, "old\n")

    # Execute: writing a non-string fails inside the write
    with pytest.raises(TypeError):
        atomic_write_text(target, 42)  # type: ignore[arg-type]

    # Assert
    assert target.read_text() == "old\n"
    assert _entries(tmp_path) == ["manifest.txt"]


def test_arrays_round_trip_exactly(tmp_path: Path) -> None:
    # Prepare: weights-like arrays of two dtypes and an empty table
    import numpy as np

    store = ResultsStore(tmp_path)
    arrays = {"w0": np.arange(6, dtype=np.float32).reshape(2, 3), "y": np.array([1, 2], dtype=np.uint8)}
    # Execute
    store.put({"k": 1}, {"s": 1}, {"empty": pd.DataFrame()}, arrays)
    back = store.get({"k": 1})
    # Assert: the same values and dtypes, and the empty table reads back empty
    assert back is not None and set(back.arrays) == {"w0", "y"}
    for name, value in arrays.items():
        np.testing.assert_array_equal(back.arrays[name], value)
        assert back.arrays[name].dtype == value.dtype
    assert back.tables["empty"].empty


def test_a_stored_run_another_version_wrote_is_missing_with_a_clear_warning(tmp_path: Path) -> None:
    # Prepare: a stored run whose run.json lacks what this version reads
    store = ResultsStore(tmp_path)
    store.put(PARAMS, {"x": 1}, {})
    meta = store.path(PARAMS) / "run.json"
    meta.write_text('{"params": {}, "old_format": true}')

    # Execute
    with pytest.warns(RuntimeWarning, match=r"cannot be read \(KeyError.*will be recomputed"):
        got = store.get(PARAMS)

    # Assert: missing, so pending again; storing the new run replaces it
    assert got is None
    store.put(PARAMS, {"x": 2}, {})
    assert store.get(PARAMS).summary == {"x": 2}

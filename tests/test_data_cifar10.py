"""Tests for the CIFAR-10 source chain: data directory, Keras download, foolbox's sample, and their checks."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import socket
import sys
import tarfile
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from edgelab.common.errors import ConfigError, CorruptDataError, DataError
from edgelab.data import cifar10 as cifar
from edgelab.data import load_dataset
from edgelab.data.cifar10 import CLASS_NAMES, load_cifar10
from edgelab.data.sources import DOWNLOAD_TIMEOUT_S

BATCH_FILES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
# README of the shared data, section CIFAR-10: class counts of the lossless subset.
SUBSET_TRAIN_COUNTS = [396, 366, 420, 384, 422, 393, 414, 385, 407, 413]
SUBSET_TEST_COUNTS = [103, 89, 100, 103, 90, 86, 112, 102, 106, 109]
SOURCE_IDS = ("data_dir:", "data_dir_jpeg:", "data_dir_lossless_subset:", "keras_download:", "package_foolbox:")


def _batch_blob(data: np.ndarray, labels: list[int], name: str) -> bytes:
    """Pickle one batch the way the official python version stores it (dict with bytes keys, protocol 2)."""
    batch = {b"batch_label": name.encode(), b"labels": labels, b"data": data, b"filenames": [b"x.png"] * len(labels)}
    return pickle.dumps(batch, protocol=2)


def _official_batches(n: int = 6) -> dict[str, tuple[np.ndarray, list[int]]]:
    """Random (N, 3072) uint8 rows and labels for the five training batches and the test batch."""
    rng = np.random.default_rng(0)
    return {
        name: (rng.integers(0, 256, (n, 3072), dtype=np.uint8), [(i + k) % 10 for i in range(n)])
        for k, name in enumerate(BATCH_FILES)
    }


def _write_folder(folder: Path, batches: dict[str, tuple[np.ndarray, list[int]]]) -> Path:
    folder.mkdir(parents=True)
    for name, (data, labels) in batches.items():
        (folder / name).write_bytes(_batch_blob(data, labels, name))
    return folder


def _write_tar(path: Path, batches: dict[str, tuple[np.ndarray, list[int]]], *, sidecar: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, (data, labels) in batches.items():
            blob = _batch_blob(data, labels, name)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    if sidecar:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        path.with_name(path.name + ".sha256").write_text(f"{digest}  {path.name}\n", encoding="utf-8")
    return path


def _write_jpeg_set(root: Path, n: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """Write a small cifar10/cifar10_jpeg_train.npz and cifar10_jpeg_test_decoded.npz; return the train images."""
    folder = root / "cifar10"
    folder.mkdir(parents=True)
    # Smooth colour gradients, so JPEG's loss stays small as on real photos.
    ramp = np.add.outer(np.arange(32), np.arange(32))[None, :, :, None] * np.array([3, 2, 1])
    images = ((ramp + np.arange(n)[:, None, None, None] * 9) % 256).astype(np.uint8)
    encoded = []
    for image in images:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="JPEG", quality=75)
        encoded.append(np.frombuffer(buffer.getvalue(), np.uint8))
    offsets = np.concatenate([[0], np.cumsum([len(e) for e in encoded])]).astype(np.int64)
    labels = (np.arange(n) % 10).astype(np.uint8)
    names = np.array(CLASS_NAMES)
    np.savez(
        folder / "cifar10_jpeg_train.npz", jpeg=np.concatenate(encoded), offsets=offsets, y=labels, label_names=names
    )
    np.savez(folder / "cifar10_jpeg_test_decoded.npz", x=images[:5], y=labels[:5], label_names=names)
    return images, labels


def _write_subset(root: Path, *, dtype: type = np.uint8, labels_to: int = 10) -> Path:
    path = root / "cifar10" / "cifar10_lossless_subset.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    x = np.zeros((20, 32, 32, 3), dtype)
    y = (np.arange(20) % labels_to).astype(np.uint8)
    np.savez(path, x_train=x, y_train=y, x_test=x[:10], y_test=y[:10], label_names=np.array(CLASS_NAMES))
    return path


def _fake_foolbox(base: Path, images: np.ndarray, labels: np.ndarray) -> Path:
    """Lay out a foolbox package (data/cifar10_NN_<label>.png plus dist-info) under `base`."""
    data = base / "foolbox" / "data"
    data.mkdir(parents=True)
    (base / "foolbox" / "__init__.py").write_text("raise ImportError('the loader must not import foolbox')\n")
    for i, (image, label) in enumerate(zip(images, labels, strict=True)):
        Image.fromarray(image).save(data / f"cifar10_{i:02d}_{label}.png")
    Image.fromarray(images[0]).save(data / "cifar100_00_49.png")  # must not be picked up
    dist = base / "foolbox-3.3.4.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: foolbox\nVersion: 3.3.4\n")
    return data


# ---------------------------------------------------------------- data directory: official python version


@pytest.mark.parametrize(
    "where", ["cifar-10-batches-py", "cifar10/cifar-10-batches-py", "cifar-10-batches-py-target/cifar-10-batches-py"]
)
def test_official_folder_is_read_as_nhwc(tmp_path: Path, where: str) -> None:
    # Prepare
    batches = _official_batches()
    _write_folder(tmp_path / where, batches)
    _write_subset(tmp_path, dtype=np.float32)  # a broken offline copy: must not even be read

    # Execute
    ds = load_cifar10(data_dir=tmp_path, allow_download=False)

    # Assert: pixel (row r, column c, channel ch) is entry ch*1024 + r*32 + c of the official row
    assert (ds.source, ds.source_path, ds.class_names) == ("data_dir", str(tmp_path / where), CLASS_NAMES)
    assert ds.x_train.shape == (30, 32, 32, 3) and ds.x_test.shape == (6, 32, 32, 3)
    assert ds.x_train.dtype == np.uint8 and ds.y_train.dtype == np.uint8 and ds.y_test.dtype == np.uint8
    data, labels = batches["data_batch_2"]
    assert ds.x_train[6 + 1, 5, 7, 2] == data[1, 2 * 1024 + 5 * 32 + 7]
    np.testing.assert_array_equal(ds.x_train[6:12], data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(ds.y_train[6:12], labels)
    np.testing.assert_array_equal(ds.y_test, batches["test_batch"][1])
    assert ds.checksum_status.startswith("unverified") and ds.full_train_size == 30
    assert ds.tried == (f"data_dir: using {tmp_path / where}",)


def test_tarball_is_read_in_place_and_verified(tmp_path: Path) -> None:
    # Prepare
    tarball = _write_tar(tmp_path / "cifar-10-python.tar.gz", _official_batches())
    before = sorted(tmp_path.rglob("*"))

    # Execute
    ds = load_cifar10(data_dir=tmp_path, allow_download=False)

    # Assert
    assert (ds.source, ds.source_path, ds.n_train, ds.n_test) == ("data_dir", str(tarball), 30, 6)
    assert ds.checksum_status == "sha256 verified against sidecar cifar-10-python.tar.gz.sha256"
    assert sorted(tmp_path.rglob("*")) == before  # nothing extracted


def test_tarball_without_reference_must_match_the_keras_hash(tmp_path: Path) -> None:
    # Prepare
    _write_tar(tmp_path / "cifar10" / "cifar-10-python.tar.gz", _official_batches(), sidecar=False)

    # Execute / Assert
    with pytest.raises(CorruptDataError, match="sha256 mismatch against the Keras published hash"):
        load_cifar10(data_dir=tmp_path, allow_download=False)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("missing", r"found none named \['test_batch'\]"),
        ("garbage", "test_batch: expected a CIFAR-10 python batch"),
        ("shape", r"expected data uint8 of shape \(N, 3072\)"),
        ("labels", r"expected y_test in 0..9, found range 5..12"),
        ("length", r"expected y_test integer of shape \(6,\)"),
    ],
)
def test_damaged_official_folder_is_rejected(tmp_path: Path, damage: str, message: str) -> None:
    # Prepare
    batches = _official_batches()
    data, labels = batches["test_batch"]
    batches["test_batch"] = {
        "shape": (data[:, :3000], labels),
        "labels": (data, [*labels[:-1], 12]),
        "length": (data, labels[:-1]),
    }.get(damage, (data, labels))
    folder = _write_folder(tmp_path / "cifar-10-batches-py", batches)
    if damage == "missing":
        (folder / "test_batch").unlink()
    if damage == "garbage":
        (folder / "test_batch").write_bytes(b"not a pickle")

    # Execute / Assert
    with pytest.raises(CorruptDataError, match=message):
        load_cifar10(data_dir=tmp_path, allow_download=False)


class _Gadget:
    """Pickles as a call of a global that is not one of numpy's array builders."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.getcwd, ())  # harmless, but any global other than numpy's array builders must be refused


def test_pickle_with_foreign_global_is_refused(tmp_path: Path) -> None:
    # Prepare
    folder = _write_folder(tmp_path / "cifar-10-batches-py", _official_batches())
    (folder / "data_batch_3").write_bytes(pickle.dumps({b"data": _Gadget(), b"labels": []}, protocol=2))

    # Execute / Assert
    with pytest.raises(CorruptDataError, match=r"data_batch_3: .*refused to load the global posix.getcwd"):
        load_cifar10(data_dir=tmp_path, allow_download=False)


# ---------------------------------------------------------------- data directory: offline copies


def test_jpeg_set_is_decoded_and_cached(tmp_path: Path) -> None:
    # Prepare
    images, labels = _write_jpeg_set(tmp_path)

    # Execute
    ds = load_cifar10(data_dir=tmp_path, allow_download=False)
    again = load_cifar10(data_dir=tmp_path, allow_download=False)

    # Assert
    assert ds.source == "data_dir_jpeg" and ds.n_train == 12 and ds.n_test == 5
    assert ds.checksum_status == "train unverified: no reference checksum; test unverified: no reference checksum"
    np.testing.assert_array_equal(ds.y_train, labels)
    assert 0 < np.abs(ds.x_train.astype(int) - images).mean() < 8  # JPEG loss only
    np.testing.assert_array_equal(ds.x_test, images[:5])
    assert "2-3 accuracy points" in ds.notes["images"] and "fixed shuffle" in ds.notes["test_order"]
    assert again.x_train is ds.x_train and not ds.x_train.flags.writeable


def test_decoded_jpegs_are_kept_on_disk_for_the_next_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import edgelab.data.cifar10 as cifar10

    # Prepare: a cache of its own; this small set counts as large enough to keep
    _write_jpeg_set(tmp_path / "data")
    monkeypatch.setenv("EDGELAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cifar10, "_DISK_CACHE_MIN_IMAGES", 1)
    monkeypatch.setattr(cifar10, "_DECODED", {})
    first = load_cifar10(data_dir=tmp_path / "data", allow_download=False)
    (kept,) = (tmp_path / "cache" / "decoded").iterdir()

    # Execute: a new process (nothing decoded in memory) that cannot decode a JPEG at all
    monkeypatch.setattr(cifar10, "_DECODED", {})
    monkeypatch.setattr(cifar10.Image, "open", lambda *_: (_ for _ in ()).throw(AssertionError("decoded again")))
    second = load_cifar10(data_dir=tmp_path / "data", allow_download=False)

    # Assert: the same pixels, read-only, from the kept copy
    np.testing.assert_array_equal(second.x_train, first.x_train)
    np.testing.assert_array_equal(second.y_train, first.y_train)
    assert not second.x_train.flags.writeable and kept.suffix == ".npz"

    # A changed file is another key: decoded again (and here, refused by the stubbed decoder)
    train = tmp_path / "data" / "cifar10" / "cifar10_jpeg_train.npz"
    os.utime(train, ns=(train.stat().st_atime_ns, train.stat().st_mtime_ns + 10**9))
    monkeypatch.setattr(cifar10, "_DECODED", {})
    with pytest.raises(AssertionError, match="decoded again"):
        load_cifar10(data_dir=tmp_path / "data", allow_download=False)


def test_corrupt_jpeg_names_the_image(tmp_path: Path) -> None:
    # Prepare
    _write_jpeg_set(tmp_path)
    path = tmp_path / "cifar10" / "cifar10_jpeg_train.npz"
    with np.load(path) as f:
        arrays = {k: f[k] for k in f.files}
    start = int(arrays["offsets"][1])
    arrays["jpeg"][start : start + 40] = 0  # overwrite image 1's header
    np.savez(path, **arrays)

    # Execute / Assert
    with pytest.raises(CorruptDataError, match=r"cifar10_jpeg_train.npz: expected image 1 to be a 32x32 JPEG"):
        load_cifar10(data_dir=tmp_path, allow_download=False)


def test_checksum_mismatch_of_offline_file_is_rejected(tmp_path: Path) -> None:
    # Prepare
    _write_subset(tmp_path)
    (tmp_path / "SHA256SUMS").write_text(f"{'0' * 64}  ./cifar10/cifar10_lossless_subset.npz\n", encoding="utf-8")

    # Execute / Assert
    with pytest.raises(CorruptDataError, match="cifar10_lossless_subset.npz: sha256 mismatch against SHA256SUMS"):
        load_cifar10(data_dir=tmp_path, allow_download=False)


def test_checksum_beside_the_files_is_used(tmp_path: Path) -> None:
    # Prepare
    path = _write_subset(tmp_path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    (path.parent / "SHA256SUMS").write_text(f"{digest}  {path.name}\n", encoding="utf-8")

    # Execute
    ds = load_cifar10(data_dir=tmp_path, allow_download=False)

    # Assert
    assert (ds.source, ds.checksum_status) == ("data_dir_lossless_subset", "sha256 verified against SHA256SUMS")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dtype": np.float32}, r"expected x_train uint8 \(N>0, 32, 32, 3\), found float32"),
        ({"labels_to": 20}, "expected y_train in 0..9, found range 0..19"),
    ],
)
def test_malformed_offline_file_is_rejected(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    # Prepare
    _write_subset(tmp_path, **kwargs)

    # Execute / Assert
    with pytest.raises(CorruptDataError, match=message):
        load_cifar10(data_dir=tmp_path, allow_download=False)


def test_offline_file_with_other_class_names_is_rejected(tmp_path: Path) -> None:
    # Prepare
    path = _write_subset(tmp_path)
    with np.load(path) as f:
        arrays = {k: f[k] for k in f.files}
    np.savez(path, **{**arrays, "label_names": np.array([f"c{i}" for i in range(10)])})

    # Execute / Assert
    with pytest.raises(CorruptDataError, match="expected label_names"):
        load_cifar10(data_dir=tmp_path, allow_download=False)


# ---------------------------------------------------------------- download, package, nothing found


def test_download_disabled_is_recorded_as_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")

    # Execute / Assert
    with pytest.raises(DataError) as info:
        load_cifar10(data_dir=tmp_path)
    assert "keras_download: skipped (allow_download=False or EDGELAB_OFFLINE=1)" in str(info.value)


def test_failed_download_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: a stand-in keras whose get_file fails like a machine without network
    def get_file(*args: Any, **kwargs: Any) -> str:
        raise OSError("network is unreachable")

    monkeypatch.setitem(sys.modules, "keras", types.SimpleNamespace(utils=types.SimpleNamespace(get_file=get_file)))

    # Execute / Assert
    with pytest.raises(DataError, match=r"keras_download: failed \(OSError: network is unreachable\)"):
        load_cifar10(data_dir=tmp_path, allow_download=True)


def test_download_is_read_verified_and_gets_a_sidecar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: a stand-in keras whose get_file "downloads" a tarball, with the publisher's hash in a sidecar
    calls: list[tuple[tuple[Any, ...], dict[str, Any], float | None]] = []

    def get_file(*args: Any, **kwargs: Any) -> str:
        calls.append((args, kwargs, socket.getdefaulttimeout()))
        return str(_write_tar(Path(kwargs["cache_dir"]) / args[0], _official_batches()))

    monkeypatch.setitem(sys.modules, "keras", types.SimpleNamespace(utils=types.SimpleNamespace(get_file=get_file)))
    root = tmp_path / "new_cache"
    before = socket.getdefaulttimeout()

    # Execute
    ds = load_cifar10(data_dir=root, allow_download=True)

    # Assert
    ((args, kwargs, timeout),) = calls
    assert args == ("cifar-10-python.tar.gz", cifar.KERAS_CIFAR10_ORIGIN) and timeout == DOWNLOAD_TIMEOUT_S
    assert kwargs == {"file_hash": cifar.KERAS_CIFAR10_SHA256, "cache_dir": str(root), "cache_subdir": ""}
    assert ds.source == "keras_download" and ds.n_train == 30
    assert ds.checksum_status.startswith("sha256 verified against sidecar")
    assert (root / "cifar-10-python.tar.gz.sha256").is_file()
    assert socket.getdefaulttimeout() == before


def test_nothing_found_lists_every_attempt_and_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: make foolbox look absent even where it is installed
    monkeypatch.setitem(sys.modules, "foolbox", None)

    # Execute
    with pytest.raises(DataError) as info:
        load_cifar10(data_dir=tmp_path, allow_download=False)

    # Assert
    message = str(info.value)
    assert not isinstance(info.value, CorruptDataError)
    assert all(f"  - {source_id}" in message for source_id in SOURCE_IDS)
    assert "package_foolbox: skipped (foolbox is not installed)" in message
    fixes = ("EDGELAB_DATA_DIR", "cifar-10-batches-py/", "cifar10/cifar10_lossless_subset.npz", "allow_download=True")
    assert all(fix in message for fix in fixes)


def test_variant_limits_the_offline_copies(tmp_path: Path) -> None:
    # Prepare
    _write_subset(tmp_path)

    # Execute
    with pytest.raises(DataError) as info:
        load_cifar10(data_dir=tmp_path, allow_download=False, variant="full_jpeg")
    ds = load_cifar10(data_dir=tmp_path, allow_download=False, variant="lossless_subset")

    # Assert
    assert "data_dir_lossless_subset: not asked for (variant='full_jpeg')" in str(info.value)
    assert ds.source == "data_dir_lossless_subset"


def test_foolbox_sample_only_when_asked_for(cifar10_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: a foolbox layout holding the real test[0:20] (taken from the lossless subset)
    with np.load(cifar10_dir / "cifar10" / "cifar10_lossless_subset.npz") as f:
        images, labels = f["x_test"][:20], f["y_test"][:20]
    _fake_foolbox(tmp_path / "site", images, labels)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    empty = tmp_path / "empty"

    # Execute
    with pytest.raises(DataError) as info:
        load_cifar10(data_dir=empty, allow_download=False)
    ds = load_dataset("cifar10", data_dir=empty, allow_download=False, variant="package_sample", test_limit=2)

    # Assert
    assert "package_foolbox: not used (foolbox 3.3.4 ships only 20 images" in str(info.value)
    assert ds.source == "package_foolbox" and (ds.n_train, ds.n_test) == (16, 2)
    assert ds.checksum_status == "sha256 verified against the pinned hash of official test[0:20]"
    np.testing.assert_array_equal(ds.x_train, images[:16])
    assert "foolbox" not in sys.modules


def test_foolbox_sample_with_other_images_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare
    images = np.random.default_rng(2).integers(0, 256, (20, 32, 32, 3), dtype=np.uint8)
    _fake_foolbox(tmp_path / "site", images, np.arange(20) % 10)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))

    # Execute / Assert
    with pytest.raises(CorruptDataError, match="found 20 files hashing to .* Reinstall foolbox"):
        load_cifar10(data_dir=tmp_path / "empty", allow_download=False, variant="package_sample")


# ---------------------------------------------------------------- load_dataset


@pytest.mark.parametrize(("option", "value"), [("variant", "png"), ("image_size", 32)])
def test_bad_option_raises_config_error(tmp_path: Path, option: str, value: object) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError) as info:
        load_dataset("cifar10", data_dir=tmp_path, allow_download=False, **{option: value})
    assert info.value.parameter == option


# ---------------------------------------------------------------- real offline data


def test_shared_lossless_subset(cifar10_dir: Path) -> None:
    # Execute
    ds = load_dataset("cifar10", data_dir=cifar10_dir, allow_download=False, variant="lossless_subset")

    # Assert
    assert (ds.source, ds.checksum_status) == ("data_dir_lossless_subset", "sha256 verified against SHA256SUMS")
    assert ds.x_train.shape == (4000, 32, 32, 3) and ds.x_test.shape == (1000, 32, 32, 3)
    assert ds.x_train.dtype == ds.y_train.dtype == ds.x_test.dtype == ds.y_test.dtype == np.uint8
    assert np.bincount(ds.y_train).tolist() == SUBSET_TRAIN_COUNTS == ds.notes["class_counts_train"]
    assert np.bincount(ds.y_test).tolist() == SUBSET_TEST_COUNTS
    assert ds.y_train[:5].tolist() == [6, 9, 9, 4, 1]  # data_batch_1 starts so
    assert ds.class_names == CLASS_NAMES and ds.class_names[:2] == ("airplane", "automobile")


def test_shared_full_jpeg_set(cifar10_dir: Path) -> None:
    # Prepare
    if not (cifar10_dir / "cifar10" / "cifar10_jpeg_train.npz").is_file():
        pytest.skip(f"no CIFAR-10 JPEG training set in {cifar10_dir}")
    subset = load_cifar10(data_dir=cifar10_dir, allow_download=False, variant="lossless_subset")

    # Execute
    ds = load_cifar10(data_dir=cifar10_dir, allow_download=False)
    start = time.perf_counter()
    again = load_cifar10(data_dir=cifar10_dir, allow_download=False, variant="full_jpeg")
    seconds = time.perf_counter() - start

    # Assert
    assert ds.source == "data_dir_jpeg" and (ds.n_train, ds.n_test) == (50000, 10000)
    assert ds.checksum_status == "train sha256 verified against SHA256SUMS; test sha256 verified against SHA256SUMS"
    assert ds.notes["class_counts_train"] == [5000] * 10 and ds.notes["class_counts_test"] == [1000] * 10
    np.testing.assert_array_equal(ds.y_train[:4000], subset.y_train)
    np.testing.assert_array_equal(ds.y_test[:1000], subset.y_test)
    assert np.abs(ds.x_train[:4000].astype(np.int16) - subset.x_train).mean() < 8  # README: 5.81
    assert np.abs(ds.x_test[:1000].astype(np.int16) - subset.x_test).mean() < 8
    assert again.x_train is ds.x_train and seconds < 2  # decoded once per process


def test_load_dataset_limits_and_records_the_source(cifar10_dir: Path) -> None:
    # Execute
    ds = load_dataset("cifar10", data_dir=cifar10_dir, sample_limit=300, test_limit=100, seed=4, allow_download=False)

    # Assert
    provenance = ds.provenance()
    assert (ds.n_train, ds.n_test) == (300, 100) and ds.x_train.shape[1:] == (32, 32, 3)
    assert provenance["source"] in ("data_dir_jpeg", "data_dir_lossless_subset")
    assert provenance["full_train_size"] in (50000, 4000)
    assert provenance["tried"][-1].startswith(provenance["source"] + ": using")
    json.dumps(provenance)

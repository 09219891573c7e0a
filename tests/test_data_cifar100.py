"""Tests for the CIFAR-100 source chain: official files, the 20-image sample, the CIFAR-10 stand-in, the checks."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgelab.common.errors import ConfigError, CorruptDataError, DataError
from edgelab.data import Dataset, load_dataset
from edgelab.data.cifar10 import CLASS_NAMES as CIFAR10_NAMES
from edgelab.data.cifar100 import STANDIN_COARSE_NAMES, STANDIN_NOTE, coarse_of, load_cifar100

SAMPLE = "cifar100/cifar100_test_first20.npz"
LABEL_MAPS = "cifar100/cifar100_label_maps.npz"
SUBSET = "cifar10/cifar10_lossless_subset.npz"
# The documented stand-in grouping, by class name (edgelab.data.cifar100 module docstring and brief).
STANDIN_GROUP = {
    "airplane": "air and water vehicles",
    "ship": "air and water vehicles",
    "automobile": "road vehicles",
    "truck": "road vehicles",
    "bird": "birds and amphibians",
    "frog": "birds and amphibians",
    "cat": "pets",
    "dog": "pets",
    "deer": "large herbivores",
    "horse": "large herbivores",
}


@pytest.fixture
def cifar100_dir(shared_data_dir: Path) -> Path:
    """Return the data directory holding the 20-image CIFAR-100 sample, or skip if absent."""
    if not (shared_data_dir / SAMPLE).is_file():
        pytest.skip(f"no {SAMPLE} in {shared_data_dir}")
    return shared_data_dir


@pytest.fixture
def offline_view(cifar100_dir: Path, cifar10_dir: Path, tmp_path: Path) -> Path:
    """The shared data without the full JPEG set: real CIFAR-10 (lossless subset) and the CIFAR-100 files.

    The JPEG set would make the stand-in decode 50,000 images (~9 s); the subset is the same kind of
    real data and loads in a fraction of a second. Files are symlinked, never copied.
    """
    view = tmp_path / "view"
    for rel in (SUBSET, SAMPLE, LABEL_MAPS):
        (view / rel).parent.mkdir(parents=True, exist_ok=True)
        (view / rel).symlink_to(cifar100_dir / rel)
    (view / "SHA256SUMS").write_text((cifar100_dir / "SHA256SUMS").read_text(encoding="utf-8"), encoding="utf-8")
    return view


def _official_files(fine_to_coarse: np.ndarray, names: tuple[list[str], list[str]], n_train: int = 120) -> dict:
    """Random uint8 rows, pickled like the official python version (dicts with bytes keys, protocol 2)."""
    rng = np.random.default_rng(0)
    files: dict[str, bytes] = {}
    for name, n in (("train", n_train), ("test", 30)):
        # Every fine class in train (the loader derives fine->coarse from it), the rest at random.
        fine = np.concatenate([np.arange(100), rng.integers(0, 100, n - 100)]) if name == "train" else None
        fine = rng.integers(0, 100, n) if fine is None else fine
        batch = {
            b"filenames": [b"x.png"] * n,
            b"batch_label": f"{name}ing batch 1 of 1".encode(),
            b"fine_labels": fine.tolist(),
            b"coarse_labels": fine_to_coarse[fine].tolist(),
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        }
        files[name] = pickle.dumps(batch, protocol=2)
    fine_names, coarse_names = names
    meta = {
        b"fine_label_names": [n.encode() for n in fine_names],
        b"coarse_label_names": [n.encode() for n in coarse_names],
    }
    files["meta"] = pickle.dumps(meta, protocol=2)
    return files


def _synthetic() -> tuple[np.ndarray, tuple[list[str], list[str]]]:
    """A fine->coarse map with 5 fine classes per coarse one, as CIFAR-100's, and made-up names."""
    mapping = (np.random.default_rng(1).permutation(100) % 20).astype(np.uint8)
    return mapping, ([f"fine_{i}" for i in range(100)], [f"coarse_{i}" for i in range(20)])


def _write_folder(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True)
    for name, blob in files.items():
        (folder / name).write_bytes(blob)
    return folder


def _write_tar(path: Path, files: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, blob in files.items():
            info = tarfile.TarInfo(f"cifar-100-python/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    path.with_name(path.name + ".sha256").write_text(f"{digest}  {path.name}\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------- data directory: official python version


@pytest.mark.parametrize("where", ["cifar-100-python", "cifar100/cifar-100-python"])
def test_official_folder_is_read_with_its_fine_to_coarse_map(tmp_path: Path, where: str) -> None:
    # Prepare
    mapping, names = _synthetic()
    files = _official_files(mapping, names)
    _write_folder(tmp_path / where, files)

    # Execute
    fine = load_cifar100(data_dir=tmp_path, allow_download=False)
    coarse = load_cifar100(data_dir=tmp_path, allow_download=False, labels="coarse")

    # Assert: pixel (row r, column c, channel ch) is entry ch*1024 + r*32 + c of the official row
    batch = pickle.loads(files["train"])
    assert (fine.source, fine.source_path, fine.tried) == (
        "data_dir",
        str(tmp_path / where),
        (f"data_dir: using {tmp_path / where}",),
    )
    assert fine.x_train.shape == (120, 32, 32, 3) and fine.x_test.shape == (30, 32, 32, 3)
    assert fine.x_train.dtype == fine.y_train.dtype == fine.y_test.dtype == np.uint8
    assert fine.x_train[7, 5, 9, 2] == batch[b"data"][7, 2 * 1024 + 5 * 32 + 9]
    np.testing.assert_array_equal(fine.y_train, batch[b"fine_labels"])
    np.testing.assert_array_equal(coarse.y_train, batch[b"coarse_labels"])
    np.testing.assert_array_equal(coarse.x_test, fine.x_test)
    assert fine.notes["fine_to_coarse"] == mapping.tolist() and coarse_of(fine).tolist() == mapping.tolist()
    np.testing.assert_array_equal(coarse_of(fine)[fine.y_test], coarse.y_test)
    assert fine.class_names == tuple(names[0]) and coarse.class_names == tuple(names[1])
    assert (fine.notes["labels"], coarse.notes["labels"]) == ("fine", "coarse")
    assert len(coarse.notes["class_counts_train"]) == 20 and sum(coarse.notes["class_counts_train"]) == 120
    assert fine.checksum_status.startswith("unverified") and fine.full_train_size == 120
    json.dumps(fine.provenance())


def test_tarball_labelled_with_the_published_map_reproduces_it(cifar100_dir: Path, tmp_path: Path) -> None:
    # Prepare: fake official data labelled by the published fine->coarse map and names
    with np.load(cifar100_dir / LABEL_MAPS) as f:
        mapping = f["fine_to_coarse"]
        names = ([str(n) for n in f["fine_label_names"]], [str(n) for n in f["coarse_label_names"]])
    tarball = _write_tar(tmp_path / "cifar100" / "cifar-100-python.tar.gz", _official_files(mapping, names))
    before = sorted(tmp_path.rglob("*"))

    # Execute
    ds = load_cifar100(data_dir=tmp_path, allow_download=False, labels="coarse")

    # Assert: the derived map and the meta names are the published ones; nothing was extracted
    assert (ds.source, ds.source_path) == ("data_dir", str(tarball))
    assert ds.checksum_status == "sha256 verified against sidecar cifar-100-python.tar.gz.sha256"
    assert ds.notes["fine_to_coarse"] == mapping.tolist()
    assert (ds.notes["fine_names"], ds.notes["coarse_names"]) == names and ds.class_names[
        10
    ] == "large_natural_outdoor_scenes"
    assert sorted(tmp_path.rglob("*")) == before


def test_tarball_without_reference_must_match_the_keras_hash(tmp_path: Path) -> None:
    # Prepare
    tarball = _write_tar(tmp_path / "cifar-100-python.tar.gz", _official_files(*_synthetic()))
    tarball.with_name(tarball.name + ".sha256").unlink()

    # Execute / Assert
    with pytest.raises(CorruptDataError, match="sha256 mismatch against the Keras published hash"):
        load_cifar100(data_dir=tmp_path, allow_download=False)


class _Gadget:
    """Pickles as a call of a global that is not one of numpy's array builders."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.getcwd, ())  # harmless, but any global other than numpy's array builders must be refused


def _damage(files: dict[str, bytes], damage: str) -> None:
    """Break the fake official files in one way."""
    train = pickle.loads(files["train"])
    if damage == "garbage":
        files["test"] = b"not a pickle"
    elif damage == "gadget":
        files["meta"] = pickle.dumps({b"fine_label_names": _Gadget(), b"coarse_label_names": []}, protocol=2)
    elif damage == "key":
        del train[b"coarse_labels"]
    elif damage == "shape":
        train[b"data"] = train[b"data"][:, :3000]
    elif damage == "range":
        train[b"fine_labels"][-1] = 100
    elif damage == "length":
        train[b"coarse_labels"] = train[b"coarse_labels"][:-1]
    elif damage == "two_coarse":
        # One more image of fine class 0, under another coarse class.
        train[b"fine_labels"][100], train[b"coarse_labels"][100] = 0, (train[b"coarse_labels"][0] + 1) % 20
    elif damage == "names":
        files["meta"] = pickle.dumps({b"fine_label_names": [b"a"] * 99, b"coarse_label_names": [b"b"] * 20})
    files["train"] = pickle.dumps(train, protocol=2)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("missing", r"found none named \['meta'\]"),
        ("garbage", "test: expected a CIFAR-100 python file"),
        ("gadget", r"meta: .*refused to load the global posix.getcwd"),
        ("key", r"train: expected a dict with keys \[b'data', b'fine_labels', b'coarse_labels'\]"),
        ("shape", r"expected data uint8 of shape \(N, 3072\)"),
        ("range", r"expected train labels in 0..99, found range 0..100"),
        ("length", r"expected train labels integer of shape \(120,\)"),
        ("two_coarse", r"expected one coarse label per fine label, found several for \[0\]"),
        ("names", "expected fine_label_names as 100 names"),
    ],
)
def test_damaged_official_folder_is_rejected(tmp_path: Path, damage: str, message: str) -> None:
    # Prepare
    files = _official_files(*_synthetic())
    _damage(files, damage)
    folder = _write_folder(tmp_path / "cifar-100-python", files)
    if damage == "missing":
        (folder / "meta").unlink()

    # Execute / Assert
    with pytest.raises(CorruptDataError, match=message):
        load_cifar100(data_dir=tmp_path, allow_download=False)


# ---------------------------------------------------------------- the 20-image sample


def test_shared_sample_loads_as_a_test_only_split(cifar100_dir: Path) -> None:
    # Prepare
    with np.load(cifar100_dir / SAMPLE) as f:
        sample = {k: f[k] for k in f.files}
    with np.load(cifar100_dir / LABEL_MAPS) as f:
        maps = {k: f[k] for k in f.files}

    # Execute
    fine = load_dataset("cifar100", data_dir=cifar100_dir, allow_download=False, variant="sample")
    coarse = load_cifar100(data_dir=cifar100_dir, allow_download=False, variant="sample", labels="coarse")

    # Assert
    assert (fine.source, fine.checksum_status) == ("data_dir_sample", "sha256 verified against SHA256SUMS")
    assert fine.x_train.shape == (0, 32, 32, 3) and fine.y_train.shape == (0,) and fine.full_train_size == 0
    np.testing.assert_array_equal(fine.x_test, sample["x"])
    np.testing.assert_array_equal(fine.y_test, sample["y_fine"])
    np.testing.assert_array_equal(coarse.y_test, sample["y_coarse"])
    assert fine.class_names == tuple(sample["fine_label_names"].tolist())
    assert coarse.class_names == tuple(sample["coarse_label_names"].tolist())
    assert fine.class_names[fine.y_test[0]] == "mountain" and coarse.y_test[0] == 10  # README: test[0]
    np.testing.assert_array_equal(coarse_of(fine)[fine.y_test], coarse.y_test)
    assert "train split is empty" in fine.notes["images"]
    # The published label maps agree with the sample's (checked here, not at load time).
    assert fine.notes["fine_to_coarse"] == maps["fine_to_coarse"].tolist()
    assert fine.notes["fine_names"] == maps["fine_label_names"].tolist()
    assert fine.notes["coarse_names"] == maps["coarse_label_names"].tolist()
    assert fine.tried[-1] == f"data_dir_sample: using {cifar100_dir / SAMPLE}"
    json.dumps(fine.provenance())


def test_sample_with_wrong_checksum_is_rejected(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / SAMPLE
    path.parent.mkdir(parents=True)
    path.write_bytes(b"anything")
    (tmp_path / "SHA256SUMS").write_text(f"{'0' * 64}  ./{SAMPLE}\n", encoding="utf-8")

    # Execute / Assert
    with pytest.raises(CorruptDataError, match="cifar100_test_first20.npz: sha256 mismatch against SHA256SUMS"):
        load_cifar100(data_dir=tmp_path, allow_download=False, variant="sample")


def test_sample_with_inconsistent_coarse_labels_is_rejected(tmp_path: Path) -> None:
    # Prepare: a sample-shaped file whose coarse labels disagree with its map
    mapping, (fine_names, coarse_names) = _synthetic()
    fine = np.arange(20, dtype=np.uint8)
    path = tmp_path / SAMPLE
    path.parent.mkdir(parents=True)
    np.savez(
        path,
        x=np.zeros((20, 32, 32, 3), np.uint8),
        y_fine=fine,
        y_coarse=(mapping[fine] + 1) % 20,
        fine_label_names=np.array(fine_names),
        coarse_label_names=np.array(coarse_names),
        fine_to_coarse=mapping,
    )

    # Execute / Assert
    with pytest.raises(CorruptDataError, match=r"expected y_coarse == fine_to_coarse\[y_fine\]"):
        load_cifar100(data_dir=tmp_path, allow_download=False, variant="sample")


# ---------------------------------------------------------------- the CIFAR-10 stand-in


def test_auto_offline_falls_back_to_the_standin_and_says_so(offline_view: Path) -> None:
    # Execute
    ds = load_cifar100(data_dir=offline_view, allow_download=False)

    # Assert
    assert ds.source == "cifar10_standin" and ds.notes["stand_in"] == STANDIN_NOTE
    assert STANDIN_NOTE == "stand-in: CIFAR-10 with a coarse grouping, not CIFAR-100"
    assert ds.checksum_status == "sha256 verified against SHA256SUMS"
    assert ds.source_path == str(offline_view / SUBSET) and ds.notes["cifar10_source"] == "data_dir_lossless_subset"
    assert (ds.n_train, ds.n_test) == (4000, 1000) and ds.class_names == CIFAR10_NAMES
    assert [t.split(":")[0] for t in ds.tried] == ["data_dir", "keras_download", "data_dir_sample", "cifar10_standin"]
    assert ds.tried[0].startswith("data_dir: no cifar-100-python/ or cifar-100-python.tar.gz")
    assert ds.tried[1] == "keras_download: skipped (allow_download=False or EDGELAB_OFFLINE=1)"
    assert "only 20 test images; variant='sample' takes them" in ds.tried[2]
    assert "as a stand-in, not CIFAR-100" in ds.tried[3]
    json.dumps(ds.provenance())


def test_standin_labels_follow_the_documented_grouping(offline_view: Path) -> None:
    # Execute
    fine = load_cifar100(data_dir=offline_view, allow_download=False, variant="cifar10_standin")
    coarse = load_dataset("cifar100", data_dir=offline_view, allow_download=False, labels="coarse")

    # Assert: every image's coarse class is its CIFAR-10 class's group
    assert coarse.class_names == STANDIN_COARSE_NAMES and len(coarse.class_names) == 5
    for y_fine, y_coarse in ((fine.y_train, coarse.y_train), (fine.y_test, coarse.y_test)):
        assert [coarse.class_names[c] for c in y_coarse] == [STANDIN_GROUP[fine.class_names[f]] for f in y_fine]
    np.testing.assert_array_equal(coarse.x_train, fine.x_train)
    assert set(np.unique(coarse.y_train).tolist()) == set(range(5)) and coarse.y_train.dtype == np.uint8
    assert [coarse.notes["coarse_names"][c] for c in coarse_of(coarse)] == [STANDIN_GROUP[n] for n in CIFAR10_NAMES]
    assert coarse.notes["class_counts_test"] == np.bincount(coarse.y_test, minlength=5).tolist()


def test_sample_variant_never_takes_the_standin(tmp_path: Path) -> None:
    # Execute
    with pytest.raises(DataError) as info:
        load_cifar100(data_dir=tmp_path, allow_download=False, variant="sample")

    # Assert
    message = str(info.value)
    assert not isinstance(info.value, CorruptDataError)
    assert f"data_dir_sample: no {SAMPLE}" in message and "cifar10_standin: not asked for (variant='sample')" in message
    assert all(
        fix in message for fix in ("EDGELAB_DATA_DIR", "cifar-100-python/", "allow_download=True", "variant='sample'")
    )


def test_standin_without_cifar10_lists_every_attempt(tmp_path: Path) -> None:
    # Execute
    with pytest.raises(DataError) as info:
        load_cifar100(data_dir=tmp_path, allow_download=False)

    # Assert: CIFAR-10's own report is the cause
    message = str(info.value)
    assert "cifar10_standin: failed (no CIFAR-10 source worked either" in message
    assert "no CIFAR-10 source worked" in str(info.value.__cause__)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(("option", "value"), [("labels", "medium"), ("variant", "full_jpeg"), ("image_size", 32)])
def test_bad_option_raises_config_error_before_loading(tmp_path: Path, option: str, value: object) -> None:
    # Prepare: a broken official folder, which any loading would report as corrupt
    (tmp_path / "cifar-100-python").mkdir()

    # Execute / Assert
    with pytest.raises(ConfigError) as info:
        load_dataset("cifar100", data_dir=tmp_path, allow_download=False, **{option: value})
    assert info.value.parameter == option
    if option != "image_size":
        with pytest.raises(ConfigError, match=f"^{option}="):
            load_cifar100(data_dir=tmp_path, allow_download=False, **{option: value})


def test_coarse_of_needs_a_cifar100_dataset() -> None:
    # Prepare
    empty = np.zeros((0,), np.uint8)
    ds = Dataset("mnist", empty, empty, empty, empty, "data_dir", None, "unverified", 0)

    # Execute / Assert
    with pytest.raises(ConfigError, match="dataset='mnist'"):
        coarse_of(ds)

"""Tests for the PlantVillage tomato loader: sources, verification, the stratified split and its checks."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edgelab.common.errors import ConfigError, CorruptDataError, DataError
from edgelab.data import Dataset, load_dataset
from edgelab.data.plantvillage import CLASS_NAMES, KAGGLE_DATASET, load_plantvillage, stratified_split

NPZ = Path("plantvillage_tomato") / "plantvillage_tomato_jpeg.npz"
# The Kaggle "emmarex/plantdisease" folder names, in CLASS_NAMES order.
EMMAREX_FOLDERS = (
    "Tomato_Bacterial_spot",
    "Tomato_Early_blight",
    "Tomato_Late_blight",
    "Tomato_Leaf_Mold",
    "Tomato_Septoria_leaf_spot",
    "Tomato_Spider_mites_Two_spotted_spider_mite",
    "Tomato__Target_Spot",
    "Tomato__Tomato_YellowLeaf__Curl_Virus",
    "Tomato__Tomato_mosaic_virus",
    "Tomato_healthy",
)


@pytest.fixture(scope="module")
def pv_data_dir() -> Path:
    """Return the offline data directory holding the PlantVillage npz, or skip if absent."""
    env = os.environ.get("EDGELAB_DATA_DIR")
    data_dir = Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"
    if not (data_dir / NPZ).is_file():
        pytest.skip(f"no {NPZ} in {data_dir}")
    return data_dir


@pytest.fixture(scope="module")
def shared_load(pv_data_dir: Path) -> Dataset:
    """The shared sample at the defaults (224 px, seed 0, validation_fraction 0.2), loaded once."""
    return load_plantvillage(data_dir=pv_data_dir, allow_download=False)


def _jpegs(data_dir: Path, per_class: int) -> list[list[tuple[str, bytes]]]:
    """The first `per_class` (file name, JPEG bytes) of each class of the shared npz."""
    with np.load(data_dir / NPZ, allow_pickle=False) as f:
        jpeg, offsets, y, names = f["jpeg"], f["offsets"], f["y"], f["filenames"]
    picks = [np.flatnonzero(y == c)[:per_class] for c in range(len(CLASS_NAMES))]
    return [[(str(names[i]), jpeg[offsets[i] : offsets[i + 1]].tobytes()) for i in idx] for idx in picks]


def _write_tree(base: Path, jpegs: list[list[tuple[str, bytes]]]) -> None:
    """Write real JPEGs into emmarex-style class folders, plus a non-tomato folder and a stray file."""
    for folder, files in zip(EMMAREX_FOLDERS, jpegs, strict=True):
        (base / folder).mkdir(parents=True)
        for name, data in files:
            (base / folder / name).write_bytes(data)
        (base / folder / "Thumbs.db").write_bytes(b"not an image")
    (base / "Pepper__bell___healthy").mkdir()
    (base / "Pepper__bell___healthy" / "p.jpg").write_bytes(jpegs[0][0][1])


# ---------------------------------------------------------------- stratified_split


@pytest.mark.parametrize(("fraction", "n_validation"), [(0.2, 1), (0.4, 2), (0.5, 2), (0.8, 4)])
def test_split_counts_per_class_are_exact(fraction: float, n_validation: int) -> None:
    # Prepare: three classes of five samples, interleaved
    labels = np.arange(15) % 3

    # Execute
    train, validation = stratified_split(labels, validation_fraction=fraction, seed=0)

    # Assert: round(fraction * 5) per class (0.5 * 5 = 2.5 rounds half to even), indices used once
    assert np.bincount(labels[validation]).tolist() == [n_validation] * 3
    assert np.bincount(labels[train]).tolist() == [5 - n_validation] * 3
    np.testing.assert_array_equal(np.sort(np.concatenate([train, validation])), np.arange(15))


def test_split_follows_its_documented_recipe() -> None:
    # Prepare: the recipe of the docstring, written out
    labels = np.array([1, 0, 1, 1, 0, 2, 2, 0, 1, 2, 2, 0])
    rng = np.random.default_rng(7)
    expected_validation = set()
    for label in (0, 1, 2):
        members = np.flatnonzero(labels == label)
        expected_validation |= set(members[rng.permutation(len(members))][:2].tolist())

    # Execute
    train, validation = stratified_split(labels, validation_fraction=0.5, seed=7)

    # Assert
    assert set(validation.tolist()) == expected_validation
    assert set(train.tolist()) == set(range(12)) - expected_validation


def test_split_is_seeded() -> None:
    # Prepare
    labels = np.repeat(np.arange(10), 160)

    # Execute
    first, again, other = (stratified_split(labels, validation_fraction=0.2, seed=s) for s in (3, 3, 4))

    # Assert
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not np.array_equal(first[1], other[1])


# ---------------------------------------------------------------- the shared sample


def test_shared_sample_shapes_split_and_provenance(shared_load: Dataset, pv_data_dir: Path) -> None:
    # Prepare
    ds = shared_load
    with np.load(pv_data_dir / NPZ, allow_pickle=False) as f:
        jpeg, offsets, y = f["jpeg"], f["offsets"], f["y"]
    train, validation = stratified_split(y, validation_fraction=0.2, seed=0)
    first = validation[0]
    original = Image.open(io.BytesIO(jpeg[offsets[first] : offsets[first + 1]].tobytes())).convert("RGB")

    # Assert: shapes and dtypes
    assert ds.x_train.shape == (1280, 224, 224, 3) and ds.x_test.shape == (320, 224, 224, 3)
    assert ds.x_train.dtype == ds.y_train.dtype == ds.x_test.dtype == np.uint8
    # Assert: 160 per class before the split, 128/32 after, in the order stratified_split gives
    assert np.bincount(ds.y_train).tolist() == [128] * 10 and np.bincount(ds.y_test).tolist() == [32] * 10
    np.testing.assert_array_equal(ds.y_train, y[train])
    np.testing.assert_array_equal(ds.y_test, y[validation])
    # Assert: pixels are Pillow's bilinear resize of the original JPEG
    np.testing.assert_array_equal(ds.x_test[0], np.asarray(original.resize((224, 224), Image.BILINEAR)))
    # Assert: provenance
    provenance = ds.provenance()
    assert provenance["source"] == "data_dir"
    assert provenance["checksum_status"] == "sha256 verified against SHA256SUMS"
    assert provenance["class_names"] == list(CLASS_NAMES)
    assert provenance["notes"]["raw_class_counts"] == [160] * 10
    assert provenance["notes"]["full_set"] is False and provenance["notes"]["paper_total"] == 16023
    assert provenance["full_train_size"] == 1280
    json.dumps(provenance)


def test_same_seed_same_split_other_seed_other_split(shared_load: Dataset, pv_data_dir: Path) -> None:
    # Execute: the split does not depend on the image size
    again = load_dataset("plantvillage_tomato", data_dir=pv_data_dir, seed=0, image_size=32)
    other = load_dataset("plantvillage_tomato", data_dir=pv_data_dir, seed=1, image_size=32)

    # Assert
    assert again.x_train.shape == (1280, 32, 32, 3)
    np.testing.assert_array_equal(again.y_train, shared_load.y_train)
    np.testing.assert_array_equal(again.y_test, shared_load.y_test)
    assert np.bincount(other.y_test).tolist() == [32] * 10
    assert not np.array_equal(other.y_test, again.y_test)


def test_corrupted_copy_is_rejected(pv_data_dir: Path, tmp_path: Path) -> None:
    # Prepare: a copy with one byte flipped, and the real checksum line
    copy = tmp_path / NPZ
    copy.parent.mkdir()
    shutil.copyfile(pv_data_dir / NPZ, copy)
    with copy.open("r+b") as f:
        f.seek(copy.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, io.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    lines = (pv_data_dir / "SHA256SUMS").read_text().splitlines()
    (tmp_path / "SHA256SUMS").write_text("\n".join(line for line in lines if NPZ.name in line) + "\n")

    # Execute / Assert
    with pytest.raises(CorruptDataError, match=r"plantvillage_tomato_jpeg\.npz: sha256 mismatch"):
        load_plantvillage(data_dir=tmp_path, allow_download=False)


def test_emmarex_tree_loads_with_canonical_names(pv_data_dir: Path, tmp_path: Path) -> None:
    # Prepare: 3 real images per class under PlantVillage/<emmarex folder>/, beside the npz (the tree wins)
    jpegs = _jpegs(pv_data_dir, per_class=3)
    _write_tree(tmp_path / "PlantVillage", jpegs)
    (tmp_path / NPZ).parent.mkdir()
    shutil.copyfile(pv_data_dir / NPZ, tmp_path / NPZ)

    # Execute
    ds = load_plantvillage(data_dir=tmp_path, image_size=256, validation_fraction=0.34, seed=0)

    # Assert
    assert ds.source == "data_dir_tree" and ds.source_path == str(tmp_path / "PlantVillage")
    assert ds.checksum_status == "unverified: a folder of image files"
    assert ds.class_names == CLASS_NAMES and ds.notes["raw_class_counts"] == [3] * 10
    assert (ds.n_train, ds.n_test) == (20, 10)
    # every image sits under the label of the folder it came from
    originals = [[np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for _, b in files] for files in jpegs]
    for x, y in zip([*ds.x_train, *ds.x_test], [*ds.y_train, *ds.y_test], strict=True):
        assert any(np.array_equal(x, original) for original in originals[y])


def test_kaggle_download_reads_the_tree_it_returns(
    pv_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: a stand-in kagglehub whose "download" is a local emmarex-style tree two levels down
    downloaded = tmp_path / "download"
    _write_tree(downloaded / "PlantVillage" / "PlantVillage", _jpegs(pv_data_dir, per_class=2))
    calls: list[str] = []
    fake = types.ModuleType("kagglehub")
    fake.dataset_download = lambda handle: calls.append(handle) or str(downloaded)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kagglehub", fake)
    monkeypatch.delenv("EDGELAB_OFFLINE", raising=False)

    # Execute
    ds = load_plantvillage(data_dir=tmp_path / "empty", image_size=32, validation_fraction=0.5)

    # Assert
    assert calls == [KAGGLE_DATASET]
    assert ds.source == "kaggle_download" and (ds.n_train, ds.n_test) == (10, 10)
    assert ds.tried[-1] == f"kaggle_download: using {downloaded / 'PlantVillage' / 'PlantVillage'}"


# ---------------------------------------------------------------- checks and errors


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"image_size": 31}, "image_size"),
        ({"image_size": 224.0}, "image_size"),
        ({"image_size": True}, "image_size"),
        ({"validation_fraction": 0}, "validation_fraction"),
        ({"validation_fraction": 1.0}, "validation_fraction"),
        ({"validation_fraction": -0.2}, "validation_fraction"),
        ({"validation_fraction": float("nan")}, "validation_fraction"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_options_raise_config_error_before_reading(kwargs: dict[str, object], parameter: str) -> None:
    # Prepare: a data dir that does not exist, so any file access would fail differently
    missing = Path("/nonexistent/edgelab-data")

    # Execute / Assert
    with pytest.raises(ConfigError, match=parameter) as info:
        load_plantvillage(data_dir=missing, allow_download=False, **kwargs)  # type: ignore[arg-type]
    assert info.value.parameter == parameter


@pytest.mark.parametrize(
    ("name", "option"), [("mnist", "image_size"), ("mnist", "validation_fraction"), ("plantvillage_tomato", "size")]
)
def test_load_dataset_rejects_options_of_other_loaders(name: str, option: str, tmp_path: Path) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match=option) as info:
        load_dataset(name, data_dir=tmp_path, allow_download=False, **{option: 64})
    assert info.value.parameter == option


def test_nothing_found_lists_every_attempt(tmp_path: Path) -> None:
    # Execute
    with pytest.raises(DataError) as info:
        load_plantvillage(data_dir=tmp_path, allow_download=False)

    # Assert
    message = str(info.value)
    assert not isinstance(info.value, CorruptDataError)
    expected = ("data_dir_tree: no tomato class folders", "data_dir: no", "kaggle_download: skipped", "data_dir=")
    assert all(fragment in message for fragment in expected)
    assert str(tmp_path / "PlantVillage") in message and str(tmp_path) in message


def test_missing_kagglehub_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare
    monkeypatch.setitem(sys.modules, "kagglehub", None)
    monkeypatch.delenv("EDGELAB_OFFLINE", raising=False)

    # Execute / Assert
    with pytest.raises(DataError, match=r"kaggle_download: skipped \(kagglehub is not installed\)"):
        load_plantvillage(data_dir=tmp_path)


def test_incomplete_tree_is_rejected(tmp_path: Path) -> None:
    # Prepare: one tomato class folder only (its file is never decoded: completeness is checked first)
    folder = tmp_path / "plantvillage_tomato" / "Tomato___healthy"
    folder.mkdir(parents=True)
    (folder / "a.jpg").write_bytes(b"")

    # Execute / Assert
    with pytest.raises(DataError, match="found none for.*Tomato___Bacterial_spot"):
        load_plantvillage(data_dir=tmp_path, allow_download=False)

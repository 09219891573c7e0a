"""PlantVillage tomato leaves (10 classes) from the first source that works.

Sources, in order, each recorded in `Dataset.tried`: a class-folder tree in the data
directory (the full Kaggle set, unpacked by the user), the 1,600-image offline sample
``plantvillage_tomato_jpeg.npz`` (checked against ``SHA256SUMS``), then a Kaggle download
through the optional ``kagglehub`` package. Images are decoded with Pillow, converted to
RGB and resized bilinearly to ``image_size`` x ``image_size``; arrays are uint8 NHWC.

PlantVillage has no official test set, so the loader makes a seeded, stratified
train/validation split of the original images (`stratified_split`) and returns the
validation part as ``x_test``/``y_test``. The split comes before any augmentation, and
validation images are never augmented later, so no augmented copy of a validation image
can leak into training; the paper leaves that open (catalog item jeon/P13).

Reference: D. P. Hughes and M. Salathé, "An open access repository of images on plant
health to enable the development of mobile disease diagnostics", arXiv:1511.08060, and
S. P. Mohanty, D. P. Hughes and M. Salathé, Front. Plant Sci. 7:1419, 2016 (CC BY-SA 3.0).
Used by: Jeon et al., "Implementation of AIoT Edge Cluster System via Distributed Deep
Learning Pipeline" (16,023 tomato images from Kaggle's PlantVillage).
"""

from __future__ import annotations

import functools
import io
import os
import re
import socket
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import PIL
from PIL import Image

from edgelab.common import checks
from edgelab.common.errors import ConfigError, CorruptDataError, DataError
from edgelab.data.dataset import Dataset
from edgelab.data.sources import DOWNLOAD_TIMEOUT_S, default_data_dir, verify_checksum

# The paper used Kaggle's PlantVillage; this Kaggle copy holds the 10 tomato class folders.
KAGGLE_DATASET = "emmarex/plantdisease"
# Tomato images in the paper's Kaggle set (Jeon et al., l.139).
PAPER_TOTAL = 16023
# A load of at least this many images counts as the full set rather than a sample.
FULL_SET_MIN = 16000
# MobileNetV2's smallest input side (keras.applications.MobileNetV2).
MIN_IMAGE_SIZE = 32
# Canonical class names: the PlantVillage folder names, sorted as image_dataset_from_directory sorts them.
CLASS_NAMES = (
    "Tomato___Bacterial_spot",
    "Tomato___Early_blight",
    "Tomato___Late_blight",
    "Tomato___Leaf_Mold",
    "Tomato___Septoria_leaf_spot",
    "Tomato___Spider_mites Two-spotted_spider_mite",
    "Tomato___Target_Spot",
    "Tomato___Tomato_Yellow_Leaf_Curl_Virus",
    "Tomato___Tomato_mosaic_virus",
    "Tomato___healthy",
)

_NPZ_NAME = "plantvillage_tomato_jpeg.npz"
_NPZ_CANDIDATES = (f"plantvillage_tomato/{_NPZ_NAME}", _NPZ_NAME)
_NPZ_KEYS = ("jpeg", "offsets", "y", "label_names")
_TREE_DIRS = ("plantvillage_tomato", "PlantVillage")
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
_TREE_STATUS = "unverified: a folder of image files"

# Returns the encoded file of sample i and a description of where it came from, for error messages.
_Fetch = Callable[[int], tuple[bytes, str]]


def _class_key(name: str) -> str:
    """Fold a class folder name to lower-case letters and digits, so all known spellings agree."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


# "Tomato__Tomato_YellowLeaf__Curl_Virus" (emmarex) and "Tomato___Tomato_Yellow_Leaf_Curl_Virus" share a key.
_CLASS_BY_KEY = {_class_key(name): index for index, name in enumerate(CLASS_NAMES)}


def load_plantvillage(
    *,
    data_dir: str | os.PathLike[str] | None = None,
    image_size: int = 224,
    seed: int = 0,
    validation_fraction: float = 0.2,
    allow_download: bool | None = None,
) -> Dataset:
    """Load the PlantVillage tomato images, split into train and validation.

    Parameters
    ----------
    data_dir : str | os.PathLike[str] | None
        Directory holding ``plantvillage_tomato/<class folder>/``, ``PlantVillage/<class folder>/``
        or ``plantvillage_tomato/plantvillage_tomato_jpeg.npz``; defaults to `default_data_dir()`.
    image_size : int
        Side of the square images returned, at least 32 (MobileNetV2's minimum).
    seed : int
        Seed of the stratified split (`stratified_split`).
    validation_fraction : float
        Share of each class put in the validation split, in (0, 1).
    allow_download : bool | None
        Whether to try the kagglehub download; None means True unless ``EDGELAB_OFFLINE=1``.

    Returns
    -------
    Dataset
        Train split in x_train/y_train, validation split in x_test/y_test, images of shape
        (N, image_size, image_size, 3), labels indexing `CLASS_NAMES`; ``notes`` holds the
        per-class counts before the split.

    Raises
    ------
    ConfigError
        If image_size, seed or validation_fraction is not allowed (before any file is read).
    CorruptDataError
        If a file fails its checksum, structure or image decoding.
    DataError
        If a class-folder tree lacks tomato classes, or no source works (the message lists every attempt).

    Examples
    --------
    >>> ds = load_plantvillage(image_size=224, seed=0)  # doctest: +SKIP
    >>> ds.x_train.shape, ds.notes["raw_class_counts"]  # doctest: +SKIP
    ((1280, 224, 224, 3), [160, 160, 160, 160, 160, 160, 160, 160, 160, 160])
    """
    checks.integer("image_size", image_size, at_least=MIN_IMAGE_SIZE)  # MobileNetV2's minimum input
    checks.integer("seed", seed)
    checks.number("validation_fraction", validation_fraction, above=0, below=1)
    root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    if allow_download is None:
        allow_download = os.environ.get("EDGELAB_OFFLINE") != "1"
    tried: list[str] = []
    build = functools.partial(_dataset, image_size=image_size, seed=seed, validation_fraction=validation_fraction)

    tree = _find_tree(root / d for d in _TREE_DIRS)
    if tree is not None:
        tried.append(f"data_dir_tree: using {tree[0]}")
        return build(_Source(*_read_tree(*tree), "data_dir_tree", tree[0], _TREE_STATUS), tried)
    tried.append(f"data_dir_tree: no tomato class folders in {' or '.join(str(root / d) for d in _TREE_DIRS)}")

    found = next((root / c for c in _NPZ_CANDIDATES if (root / c).is_file()), None)
    if found is not None:
        tried.append(f"data_dir: using {found}")
        checksum_status = verify_checksum(found, root)
        return build(_Source(*_read_npz(found), "data_dir", found, checksum_status), tried)
    tried.append(f"data_dir: no {' or '.join(_NPZ_CANDIDATES)} in {root}")

    downloaded = _kaggle_download(allow_download, tried)
    if downloaded is not None:
        tree = _find_tree(_walk_dirs(downloaded, depth=2))
        if tree is not None:
            tried.append(f"kaggle_download: using {tree[0]}")
            status = f"{_TREE_STATUS} (downloaded by kagglehub)"
            return build(_Source(*_read_tree(*tree), "kaggle_download", tree[0], status), tried)
        tried.append(f"kaggle_download: no tomato class folders within two levels of {downloaded}")

    attempts = "\n".join(f"  - {t}" for t in tried)
    raise DataError(
        f"no PlantVillage tomato source worked. Attempts:\n{attempts}\n"
        f"Fix: set EDGELAB_DATA_DIR (or pass data_dir=) to a directory holding the Kaggle PlantVillage tomato "
        f"class folders under plantvillage_tomato/ or PlantVillage/ (e.g. {CLASS_NAMES[0]} or Tomato_Bacterial_spot), "
        f"or {_NPZ_CANDIDATES[0]}; or install kagglehub and allow network access to download {KAGGLE_DATASET}."
    )


def stratified_split(labels: np.ndarray, *, validation_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split sample indices into train and validation, class by class, with a seeded generator.

    One ``np.random.default_rng(seed)`` draws, for each label in ascending order, a permutation
    of that class's indices; the first ``round(validation_fraction * n_class)`` (Python's
    ``round``) go to validation and the rest to train. The same generator then shuffles each
    side, so neither is sorted by class.

    Parameters
    ----------
    labels : np.ndarray
        Class index of every sample, shape (N,).
    validation_fraction : float
        Share of each class put in the validation split.
    seed : int
        Seed of the generator.

    Returns
    -------
    tuple[np.ndarray, np.ndarray]
        int64 train indices and validation indices; together they hold 0..N-1 once each.

    Examples
    --------
    >>> train, val = stratified_split(np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1]), validation_fraction=0.4, seed=0)
    >>> len(train), len(val)
    (6, 4)
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    train: list[np.ndarray] = [np.empty(0, np.int64)]
    validation: list[np.ndarray] = [np.empty(0, np.int64)]
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        shuffled = members[rng.permutation(len(members))]
        n_validation = round(validation_fraction * len(members))
        validation.append(shuffled[:n_validation])
        train.append(shuffled[n_validation:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(validation))


@dataclass(frozen=True)
class _Source:
    """A source that was found: its samples' labels, a reader of their files, and where they came from."""

    labels: np.ndarray
    fetch: _Fetch
    name: str  # the source's kind, recorded as ``Dataset.source``
    path: Path
    checksum_status: str


def _dataset(
    source: _Source,
    tried: list[str],
    *,
    image_size: int,
    seed: int,
    validation_fraction: float,
) -> Dataset:
    """Split the samples, decode each side in its final order and wrap them as a Dataset."""
    labels, fetch = source.labels, source.fetch
    train, validation = stratified_split(labels, validation_fraction=validation_fraction, seed=seed)
    if len(train) == 0 or len(validation) == 0:
        raise ConfigError(
            "validation_fraction", validation_fraction, f"a share leaving images on both sides of {len(labels)} images"
        )
    notes = {
        "raw_class_counts": np.bincount(labels, minlength=len(CLASS_NAMES)).tolist(),
        "split": f"stratified, seeded, validation_fraction {validation_fraction}",
        "full_set": len(labels) >= FULL_SET_MIN,
        "paper_total": PAPER_TOTAL,
        "decoding": f"Pillow {PIL.__version__}, RGB, bilinear resize to {image_size}x{image_size}",
    }
    return Dataset(
        name="plantvillage_tomato",
        x_train=_decode_all(fetch, train, image_size),
        y_train=labels[train],
        x_test=_decode_all(fetch, validation, image_size),
        y_test=labels[validation],
        source=source.name,
        source_path=str(source.path),
        checksum_status=source.checksum_status,
        full_train_size=len(train),
        tried=tuple(tried),
        class_names=CLASS_NAMES,
        notes=notes,
    )


def _walk_dirs(base: Path, *, depth: int) -> Iterator[Path]:
    """Yield `base` and its subdirectories down to `depth` levels, in sorted order."""
    yield base
    if depth > 0 and base.is_dir():
        for child in sorted(p for p in base.iterdir() if p.is_dir()):
            yield from _walk_dirs(child, depth=depth - 1)


def _find_tree(candidates: Iterable[Path]) -> tuple[Path, dict[int, Path]] | None:
    """Return the first candidate directory holding tomato class folders, with its folder per class."""
    for directory in candidates:
        if not directory.is_dir():
            continue
        folders: dict[int, Path] = {}
        for child in sorted(p for p in directory.iterdir() if p.is_dir()):
            index = _CLASS_BY_KEY.get(_class_key(child.name))
            if index is None:
                continue
            if index in folders:
                raise DataError(
                    f"{directory}: folders {folders[index].name!r} and {child.name!r} are both "
                    f"{CLASS_NAMES[index]!r}; keep one of them"
                )
            folders[index] = child
        if folders:
            return directory, folders
    return None


def _read_tree(directory: Path, folders: dict[int, Path]) -> tuple[np.ndarray, _Fetch]:
    """List the image files of the class folders (all 10 classes must have some); return labels and a reader."""
    files = [
        (index, path)
        for index, folder in sorted(folders.items())
        for path in sorted(folder.iterdir())
        if path.is_file() and path.suffix.lower() in _IMAGE_SUFFIXES
    ]
    missing = sorted(set(range(len(CLASS_NAMES))) - {index for index, _ in files})
    if missing:
        raise DataError(
            f"{directory}: expected image files for all {len(CLASS_NAMES)} tomato classes, found none for "
            f"{[CLASS_NAMES[i] for i in missing]}. Complete the tree or move it away."
        )

    def fetch(i: int) -> tuple[bytes, str]:
        path = files[i][1]
        return path.read_bytes(), str(path)

    return np.array([index for index, _ in files], np.uint8), fetch


def _read_npz(path: Path) -> tuple[np.ndarray, _Fetch]:
    """Check the JPEG-bytes npz (keys, offsets, labels, class names); return labels and a reader."""
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in _NPZ_KEYS if k not in f.files]
            if missing:
                raise CorruptDataError(
                    f"{path}: expected keys {list(_NPZ_KEYS)}, found {sorted(f.files)} (missing {missing})"
                )
            jpeg, offsets, y, label_names = (f[k] for k in _NPZ_KEYS)
    except CorruptDataError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise CorruptDataError(
            f"{path}: expected a readable npz archive, found an unreadable file ({type(exc).__name__}: {exc})"
        ) from exc
    n = len(y)
    if jpeg.dtype != np.uint8 or jpeg.ndim != 1 or offsets.shape != (n + 1,) or y.ndim != 1:
        raise CorruptDataError(
            f"{path}: expected 1-D uint8 jpeg, offsets of shape (N+1,) and y of shape (N,), found "
            f"jpeg {jpeg.dtype} {jpeg.shape}, offsets {offsets.shape}, y {y.shape}"
        )
    if n and (offsets[0] != 0 or offsets[-1] != len(jpeg) or np.any(np.diff(offsets) <= 0)):
        raise CorruptDataError(f"{path}: expected offsets rising from 0 to {len(jpeg)}, found another sequence")
    classes = [_CLASS_BY_KEY.get(_class_key(str(name))) for name in label_names]
    if None in classes or sorted(c for c in classes if c is not None) != list(range(len(CLASS_NAMES))):
        raise CorruptDataError(f"{path}: expected label_names to be the 10 tomato classes, found {list(label_names)}")
    if not np.issubdtype(y.dtype, np.integer) or (n and (y.min() < 0 or y.max() >= len(classes))):
        raise CorruptDataError(f"{path}: expected integer y in 0..{len(classes) - 1}, found {y.dtype}")

    def fetch(i: int) -> tuple[bytes, str]:
        return jpeg[offsets[i] : offsets[i + 1]].tobytes(), f"{path} (image {i})"

    # label_names order -> CLASS_NAMES order
    return np.asarray(classes, np.uint8)[y], fetch


def _decode_all(fetch: _Fetch, indices: np.ndarray, image_size: int) -> np.ndarray:
    """Decode the samples at `indices`, in that order, straight into one array (no second copy)."""
    images = np.empty((len(indices), image_size, image_size, 3), np.uint8)  # (N, H, W, 3)
    for row, i in enumerate(indices):
        images[row] = _decode(*fetch(int(i)), image_size)
    return images


def _decode(data: bytes, origin: str, image_size: int) -> np.ndarray:
    """Decode one image file's bytes to RGB uint8, resized bilinearly to a square side."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            rgb = image.convert("RGB")
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise CorruptDataError(
            f"{origin}: expected a readable image, found undecodable bytes ({type(exc).__name__}: {exc})"
        ) from exc
    if rgb.size != (image_size, image_size):
        rgb = rgb.resize((image_size, image_size), Image.BILINEAR)
    return np.asarray(rgb)  # (image_size, image_size, 3)


def _kaggle_download(allow_download: bool, tried: list[str]) -> Path | None:
    """Download KAGGLE_DATASET with kagglehub when allowed and installed; record the attempt."""
    # This path cannot be exercised on the offline development machine: it needs network and Kaggle access.
    if not allow_download:
        tried.append("kaggle_download: skipped (allow_download=False or EDGELAB_OFFLINE=1)")
        return None
    try:
        import kagglehub
    except ImportError:
        tried.append("kaggle_download: skipped (kagglehub is not installed)")
        return None
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        downloaded = Path(kagglehub.dataset_download(KAGGLE_DATASET))
    except Exception as exc:  # noqa: BLE001 - any network or authentication failure moves the chain on
        tried.append(f"kaggle_download: failed ({type(exc).__name__}: {exc})")
        return None
    finally:
        socket.setdefaulttimeout(previous)
    tried.append(f"kaggle_download: downloaded {KAGGLE_DATASET} to {downloaded}")
    return downloaded

"""CIFAR-100 (100 fine, 20 coarse labels) from the first source that works, else a labelled CIFAR-10 stand-in.

Sources, in order, each recorded in `Dataset.tried` under its source id:

1. ``data_dir``: the official python version in the data directory (``data_dir``, else
   `default_data_dir()`): the folder ``cifar-100-python/`` (files ``train``, ``test``, ``meta``;
   also under ``cifar100/``, or ``cifar-100-python-target/`` where Keras extracts it) or the tarball
   ``cifar-100-python.tar.gz`` (also under ``cifar100/``), read in place.
2. ``keras_download``: the official tarball, from the origin ``keras.datasets.cifar100`` uses,
   after a quick reachability check so a machine without network fails in seconds.
3. ``data_dir_sample``: ``cifar100/cifar100_test_first20.npz``, the first 20 official test images.
   Twenty images train nothing, so this link is taken only with ``variant="sample"``, as a test
   split with an empty train split; otherwise it is recorded as not used.
4. ``cifar10_standin``: no full CIFAR-100 copy is known offline, so the fallback is real CIFAR-10
   (`load_cifar10`) with its 10 classes as fine labels and a fixed grouping into 5 coarse labels
   (`STANDIN_COARSE_NAMES`). It keeps a two-level label experiment runnable; it is not CIFAR-100,
   and ``source``, ``notes`` and ``tried`` say so.

``labels`` picks what ``y_train``/``y_test`` hold (fine or coarse); the other level stays reachable
through ``notes["fine_to_coarse"]`` (see `coarse_of`). For the official version the names come from
``meta`` and the fine-to-coarse map from the training set's paired labels. Every file is verified:
sha256 where a reference exists, then structure (dtypes, shapes, label ranges, lengths, one coarse
label per fine label); a failure raises `CorruptDataError`. The official pickles are read with the
unpickler of `edgelab.data.cifar10`, which only rebuilds numpy arrays.

Reference: A. Krizhevsky, "Learning Multiple Layers of Features from Tiny Images", 2009,
https://www.cs.toronto.edu/~kriz/cifar.html.
"""

from __future__ import annotations

import io
import os
import socket
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from edgelab.common.errors import ConfigError, CorruptDataError, DataError

# The unpickler and checksum lookup are cifar10's: one audited copy of each for the same file family.
from edgelab.data.cifar10 import CLASS_NAMES as CIFAR10_CLASS_NAMES
from edgelab.data.cifar10 import ArrayUnpickler, load_cifar10, verify_file
from edgelab.data.dataset import Dataset
from edgelab.data.sources import default_data_dir, keras_get_file, sha256_file

LABELS = ("fine", "coarse")
VARIANTS = ("auto", "sample", "cifar10_standin")
N_FINE, N_COARSE = 100, 20
# Where keras.datasets.cifar100.load_data() downloads from, and the sha256 it checks
# (keras 3.15.1, keras/src/datasets/cifar100.py, load_data: get_file(..., file_hash=...)).
KERAS_CIFAR100_ORIGIN = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
KERAS_CIFAR100_SHA256 = "85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7"
# Seconds to wait for the download host before calling it unreachable.
REACHABILITY_TIMEOUT_S = 3.0
# The stand-in's coarse groups and the group of each CIFAR-10 class (airplane, automobile, bird, cat,
# deer, dog, frog, horse, ship, truck): pairs of classes that share a broad kind, as CIFAR-100's do.
STANDIN_COARSE_NAMES = ("air and water vehicles", "road vehicles", "birds and amphibians", "pets", "large herbivores")
STANDIN_FINE_TO_COARSE = (0, 1, 2, 3, 4, 3, 2, 4, 0, 1)
STANDIN_NOTE = "stand-in: CIFAR-10 with a coarse grouping, not CIFAR-100"

_HOST = "www.cs.toronto.edu"
_TAR = "cifar-100-python.tar.gz"
_FOLDER = "cifar-100-python"
_FOLDERS = (_FOLDER, f"cifar100/{_FOLDER}", f"cifar-100-python-target/{_FOLDER}")
_TARS = (_TAR, f"cifar100/{_TAR}")
_FILES = ("train", "test", "meta")
_SAMPLE = "cifar100/cifar100_test_first20.npz"
_SAMPLE_KEYS = ("x", "y_fine", "y_coarse", "fine_label_names", "coarse_label_names", "fine_to_coarse")
_KERAS_HASH = (KERAS_CIFAR100_SHA256, "the Keras published hash")


def load_cifar100(
    *,
    data_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
    allow_download: bool | None = None,
    labels: str = "fine",
    variant: str = "auto",
) -> Dataset:
    """Load CIFAR-100 from the first source in the chain that works (see the module docstring).

    Parameters
    ----------
    data_dir : str | os.PathLike[str] | None
        Directory to look in, and to download into; defaults to `default_data_dir()`.
    seed : int
        Unused by CIFAR-100's sources (each keeps its own order); passed on to the stand-in's `load_cifar10`.
    allow_download : bool | None
        Whether to try the Keras download (here and for the stand-in); None means True unless
        ``EDGELAB_OFFLINE=1``.
    labels : str
        What ``y_train``/``y_test`` and ``class_names`` hold: "fine" or "coarse".
    variant : str
        Copy used when the official version is neither in the data directory nor downloadable:
        "auto" (the CIFAR-10 stand-in), "sample" (the 20 real test images; smoke tests only) or
        "cifar10_standin".

    Returns
    -------
    Dataset
        Images uint8 (N, 32, 32, 3) NHWC, labels uint8 (N,). ``notes`` holds ``labels``,
        ``fine_names``, ``coarse_names`` and ``fine_to_coarse`` (lists), the class counts and the
        caveats of the source; the stand-in's also hold ``stand_in`` and CIFAR-10's provenance.

    Raises
    ------
    ConfigError
        If ``labels`` is not one of `LABELS` or ``variant`` not one of `VARIANTS`.
    CorruptDataError
        If a file fails its checksum or structure check.
    DataError
        If no source works; the message lists every attempt and the fix.
    """
    if labels not in LABELS:
        raise ConfigError("labels", labels, f"one of {', '.join(LABELS)}")
    if variant not in VARIANTS:
        raise ConfigError("variant", variant, f"one of {', '.join(VARIANTS)}")
    root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    if allow_download is None:
        allow_download = os.environ.get("EDGELAB_OFFLINE") != "1"
    tried: list[str] = []
    dataset = _official(root, labels, tried) or _download(root, allow_download, labels, tried)
    dataset = dataset or _sample(root, labels, variant, tried)
    standin_error: DataError | None = None
    if dataset is None:
        try:
            dataset = _standin(root, seed, allow_download, labels, variant, tried)
        except CorruptDataError:
            raise
        except DataError as exc:
            standin_error = exc
            tried.append("cifar10_standin: failed (no CIFAR-10 source worked either; see the cause below)")
    if dataset is not None:
        return dataset
    attempts = "\n".join(f"  - {t}" for t in tried)
    raise DataError(
        f"no CIFAR-100 source worked. Attempts:\n{attempts}\n"
        f"Fix: set EDGELAB_DATA_DIR (or pass data_dir=) to a directory holding {_FOLDER}/ or {_TAR} (the "
        f"official python version); or allow network access (allow_download=True, EDGELAB_OFFLINE unset) to "
        f"download {KERAS_CIFAR100_ORIGIN}; or make CIFAR-10 available for variant='auto' or "
        f"'cifar10_standin' (a stand-in, not CIFAR-100); or, for smoke tests only, put {_SAMPLE} in the data "
        "directory and pass variant='sample' (20 test images)."
    ) from standin_error


def coarse_of(dataset: Dataset) -> np.ndarray:
    """Return the coarse index of each fine index, so coarse labels follow from fine ones.

    Parameters
    ----------
    dataset : Dataset
        A dataset from `load_cifar100` (any source, either ``labels``).

    Returns
    -------
    np.ndarray
        uint8 (n_fine,): entry ``f`` is the coarse index of fine class ``f``. With
        ``labels="fine"``, ``coarse_of(ds)[ds.y_train]`` gives the coarse training labels.

    Raises
    ------
    ConfigError
        If the dataset's notes hold no ``fine_to_coarse`` list.
    """
    mapping = dataset.notes.get("fine_to_coarse")
    if not isinstance(mapping, list) or not mapping:
        raise ConfigError("dataset", dataset.name, "a Dataset from load_cifar100 (its notes hold fine_to_coarse)")
    return np.asarray(mapping, np.uint8)


def _official(root: Path, labels: str, tried: list[str]) -> Dataset | None:
    """The official python version in the data directory: an extracted folder, else the tarball."""
    folder = next((root / d for d in _FOLDERS if (root / d).is_dir()), None)
    if folder is not None:
        tried.append(f"data_dir: using {folder}")
        missing = [name for name in _FILES if not (folder / name).is_file()]
        if missing:
            raise CorruptDataError(f"{folder}: expected the files {', '.join(_FILES)}, found none named {missing}")
        blobs = {name: (folder / name).read_bytes() for name in _FILES}
        status = "unverified: no reference checksum for an extracted folder (structure checked)"
        return _official_dataset(blobs, "data_dir", folder, status, labels, tried)
    tarball = next((root / t for t in _TARS if (root / t).is_file()), None)
    if tarball is not None:
        tried.append(f"data_dir: using {tarball}")
        status = verify_file(tarball, root, fallback=_KERAS_HASH)
        return _official_dataset(_read_tar(tarball), "data_dir", tarball, status, labels, tried)
    tried.append(f"data_dir: no {_FOLDER}/ or {_TAR} in {root}, {root / 'cifar100'} (or Keras' {_FOLDERS[2]})")
    return None


def _download(root: Path, allow_download: bool, labels: str, tried: list[str]) -> Dataset | None:
    """Download the official tarball with keras.utils.get_file into `root`, if the host answers quickly."""
    if not allow_download:
        tried.append("keras_download: skipped (allow_download=False or EDGELAB_OFFLINE=1)")
        return None
    try:
        # An offline machine answers this in seconds; get_file alone would wait out DOWNLOAD_TIMEOUT_S per retry.
        socket.create_connection((_HOST, 443), timeout=REACHABILITY_TIMEOUT_S).close()
    except OSError as exc:
        tried.append(f"keras_download: skipped ({_HOST} unreachable: {type(exc).__name__}: {exc})")
        return None
    try:
        path = keras_get_file(_TAR, KERAS_CIFAR100_ORIGIN, KERAS_CIFAR100_SHA256, root)
    except Exception as exc:  # noqa: BLE001 - any network failure moves the chain on
        tried.append(f"keras_download: failed ({type(exc).__name__}: {exc})")
        return None
    tried.append(f"keras_download: downloaded {path}")
    status = verify_file(path, path.parent, fallback=_KERAS_HASH)
    dataset = _official_dataset(_read_tar(path), "keras_download", path, status, labels, tried)
    try:
        path.with_name(path.name + ".sha256").write_text(f"{sha256_file(path)}  {path.name}\n", encoding="utf-8")
    except OSError:
        pass  # a read-only cache still works: the Keras hash verifies the file next time
    return dataset


def _sample(root: Path, labels: str, variant: str, tried: list[str]) -> Dataset | None:
    """The 20 real test images of the data directory; only for ``variant="sample"``, as a test-only split."""
    path = root / _SAMPLE
    if not path.is_file():
        tried.append(f"data_dir_sample: no {_SAMPLE} in {root}")
        return None
    if variant != "sample":
        tried.append(f"data_dir_sample: not used ({path} holds only 20 test images; variant='sample' takes them)")
        return None
    tried.append(f"data_dir_sample: using {path}")
    status = verify_file(path, root)
    arrays = _load_npz(path)
    fine_names = [str(n) for n in arrays["fine_label_names"].tolist()]
    coarse_names = [str(n) for n in arrays["coarse_label_names"].tolist()]
    mapping = arrays["fine_to_coarse"]
    if len(fine_names) != N_FINE or len(coarse_names) != N_COARSE or mapping.shape != (N_FINE,):
        raise CorruptDataError(
            f"{path}: expected {N_FINE} fine names, {N_COARSE} coarse names and fine_to_coarse of shape ({N_FINE},), "
            f"found {len(fine_names)}, {len(coarse_names)} and {mapping.shape}"
        )
    x, fine = _checked(path, "test", arrays["x"], arrays["y_fine"], N_FINE)
    _, coarse = _checked(path, "test", x, arrays["y_coarse"], N_COARSE)
    fine_to_coarse = _checked_map(path, mapping)
    if not np.array_equal(fine_to_coarse[fine], coarse):
        raise CorruptDataError(f"{path}: expected y_coarse == fine_to_coarse[y_fine], found other coarse labels")
    empty_x, empty_y = np.zeros((0, 32, 32, 3), np.uint8), np.zeros((0,), np.uint8)
    notes = {
        "images": "smoke tests only: official CIFAR-100 test[0:20], lossless, in order, as the test split; "
        "the train split is empty (twenty images train nothing)",
    }
    names = (fine_names, coarse_names, fine_to_coarse.tolist())
    splits = ((empty_x, empty_y, empty_y), (x, fine, coarse))
    return _dataset("data_dir_sample", path, status, tried, splits, names, labels, notes)


def _standin(
    root: Path, seed: int, allow_download: bool, labels: str, variant: str, tried: list[str]
) -> Dataset | None:
    """Real CIFAR-10 with its classes as fine labels and the fixed 5-group coarse labels."""
    if variant == "sample":
        tried.append(f"cifar10_standin: not asked for (variant={variant!r})")
        return None
    cifar10 = load_cifar10(data_dir=root, seed=seed, allow_download=allow_download)
    tried.append(
        f"cifar10_standin: using CIFAR-10 from {cifar10.source} ({cifar10.source_path}) as a stand-in, "
        "not CIFAR-100: fine = its 10 classes, coarse = 5 fixed groups"
    )
    mapping = np.asarray(STANDIN_FINE_TO_COARSE, np.uint8)
    splits = (
        (cifar10.x_train, cifar10.y_train, mapping[cifar10.y_train]),
        (cifar10.x_test, cifar10.y_test, mapping[cifar10.y_test]),
    )
    notes = {
        "stand_in": STANDIN_NOTE,
        "images": f"CIFAR-10 ({cifar10.source}): {cifar10.notes.get('images', 'see cifar10_notes')}",
        "cifar10_source": cifar10.source,
        "cifar10_tried": list(cifar10.tried),
        "cifar10_notes": {k: v for k, v in cifar10.notes.items() if not k.startswith("class_counts_")},
    }
    names = (list(CIFAR10_CLASS_NAMES), list(STANDIN_COARSE_NAMES), list(STANDIN_FINE_TO_COARSE))
    path = Path(cifar10.source_path) if cifar10.source_path else root
    return _dataset("cifar10_standin", path, cifar10.checksum_status, tried, splits, names, labels, notes)


def _official_dataset(
    blobs: dict[str, bytes], source: str, path: Path, status: str, labels: str, tried: list[str]
) -> Dataset:
    """Unpickle train, test and meta; derive fine->coarse from the training pairs; check and wrap them."""
    meta = _unpickle(blobs["meta"], f"{path}/meta", (b"fine_label_names", b"coarse_label_names"))
    fine_names = _names(meta[b"fine_label_names"], N_FINE, f"{path}/meta", "fine_label_names")
    coarse_names = _names(meta[b"coarse_label_names"], N_COARSE, f"{path}/meta", "coarse_label_names")
    splits = []
    for name in ("train", "test"):
        origin = f"{path}/{name}"
        batch = _unpickle(blobs[name], origin, (b"data", b"fine_labels", b"coarse_labels"))
        data = np.asarray(batch[b"data"])
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
            raise CorruptDataError(f"{origin}: expected data uint8 of shape (N, 3072), found {data.dtype} {data.shape}")
        # Each row holds the red, green and blue 32x32 planes in turn: (N, 3, 32, 32) -> NHWC.
        x = np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        x, fine = _checked(origin, name, x, np.asarray(batch[b"fine_labels"]), N_FINE)
        _, coarse = _checked(origin, name, x, np.asarray(batch[b"coarse_labels"]), N_COARSE)
        splits.append((x, fine, coarse))
    fine_to_coarse = _derive_map(f"{path}/train", splits[0][1], splits[0][2])
    if not np.array_equal(fine_to_coarse[splits[1][1]], splits[1][2]):
        raise CorruptDataError(f"{path}/test: expected the training set's fine->coarse pairs, found others")
    notes = {"images": "official python version: lossless, original order"}
    names = (fine_names, coarse_names, fine_to_coarse.tolist())
    return _dataset(source, path, status, tried, (splits[0], splits[1]), names, labels, notes)


def _dataset(
    source: str,
    path: Path,
    status: str,
    tried: list[str],
    splits: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...],
    names: tuple[list[str], list[str], list[int]],
    labels: str,
    notes: dict[str, Any],
) -> Dataset:
    """Wrap (x, fine, coarse) train and test splits as a Dataset holding the chosen labels."""
    fine_names, coarse_names, fine_to_coarse = names
    column = 1 if labels == "fine" else 2
    class_names = tuple(fine_names if labels == "fine" else coarse_names)
    (x_train, y_train), (x_test, y_test) = ((split[0], split[column]) for split in splits)
    counts = {
        f"class_counts_{split}": np.bincount(y, minlength=len(class_names)).tolist()
        for split, y in (("train", y_train), ("test", y_test))
    }
    label_notes = {
        "labels": labels,
        "fine_names": fine_names,
        "coarse_names": coarse_names,
        "fine_to_coarse": fine_to_coarse,
    }
    # Positional, in field order: name, x_train, y_train, x_test, y_test, source, source_path, checksum_status,
    # full_train_size, tried, class_names, notes.
    return Dataset(
        "cifar100",
        x_train,
        y_train,
        x_test,
        y_test,
        source,
        str(path),
        status,
        len(y_train),
        tuple(tried),
        class_names,
        {**notes, **label_notes, **counts},
    )


def _unpickle(blob: bytes, origin: str, keys: tuple[bytes, ...]) -> dict[bytes, Any]:
    """Unpickle one official file (arrays, lists, bytes, ints only) and check it has `keys`."""
    try:
        content = ArrayUnpickler(io.BytesIO(blob), encoding="bytes").load()
    except Exception as exc:  # noqa: BLE001 - garbage can fail to unpickle in many ways; all mean a bad file
        raise CorruptDataError(
            f"{origin}: expected a CIFAR-100 python file (a pickled dict with {[k.decode() for k in keys]}), "
            f"found an unreadable one ({type(exc).__name__}: {exc})"
        ) from exc
    if not isinstance(content, dict) or any(k not in content for k in keys):
        found = sorted(map(repr, content)) if isinstance(content, dict) else type(content).__name__
        raise CorruptDataError(f"{origin}: expected a dict with keys {list(keys)}, found {found}")
    return content


def _names(raw: Any, n: int, origin: str, key: str) -> list[str]:
    """Decode a list of n label names (bytes, as the official meta stores them)."""
    if not isinstance(raw, list | tuple) or len(raw) != n or not all(isinstance(b, bytes | str) for b in raw):
        raise CorruptDataError(f"{origin}: expected {key} as {n} names, found {type(raw).__name__} of other content")
    return [b.decode("utf-8") if isinstance(b, bytes) else b for b in raw]


def _read_tar(path: Path) -> dict[str, bytes]:
    """Read train, test and meta straight from the tarball (nothing is extracted to disk)."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
            missing = [name for name in _FILES if name not in members]
            if missing:
                raise CorruptDataError(f"{path}: expected the members {', '.join(_FILES)}, missing {missing}")
            files = {name: tar.extractfile(members[name]) for name in _FILES}
            return {name: f.read() for name, f in files.items() if f is not None}
    except (OSError, EOFError, tarfile.TarError, zlib.error) as exc:
        raise CorruptDataError(f"{path}: expected a readable .tar.gz, found ({type(exc).__name__}: {exc})") from exc


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    """Read the sample's arrays (no pickles)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in _SAMPLE_KEYS if k not in f.files]
            if missing:
                raise CorruptDataError(f"{path}: expected keys {list(_SAMPLE_KEYS)}, found {sorted(f.files)}")
            return {k: f[k] for k in _SAMPLE_KEYS}
    except CorruptDataError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise CorruptDataError(
            f"{path}: expected a readable npz archive, found an unreadable file ({type(exc).__name__}: {exc})"
        ) from exc


def _checked(origin: Path | str, split: str, x: np.ndarray, y: np.ndarray, n_classes: int) -> tuple[np.ndarray, ...]:
    """Check images uint8 (N, 32, 32, 3) and labels integer (N,) in 0..n_classes-1; return them, labels uint8."""
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != (32, 32, 3) or len(x) == 0:
        raise CorruptDataError(f"{origin}: expected {split} images uint8 (N>0, 32, 32, 3), found {x.dtype} {x.shape}")
    if not np.issubdtype(y.dtype, np.integer) or y.shape != (len(x),):
        raise CorruptDataError(
            f"{origin}: expected {split} labels integer of shape ({len(x)},), found {y.dtype} {y.shape}"
        )
    if y.min() < 0 or y.max() >= n_classes:
        raise CorruptDataError(
            f"{origin}: expected {split} labels in 0..{n_classes - 1}, found range {y.min()}..{y.max()}"
        )
    return x, y.astype(np.uint8, copy=False)


def _checked_map(origin: Path | str, mapping: np.ndarray) -> np.ndarray:
    """Check a fine->coarse map: N_FINE integers in 0..N_COARSE-1."""
    if not np.issubdtype(mapping.dtype, np.integer) or mapping.min() < 0 or mapping.max() >= N_COARSE:
        raise CorruptDataError(f"{origin}: expected fine_to_coarse integers in 0..{N_COARSE - 1}, found others")
    return mapping.astype(np.uint8)


def _derive_map(origin: str, fine: np.ndarray, coarse: np.ndarray) -> np.ndarray:
    """Read the fine->coarse map off the paired labels: every fine class present, with one coarse class."""
    pairs = np.unique(np.stack([fine, coarse], axis=1), axis=0)
    classes, counts = np.unique(pairs[:, 0], return_counts=True)
    if len(classes) != N_FINE:
        absent = sorted(set(range(N_FINE)) - set(classes.tolist()))
        raise CorruptDataError(f"{origin}: expected every fine class 0..{N_FINE - 1}, found none of {absent}")
    if np.any(counts > 1):
        split = classes[counts > 1].tolist()
        raise CorruptDataError(f"{origin}: expected one coarse label per fine label, found several for {split}")
    mapping = np.empty(N_FINE, np.uint8)
    mapping[pairs[:, 0]] = pairs[:, 1]
    return mapping

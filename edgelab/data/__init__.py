"""Datasets and their partition across emulated devices.

Entry points: `load_dataset(name, ...)` returns a `Dataset` with provenance, and
`partition(labels, n_devices, ...)` splits its indices across devices.
"""

from __future__ import annotations

import os
from typing import Any

from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.data.dataset import Dataset
from edgelab.data.partition import partition, shard_sizes, shared_subset_split

__all__ = ["DATASETS", "Dataset", "load_dataset", "partition", "shard_sizes", "shared_subset_split"]

DATASETS = ("mnist", "cifar10", "cifar100", "plantvillage_tomato")
# Keyword options each loader accepts beyond the common ones of `load_dataset`.
_OPTIONS: dict[str, tuple[str, ...]] = {
    "mnist": (),
    "cifar10": ("variant",),
    "cifar100": ("labels", "variant"),
    "plantvillage_tomato": ("image_size", "validation_fraction"),
}


def load_dataset(
    name: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    sample_limit: int | None = None,
    test_limit: int | None = None,
    seed: int = 0,
    allow_download: bool | None = None,
    **options: Any,
) -> Dataset:
    """Load a dataset by name from the first source that works.

    Parameters
    ----------
    name : str
        One of `DATASETS`.
    data_dir : str | os.PathLike[str] | None
        Directory to look in first; defaults to ``$EDGELAB_DATA_DIR``, else
        ``<repo root>/data/cache``.
    sample_limit : int | None
        Keep a seeded random subset of this many training samples; None keeps all.
    test_limit : int | None
        Likewise for the test samples (drawn with ``seed + 1``).
    seed : int
        Seed of the subsets and of any shuffle of the source.
    allow_download : bool | None
        Whether a download (Keras for MNIST, CIFAR-10 and CIFAR-100, kagglehub for PlantVillage) may be
        tried; None means yes unless ``EDGELAB_OFFLINE=1``.
    **options : Any
        Options of that dataset's loader: none for "mnist"; ``variant`` for "cifar10"
        (`load_cifar10`: "auto", "full_jpeg", "lossless_subset" or "package_sample"); ``labels``
        ("fine" or "coarse") and ``variant`` ("auto", "sample" or "cifar10_standin") for "cifar100"
        (`load_cifar100`; offline, "auto" falls back to a CIFAR-10 stand-in with 5 coarse groups, and
        says so in the provenance); ``image_size`` and ``validation_fraction`` for "plantvillage_tomato"
        (`load_plantvillage`).
        PlantVillage has no test set: its validation split is returned as the test split.

    Returns
    -------
    Dataset
        Arrays plus provenance (`Dataset.provenance()`).

    Raises
    ------
    ConfigError
        If name, a limit, seed or an option is not allowed, or a limit exceeds the data.
    DataError
        If no source works (`CorruptDataError` if a file fails verification).

    Examples
    --------
    >>> ds = load_dataset("mnist", sample_limit=1000, seed=0)  # doctest: +SKIP
    >>> ds.x_train.shape  # doctest: +SKIP
    (1000, 28, 28)
    >>> load_dataset("plantvillage_tomato", image_size=96).x_train.shape  # doctest: +SKIP
    (1280, 96, 96, 3)
    """
    if name not in DATASETS:
        raise ConfigError("name", name, f"one of {DATASETS}")
    for parameter, limit in (("sample_limit", sample_limit), ("test_limit", test_limit)):
        checks.integer(parameter, limit, at_least=1, none="no limit")
    checks.integer("seed", seed)

    for option, value in options.items():
        if option not in _OPTIONS[name]:
            accepted = ", ".join(_OPTIONS[name]) or "none"
            raise ConfigError(option, value, f"not an option of {name!r} (its options: {accepted})")

    # Imported here so that each loader's module stays independent of the others.
    if name == "plantvillage_tomato":
        from edgelab.data.plantvillage import load_plantvillage

        full = load_plantvillage(data_dir=data_dir, seed=seed, allow_download=allow_download, **options)
    elif name == "cifar10":
        from edgelab.data.cifar10 import load_cifar10

        full = load_cifar10(data_dir=data_dir, seed=seed, allow_download=allow_download, **options)
    elif name == "cifar100":
        from edgelab.data.cifar100 import load_cifar100

        full = load_cifar100(data_dir=data_dir, seed=seed, allow_download=allow_download, **options)
    else:
        from edgelab.data.mnist import load_mnist

        full = load_mnist(data_dir=data_dir, seed=seed, allow_download=allow_download)
    return full.limited(sample_limit=sample_limit, test_limit=test_limit, seed=seed)

"""Split sample indices across emulated devices, IID or non-IID by label.

The "label" scheme is the pathological non-IID split of FedAvg: sort by label, cut into
``n_devices * classes_per_device`` shards and give each device ``classes_per_device`` of them.
Paper: arxiv.org/abs/1602.05629 (McMahan et al., Communication-Efficient Learning of Deep
Networks from Decentralized Data, section 3).
"""

from __future__ import annotations

import numpy as np

from edgelab.common import checks
from edgelab.common.errors import ConfigError

SCHEMES = ("iid", "label")


def shard_sizes(n_samples: int, n_devices: int) -> list[int]:
    """Return the IID shard size of each device; sizes differ by at most 1.

    Parameters
    ----------
    n_samples : int
        Number of samples to split.
    n_devices : int
        Number of devices, between 1 and `n_samples`.

    Returns
    -------
    list[int]
        `n_devices` sizes summing to `n_samples`, larger ones first (as np.array_split).

    Examples
    --------
    >>> shard_sizes(10, 3)
    [4, 3, 3]
    """
    checks.integer("n_devices", n_devices, at_least=1, at_most=n_samples, numpy=True)
    base, extra = divmod(n_samples, n_devices)
    return [base + (1 if i < extra else 0) for i in range(n_devices)]


def partition(
    labels: np.ndarray,
    n_devices: int,
    *,
    scheme: str = "iid",
    seed: int = 0,
    classes_per_device: int = 2,
) -> list[np.ndarray]:
    """Assign every sample index to exactly one device.

    Parameters
    ----------
    labels : np.ndarray
        Labels of shape (N,); only their order and values matter.
    n_devices : int
        Number of devices, between 1 and N.
    scheme : str
        "iid": a seeded permutation split into near-equal shards.
        "label": stable-sort by label, cut into ``n_devices * classes_per_device``
        contiguous chunks, and give each device ``classes_per_device`` chunks
        chosen by a seeded permutation.
    seed : int
        Seed of the permutation.
    classes_per_device : int
        Chunks per device for the "label" scheme (ignored for "iid").

    Returns
    -------
    list[np.ndarray]
        One int64 index array per device; together they hold each of 0..N-1 once.

    Raises
    ------
    ConfigError
        If n_devices, scheme or classes_per_device is not allowed.

    Examples
    --------
    >>> [s.tolist() for s in partition(np.array([0, 0, 1, 1]), 2, scheme="label",
    ...                                 classes_per_device=1)]
    [[0, 1], [2, 3]]
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ConfigError("labels", f"array of shape {labels.shape}", "a 1-D array of shape (N,)")
    n_samples = len(labels)
    checks.integer("n_devices", n_devices, at_least=1, at_most=n_samples, numpy=True)
    if scheme not in SCHEMES:
        raise ConfigError("scheme", scheme, f"one of {SCHEMES}")
    checks.integer("classes_per_device", classes_per_device, at_least=1)

    rng = np.random.default_rng(seed)
    if scheme == "iid":
        order = rng.permutation(n_samples).astype(np.int64)
        return list(np.array_split(order, n_devices))

    n_chunks = n_devices * classes_per_device
    if n_chunks > n_samples:
        raise ConfigError(
            "classes_per_device",
            classes_per_device,
            f"at most {n_samples // n_devices} so that n_devices * classes_per_device <= {n_samples} samples",
        )
    by_label = np.argsort(labels, kind="stable").astype(np.int64)
    chunks = np.array_split(by_label, n_chunks)
    owner = rng.permutation(n_chunks)  # owner[d*k:(d+1)*k] are the chunks of device d
    return [
        np.concatenate([chunks[c] for c in owner[d * classes_per_device : (d + 1) * classes_per_device]])
        for d in range(n_devices)
    ]


def shared_subset_split(
    labels: np.ndarray, n_devices: int, shared_fraction: float, *, scheme: str = "iid", seed: int = 0
) -> list[np.ndarray]:
    """``partition`` of all samples but a seeded shared subset, which every device then holds as well.

    Zhao et al. (2018) restore much of the accuracy federated averaging loses
    on label-skewed shards by giving every client a small set drawn from all
    classes. The subset (``round(shared_fraction * N)`` samples) is drawn
    first and the rest is partitioned as ``scheme`` says, so a device holds
    its shard and the subset, once each.

    Examples
    --------
    >>> [len(s) for s in shared_subset_split(np.arange(10) % 2, 2, 0.2)]
    [6, 6]
    """
    labels = np.asarray(labels)
    if not (isinstance(shared_fraction, int | float) and 0.0 <= shared_fraction < 1.0):
        raise ConfigError("shared_fraction", shared_fraction, "a share of the training set in [0, 1)")
    n_shared = round(shared_fraction * len(labels))
    if n_shared == 0:
        return partition(labels, n_devices, scheme=scheme, seed=seed)
    # A stream of its own: the shards of the rest are cut with the run's seed as before.
    shared = np.sort(np.random.default_rng([seed, 1]).choice(len(labels), size=n_shared, replace=False))
    rest = np.setdiff1d(np.arange(len(labels)), shared)
    shards = partition(labels[rest], n_devices, scheme=scheme, seed=seed)
    return [np.concatenate([rest[s], shared]).astype(np.int64) for s in shards]

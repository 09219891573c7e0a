"""Who exchanges with whom, and which slice each holds: rings' slices, gossip graphs and their mixing weights.

Plain numpy and Python, no Dask: the peer rounds (``edgelab.peer``), the
collective schedules (``edgelab.collectives.schedules``) and the training config's
checks all read them.
"""

from __future__ import annotations

import numpy as np

from edgelab.common import checks
from edgelab.common.errors import ConfigError

#: The shapes of a gossip graph: every device between its two neighbours, or ``degree`` drawn links each.
TOPOLOGIES = ("ring", "random")


def slice_bounds(length: int, n: int) -> list[int]:
    """Where each of ``n`` owners' slices of a ``length``-vector starts, and the end.

    Examples
    --------
    >>> slice_bounds(10, 3)
    [0, 3, 6, 10]
    """
    return [(i * length) // n for i in range(n)] + [length]


def neighbours(topology: str, n: int, *, degree: int = 2, seed: int = 0) -> list[list[int]]:
    """Each worker's neighbours in an undirected ``topology``: ``"ring"``, or ``"random"`` (``degree`` draws each).

    Raises
    ------
    ConfigError
        An unknown topology, or one that leaves a worker unconnected (``topology`` named).
    """
    if topology not in TOPOLOGIES:
        raise ConfigError("topology", topology, f"one of {', '.join(TOPOLOGIES)}")
    links: set[tuple[int, int]] = set()
    if topology == "ring":
        links = {(min(i, (i + 1) % n), max(i, (i + 1) % n)) for i in range(n)}
    else:
        checks.integer("degree", degree, at_least=0)
        rng = np.random.default_rng(seed)
        for i in range(n):
            others = [j for j in range(n) if j != i]
            for j in rng.choice(others, size=min(degree, len(others)), replace=False):
                links.add((min(i, int(j)), max(i, int(j))))
    adjacency = [sorted({b for a, b in links if a == i} | {a for a, b in links if b == i}) for i in range(n)]
    if not _connected(adjacency):
        alone = [i for i, a in enumerate(adjacency) if not a]
        raise ConfigError(
            "topology",
            f"{topology} (degree={degree}, seed={seed})",
            f"a graph connecting every worker (this one leaves {alone or 'a group'} cut off)",
        )
    return adjacency


def _connected(adjacency: list[list[int]]) -> bool:
    seen, todo = {0}, [0]
    while todo:
        for j in adjacency[todo.pop()]:
            if j not in seen:
                seen.add(j)
                todo.append(j)
    return len(seen) == len(adjacency)


TOPOLOGY_ALLOWED = "'ring' or 'random:<degree>' (an integer degree >= 1, drawn with the run's seed)"


def build_topology(spec: str, n: int, seed: int) -> list[list[int]]:
    """Each device's neighbours in the gossip topology ``spec`` over ``n`` devices.

    Raises
    ------
    ConfigError
        ``gossip_topology`` unknown, or leaving a device unconnected.

    Examples
    --------
    >>> build_topology("ring", 4, 0)
    [[1, 3], [0, 2], [1, 3], [0, 2]]
    """
    from edgelab.sync.topology import neighbours

    kind, _, degree = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not (spec == "ring" or (kind == "random" and degree.isdigit() and int(degree) >= 1)):
        raise ConfigError("gossip_topology", spec, TOPOLOGY_ALLOWED)
    if n == 1:
        return [[]]  # a lone device has no one to average with
    try:
        adjacency = neighbours(kind, n, degree=int(degree or 2), seed=seed)
    except ConfigError as refused:
        raise ConfigError("gossip_topology", spec, f"{refused.allowed} with n_devices={n}, seed={seed}") from None
    return [[j for j in row if j != i] for i, row in enumerate(adjacency)]


def metropolis_row(adjacency: list[list[int]], i: int) -> dict[int, float]:
    """Device ``i``'s mixing weights over itself and its neighbours (Metropolis-Hastings), by device index.

    Examples
    --------
    >>> metropolis_row([[1], [0, 2], [1]], 0)
    {0: 0.6666666666666667, 1: 0.3333333333333333}
    """
    own = 1.0 / (1 + len(adjacency[i]))
    row = {j: 1.0 / (1 + max(len(adjacency[i]), len(adjacency[j]))) for j in adjacency[i]}
    # 1 - sum(row), written so that on a regular graph it is exactly the neighbours' weight
    row[i] = own + sum(own - w for w in row.values())
    return dict(sorted(row.items()))


def mix(row: dict[int, float], vectors: dict[int, np.ndarray]) -> np.ndarray:
    """``sum_k row[k] * vectors[k]``, accumulated in float64 in device order (devices averaging alike agree)."""
    total = sum(w * vectors[k].astype(np.float64) for k, w in sorted(row.items()))
    return np.asarray(total).astype(vectors[min(row)].dtype)

"""Communication patterns of data-parallel training as explicit schedules (qiao/fig3-4, qiao/eq-comm-volume).

Paper: Qiao et al., survey of distributed AI at the edge, Figure 3-4 (parameter
server, peer-to-peer, AllReduce); the byte counts are the standard ones
(eq-comm-volume, derived in the catalog, not in the survey's text).

A pattern is built as a ``Schedule``: a list of steps, each a list of sends
``Send(src, dst, what)``. Every device holds named flat buffers; buffer
``"x"`` starts as the device's own vector. Within a step every send reads its
source buffer as it was when the step began, then each destination applies
what it received in the order the step lists it (``add`` into, or ``copy``
over, a slice of one of its buffers, times ``what.scale``). A send from a device
to itself moves no bytes: it is how a device combines its own value in the
order the arithmetic needs. ``simulate`` runs a schedule in numpy;
``edgelab.collectives.worker`` runs the same schedule between Dask workers.

The all-reduce patterns compute the sum of the workers' vectors into
``Schedule.result`` on every worker; each worker then divides by N locally:

* ``ps``: S server devices (indices N..N+S-1), server ``s`` owns slice ``s``
  (``edgelab.sync.topology.slice_bounds``); every worker pushes each server its
  slice, the server sums them in worker order, every worker pulls every slice.
* ``p2p``: every worker sends its whole vector to every other; each sums all
  N vectors in worker order (so every worker holds the same bits).
* ``ring``: reduce-scatter then all-gather, N-1 steps each; chunk ``c`` is
  summed starting at worker ``c`` and going round the ring.
* ``tree``: a binomial tree rooted at worker 0 (each node sends at most once
  and receives at most once a step): reduce up in ceil(log2 N) steps, then
  broadcast down in as many. Every tree edge carries |g| up and |g| down.

``gossip`` does not reach the mean: each step every worker averages its value
with its neighbours' (Metropolis weights, which keep the mean), and the
distance to the mean shrinks step by step (``gossip_distances``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.sync.topology import neighbours, slice_bounds

#: The all-reduce patterns: every worker ends with the exact mean (to float rounding).
ALLREDUCE_PATTERNS = ("ps", "p2p", "ring", "tree")
#: An average further than this from the numpy mean (relative to its largest magnitude) is more than float error.
MEAN_TOLERANCE = 1e-5
PATTERNS = (*ALLREDUCE_PATTERNS, "gossip")


@dataclass(frozen=True)
class Piece:
    """What a send carries and what its destination does with it.

    ``source[lo:hi]`` of the sender, applied at the receiver to ``into[lo:hi]``:
    ``op`` ``"add"`` (into zeros if the buffer is new) or ``"copy"``, after
    multiplying by ``scale`` (1.0: untouched).
    """

    source: str
    into: str
    op: str = "add"
    lo: int = 0
    hi: int | None = None  # None: to the end
    scale: float = 1.0

    def span(self, length: int) -> slice:
        """The slice of a ``length``-vector this piece covers."""
        return slice(self.lo, length if self.hi is None else self.hi)


@dataclass(frozen=True)
class Send:
    """One message of a step: ``src`` sends ``what`` to ``dst`` (src == dst: a local combine, no bytes)."""

    src: int
    dst: int
    what: Piece


Step = list[Send]


@dataclass(frozen=True)
class Schedule:
    """A pattern for ``workers`` workers (devices 0..N-1) and ``servers`` servers (devices N..), over a vector.

    ``result`` names the buffer every worker ends with; dividing it by
    ``divide_by`` gives the average (1 for gossip, whose steps average).
    """

    pattern: str
    workers: int
    servers: int
    length: int  # elements of the flat vector
    steps: list[Step]
    result: str
    divide_by: int

    @property
    def devices(self) -> int:
        """Workers and servers."""
        return self.workers + self.servers

    def step_bytes(self, itemsize: int) -> list[np.ndarray]:
        """Payload bytes per directed link (``[src, dst]``), one matrix per step."""
        out = []
        for step in self.steps:
            matrix = np.zeros((self.devices, self.devices), dtype=np.int64)
            for send in step:
                if send.src != send.dst:
                    span = send.what.span(self.length)
                    matrix[send.src, send.dst] += (span.stop - span.start) * itemsize
            out.append(matrix)
        return out

    def link_bytes(self, itemsize: int) -> np.ndarray:
        """Payload bytes per directed link over the whole schedule."""
        return np.sum(self.step_bytes(itemsize), axis=0)


@dataclass
class Outcome:
    """What running a schedule left: every device's buffers, each worker's average, bytes per directed link."""

    buffers: list[dict[str, np.ndarray]]
    averages: list[np.ndarray]  # one per worker
    link_bytes: np.ndarray  # (devices, devices), payload bytes [src, dst]
    extra: dict[str, object] = field(default_factory=dict)


# ----------------------------------------------------------------- build ----


def build_schedule(
    pattern: str, *, workers: int, length: int, servers: int = 1, gossip_steps: int = 10,
    topology: str = "ring", degree: int = 2, seed: int = 0,
) -> Schedule:  # fmt: skip
    """The schedule of ``pattern`` for ``workers`` workers and a ``length``-element vector.

    Parameters
    ----------
    pattern
        One of ``PATTERNS``.
    workers
        N, at least 2.
    length
        Elements of the flat vector, at least N (ring and PS cut it into N or S slices).
    servers
        S, parameter-server shards (``ps`` only), 1..length.
    gossip_steps, topology, degree, seed
        ``gossip`` only: how many averaging steps, over which graph (``"ring"``,
        or ``"random"``: each worker linked to ``degree`` others drawn with ``seed``).

    Raises
    ------
    ConfigError
        A pattern, size or topology that is not allowed, or a topology that leaves a worker unconnected.
    """
    if pattern not in PATTERNS:
        raise ConfigError("pattern", pattern, f"one of {', '.join(PATTERNS)}")
    checks.integer("workers", workers, at_least=2)
    checks.integer("length", length, at_least=workers)
    if pattern == "ps":
        checks.integer("servers", servers, at_least=1)
        if servers > length:
            raise ConfigError("servers", servers, f"at most length={length} (one slice each)")
        return _ps(workers, servers, length)
    if pattern == "p2p":
        return _p2p(workers, length)
    if pattern == "ring":
        return _ring(workers, length)
    if pattern == "tree":
        return _tree(workers, length)
    checks.integer("gossip_steps", gossip_steps, at_least=1)
    return _gossip(workers, length, gossip_steps, neighbours(topology, workers, degree=degree, seed=seed))


def _ps(n: int, s: int, length: int) -> Schedule:
    bounds = slice_bounds(length, s)
    # Push: server n+k sums slice k of every worker's vector, in worker order.
    push = [Send(w, n + k, Piece("x", "sum", "add", bounds[k], bounds[k + 1])) for k in range(s) for w in range(n)]
    pull = [Send(n + k, w, Piece("sum", "sum", "copy", bounds[k], bounds[k + 1])) for w in range(n) for k in range(s)]
    return Schedule("ps", n, s, length, [push, pull], "sum", n)


def _p2p(n: int, length: int) -> Schedule:
    # Each worker sums all N vectors in worker order: its own arrives by the self-send.
    step = [Send(src, dst, Piece("x", "sum", "copy" if src == 0 else "add")) for dst in range(n) for src in range(n)]
    return Schedule("p2p", n, 0, length, [step], "sum", n)


def _ring(n: int, length: int) -> Schedule:
    bounds = slice_bounds(length, n)

    def chunk(c: int) -> tuple[int, int]:
        return bounds[c % n], bounds[c % n + 1]

    steps: list[Step] = []
    # Reduce-scatter: at step t worker i adds its running chunk i-t into worker i+1's; after N-1 steps
    # worker i holds chunk i+1 summed over the ring, starting at worker i+1.
    for t in range(n - 1):
        steps.append([Send(i, (i + 1) % n, Piece("x", "x", "add", *chunk(i - t))) for i in range(n)])
    # All-gather: the finished chunks go round once more, copied over.
    for t in range(n - 1):
        steps.append([Send(i, (i + 1) % n, Piece("x", "x", "copy", *chunk(i + 1 - t))) for i in range(n)])
    return Schedule("ring", n, 0, length, steps, "x", n)


def tree_steps(n: int) -> int:
    """Steps of a binomial-tree reduce (or broadcast) over ``n`` workers: ceil(log2 n)."""
    return math.ceil(math.log2(n))


def _tree(n: int, length: int) -> Schedule:
    levels = tree_steps(n)
    # Reduce: at level k, worker i with i mod 2^(k+1) == 2^k adds its partial sum into worker i - 2^k's.
    up = [[Send(i, i - 2**k, Piece("x", "x")) for i in range(2**k, n, 2 ** (k + 1))] for k in range(levels)]
    down = [
        [Send(i - 2**k, i, Piece("x", "x", "copy")) for i in range(2**k, n, 2 ** (k + 1))]
        for k in reversed(range(levels))
    ]
    return Schedule("tree", n, 0, length, up + down, "x", n)


def _gossip(n: int, length: int, steps: int, adjacency: list[list[int]]) -> Schedule:
    # Metropolis weights: symmetric and rows summing to 1, so the mean is kept and every value tends to it.
    weight = {(i, j): 1.0 / (1 + max(len(adjacency[i]), len(adjacency[j]))) for i in range(n) for j in adjacency[i]}
    out: list[Step] = []
    for t in range(steps):
        step = []
        for i in range(n):
            own = 1.0 - sum(weight[i, j] for j in adjacency[i])
            step.append(Send(i, i, Piece(f"x{t}" if t else "x", f"x{t + 1}", "copy", scale=own)))
            step += [Send(j, i, Piece(f"x{t}" if t else "x", f"x{t + 1}", scale=weight[i, j])) for j in adjacency[i]]
        out.append(step)
    return Schedule("gossip", n, 0, length, out, f"x{steps}", 1)


# -------------------------------------------------------------- simulate ----


def apply_piece(buffers: dict[str, np.ndarray], piece: Piece, payload: np.ndarray, length: int) -> None:
    """What a destination does with a piece it received (``payload``: the sender's slice)."""
    if piece.scale != 1.0:
        payload = payload * payload.dtype.type(piece.scale)
    span = piece.span(length)
    if piece.into not in buffers:
        buffers[piece.into] = np.zeros(length, dtype=payload.dtype)
    target = buffers[piece.into]
    if piece.op == "copy":
        target[span] = payload
    else:
        target[span] += payload


def simulate(schedule: Schedule, vectors: list[np.ndarray]) -> Outcome:
    """Run ``schedule`` in numpy on the workers' ``vectors`` (one flat array each, one dtype).

    Returns
    -------
    Outcome
        Every device's buffers after the last step, each worker's average
        (``result / divide_by``) and the payload bytes per directed link.
    """
    if len(vectors) != schedule.workers or any(v.shape != (schedule.length,) for v in vectors):
        raise ConfigError(
            "vectors", f"{len(vectors)} of shapes {sorted({v.shape for v in vectors})}",
            f"{schedule.workers} flat vectors of {schedule.length} elements",
        )  # fmt: skip
    buffers: list[dict[str, np.ndarray]] = [{"x": v.copy()} for v in vectors]
    buffers += [{} for _ in range(schedule.servers)]
    for step in schedule.steps:
        # Every send reads its source as the step found it.
        payloads = [buffers[s.src][s.what.source][s.what.span(schedule.length)].copy() for s in step]
        for send, payload in zip(step, payloads, strict=True):
            apply_piece(buffers[send.dst], send.what, payload, schedule.length)
    itemsize = vectors[0].dtype.itemsize
    return Outcome(buffers, averages(schedule, buffers), schedule.link_bytes(itemsize))


def averages(schedule: Schedule, buffers: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """Each worker's average from its result buffer (the division is local: no bytes)."""
    results = [buffers[w][schedule.result] for w in range(schedule.workers)]
    if schedule.divide_by == 1:
        return results
    return [r / r.dtype.type(schedule.divide_by) for r in results]


def gossip_distances(schedule: Schedule, buffers: list[dict[str, np.ndarray]], mean: np.ndarray) -> list[float]:
    """Per gossip step (0: before any), the workers' RMS distance to ``mean``, relative to the norm of the mean."""
    norm = float(np.linalg.norm(mean)) or 1.0
    out = []
    for t in range(len(schedule.steps) + 1):
        name = f"x{t}" if t else "x"
        gaps = [float(np.linalg.norm(buffers[w][name] - mean)) for w in range(schedule.workers)]
        out.append(math.sqrt(sum(g * g for g in gaps) / len(gaps)) / norm)
    return out


# ------------------------------------------------------------- formulas ----


def formula(pattern: str, workers: int, vector_bytes: int) -> dict[str, float]:
    """eq-comm-volume for one iteration: bytes each worker sends and receives, the total, and the steps.

    PS: each worker sends and receives |g|, the servers' side carries 2N|g|;
    P2P: each sends and receives (N-1)|g|; ring: each sends 2(N-1)/N |g|;
    tree: 2 ceil(log2 N) steps, each of the N-1 edges |g| up and |g| down.
    """
    n, g = workers, vector_bytes
    if pattern == "ps":
        return {"sent_per_worker": g, "received_per_worker": g, "total": 2 * n * g, "steps": 2}
    if pattern == "p2p":
        return {
            "sent_per_worker": (n - 1) * g,
            "received_per_worker": (n - 1) * g,
            "total": n * (n - 1) * g,
            "steps": 1,
        }
    if pattern == "ring":
        per = 2 * (n - 1) / n * g
        return {"sent_per_worker": per, "received_per_worker": per, "total": 2 * (n - 1) * g, "steps": 2 * (n - 1)}
    if pattern == "tree":
        per = 2 * (n - 1) / n * g  # on average: the root sends ceil(log2 N) |g|, a leaf |g|
        return {
            "sent_per_worker": per,
            "received_per_worker": per,
            "total": 2 * (n - 1) * g,
            "steps": 2 * tree_steps(n),
        }
    raise ConfigError("pattern", pattern, f"one of {', '.join(ALLREDUCE_PATTERNS)} (gossip has no closed form here)")


def emulated_seconds(step_bytes: list[np.ndarray], *, bytes_per_s: float, latency_s: float) -> dict[str, float]:
    """Time of a schedule on the devices' links, steps in sequence, each step one latency plus its transfer.

    ``ports``: each device has one full-duplex port at ``bytes_per_s`` (a switched
    Ethernet), so a step lasts as long as the busiest port's sending or receiving.
    ``links``: every directed link has its own ``bytes_per_s``, so a step lasts as
    long as its busiest link (no port is shared: a server is no bottleneck).
    """
    ports = links = 0.0
    for matrix in step_bytes:
        if not matrix.any():
            continue
        busiest_port = max(int(matrix.sum(axis=1).max()), int(matrix.sum(axis=0).max()))
        ports += latency_s + busiest_port / bytes_per_s
        links += latency_s + int(matrix.max()) / bytes_per_s
    return {"ports": ports, "links": links}

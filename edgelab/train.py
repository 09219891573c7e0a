"""Data-parallel training over Dask: one task per device per synchronization round.

The parameter server is this (client) process. Each round it sends the global
weights to every device, each device trains on its own data from those weights
(``edgelab.runtime.train_round``) and returns its weight delta, and the
strategy (``edgelab.sync``) turns the deltas into the next global weights.
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

import math
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from distributed import wait

from edgelab import runtime
from edgelab.cluster import DeviceCluster, device_resource
from edgelab.data import Dataset, partition
from edgelab.devices import DeviceProfile
from edgelab.errors import ConfigError, DeviceMemoryError, WorkerLostError
from edgelab.models import MODELS, ModelSpec, activation_floats_per_sample, parameter_count
from edgelab.sync import STRATEGIES, DeviceUpdate, build_strategy

WORKER_DATA = ("shard", "full")
PARTITIONS = ("iid", "label")
SYNC_EVERY = ("batch", "epoch")
# Longest a round (or data loading) may take before we call the device lost.
ROUND_TIMEOUT_S = 900.0
# Recoveries of restarted devices per round, and how long to wait for one to rejoin.
MAX_RECOVERIES = 3
RESTART_WAIT_S = 120.0


@dataclass(frozen=True)
class TrainConfig:
    """One training run.

    Parameters
    ----------
    model
        ``"mlp"`` or ``"cnn"`` (``edgelab.models``).
    n_devices
        Devices that train (the parameter server is not one of them).
    epochs, batch_size
        Epochs over each device's data; batch size per device.
    sync_every
        ``"batch"`` or ``"epoch"``.
    worker_data
        ``"shard"`` or ``"full"`` (see module docstring).
    partition
        ``"iid"`` or ``"label"`` sharding when ``worker_data="shard"``.
    learning_rate, weight_decay, seed
        Local SGD step size and L2 decay; seed of weights, shards and batch order.
    momentum
        Momentum the parameter server keeps across rounds (0 = none).
    strategy
        Synchronization strategy (``edgelab.sync``).
    """

    model: str = "mlp"
    n_devices: int = 1
    epochs: int = 1
    batch_size: int = 64
    sync_every: str = "batch"
    worker_data: str = "shard"
    partition: str = "iid"
    learning_rate: float = 0.05
    seed: int = 0
    strategy: str = "ps_sync"
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        _choice("model", self.model, MODELS)
        _choice("sync_every", self.sync_every, SYNC_EVERY)
        _choice("worker_data", self.worker_data, WORKER_DATA)
        _choice("partition", self.partition, PARTITIONS)
        _choice("strategy", self.strategy, STRATEGIES)
        for name in ("n_devices", "epochs", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(name, value, "an integer >= 1")
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError("momentum", self.momentum, "a number in [0, 1)")
        self.spec  # noqa: B018 - validates learning_rate and weight_decay now, not on a worker

    @property
    def spec(self) -> ModelSpec:
        """The model every device builds."""
        return ModelSpec(self.model, learning_rate=self.learning_rate, seed=self.seed, weight_decay=self.weight_decay)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (results are keyed by it)."""
        return asdict(self)


def _choice(parameter: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(parameter, value, f"one of {', '.join(allowed)}")


def samples_per_device(cfg: TrainConfig, n_train: int) -> list[int]:
    """Training samples each device iterates per epoch."""
    if cfg.worker_data == "full":
        return [n_train] * cfg.n_devices
    base, extra = divmod(n_train, cfg.n_devices)
    return [base + (1 if i < extra else 0) for i in range(cfg.n_devices)]


def estimate_memory_mb(model: str, batch_size: int, samples_on_device: int) -> dict[str, float]:
    """Analytic memory a device needs above its framework's own footprint, in MB.

    Weights, gradients, the delta sent back and the incoming copy of the global
    weights (4 copies of the parameters), forward activations kept for the
    backward pass and their gradients (2 x batch x activations), and the
    device's training data held as float32 images.
    """
    mb = 2**20
    params = 4 * parameter_count(model) * 4 / mb
    activations = 2 * batch_size * activation_floats_per_sample(model) * 4 / mb
    data = samples_on_device * (28 * 28 * 4 + 8) / mb
    return {"parameters": params, "activations": activations, "data": data, "total": params + activations + data}


def check(cfg: TrainConfig, *, n_train: int, profile: DeviceProfile) -> dict[str, float]:
    """Reject a run that cannot work, before any cluster work starts.

    Returns the memory estimate of the busiest device.
    """
    if cfg.n_devices > n_train:
        raise ConfigError("n_devices", cfg.n_devices, f"at most the {n_train} training samples")
    smallest = min(samples_per_device(cfg, n_train))
    if cfg.batch_size > smallest:
        raise ConfigError(
            "batch_size",
            cfg.batch_size,
            f"at most the smallest shard, {smallest} samples ({n_train} samples over {cfg.n_devices} devices)",
        )
    busiest = max(samples_per_device(cfg, n_train))
    estimate = estimate_memory_mb(cfg.model, cfg.batch_size, busiest)
    if estimate["total"] > profile.usable_memory_mb:
        raise DeviceMemoryError(
            f"model={cfg.model!r} at batch_size={cfg.batch_size} with {busiest} "
            f"samples per device needs about {estimate['total']:.0f} MB, more than the "
            f"{profile.usable_memory_mb} MB a {profile.name} device has for training "
            f"({profile.memory_mb} MB minus {profile.os_reserve_mb} MB for the OS); allowed: a smaller "
            f"batch_size or sample_limit, worker_data='shard' over more devices, or a larger device_memory_mb"
        )
    return estimate


@dataclass
class TrainRun:
    """Everything one run measured."""

    config: TrainConfig
    records: pd.DataFrame  # one row per (round, device)
    evaluations: pd.DataFrame  # one row per epoch: accuracy and loss of the global model
    monitor: pd.DataFrame  # resource samples per device
    shards: pd.DataFrame  # device, samples, bytes sent to it before training
    host: dict[str, float] = field(default_factory=dict)  # host wall times
    recoveries: pd.DataFrame = field(default_factory=pd.DataFrame)  # device, round, error: restarted devices


def train(
    cluster: DeviceCluster,
    dataset: Dataset,
    cfg: TrainConfig,
    *,
    monitor_interval_s: float = 0.25,
) -> TrainRun:
    """Run synchronous data-parallel training of ``cfg`` on the cluster's devices.

    A device whose worker restarts mid-run is given its data again and the
    interrupted round re-run (``TrainRun.recoveries`` records it); a device
    that does not come back raises ``WorkerLostError``.
    """
    check(cfg, n_train=dataset.n_train, profile=cluster.profile)
    if cfg.n_devices > len(cluster.devices):
        raise ConfigError("n_devices", cfg.n_devices, f"at most the {len(cluster.devices)} devices of this cluster")
    devices = cluster.devices[: cfg.n_devices]
    strategy = build_strategy(cfg.strategy, sync_every=cfg.sync_every, momentum=cfg.momentum)
    spec = cfg.spec
    t_start = time.perf_counter()

    # The master splits the data and sends each device its part.
    if cfg.worker_data == "full":
        # The same seeded order as a single shard, so N=1 is the same run either way.
        indices = partition(dataset.y_train, 1, scheme="iid", seed=cfg.seed) * cfg.n_devices
    else:
        indices = partition(dataset.y_train, cfg.n_devices, scheme=cfg.partition, seed=cfg.seed)
    fleet = _Fleet(cluster, devices, cfg.model, dataset, dict(zip(devices, indices, strict=True)), monitor_interval_s)
    shards = pd.DataFrame(fleet.load(devices))
    weights = fleet.call(devices[0], runtime.initial_weights, spec)

    fleet.start_monitors(devices)
    steps = [math.ceil(n / cfg.batch_size) for n in shards["samples"]]
    records: list[dict[str, Any]] = []
    evaluations = []
    t_train = time.perf_counter()
    rnd = 0
    try:
        for epoch in range(cfg.epochs):
            plan = range(max(steps)) if cfg.sync_every == "batch" else [0]
            for first in plan:
                tasks = {
                    device: runtime.RoundTask(
                        fleet.run_id,
                        spec,
                        i,
                        rnd,
                        epoch,
                        first,
                        1 if cfg.sync_every == "batch" else steps[i],
                        cfg.batch_size,
                        cfg.seed,
                    )
                    for i, device in enumerate(devices)
                    if first < steps[i]
                }
                results = fleet.round(tasks, weights)
                updates = [DeviceUpdate(r["device"], delta, r["samples"]) for delta, r in results]
                weights = strategy.aggregate(weights, updates) or weights
                records.extend(r for _, r in results)
                rnd += 1
            t_eval = time.perf_counter()
            scores = fleet.call(devices[0], runtime.evaluate, spec, weights, dataset.x_test, dataset.y_test)
            evaluations.append(
                {"epoch": epoch + 1, "rounds": rnd, **scores, "eval_wall_s": time.perf_counter() - t_eval}
            )
        train_wall = time.perf_counter() - t_train
    finally:
        monitor = fleet.close()
    return TrainRun(
        config=cfg,
        records=pd.DataFrame(records),
        evaluations=pd.DataFrame(evaluations),
        monitor=monitor,
        shards=shards,
        host={"train_wall_s": train_wall, "total_wall_s": time.perf_counter() - t_start},
        recoveries=pd.DataFrame(fleet.recoveries, columns=["device", "round", "error", "wall_s"]),
    )


class _Fleet:
    """The run's devices on the cluster: where they are, what data they hold, and their recovery.

    A device whose worker restarts mid-run (the nanny brings it back under the
    same name, with a new address and empty memory) is found by its next task
    failing, given its shard again, and the interrupted round is re-run. The
    parameter server holds all the model state a round needs, so the run
    continues exactly as if nothing had happened; the recovery is recorded.
    """

    def __init__(
        self,
        cluster: DeviceCluster,
        devices: list[str],
        model: str,
        dataset: Dataset,
        indices: dict[str, np.ndarray],
        monitor_interval_s: float,
    ) -> None:
        self.cluster, self.client, self.devices = cluster, cluster.client, devices
        self.model, self.dataset, self.indices = model, dataset, indices
        self.monitor_interval_s = monitor_interval_s
        self.run_id = uuid.uuid4().hex[:12]
        self.addresses = _addresses(cluster, devices)
        self.recoveries: list[dict[str, Any]] = []

    def load(self, devices: list[str]) -> list[dict[str, Any]]:
        """Send each device its shard; return what each holds."""
        loads, sent = [], []
        for device in devices:
            idx = self.indices[device]
            data = [self.dataset.x_train[idx], self.dataset.y_train[idx]]
            # Keep the scattered futures referenced until the loads finish, or Dask forgets the data.
            x_f, y_f = self.client.scatter(data, workers=[self.addresses[device]], hash=False)
            sent += [x_f, y_f]
            loads.append(_on(self.client, device, runtime.load_shard, self.run_id, self.model, x_f, y_f))
        return list(_gather(self.client, loads))

    def call(self, device: str, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on ``device`` and return its result (arrays are scattered to it first)."""
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        if arrays:
            futures = iter(self.client.scatter(arrays, workers=[self.addresses[device]], hash=False))
            args = tuple(next(futures) if isinstance(a, np.ndarray) else a for a in args)
        return _gather(self.client, _on(self.client, device, fn, *args))

    def round(self, tasks: dict[str, runtime.RoundTask], weights: list[np.ndarray]) -> list[Any]:
        """One synchronous round: every task from the same weights; recover and re-run on a lost device."""
        rnd = next(iter(tasks.values())).round
        for attempt in range(MAX_RECOVERIES + 1):
            t0 = time.perf_counter()
            try:
                # Weights go to each device once, however many tasks read them.
                [w_f] = self.client.scatter(
                    [weights], workers=list(self.addresses.values()), broadcast=True, hash=False
                )
                futures = [_on(self.client, d, runtime.train_round, task, w_f) for d, task in tasks.items()]
                return list(_gather(self.client, futures))
            except Exception as exc:
                # Only a device that restarted is recovered; any other failure is the caller's.
                if not self._recover(rnd, exc, t0):
                    raise
                if attempt == MAX_RECOVERIES:
                    raise WorkerLostError(
                        f"devices kept restarting: {MAX_RECOVERIES} recoveries in round {rnd}, last after {exc!r}"
                    ) from exc
        raise AssertionError("unreachable")

    def _recover(self, rnd: int, exc: BaseException, t0: float) -> bool:
        """Give restarted devices their shard again; ``False`` if no device restarted."""
        self.addresses = _addresses(self.cluster, self.devices, wait_s=RESTART_WAIT_S)
        holding = self.client.run(runtime.holds_shard, self.run_id, workers=list(self.addresses.values()))
        lost = [d for d, a in self.addresses.items() if not holding.get(a)]
        if not lost:
            return False
        self.load(lost)
        self.start_monitors(lost)
        for device in lost:
            self.recoveries.append(
                {"device": device, "round": rnd, "error": repr(exc)[:300], "wall_s": time.perf_counter() - t0}
            )
        return True

    def start_monitors(self, devices: list[str]) -> None:
        self.client.run(runtime.start_monitor, self.monitor_interval_s, workers=[self.addresses[d] for d in devices])

    def close(self) -> pd.DataFrame:
        """Stop the monitors, forget the run's data on the devices; return the monitor samples."""
        # A device that died and did not come back has no monitor to stop.
        alive = set(self.client.scheduler_info(n_workers=-1)["workers"])
        workers = [a for a in self.addresses.values() if a in alive]
        samples = self.client.run(runtime.stop_monitor, workers=workers, on_error="return")
        self.client.run(runtime.release, self.run_id, workers=workers, on_error="ignore")
        by_address = {a: d for d, a in self.addresses.items()}
        return pd.DataFrame(
            [{"device": by_address[a], **row} for a, rows in samples.items() if isinstance(rows, list) for row in rows],
            columns=["device", "t", "cpu_s", "rss_bytes", "bytes_sent", "bytes_received"],
        )


def _addresses(cluster: DeviceCluster, devices: list[str], *, wait_s: float = 0.0) -> dict[str, str]:
    # Addresses are looked up, never assumed: a restarted worker gets a new one.
    deadline = time.monotonic() + wait_s
    while True:
        by_name = {str(w["name"]): a for a, w in cluster.client.scheduler_info(n_workers=-1)["workers"].items()}
        missing = [d for d in devices if d not in by_name]
        if not missing:
            return {d: by_name[d] for d in devices}
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if wait_s:
        raise WorkerLostError(f"devices {missing} did not come back within {wait_s:.0f} s")
    raise ConfigError("n_devices", len(devices), f"devices that are connected; missing {missing}")


def _gather(client: Any, futures: Any, timeout_s: float = ROUND_TIMEOUT_S) -> Any:
    # A task on a paused or lost worker would otherwise wait forever, silently.
    try:
        wait(futures, timeout=timeout_s)
    except TimeoutError as exc:
        raise WorkerLostError(
            f"devices did not answer within {timeout_s:.0f} s; see the Dask dashboard for paused or lost workers"
        ) from exc
    return client.gather(futures)


def _on(client: Any, device: str, fn: Any, *args: Any) -> Any:
    return client.submit(fn, *args, resources={device_resource(device): 1}, pure=False)

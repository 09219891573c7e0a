"""What one data-parallel training run is, and whether it can run: checked before any cluster work.

``TrainConfig`` holds a run's settings; ``check`` rejects a run that cannot
work (too many devices for the data, a batch larger than a shard, more memory
than the device has) with the parameter, the value and what is allowed;
``phase_counts`` says how often a run reaches each of its phases (kills are
placed by them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from edgelab.common import checks
from edgelab.common.errors import ConfigError, DeviceMemoryError
from edgelab.emulation.profiles import DeviceProfile
from edgelab.models.builtin import ModelSpec, check_model
from edgelab.models.costs import activation_floats_per_sample, input_floats_per_sample, layers, weight_count
from edgelab.models.user import UserModel, user_model
from edgelab.sync import STRATEGIES
from edgelab.sync.deadline import LATE_POLICIES, build_deadline
from edgelab.sync.local_sgd import PERIOD_RULES

WORKER_DATA = ("shard", "full")
PARTITIONS = ("iid", "label")
SYNC_EVERY = ("batch", "epoch")
#: Where a run's devices live: ``"process"``, each device a worker process of its own (kills, memory
#: limits and shaped links act on it alone); ``"virtual"``, many devices per worker process, spread
#: round-robin over the cluster's workers (``edgelab.runtime.virtual_host``), so that a run may have far
#: more devices than the cluster has workers.
HOSTINGS = ("process", "virtual")
#: The phases of a data-parallel run, in order; kills (edgelab.cluster.faults) are placed by them.
PHASES = ("load", "monitor_start", "broadcast", "train", "gather", "aggregate", "evaluate", "monitor_stop")


# Settings added after results were first stored: left out of a run's key while unset (or at their default).
_OPTIONAL = ("eval_every", "eval_limit", "memory_budget_mb", "max_steps")
_LEFT_OUT_AT = {
    "sync_period": 1,
    "sync_period_rule": "fixed",
    "client_fraction": 1.0,
    "compressor": "none",
    "shared_fraction": 0.0,
    "deadline": "none",
    "late": "drop",
    "slowdown": (),
    "gossip_topology": "ring",
    "hosting": "process",
}


@dataclass(frozen=True)
class TrainConfig:
    """One training run.

    Parameters
    ----------
    model
        A built-in model's name (``"mlp"``, ``"cnn"``, ``"resnet<6n+2>"``: ``edgelab.models.builtin``), or
        the user's own: a Keras model (training starts from its weights) or a function of no
        arguments that builds one (built once, under ``seed``). It becomes a
        ``edgelab.models.user.UserModel``, named in results by ``UserModel.key``.
    n_devices
        Devices that train (the parameter server is not one of them).
    epochs, batch_size
        Epochs over each device's data; batch size per device.
    sync_every, sync_period
        Synchronize every ``sync_period`` batches (``"batch"``: local SGD when
        > 1) or epochs (``"epoch"``: federated averaging's local epochs E;
        ``epochs`` must be a multiple of it).
    sync_period_rule
        ``"fixed"``, or ``"adaptive"``: under ``sync_every="batch"`` each
        round's period follows the training loss from ``sync_period`` down
        (AdaComm; ``edgelab.sync.local_sgd``).
    client_fraction
        Share of the devices that train in each round (federated averaging's
        C), drawn afresh every round from the seed: ``max(1, floor(C * N))``
        of them. 1.0: every device, every round.
    shared_fraction
        Share of the training set every device holds besides its shard (drawn
        before the shards are cut; ``edgelab.data.shared_subset_split``): a
        small shared set against label skew. 0: none.
    deadline, late
        How long a synchronous round waits on the device clock
        (``edgelab.sync.deadline``): ``"none"``, ``"fixed:<seconds>"`` or
        ``"adaptive:<k>"`` (median + k MADs of recent arrivals); a late update
        is dropped (``late="drop"``) or applied in the next round (``"stale"``).
    slowdown
        Each device's compute time factor on the device clock (one per
        device; empty: all 1): a straggler is a device slowed by, say, 4.
    compressor
        How each device compresses its update before sending it
        (``edgelab.sync.compress``: e.g. ``"sign_ef"``, ``"qsgd:4"``,
        ``"topk:0.01"``); ``"none"`` sends it whole.
    worker_data
        ``"shard"`` or ``"full"`` (see module docstring).
    partition
        ``"iid"`` or ``"label"`` sharding when ``worker_data="shard"``.
    learning_rate, weight_decay, seed
        Local SGD step size and L2 decay; seed of weights, shards and batch order.
    momentum
        Momentum the parameter server keeps across rounds (0 = none).
    strategy
        Synchronization strategy (``edgelab.sync.STRATEGIES``; ``"gossip"`` has no server, see ``gossip_topology``).
    gossip_topology
        Under ``strategy="gossip"``, whom each device averages with
        (``edgelab.peer.gossip``): ``"ring"``, or ``"random:<degree>"`` (each device
        draws ``degree`` neighbours with ``seed``; links are undirected).
    eval_every
        Evaluate the global weights every this many applied updates (rounds
        when synchronous), besides after each epoch; None: after each epoch only.
    eval_limit
        Test samples those in-epoch evaluations use (the first ones); None: all.
    hosting
        ``HOSTINGS``: a worker process per device, or ``"virtual"``: each of
        the cluster's workers hosts its share of the devices, trained in turn
        (synchronous strategies through the server). Changes the host's wall
        time and memory, not the result (to float rounding: each worker sums
        its devices' deltas before the server does).
    memory_budget_mb
        Working set a device may use above its framework's own footprint; a
        step that needs more ends the run with ``DeviceMemoryError`` (the
        device ran out of memory). None: no limit.
    """

    model: str | UserModel | Any = "mlp"
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
    eval_every: int | None = None
    eval_limit: int | None = None
    memory_budget_mb: float | None = None
    max_steps: int | None = None
    sync_period: int = 1
    sync_period_rule: str = "fixed"
    client_fraction: float = 1.0
    compressor: str = "none"
    shared_fraction: float = 0.0
    deadline: str = "none"
    late: str = "drop"
    slowdown: tuple[float, ...] = ()
    gossip_topology: str = "ring"
    hosting: str = "process"

    def __post_init__(self) -> None:
        if not isinstance(self.model, str | UserModel):
            object.__setattr__(self, "model", user_model(self.model, seed=self.seed))
        check_model(self.model)
        checks.choice("sync_every", self.sync_every, SYNC_EVERY)
        checks.choice("worker_data", self.worker_data, WORKER_DATA)
        checks.choice("partition", self.partition, PARTITIONS)
        checks.choice("strategy", self.strategy, STRATEGIES)
        for name in ("n_devices", "epochs", "batch_size"):
            checks.integer(name, getattr(self, name), at_least=1)
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError("momentum", self.momentum, "a number in [0, 1)")
        self._check_strategy()
        self._check_rounds()
        self._check_clients()
        self._check_stragglers()
        self.compression  # noqa: B018 - validates the compressor's name and level now
        self._check_gossip()
        self._check_hosting()
        if self.memory_budget_mb is not None and not self.memory_budget_mb > 0:
            raise ConfigError("memory_budget_mb", self.memory_budget_mb, "None or a number of MB > 0")
        self.spec  # noqa: B018 - validates learning_rate and weight_decay now, not on a worker

    def _check_strategy(self) -> None:
        if self.strategy == "ps_async" and self.sync_every != "batch":
            raise ConfigError("sync_every", self.sync_every, "'batch' for strategy='ps_async' (one update per batch)")
        if self.strategy == "end_average" and (self.sync_every != "epoch" or self.epochs != 1):
            raise ConfigError(
                "strategy",
                self.strategy,
                f"end_average averages once, at the end of one epoch: needs sync_every='epoch' and epochs=1 "
                f"(got {self.sync_every!r}, {self.epochs}); for several epochs use ps_sync with sync_every='epoch'",
            )

    def _check_rounds(self) -> None:
        """When the devices synchronize, and when the global model is evaluated."""
        checks.integer("eval_every", self.eval_every, at_least=1, none="after each epoch only")
        checks.integer("max_steps", self.max_steps, at_least=1, none="every batch of the data")
        checks.integer("sync_period", self.sync_period, at_least=1)
        if self.sync_every == "epoch" and self.epochs % self.sync_period:
            raise ConfigError(
                "sync_period", self.sync_period, f"a divisor of epochs={self.epochs} under sync_every='epoch'"
            )
        checks.choice("sync_period_rule", self.sync_period_rule, PERIOD_RULES)
        if self.sync_period_rule == "adaptive" and self.sync_every != "batch":
            raise ConfigError("sync_period_rule", self.sync_period_rule, "'fixed' under sync_every='epoch'")

    def _check_clients(self) -> None:
        """Which devices train in a round, on what data."""
        if not (isinstance(self.client_fraction, int | float) and 0.0 < self.client_fraction <= 1.0):
            raise ConfigError("client_fraction", self.client_fraction, "a share of the devices in (0, 1]")
        if self.strategy == "ps_async" and (
            self.sync_period != 1 or self.client_fraction != 1.0 or self.sync_period_rule != "fixed"
        ):
            raise ConfigError(
                "strategy", self.strategy, "a synchronous strategy with sync_period > 1 or client_fraction < 1"
            )
        if not (isinstance(self.shared_fraction, int | float) and 0.0 <= self.shared_fraction < 1.0):
            raise ConfigError("shared_fraction", self.shared_fraction, "a share of the training set in [0, 1)")
        if self.shared_fraction and self.worker_data != "shard":
            raise ConfigError("shared_fraction", self.shared_fraction, "0 under worker_data='full'")

    def _check_stragglers(self) -> None:
        """How long a round waits, for which devices."""
        build_deadline(self.deadline)
        checks.choice("late", self.late, LATE_POLICIES)
        object.__setattr__(self, "slowdown", tuple(self.slowdown))  # a list from a notebook's parameters
        if self.slowdown and (
            len(self.slowdown) != self.n_devices
            or not all(isinstance(f, int | float) and not isinstance(f, bool) and f > 0 for f in self.slowdown)
        ):
            raise ConfigError("slowdown", self.slowdown, f"{self.n_devices} factors > 0, one per device, or ()")
        if self.strategy == "ps_async" and self.deadline != "none":
            raise ConfigError("deadline", self.deadline, "'none' under strategy='ps_async' (it never waits)")

    def _check_gossip(self) -> None:
        if self.strategy != "gossip":
            if self.gossip_topology != "ring":
                raise ConfigError("gossip_topology", self.gossip_topology, "'ring' unless strategy='gossip'")
            return
        from edgelab.sync.topology import build_topology

        build_topology(self.gossip_topology, self.n_devices, self.seed)  # unknown or unconnected: refused here
        if self.momentum:
            raise ConfigError("momentum", self.momentum, "0 under strategy='gossip' (no server keeps a velocity)")
        if self.compressor != "none":
            raise ConfigError("compressor", self.compressor, "'none' under strategy='gossip' (weights go whole)")

    def _check_hosting(self) -> None:
        checks.choice("hosting", self.hosting, HOSTINGS)
        if self.hosting == "virtual" and self.strategy in ("ps_async", "gossip"):
            raise ConfigError(
                "hosting",
                self.hosting,
                f"'process' under strategy={self.strategy!r} (virtual devices take synchronous rounds through the "
                "server: ps_sync or end_average)",
            )

    @property
    def spec(self) -> ModelSpec:
        """The model every device builds."""
        return ModelSpec(self.model, learning_rate=self.learning_rate, seed=self.seed, weight_decay=self.weight_decay)

    @property
    def compression(self) -> Any:
        """The devices' compressor (``edgelab.sync.compress.Compressor``), None when updates go whole."""
        if self.compressor == "none":
            return None
        from edgelab.sync.compress import build_compressor

        return build_compressor(self.compressor)

    @property
    def epochs_per_round(self) -> int:
        """Epochs one round spans: ``sync_period`` under ``sync_every="epoch"``, else 1."""
        return self.sync_period if self.sync_every == "epoch" else 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (results are keyed by it; options left unset are left out, so older keys hold)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["model"] = str(self.model)  # a user's model by its key (name@digest)
        return {
            k: v
            for k, v in d.items()
            if not (k in _OPTIONAL and v is None) and not (k in _LEFT_OUT_AT and v == _LEFT_OUT_AT[k])
        }


def samples_per_device(cfg: TrainConfig, n_train: int) -> list[int]:
    """Training samples each device iterates per epoch."""
    if cfg.worker_data == "full":
        return [n_train] * cfg.n_devices
    shared = round(cfg.shared_fraction * n_train)
    base, extra = divmod(n_train - shared, cfg.n_devices)
    return [base + (1 if i < extra else 0) + shared for i in range(cfg.n_devices)]


def estimate_memory_mb(
    model: str, batch_size: int, samples_on_device: int, *, data_resident: bool = True
) -> dict[str, float]:
    """Analytic memory a device needs above its framework's own footprint, in MB.

    Weights, gradients, the delta sent back and the incoming copy of the global
    weights (4 copies of every weight); the forward activations of the batch,
    kept for the backward pass (every layer's output), plus one layer's
    gradient in flight; and, when ``data_resident``, the device's training
    data held as float32 images. Measured on this host's TensorFlow: ResNet-110
    at batch 64 on its 28x28 crops peaks 736-755 MB above the framework (three
    probes, 2026-12-05), this estimate says 719 MB.
    """
    mb = 2**20
    params = 4 * weight_count(model) * 4 / mb
    largest = max(r.output_size for r in layers(model))
    activations = batch_size * (activation_floats_per_sample(model) + largest) * 4 / mb
    data = samples_on_device * (input_floats_per_sample(model) * 4 + 8) / mb if data_resident else 0.0
    return {"parameters": params, "activations": activations, "data": data, "total": params + activations + data}


def check(
    cfg: TrainConfig, *, n_train: int, profile: DeviceProfile, memory: str = "raise", data_resident: bool = True
) -> dict[str, float]:
    """Reject a run that cannot work, before any cluster work starts.

    ``memory="raise"``: a run whose estimated memory exceeds the device's is
    rejected (``DeviceMemoryError``); ``"estimate"``: it is only estimated (a
    sweep that records out-of-memory as a result). Returns the memory estimate
    of the busiest device.
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
    estimate = estimate_memory_mb(cfg.model, cfg.batch_size, busiest, data_resident=data_resident)
    if memory == "raise" and estimate["total"] > profile.training_budget_mb:
        raise DeviceMemoryError(
            f"model={cfg.model!r} at batch_size={cfg.batch_size} with {busiest} "
            f"samples per device needs about {estimate['total']:.0f} MB, more than the "
            f"{profile.training_budget_mb} MB a {profile.name} device has for training "
            f"({profile.memory_mb} MB minus {profile.os_reserve_mb} MB for the OS and {profile.framework_mb} MB "
            f"for the framework); allowed: a smaller "
            f"batch_size or sample_limit, worker_data='shard' over more devices, or a larger device_memory_mb"
        )
    return estimate


def steps_per_device(cfg: TrainConfig, n_train: int) -> list[int]:
    """Batches each device trains per epoch (at most ``cfg.max_steps``)."""
    limit = cfg.max_steps or math.inf
    return [int(min(math.ceil(n / cfg.batch_size), limit)) for n in samples_per_device(cfg, n_train)]


def phase_counts(cfg: TrainConfig, n_train: int) -> dict[str, int]:
    """How many times a run of ``cfg`` reaches each of its ``PHASES`` (kills are placed by it)."""
    # An adaptive period may shrink to one batch: its rounds are counted as at most one per batch.
    period = cfg.sync_period if cfg.sync_period_rule == "fixed" else 1
    per_epoch = math.ceil(max(steps_per_device(cfg, n_train)) / period) if cfg.sync_every == "batch" else 1
    rounds = cfg.epochs // cfg.epochs_per_round * per_epoch
    per_round = dict.fromkeys(("broadcast", "train", "gather", "aggregate"), rounds)
    evaluations = cfg.epochs // cfg.epochs_per_round
    return {"load": 1, "monitor_start": 1, **per_round, "evaluate": evaluations, "monitor_stop": 1}


def clients_of_round(cfg: TrainConfig, rnd: int, eligible: list[int]) -> list[int]:
    """The devices (indices, ascending) that train in round ``rnd``: all, or a seeded draw of ``client_fraction``."""
    if cfg.client_fraction >= 1.0:
        return eligible
    m = max(1, math.floor(cfg.client_fraction * cfg.n_devices + 1e-9))
    if m >= len(eligible):
        return eligible
    chosen = np.random.default_rng([cfg.seed, rnd]).choice(len(eligible), size=m, replace=False)
    return [eligible[k] for k in sorted(chosen)]

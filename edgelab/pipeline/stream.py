"""Stream images through models placed on devices: a pipeline, an ensemble, one device.

A ``Placement`` is a set of branches, each a chain of (stage, device): a
pipeline is one branch of K stages on K devices; the single-device baseline is
one branch of one whole model; an ensemble is several one-stage branches that
all receive the same input. ``stream`` sends micro-batches from the client
(the master), each branch's first device receiving its copy, and submits every
stage of a micro-batch pinned to its device, so activations go worker to
worker and stages work on different micro-batches at once. At most
``max_in_flight`` micro-batches are in the system (backpressure): the next
enters when one leaves.

Devices are reached through ``edgelab.runtime.fleet.Fleet``: a device lost mid-stream
is waited for, its stages loaded again, and the micro-batches that had not
come out are streamed again (outputs already received are kept). Every
recovery and every replayed micro-batch is recorded.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.cluster.faults import KillSchedule
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.pipeline import worker
from edgelab.runtime.fleet import Faults, Fleet, fault_options

#: Phases of a stream where faults can be injected: loading the stages, and before micro-batch ``at`` enters.
PHASES = ("load", "stream")


@dataclass(frozen=True)
class Placement:
    """Which device runs which stage: ``branches[b]`` is a chain of (stage name, device)."""

    branches: tuple[tuple[tuple[str, str], ...], ...]

    def __post_init__(self) -> None:
        if not self.branches or any(not chain for chain in self.branches):
            raise ConfigError("placement", self.branches, "at least one branch of at least one (stage, device)")

    @classmethod
    def pipeline(cls, stages: Sequence[str], devices: Sequence[str]) -> Placement:
        """One stage per device, in order."""
        if len(devices) < len(stages):
            raise ConfigError("devices", list(devices), f"at least {len(stages)} devices, one per stage")
        return cls((tuple(zip(stages, devices, strict=False)),))

    @classmethod
    def ensemble(cls, members: Sequence[str], devices: Sequence[str]) -> Placement:
        """One whole model per device, each fed the same input."""
        if len(devices) < len(members):
            raise ConfigError("devices", list(devices), f"at least {len(members)} devices, one per member")
        return cls(tuple(((m, d),) for m, d in zip(members, devices, strict=False)))

    @property
    def devices(self) -> list[str]:
        """Every device the placement uses, in order of first use."""
        return list(dict.fromkeys(d for chain in self.branches for _, d in chain))

    @property
    def stages(self) -> list[str]:
        """Every stage placed, in order of first use."""
        return list(dict.fromkeys(s for chain in self.branches for s, _ in chain))

    def stages_of(self, device: str) -> list[str]:
        """The stages a device holds."""
        return [s for chain in self.branches for s, d in chain if d == device]


@dataclass(frozen=True)
class StageSpec:
    """A stage as a device receives it, its Keras config and weights, with no model built on the client.

    ``stream`` reads only these of a stage's model, so a ``StageSpec`` stands
    wherever it takes one. Models of one architecture with other weights (an
    ensemble's members) need one build on the client, not one each: building a
    MobileNetV2 costs the client about 1.5 s.
    """

    config: dict[str, Any]
    weights: tuple[np.ndarray, ...]
    input_shape: tuple[Any, ...]

    @classmethod
    def like(cls, model: Any, weights: Sequence[np.ndarray]) -> StageSpec:
        """``model``'s architecture with ``weights``, which must match its weights in number and shapes."""
        want = [tuple(w.shape) for w in model.weights]  # in get_weights() order, without copying them
        got = [tuple(np.shape(w)) for w in weights]
        if got != want:
            raise ConfigError("weights", f"{len(got)} arrays", f"{len(want)} arrays shaped as {model.name}'s")
        return cls(model.get_config(), tuple(weights), tuple(model.input_shape))

    def get_config(self) -> dict[str, Any]:
        """The architecture, as ``keras.Model.get_config`` gives it."""
        return self.config

    def get_weights(self) -> list[np.ndarray]:
        """The weights, in ``keras.Model.get_weights`` order."""
        return list(self.weights)


@dataclass
class StreamResult:
    """What a stream produced and measured."""

    outputs: list[np.ndarray]  # per branch: the last stage's outputs for every image, in order
    records: pd.DataFrame  # one row per (branch, stage, micro-batch): edgelab.pipeline.worker.run_stage
    sends: pd.DataFrame  # one row per input the master sent: micro_batch, branch, device, bytes, t_send
    receives: pd.DataFrame  # one row per output the master received: micro_batch, branch, bytes, t_received
    loads: pd.DataFrame  # one row per stage loaded on a device (again after a recovery)
    micro_batch: int
    max_in_flight: int
    wall_s: float  # host wall time from the first input sent to the last output received
    # Per device (index): CPU seconds from just before the first input was sent to just after the last output
    # came back: its process's (``process_s``: its micro-batches' and all it did between them) and its event
    # loop's (``event_loop_s``: its comms). Empty after a recovery: a restarted process counts from zero.
    device_cpu: pd.DataFrame = field(default_factory=pd.DataFrame)
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    kills: list[dict[str, Any]] = field(default_factory=list)
    replayed: list[int] = field(default_factory=list)  # micro-batches streamed again after a loss


def stream(
    cluster: DeviceCluster,
    placement: Placement,
    models: Mapping[str, Any],
    x: np.ndarray,
    *,
    micro_batch: int = 32,
    max_in_flight: int = 8,
    log: Callable[[str], None] = print,
    **faults: Unpack[Faults],
) -> StreamResult:
    """Stream ``x`` through the placed models and return the outputs and what was measured.

    Parameters
    ----------
    cluster
        The devices (``edgelab.cluster.device_cluster.connect``).
    placement
        Which stage runs on which device.
    models
        Stage name -> Keras functional model or ``StageSpec`` (each device
        rebuilds its stages from their config and weights).
    x
        Inputs, already preprocessed for the first stage (float32, ``(N, ...)``).
    micro_batch
        Images per micro-batch (>= 1).
    max_in_flight
        Micro-batches in the system at once (>= 1); 1 runs them one after another.
    log
        Where recovery lines go.
    **faults
        ``kills``: faults to inject, phases ``PHASES`` (``"stream"`` at a micro-batch index);
        ``restart_wait_s``: how long a lost device may take to come back (``edgelab.runtime.fleet.Faults``).

    Returns
    -------
    StreamResult
        Outputs per branch, and per-stage, per-send and per-receive records.
    """
    kills, restart_wait_s = fault_options("stream", faults)
    _check(placement, models, x, micro_batch, max_in_flight)
    n_batches = -(-len(x) // micro_batch)
    schedule = kills if isinstance(kills, KillSchedule) or kills is None else None
    if schedule is None and kills is not None:
        schedule = KillSchedule(list(kills), phases={"load": 1, "stream": n_batches})
    run = _Streaming(cluster, placement, models, x, micro_batch, max_in_flight)
    fleet = Fleet.for_cluster(
        cluster, placement.devices, run.prepare, kills=schedule, restart_wait_s=restart_wait_s, log=log
    )
    run.fleet = fleet
    try:
        fleet.attempt("stream", 0, run.stream_all)
        wall_s = run.t_last - run.t0
        fleet.attempt("release", 0, lambda: fleet.run(placement.devices, worker.release_run, run.run_id), prepare=False)
    finally:
        fleet.close()
    return run.result(wall_s)


@dataclass
class _Streaming:
    """One stream under way: what it streams, through which fleet, and what it has received and measured so far."""

    cluster: DeviceCluster
    placement: Placement
    models: Mapping[str, Any]
    x: np.ndarray
    micro_batch: int
    max_in_flight: int
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    fleet: Fleet = field(init=False)
    configs: dict[str, str] = field(init=False)  # each stage's Keras config, as JSON
    done: dict[int, list[np.ndarray]] = field(default_factory=dict)  # each received micro-batch's outputs
    loads: list[dict[str, Any]] = field(default_factory=list)
    sends: list[dict[str, Any]] = field(default_factory=list)
    receives: list[dict[str, Any]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    started: set[int] = field(default_factory=set)
    replayed: list[int] = field(default_factory=list)
    t0: float = 0.0  # the first input's send (time.time)
    t_last: float = 0.0  # the last output's receipt (time.time)
    cpu_at: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # "start", "end": worker.cpu_so_far

    def __post_init__(self) -> None:
        self.configs = {name: json.dumps(self.models[name].get_config()) for name in self.placement.stages}

    @property
    def n_batches(self) -> int:
        """Micro-batches in ``x``, the last one possibly smaller."""
        return -(-len(self.x) // self.micro_batch)

    def prepare(self, todo: list[str]) -> None:
        """Load the stages of each device of ``todo``."""
        fleet, futures = self.fleet, {}
        for device in todo:
            for name in self.placement.stages_of(device):
                weights = fleet.send(device, self.models[name].get_weights())
                args = (self.run_id, name, self.configs[name], weights, self.micro_batch)
                futures[f"{device}/{name}"] = fleet.submit(device, worker.load_stage, *args)
        fleet.point("load")
        fleet.wait(futures)
        self.loads.extend(fleet.gather(futures).values())

    def stream_all(self) -> None:
        """Stream every micro-batch not received yet, at most ``max_in_flight`` at once (again after a loss)."""
        fleet = self.fleet
        todo = [m for m in range(self.n_batches) if m not in self.done]
        self.replayed.extend(m for m in todo if m in self.started)
        inflight: dict[int, list[Any]] = {}
        queue = iter(todo)
        upcoming = next(queue, None)
        if not self.t0:
            self.cpu_at["start"] = fleet.run(self.placement.devices, worker.cpu_so_far)
            self.t0 = time.time()
        while upcoming is not None or inflight:
            while upcoming is not None and len(inflight) < self.max_in_flight:
                fleet.point("stream", upcoming)
                inflight[upcoming] = _enter(
                    fleet, self.placement, self.run_id, upcoming, self.x, self.micro_batch, self.sends
                )
                self.started.add(upcoming)
                upcoming = next(queue, None)
            fleet.wait({f.key: f for finals in inflight.values() for f in finals}, first=True)
            for m in [m for m, finals in inflight.items() if all(f.done() for f in finals)]:
                self.receive(m, inflight.pop(m))
        self.t_last = time.time()
        self.cpu_at["end"] = fleet.run(self.placement.devices, worker.cpu_so_far)

    def receive(self, m: int, finals: list[Any]) -> None:
        """Take micro-batch ``m``'s outputs (``finals``: its last stages' futures, all done) and what they measured."""
        results = self.cluster.client.gather(finals)
        t_received = time.time()
        outputs = [out for out, _ in results]
        self.done[m] = outputs
        for b, (_, measured) in enumerate(results):
            self.records.extend({**r, "branch": b} for r in measured)
        self.receives.extend(
            {"micro_batch": m, "branch": b, "bytes": int(o.nbytes), "t_received": t_received}
            for b, o in enumerate(outputs)
        )
        self.fleet.forget(finals)

    def result(self, wall_s: float) -> StreamResult:
        """The outputs in order and what was measured, times from the first send."""
        t0 = self.t0
        measured = pd.DataFrame(self.records).sort_values(["micro_batch", "branch", "t_start"]).reset_index(drop=True)
        measured["t_start"] -= t0
        measured["t_end"] -= t0
        frames = [pd.DataFrame(rows) for rows in (self.sends, self.receives)]
        for frame, column in zip(frames, ("t_send", "t_received"), strict=True):
            if not frame.empty:
                frame[column] -= t0
        branches = range(len(self.placement.branches))
        outputs = [np.concatenate([self.done[m][b] for m in range(self.n_batches)]) for b in branches]
        start, end = (pd.DataFrame.from_dict(self.cpu_at.get(k, {}), orient="index") for k in ("start", "end"))
        device_cpu = pd.DataFrame() if self.fleet.recoveries or start.empty else (end - start).dropna(how="all")
        return StreamResult(
            outputs=outputs,
            records=measured,
            sends=frames[0],
            receives=frames[1],
            loads=pd.DataFrame(self.loads),
            micro_batch=self.micro_batch,
            max_in_flight=self.max_in_flight,
            wall_s=wall_s,
            device_cpu=device_cpu,
            recoveries=self.fleet.recoveries,
            kills=self.fleet.kills_fired,
            replayed=sorted(set(self.replayed)),
        )


def _enter(
    fleet: Fleet, placement: Placement, run_id: str, m: int, x: np.ndarray, micro_batch: int, sends: list[dict]
) -> list[Any]:
    """Send micro-batch ``m`` to every branch's first device and chain its stages; the last stages' futures."""
    xs = np.ascontiguousarray(x[m * micro_batch : (m + 1) * micro_batch], dtype=np.float32)
    finals = []
    for b, chain in enumerate(placement.branches):
        t_send = time.time()
        future = fleet.send(chain[0][1], xs)
        sends.append({"micro_batch": m, "branch": b, "device": chain[0][1], "bytes": int(xs.nbytes), "t_send": t_send})
        for stage, device in chain:
            future = fleet.submit(device, worker.run_stage, run_id, stage, m, future)
        finals.append(future)
    return finals


def _check(
    placement: Placement, models: Mapping[str, Any], x: np.ndarray, micro_batch: int, max_in_flight: int
) -> None:
    checks.integer("micro_batch", micro_batch, at_least=1)  # images per micro-batch
    checks.integer("max_in_flight", max_in_flight, at_least=1)  # micro-batches in the system at once
    missing = [s for s in placement.stages if s not in models]  # type: ignore[attr-defined]
    if missing:
        raise ConfigError("models", sorted(models), f"a model for every placed stage; missing {missing}")
    if len(x) == 0:
        raise ConfigError("x", x.shape, "at least one input")
    for chain in placement.branches:
        first = models[chain[0][0]]
        want = tuple(first.input_shape[1:])
        if tuple(x.shape[1:]) != want:
            raise ConfigError(
                "x", tuple(x.shape), f"inputs of shape (N, {', '.join(map(str, want))}) for {chain[0][0]}"
            )


def run_pipeline(
    cluster: DeviceCluster,
    model: Any,
    x: np.ndarray,
    *,
    n_stages: int | None = None,
    balance: str = "macs",
    micro_batch: int = 32,
    max_in_flight: int = 8,
) -> StreamResult:
    """Cut ``model`` into ``n_stages`` stages (default: one per device), one per device, and stream ``x`` through.

    The cuts balance ``balance`` (``edgelab.pipeline.partition``); ``x`` is the
    first stage's input, already preprocessed (float32, ``(N, ...)``). The
    outputs equal the whole model's (``StreamResult.outputs[0]``).
    """
    from edgelab.models.graph import resolve_model
    from edgelab.pipeline.partition import partition, stage_model

    whole = resolve_model(model)
    cut = partition(whole, n_stages or len(cluster.devices), balance=balance)
    names = [f"stage{s.index}" for s in cut.stages]
    stages = {name: stage_model(whole, s) for name, s in zip(names, cut.stages, strict=True)}
    placement = Placement.pipeline(names, cluster.devices)
    return stream(cluster, placement, stages, x, micro_batch=micro_batch, max_in_flight=max_in_flight)

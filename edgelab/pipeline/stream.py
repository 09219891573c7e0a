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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.cluster.faults import KillSchedule
from edgelab.common.errors import ConfigError
from edgelab.pipeline import worker
from edgelab.runtime.fleet import RESTART_WAIT_S, Fleet

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
    kills: KillSchedule | Iterable[Any] | None = None,
    restart_wait_s: float = RESTART_WAIT_S,
    log: Callable[[str], None] = print,
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
    kills
        Faults to inject, phases ``PHASES`` (``"stream"`` at a micro-batch index).
    restart_wait_s
        How long a lost device may take to come back.
    log
        Where recovery lines go.

    Returns
    -------
    StreamResult
        Outputs per branch, and per-stage, per-send and per-receive records.
    """
    _check(placement, models, x, micro_batch, max_in_flight)
    n_batches = -(-len(x) // micro_batch)
    schedule = kills if isinstance(kills, KillSchedule) or kills is None else None
    if schedule is None and kills is not None:
        schedule = KillSchedule(list(kills), phases={"load": 1, "stream": n_batches})
    devices = placement.devices
    run_id = uuid.uuid4().hex[:12]
    configs = {name: json.dumps(models[name].get_config()) for name in placement.stages}
    loads: list[dict[str, Any]] = []

    def prepare(todo: list[str]) -> None:
        futures = {}
        for device in todo:
            for name in placement.stages_of(device):
                weights = fleet.send(device, models[name].get_weights())
                args = (run_id, name, configs[name], weights, micro_batch)
                futures[f"{device}/{name}"] = fleet.submit(device, worker.load_stage, *args)
        fleet.point("load")
        fleet.wait(futures)
        loads.extend(fleet.gather(futures).values())

    fleet = Fleet.for_cluster(cluster, devices, prepare, kills=schedule, restart_wait_s=restart_wait_s, log=log)
    done: dict[int, list[np.ndarray]] = {}
    sends: list[dict[str, Any]] = []
    receives: list[dict[str, Any]] = []
    started: set[int] = set()
    replayed: list[int] = []
    records: list[dict[str, Any]] = []
    t0 = 0.0

    def body() -> None:
        nonlocal t0
        todo = [m for m in range(n_batches) if m not in done]
        replayed.extend(m for m in todo if m in started)
        inflight: dict[int, list[Any]] = {}
        queue = iter(todo)
        upcoming = next(queue, None)
        if not t0:
            t0 = time.time()
        while upcoming is not None or inflight:
            while upcoming is not None and len(inflight) < max_in_flight:
                fleet.point("stream", upcoming)
                inflight[upcoming] = _enter(fleet, placement, run_id, upcoming, x, micro_batch, sends)
                started.add(upcoming)
                upcoming = next(queue, None)
            fleet.wait({f.key: f for finals in inflight.values() for f in finals}, first=True)
            for m in [m for m, finals in inflight.items() if all(f.done() for f in finals)]:
                finals = inflight.pop(m)
                results = cluster.client.gather(finals)
                t_received = time.time()
                outputs = [out for out, _ in results]
                done[m] = outputs
                for b, (_, measured) in enumerate(results):
                    records.extend({**r, "branch": b} for r in measured)
                receives.extend(
                    {"micro_batch": m, "branch": b, "bytes": int(o.nbytes), "t_received": t_received}
                    for b, o in enumerate(outputs)
                )
                fleet.forget(finals)

    fleet.attempt("stream", 0, body)
    wall_s = time.time() - t0
    fleet.attempt("release", 0, lambda: fleet.run(devices, worker.release_run, run_id), prepare=False)
    measured = pd.DataFrame(records).sort_values(["micro_batch", "branch", "t_start"]).reset_index(drop=True)
    measured["t_start"] -= t0
    measured["t_end"] -= t0
    frames = [pd.DataFrame(rows) for rows in (sends, receives)]
    for frame, column in zip(frames, ("t_send", "t_received"), strict=True):
        if not frame.empty:
            frame[column] -= t0
    outputs = [np.concatenate([done[m][b] for m in range(n_batches)]) for b in range(len(placement.branches))]
    return StreamResult(
        outputs=outputs,
        records=measured,
        sends=frames[0],
        receives=frames[1],
        loads=pd.DataFrame(loads),
        micro_batch=micro_batch,
        max_in_flight=max_in_flight,
        wall_s=wall_s,
        recoveries=fleet.recoveries,
        kills=fleet.kills_fired,
        replayed=sorted(set(replayed)),
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
    if isinstance(micro_batch, bool) or not isinstance(micro_batch, int) or micro_batch < 1:
        raise ConfigError("micro_batch", micro_batch, "an integer >= 1 (images per micro-batch)")
    if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
        raise ConfigError("max_in_flight", max_in_flight, "an integer >= 1 (micro-batches in the system at once)")
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

"""Pipelined training: a model cut into stages, one per device, under GPipe's or PipeDream's schedule.

``schedule="gpipe"`` (fill-drain): each mini-batch is split into
micro-batches; every micro-batch goes forward through the stages, device to
device; the last stage computes the loss (its micro-batch's share of the
mini-batch's mean) and starts the backward, which runs back through the
stages in reverse order of micro-batches; each stage sums its gradients over
the micro-batches and applies them once. So the weights after a step are
those of one SGD step on the whole mini-batch, as on one device, up to float
rounding (tested) -- for models whose layers do not mix the examples of a
batch (batch normalization in training mode would see micro-batches, not the
mini-batch, as GPipe's paper notes).

``schedule="1f1b"`` (PipeDream): micro-batches stream through without a
flush; after a warm-up of ``n_stages - s`` forwards, stage ``s`` alternates
one forward and one backward, and every backward updates that stage's weights
at once. Weight stashing: a micro-batch's backward on a stage differentiates
with the weights its forward used there. So on stage ``s`` (from 0) the
``g``-th micro-batch of the run sees ``max(0, g - (n_stages - s) + 1)``
updates, on both passes (tested); different stages see different versions of
one micro-batch, PipeDream's asynchrony. Each micro-batch is its own SGD
step (its loss is not shared with a mini-batch).

Stage state (weights, optimizer slots, the inputs kept for the backward)
stays on the devices (``edgelab.pipeline.train_worker``); activations and
gradients travel worker to worker, and only the losses and the records come
back. Every pass records its device, host wall start and end and CPU time,
so the schedule can be drawn (``PipelineTraining.records``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypedDict, Unpack

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common import checks
from edgelab.common.errors import ClusterError, ConfigError
from edgelab.models.graph import resolve_model
from edgelab.pipeline import train_worker, worker
from edgelab.pipeline.partition import Partition, partition, stage_model
from edgelab.runtime.fleet import Fleet

SCHEDULES = ("gpipe", "1f1b")


def stage_orders(schedule: str, n_stages: int, n_micro: int) -> list[list[tuple[str, int]]]:
    """Each stage's passes in the schedule's order: ``("F", g)``, ``("B", g)``, or the last stage's ``("FB", g)``.

    >>> stage_orders("1f1b", 3, 4)[0]
    [('F', 0), ('F', 1), ('F', 2), ('B', 0), ('F', 3), ('B', 1), ('B', 2), ('B', 3)]
    >>> stage_orders("gpipe", 2, 3)[0]
    [('F', 0), ('F', 1), ('F', 2), ('B', 2), ('B', 1), ('B', 0)]
    """
    if schedule not in SCHEDULES:
        raise ConfigError("schedule", schedule, f"one of {', '.join(SCHEDULES)}")
    orders = []
    for s in range(n_stages):
        if s == n_stages - 1:
            orders.append([("FB", g) for g in range(n_micro)])
        elif schedule == "gpipe":
            orders.append([("F", g) for g in range(n_micro)] + [("B", g) for g in reversed(range(n_micro))])
        else:
            warm = min(n_stages - s, n_micro)
            order = [("F", g) for g in range(warm)]
            for g in range(n_micro - warm):
                order += [("B", g), ("F", warm + g)]
            order += [("B", g) for g in range(n_micro - warm, n_micro)]
            orders.append(order)
    return orders


@dataclass
class PipelineTraining:
    """What a pipelined training run did: final weights per stage, losses, and every pass's record."""

    partition: Partition
    devices: list[str]
    weights: dict[str, list[np.ndarray]]  # stage name -> its weights after the last step
    losses: pd.DataFrame  # step, micro_batch, loss (the micro-batch's mean)
    records: pd.DataFrame  # kind, stage, step, micro_batch, device, t_start, t_end (s from the start), cpu_s, bytes
    micro_batches: int
    wall_s: float

    def step_losses(self) -> pd.Series:
        """Each step's mini-batch loss: the micro-batches' means weighted by their sizes."""
        frame = self.losses.assign(weighted=self.losses["loss"] * self.losses["images"])
        sums = frame.groupby("step")[["weighted", "images"]].sum()
        return sums["weighted"] / sums["images"]

    def full_weights(self) -> list[np.ndarray]:
        """Every stage's weights in stage order, as the unsplit model's ``get_weights`` lists them."""
        return [w for stage in self.partition.stages for w in self.weights[_name(stage.index)]]


def gpipe_bubble(n_stages: int, micro_batches: int) -> float:
    """GPipe's ideal idle share, ``(K - 1) / (M + K - 1)``, for equal stage times and no communication."""
    return (n_stages - 1) / (micro_batches + n_stages - 1)


def bubble_fraction(records: pd.DataFrame) -> pd.Series:
    """Per step, the measured idle share: ``1 - busy time / (stages x makespan)``.

    Busy time is the sum of each stage's passes and update (``t_end - t_start``);
    the makespan runs from the step's first pass start to its last end.
    """
    by_step = records.groupby("step")
    busy = by_step.apply(lambda r: float((r["t_end"] - r["t_start"]).sum()), include_groups=False)
    makespan = by_step["t_end"].max() - by_step["t_start"].min()
    stages = by_step["stage"].nunique()
    return (1 - busy / (stages * makespan)).rename("bubble")


def _name(index: int) -> str:
    return f"stage-{index}"


class TrainSteps(TypedDict, total=False):
    """How ``train_pipelined`` trains the stages: its keywords beside the model's cut (see its parameters)."""

    batch_size: int
    micro_batches: int
    steps: int | None
    schedule: str
    learning_rate: float
    momentum: float
    loss: str


@dataclass(frozen=True)
class _Steps:
    """``TrainSteps`` with their defaults."""

    batch_size: int = 32
    micro_batches: int = 4
    steps: int | None = None
    schedule: str = "gpipe"
    learning_rate: float = 0.05
    momentum: float = 0.0
    loss: str = "sparse_categorical_crossentropy"


def train_pipelined(
    cluster: DeviceCluster,
    model: Any,
    x: np.ndarray,
    y: np.ndarray,
    *,
    n_stages: int | None = None,
    cuts: Sequence[int | str] | None = None,
    devices: Sequence[str] | None = None,
    log: Callable[[str], None] = print,
    **training: Unpack[TrainSteps],
) -> PipelineTraining:
    """Train ``model`` cut into stages across devices with GPipe's schedule; return what was measured.

    Parameters
    ----------
    cluster
        The devices (``edgelab.cluster.device_cluster.connect``).
    model
        A functional Keras model, or a function that builds one (its initial weights are the run's).
    x, y
        Training inputs and integer labels; step ``k`` trains on the ``k``-th slice of ``batch_size``.
    n_stages, cuts
        How to cut the model (``edgelab.pipeline.partition``): a number of stages balanced by
        multiply-accumulates, or the last layer of every stage but the last.
    devices
        The devices to place the stages on, in order (default: the cluster's first ones).
    log
        Where progress lines go.
    **training
        How the stages train (``TrainSteps``):

        batch_size, micro_batches
            Images per mini-batch (default 32), and the number of equal micro-batches it is split into (a divisor
            of batch_size; default 4).
        steps
            Mini-batches to train (default: as many as ``x`` holds whole).
        schedule
            ``"gpipe"`` (the default: one update per mini-batch, after a fill and a drain) or ``"1f1b"``
            (PipeDream: an update per micro-batch on each stage, weights stashed, no flush).
        learning_rate, momentum
            SGD's, applied on each stage to its own weights (defaults 0.05 and 0).
        loss
            A Keras loss name for the last stage (default ``"sparse_categorical_crossentropy"``).
    """
    checks.keywords("train_pipelined", training, TrainSteps)
    how = _Steps(**training)
    if how.schedule not in SCHEDULES:
        raise ConfigError("schedule", how.schedule, f"one of {', '.join(SCHEDULES)}")
    model = resolve_model(model)
    cut = partition(model, n_stages, cuts=cuts)
    n = len(cut.stages)
    placed = list(devices) if devices is not None else list(cluster.devices[:n])
    _check(cluster, placed, n, x, y, how.batch_size, how.micro_batches, how.steps)
    steps = how.steps if how.steps is not None else len(x) // how.batch_size
    models = {_name(s.index): stage_model(model, s) for s in cut.stages}
    chain = [(_name(s.index), placed[k]) for k, s in enumerate(cut.stages)]
    run = _Pipelined(chain, models, uuid.uuid4().hex[:12], x, y, how)
    fleet = run.fleet = Fleet.for_cluster(cluster, placed, run.prepare, log=log)
    t0 = time.time()
    try:
        if how.schedule == "gpipe":
            for step in range(steps):
                work = _micro_batches(step, step + 1, how.batch_size, how.micro_batches)
                fleet.attempt("train", step, partial(run.passes, work))
        else:  # one stream, no flush: a lost device could not be recovered mid-stream anyway
            work = _micro_batches(0, steps, how.batch_size, how.micro_batches)
            fleet.attempt("train", 0, partial(run.passes, work))
        wall_s = time.time() - t0
        # Inside an attempt, a device lost now is reported as the lost stage it is, not as Dask's error.
        weights = fleet.attempt("weights", 0, run.weights)
        fleet.attempt("release", 0, lambda: fleet.run(placed, worker.release_run, run.run_id), prepare=False)
    finally:
        fleet.close()
    measured = pd.DataFrame(run.records)
    if not measured.empty:
        measured["t_start"] -= t0
        measured["t_end"] -= t0
        measured = measured.sort_values(["t_start"]).reset_index(drop=True)
    return PipelineTraining(cut, placed, weights, pd.DataFrame(run.losses), measured, how.micro_batches, wall_s)


def _micro_batches(first: int, stop: int, batch_size: int, micro_batches: int) -> list[tuple[int, int, np.ndarray]]:
    """(step, micro-batch, sample indices) of steps ``first`` to ``stop - 1``, in order."""
    work = []
    for step in range(first, stop):
        lo = step * batch_size
        parts = np.array_split(np.arange(lo, lo + batch_size), micro_batches)
        work += [(step, m, idx) for m, idx in enumerate(parts)]
    return work


@dataclass
class _Pipelined:
    """A pipelined training run under way: its stages on their devices, and what the passes measured so far."""

    chain: list[tuple[str, str]]  # (stage name, device), in stage order
    models: dict[str, Any]  # each stage's model, its initial weights
    run_id: str
    x: np.ndarray
    y: np.ndarray
    how: _Steps
    fleet: Fleet = field(init=False)
    records: list[dict[str, Any]] = field(default_factory=list)
    losses: list[dict[str, Any]] = field(default_factory=list)
    loaded: bool = False

    @property
    def gpipe(self) -> bool:
        """Whether the schedule is GPipe's (one update per mini-batch), not PipeDream's."""
        return self.how.schedule == "gpipe"

    def prepare(self, todo: list[str]) -> None:
        """Load every stage on its device, once: the weights a lost device held are gone."""
        if self.loaded:  # the weights a lost device held were updated there: nothing on the client can restore them
            raise ClusterError(
                f"devices {', '.join(todo)} lost during pipelined training; their stages' weights are gone"
            )
        fleet, how = self.fleet, self.how
        futures = {}
        for name, device in self.chain:
            weights = fleet.send(device, self.models[name].get_weights())
            config = json.dumps(self.models[name].get_config())
            last = name == self.chain[-1][0]
            args = (self.run_id, name, config, weights, how.learning_rate, how.momentum, how.loss if last else None)
            futures[name] = fleet.submit(device, train_worker.load_train_stage, *args)
        fleet.wait(futures)
        self.loaded = True

    def passes(self, work: list[tuple[int, int, np.ndarray]]) -> None:
        """Run every stage's passes of ``work`` in the schedule's order, and keep what they measured."""
        passes = _Passes(self, work)
        passes.submit_all()
        passes.collect()

    def weights(self) -> dict[str, list[np.ndarray]]:
        """Each stage's weights, as its device holds them now."""
        return {
            name: self.fleet.call(device, train_worker.stage_weights, self.run_id, name) for name, device in self.chain
        }


@dataclass
class _Passes:
    """Every stage's passes of ``work``, submitted in the schedule's order.

    Each pass also takes its stage's previous pass as an argument, so the
    device runs them in that order; a pass is submitted once its input exists
    (the previous stage's forward, the next stage's backward).
    """

    run: _Pipelined
    work: list[tuple[int, int, np.ndarray]]  # (step, micro-batch, sample indices)
    orders: list[list[tuple[str, int]]] = field(init=False)  # each stage's passes, in order
    done: dict[tuple[str, int, int], Any] = field(default_factory=dict)  # (kind, stage, g) -> its future
    previous: list[Any] = field(init=False)  # each stage's last pass submitted
    position: list[int] = field(init=False)  # each stage's next pass in its order
    batch: dict[int, int] = field(init=False)  # images of each step's mini-batch

    def __post_init__(self) -> None:
        n = len(self.run.chain)
        self.orders = stage_orders(self.run.how.schedule, n, len(self.work))
        self.batch = {step: sum(len(idx) for s, _, idx in self.work if s == step) for step, _, _ in self.work}
        self.previous = [None] * n
        self.position = [0] * n

    def submit_all(self) -> None:
        """Submit every pass, each once its input exists."""
        n = len(self.run.chain)
        while any(self.position[s] < len(self.orders[s]) for s in range(n)):
            before = sum(self.position)
            for s in range(n):
                self.submit_ready(s)
            if sum(self.position) == before:  # every stage waits on another: the orders contradict each other
                schedule, lengths = self.run.how.schedule, [len(o) for o in self.orders]
                raise RuntimeError(f"schedule {schedule!r} deadlocks at passes {self.position} of {lengths}")

    def submit_ready(self, s: int) -> None:
        """Submit stage ``s``'s next passes, in order, as long as their inputs exist."""
        while self.position[s] < len(self.orders[s]):
            kind, g = self.orders[s][self.position[s]]
            source = self.source(kind, s, g)
            if source is None:
                break
            self.done[(kind, s, g)] = self.previous[s] = self.submit(kind, s, g, source)
            self.position[s] += 1

    def source(self, kind: str, s: int, g: int) -> Any:
        """The input of stage ``s``'s pass ``kind`` of micro-batch ``g``; None while it does not exist yet."""
        if kind in ("F", "FB"):
            if s:
                return self.done.get(("F", s - 1, g))
            _, device = self.run.chain[s]
            _, _, idx = self.work[g]
            return self.run.fleet.send(device, np.ascontiguousarray(self.run.x[idx], np.float32))
        return self.done.get(("B", s + 1, g)) or self.done.get(("FB", s + 1, g))

    def submit(self, kind: str, s: int, g: int, source: Any) -> Any:
        """Submit stage ``s``'s pass ``kind`` of micro-batch ``g`` on ``source``, after the stage's previous pass."""
        run, fleet = self.run, self.run.fleet
        name, device = run.chain[s]
        step, m, idx = self.work[g]
        after = [self.previous[s]] if self.previous[s] is not None else []
        stash = not run.gpipe
        if kind == "F":
            return fleet.submit(device, train_worker.forward, run.run_id, name, step, m, source, stash, *after)
        if kind == "FB":
            labels = fleet.send(device, np.asarray(run.y[idx]))
            scale = len(idx) / self.batch[step] if run.gpipe else 1.0
            args = (run.run_id, name, step, m, source, labels, scale, stash, *after)
            return fleet.submit(device, train_worker.forward_loss_backward, *args)
        return fleet.submit(device, train_worker.backward, run.run_id, name, step, m, source, stash, *after)

    def collect(self) -> None:
        """Apply GPipe's updates, wait for every pass, and keep the records and the losses; forget the futures."""
        run, fleet, n, work = self.run, self.run.fleet, len(self.run.chain), self.work
        updates = {}
        if run.gpipe:
            step = work[0][0]
            for s, (name, device) in enumerate(run.chain):
                updates[name] = fleet.submit(
                    device, train_worker.apply_update, run.run_id, name, step, self.previous[s]
                )
        done = self.done
        firsts = {g: done[("B", 0, g)] if n > 1 else done[("FB", 0, g)] for g in range(len(work))}
        ends = {g: done[("FB", n - 1, g)] for g in range(len(work))}
        fleet.wait(
            {**{f"first-{g}": f for g, f in firsts.items()}, **{f"end-{g}": f for g, f in ends.items()}, **updates}
        )
        for result in fleet.gather({f"first-{g}": f for g, f in firsts.items()}).values():
            run.records.extend(result[1])
        run.records.extend(fleet.gather(updates).values())
        for g, result in zip(ends, fleet.gather({f"end-{g}": f for g, f in ends.items()}).values(), strict=True):
            step, m, idx = work[g]
            run.losses.append({"step": step, "micro_batch": m, "images": len(idx), "loss": result[2]})
        fleet.forget(list(done.values()) + list(updates.values()))


def _check(
    cluster: DeviceCluster,
    devices: list[str],
    n_stages: int,
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int,
    micro_batches: int,
    steps: int | None,
) -> None:
    if len(devices) != n_stages or len(set(devices)) != n_stages:
        raise ConfigError("devices", devices, f"{n_stages} distinct devices, one per stage")
    unknown = [d for d in devices if d not in cluster.devices]
    if unknown:
        raise ConfigError("devices", devices, f"devices of the cluster: {', '.join(cluster.devices)}")
    checks.integer("batch_size", batch_size, at_least=1)
    # Equal micro-batches: GPipe's schedule (and its bubble formula) assume them.
    checks.integer("micro_batches", micro_batches, at_least=1, at_most=batch_size)
    if batch_size % micro_batches:
        raise ConfigError("micro_batches", micro_batches, f"an integer >= 1 dividing batch_size ({batch_size})")
    if len(x) != len(y):
        raise ConfigError("y", len(y), f"one label per input ({len(x)})")
    whole = len(x) // batch_size
    if steps is not None:
        checks.integer("steps", steps, at_least=1, at_most=whole)
    if whole < 1:
        raise ConfigError("x", len(x), f"at least one mini-batch of {batch_size}")

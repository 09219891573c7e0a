"""Zhang 2018's fault tolerance: end devices that fail mid-job, and four ways to finish the job anyway.

A job's tasks (the report: 200 of 50 CIFAR images) go to the end devices. A
failing device switches itself off once it has answered ``fail_after`` tasks
(the report: half its share, 12 of 25): it takes no task after that, and its
worker is killed for good (``edgelab.cluster.faults.shut_down``: SIGKILL, its nanny
told not to restart it) as soon as its last answer is in. Whatever was queued
on it is lost. The methods:

* ``Without``: tasks dealt to the devices in turn, once. A lost task is never
  answered, so the job never finishes (``inf``).
* ``Reassign`` (the report's first method): after the first pass, once every
  answer that will come has come, each unanswered task goes to the next
  device in turn over the full list, whatever its state; a send to a dead
  device waits out the timeout and moves on to the next.
* ``Monitor`` (its second): a list of live devices, refreshed by querying
  every device each ``heartbeat_s``; sends go to the next live device in
  turn, and when a query finds a device dead its unanswered tasks are sent on
  at once.
* ``Dask``: the scheduler places the tasks on any end device (the tier's
  resource) and, when a worker dies, places its tasks elsewhere: Dask's own
  recovery, nothing written for it.

Every task is a real inference on a real worker and every failure a real
SIGKILL; a send to a device first opens a TCP connection to its worker, which
a dead worker refuses. Time is emulated, as everywhere in edgelab: the
assigner keeps a clock; a send costs the task's bytes over the end link, a
refused send costs the timeout (a switched-off device on a network does not
refuse, it stays silent; on loopback the refusal is immediate), and a device
answers a task after the end network's time for its images (the tier
calibration, ``edgelab.emulation.tier_clock``), one task at a time in the order it got
them. Runs advance in the clock's order: an answer is taken, and a failing
device killed, only when the clock reaches it, so what the cluster does and
what the clock says agree. Each task's answer is delivered once; a second
answer for a task is an error.

Paper: Zongpu Zhang, "Optimization of Deep Learning Applications in Highly
Heterogeneous Distributed System", SJTU EE447 report, 2018 (sections 3.6, 4.9).
"""

from __future__ import annotations

import heapq
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

import numpy as np
import pandas as pd
from distributed import as_completed
from distributed.diagnostics.plugin import SchedulerPlugin

from edgelab.cluster.device_cluster import device_resource, tier_resource
from edgelab.cluster.faults import reachable, shut_down
from edgelab.common import checks
from edgelab.common.errors import ClusterError, ConfigError
from edgelab.hierarchy.tiered import TASK_SIZE, Deployment, infer_task

#: The report's three methods, then Dask's own recovery.
METHODS = ("Without", "Reassign", "Monitor", "Dask")
#: The longest real wait for one answer before a run is called stuck (a device worker hung, not a clock matter).
REAL_WAIT_S = 120.0
_PLACEMENTS = "edgelab-placements"
# On a device worker: the run it is armed for, how many tasks it answers before it switches off, how many it has.
_ARMED: dict[str, Any] = {}


@dataclass(frozen=True)
class FaultClock:
    """What the emulated clock charges.

    Parameters
    ----------
    per_image_s
        An end device's time per image with its network (the tier calibration).
    latency_s, link_mbps
        The end link: added to each send, and its bandwidth for the task's bytes.
    timeout_s
        What a send to a dead device costs before the assigner gives up on it (the report: 0.5 s).
    heartbeat_s
        Monitor's query interval (the report does not state it).
    deadline_s
        A job not finished by then is recorded as never finishing.
    """

    per_image_s: float
    latency_s: float = 0.0
    link_mbps: float = 1000.0
    timeout_s: float = 0.5
    heartbeat_s: float = 1.0
    deadline_s: float = 600.0

    def __post_init__(self) -> None:
        for name in ("per_image_s", "link_mbps", "timeout_s", "heartbeat_s", "deadline_s"):
            unit = "Mbit/s" if name == "link_mbps" else "seconds"
            checks.number(name, getattr(self, name), above=0, below=math.inf, unit=unit)
        checks.number("latency_s", self.latency_s, at_least=0, below=math.inf, unit="seconds")

    def task_s(self, images: int) -> float:
        """Seconds an end device takes to answer ``images`` images."""
        return self.per_image_s * images

    def send_s(self, nbytes: int) -> float:
        """Seconds the assigner spends sending ``nbytes`` to a live device."""
        return self.latency_s + 8 * nbytes / (self.link_mbps * 1e6)


@dataclass
class FaultRun:
    """What one job did under one method."""

    method: str
    failing: list[str]  # devices set to fail
    fail_after: int
    finished: bool
    duration_s: float  # the clock's; inf when the job never finished
    timeouts: int  # sends that waited out the timeout
    queries: int  # Monitor's device queries
    tasks: pd.DataFrame  # a row per task: device, images, sends, start_s, end_s, cpu_s, wall_s (NaN: never answered)
    events: pd.DataFrame  # time_s, event, task (-1 for a device's own), device
    kills: list[dict[str, Any]] = field(default_factory=list)  # device, pid, at_s (clock), answered
    answers: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16))  # per image; -1 where never answered
    host_wall_s: float = 0.0


def default_fail_after(n_tasks: int, n_devices: int) -> int:
    """Half of a device's share, rounded down: the report's 12 of 25 (200 tasks on 8 devices)."""
    return (n_tasks // n_devices) // 2


def failing_devices(devices: list[str], failures: int, seed: int | list[int]) -> list[str]:
    """Which ``failures`` of ``devices`` fail, drawn from ``seed`` (the report does not say which)."""
    checks.integer("failures", failures, at_most=len(devices))
    picked = np.random.default_rng(seed).choice(len(devices), size=failures, replace=False)
    return [devices[i] for i in sorted(picked)]


def check_job(
    method: str, devices: list[str], images: np.ndarray, task_size: int, failures: int, fail_after: int | None
) -> int:
    """Check a job before any cluster work; return its ``fail_after``."""
    if method not in METHODS:
        raise ConfigError("method", method, f"one of {', '.join(METHODS)}")
    if not devices:
        raise ConfigError("devices", devices, "at least one end device")
    if images.ndim != 4 or images.dtype != np.uint8 or len(images) == 0:
        raise ConfigError("images", f"{images.dtype} array of shape {images.shape}", "uint8 images, N x H x W x C")
    checks.integer("task_size", task_size, at_least=1)
    failing_devices(devices, failures, 0)
    n_tasks = math.ceil(len(images) / task_size)
    if fail_after is None:
        limit = default_fail_after(n_tasks, len(devices))
        if limit < 1:
            raise ConfigError(
                "fail_after",
                limit,
                "an integer >= 1 (tasks a failing device answers before it switches off); half a device's share "
                f"of {n_tasks} tasks on {len(devices)} devices is {limit}: give more tasks",
            )
        return limit
    checks.integer("fail_after", fail_after, at_least=1)
    return fail_after


class Failing(TypedDict, total=False):
    """Which end devices of a job fail, and when: keywords of ``run_job``.

    ``failures``: how many fail (default 0), drawn from ``seed`` (default 0); ``fail_after``: tasks each answers
    before it switches off (default: half a device's share, ``default_fail_after``).
    """

    failures: int
    fail_after: int | None
    seed: int | list[int]


def run_job(
    deployment: Deployment,
    devices: list[str],
    images: np.ndarray,
    method: str,
    clock: FaultClock,
    *,
    task_size: int = TASK_SIZE,
    **faults: Unpack[Failing],
) -> FaultRun:
    """Classify ``images`` on the end ``devices`` of ``deployment`` while ``failures`` of them fail, by ``method``.

    The devices must be up and hold the end network (``Deployment.restore``
    brings back those an earlier job shut down). Checked before any cluster
    work: the method, the devices, the images, the task size, the failures and
    ``fail_after`` (default: half a device's share of the tasks; ``Failing``).
    """
    checks.keywords("run_job", faults, Failing)
    failures, fail_after, seed = faults.get("failures", 0), faults.get("fail_after"), faults.get("seed", 0)
    images = np.asarray(images)
    limit = check_job(method, devices, images, task_size, failures, fail_after)
    held = set(deployment.devices.get("end", []))
    if not set(devices) <= held:
        raise ConfigError("devices", devices, f"end devices of the deployment ({sorted(held)})")
    if method == "Dask" and set(devices) != held:
        raise ConfigError("devices", devices, f"every end device of the deployment for Dask ({sorted(held)})")
    failing = failing_devices(devices, failures, seed)
    chunks = [images[i : i + task_size] for i in range(0, len(images), task_size)]
    run_id = uuid.uuid4().hex[:12]
    client = deployment.cluster.client
    for device in devices:
        client.run(_arm, run_id, limit if device in failing else None, workers=[deployment.addresses[device]])
    start = time.perf_counter()
    job = _Job(deployment, devices, chunks, clock, set(failing), limit, run_id)
    try:
        if method == "Dask":
            job.by_dask()
        else:
            job.assign(method)
    finally:
        job.cancel_outstanding()
    return job.result(method, failing, time.perf_counter() - start)


class _Job:
    """One job on the clock: the assigner's sends, the devices' queues, the answers, the kills."""

    def __init__(
        self,
        deployment: Deployment,
        devices: list[str],
        chunks: list[np.ndarray],
        clock: FaultClock,
        failing: set[str],
        fail_after: int,
        run_id: str,
    ) -> None:
        self.deployment, self.devices, self.chunks, self.clock = deployment, devices, chunks, clock
        self.failing, self.fail_after, self.run_id = failing, fail_after, run_id
        self.client = deployment.cluster.client
        self.now = 0.0  # the assigner's clock
        self.free = dict.fromkeys(devices, 0.0)  # when each device has answered all it got
        self.got: dict[str, list[int]] = {d: [] for d in devices}  # tasks each device got, in order
        self.answered = dict.fromkeys(devices, 0)
        self.dead_at: dict[str, float] = {}
        self.coming: list[tuple[float, int, float, int, str, Any]] = []  # (end, order, start, task, device, future)
        self.outstanding: list[Any] = []  # futures that will never answer (their device switches off first)
        self.rows: dict[int, dict[str, Any]] = {}
        self.sends = [0] * len(chunks)
        self.events: list[dict[str, Any]] = []
        self.kills: list[dict[str, Any]] = []
        self.released: dict[str, list[Any]] = {}  # keys of the answers taken from each device
        self.timeouts = 0
        self.queries = 0
        self.finished_at = 0.0

    # --------------------------------------------------------- the clock ----

    def log(self, at: float, event: str, task: int, device: str) -> None:
        self.events.append({"time_s": at, "event": event, "task": task, "device": device})

    def send(self, task: int, device: str) -> bool:
        """Send ``task`` to ``device`` now; False (and the timeout spent) when the device is dead."""
        self.advance(self.now)
        self.sends[task] += 1
        if not reachable(self.deployment.addresses[device], timeout_s=self.clock.timeout_s):
            self.timeouts += 1
            self.log(self.now, "timeout", task, device)
            self.now += self.clock.timeout_s
            return False
        chunk = self.chunks[task]
        self.now += self.clock.send_s(chunk.nbytes)
        self.log(self.now, "send", task, device)
        position = len(self.got[device])
        self.got[device].append(task)
        future = self.client.submit(
            _answer,
            self.deployment.key,
            self.run_id,
            task,
            chunk,
            resources={device_resource(device): 1},
            pure=False,
            # A device works in the order it got its tasks: Dask ties submissions within 60 ms otherwise.
            priority=-sum(len(got) for got in self.got.values()),
        )
        if device in self.failing and position >= self.fail_after:
            self.outstanding.append(future)  # queued behind the device's last answer: lost when it switches off
            return True
        begin = max(self.now, self.free[device])
        end = begin + self.clock.task_s(len(chunk))
        self.free[device] = end
        heapq.heappush(self.coming, (end, len(self.events), begin, task, device, future))
        return True

    def advance(self, until: float) -> None:
        """Take every answer the clock has reached by ``until``, killing each failing device after its last."""
        while self.coming and self.coming[0][0] <= until:
            end, _, begin, task, device, future = heapq.heappop(self.coming)
            answer = future.result(timeout=REAL_WAIT_S)
            self.taken(device, future)
            self.deliver(task, answer, begin, end)
            self.answered[device] += 1
            if device in self.failing and self.answered[device] == self.fail_after:
                self.kill(device, end)

    def taken(self, device: str, future: Any) -> None:
        """Let go of an answer's future: a device killed later must not leave Dask a result to recompute."""
        self.released.setdefault(device, []).append(future.key)
        future.release()

    def deliver(self, task: int, answer: dict[str, Any], begin: float, end: float) -> None:
        if task in self.rows:
            raise ClusterError(f"task {task} was answered twice ({self.rows[task]['device']}, {answer['device']})")
        self.rows[task] = {**answer, "start_s": begin, "end_s": end}
        self.finished_at = max(self.finished_at, end)
        self.log(end, "answer", task, str(answer["device"]))

    def kill(self, device: str, at: float) -> None:
        cluster = self.deployment.cluster
        keys = self.released.get(device, [])
        deadline = time.monotonic() + 10.0
        while self.client.run_on_scheduler(_still_held, keys=keys) and time.monotonic() < deadline:
            time.sleep(0.005)
        pid = shut_down(self.client, self.deployment.addresses[device], local=cluster.emulated)
        self.dead_at[device] = at
        self.kills.append({"device": device, "pid": pid, "at_s": at, "answered": self.answered[device]})
        self.log(at, "shut down", -1, device)

    def unanswered(self) -> list[int]:
        return [t for t in range(len(self.chunks)) if t not in self.rows]

    # ------------------------------------------------------- the methods ----

    def assign(self, method: str) -> None:
        if method == "Monitor":
            self.monitor()
            return
        turn = 0
        for task in range(len(self.chunks)):
            self.send(task, self.devices[turn % len(self.devices)])
            turn += 1
        self.advance(math.inf)
        if method == "Without":
            return
        while (todo := self.unanswered()) and self.now <= self.clock.deadline_s:
            # Reassign waits for every answer that will come, then deals what is missing over every device again.
            self.now = max(self.now, self.finished_at)
            for task in todo:
                tried = 0
                while not self.send(task, self.devices[turn % len(self.devices)]):
                    turn, tried = turn + 1, tried + 1
                    if tried == len(self.devices):
                        return  # every device is dead: the job cannot finish
                turn += 1
            self.advance(math.inf)

    def monitor(self) -> None:
        live = list(self.devices)  # the first query, at 0: everyone answers
        self.queries += len(live)
        turn = [0]
        tick = self.clock.heartbeat_s

        def dispatch(task: int) -> bool:
            while live:
                device = live[turn[0] % len(live)]
                turn[0] += 1
                if self.send(task, device):
                    return True
                live.remove(device)  # a refused send tells the monitor too
            return False

        for task in range(len(self.chunks)):
            while tick <= self.now:
                tick = self.query(live, tick, dispatch)
            dispatch(task)
        while self.unanswered() and live and tick <= self.clock.deadline_s:
            if self.coming and self.coming[0][0] <= tick:
                self.advance(self.coming[0][0])
            else:
                tick = self.query(live, tick, dispatch)

    def query(self, live: list[str], at: float, dispatch: Any) -> float:
        """Monitor's query at ``at``: drop the devices that do not answer, send their unanswered tasks on."""
        self.advance(at)
        self.queries += len(live)
        gone = [d for d in list(live) if not reachable(self.deployment.addresses[d], timeout_s=self.clock.timeout_s)]
        orphans = []
        for device in gone:
            live.remove(device)
            self.log(at, "found dead", -1, device)
            orphans += [t for t in self.got[device] if t not in self.rows]
        if orphans:
            self.now = max(self.now, at)
            for task in sorted(orphans):
                dispatch(task)
        return at + self.clock.heartbeat_s

    def by_dask(self) -> None:
        """Dask places every task on some end device and moves a dead worker's tasks itself; the clock follows."""
        self.client.register_plugin(_Placements(), name=_PLACEMENTS)
        try:
            futures = {}
            for task, chunk in enumerate(self.chunks):
                future = self.client.submit(
                    _answer,
                    self.deployment.key,
                    self.run_id,
                    task,
                    chunk,
                    resources={tier_resource("end"): 1},
                    pure=False,
                    priority=-task,
                )
                futures[future.key] = (task, future)
                self.sends[task] = 1
            task_of = {key: task for key, (task, _) in futures.items()}
            self.outstanding = [f for _, f in futures.values()]
            del futures
            answers = {}
            done = as_completed(self.outstanding, with_results=True)
            self.outstanding = []  # as_completed holds them; each is let go once answered
            for future, answer in done:
                task = task_of[future.key]
                device = str(answer["device"])
                answers[task] = answer
                self.taken(device, future)
                del future
                self.answered[device] += 1
                if device in self.failing and self.answered[device] == self.fail_after:
                    self.kill(device, math.nan)  # when, on the clock, is worked out below
            placed = self.client.run_on_scheduler(_placements_log, keys=list(task_of))
        finally:
            self.client.unregister_scheduler_plugin(_PLACEMENTS)
        self._dask_clock(answers, {task_of[k]: v for k, v in placed.items()})

    def _dask_clock(self, answers: dict[int, dict[str, Any]], placed: dict[int, list[str]]) -> None:
        """Replay on the clock what each device did, in its own order: a moved task waits for its worker's death."""
        send_s = [self.clock.send_s(c.nbytes) for c in self.chunks]
        sent_at = np.cumsum(send_s)
        by_device: dict[str, list[int]] = {d: [] for d in self.devices}
        for task, answer in sorted(answers.items(), key=lambda kv: kv[1]["seq"]):
            by_device[str(answer["device"])].append(task)
        dead_at: dict[str, float] = {}
        for _ in range(len(self.devices) + 1):  # a move can only wait on an earlier death: settles in n passes
            timeline = {}
            for device, tasks in by_device.items():
                free = 0.0
                for task in tasks:
                    # The scheduler learns a worker died one timeout after it did (on a network, not on loopback).
                    moved = [
                        dead_at.get(d, math.nan) + self.clock.timeout_s for d in placed.get(task, []) if d != device
                    ]
                    ready = max([sent_at[task], *[m for m in moved if not math.isnan(m)]])
                    begin = max(free, ready)
                    free = begin + self.clock.task_s(len(self.chunks[task]))
                    timeline[task] = (begin, free)
            settled = {
                k["device"]: timeline[by_device[k["device"]][self.fail_after - 1]][1]
                for k in self.kills
                if self.fail_after
            }
            if settled == dead_at:
                break
            dead_at = settled
        for kill in self.kills:
            kill["at_s"] = dead_at.get(kill["device"], 0.0)
            self.log(kill["at_s"], "shut down", -1, kill["device"])
        self.dead_at = dead_at
        for task, answer in answers.items():
            begin, end = timeline[task]
            self.deliver(task, answer, begin, end)
        self.outstanding = []

    # ------------------------------------------------------------ record ----

    def cancel_outstanding(self) -> None:
        """Drop every future that will never answer, so no restarted device picks it up."""
        pending = self.outstanding + [c[-1] for c in self.coming]
        if pending:
            self.client.cancel(pending, force=True)
        self.outstanding, self.coming = [], []

    def result(self, method: str, failing: list[str], host_wall_s: float) -> FaultRun:
        finished = not self.unanswered() and self.finished_at <= self.clock.deadline_s
        rows = []
        answers = np.full(sum(len(c) for c in self.chunks), -1, np.int16)
        offset = 0
        for task, chunk in enumerate(self.chunks):
            row = self.rows.get(task)
            rows.append(
                {
                    "task": task,
                    "device": "" if row is None else str(row["device"]),
                    "images": len(chunk),
                    "sends": self.sends[task],
                    "start_s": math.nan if row is None else row["start_s"],
                    "end_s": math.nan if row is None else row["end_s"],
                    "cpu_s": math.nan if row is None else row["cpu_s"],
                    "wall_s": math.nan if row is None else row["wall_s"],
                }
            )
            if row is not None:
                answers[offset : offset + len(chunk)] = row["answers"]
            offset += len(chunk)
        events = pd.DataFrame(self.events, columns=["time_s", "event", "task", "device"])
        return FaultRun(
            method,
            failing,
            self.fail_after,
            finished,
            self.finished_at if finished else math.inf,
            self.timeouts,
            self.queries,
            pd.DataFrame(rows),
            events.sort_values("time_s", kind="stable", ignore_index=True),
            self.kills,
            answers,
            host_wall_s,
        )


# ------------------------------------------------------- on the devices ----


def _arm(run_id: str, fail_after: int | None) -> None:
    """On a device: count answers from zero for ``run_id``; after ``fail_after`` of them, take no more."""
    _ARMED.clear()
    _ARMED.update(run=run_id, fail_after=fail_after, answered=0)


def _answer(key: str, run_id: str, task: int, images: np.ndarray) -> dict[str, Any]:
    """One task on this device: the end network's answers, unless the device has switched itself off."""
    if _ARMED.get("run") != run_id:
        raise ClusterError(f"this device was not armed for run {run_id} (restarted since?)")
    limit = _ARMED["fail_after"]
    if limit is not None and _ARMED["answered"] >= limit:
        # Switched off: it takes nothing more, and the assigner kills its worker once its last answer is in.
        time.sleep(REAL_WAIT_S)
        raise ClusterError(f"the device was to be shut down after {limit} answers and was not")
    answer = infer_task(key, "end", task, images)
    _ARMED["answered"] += 1
    answer["seq"] = _ARMED["answered"]
    return answer


class _Placements(SchedulerPlugin):
    """On the scheduler: every worker each task was placed on, in order (Dask's own record of its moves)."""

    def __init__(self) -> None:
        self.placed: dict[str, list[str]] = {}

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish == "processing":
            ts = self.scheduler.tasks.get(key)
            if ts is not None and ts.processing_on is not None:
                self.placed.setdefault(key, []).append(str(ts.processing_on.name))


def _still_held(dask_scheduler: Any, keys: list[Any]) -> bool:
    """On the scheduler: whether any of ``keys`` is still held (its release not in yet)."""
    return any(k in dask_scheduler.tasks for k in keys)


def _placements_log(dask_scheduler: Any, keys: list[Any]) -> dict[Any, list[str]]:
    placed = dask_scheduler.plugins[_PLACEMENTS].placed
    return {k: placed.get(k, []) for k in keys}

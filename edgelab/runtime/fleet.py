"""The devices a run uses on a Dask cluster, and their recovery when one dies.

A ``Fleet`` knows each device by name and finds its worker through the
scheduler (a restarted worker comes back under the same name at a new
address). Every exchange with the devices goes through it:

* ``send`` puts a value on one device (a direct scatter to its worker);
* ``submit`` runs a task pinned to a device by its Dask resource;
* ``direct`` calls one of the runtime's functions on a device straight from
  the client, one round trip on Dask's comms with no scheduler in between
  (``TRANSPORTS``: how a run's rounds travel); ``call_all`` makes such calls
  on several devices at once and waits for them, on the devices' round
  channels (``edgelab.runtime.channel``) where they can be opened;
* ``wait`` waits for tasks while watching the scheduler's view of the workers,
  so a device that dies is noticed within ``POLL_S``, not when a timeout ends;
* ``run`` calls a function on devices' workers (``client.run``);
* ``attempt(phase, at, body)`` runs one step of a run and, when a device was
  lost during it, waits (bounded) for the device to come back, prepares it
  again through the runtime's ``prepare`` callback (its data, its model, its
  monitor) and runs the step again from the state the caller kept.

So the mechanism holds for any runtime that keeps its state where a restart
cannot reach it (the parameter server's weights, a pipeline's inputs) and can
rebuild a device from there. Nothing a lost device held is waited for: values
it held are sent again by the step that needs them.

A device that does not come back within ``restart_wait_s`` ends the run with
``WorkerLostError`` naming it, the phase and how long we waited. Each recovery
is recorded (``Fleet.recoveries``) and printed as one line.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar

from distributed import Client, Future, KilledWorker, wait
from distributed.protocol import to_serialize

from edgelab.cluster.device_cluster import DeviceCluster, device_resource, scheduler_workers
from edgelab.cluster.faults import KillSchedule
from edgelab.common import checks
from edgelab.common.errors import ConfigError, WorkerLostError
from edgelab.common.wire import Bundle
from edgelab.runtime.channel import Channels
from edgelab.runtime.protocol import DIRECT_OP, OPEN_CHANNEL, StateMissingError, call_name

T = TypeVar("T")

#: How a run's rounds reach the devices: ``"direct"``, one call from the client to each device's
#: worker on Dask's comms (``Fleet.direct``); ``"scheduler"``, the weights scattered, a task
#: scheduled and its result gathered (``send``, ``submit``, ``gather``); ``"allreduce"``, the devices
#: average among themselves and the client sends only tasks (``edgelab.peer.allreduce``; synchronous
#: strategies); ``"tree"``, the same with the deltas reduced up a binomial tree and the step sent down
#: it. Results are the same, bit for bit (``"tree"``: up to three devices; deeper trees round subtree means).
TRANSPORTS = ("direct", "scheduler", "allreduce", "tree")
# How often a wait looks at the scheduler's view of the workers.
POLL_S = 0.5
# How long a device may take to come back after its worker died (the nanny restarts it).
RESTART_WAIT_S = 60.0
# After this long without the device, ask the cluster to start its worker again (its nanny may be stuck).
REVIVE_AFTER_S = 20.0
# After an error that looks like a lost connection, how long to wait for the scheduler to confirm the loss.
CONFIRM_S = 10.0
# Once a device is found lost, how long to keep looking for others lost with it (one power cut, one recovery).
SETTLE_S = 2 * POLL_S
# The scheduler's event when a worker missed its heartbeats for longer than the worker TTL.
TTL_TIMED_OUT = "worker-ttl-timed-out"
# Recoveries per step before we stop trying.
MAX_RECOVERIES = 3
# Longest a step may take while every device stays connected (a paused or hung worker).
STEP_TIMEOUT_S = 900.0
#: Set to 0 to keep direct calls on Dask's comms instead of the devices' round channels (edgelab.runtime.channel).
CHANNELS_ENV = "EDGELAB_CHANNELS"


class Faults(TypedDict, total=False):
    """The faults a run injects and how long it waits for a lost device: keywords of a run that recovers.

    ``kills``: the faults to inject (``edgelab.cluster.faults``; None or empty: none);
    ``restart_wait_s``: how long a lost device may take to come back (default ``RESTART_WAIT_S``).
    """

    kills: KillSchedule | Iterable[Any] | None
    restart_wait_s: float


def fault_options(function: str, faults: Mapping[str, Any]) -> tuple[KillSchedule | Iterable[Any] | None, float]:
    """``faults`` (the keywords ``function`` was called with, ``Faults``) as ``(kills, restart_wait_s)``."""
    checks.keywords(function, faults, Faults)
    return faults.get("kills"), faults.get("restart_wait_s", RESTART_WAIT_S)


@dataclass
class _Pending:
    """A recovery under way: filled in as the device comes back and is prepared again."""

    devices: list[str]
    phase: str
    at: int
    error: str
    started: float  # the failed attempt's start (perf_counter)
    detected: float
    # When the loss happened, as far as we know: a kill fired during the attempt, else its start.
    since: float = 0.0
    back: float = 0.0


@dataclass
class Fleet:
    """The named devices of one run, and how to bring one back when it dies.

    Parameters
    ----------
    client
        Client of the cluster.
    devices
        Names of the devices (Dask worker names) the run uses.
    prepare
        Called with the names of devices that need their state (data, model,
        monitor) set up: all of them by ``prepare_all``, and each device again
        after it restarted.
    kills
        Faults to inject (``edgelab.cluster.faults``): device workers killed at chosen points.
    kill_locally
        Kill a worker by its process id from here (the emulated cluster runs
        on this host) rather than from inside the worker.
    restart_wait_s
        How long a lost device may take to come back.
    revive
        ``revive(device)`` starts a device's worker again when it is not back
        after ``REVIVE_AFTER_S`` (``DeviceCluster.revive``); ``None`` leaves it
        to the device's own supervisor.
    log
        Where the one-line recovery messages go.
    """

    client: Client
    devices: list[str]
    prepare: Callable[[list[str]], Any]
    kills: KillSchedule | None = None
    kill_locally: bool = True
    restart_wait_s: float = RESTART_WAIT_S
    revive: Callable[[str], bool] | None = None
    log: Callable[[str], None] = print
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    kills_fired: list[dict[str, Any]] = field(default_factory=list)
    #: host wall seconds of the last step's successful attempt
    last_attempt_s: float = 0.0

    @classmethod
    def for_cluster(
        cls,
        cluster: DeviceCluster,
        devices: list[str],
        prepare: Callable[[list[str]], Any],
        *,
        kills: KillSchedule | None = None,
        restart_wait_s: float = RESTART_WAIT_S,
        log: Callable[[str], None] = print,
    ) -> Fleet:
        """The fleet of ``devices`` on ``cluster``: kills and revivals done locally when the cluster is emulated."""
        return cls(
            cluster.client,
            devices,
            prepare,
            kills=kills,
            kill_locally=cluster.emulated,
            restart_wait_s=restart_wait_s,
            revive=cluster.revive if cluster.emulated else None,
            log=log,
        )

    def __post_init__(self) -> None:
        if not isinstance(self.restart_wait_s, int | float) or not self.restart_wait_s > 0:
            raise ConfigError("restart_wait_s", self.restart_wait_s, "a number of seconds > 0")
        if self.kills is not None:
            self.kills.check_devices(self.devices)
        # A device may be restarting as the run begins: wait for it as a recovery would.
        start = time.monotonic()
        deadline = start + self.restart_wait_s
        revived: set[str] = set()
        while True:
            view = self._view()
            missing = [d for d in self.devices if d not in view]
            if not missing:
                break
            self._revive_late(missing, time.monotonic() - start, revived, lambda d, now: d in now)
            if time.monotonic() > deadline:
                raise ConfigError(
                    "n_devices",
                    len(self.devices),
                    f"devices that are connected; {missing} missing after {self.restart_wait_s:.0f} s "
                    f"(connected: {sorted(view)})",
                )
            time.sleep(0.1)
        self.addresses = {d: view[d] for d in self.devices}
        self._events_since = max((t for t, _ in self.client.get_events("scheduler")), default=0.0)
        self._prepared: dict[str, str] = {}  # device -> the address it was prepared at
        self._inflight: list[Future] = []
        self._calls: list[concurrent.futures.Future[Any]] = []
        self._generation = dict.fromkeys(self.devices, 0)
        self._restarted: set[str] = set()
        self._phase = ""
        self._t0 = time.perf_counter()
        self._last_kill = 0.0  # when point() last fired a kill (perf_counter)
        # Threads for the client's blocking calls to devices (client.run, opening a channel), waited for
        # with loss detection: Dask retries a refused connection for its whole connect timeout (30 s).
        self._blocking = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="edgelab-fleet")
        # Released by ``close``, or when the fleet is collected: a run that holds its fleet (and is held by it,
        # through ``prepare``) is collected only by the cycle collector, and until then each device kept a
        # thread serving the run's idle channel (likely why a host's worker grew 11 -> 22 threads over a block).
        self._releases = [weakref.finalize(self, self._blocking.shutdown, wait=False)]
        self.channels: Channels | None = None
        if os.environ.get(CHANNELS_ENV, "1") != "0":
            tls = self.client.security.get_connection_args("client")["ssl_context"]
            self.channels = Channels(self._open_channel, ssl_context=tls)
            self._releases.append(weakref.finalize(self, self.channels.close))

    def close(self) -> None:
        """Close the run's channels and its threads for blocking calls; what the run recorded stays readable."""
        for release in self._releases:
            release()  # a finalizer runs once: a second close, or the collector later, does nothing

    # ------------------------------------------------------------ where ----

    def _workers(self) -> dict[str, Any]:
        return scheduler_workers(self.client)

    def _view(self) -> dict[str, str]:
        """Device name -> address of its running worker, as the scheduler sees it now."""
        return {str(w["name"]): a for a, w in self._workers().items() if w.get("status", "running") == "running"}

    def lost(self) -> list[str]:
        """Devices whose worker is gone, replaced, or given up on by the scheduler since we last found it."""
        view = self._view()
        lost = [d for d in self.devices if view.get(d) != self.addresses[d]]
        if lost:
            return lost
        silent = self._timed_out()
        return [d for d in self.devices if self.addresses[d] in silent]

    def _timed_out(self) -> set[str]:
        """Workers the scheduler gave up on for missing heartbeats (its worker TTL) since the run began.

        The scheduler then asks the worker's nanny to restart it and keeps
        listing the worker until the nanny answers, which over a cut link is
        only once the link is back; a reply the worker sends meanwhile must not
        count, as its restart is already on the way.
        """
        return {
            address
            for t, event in self.client.get_events("scheduler")
            if t > self._events_since and isinstance(event, dict) and event.get("action") == TTL_TIMED_OUT
            for address in event.get("workers", ())
        }

    # ---------------------------------------------------------- talking ----

    def send(self, device: str, value: Any) -> Future:
        """Put ``value`` on ``device`` (straight to its worker) and return its future."""
        [future] = self.client.scatter(
            [value], workers=[self.addresses[device]], direct=True, hash=False, timeout=POLL_S * 4
        )
        self._inflight.append(future)
        return future

    def submit(self, device: str, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(*args)`` on ``device``."""
        future = self.client.submit(fn, *args, resources={device_resource(device): 1}, pure=False)
        self._inflight.append(future)
        return future

    def direct(self, device: str, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Call ``edgelab.runtime.tasks.DIRECT_FUNCTIONS[fn](*args)`` on ``device`` straight from here.

        One round trip on Dask's comms to the device's worker, with no
        scheduler in between; the future holds the function's result or raises
        its error (a broken connection raises ``OSError``).
        """
        return self.direct_all({device: (fn, *args)})[device]

    def direct_all(self, calls: Mapping[str, tuple[Any, ...]]) -> dict[str, concurrent.futures.Future[Any]]:
        """``direct(device, *call)`` for every device of ``calls`` at once: one hand-over to the client's loop.

        Each hand-over from this thread to the loop's costs a wake-up and the
        GIL (0.15 ms on this 2-core host); a round makes one, not one per device.
        """
        futures: dict[str, concurrent.futures.Future[Any]] = {d: concurrent.futures.Future() for d in calls}
        sends = {d: getattr(self.client.rpc(self.addresses[d]), DIRECT_OP) for d in calls}

        async def call(device: str, fn: Callable[..., Any], *args: Any) -> None:
            future = futures[device]
            try:
                reply = await sends[device](fn=call_name(fn), args=to_serialize(Bundle(args)))
            except BaseException as exc:  # a broken connection, or the round abandoned
                if not future.done():
                    future.set_exception(exc)
                return
            if future.done():  # cancelled by a recovery meanwhile
                return
            if reply["status"] != "OK":
                future.set_exception(reply["exception"])
            else:
                future.set_result(reply["result"])

        def start() -> None:
            for device, (fn, *args) in calls.items():
                asyncio.ensure_future(call(device, fn, *args))

        self.client.loop.asyncio_loop.call_soon_threadsafe(start)
        self._calls.extend(futures.values())
        return futures

    def call_all(
        self,
        calls: Mapping[str, tuple[Any, ...]],
        on_result: Callable[[str, Any], None] | None = None,
        after_send: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """``direct(device, *call)`` for every device of ``calls`` at once, waited for: the results, by device.

        On the devices' round channels when every one of them can be opened,
        else on Dask's comms (``direct_all`` and ``wait``). Either way a device
        lost meanwhile ends the wait (``wait``), and an error a device returns
        is raised: on channels the first to come back, at once (its peers in
        an all-reduce may be waiting for it); on Dask's comms the first in the
        order of ``calls``, once all came back. ``on_result(device, result)``
        runs on each result: on channels as it arrives, while the others are
        still on their way; on Dask's comms once all came back.
        ``after_send()`` runs once every call went out, while the devices work.
        """
        channels = self.channels
        if channels is None or not channels.reachable([self.addresses[d] for d in calls]):
            futures = self.direct_all(calls)
            if after_send is not None:
                after_send()
            self.wait(futures)
            results = {d: f.result() for d, f in futures.items()}
            for device, result in results.items() if on_result is not None else ():
                on_result(device, result)
            return results
        deadline = time.monotonic() + STEP_TIMEOUT_S

        def check() -> None:
            lost = self.lost()
            if lost:
                raise _DeviceLost(lost)
            if time.monotonic() > deadline:
                raise WorkerLostError(
                    f"devices {sorted(calls)} did not answer within {STEP_TIMEOUT_S:.0f} s while all stayed connected"
                )

        replies = channels.call_all(
            {d: (self.addresses[d], call_name(fn), tuple(args)) for d, (fn, *args) in calls.items()},
            check=check,
            poll_s=POLL_S,
            failed=lambda reply: reply["status"] != "OK",
            on_reply=None if on_result is None else lambda device, reply: on_result(device, reply["result"]),
            after_send=after_send,
        )
        for reply in replies.values():
            if reply["status"] != "OK":
                raise reply["exception"]
        return {d: reply["result"] for d, reply in replies.items()}

    def channel_endpoints(self, devices: list[str]) -> list[tuple[str, int, bytes]] | None:
        """Where each device's round channel listens and its key, for peers to send it pieces; None on Dask's comms."""
        addresses = [self.addresses[d] for d in devices]
        if self.channels is None or not self.channels.reachable(addresses):
            return None
        return [self.channels.endpoints[a] for a in addresses]

    def _open_channel(self, address: str) -> tuple[str, int, bytes]:
        """Have the device worker at ``address`` listen for its round channel: its host, port and key."""

        async def ask() -> dict[str, Any]:
            return await getattr(self.client.rpc(address), DIRECT_OP)(fn=OPEN_CHANNEL, args=to_serialize(Bundle(())))

        reply = self._waited(lambda: self.client.sync(ask))
        if reply["status"] != "OK":
            raise reply["exception"]
        host, port, key = reply["result"]
        return str(host), int(port), bytes(key)

    def generation(self, device: str) -> int:
        """How many times ``device`` was lost and brought back during the run (a call made before is void)."""
        return self._generation[device]

    def wait(
        self,
        futures: Mapping[str, Future | concurrent.futures.Future[Any]],
        *,
        timeout_s: float = STEP_TIMEOUT_S,
        first: bool = False,
    ) -> None:
        """Wait until every future is done (``first``: until one is); a device lost meanwhile ends the wait at once.

        Takes Dask futures (``submit``) or direct calls (``direct``), not both at once.
        """
        deadline = time.monotonic() + timeout_s
        pending = list(futures.values())
        when = "FIRST_COMPLETED" if first else "ALL_COMPLETED"
        calls = bool(pending) and isinstance(pending[0], concurrent.futures.Future)
        while True:
            try:
                if calls:
                    _, undone = concurrent.futures.wait(pending, timeout=POLL_S, return_when=when)  # type: ignore[arg-type]
                    if undone and (not first or len(undone) == len(pending)):
                        raise TimeoutError
                else:
                    wait(pending, timeout=POLL_S, return_when=when)
                return
            except TimeoutError as exc:
                # Dask's sync() keeps the error it raises in a cell its own frame holds: the traceback closes
                # a cycle through this frame, whose futures (a run's shards on the devices) then lived until
                # the next full garbage collection. Dropping the traceback frees them as soon as they are done.
                exc.__traceback__ = None
                lost = self.lost()
                if lost:
                    raise _DeviceLost(lost) from None
                if time.monotonic() > deadline:
                    raise WorkerLostError(
                        f"devices {sorted(futures)} did not answer within {timeout_s:.0f} s while all stayed "
                        "connected; see the Dask dashboard for paused or hung workers"
                    ) from None

    def forget(self, futures: Iterable[Future]) -> None:
        """Stop tracking finished futures, so what they hold on the devices can be released."""
        done = {f.key for f in futures}
        self._inflight = [f for f in self._inflight if f.key not in done]

    def gather(self, futures: Mapping[str, Future]) -> dict[str, Any]:
        """Results of done futures, by device."""
        results = self.client.gather(list(futures.values()))
        return dict(zip(futures, results, strict=True))

    def call(self, device: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on ``device``, waited for with loss detection; its result."""
        future = {device: self.submit(device, fn, *args)}
        self.wait(future)
        return self.gather(future)[device]

    def run(self, devices: Iterable[str], fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
        """``fn(*args, dask_worker=...)`` on each device's worker (``client.run``), by device."""
        devices = list(devices)
        # client.run connects to the addresses we give it and retries a dead one for the whole
        # connect timeout (30 s); ask the scheduler first, which knows of a death within milliseconds.
        lost = [d for d in self.lost() if d in devices]
        if lost:
            raise _DeviceLost(lost)
        by_address = {self.addresses[d]: d for d in devices}
        results = self._waited(lambda: self.client.run(fn, *args, workers=list(by_address)))
        return {by_address[a]: r for a, r in results.items()}

    def _waited(self, call: Callable[[], T]) -> T:
        """``call()``, a blocking call to devices, on a thread of its own while this one watches for losses.

        A device that dies meanwhile is found from the scheduler's view within
        ``POLL_S`` (``_DeviceLost``), not once Dask has retried connecting to
        its dead port for its whole connect timeout; the call is left to end on
        its own.
        """
        future = self._blocking.submit(call)
        self.wait({"": future})
        return future.result()

    # ------------------------------------------------------ faults, recovery ----

    def point(self, phase: str, at: int = 0) -> None:
        """Mark where the run is (recoveries name it) and fire the kills due here."""
        self._phase = phase
        if self.kills is None:
            return
        for kill in self.kills.due(phase, at):
            self._last_kill = time.perf_counter()
            address = self.addresses[kill.device]
            action = self.kills.fire(kill, self.client, address, local=self.kill_locally)
            self.kills_fired.append(
                {"device": kill.device, "phase": phase, "at": at, "t": self._now(), "action": action}
            )

    def prepare_all(self) -> None:
        """Set up every device that is not set up at its current worker."""
        todo = [d for d in self.devices if self._prepared.get(d) != self.addresses[d]]
        if todo:
            self.prepare(todo)
            self._prepared.update({d: self.addresses[d] for d in todo})

    def attempt(self, phase: str, at: int, body: Callable[[], T], *, prepare: bool = True) -> T:
        """Run ``body``; when a device is lost during it, bring the device back and run ``body`` again.

        ``phase`` and ``at`` (round, epoch ...) name the step in recoveries;
        ``prepare=False`` for steps after which the devices' state no longer
        matters (stopping the monitors): a lost device is then only waited for.
        """
        pending: _Pending | None = None
        for attempt in range(MAX_RECOVERIES + 1):
            start = time.perf_counter()
            self._inflight = []
            self._calls = []
            self._phase = phase
            try:
                if prepare:
                    self.prepare_all()
                if pending is not None:
                    self._record(pending)
                    pending = None
                start = time.perf_counter()
                result = body()
                self.last_attempt_s = time.perf_counter() - start
                return result
            except Exception as exc:
                lost, detected = self._confirm_lost(exc)
                if not lost:
                    raise
                if attempt == MAX_RECOVERIES:
                    raise WorkerLostError(
                        f"devices kept dying: {MAX_RECOVERIES} recoveries in {phase} {at}, last {lost} after {exc!r}"
                    ) from exc
                if pending is not None:
                    # Lost again while being prepared: that recovery ends here, a new one starts.
                    self._record(pending, resumed=False)
                since = self._last_kill if self._last_kill > start else start
                pending = _Pending(lost, self._phase, at, _one_line(exc), start, detected, since=since)
                self._await_return(lost, pending)
                if not prepare:
                    self._record(pending)
                    pending = None
        raise AssertionError("unreachable")

    def _confirm_lost(self, exc: BaseException) -> tuple[list[str], float]:
        """Devices lost, by the scheduler's view, and when the first was seen lost.

        Waited for briefly when the error says a connection broke; once one
        device is found lost, the others that died with it (a shared power
        supply) are looked for a moment longer, so they recover together
        rather than one after the other.
        """
        if isinstance(exc, _DeviceLost):
            lost = sorted(exc.devices)
        else:
            named = [exc.device] if isinstance(exc, StateMissingError) and exc.device in self.devices else []
            # A device that reports no shard has restarted, even if its new worker got the old address back.
            self._restarted.update(named)
            looks_lost = named or isinstance(exc, OSError | KilledWorker | CancelledError)
            deadline = time.monotonic() + (CONFIRM_S if looks_lost else 0.0)
            while True:
                lost = sorted({*self.lost(), *named})
                if lost or time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
        detected = time.perf_counter()
        if lost:
            # A device whose round channel its end closed is dead too, whenever the scheduler says so:
            # wait for that (up to CONFIRM_S), so that devices lost together recover together.
            now = time.monotonic()
            settle, confirm = now + SETTLE_S, now + CONFIRM_S
            while len(lost) < len(self.devices):
                dying = set(self._closed_channels()) - set(lost)
                if time.monotonic() >= (confirm if dying else settle):
                    break
                time.sleep(0.05)
                lost = sorted({*lost, *self.lost()})
        return lost, detected

    def _closed_channels(self) -> list[str]:
        """Devices whose round channel was closed from their end (their process died), by their current address."""
        if self.channels is None:
            return []
        closed = set(self.channels.closed_by_peer())
        return [d for d in self.devices if self.addresses[d] in closed]

    def _await_return(self, lost: list[str], pending: _Pending) -> None:
        """Wait until every lost device runs again (at a new address); cancel what the failed attempt left."""
        if self._inflight:
            self.client.cancel(self._inflight, force=True)
            self._inflight = []
        for call in self._calls:
            call.cancel()
        self._calls = []
        start = time.monotonic()
        deadline = start + self.restart_wait_s
        revived: set[str] = set()

        def is_back(device: str, view: dict[str, str]) -> bool:
            # At a new address, or known to have restarted (a new worker may get the old address back).
            return device in view and (view[device] != self.addresses[device] or device in self._restarted)

        while True:
            view = self._view()
            back = {d: view[d] for d in lost if is_back(d, view)}
            if len(back) == len(lost):
                break
            if self._revive_late(sorted(set(lost) - set(back)), time.monotonic() - start, revived, is_back):
                # A device started again needs a start of its own, however long its revival took.
                deadline = max(deadline, time.monotonic() + self.restart_wait_s / 2)
            if time.monotonic() > deadline:
                missing = sorted(set(lost) - set(back))
                seen = {str(w["name"]): (a, w.get("status")) for a, w in self._workers().items()}
                raise WorkerLostError(
                    f"device {', '.join(missing)} was lost during {pending.phase} {pending.at} and did not come "
                    f"back within restart_wait_s={self.restart_wait_s:.0f} s ({pending.error}); last known at "
                    f"{', '.join(self.addresses[d] for d in missing)}; the scheduler has {seen}"
                )
            time.sleep(0.1)
        self.addresses.update(back)
        for d in lost:
            self._prepared.pop(d, None)  # its new worker holds nothing of the run
            self._restarted.discard(d)
            self._generation[d] += 1
        pending.back = time.perf_counter()

    def _revive_late(
        self, missing: list[str], waited: float, revived: set[str], is_back: Callable[[str, dict[str, str]], bool]
    ) -> bool:
        """Ask the cluster to start missing devices again, once each, when their own restart is late.

        A device that came back meanwhile is left alone (reviving one closes the
        worker its nanny was starting). True when a device was started again.
        """
        if self.revive is None or waited <= min(REVIVE_AFTER_S, self.restart_wait_s / 2):
            return False
        started = False
        for device in missing:
            if device in revived or is_back(device, self._view()):
                continue
            revived.add(device)
            if self.revive(device):
                started = True
                self.log(f"edgelab: device {device} was not back after {waited:.0f} s; started it again")
        return started

    def _record(self, pending: _Pending, *, resumed: bool = True) -> None:
        end = time.perf_counter()
        for device in pending.devices:
            row = {
                "device": device,
                "phase": pending.phase,
                "at": pending.at,
                "error": pending.error,
                "t": pending.detected - self._t0,
                # From the kill, when one was fired: a kill while the devices were being prepared must
                # not count their preparation (a model's warm-up) as the time it took to notice the loss.
                "detect_s": pending.detected - pending.since,
                "back_s": pending.back - pending.detected,
                "time_lost_s": end - pending.started,
                "t_resumed": end - self._t0,
                "resumed": resumed,
            }
            self.recoveries.append(row)
            then = f"{pending.phase} run again" if resumed else "lost again while being prepared"
            self.log(
                f"edgelab: device {device} lost during {pending.phase} {pending.at}; back after "
                f"{row['back_s']:.1f} s, {row['time_lost_s']:.1f} s lost, {then}"
            )

    def _now(self) -> float:
        return time.perf_counter() - self._t0


def _one_line(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"[:300]


class _DeviceLost(Exception):
    """Raised inside a step when the scheduler no longer has a device's worker."""

    def __init__(self, devices: list[str]) -> None:
        super().__init__(f"devices lost: {devices}")
        self.devices = devices

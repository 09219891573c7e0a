"""Get a Dask cluster whose workers are devices: emulated here, or real ones by address.

``connect(n_devices)`` starts a ``LocalCluster`` with one worker *process* per
emulated device: one thread each, TensorFlow capped to one intra-op thread (set
in the worker's environment before it starts, since TensorFlow cannot change it
after its first op), and Dask resources naming the device and its tier so work
is pinned by name, never by address (a restarted worker gets a new address).

Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_`` in every worker it spawns, and
any value of it turns off glibc's adaptive mmap threshold: TensorFlow then maps
and unmaps each large activation buffer every step, which halved LeNet-CNN
training throughput on this host (1,820 -> 1,040 samples/s): 50x the minor
page faults, the extra time all kernel time, user time unchanged. Emulated
device time is measured CPU time, so the devices start without it.

Dask's memory limit is only a safety net: TensorFlow alone holds ~620 MB of RSS
per process and Dask pauses a worker at 80 % of its limit, after which tasks
wait forever, so device workers never pause (Dask still restarts one at 95 %).
The device's own memory budget is enforced by ``edgelab.training.data_parallel``
against the working set measured above the framework baseline.

TensorFlow leaves its oneDNN kernels off on x86 CPUs without AVX-512's
deep-learning extensions (this host's among them), yet on this host they
halve the CPU time of a convolutional step at one thread: LeNet-CNN 41 -> 21
ms, ResNet-32 at batch 32 555 -> 257 ms, deterministic run to run (the
MLP's dense step is as fast either way). Device workers start with
``TF_ENABLE_ONEDNN_OPTS=1`` unless the user's environment says otherwise, and
the cluster records what its workers run (``DeviceCluster.info``), with
oneDNN's instruction-set cap (``ONEDNN_MAX_CPU_ISA``, unset: the CPU's best):
AVX-512 kernels round differently from AVX2's.

Device workers are forked by default (``START_METHODS``): one fork server
imports TensorFlow and edgelab once, and every device worker, restarts
included, is a copy of it. Spawned, ten workers each import TensorFlow on two
host cores, and the cluster took half a minute to start. The notebooks start
the fork server first thing (``start_device_launcher``), so that its import
overlaps the kernel's own.

Dask's own warnings and errors go to a file (``edgelab.cluster.log``), not
to the notebook: edgelab reports lost devices and recoveries itself.

``connect(..., scheduler_address=...)`` (or ``EDGELAB_SCHEDULER``) attaches to
a running scheduler instead, e.g. real Raspberry Pis running ``dask worker``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import multiprocessing.forkserver
import os
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

import dask
from distributed import Client, LocalCluster
from distributed.utils import get_mp_context

from edgelab.cluster import device_scheduling
from edgelab.cluster import log as cluster_log
from edgelab.common import checks
from edgelab.common.environ import environment
from edgelab.common.errors import ClusterError, ConfigError
from edgelab.emulation.profiles import DeviceProfile, get_profile

# Generous: the device budget is accounted separately (see module docstring).
DEFAULT_WORKER_MEMORY_LIMIT = "2GiB"
TIER = "edge"
# Set by Dask's nanny before it spawns a worker; None makes the nanny leave it unset.
MALLOC_TRIM = "MALLOC_TRIM_THRESHOLD_"
# TensorFlow's switch for its oneDNN kernels (see module docstring).
ONEDNN = "TF_ENABLE_ONEDNN_OPTS"
# oneDNN's cap on the instruction set it uses: kernels of another set add in another order
# (the test suite holds it at AVX2, so that its checked outputs hold on any x86-64 host).
ONEDNN_ISA = "ONEDNN_MAX_CPU_ISA"
_DEVICE_WORKER_CONFIG = {
    f"distributed.nanny.pre-spawn-environ.{MALLOC_TRIM}": None,
    # A paused worker leaves its tasks waiting forever; the device budget is
    # checked by edgelab.training.data_parallel, and Dask still restarts a worker at 95 %.
    "distributed.worker.memory.pause": False,
    # A device holds its shard and model, nothing Dask could spill to disk: spilling only
    # logs "Unmanaged memory use is high" for every full-data device of a paper-sized run.
    "distributed.worker.memory.target": False,
    "distributed.worker.memory.spill": False,
    # Dask's profiler callback walks the task threads' stacks each 10 ms, holding the GIL: a round of
    # 2-5 ms stalls on it, and its CPU lands in the round's measured compute. Sampled each 100 ms the
    # dashboard still has a profile; 2-device rounds took 7% less host CPU and 6% less mean wall
    # (4 interleaved pairs of runs, 3 of them faster).
    "distributed.worker.profile.interval": "100ms",
    # How often the worker checks its event loop for blocking (every 20 ms by default).
    "distributed.admin.tick.interval": "100ms",
    # An idle 10-device cluster spent 155 ms of CPU a second, most of it in the client's event loop
    # where the nannies' system monitors (psutil's CPU, disk and network counters, each 0.5 s) and
    # memory monitors (each 0.1 s) run; with these, 107 ms. 10-device rounds took 0.3-0.5 ms less
    # (3 alternating pairs of clusters). The dashboard's worker plots move each 2 s; a worker above
    # its memory limit is still restarted, within half a second.
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "500ms",
}


#: How device worker processes start: ``"forkserver"``, forked from one process that has imported
#: TensorFlow and edgelab (seconds for ten devices); ``"spawn"``, each a new interpreter (Dask's default).
START_METHODS = ("forkserver", "spawn")
# What the fork server imports once for every device worker it forks.
_FORKSERVER_PRELOAD = ["distributed", "tensorflow", "keras", "edgelab.runtime.plugin", "edgelab.pipeline.worker"]


def _use_start_method(method: str, env: dict[str, str]) -> None:
    """Make Dask's nannies in this process start workers by ``method``; start the fork server now.

    The setting is Dask's own (``distributed.worker.multiprocessing-method``), set
    for this process so that a device's restarts start the same way. The fork
    server starts with the device workers' environment (TensorFlow's thread caps
    and log level), which every worker then inherits; a fork server already
    running (started earlier in this process) is used as it is.
    """
    dask.config.set({"distributed.worker.multiprocessing-method": method})
    if method != "forkserver":
        return
    get_mp_context()  # Dask sets its own preload list once; ours, set after it, is the one used
    multiprocessing.get_context("forkserver").set_forkserver_preload(_FORKSERVER_PRELOAD)
    with environment(env):
        multiprocessing.forkserver.ensure_running()


def start_device_launcher(scheduler_address: str | None = None) -> None:
    """Start the fork server emulated devices are forked from now, and return at once.

    The fork server spends seconds of one core importing TensorFlow. Started
    at the top of a notebook, it does so on the other core while the kernel
    imports its own, and the cluster started later forks its devices at once
    (two devices: 8.5 s to start cold, 0.6 s after this). Nothing starts when
    the devices are reached by address (``scheduler_address`` or
    ``EDGELAB_SCHEDULER``).
    """
    if scheduler_address or os.environ.get("EDGELAB_SCHEDULER"):
        return
    _use_start_method("forkserver", _device_env())


def _device_env() -> dict[str, str]:
    """The environment every emulated device worker starts with (the fork server's too)."""
    from edgelab.common.paths import cache_dir

    return {**_worker_env(str(cache_dir() / "keras")), device_scheduling.ENV: device_scheduling.chosen()}


def worker_config_environ() -> dict[str, str]:
    """The device workers' Dask settings as ``DASK_*`` variables, for workers started as programs (shaped hosts).

    All but the nanny's environment for its worker, whose key a variable's name cannot spell
    (Dask lowercases it): the shaped hosts set that one whole.
    """
    return {
        "DASK_" + key.upper().replace(".", "__").replace("-", "_"): str(value)
        for key, value in _DEVICE_WORKER_CONFIG.items()
        if not key.startswith("distributed.nanny.pre-spawn-environ.")
    }


def device_names(profile: DeviceProfile, n_devices: int) -> list[str]:
    """Names of the first ``n_devices`` emulated devices: ``pi3b-0``, ``pi3b-1`` ..."""
    return [f"{profile.name}-{i}" for i in range(n_devices)]


def device_resource(name: str) -> str:
    """The Dask resource that pins a task to the device called ``name``."""
    return f"device-{name}"


def tier_resource(tier: str) -> str:
    """The Dask resource that pins a task to any device of ``tier``."""
    return f"tier-{tier}"


def scheduler_workers(client: Client) -> dict[str, Any]:
    """Every worker the scheduler knows now, by address, asked of the scheduler itself.

    ``Client.scheduler_info()`` refreshes a cached copy and returns it, and the
    client's own periodic refresh (which lists no workers) can overwrite that copy
    in between: a caller then sees no worker at all, and took every device for lost.
    """
    return dict(client.sync(client.scheduler.identity, n_workers=-1)["workers"])


def _worker_env(repo_cache: str) -> dict[str, str]:
    return {
        "TF_NUM_INTRAOP_THREADS": "1",
        "TF_NUM_INTEROP_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "CUDA_VISIBLE_DEVICES": "",
        "KERAS_BACKEND": "tensorflow",
        ONEDNN: os.environ.get(ONEDNN, "1"),
        # import keras writes to ~/.keras otherwise
        "KERAS_HOME": repo_cache,
    }


@dataclass
class DeviceCluster:
    """A Dask client plus the devices it can use."""

    client: Client
    devices: list[str]
    profile: DeviceProfile
    emulated: bool
    local_cluster: LocalCluster | None = None
    info: dict[str, Any] = field(default_factory=dict)
    #: The folder the devices we started keep their temporary files in, removed when the cluster closes.
    scratch: tempfile.TemporaryDirectory[str] | None = None

    @property
    def dashboard_link(self) -> str:
        """Link to the Dask dashboard."""
        return str(self.client.dashboard_link)

    def revive(self, device: str, *, timeout_s: float = 30.0) -> bool:
        """Start a device's worker again when its nanny did not; ``False`` when we cannot or need not.

        The emulated cluster's supervisor, as systemd with ``Restart=always`` is
        on a real board: a nanny whose worker was killed again just after a
        restart may never bring it back (a race in Dask's nanny, cf.
        dask/distributed#7312). The stuck nanny is closed and a new one started
        from the device's spec (same name, resources, environment). Only for a
        cluster we started; a device removed from the spec stays gone, and a
        nanny whose worker process is alive is only slow (a loaded host): it is
        left to finish, since a second worker of the same name would be refused.
        """
        cluster = self.local_cluster
        if cluster is None or device not in cluster.worker_spec:
            return False
        nanny = cluster.workers.get(device)
        if nanny is not None and getattr(nanny, "is_alive", lambda: False)():
            return False
        stuck = cluster.workers.pop(device, None)

        async def replace() -> None:
            if stuck is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(stuck.close(), timeout_s)
            # The nanny reads the worker config when it is made (see _start_local).
            with dask.config.set(_DEVICE_WORKER_CONFIG):
                # SpecCluster's own step that starts every worker its spec lists but that does not run.
                await cluster._correct_state()

        try:
            cluster.sync(replace)
        except Exception as exc:  # e.g. the device came back on its own meanwhile: its name is taken
            warnings.warn(f"device {device} could not be started again: {exc}", RuntimeWarning, stacklevel=2)
            return False
        return True

    def close(self) -> None:
        """Close the client, and the cluster if we started it."""
        self.client.close()
        if self.local_cluster is not None:
            self.local_cluster.close()
        if self.scratch is not None:
            self.scratch.cleanup()

    def __enter__(self) -> DeviceCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalWorkers(TypedDict, total=False):
    """How the emulated device workers start on this host: keywords of ``connect`` (see its parameters)."""

    worker_memory_limit: str
    start_method: str


def connect(
    n_devices: int,
    *,
    profile: str = "pi3b",
    scheduler_address: str | None = None,
    dashboard_address: str = "127.0.0.1:8787",
    timeout_s: float = 120.0,
    security: Any = None,
    plugins: Sequence[Any] = (),
    **workers: Unpack[LocalWorkers],
) -> DeviceCluster:
    """Start an emulated device cluster, or attach to a running scheduler.

    Parameters
    ----------
    n_devices
        Devices needed (one worker each).
    profile
        Device profile of emulated workers; attached clusters run ``native``.
    scheduler_address
        Address of a running scheduler (``tcp://host:8786``); falls back to the
        ``EDGELAB_SCHEDULER`` environment variable, then to a new local cluster.
    dashboard_address
        Where the local dashboard listens: loopback by default; ``"127.0.0.1:0"`` picks a free port,
        ``":8787"`` would listen on every interface (your explicit choice).
    timeout_s
        How long to wait for the scheduler and the workers.
    security
        A ``distributed.Security`` for a ``tls://`` scheduler (e.g. ``ShapedHosts.security()``); None takes
        Dask's configuration (the ``DASK_DISTRIBUTED__COMM__TLS__*`` variables).
    plugins
        Worker plugins every device runs (each registered under its ``name``): the device runtime, which
        ``edgelab.runtime.devices.connect`` passes. This layer knows nothing of it.
    **workers
        How emulated device workers start (``LocalWorkers``):

        worker_memory_limit
            Dask's per-worker limit (a safety net, not the device budget; default ``DEFAULT_WORKER_MEMORY_LIMIT``).
        start_method
            How they start (``START_METHODS``): ``"forkserver"`` (the default) forks each from one process
            that imported TensorFlow once; ``"spawn"`` starts each afresh.
    """
    checks.keywords("connect", workers, LocalWorkers)
    start_method = workers.get("start_method", "forkserver")
    checks.integer("n_devices", n_devices, at_least=1)
    if start_method not in START_METHODS:
        raise ConfigError("start_method", start_method, f"one of {', '.join(START_METHODS)}")
    address = scheduler_address or os.environ.get("EDGELAB_SCHEDULER") or None
    if address:
        return _attach(address, n_devices, timeout_s, security, plugins)
    device_profile = get_profile(profile)
    memory_limit = workers.get("worker_memory_limit", DEFAULT_WORKER_MEMORY_LIMIT)
    return _start_local(n_devices, device_profile, memory_limit, dashboard_address, timeout_s, start_method, plugins)


def _start_local(
    n_devices: int,
    profile: DeviceProfile,
    worker_memory_limit: str,
    dashboard_address: str,
    timeout_s: float,
    start_method: str,
    plugins: Sequence[Any],
) -> DeviceCluster:
    workers = {name: WorkerSpec(TIER) for name in device_names(profile, n_devices)}
    client, cluster, info, scratch = start_workers(
        workers, worker_memory_limit, dashboard_address, timeout_s, start_method, plugins
    )
    return DeviceCluster(client, list(workers), profile, True, cluster, info, scratch)


@dataclass(frozen=True)
class WorkerSpec:
    """One emulated device's worker: its tier (a Dask resource) and how many threads its TensorFlow may use."""

    tier: str
    tf_threads: int = 1


def start_workers(
    workers: dict[str, WorkerSpec],
    worker_memory_limit: str,
    dashboard_address: str,
    timeout_s: float,
    start_method: str,
    plugins: Sequence[Any] = (),
) -> tuple[Client, LocalCluster, dict[str, Any], tempfile.TemporaryDirectory[str]]:
    """A local cluster with one single-threaded worker process per device, named and resourced as ``workers`` say.

    Every worker carries the resources ``device-<name>`` and ``tier-<tier>``,
    so work is pinned to a device or a tier by resource, never by address.
    Returned with the folder the workers keep their temporary files in, for
    the caller to remove when it closes the cluster.
    """
    env = _device_env()
    # A device worker is a multiprocessing child: it ends without running atexit, so TensorFlow never removes
    # the source files its autograph wrote (a test run left a dozen in /tmp, and every killed device adds its own).
    scratch = tempfile.TemporaryDirectory(prefix="edgelab-devices-", ignore_cleanup_errors=True)
    _use_start_method(start_method, env)
    log = cluster_log.log_path()
    cluster_log.to_file(log)  # the scheduler's and the nannies' records: they run in this process
    # The nanny reads these when it is made, and keeps them for the worker's restarts.
    with dask.config.set(_DEVICE_WORKER_CONFIG):
        cluster = LocalCluster(
            n_workers=0,
            processes=True,
            threads_per_worker=1,
            dashboard_address=dashboard_address,
            memory_limit=worker_memory_limit,
            silence_logs=cluster_log.STDERR_LEVEL,  # the workers get it too, through new_spec's options
        )
        for name, worker in workers.items():
            threads = str(worker.tf_threads)
            spec = {"cls": cluster.new_spec["cls"], "options": dict(cluster.new_spec["options"])}
            spec["options"].update(
                name=name,
                nthreads=1,
                memory_limit=worker_memory_limit,
                resources={device_resource(name): 1, tier_resource(worker.tier): 1},
                env={**env, "TF_NUM_INTRAOP_THREADS": threads, "OMP_NUM_THREADS": threads, "TMPDIR": scratch.name},
            )
            cluster.worker_spec[name] = spec
        cluster.scale(len(workers))
        client = Client(cluster)
        try:
            client.wait_for_workers(len(workers), timeout=timeout_s)
            for plugin in plugins:
                client.register_plugin(plugin, name=plugin.name)
            client.register_plugin(cluster_log.LogToFile(str(log)), name=cluster_log.PLUGIN_NAME)
        except Exception as exc:
            client.close()
            cluster.close()
            scratch.cleanup()
            raise ClusterError(f"the emulated cluster of {len(workers)} devices did not start: {exc}") from exc
    trim = _warn_if_malloc_trimmed(client)
    info = {
        "workers": len(workers),
        "memory_limit": worker_memory_limit,
        "threads_per_worker": 1,
        "start_method": start_method,
        "device_scheduling": ",".join(sorted(set(client.run(device_scheduling.current).values()))),
        "dask_log": str(log),
        MALLOC_TRIM: trim,
        ONEDNN: workers_environ(client, ONEDNN),
        ONEDNN_ISA: workers_environ(client, ONEDNN_ISA),
    }
    return client, cluster, info, scratch


def start_environ(name: str) -> str | None:
    """``name`` in the environment this process started with (what glibc read), None when unset."""
    try:
        with open("/proc/self/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:  # not Linux: the current environment is the best we have
        return os.environ.get(name)
    prefix = name.encode() + b"="
    return next((e[len(prefix) :].decode() for e in entries if e.startswith(prefix)), None)


def workers_environ(client: Client, name: str) -> str | None:
    """``name`` in the environment every worker started with: one value, or the distinct ones joined by commas."""
    values = set(client.run(start_environ, name).values())
    return next(iter(values)) if len(values) == 1 else ",".join(sorted(map(str, values)))


def _warn_if_malloc_trimmed(client: Client) -> str | None:
    """The workers' ``MALLOC_TRIM_THRESHOLD_`` at start (None when unset); warn when it is set."""
    trim = workers_environ(client, MALLOC_TRIM)
    if trim is not None:
        warnings.warn(
            # Set by a remote nanny's config, or inherited from the environment a local cluster started in.
            f"device workers started with {MALLOC_TRIM}={trim}: TensorFlow then maps and unmaps its buffers "
            "every step, which inflates measured CPU time; start the workers without it (see cluster/README.md)",
            RuntimeWarning,
            stacklevel=4,
        )
    return trim


def _attach(
    address: str, n_devices: int, timeout_s: float, security: Any = None, plugins: Sequence[Any] = ()
) -> DeviceCluster:
    failure = None
    try:
        # The whole timeout: a scheduler just started (shaped hosts, a test) may take long to listen on a busy host.
        client = Client(address, timeout=timeout_s, security=security)
    except (OSError, TimeoutError, TypeError) as exc:  # TypeError: tls:// with no certificate configured
        if isinstance(exc, TypeError) and not address.startswith("tls://"):
            raise
        hint = (
            "; a tls:// scheduler accepts only clients holding a certificate from its CA "
            "(the DASK_DISTRIBUTED__COMM__TLS__* variables, see cluster/README.md)"
            if address.startswith("tls://")
            else ""
        )
        failure = (
            f"scheduler_address={address!r} is unreachable ({exc}){hint}; allowed: the address of a "
            "running Dask scheduler, or none to start an emulated cluster"
        )
    if failure is not None:
        # The half-made Client is garbage now; collect it here. Left to a later collection, its __del__ can
        # run inside the next Client's loop start-up and deadlock there (seen in CI: LoopRunner.stop under
        # LoopRunner.start). Hence no exception chain either: it would keep the half-made Client alive.
        gc.collect()
        raise ClusterError(failure)
    try:
        client.wait_for_workers(n_devices, timeout=timeout_s)
    except TimeoutError as exc:
        have = len(scheduler_workers(client))
        client.close()
        raise ClusterError(f"n_devices={n_devices} but the scheduler at {address} has only {have} workers") from exc
    workers = scheduler_workers(client).values()
    names = sorted(str(w["name"]) for w in workers)[:n_devices]
    # Real workers may not carry our resources; give each one that names it.
    client.run(_add_device_resource)
    for plugin in plugins:
        client.register_plugin(plugin, name=plugin.name)
    info = {
        "address": address,
        MALLOC_TRIM: _warn_if_malloc_trimmed(client),
        ONEDNN: workers_environ(client, ONEDNN),
        ONEDNN_ISA: workers_environ(client, ONEDNN_ISA),
    }
    return DeviceCluster(client, names, get_profile("native"), False, None, info)


async def _add_device_resource(dask_worker: Any) -> None:
    resource = device_resource(str(dask_worker.name))
    if resource not in dask_worker.state.total_resources:
        await dask_worker.set_resources(**{resource: 1})

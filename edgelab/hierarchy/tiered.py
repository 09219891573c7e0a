"""Zhang 2018's tiered workflow on a running hierarchy: a coarse answer at an end device, a fine one above it.

A job's images are cut into tasks (the report: 50 images each). Tasks go to
the end devices in turn (task i to end device i mod N_end), and each end
device answers with its network (MobileNet, 20 coarse labels). Then, by
scheme (``edgelab.emulation.schemes.SCHEMES``):

* ``End``: that is all;
* ``End-Cloud``: the task's images go on to a cloud device (in turn, when
  there are several) for the fine answer;
* ``End-Edge``: to an edge device, in turn;
* ``Mapping``: end device j sends to edge device j // n_map while edges last,
  the rest to the cloud (eq5); ``n_map`` is the report's 1 unless given
  (eq4 computes it from measured times: ``edgelab.emulation.schemes.n_map``).

Every stage is a real inference on the device it is pinned to (by the
device's resource), and the images go from the end device's worker to the
upper device's worker over Dask's worker-to-worker comms: real bytes on real
sockets. ``run_scheme`` records each stage: device, tier, CPU and wall
seconds of the inference, the bytes it received, and its answers. The time
the job would take on the hierarchy (the report's fig3) is composed from
these records, the tiers' links and a device model per tier; the records
alone hold no added latency.

Each tier runs one network, given by name (``edgelab.models.tiers``), as a
Keras model, or as a function that builds one; a device builds or receives
it once per run.

Paper: Zongpu Zhang, "Optimization of Deep Learning Applications in Highly
Heterogeneous Distributed System", SJTU EE447 report, 2018 (sections 3.3-3.4).
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

import numpy as np
import pandas as pd
from distributed import get_worker, wait

from edgelab.cluster.device_cluster import DeviceCluster, device_resource, scheduler_workers
from edgelab.common import checks
from edgelab.common.errors import ClusterError, ConfigError
from edgelab.common.seeding import seeded
from edgelab.emulation.schemes import SCHEMES
from edgelab.emulation.tiers import HierarchySpec
from edgelab.models.tiers import TIER_NETWORK_NAMES, TIER_NETWORKS, build_tier_network

#: The report's task size: images (or answers) per communication.
TASK_SIZE = 50
# Networks a device holds, by (deployment key, tier): built once per deployment, dropped by its release().
_NETWORKS: dict[tuple[str, str], Any] = {}

Network = str | Callable[[], Any] | Any


@dataclass
class SchemeRun:
    """What one job did: a row per stage (task, stage, device, tier, cpu_s, wall_s, bytes_in), and the answers."""

    scheme: str
    hierarchy: dict[str, Any]
    stages: pd.DataFrame
    coarse: np.ndarray  # (n_images,) the end devices' answers
    fine: np.ndarray | None  # (n_images,) the upper tier's answers; None under End
    host_wall_s: float = 0.0


def assignment(scheme: str, spec: HierarchySpec, n_map: int | None = None) -> list[str | None]:
    """Where each end device sends its tasks' second stage under ``scheme``, by tier: ``"edge"``, ``"cloud"`` or None.

    The device is chosen in ``run_scheme``: edges in turn by task, the cloud in
    turn; under Mapping, end device j goes to edge j // n_map while edges last.
    """
    if scheme not in SCHEMES:
        raise ConfigError("scheme", scheme, f"one of {', '.join(SCHEMES)}")
    n_end, n_edge, n_cloud = spec.count("end"), spec.count("edge"), spec.count("cloud")
    if scheme == "End":
        return [None] * n_end
    if scheme == "End-Cloud":
        _need(scheme, "cloud", n_cloud)
        return ["cloud"] * n_end
    if scheme == "End-Edge":
        _need(scheme, "edge", n_edge)
        return ["edge"] * n_end
    _need(scheme, "edge", n_edge)
    checks.integer("n_map", n_map, at_least=1, none="one end device per edge device")
    per_edge = n_map or 1
    targets: list[str | None] = ["edge" if j < n_edge * per_edge else "cloud" for j in range(n_end)]
    if "cloud" in targets:
        _need(scheme, "cloud", n_cloud)
    return targets


@dataclass
class Deployment:
    """Each tier's network built on its devices, ready for any number of jobs; ``release`` frees them.

    Use it as a context manager, or call ``release`` when done.
    """

    cluster: DeviceCluster
    key: str
    networks: dict[str, str]  # tier -> the network's name (a Keras model's own name when not built in)
    devices: dict[str, list[str]]  # tier -> the devices that hold its network
    addresses: dict[str, str]  # device -> the worker that built it (tasks' images are put there)
    # How each tier's network was given, its seed and warm-up sizes: what a restarted device builds again.
    sources: dict[str, Network] = field(default_factory=dict, repr=False)
    seed: int = 0
    batch_sizes: tuple[int, ...] = (1,)

    def restore(self, devices: Iterable[str], *, timeout_s: float = 120.0) -> list[str]:
        """Start again each of ``devices`` whose worker is gone, and build its tier's network there; return them.

        For devices that went down for good (``edgelab.cluster.faults.shut_down``): on
        an emulated cluster a new worker is started from the device's spec
        (``DeviceCluster.revive``); on a real one the device's own supervisor
        must bring it back within ``timeout_s``.
        """
        wanted = list(devices)
        tier_of = {d: t for t, names in self.devices.items() for d in names}
        unknown = [d for d in wanted if d not in tier_of]
        if unknown:
            raise ConfigError("devices", unknown, f"devices of this deployment ({sorted(tier_of)})")
        client = self.cluster.client
        running = {str(w["name"]) for w in scheduler_workers(client).values()}
        down = [d for d in wanted if d not in running]
        if not down:
            return []
        deadline = time.monotonic() + timeout_s
        asked = 0.0
        while missing := [d for d in down if d not in {str(w["name"]) for w in scheduler_workers(client).values()}]:
            if time.monotonic() > deadline:
                raise ClusterError(f"devices {missing} did not come back within {timeout_s:.0f} s")
            if time.monotonic() - asked > 1.0:
                # Asked again each second: a revive declines while the old worker's exit is not yet reported
                # (with the fork server, that news comes through it, and a loaded host delays it).
                for device in missing:
                    self.cluster.revive(device)
                asked = time.monotonic()
            time.sleep(0.05)
        loads = [
            client.submit(
                _load,
                self.key,
                tier_of[d],
                self.sources[tier_of[d]],
                self.seed,
                self.batch_sizes,
                resources={device_resource(d): 1},
                pure=False,
            )
            for d in down
        ]
        for device, loaded in zip(down, client.gather(loads), strict=True):
            self.addresses[device] = loaded[2]
        return down

    def release(self) -> None:
        """Drop the networks from every device."""
        self.cluster.client.run(_release, self.key)

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def check_networks(networks: Mapping[str, Network] | None) -> dict[str, Network]:
    """Each tier's network: the report's (``TIER_NETWORKS``) unless given by name, as a Keras model or a builder."""
    chosen = {**TIER_NETWORKS, **(networks or {})}
    for tier, network in chosen.items():
        if tier not in ("end", "edge", "cloud"):
            raise ConfigError("networks", tier, "a mapping from tiers (end, edge, cloud) to networks")
        allowed = f"one of {', '.join(TIER_NETWORK_NAMES)}, a Keras model or a function that builds one"
        if isinstance(network, str) and network not in TIER_NETWORK_NAMES:
            raise ConfigError(f"networks[{tier!r}]", network, allowed)
        if not isinstance(network, str) and not callable(network):  # a Keras model is callable too
            raise ConfigError(f"networks[{tier!r}]", type(network).__name__, allowed)
    return chosen


def deploy(
    cluster: DeviceCluster,
    spec: HierarchySpec,
    networks: Mapping[str, Network] | None = None,
    *,
    tiers: tuple[str, ...] = ("end", "edge", "cloud"),
    seed: int = 0,
    batch_sizes: tuple[int, ...] = (1,),
) -> Deployment:
    """Build each of ``tiers``' network on every device of that tier in ``spec``, once, before any task is timed.

    ``networks`` maps a tier to its network (default: the report's); each
    device builds it from ``seed``, so every device of a tier holds the same
    weights. Each network runs once at each of ``batch_sizes`` (the jobs'
    task sizes), so no task pays for tracing it.
    """
    chosen = check_networks(networks)
    if not batch_sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in batch_sizes):
        raise ConfigError("batch_sizes", batch_sizes, "task sizes, integers >= 1")
    _check_cluster(cluster, spec)
    key = uuid.uuid4().hex[:12]
    devices = {t: [d for d, tier in spec.devices().items() if tier == t] for t in tiers}
    loads = [
        cluster.client.submit(
            _load, key, tier, chosen[tier], seed, batch_sizes, resources={device_resource(d): 1}, pure=False
        )
        for tier in tiers
        for d in devices[tier]
    ]
    loaded = [f.result() for f in loads]
    names = {tier: name for tier, name, _ in loaded}
    addresses = {d: address for (_, _, address), d in zip(loaded, [d for t in tiers for d in devices[t]], strict=True)}
    sources = {t: chosen[t] for t in tiers}
    return Deployment(
        cluster, key, {t: names[t] for t in tiers if devices[t]}, devices, addresses, sources, seed, batch_sizes
    )


class Networks(TypedDict, total=False):
    """Where a job's networks come from: keywords of ``run_scheme``.

    ``deployment``: networks built once for many jobs (``deploy``); without it, networks built for this job
    alone from ``networks`` (a tier's network; default: the report's) and ``seed`` (default 0).
    """

    networks: Mapping[str, Network] | None
    seed: int
    deployment: Deployment | None


def run_scheme(
    cluster: DeviceCluster,
    spec: HierarchySpec,
    scheme: str,
    images: np.ndarray,
    *,
    task_size: int = TASK_SIZE,
    n_map: int | None = None,
    **source: Unpack[Networks],
) -> SchemeRun:
    """Run one job of ``images`` (uint8, N x 32 x 32 x 3) through ``scheme`` on the hierarchy ``cluster`` runs.

    Checked before any cluster work: the scheme, the tiers it needs, the task
    size, the images and the networks. The networks come from ``deployment``
    (``deploy``: built once for many jobs) or are built for this job alone
    from ``networks`` and ``seed`` (``source``: ``Networks``). ``spec`` may be a part of the running
    hierarchy (e.g. fewer end devices): only its devices take tasks.
    """
    checks.keywords("run_scheme", source, Networks)
    deployment = source.get("deployment")
    images = np.asarray(images)
    if images.ndim != 4 or images.dtype != np.uint8 or len(images) == 0:
        raise ConfigError("images", f"{images.dtype} array of shape {images.shape}", "uint8 images, N x H x W x C")
    checks.integer("task_size", task_size, at_least=1)
    targets = assignment(scheme, spec, n_map)
    devices = {t: [d for d, tier in spec.devices().items() if tier == t] for t in ("end", "edge", "cloud")}
    needed = {"end"} | {t for t in targets if t is not None}
    if deployment is None:
        check_networks(source.get("networks"))
        _check_cluster(cluster, spec)
        sizes = tuple(sorted({min(task_size, len(images)), len(images) % task_size or task_size}))
        tiers, seed = tuple(sorted(needed)), source.get("seed", 0)
        with deploy(cluster, spec, source.get("networks"), tiers=tiers, seed=seed, batch_sizes=sizes) as own:
            return run_scheme(cluster, spec, scheme, images, task_size=task_size, n_map=n_map, deployment=own)
    for tier in needed:
        absent = sorted(set(devices[tier]) - set(deployment.devices.get(tier, [])))
        if absent:
            raise ConfigError("deployment", f"networks on {deployment.devices}", f"the {tier} network on {absent}")

    client = cluster.client
    key = deployment.key
    start = time.perf_counter()
    n_tasks = math.ceil(len(images) / task_size)
    uppers = {"edge": 0, "cloud": 0}
    # The images start on their end device, as the report's tasks do: one scatter per end device.
    held: dict[int, Any] = {}
    for j, end in enumerate(devices["end"]):
        mine = list(range(j, n_tasks, len(devices["end"])))
        chunks = [images[i * task_size : (i + 1) * task_size] for i in mine]
        if chunks:
            held.update(zip(mine, client.scatter(chunks, workers=[deployment.addresses[end]], hash=False), strict=True))
    futures = []
    for i in range(n_tasks):
        j = i % len(devices["end"])
        end = devices["end"][j]
        data = held[i]
        coarse = client.submit(infer_task, key, "end", i, data, resources={device_resource(end): 1}, pure=False)
        fine = None
        tier = targets[j]
        if tier is not None:
            if scheme == "Mapping" and tier == "edge":
                upper = devices["edge"][j // (n_map or 1)]
            else:
                upper = devices[tier][uppers[tier] % len(devices[tier])]
                uppers[tier] += 1
            fine = client.submit(infer_task, key, tier, i, data, resources={device_resource(upper): 1}, pure=False)
        futures.append((coarse, fine))
    wait([f for pair in futures for f in pair if f is not None])
    results = [(c.result(), None if f is None else f.result()) for c, f in futures]
    host_wall = time.perf_counter() - start

    rows = [r[0] | {"stage": "coarse"} for r in results] + [r[1] | {"stage": "fine"} for r in results if r[1]]
    answers = {("coarse", r["task"]): r.pop("answers") for r in rows if r["stage"] == "coarse"}
    answers |= {("fine", r["task"]): r.pop("answers") for r in rows if r["stage"] == "fine"}
    coarse_all = np.concatenate([answers["coarse", i] for i in range(len(results))])
    fine_all = None if scheme == "End" else np.concatenate([answers["fine", i] for i in range(len(results))])
    return SchemeRun(scheme, spec.to_dict(), pd.DataFrame(rows), coarse_all, fine_all, host_wall)


def standalone(
    deployment: Deployment, tier: str, device: str, images: np.ndarray, *, task_size: int = TASK_SIZE
) -> pd.DataFrame:
    """Time ``tier``'s network on ``device`` alone, one task after another, as the report's Table 1 does.

    No second stage and no link: a row per task (task, device, tier, images,
    cpu_s, wall_s, bytes_in, pid), the images put on the device beforehand.
    """
    images = np.asarray(images)
    if images.ndim != 4 or images.dtype != np.uint8 or len(images) == 0:
        raise ConfigError("images", f"{images.dtype} array of shape {images.shape}", "uint8 images, N x H x W x C")
    if device not in deployment.devices.get(tier, []):
        raise ConfigError("device", device, f"a device holding the {tier} network ({deployment.devices.get(tier)})")
    client = deployment.cluster.client
    n_tasks = math.ceil(len(images) / task_size)
    chunks = [images[i * task_size : (i + 1) * task_size] for i in range(n_tasks)]
    held = client.scatter(chunks, workers=[deployment.addresses[device]], hash=False)
    rows = []
    for i, data in enumerate(held):
        # One at a time: a task's time is the network's alone, never shared with the next task's.
        row = client.submit(
            infer_task, deployment.key, tier, i, data, resources={device_resource(device): 1}, pure=False
        )
        rows.append(row.result())
    for row in rows:
        row.pop("answers")
    return pd.DataFrame(rows)


def _check_cluster(cluster: DeviceCluster, spec: HierarchySpec) -> None:
    tiers = cluster.info.get("tiers") or {}
    missing = [d for d, tier in spec.devices().items() if tiers.get(d) != tier]
    if missing:
        raise ConfigError("cluster", f"devices {tiers}", f"a cluster started from this hierarchy (missing {missing})")


def _need(scheme: str, tier: str, count: int) -> None:
    if count < 1:
        raise ConfigError(f"{tier}.devices", count, f"at least 1 for scheme {scheme}")


def _load(key: str, tier: str, network: Network, seed: int, batch_sizes: tuple[int, ...]) -> tuple[str, str, str]:
    """Build (or take) the tier's network on this device, run it at each batch size so no task pays for tracing.

    Returns the tier, the network's name and this worker's address.
    """
    import keras

    if isinstance(network, str):
        model = build_tier_network(network, seed=seed)
    elif isinstance(network, keras.Model):
        model = network
    else:
        with seeded(seed):
            model = network()
    for size in batch_sizes:
        model.predict_on_batch(np.zeros((size, *model.input_shape[1:]), np.float32))
    _NETWORKS[key, tier] = model
    return tier, network if isinstance(network, str) else str(model.name), str(get_worker().address)


def infer_task(key: str, tier: str, task: int, images: np.ndarray) -> dict[str, Any]:
    """One stage of one task on this device: its answers and what it cost."""
    model = _NETWORKS[key, tier]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    # Pixels scaled to [0, 1]: what the networks are trained on (edgelab.models.builtin.prepare_images does the same).
    # One batch per task: predict_on_batch skips predict()'s per-call set-up (60 ms against MobileNet's 2 ms).
    scores = model.predict_on_batch(np.asarray(images, np.float32) / np.float32(255.0))
    cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    return {
        "task": task,
        "device": str(get_worker().name),
        "tier": tier,
        "images": len(images),
        "cpu_s": cpu_s,
        "wall_s": wall_s,
        "bytes_in": int(np.asarray(images).nbytes),
        "pid": os.getpid(),
        "answers": np.argmax(scores, axis=1).astype(np.int16),
    }


def _release(key: str) -> None:
    for held in [k for k in _NETWORKS if k[0] == key]:
        del _NETWORKS[held]

"""Zhang 2018's tiered workflow on a running hierarchy: a coarse answer at an end device, a fine one above it.

A job's images are cut into tasks (the report: 50 images each). Tasks go to
the end devices in turn (task i to end device i mod N_end), and each end
device answers with its network (MobileNet, 20 coarse labels). Then, by
scheme (``edgelab.schemes.SCHEMES``):

* ``End``: that is all;
* ``End-Cloud``: the task's images go on to a cloud device (in turn, when
  there are several) for the fine answer;
* ``End-Edge``: to an edge device, in turn;
* ``Mapping``: end device j sends to edge device j // n_map while edges last,
  the rest to the cloud (eq5); ``n_map`` is the report's 1 unless given
  (eq4 computes it from measured times: ``edgelab.schemes.n_map``).

Every stage is a real inference on the device it is pinned to (by the
device's resource), and the images go from the end device's worker to the
upper device's worker over Dask's worker-to-worker comms: real bytes on real
sockets. ``run_scheme`` records each stage: device, tier, CPU and wall
seconds of the inference, the bytes it received, and its answers. The time
the job would take on the hierarchy (the report's fig3) is composed from
these records, the tiers' links and a device model per tier; the records
alone hold no added latency.

Each tier runs one network, given by name (``edgelab.tier_models``), as a
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from distributed import get_worker, wait

from edgelab.cluster import DeviceCluster, device_resource
from edgelab.errors import ConfigError
from edgelab.hierarchy import HierarchySpec
from edgelab.schemes import SCHEMES
from edgelab.seeding import seeded
from edgelab.tier_models import TIER_NETWORK_NAMES, TIER_NETWORKS, build_tier_network

#: The report's task size: images (or answers) per communication.
TASK_SIZE = 50
# Networks a device holds, by (run id, tier): built once per run, dropped by release().
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
    if n_map is not None and (isinstance(n_map, bool) or not isinstance(n_map, int) or n_map < 1):
        raise ConfigError("n_map", n_map, "an integer >= 1 (end devices per edge device)")
    per_edge = n_map or 1
    targets: list[str | None] = ["edge" if j < n_edge * per_edge else "cloud" for j in range(n_end)]
    if "cloud" in targets:
        _need(scheme, "cloud", n_cloud)
    return targets


def run_scheme(
    cluster: DeviceCluster,
    spec: HierarchySpec,
    scheme: str,
    images: np.ndarray,
    *,
    task_size: int = TASK_SIZE,
    networks: Mapping[str, Network] | None = None,
    n_map: int | None = None,
    seed: int = 0,
) -> SchemeRun:
    """Run one job of ``images`` (uint8, N x 32 x 32 x 3) through ``scheme`` on the hierarchy ``cluster`` runs.

    Checked before any cluster work: the scheme, the tiers it needs, the task
    size, the images and the networks. ``networks`` maps a tier to its network
    (default: the report's, ``TIER_NETWORKS``); each device builds it from
    ``seed``, so every device of a tier holds the same weights.
    """
    images = np.asarray(images)
    if images.ndim != 4 or images.dtype != np.uint8 or len(images) == 0:
        raise ConfigError("images", f"{images.dtype} array of shape {images.shape}", "uint8 images, N x H x W x C")
    if isinstance(task_size, bool) or not isinstance(task_size, int) or task_size < 1:
        raise ConfigError("task_size", task_size, "an integer >= 1 (images per task)")
    targets = assignment(scheme, spec, n_map)
    chosen = {**TIER_NETWORKS, **(networks or {})}
    for tier, network in chosen.items():
        if tier not in ("end", "edge", "cloud"):
            raise ConfigError("networks", tier, "a mapping from tiers (end, edge, cloud) to networks")
        if isinstance(network, str) and network not in TIER_NETWORK_NAMES:
            raise ConfigError(
                f"networks[{tier!r}]", network, f"one of {', '.join(TIER_NETWORK_NAMES)}, a Keras model or a builder"
            )
    tiers = cluster.info.get("tiers") or {}
    missing = [d for d in spec.devices() if d not in tiers]
    if missing:
        raise ConfigError("cluster", f"devices {tiers}", f"a cluster started from this hierarchy (missing {missing})")

    client = cluster.client
    run_id = uuid.uuid4().hex[:12]
    devices = {t: [d for d, tier in spec.devices().items() if tier == t] for t in ("end", "edge", "cloud")}
    start = time.perf_counter()
    try:
        # Each device builds its tier's network once, before any task is timed.
        loads = [
            client.submit(_load, run_id, tier, chosen[tier], seed, resources={device_resource(d): 1}, pure=False)
            for tier in ("end", "edge", "cloud")
            for d in devices[tier]
            if tier == "end" or tier in targets
        ]
        wait(loads)
        [f.result() for f in loads]
        n_tasks = math.ceil(len(images) / task_size)
        uppers = {"edge": 0, "cloud": 0}
        futures = []
        for i in range(n_tasks):
            j = i % len(devices["end"])
            end = devices["end"][j]
            chunk = images[i * task_size : (i + 1) * task_size]
            # The images start on their end device, as the report's tasks do.
            [data] = client.scatter([chunk], workers=[_address(cluster, end)], hash=False)
            coarse = client.submit(_infer, run_id, "end", i, data, resources={device_resource(end): 1}, pure=False)
            fine = None
            tier = targets[j]
            if tier is not None:
                if scheme == "Mapping" and tier == "edge":
                    upper = devices["edge"][j // (n_map or 1)]
                else:
                    upper = devices[tier][uppers[tier] % len(devices[tier])]
                    uppers[tier] += 1
                fine = client.submit(_infer, run_id, tier, i, data, resources={device_resource(upper): 1}, pure=False)
            futures.append((coarse, fine))
        wait([f for pair in futures for f in pair if f is not None])
        results = [(c.result(), None if f is None else f.result()) for c, f in futures]
    finally:
        client.run(_release, run_id)
    host_wall = time.perf_counter() - start

    rows = [r[0] | {"stage": "coarse"} for r in results] + [r[1] | {"stage": "fine"} for r in results if r[1]]
    answers = {("coarse", r["task"]): r.pop("answers") for r in rows if r["stage"] == "coarse"}
    answers |= {("fine", r["task"]): r.pop("answers") for r in rows if r["stage"] == "fine"}
    coarse_all = np.concatenate([answers["coarse", i] for i in range(len(results))])
    fine_all = None if scheme == "End" else np.concatenate([answers["fine", i] for i in range(len(results))])
    return SchemeRun(scheme, spec.to_dict(), pd.DataFrame(rows), coarse_all, fine_all, host_wall)


def _address(cluster: DeviceCluster, device: str) -> str:
    workers = cluster.client.scheduler_info(n_workers=-1)["workers"]
    return next(a for a, w in workers.items() if w["name"] == device)


def _need(scheme: str, tier: str, count: int) -> None:
    if count < 1:
        raise ConfigError(f"{tier}.devices", count, f"at least 1 for scheme {scheme}")


def _load(run_id: str, tier: str, network: Network, seed: int) -> str:
    """Build (or take) the tier's network on this device, and run it once so no task pays for tracing."""
    import keras

    if isinstance(network, str):
        model = build_tier_network(network, seed=seed)
    elif isinstance(network, keras.Model):
        model = network
    else:
        with seeded(seed):
            model = network()
    model.predict(np.zeros((1, *model.input_shape[1:]), np.float32), verbose=0)
    _NETWORKS[run_id, tier] = model
    return str(get_worker().name)


def _infer(run_id: str, tier: str, task: int, images: np.ndarray) -> dict[str, Any]:
    """One stage of one task on this device: its answers and what it cost."""
    model = _NETWORKS[run_id, tier]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    # Pixels scaled to [0, 1]: what the networks are trained on (edgelab.models.prepare_images does the same).
    scores = model.predict(np.asarray(images, np.float32) / np.float32(255.0), batch_size=len(images), verbose=0)
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


def _release(run_id: str) -> None:
    for key in [k for k in _NETWORKS if k[0] == run_id]:
        del _NETWORKS[key]

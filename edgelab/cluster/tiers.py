"""An end / edge / cloud hierarchy of emulated devices, started on one Dask cluster (its spec: ``emulation.tiers``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from edgelab.cluster.device_cluster import (
    DEFAULT_WORKER_MEMORY_LIMIT,
    START_METHODS,
    DeviceCluster,
    WorkerSpec,
    start_workers,
)
from edgelab.common.errors import ConfigError
from edgelab.emulation.profiles import get_profile
from edgelab.emulation.tiers import ZHANG2018, HierarchySpec


def start_hierarchy(
    spec: HierarchySpec = ZHANG2018,
    *,
    worker_memory_limit: str = DEFAULT_WORKER_MEMORY_LIMIT,
    dashboard_address: str = "127.0.0.1:8787",
    timeout_s: float = 180.0,
    start_method: str = "forkserver",
    plugins: Sequence[Any] = (),
) -> DeviceCluster:
    """Start one emulated device per device of ``spec``, each pinned by its name and its tier's resource.

    Checked before anything starts: the spec (its tiers check themselves) and
    the start method. The cluster records the hierarchy it runs
    (``DeviceCluster.info["hierarchy"]``) and each device's tier (``info["tiers"]``).
    """
    if not isinstance(spec, HierarchySpec):
        raise ConfigError("spec", spec, "a HierarchySpec (e.g. edgelab.emulation.tiers.ZHANG2018)")
    if start_method not in START_METHODS:
        raise ConfigError("start_method", start_method, f"one of {', '.join(START_METHODS)}")
    host_cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    cores = {t.name: min(t.cores, host_cores) for t in spec.tiers}
    workers = {device: WorkerSpec(tier, cores[tier]) for device, tier in spec.devices().items()}
    client, cluster, info, scratch = start_workers(
        workers, worker_memory_limit, dashboard_address, timeout_s, start_method, plugins
    )
    info.update(hierarchy=spec.to_dict(), tiers=spec.devices(), tf_threads=cores, host_cores=host_cores)
    return DeviceCluster(client, list(workers), get_profile("native"), True, cluster, info, scratch)

"""Devices that run edgelab's work: a cluster (emulated, attached, or a hierarchy) with the device runtime on each.

The cluster layer (``edgelab.cluster``) starts or reaches Dask workers and
knows nothing of what runs on them; here each worker also gets the device
runtime (``DeviceRuntime``), the plugin that holds a device's data, model
and round channel. Every experiment gets its devices through these.
"""

from __future__ import annotations

from typing import Any

from edgelab.cluster import device_cluster, tiers
from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.emulation.tiers import ZHANG2018, HierarchySpec
from edgelab.runtime.plugin import DeviceRuntime


def connect(n_devices: int, **options: Any) -> DeviceCluster:
    """``n_devices`` devices, each running the device runtime: emulated here, or a running cluster's by address.

    ``options`` are ``edgelab.cluster.device_cluster.connect``'s (profile, scheduler_address, security, ...).
    """
    return device_cluster.connect(n_devices, plugins=[DeviceRuntime()], **options)


def start_hierarchy(spec: HierarchySpec = ZHANG2018, **options: Any) -> DeviceCluster:
    """One emulated device per device of ``spec``, each running the device runtime (``edgelab.cluster.tiers``)."""
    return tiers.start_hierarchy(spec, plugins=[DeviceRuntime()], **options)

"""Dask workers that stand for devices: emulated, attached, tiered, shaped, with TLS and faults.

Getting Dask workers that stand for devices, and knowing nothing of what runs on them: the embedded
emulated cluster or a running one by address (plugins passed in), a tier hierarchy, the cluster's log,
shaped hosts in network namespaces, the link relay, TLS certificates, fault injection, device scheduling.
"""

from __future__ import annotations

from edgelab.cluster.device_cluster import DeviceCluster

__all__ = ["DeviceCluster"]

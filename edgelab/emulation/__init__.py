"""Emulated boards and time: profiles, the device model, every clock, projection, monitor, memory probe.

Emulated boards and time: device profiles and their calibration, the device model, every clock (rounds,
streams, pipelined training, tiers, the asynchronous schedule), the tier hierarchy's spec and schemes, the
projection of stored runs to a paper's numbers, the resource monitor and the memory probe.
"""

from __future__ import annotations

from edgelab.emulation.profiles import PROFILES, DeviceProfile, calibrate, get_profile
from edgelab.emulation.timeline import Topology

__all__ = ["DeviceProfile", "PROFILES", "Topology", "calibrate", "get_profile"]

"""The device worker and its client: plugin, device calls, steps, tasks, fleet, round channels.

The device worker and its client: the plugin a device runs (its data, models, round channel), the device
calls it answers (a registry of the callables themselves), its TensorFlow steps and tasks; the fleet that
calls the devices and brings lost ones back; the authenticated round channels and their lean round wire;
``devices.connect``, clusters whose workers run it.
"""

from __future__ import annotations

from edgelab.runtime.devices import connect, start_hierarchy
from edgelab.runtime.fleet import Fleet
from edgelab.runtime.protocol import device_call

__all__ = ["Fleet", "connect", "device_call", "start_hierarchy"]

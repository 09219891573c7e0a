"""How the embedded cluster's device workers share the host's cores with the client: ``EDGELAB_DEVICE_SCHEDULING``.

On a real cluster every board has its own CPU. On the emulated one the
client, the scheduler and every device worker share a few host cores, and
Linux's default scheduling lets a thread that wakes up preempt the one
running: a device woken by the first bytes of its weights took the core from
the client, which then sat runnable, unable to send the next device its
weights, until the woken device had trained its batch. On this 2-core host a
tenth of a two-device LeNet-MLP round's sends took 0.8-1.4 ms instead of 0.1 ms.

``"batch"`` (the default) runs every thread of a device worker under
``SCHED_BATCH``: the same share of CPU as before, but a device that wakes
does not preempt the running thread, so the client sends all its calls and
then waits, and the devices run. ``"normal"`` leaves the kernel's default.
Only the embedded cluster's workers are set; an attached cluster's are left
as their owner started them. Neither changes what a device measures (its CPU
time, bytes and memory).
"""

from __future__ import annotations

import os
from pathlib import Path

from edgelab.common.errors import ConfigError

#: The environment variable that chooses the policy, read by ``edgelab.cluster.device_cluster`` as devices start.
ENV = "EDGELAB_DEVICE_SCHEDULING"
POLICIES = ("batch", "normal")
DEFAULT = "batch"


def chosen() -> str:
    """The policy ``EDGELAB_DEVICE_SCHEDULING`` asks for (``DEFAULT`` when unset); a bad value is a ``ConfigError``."""
    policy = os.environ.get(ENV, DEFAULT)
    if policy not in POLICIES:
        raise ConfigError(ENV, policy, f"one of {', '.join(POLICIES)}")
    return policy


def apply(policy: str) -> str:
    """Put every thread of this process under ``policy``; what it runs under after (``"normal"`` where unsupported).

    Threads started later inherit their creator's policy, so setting the
    threads there are when a worker starts covers those it starts after.
    ``"normal"`` sets the kernel's default back (``benchmarks/bench_scheduling.py``
    switches a running cluster's devices between the two).
    """
    if policy not in POLICIES:
        raise ConfigError("policy", policy, f"one of {', '.join(POLICIES)}")
    if not hasattr(os, "SCHED_BATCH"):  # not Linux
        return "normal"
    kernel_policy = os.SCHED_BATCH if policy == "batch" else os.SCHED_OTHER
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setscheduler(int(task.name), kernel_policy, os.sched_param(0))
        except ProcessLookupError:  # a thread that ended meanwhile
            continue
    return policy


def current() -> str:
    """The policy this thread runs under: ``"batch"`` or ``"normal"``."""
    if hasattr(os, "SCHED_BATCH") and os.sched_getscheduler(0) == os.SCHED_BATCH:
        return "batch"
    return "normal"

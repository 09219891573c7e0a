"""How device workers share the host's cores: the policy, what it applies to, and a bad value."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from edgelab.cluster import device_scheduling
from edgelab.common.errors import ConfigError
from edgelab.runtime.devices import connect

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")

# Applies a policy in a fresh interpreter (never to the test process's own threads), then starts a thread.
_APPLY = """
import os, threading, sys
from edgelab.cluster import device_scheduling as d
seen = []
early = threading.Thread(target=lambda: threading.Event().wait(0.5))
early.start()  # running before the policy is applied: it must be set too
applied = d.apply(sys.argv[1])
late = threading.Thread(target=lambda: seen.append(d.current()))
late.start(); late.join()
print(applied, d.current(), seen[0], "batch" if os.sched_getscheduler(early.native_id) == os.SCHED_BATCH else "normal")
"""


@pytest.mark.parametrize("policy", ["batch", "normal"])
def test_a_policy_covers_the_threads_there_are_and_those_started_after(policy: str) -> None:
    # Execute
    out = subprocess.run([sys.executable, "-c", _APPLY, policy], capture_output=True, text=True, check=True)

    # Assert: what apply says, the main thread, a thread started after, a thread that was already running
    assert out.stdout.split() == [policy] * 4


def test_the_default_is_batch_and_a_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(device_scheduling.ENV, raising=False)
    assert device_scheduling.chosen() == "batch"
    monkeypatch.setenv(device_scheduling.ENV, "normal")
    assert device_scheduling.chosen() == "normal"

    monkeypatch.setenv(device_scheduling.ENV, "fifo")
    with pytest.raises(ConfigError, match="EDGELAB_DEVICE_SCHEDULING='fifo' is not allowed: one of batch, normal"):
        device_scheduling.chosen()


def test_a_bad_value_stops_connect_before_any_worker_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    monkeypatch.delenv("EDGELAB_SCHEDULER", raising=False)
    monkeypatch.setenv(device_scheduling.ENV, "realtime")
    before = len(multiprocessing.active_children())

    # Execute
    with pytest.raises(ConfigError, match=device_scheduling.ENV):
        connect(1, dashboard_address="127.0.0.1:0")

    # Assert: no worker process was started
    assert len(multiprocessing.active_children()) == before

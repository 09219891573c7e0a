"""The process's RSS and peak RSS read through kept /proc descriptors: the values psutil and /proc give."""

from __future__ import annotations

import multiprocessing
import sys

import numpy as np
import psutil
import pytest

from edgelab import process_memory

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")


def _status_hwm() -> int:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


@linux_only
def test_rss_is_what_psutil_reads_and_follows_memory_touched() -> None:
    # Execute: RSS before and after touching 64 MiB
    before, psutil_before = process_memory.rss_bytes(), psutil.Process().memory_info().rss
    block = np.ones(64 * 2**20, np.uint8)  # written, so resident
    after = process_memory.rss_bytes()

    # Assert: psutil's value (give or take what the interpreter did between the two reads), then the rise
    assert abs(before - psutil_before) < 2**20
    assert after - before >= 60 * 2**20
    del block


@linux_only
def test_peak_is_vmhwm_and_a_reset_starts_a_new_window() -> None:
    # Arrange: a peak well above the RSS after it
    block = np.ones(96 * 2**20, np.uint8)
    del block
    high = process_memory.peak_bytes()

    # Execute
    assert process_memory.reset_peak()
    low = process_memory.peak_bytes()

    # Assert: the peak read is /proc's VmHWM, and the reset brought it down to about the RSS now
    assert high is not None and low is not None
    assert high >= process_memory.rss_bytes() + 80 * 2**20
    assert abs(low - _status_hwm()) < 2**20
    assert low < high - 80 * 2**20


def _child_reads(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    block = np.ones(48 * 2**20, np.uint8)
    queue.put((process_memory.rss_bytes(), psutil.Process().memory_info().rss))
    del block


@linux_only
def test_a_forked_child_reads_its_own_memory_not_its_parents() -> None:
    # Arrange: the parent's descriptors are open, and the parent is large
    ballast = np.ones(128 * 2**20, np.uint8)
    parent = process_memory.rss_bytes()
    queue: multiprocessing.Queue = multiprocessing.get_context("fork").Queue()  # type: ignore[type-arg]

    # Execute
    child = multiprocessing.get_context("fork").Process(target=_child_reads, args=(queue,))
    child.start()
    ours, psutils = queue.get(timeout=60)
    child.join(timeout=60)

    # Assert: the child's value is its own (psutil's), not the parent's through an inherited descriptor
    assert abs(ours - psutils) < 2**20
    assert child.exitcode == 0
    assert parent > 0
    del ballast

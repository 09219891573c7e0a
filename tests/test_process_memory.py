"""The process's RSS and peak RSS read through kept /proc descriptors: the values psutil and /proc give."""

from __future__ import annotations

import mmap
import multiprocessing
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil
import pytest

from edgelab.common import process_memory

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")


def _status_hwm() -> int:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def _in_a_forked_child(fn: Callable[[], Any]) -> Any:
    """``fn()`` run in a forked child, its only thread: no other thread of the test worker frees memory meanwhile.

    Run in the test worker itself, a rise of 64 MiB once read as 18 MiB: the
    worker (2.4 GB) was freeing memory on other threads between the reads.
    """
    context = multiprocessing.get_context("fork")
    queue = context.Queue()

    def run() -> None:
        queue.put(fn())

    child = context.Process(target=run)
    child.start()
    got = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    return got


def _fresh_resident_block(nbytes: int) -> mmap.mmap:
    """``nbytes`` of new pages, every one written: resident, and given back to the system on ``close()``.

    Not numpy's (malloc's) memory: a forked child shares its parent's heap,
    and a large run the parent freed but kept resident serves malloc again
    without the RSS rising. In CI a 96 MiB array came from such a run of a
    1.1 GB test worker, and the peak read the same as the RSS after it.
    """
    block = mmap.mmap(-1, nbytes)
    view = np.frombuffer(block, np.uint8)
    view[:] = 1
    del view  # the buffer export would keep close() from unmapping
    return block


def _rss_around_64_mib() -> tuple[int, int, int, int]:
    before, psutil_before = process_memory.rss_bytes(), psutil.Process().memory_info().rss
    block = _fresh_resident_block(64 * 2**20)
    after, psutil_after = process_memory.rss_bytes(), psutil.Process().memory_info().rss
    block.close()
    return before, psutil_before, after, psutil_after


@linux_only
def test_rss_is_what_psutil_reads_and_follows_memory_touched() -> None:
    # Execute: RSS before and after touching 64 MiB
    before, psutil_before, after, psutil_after = _in_a_forked_child(_rss_around_64_mib)

    # Assert: psutil's value (give or take what the interpreter did between the two reads), then the rise
    assert abs(before - psutil_before) < 2**20
    assert abs(after - psutil_after) < 2**20
    assert after - before >= 60 * 2**20


def _peak_then_reset() -> tuple[int | None, int | None, int, int]:
    _fresh_resident_block(96 * 2**20).close()
    high = process_memory.peak_bytes()
    assert process_memory.reset_peak()
    low = process_memory.peak_bytes()
    return high, low, _status_hwm(), process_memory.rss_bytes()


@linux_only
def test_peak_is_vmhwm_and_a_reset_starts_a_new_window() -> None:
    # Arrange / Execute: a peak well above the RSS after it, then a reset
    high, low, status_hwm, rss = _in_a_forked_child(_peak_then_reset)

    # Assert: the peak read is /proc's VmHWM, and the reset brought it down to about the RSS now
    assert high is not None and low is not None
    assert high >= rss + 80 * 2**20
    assert abs(low - status_hwm) < 2**20
    assert low < high - 80 * 2**20


def _own_and_psutils_rss() -> tuple[int, int]:
    block = _fresh_resident_block(48 * 2**20)
    read = process_memory.rss_bytes(), psutil.Process().memory_info().rss
    block.close()
    return read


@linux_only
def test_a_forked_child_reads_its_own_memory_not_its_parents() -> None:
    # Arrange: the parent's descriptors are open, and the parent is large
    ballast = np.ones(128 * 2**20, np.uint8)
    parent = process_memory.rss_bytes()

    # Execute (the helper checks the child exited cleanly)
    ours, psutils = _in_a_forked_child(_own_and_psutils_rss)

    # Assert: the child's value is its own (psutil's), not the parent's through an inherited descriptor
    assert abs(ours - psutils) < 2**20
    assert parent > 0
    del ballast

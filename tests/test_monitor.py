"""Tests for edgelab.emulation.monitor: the background sampler and per-interval rates."""

from __future__ import annotations

import itertools
import os
import time

import numpy as np
import pandas as pd
import pytest

from edgelab.emulation.monitor import ResourceSampler, utilisation


class FakeCounters:
    """Cumulative (sent, received) bytes that grow by (100, 200) on every read."""

    def __init__(self) -> None:
        self._calls = itertools.count(1)

    def __call__(self) -> tuple[int, int]:
        k = next(self._calls)
        return 100 * k, 200 * k


def _burn_cpu(seconds: float) -> None:
    """Spin in this thread until it has used ``seconds`` of CPU time."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1


def test_sampler_samples_repeatedly_in_background() -> None:
    # Prepare
    sampler = ResourceSampler(counters=FakeCounters(), interval_s=0.05)

    # Execute
    sampler.start()
    time.sleep(0.35)
    samples = sampler.stop()

    # Assert
    assert len(samples) >= 4
    frame = pd.DataFrame(samples)
    assert list(frame.columns) == [
        "t",
        "cpu_s",
        "rss_bytes",
        "bytes_sent",
        "bytes_received",
        "nic_bytes_sent",
        "nic_bytes_received",
    ]
    assert frame["nic_bytes_received"].is_monotonic_increasing
    assert frame["t"].is_monotonic_increasing and frame["t"].diff().dropna().gt(0).all()
    assert frame["cpu_s"].is_monotonic_increasing
    assert (frame["rss_bytes"] > 0).all()
    # Counters are read once per sample, in order
    k = np.arange(1, len(frame) + 1)
    np.testing.assert_array_equal(frame["bytes_sent"], 100.0 * k)
    np.testing.assert_array_equal(frame["bytes_received"], 200.0 * k)


def test_stop_hands_over_samples_and_restarts_empty() -> None:
    # Prepare
    sampler = ResourceSampler(counters=lambda: (0, 0), interval_s=0.05, pid=os.getpid())
    sampler.start()
    first = sampler.stop()

    # Execute
    second = sampler.stop()

    # Assert: the sampler keeps nothing once handed over; a stop without start takes one sample
    assert len(first) >= 2
    assert len(second) == 1
    assert sampler.samples == []


def test_drain_hands_over_what_was_sampled_and_keeps_sampling() -> None:
    # Prepare: a counter that moves by one per read, sampled by hand
    reads = iter(range(100))
    sampler = ResourceSampler(counters=lambda: (next(reads), 0), interval_s=10.0, pid=os.getpid())
    for _ in range(3):
        sampler.sample()

    # Execute
    first = sampler.drain()
    sampler.sample()
    second = sampler.drain()
    last = sampler.stop()

    # Assert: each sample is handed over exactly once, in order
    assert [row["bytes_sent"] for row in first] == [0.0, 1.0, 2.0]
    assert [row["bytes_sent"] for row in second] == [3.0]
    assert [row["bytes_sent"] for row in last] == [4.0]
    assert sampler.drain() == []


def test_busy_loop_shows_cpu_utilisation() -> None:
    # Prepare
    sampler = ResourceSampler(counters=lambda: (0, 0), interval_s=10.0)
    sampler.sample()

    # Execute
    _burn_cpu(0.2)
    sampler.sample()
    rates = utilisation(pd.DataFrame(sampler.samples))

    # Assert
    assert len(rates) == 1
    assert rates["cpu_pct"].iloc[0] > 0


def test_utilisation_exact_rates() -> None:
    # Prepare: cumulative samples at t = 10, 11, 13
    samples = pd.DataFrame(
        {
            "t": [10.0, 11.0, 13.0],
            "cpu_s": [1.0, 1.5, 3.5],
            "rss_bytes": [2**20, 2 * 2**20, 3 * 2**20],
            "bytes_sent": [0.0, 0.0, 2000.0],
            "bytes_received": [0.0, 500.0, 500.0],
        }
    )

    # Execute
    rates = utilisation(samples, cores=4)

    # Assert
    np.testing.assert_allclose(rates["t"], [11.0, 13.0])
    np.testing.assert_allclose(rates["dt"], [1.0, 2.0])
    # 0.5 s over 1 s on 4 cores = 12.5 %; 2 s over 2 s on 4 cores = 25 %
    np.testing.assert_allclose(rates["cpu_pct"], [12.5, 25.0])
    np.testing.assert_allclose(rates["rss_mb"], [2.0, 3.0])
    np.testing.assert_allclose(rates["sent_kb_s"], [0.0, 1.0])
    np.testing.assert_allclose(rates["received_kb_s"], [0.5, 0.0])


def test_utilisation_sorts_by_time_and_drops_zero_intervals() -> None:
    # Prepare: out of order, with a duplicate timestamp
    samples = pd.DataFrame(
        {
            "t": [2.0, 0.0, 2.0],
            "cpu_s": [1.0, 0.0, 1.0],
            "rss_bytes": [1.0, 1.0, 1.0],
            "bytes_sent": [0.0, 0.0, 0.0],
            "bytes_received": [0.0, 0.0, 0.0],
        }
    )

    # Execute
    rates = utilisation(samples)

    # Assert: one real interval of 2 s with 1 CPU s on 1 core
    assert len(rates) == 1
    assert rates["cpu_pct"].iloc[0] == pytest.approx(50.0)


@pytest.mark.parametrize("interval", [0.0, -0.1])
def test_non_positive_interval_raises(interval: float) -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match="interval_s"):
        ResourceSampler(counters=lambda: (0, 0), interval_s=interval)

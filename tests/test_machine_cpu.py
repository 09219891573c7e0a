"""The machine's CPU time from /proc/stat: its columns read right, shares between two readings, steal apart."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from edgelab.common.machine_cpu import CpuTimes, parse, read, shares

# A 2-CPU guest's /proc/stat as this project's VM wrote it (columns: user nice system idle iowait irq softirq
# steal guest guest_nice), cut to its first lines.
PROC_STAT = """cpu  4710140 318 337612 8680090 7660 0 90609 328033 0 0
cpu0 2325668 125 167735 4364562 4579 0 45436 162916 0 0
cpu1 2384472 193 169876 4315527 3081 0 45172 165116 0 0
intr 123 0 0
"""


def test_the_cpu_line_s_columns_are_summed_by_what_they_are() -> None:
    # Execute
    times = parse(PROC_STAT, wall_s=7.0)

    # Assert: user+nice+system+irq+softirq busy; idle+iowait idle; steal alone
    assert times == CpuTimes(7.0, 4710140 + 318 + 337612 + 0 + 90609, 8680090 + 7660, 328033)
    assert times.total == times.busy + times.idle + times.steal


def test_a_kernel_with_fewer_columns_counts_no_steal() -> None:
    assert parse("cpu 10 0 5 100 1\n", 0.0) == CpuTimes(0.0, 15, 101, 0)


def test_another_file_is_refused_naming_its_first_line() -> None:
    with pytest.raises(ValueError, match="first line is 'MemTotal"):
        parse("MemTotal: 24000000 kB\n", 0.0)


def test_shares_split_the_window_into_the_guest_s_work_and_the_hypervisor_s() -> None:
    # Prepare: 400 ticks over 2 CPUs: 150 busy, 150 idle, 100 stolen
    before = CpuTimes(0.0, 1000, 5000, 200)
    after = CpuTimes(2.0, 1150, 5150, 300)

    # Execute / Assert: of the 250 ticks it wanted, 100 went to other guests
    assert shares(before, after, cpus=2) == {"busy_cores": 0.75, "steal_share": 0.25, "stolen_of_wanted": 0.4}


def test_no_time_passed_or_a_missing_reading_gives_nan() -> None:
    same = CpuTimes(0.0, 1, 1, 1)
    for got in (shares(same, same), shares(None, same), shares(same, None)):
        assert set(got) == {"busy_cores", "steal_share", "stolen_of_wanted"}
        assert all(v != v for v in got.values())
    # Idle throughout: nothing was wanted, so nothing of it was stolen or kept
    assert math.isnan(shares(CpuTimes(0.0, 5, 5, 5), CpuTimes(1.0, 5, 205, 5))["stolen_of_wanted"])


def test_a_missing_file_reads_as_none(tmp_path: Path) -> None:
    assert read(tmp_path / "no-such-stat") is None


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="no /proc/stat here (not Linux)")
def test_this_machine_s_cpus_count_a_busy_loop() -> None:
    # Prepare / Execute: a quarter second of this thread's spinning between two readings
    before = read()
    end = time.thread_time() + 0.25
    while time.thread_time() < end:
        pass
    after = read()

    # Assert: busy time grew by the spin at least (ticks are 10 ms), and the shares are within their ranges
    assert before is not None and after is not None
    assert after.busy - before.busy >= 20
    got = shares(before, after)
    assert 0.0 < got["busy_cores"] and 0.0 <= got["steal_share"] <= got["stolen_of_wanted"] < 1.0

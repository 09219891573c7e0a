"""The pipeline's emulated clock composes measured stage costs as a pipeline runs them."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from edgelab.common.errors import ConfigError
from edgelab.emulation.profiles import get_profile
from edgelab.emulation.stream_clock import (
    MessageCost,
    compose,
    speedup_bound,
    stage_contention,
    without_contention,
)

# A link so fast that transfers cost nothing, and no latency: only compute counts.
FAST = dataclasses.replace(get_profile("pi4b"), link_mbps=1e12, latency_s=0.0)


def _records(costs: dict[str, float], n: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = [
        {"branch": 0, "stage": s, "micro_batch": m, "images": 4, "cpu_s": c, "bytes_out": 0}
        for m in range(n)
        for s, c in costs.items()
    ]
    sends = pd.DataFrame([{"micro_batch": m, "branch": 0, "bytes": 0} for m in range(n)])
    return pd.DataFrame(rows), sends


def test_a_full_pipeline_runs_at_its_slowest_stage() -> None:
    # Prepare: stages of 1 s and 2 s, 10 micro-batches, speed factor 1
    records, sends = _records({"a": 1.0, "b": 2.0}, 10)
    # Execute
    emu = compose(records, sends, [[("a", "d0"), ("b", "d1")]], profile=FAST, speed_factor=1.0, max_in_flight=10)
    # Assert: fill (1 s) then one micro-batch every 2 s: 1 + 10 * 2 = 21 s; the bound is 4 images / 2 s
    assert emu.processing_s == pytest.approx(21.0)
    assert emu.bound_throughput == pytest.approx(2.0)
    assert emu.steady_throughput == pytest.approx(2.0)
    assert emu.bottleneck == "d1 compute"


def test_one_micro_batch_in_flight_runs_the_stages_one_after_another() -> None:
    records, sends = _records({"a": 1.0, "b": 2.0}, 10)
    emu = compose(records, sends, [[("a", "d0"), ("b", "d1")]], profile=FAST, speed_factor=1.0, max_in_flight=1)
    assert emu.processing_s == pytest.approx(30.0)


def test_the_speed_factor_scales_compute_and_the_link_adds_bytes_over_its_rate() -> None:
    # Prepare: one stage of 0.5 CPU s passing 125,000 bytes back over a 1 Mbit/s link with 0.1 s latency
    slow = dataclasses.replace(FAST, link_mbps=1.0, latency_s=0.1)
    records = pd.DataFrame(
        [{"branch": 0, "stage": "a", "micro_batch": 0, "images": 1, "cpu_s": 0.5, "bytes_out": 125_000}]
    )
    sends = pd.DataFrame([{"micro_batch": 0, "branch": 0, "bytes": 0}])
    # Execute
    emu = compose(records, sends, [[("a", "d0")]], profile=slow, speed_factor=4.0, max_in_flight=1)
    # Assert: in 0.1 s, compute 2 s, out 1 s + 0.1 s
    assert emu.processing_s == pytest.approx(0.1 + 2.0 + 1.0 + 0.1)


def test_a_clock_that_charges_messages_takes_the_computing_threads_cpu_and_an_unknown_column_is_refused() -> None:
    records, sends = _records({"a": 1.0}, 2)
    records["compute_cpu_s"] = 0.75  # the rest of the process's 1 s: its comms, paid per message instead
    kwargs = {"profile": FAST, "speed_factor": 1.0, "max_in_flight": 1}
    emu = compose(records, sends, [[("a", "d0")]], messages=MessageCost(0.25), cpu_column="compute_cpu_s", **kwargs)
    assert emu.processing_s == pytest.approx(2 * (0.75 + 0.25))
    # and 1 ns of device time per byte taken in and handed on: 1 MB in, 0.5 MB on, 1.5 ms more a micro-batch
    records["bytes_in"], records["bytes_out"] = 1_000_000, 500_000
    per_byte = MessageCost(per_byte_s=1e-9)
    emu = compose(records, sends, [[("a", "d0")]], messages=per_byte, cpu_column="compute_cpu_s", **kwargs)
    assert emu.processing_s == pytest.approx(2 * (0.75 + 0.0015))
    with pytest.raises(ConfigError, match="cpu_column"):
        compose(records, sends, [[("a", "d0")]], cpu_column="wall_s", **kwargs)


def test_a_hand_off_s_wall_delays_every_hop_but_keeps_no_device_busy() -> None:
    # Prepare: two stages of 1 s each on two devices, 0.2 s a hand-off
    records, sends = _records({"a": 1.0, "b": 1.0}, 4)
    kwargs = {"profile": FAST, "speed_factor": 1.0, "messages": MessageCost(per_hop_s=0.2)}
    # Execute
    one = compose(records, sends, [[("a", "d0"), ("b", "d1")]], max_in_flight=1, **kwargs)
    four = compose(records, sends, [[("a", "d0"), ("b", "d1")]], max_in_flight=4, **kwargs)
    # Assert: one at a time, three hops a micro-batch (in, between, out): 4 x (2 + 0.6) s; four in flight, the
    # devices stay 1 s a micro-batch and the hops show only in the first and last: 0.2 + 1 + 0.2 + 4 x 1 + 0.2 s
    assert one.processing_s == pytest.approx(4 * 2.6)
    assert four.processing_s == pytest.approx(5.6)
    assert four.resources.loc["d0 compute", "median_s"] == pytest.approx(1.0)


def test_the_work_on_a_messages_bytes_runs_while_they_are_on_the_wire_and_keeps_the_device_busy() -> None:
    # Prepare: the master sends 1 MB a micro-batch over 8 Mbit/s (1 s); taking it in costs the device 0.5 s of
    # work (0.5 us a byte), computing 1 s; nothing comes back
    link = dataclasses.replace(FAST, link_mbps=8.0)
    records, _ = _records({"a": 1.0}, 4)
    records["compute_cpu_s"], records["bytes_in"] = 1.0, 1_000_000
    sends = pd.DataFrame([{"micro_batch": m, "branch": 0, "bytes": 1_000_000} for m in range(4)])
    kwargs = {
        "profile": link,
        "speed_factor": 1.0,
        "messages": MessageCost(per_byte_s=0.5e-6),
        "cpu_column": "compute_cpu_s",
    }
    # Execute
    one = compose(records[records["micro_batch"] == 0], sends, [[("a", "d0")]], max_in_flight=1, **kwargs)
    four = compose(records, sends, [[("a", "d0")]], max_in_flight=4, **kwargs)
    # Assert: alone, the work hides under the 1 s transfer (2 s, not 2.5); four in flight, the device is busy
    # 1.5 s a micro-batch (compute and work) and the transfers hide under it: 1 + 1 + 3 x 1.5 = 6.5 s
    assert one.processing_s == pytest.approx(2.0)
    assert four.processing_s == pytest.approx(6.5)
    assert four.resources.loc["d0 compute", "median_s"] == pytest.approx(1.5)


def test_speedup_bound_is_sum_over_max() -> None:
    assert speedup_bound([1.0, 2.0, 1.0]) == pytest.approx(2.0)


def test_contention_is_each_stages_cpu_in_the_stream_over_its_cpu_alone_and_is_divided_out() -> None:
    # Prepare: stage a costs 1.5 s with the others busy and 1 s alone; b 2 s both ways; c never ran alone
    stream, sends = _records({"a": 1.5, "b": 2.0, "c": 0.5}, 5)
    alone, _ = _records({"a": 1.0, "b": 2.0}, 3)
    # Execute
    factors = stage_contention(stream, alone)
    cleaned = without_contention(stream, factors)
    # Assert: a's CPU back to 1 s, b's unchanged, c (no factor) as measured; the clock runs at b's 2 s
    assert factors == {"a": 1.5, "b": 1.0}
    assert cleaned.groupby("stage")["cpu_s"].first().to_dict() == {"a": 1.0, "b": 2.0, "c": 0.5}
    emu = compose(cleaned, sends, [[("a", "d0"), ("b", "d1")]], profile=FAST, speed_factor=1.0, max_in_flight=5)
    assert emu.processing_s == pytest.approx(1.0 + 5 * 2.0)


def test_contention_on_the_computing_threads_column_and_an_unknown_column_is_refused() -> None:
    stream, _ = _records({"a": 1.0}, 2)
    alone, _ = _records({"a": 1.0}, 2)
    stream["compute_cpu_s"], alone["compute_cpu_s"] = 0.9, 0.6
    assert stage_contention(stream, alone, "compute_cpu_s") == {"a": pytest.approx(1.5)}
    assert without_contention(stream, {"a": 1.5}, "compute_cpu_s")["compute_cpu_s"].tolist() == [0.6, 0.6]
    with pytest.raises(ConfigError, match="wall_s"):
        stage_contention(stream, alone, "wall_s")

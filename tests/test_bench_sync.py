"""The synchronization benchmark's own checks and arithmetic (benchmarks/bench_sync.py), without running it."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from edgelab.common.errors import ConfigError
from edgelab.training.data_parallel import TrainConfig, TrainRun

BENCHMARK = "bench_sync"
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench_sync(benchmark):  # type: ignore[no-untyped-def]
    return benchmark


def test_a_peer_without_its_package_fails_with_the_install_command(bench_sync, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Prepare: flwr is not installed
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flwr" else real(name, *a))

    # Execute / Assert: the error names the peer, the missing package and how to install it
    with pytest.raises(ConfigError, match=r"peers='flower'.*flwr is missing \(pip install -e '\.\[bench\]'\)"):
        bench_sync.run_benchmark(parts=["flower"], repeats=1, rounds=100, samples=1280)


def test_an_unknown_peer_is_refused(bench_sync) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=r"peers='horovod' is not allowed: any of mwms, flower"):
        bench_sync.check_peers(["horovod"])


def test_round_costs_take_the_longer_of_the_slowest_device_and_the_cores(bench_sync) -> None:  # type: ignore[no-untyped-def]
    # Prepare: two rounds of four devices on a two-core host, hand-made records
    records = pd.DataFrame(
        {
            "round": [0] * 4 + [1] * 4,
            "round_wall_s": [0.030] * 4 + [0.050] * 4,
            "wall_s": [0.010, 0.012, 0.011, 0.009, 0.030, 0.010, 0.010, 0.010],
            "cpu_s": [0.010] * 4 + [0.010] * 4,
            "bytes_sent": [100] * 8,
            "bytes_received": [100] * 8,
        }
    )
    run = TrainRun(TrainConfig(model="mlp", n_devices=4), records, pd.DataFrame(), pd.DataFrame(), pd.DataFrame())

    # Execute
    costs = bench_sync.round_costs(run, cores=2)

    # Assert: round 0 queues 40 ms of CPU on 2 cores (20 ms > its slowest 12 ms); round 1's slowest is 30 ms
    assert costs["rounds"] == 2
    assert costs["compute_ms"] == pytest.approx(np.median([20.0, 30.0]))
    assert costs["overhead_ms"] == pytest.approx(np.median([10.0, 20.0]))
    assert costs["bytes_per_round"] == 800


def test_a_rounds_wall_is_its_period_to_the_next_rounds_start_where_the_records_have_starts(bench_sync) -> None:  # type: ignore[no-untyped-def]
    # Prepare: three rounds of two devices; the client spent 2-4 ms between a round's end and the next start
    records = pd.DataFrame(
        {
            "round": [0, 0, 1, 1, 2, 2],
            "round_start_s": [0.0, 0.0, 0.012, 0.012, 0.026, 0.026],
            "round_wall_s": [0.010] * 6,
            "wall_s": [0.004, 0.006, 0.005, 0.005, 0.004, 0.004],
            "cpu_s": [0.004] * 6,
            "bytes_sent": [100] * 6,
            "bytes_received": [100] * 6,
        }
    )
    run = TrainRun(TrainConfig(model="mlp", n_devices=2), records, pd.DataFrame(), pd.DataFrame(), pd.DataFrame())

    # Execute
    costs = bench_sync.round_costs(run, cores=2)

    # Assert: periods 12 and 14 ms (the last round has no next), compute 6 and 5 ms; the calls alone 10 ms
    assert costs["rounds"] == 3
    assert costs["round_ms"] == pytest.approx(13.0)
    assert costs["compute_ms"] == pytest.approx(5.5)
    assert costs["overhead_ms"] == pytest.approx(np.median([6.0, 9.0]))
    assert costs["call_ms"] == pytest.approx(10.0)


def test_the_raw_loopback_floor_moves_real_bytes_and_grows_with_them(bench_sync) -> None:  # type: ignore[no-untyped-def]
    # Execute: the floor's transfer of nothing, and of 4 MB, each by two processes of their own
    empty = bench_sync.raw_loopback_s(0, repeats=5)
    large = bench_sync.raw_loopback_s(4_000_000, repeats=5)

    # Assert: both were measured; sending 4 MB out and back takes longer than an empty message's round trip
    assert 0 < empty < large


def test_a_floor_that_moved_between_repeats_shows_its_range(bench_sync) -> None:  # type: ignore[no-untyped-def]
    # Prepare: two repeats of the direct transport at 2 devices, the floor measured 1.0 and 1.4 ms
    base = {k: 1.0 for k in ("round_ms", "compute_ms", "server_ms", "echo_ms", "overhead_over_echo", "rounds_per_s")}
    base |= {k: 1.0 for k in ("host_cpu_ms_per_round", "device_cpu_ms", "bytes_per_round", "cores_busy")}
    cells = [
        {**base, "devices": 2, "transport": "direct", "overhead_ms": 1.5, "floor_ms": f, "overhead_over_floor": 1.5 / f}
        for f in (1.0, 1.4)
    ]

    # Execute
    (row,) = bench_sync.summarize_rounds({"cells": cells})
    markdown = bench_sync.render_markdown(_results_with({"cells": cells, "bare": []}, bench_sync))

    # Assert: the median floor, its range beside it, and the verdict on the median ratio
    assert (row["floor_ms"], row["floor_min_ms"], row["floor_max_ms"]) == pytest.approx((1.2, 1.0, 1.4))
    assert row["overhead_over_floor"] == pytest.approx((1.5 + 1.5 / 1.4) / 2)
    assert "| 1.20 (1.00-1.40) |" in markdown


def test_the_raw_loopback_script_refuses_a_negative_size() -> None:
    # Execute: the side script itself, asked for -1 bytes
    import subprocess

    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "sides" / "raw_loopback.py"), "-1"], capture_output=True, text=True
    )

    # Assert: it fails naming the value, and measures nothing
    assert done.returncode != 0
    assert "nbytes=-1" in done.stderr
    assert "seconds" not in done.stdout


def test_the_bare_reference_runs_real_rounds_and_is_set_beside_the_direct_transport(bench_sync) -> None:  # type: ignore[no-untyped-def]
    # Prepare: a few digits for two bare devices (real processes, real sockets, edgelab's own step)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (256, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, 256).astype(np.int64)

    # Execute
    runs = bench_sync.run_bare(2, x, y, rounds=10, repeats=2, batch=32)

    # Assert: every run measured its rounds; a round holds its compute and something more
    assert [r["devices"] for r in runs] == [2, 2]
    assert all(r["rounds"] == 10 for r in runs)
    assert all(0 < r["compute_ms"] < r["round_ms"] for r in runs)
    assert all(r["overhead_ms"] > 0 for r in runs)

    # Execute: the summary beside a hand-made direct cell
    part = {
        "bare": [{**r, "floor_ms": 1.0, "overhead_over_floor": r["overhead_ms"]} for r in runs],
        "cells": [
            {
                "devices": 2,
                "transport": "direct",
                **{k: 1.0 for k in ("round_ms", "compute_ms", "server_ms", "floor_ms", "echo_ms")},
                **{k: 1.0 for k in ("overhead_over_echo", "rounds_per_s", "host_cpu_ms_per_round")},
                **{k: 1.0 for k in ("device_cpu_ms", "bytes_per_round", "cores_busy")},
                "overhead_ms": 3.0,
                "overhead_over_floor": 3.0,
            }
        ],
    }
    (row,) = bench_sync.summarize_bare(part)

    # Assert: the excess is direct's overhead minus the bare one's median
    bare_median = float(np.median([r["overhead_ms"] for r in runs]))
    assert row["overhead_ms"] == pytest.approx(bare_median)
    assert row["direct_excess_ms"] == pytest.approx(3.0 - bare_median)
    assert "least plumbing" in bench_sync.render_markdown(_results_with(part, bench_sync))


def test_the_bare_devices_also_run_in_edgelabs_device_workers_and_leave_them_as_they_were(bench_sync, cluster) -> None:  # type: ignore[no-untyped-def]
    # Prepare: a few digits, the module's two device workers, the threads each runs now
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (256, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, 256).astype(np.int64)
    threads_before = cluster.client.run(lambda: __import__("threading").active_count())

    # Execute: the bare rounds with each device a thread in a device worker
    runs = bench_sync.run_bare_in_workers(cluster.client, cluster.devices[:2], x, y, rounds=10, repeats=2, batch=32)

    # Assert: real rounds were measured; once the sockets closed, each worker's device thread ended
    assert [r["devices"] for r in runs] == [2, 2]
    assert all(r["rounds"] == 10 and 0 < r["compute_ms"] < r["round_ms"] for r in runs)
    deadline = time.monotonic() + 10
    while cluster.client.run(lambda: __import__("threading").active_count()) != threads_before:
        assert time.monotonic() < deadline, "a bare device thread outlived its socket"
        time.sleep(0.1)

    # Execute: the summary of processes and workers side by side
    part = {
        "bare": [
            {"devices": 2, "round_ms": 3.0, "compute_ms": 2.0, "overhead_ms": 1.0, "floor_ms": 1.0},
            {**runs[0], "floor_ms": 1.0, "hosts": "workers"},
            {**runs[1], "floor_ms": 1.0, "hosts": "workers"},
        ],
        "cells": [],
    }
    for run in part["bare"]:
        run["overhead_over_floor"] = run["overhead_ms"]
    (row,) = bench_sync.summarize_bare(part)

    # Assert: a run without a host is one of plain processes (results saved before); the workers' apart
    assert row["overhead_ms"] == 1.0
    assert row["in_workers_overhead_ms"] == pytest.approx(np.median([r["overhead_ms"] for r in runs]))
    assert "In workers" in bench_sync.render_markdown(_results_with(part, bench_sync))


def _results_with(part, bench_sync):  # type: ignore[no-untyped-def]
    part = {**part, "cores": 2, "rtt_ms": 0.4, "channel_rtt_ms": 0.2}
    part["summary"] = bench_sync.summarize_rounds(part)
    host = {"date_utc": "now", "processor": "x86_64", "cpu_count": 2, "tensorflow": "2", "distributed": "2"}
    host |= {"loadavg_start": [0.0], "loadavg_end": [0.0], "benchmark_wall_s": 60.0}
    return {"config": {"repeats": 2, "rounds": 10}, "dataset": {"source": "test"}, "host": host, "rounds": part}


def _stamped_rounds(n_rounds: int) -> tuple[list[tuple[str, int, float]], list[dict[str, float]]]:
    """A client's and two devices' stamps (ms apart, in seconds) of ``n_rounds`` rounds 10 ms long, each stage known."""
    events, calls = [], []
    for r in range(n_rounds):
        t = r * 0.010
        events += [("round0", 0, t), ("send0", 1, t + 0.0001), ("send1", 1, t + 0.0003)]
        events += [("send0", 2, t + 0.0003), ("send1", 2, t + 0.0005)]
        events += [("reply", 1, t + 0.0030), ("reply", 2, t + 0.0032), ("round1", 0, t + 0.00325)]
        events += [("mean0", 0, t + 0.0033), ("mean1", 0, t + 0.00345)]
        events += [("send0", 1, t + 0.0060), ("send1", 1, t + 0.0061), ("reply", 1, t + 0.0062)]  # not a round's
        for port, sent_at in ((1, 0.0003), (2, 0.0005)):
            arrived = t + sent_at + 0.0001
            returned = arrived + 0.00007 + 0.002 + 0.00013
            call = {"port": port, "in": arrived, "decoded": arrived + 0.00005, "step_call": arrived + 0.00007}
            call |= {"step": 0.002, "returned": returned, "encoded": returned + 0.00002}
            call["sent"] = (t + 0.0030 if port == 1 else t + 0.0032) - 0.0002
            calls.append(call)
    return events, calls


def test_a_rounds_stages_are_read_from_the_stamps_of_both_ends(bench_sync) -> None:  # type: ignore[no-untyped-def]
    # Prepare: 30 rounds of two devices, every stage of every round of a known length
    events, calls = _stamped_rounds(30)

    # Execute
    stages = bench_sync.stage_times(events, calls, warmup=5)

    # Assert: each stage as it was stamped; a call outside the rounds (an evaluation) counts nowhere
    expected = {
        "between_rounds": 10.1 - 3.2,  # the last reply read to the next round's first call starting out
        "mean_and_step": 0.15,
        "sending": 0.4,
        "call_in_flight": 0.1,
        "decode": 0.05,
        "to_step": 0.02,
        "step": 2.0,
        "bookkeeping": 0.13,
        "encode": 0.02,
        "send_reply": 0.18,
        "reply_in_flight": 0.2,
    }
    assert stages == pytest.approx(expected, abs=1e-9)


def test_stages_need_more_rounds_than_the_warmup_and_a_short_run_leaves_out_a_quarter(bench_sync) -> None:  # type: ignore[no-untyped-def]
    events, calls = _stamped_rounds(12)
    with pytest.raises(ValueError, match="needs more than 21 whole rounds, got 12"):
        bench_sync.stage_times(events, calls, warmup=20)

    # The benchmark's shortest runs (--rounds 10): a quarter left out, the rest measured
    stages = bench_sync.stage_times(*_stamped_rounds(10))
    assert stages["step"] == pytest.approx(2.0)
    assert stages["between_rounds"] == pytest.approx(6.9)


def test_a_traced_run_has_every_stage_and_leaves_both_ends_as_they_were(bench_sync, cluster, dataset) -> None:  # type: ignore[no-untyped-def]
    # Prepare: direct rounds of two devices on the module's real cluster (32 rounds: 2 epochs of 16)
    import edgelab.runtime.channel as channel
    from edgelab.training.data_parallel import train

    def untraced() -> dict[str, bool]:
        import edgelab.runtime.channel
        import edgelab.runtime.protocol
        import edgelab.runtime.round_wire
        import edgelab.runtime.tasks

        return {
            "frames": edgelab.runtime.channel.receive_frame.__module__ == "edgelab.runtime.channel",
            "rounds": edgelab.runtime.protocol.resolve(edgelab.runtime.round_wire.ROUND_FN).func
            is edgelab.runtime.tasks.train_round,
            "replies": edgelab.runtime.round_wire.encode_reply.__module__ == "edgelab.runtime.round_wire",
        }

    cfg = TrainConfig(model="mlp", n_devices=2, batch_size=8, epochs=2, worker_data="full")
    sending = channel.send_message

    # Execute
    run, events, calls = bench_sync.trace_rounds(
        cluster.client, lambda: train(cluster, dataset, cfg, transport="direct", log=lambda _: None)
    )
    stages = bench_sync.stage_times(events, calls, warmup=4)

    # Assert: every stage was seen and took time; the step is the records' own wall
    assert set(stages) == {*bench_sync.CLIENT_STAGES, *bench_sync.DEVICE_STAGES}
    assert all(np.isfinite(v) and v > 0 for v in stages.values()), stages
    assert len(calls) == 2 * run.records["round"].nunique()
    steps = [c["step"] for c in calls]
    assert 1e3 * min(steps) <= stages["step"] <= 1e3 * max(steps)
    assert set(steps) <= set(run.records["wall_s"])
    # Assert: no wrapper is left on either end
    assert channel.send_message is sending
    assert all(all(checks.values()) for checks in cluster.client.run(untraced).values())


def test_the_stages_summary_puts_edgelabs_own_code_beside_the_target(bench_sync) -> None:  # type: ignore[no-untyped-def]
    # Prepare: a direct cell whose floor is 1 ms and one traced run of 2 devices
    events, calls = _stamped_rounds(30)
    part = {
        "cells": [
            {
                "devices": 2,
                "transport": "direct",
                **{k: 1.0 for k in ("round_ms", "compute_ms", "server_ms", "floor_ms", "echo_ms")},
                **{k: 1.0 for k in ("overhead_over_echo", "rounds_per_s", "host_cpu_ms_per_round")},
                **{k: 1.0 for k in ("device_cpu_ms", "bytes_per_round", "cores_busy")},
                "overhead_ms": 3.0,
                "overhead_over_floor": 3.0,
            }
        ],
        "bare": [],
        "stages": [{"devices": 2, "round_ms": 10.0, "overhead_ms": 8.0, **bench_sync.stage_times(events, calls)}],
    }

    # Execute
    (row,) = bench_sync.summarize_stages(part)

    # Assert: own code = between rounds but the mean, plus decode, to step, bookkeeping and encode
    own = (6.9 - 0.15) + 0.05 + 0.02 + 0.13 + 0.02
    assert row["own_code_ms"] == pytest.approx(own)
    assert row["overhead_without_own_ms"] == pytest.approx(8.0 - own)
    assert row["target_ms"] == pytest.approx(1.5)
    assert "Where the direct transport's round goes" in bench_sync.render_markdown(_results_with(part, bench_sync))


def test_the_peer_tables_show_steady_state_set_up_and_the_batch_each_side_saw(bench_sync) -> None:  # type: ignore[no-untyped-def]
    # Prepare: part B and part C results as the benchmark stores them (two repeats each, hand-made)
    b: dict = {"steps": 1000, "scheduling": "normal", "best_transport": "direct", "ratio": 2.0}
    for side, rate, setup, batch in (
        ("direct", 400.0, 10.0, [64]),
        ("allreduce", 300.0, 12.0, [64]),
        ("mwms", 200.0, 20.0, [64]),
    ):
        b[side] = [{"steps_per_s": rate, "with_setup_s": setup, "batch_seen": batch}] * 2
        b[f"{side}_steps_per_s"], b[f"{side}_with_setup_s"] = rate, setup
        b[f"{side}_ratio"], b[f"{side}_setup_ratio"] = rate / 200.0, 20.0 / setup
        b[f"{side}_paired_ratios"] = [rate / 200.0] * 2
    c: dict = {"clients": 10, "samples": 19200, "rounds": 5, "rounds_ratio": 2.2, "fit_rounds_ratio": 2.6}
    c["startup_ratio"] = 3.0
    for side in bench_sync.FEDAVG_SIDES:
        c[side] = [{}, {}]
        for key in ("later_round_s", "round1_s", "to_round1_end_s", "accuracy"):
            c[f"{side}_{key}"] = 0.5
    results = _results_with({"cells": [], "bare": []}, bench_sync) | {"mwms": b, "fedavg": c}

    # Execute
    markdown = bench_sync.render_markdown(results)

    # Assert: both ratios, both clocks, the batch each side saw, and both Flower clients
    assert "| edgelab, parameter server (transport direct) | 400.0 | 2.50 | 2.00 | 10.0 | 2.00 | [64] |" in markdown
    assert (
        "| MultiWorkerMirroredStrategy (ring all-reduce, 2 processes) | 200.0 | 5.00 | 1.00 | 20.0 | 1.00 | [64] |"
        in markdown
    )
    assert "both under the kernel's default scheduling policy" in markdown
    assert "Flower, compiled-loop client" in markdown and "Flower, fit client" in markdown
    assert "against Flower's Keras fit client 2.60" in markdown

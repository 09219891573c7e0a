"""Zhang 2018's fault tolerance on real workers: failing devices are really killed, every answer arrives once."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from edgelab.cluster.device_cluster import device_resource
from edgelab.common.errors import ConfigError
from edgelab.emulation.tiers import ZHANG2018, HierarchySpec
from edgelab.hierarchy.fault_tolerance import FaultClock, check_job, default_fail_after, failing_devices, run_job
from edgelab.hierarchy.tiered import deploy
from edgelab.papers.zhang2018.faults import FaultsParams
from edgelab.runtime.devices import start_hierarchy

END = HierarchySpec((replace(ZHANG2018.tiers[0], devices=4),), "four-ends")
DEVICES = ["end-0", "end-1", "end-2", "end-3"]
IMAGES = np.random.default_rng(0).integers(0, 256, size=(80, 32, 32, 3), dtype=np.uint8)  # 16 tasks of 5
CLOCK = FaultClock(per_image_s=0.01, timeout_s=0.5, heartbeat_s=0.2)


def _tiny() -> object:
    import keras

    return keras.Sequential([keras.Input((32, 32, 3)), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(20)])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: check_job("Retry", DEVICES, IMAGES, 5, 0, None), r"method='Retry' is not allowed: one of Without"),
        (lambda: check_job("Monitor", DEVICES, IMAGES, 5, 5, None), r"failures=5 is not allowed: an integer from 0 to"),
        (lambda: check_job("Monitor", DEVICES, IMAGES[:4], 1, 1, None), r"fail_after=0 is not allowed: .* give more"),
        (lambda: check_job("Monitor", DEVICES, IMAGES.astype(float), 5, 1, None), r"images='float64 array"),
        (lambda: check_job("Monitor", [], IMAGES, 5, 0, None), r"devices=\[\] is not allowed"),
        (
            lambda: FaultClock(per_image_s=0.01, timeout_s=-0.5),
            r"timeout_s=-0.5 is not allowed: a number of seconds > 0",
        ),
        (lambda: FaultClock(per_image_s=0.01, latency_s=math.nan), r"latency_s=nan is not allowed"),
        (lambda: FaultsParams(failures=(9,)), r"failures=9 is not allowed: integers from 0 to end_devices \(8\)"),
        (lambda: FaultsParams(methods=("Gossip",)), r"methods='Gossip' is not allowed"),
        (lambda: FaultsParams(heartbeat_s=0), r"heartbeat_s=0 is not allowed"),
    ],
)
def test_bad_input_is_refused_before_any_cluster_work(call: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        call()  # type: ignore[operator]


def test_a_failing_device_answers_half_its_share_and_the_seed_picks_which() -> None:
    assert default_fail_after(200, 8) == 12  # the report: 12 of 25
    assert failing_devices(DEVICES, 2, [0, 2, 0]) == failing_devices(DEVICES, 2, [0, 2, 0])
    assert len(set(failing_devices(DEVICES, 3, 7))) == 3
    assert failing_devices(DEVICES, 0, 1) == []


@pytest.fixture(scope="module")
def ends() -> Iterator[object]:
    with start_hierarchy(END, dashboard_address="127.0.0.1:0") as cluster:
        deployment = deploy(cluster, END, {"end": _tiny}, tiers=("end",), batch_sizes=(5,))
        yield deployment


@pytest.fixture(scope="module")
def reference(ends: object) -> np.ndarray:
    return run_job(ends, DEVICES, IMAGES, "Without", CLOCK, task_size=5).answers  # type: ignore[arg-type]


@pytest.mark.integration
@pytest.mark.parametrize("method", ["Reassign", "Monitor", "Dask"])
def test_a_job_with_killed_devices_finishes_with_every_answer_once(
    ends: object, reference: np.ndarray, method: str
) -> None:
    # Prepare: every device up, two of the four set to fail after 2 of their 4 tasks
    ends.restore(DEVICES)  # type: ignore[attr-defined]

    # Execute
    run = run_job(ends, DEVICES, IMAGES, method, CLOCK, task_size=5, failures=2, seed=3)  # type: ignore[arg-type]

    # Assert: the failing devices' workers are really gone
    assert sorted(k["device"] for k in run.kills) == sorted(run.failing) == failing_devices(DEVICES, 2, 3)
    for kill in run.kills:
        with pytest.raises(ProcessLookupError):
            os.kill(kill["pid"], 0)
        assert kill["answered"] == 2
    # ... yet every task is answered exactly once, by a device alive at the time, with the same answers
    assert run.finished and math.isfinite(run.duration_s)
    assert sorted(run.tasks["task"]) == list(range(16)) and (run.tasks["device"] != "").all()
    assert np.array_equal(run.answers, reference)
    late = run.tasks[run.tasks["device"].isin(run.failing)]
    assert (late["end_s"] <= max(k["at_s"] for k in run.kills) + 1e-9).all()
    assert run.tasks.groupby("device").size()[run.failing].eq(2).all()
    # ... and it took longer on the clock than with every device up (4 tasks of 0.05 s each)
    assert run.duration_s > 4 * 0.05


@pytest.mark.integration
def test_without_handling_the_job_never_finishes_and_says_what_was_lost(ends: object) -> None:
    ends.restore(DEVICES)  # type: ignore[attr-defined]

    run = run_job(ends, DEVICES, IMAGES, "Without", CLOCK, task_size=5, failures=1, seed=0)  # type: ignore[arg-type]

    assert not run.finished and run.duration_s == math.inf
    lost = run.tasks[run.tasks["device"] == ""]
    assert len(lost) == 2  # the failed device's last 2 of 4 tasks
    assert (run.answers.reshape(16, 5)[lost["task"].to_numpy()] == -1).all()
    assert (run.answers.reshape(16, 5)[run.tasks["device"] != ""] >= 0).all()


@pytest.mark.integration
def test_reassign_replays_exactly_and_its_excess_is_the_timeouts_and_the_work_redone(ends: object) -> None:
    runs = []
    for _ in range(2):
        ends.restore(DEVICES)  # type: ignore[attr-defined]
        runs.append(run_job(ends, DEVICES, IMAGES, "Reassign", CLOCK, task_size=5, failures=3, seed=1))  # type: ignore[arg-type]
    base = 4 * 5 * CLOCK.per_image_s

    first, second = runs
    assert first.events.drop(columns="time_s").equals(second.events.drop(columns="time_s"))
    assert np.allclose(first.events["time_s"], second.events["time_s"])
    assert first.duration_s == pytest.approx(second.duration_s)
    # Three of four dead: the 6 lost tasks go round all four devices, three sends in four time out
    assert first.timeouts == (first.events["event"] == "timeout").sum() >= 6
    assert first.duration_s >= base + first.timeouts * CLOCK.timeout_s
    assert (first.tasks["sends"] >= 1).all() and first.tasks["sends"].sum() == 16 + first.timeouts + 6


@pytest.mark.integration
def test_monitor_finds_a_dead_device_at_its_next_query_and_never_times_out(ends: object) -> None:
    ends.restore(DEVICES)  # type: ignore[attr-defined]

    run = run_job(ends, DEVICES, IMAGES, "Monitor", CLOCK, task_size=5, failures=2, seed=3)  # type: ignore[arg-type]

    found = run.events[run.events["event"] == "found dead"]
    assert sorted(found["device"]) == sorted(run.failing)
    for kill in run.kills:
        at = found.loc[found["device"] == kill["device"], "time_s"].item()
        assert kill["at_s"] <= at < kill["at_s"] + CLOCK.heartbeat_s + 1e-9
        assert at == pytest.approx(round(at / CLOCK.heartbeat_s) * CLOCK.heartbeat_s)
    assert run.timeouts == 0 and run.queries > len(DEVICES)


@pytest.mark.integration
def test_restore_brings_back_exactly_the_devices_a_job_shut_down(ends: object) -> None:
    ends.restore(DEVICES)  # type: ignore[attr-defined]
    run = run_job(ends, DEVICES, IMAGES, "Monitor", CLOCK, task_size=5, failures=2, seed=5)  # type: ignore[arg-type]

    back = ends.restore(DEVICES)  # type: ignore[attr-defined]

    assert sorted(back) == sorted(run.failing)
    assert ends.restore(DEVICES) == []  # type: ignore[attr-defined]
    again = run_job(ends, DEVICES, IMAGES, "Without", CLOCK, task_size=5)  # type: ignore[arg-type]
    assert again.finished and sorted(set(again.tasks["device"])) == DEVICES


@pytest.mark.integration
def test_a_device_works_through_many_tasks_in_the_order_it_got_them(ends: object) -> None:
    # Prepare: 50 tasks a device, queued behind a second of work on each device, so that the device chooses the
    # order (Dask gives submissions within 60 ms one generation and would order those by key)
    many = np.random.default_rng(1).integers(0, 256, size=(200, 32, 32, 3), dtype=np.uint8)
    ends.restore(DEVICES)  # type: ignore[attr-defined]
    client = ends.cluster.client  # type: ignore[attr-defined]
    busy = [client.submit(time.sleep, 1.0, resources={device_resource(d): 1}, pure=False) for d in DEVICES]

    # Execute: a failing device must give exactly its first 25 answers before it switches off
    run = run_job(ends, DEVICES, many, "Reassign", CLOCK, task_size=1, failures=1, seed=2)  # type: ignore[arg-type]

    # Assert
    client.cancel(busy)
    assert run.finished
    failed = run.failing[0]
    first = run.tasks[run.tasks["device"] == failed]["task"].tolist()
    assert first == [i for i in range(200) if DEVICES[i % 4] == failed][:25]

"""Tests for edgelab.emulation.timeline: round times, composed run times, utilisation and calibration."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from edgelab.common.errors import ConfigError
from edgelab.emulation.profiles import get_profile
from edgelab.emulation.timeline import (
    RoundGrid,
    Topology,
    compose,
    emulated_cpu_percent,
    round_time,
    solve_speed_factor,
    wire_bytes,
)

# 0.008 Mbit/s = 1000 B/s, so byte counts read as milliseconds.
SLOW = dataclasses.replace(get_profile("pi3b"), link_mbps=0.008, latency_s=0.01)
NO_LATENCY = dataclasses.replace(get_profile("pi3b"), latency_s=0.0)
# The hand-computed cases below put the server on a machine of its own, so every device's traffic is on the wire.
HALF = {"duplex": "half", "master_is_device": False}
FULL = {"duplex": "full", "master_is_device": False}


def _rt(
    compute: list[float],
    pull: list[float],
    push: list[float],
    ps_link: str,
    *,
    rate: float,
    latency: float,
    duplex: str = "half",
    master_is_device: bool = False,
) -> float:
    t, _ = round_time(
        np.array(compute, dtype=float),
        np.array(pull, dtype=float),
        np.array(push, dtype=float),
        link_bytes_per_s=rate,
        latency_s=latency,
        topology=Topology(ps_link, duplex, master_is_device),
    )
    return t


def _records() -> pd.DataFrame:
    """2 rounds x 2 devices, rows shuffled so compose has to sort them."""
    rows = [
        # round, epoch, device_index, device, cpu_s, bytes_received, bytes_sent
        (1, 0, 1, "pi3b-1", 0.05, 100, 50),
        (0, 0, 0, "pi3b-0", 0.1, 100, 50),
        (1, 0, 0, "pi3b-0", 0.3, 100, 50),
        (0, 0, 1, "pi3b-1", 0.2, 100, 50),
    ]
    cols = ["round", "epoch", "device_index", "device", "cpu_s", "bytes_received", "bytes_sent"]
    return pd.DataFrame(rows, columns=cols)


# ---------------------------------------------------------------- round_time


@pytest.mark.parametrize("ps_link", ["shared", "per_device"])
def test_one_device_is_pull_compute_push(ps_link: str) -> None:
    # Prepare: pull = 0.5 + 100/100 = 1.5 s, push = 0.5 + 50/100 = 1.0 s
    compute, pull, push = [2.0], [100.0], [50.0]

    # Execute
    t, ready = round_time(
        np.array(compute),
        np.array(pull),
        np.array(push),
        link_bytes_per_s=100.0,
        latency_s=0.5,
        topology=Topology(ps_link, master_is_device=False),
    )

    # Assert
    assert t == pytest.approx(1.5 + 2.0 + 1.0)
    np.testing.assert_allclose(ready, [3.5])


def test_two_devices_shared_link_docstring_case() -> None:
    # Execute / Assert: pulls end at 1 and 2, ready at 2 and 3, pushes 2-3 and 3-4
    assert _rt([1.0, 1.0], [1, 1], [1, 1], "shared", rate=1.0, latency=0.0) == pytest.approx(4.0)
    # Each device only waits for its own link: 1 + 1 + 1
    assert _rt([1.0, 1.0], [1, 1], [1, 1], "per_device", rate=1.0, latency=0.0) == pytest.approx(3.0)


def test_shared_link_with_latency_and_uneven_compute() -> None:
    # Prepare: pull = 0.25 + 2/2 = 1.25 s, push = 0.25 + 1/2 = 0.75 s per device
    compute, pull, push = np.array([3.0, 0.5]), np.array([2.0, 2.0]), np.array([1.0, 1.0])

    # Execute
    t, ready = round_time(compute, pull, push, link_bytes_per_s=2.0, latency_s=0.25, topology=Topology(**HALF))

    # Assert: pulls end at 1.25 and 2.5 -> ready at 4.25 and 3.0; device 1 pushes
    # first (3.0 -> 3.75), device 0 at 4.25 -> 5.0
    np.testing.assert_allclose(ready, [4.25, 3.0])
    assert t == pytest.approx(5.0)


def test_half_duplex_pushes_queue_behind_the_pulls() -> None:
    # Prepare: same pulls/pushes as above, compute 0.5 s each
    # ready = [1.75, 3.0]; link free at 2.5 -> device 0 pushes 2.5-3.25, device 1 3.25-4.0
    # Execute / Assert
    assert _rt([0.5, 0.5], [2, 2], [1, 1], "shared", rate=2.0, latency=0.25) == pytest.approx(4.0)
    # per device: 1.25 + 0.5 + 0.75
    assert _rt([0.5, 0.5], [2, 2], [1, 1], "per_device", rate=2.0, latency=0.25) == pytest.approx(2.5)


def test_per_device_is_max_of_own_pull_compute_push() -> None:
    # Prepare: rate 10 B/s, latency 0.1
    compute, pull, push = [1.0, 0.2, 0.5], [10.0, 30.0, 0.0], [20.0, 0.0, 40.0]
    own = [0.1 + p / 10 + c + 0.1 + q / 10 for c, p, q in zip(compute, pull, push, strict=True)]

    # Execute
    t = _rt(compute, pull, push, "per_device", rate=10.0, latency=0.1)

    # Assert
    assert own == pytest.approx([4.2, 3.4, 4.7])
    assert t == pytest.approx(4.7)


def test_full_duplex_push_overlaps_the_next_pull() -> None:
    # Prepare: as above; ready = [1.75, 3.0]; device 0 pushes 1.75-2.5 while the
    # server still sends device 1's weights (until 2.5); device 1 pushes 3.0-3.75
    # Execute / Assert
    assert _rt([0.5, 0.5], [2, 2], [1, 1], "shared", rate=2.0, latency=0.25, duplex="full") == pytest.approx(3.75)


@pytest.mark.parametrize("n_devices", [1, 2, 3, 4])
def test_shared_transfer_time_grows_with_device_count(n_devices: int) -> None:
    # Prepare: no compute, 1 s to pull and 2 s to push per device
    zeros, pull, push = [0.0] * n_devices, [1.0] * n_devices, [2.0] * n_devices

    # Execute
    half = _rt(zeros, pull, push, "shared", rate=1.0, latency=0.0, duplex="half")
    full = _rt(zeros, pull, push, "shared", rate=1.0, latency=0.0, duplex="full")
    per_device = _rt(zeros, pull, push, "per_device", rate=1.0, latency=0.0)

    # Assert: half duplex adds pull + push per device; full duplex only the
    # larger of the two (device i is ready at i + 1, pushes queue from 1 s on)
    assert half == pytest.approx(3.0 * n_devices)
    assert full == pytest.approx(1.0 + 2.0 * n_devices)
    assert per_device == pytest.approx(3.0)


@pytest.mark.parametrize("seed", range(8))
def test_full_duplex_never_slower_than_half(seed: int) -> None:
    # Prepare
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 7))
    compute = rng.uniform(0, 3, n).tolist()
    pull, push = rng.integers(0, 1000, n).tolist(), rng.integers(0, 1000, n).tolist()

    # Execute
    half = _rt(compute, pull, push, "shared", rate=500.0, latency=0.01, duplex="half")
    full = _rt(compute, pull, push, "shared", rate=500.0, latency=0.01, duplex="full")

    # Assert
    assert full <= half + 1e-12


@pytest.mark.parametrize("duplex", ["full", "half"])
@pytest.mark.parametrize("ps_link", ["shared", "per_device"])
def test_one_device_pays_no_network_when_the_master_is_that_device(ps_link: str, duplex: str) -> None:
    # Execute: 2 s of compute, 100 B each way at 100 B/s with 0.5 s latency
    on_device = _rt([2.0], [100], [100], ps_link, rate=100.0, latency=0.5, duplex=duplex, master_is_device=True)
    separate = _rt([2.0], [100], [100], ps_link, rate=100.0, latency=0.5, duplex=duplex, master_is_device=False)

    # Assert: the stated choice decides whether N=1 pays for synchronization
    assert on_device == pytest.approx(2.0)
    assert separate == pytest.approx(1.5 + 2.0 + 1.5)


def test_master_device_exchange_is_local_and_others_cross_its_link() -> None:
    # Prepare: 3 devices, 1 s compute, 1 B each way at 1 B/s; device 0 hosts the server
    # Execute
    t = _rt(
        [1.0, 1.0, 1.0], [1, 1, 1], [1, 1, 1], "shared", rate=1.0, latency=0.0, duplex="full", master_is_device=True
    )

    # Assert: device 0 ready at 1 (local); pulls to 1 and 2 end at 1 and 2, ready at 2 and 3;
    # their pushes take 2-3 and 3-4
    assert t == pytest.approx(4.0)


@pytest.mark.parametrize("seed", range(8))
def test_shared_never_faster_than_per_device(seed: int) -> None:
    # Prepare
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 7))
    compute = rng.uniform(0, 3, n).tolist()
    pull = rng.integers(0, 1000, n).tolist()
    push = rng.integers(0, 1000, n).tolist()
    latency = float(rng.uniform(0, 0.1))

    # Execute
    shared = _rt(compute, pull, push, "shared", rate=500.0, latency=latency)
    per_device = _rt(compute, pull, push, "per_device", rate=500.0, latency=latency)

    # Assert
    assert shared >= per_device - 1e-12
    assert per_device >= max(compute)


@pytest.mark.parametrize(("field", "value"), [("ps_link", "ring"), ("duplex", "simplex"), ("master_is_device", "yes")])
def test_bad_topology_names_the_parameter(field: str, value: object) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match=field) as info:
        Topology(**{field: value})
    assert info.value.parameter == field and info.value.value == value


@pytest.mark.parametrize("factor", [0.0, -1.0])
def test_compose_rejects_non_positive_speed_factor(factor: float) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match="speed_factor"):
        compose(_records(), SLOW, speed_factor=factor)


# ---------------------------------------------------------------- compose


def test_compose_hand_computed_shared() -> None:
    # Prepare: 1000 B/s, 10 ms latency -> pull 0.11 s, push 0.06 s per device.
    # Round 0: compute [1, 2]; ready [1.11, 2.22]; pushes end 1.17, then 2.28.
    # Round 1: compute [3, 0.5]; ready [3.11, 0.72]; device 1 pushes 0.72-0.78,
    #          device 0 3.11-3.17.
    records = _records()

    # Execute
    out = compose(records, SLOW, speed_factor=10.0, topology=Topology(**HALF))

    # Assert
    assert out["round"].tolist() == [0, 1]
    assert out["epoch"].tolist() == [0, 0]
    np.testing.assert_allclose(out["round_s"], [2.28, 3.17])
    np.testing.assert_allclose(out["compute_max_s"], [2.0, 3.0])
    np.testing.assert_allclose(out["compute_mean_s"], [1.5, 1.75])
    np.testing.assert_allclose(out["comm_s"], [0.28, 0.17], atol=1e-12)
    np.testing.assert_allclose(out["elapsed_s"], [2.28, 5.45])


def test_a_round_grid_composes_as_its_records_do_and_a_repeated_record_counts_once() -> None:
    # Prepare: the records, then with round 1 of device 1 repeated (a later copy, ten times as slow) and
    # device 1 absent from a third round
    records = _records()
    third = pd.DataFrame([(2, 1, 0, "pi3b-0", 0.1, 100, 50)], columns=records.columns)
    repeated = pd.concat([records, records.iloc[[0]].assign(cpu_s=0.5), third], ignore_index=True)
    compute = np.arange(len(repeated), dtype=float) + 1.0  # per record, in the records' order

    # Execute
    grid = RoundGrid.of(repeated)
    out = compose(grid, SLOW, speed_factor=10.0, topology=Topology(**HALF))
    modelled = compose(grid, SLOW, topology=Topology(**HALF), compute_s=compute)

    # Assert: as composed from the records, the first copy counted; the third round is device 0's alone
    pd.testing.assert_frame_equal(out, compose(repeated, SLOW, speed_factor=10.0, topology=Topology(**HALF)))
    np.testing.assert_allclose(out["round_s"][:2], [2.28, 3.17])
    assert out["epoch"].tolist() == [0, 0, 1]
    assert out["compute_mean_s"].iloc[2] == pytest.approx(1.0)
    np.testing.assert_array_equal(modelled["compute_max_s"], [4.0, 3.0, 6.0])  # records 2/4, 3/1, then 6


def test_compose_hand_computed_per_device() -> None:
    # Prepare: round 0: max(0.11 + [1, 2] + 0.06) = 2.17; round 1: 0.11 + 3 + 0.06 = 3.17
    records = _records()

    # Execute
    out = compose(records, SLOW, speed_factor=10.0, topology=Topology("per_device", master_is_device=False))

    # Assert
    np.testing.assert_allclose(out["round_s"], [2.17, 3.17])
    np.testing.assert_allclose(out["elapsed_s"], [2.17, 5.34])


@pytest.mark.parametrize("ps_link", ["shared", "per_device"])
@pytest.mark.parametrize("factor", [0.5, 1.0, 3.0])
def test_compose_is_linear_in_compute_without_bytes(ps_link: str, factor: float) -> None:
    # Prepare: no bytes and no latency, so rounds are pure compute
    records = _records().assign(bytes_received=0, bytes_sent=0)

    # Execute
    out = compose(records, NO_LATENCY, speed_factor=factor, topology=Topology(ps_link))

    # Assert: round = factor x slowest device's CPU seconds (0.2, then 0.3)
    np.testing.assert_allclose(out["round_s"], [0.2 * factor, 0.3 * factor])
    np.testing.assert_allclose(out["elapsed_s"], [0.2 * factor, 0.5 * factor])
    np.testing.assert_allclose(out["comm_s"], [0.0, 0.0], atol=1e-12)


# ---------------------------------------------------------------- utilisation


def test_device_busy_whole_time_on_four_cores_is_25_percent() -> None:
    # Prepare: pi3b-0 computes 0.4 CPU s x 10 = 4 s, pi3b-1 0.25 x 10 = 2.5 s
    records = _records()

    # Execute
    pct = emulated_cpu_percent(records, 4.0, speed_factor=10.0, cores=4)

    # Assert
    assert pct.name == "cpu_pct"
    assert pct["pi3b-0"] == pytest.approx(25.0)
    assert pct["pi3b-1"] == pytest.approx(100.0 * 2.5 / 16.0)


# ---------------------------------------------------------------- solve_speed_factor


@pytest.mark.parametrize("ps_link", ["shared", "per_device"])
@pytest.mark.parametrize("true_factor", [0.7, 7.0, 70.0])
def test_solve_speed_factor_recovers_known_factor(ps_link: str, true_factor: float) -> None:
    # Prepare
    records = _records()

    def elapsed_for(f: float) -> float:
        topology = Topology(ps_link, master_is_device=False)
        return float(compose(records, SLOW, speed_factor=f, topology=topology)["elapsed_s"].iloc[-1])

    target = elapsed_for(true_factor)

    # Execute
    found = solve_speed_factor(elapsed_for, target)

    # Assert
    assert found == pytest.approx(true_factor, rel=1e-6)


def test_solve_speed_factor_none_when_comm_alone_exceeds_target() -> None:
    # Prepare: communication alone is 2 x (0.11 + 0.11 + 0.06 + 0.06) = 0.56 s (shared, half duplex)
    records = _records()

    def elapsed_for(f: float) -> float:
        return float(compose(records, SLOW, speed_factor=f, topology=Topology(**HALF))["elapsed_s"].iloc[-1])

    # Execute
    found = solve_speed_factor(elapsed_for, 0.5)

    # Assert
    assert elapsed_for(1e-3) > 0.5
    assert found is None


def test_solve_speed_factor_none_beyond_high() -> None:
    # Execute / Assert
    assert solve_speed_factor(lambda f: f, 10.0, high=5.0) is None


# ---------------------------------------------------------------- wire bytes


def test_wire_bytes_put_the_servers_side_on_the_master_devices_link() -> None:
    # Prepare: 3 devices; each pulls 100 B and pushes 50 B per round, 2 rounds
    rows = [(r, 0, i, f"pi3b-{i}", 0.1, 100, 50) for r in range(2) for i in range(3)]
    records = pd.DataFrame(
        rows, columns=["round", "epoch", "device_index", "device", "cpu_s", "bytes_received", "bytes_sent"]
    )

    # Execute
    on_device = wire_bytes(records, Topology(master_is_device=True))
    separate = wire_bytes(records, Topology(master_is_device=False))

    # Assert: the master sends the 2 others' pulls and receives their pushes, its own stay local
    assert on_device.loc["pi3b-0"].tolist() == [2 * 2 * 100, 2 * 2 * 50]
    assert on_device.loc["pi3b-1"].tolist() == [2 * 50, 2 * 100]
    assert separate.loc["pi3b-0"].tolist() == [2 * 50, 2 * 100]


def test_wire_bytes_of_one_device_with_the_master_on_it_are_zero() -> None:
    # Prepare
    records = _records()[_records()["device"] == "pi3b-0"]

    # Execute
    out = wire_bytes(records, Topology(master_is_device=True))

    # Assert
    assert out.loc["pi3b-0"].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "topology",
    [Topology(p, d, m) for p in ("shared", "per_device") for d in ("full", "half") for m in (True, False)],
    ids=str,
)
def test_compose_equals_round_time_round_by_round(seed: int, topology: Topology) -> None:
    # Prepare: random rounds where devices with the smaller shards sit the last rounds out
    rng = np.random.default_rng(seed)
    n, rounds = int(rng.integers(1, 6)), int(rng.integers(1, 8))
    steps = sorted(rng.integers(1, rounds + 1, n), reverse=True)
    rows = [
        (r, 0, i, f"pi3b-{i}", rng.uniform(0, 0.5), int(rng.integers(0, 2000)), int(rng.integers(0, 2000)))
        for r in range(rounds)
        for i in range(n)
        if r < steps[i]
    ]
    records = pd.DataFrame(
        rows, columns=["round", "epoch", "device_index", "device", "cpu_s", "bytes_received", "bytes_sent"]
    ).sample(frac=1.0, random_state=seed)

    # Execute
    out = compose(records, SLOW, speed_factor=2.0, topology=topology)

    # Assert: each round as round_time computes it on its own
    for rnd, group in records.sort_values(["round", "device_index"]).groupby("round"):
        here = (
            topology if int(group["device_index"].iloc[0]) == 0 else Topology(topology.ps_link, topology.duplex, False)
        )
        expected, _ = round_time(
            group["cpu_s"].to_numpy() * 2.0,
            group["bytes_received"].to_numpy(dtype=float),
            group["bytes_sent"].to_numpy(dtype=float),
            link_bytes_per_s=SLOW.link_bytes_per_s,
            latency_s=SLOW.latency_s,
            topology=here,
        )
        assert out.set_index("round").loc[rnd, "round_s"] == pytest.approx(expected)

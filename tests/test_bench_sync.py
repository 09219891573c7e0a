"""The synchronization benchmark's own checks and arithmetic (benchmarks/bench_sync.py), without running it."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from edgelab.errors import ConfigError
from edgelab.train import TrainConfig, TrainRun

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench_sync():  # type: ignore[no-untyped-def]
    # The benchmark caps TensorFlow's threads on import, for its own process: not for this one.
    saved = dict(os.environ)
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_sync

        yield bench_sync
    finally:
        sys.path.remove(str(BENCHMARKS))
        os.environ.clear()
        os.environ.update(saved)


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

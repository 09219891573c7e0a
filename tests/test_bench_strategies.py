"""The strategies benchmark's checks and table (benchmarks/bench_strategies.py), without running it."""

from __future__ import annotations

import pytest

from edgelab.common.errors import ConfigError

BENCHMARK = "bench_strategies"


@pytest.fixture(scope="module")
def bench(benchmark):  # type: ignore[no-untyped-def]
    return benchmark


def test_an_unknown_variant_or_no_repeat_is_refused_before_any_cluster(bench) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="variants"):
        bench.run_benchmark(rounds=10, repeats=1, variants=["ps_sync", "gossip_everywhere"])
    with pytest.raises(ConfigError, match="repeats"):
        bench.run_benchmark(rounds=10, repeats=0, variants=["ps_sync"])


def test_every_variant_is_a_valid_training_setting(bench) -> None:  # type: ignore[no-untyped-def]
    from edgelab.runtime.fleet import TRANSPORTS
    from edgelab.training.data_parallel import TrainConfig

    for settings, transport in bench.VARIANTS.values():
        TrainConfig(model="mlp", n_devices=10, batch_size=64, worker_data="full", **settings)
        assert transport in TRANSPORTS


def test_the_table_gives_each_variant_beside_the_parameter_server(bench) -> None:  # type: ignore[no-untyped-def]
    row = {"devices": 2, "rounds_per_s": 10.0, "samples_per_s": 1280.0, "host_ms_per_round": 100.0}
    row |= {"sent_bytes_per_device_round": 1000.0, "received_bytes_per_device_round": 1000.0}
    row |= {"devices_per_round": 2.0, "final_accuracy": 0.5, "samples_per_s_vs_ps": 1.0, "sent_vs_ps": 1.0}
    results = {
        "host": {"date_utc": "2026-11-25T00:00:00+00:00", "cpu_affinity": 2, "loadavg_start": [0.5]},
        "config": {"batch": 64, "rounds": 100, "repeats": 3},
        "summary": [{**row, "variant": "ps_sync"}, {**row, "variant": "sign_ef", "sent_vs_ps": 0.032}],
    }
    results["host"] |= {"loadavg_end": [1.0], "benchmark_wall_s": 120.0}
    md = bench.render_markdown(results)
    assert "| 2 | ps_sync | 10.0 | 1280 | 1.00 | 100.0 | 1,000 | 1.000 |" in md
    assert "| 2 | sign_ef |" in md and "| 0.032 |" in md

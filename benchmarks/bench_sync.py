"""Benchmark: what a synchronous round costs edgelab, against its floor and beside its peers, in one run.

A. Per-round overhead against its floor, for 1, 2, 5 and 10 devices, each
   transport (``edgelab.runtime.fleet.TRANSPORTS``, on the devices' round channels) and
   the direct one on Dask's comms as before them (``direct-dask``,
   ``EDGELAB_CHANNELS=0``): LeNet-MLP, batch 64, one round per batch. Overhead
   = a round's period (from its start to the next round's: the calls, the
   wait, the aggregation and the client's work between rounds; the records'
   ``round_start_s``) minus its compute, where compute is the slowest device's
   compute wall or, when the devices outnumber the host's cores, their CPU
   seconds over the cores, whichever is longer. Floor = one round trip on the
   transport the side uses (a small call on a round channel, or a worker's
   ``identity`` on Dask's comms) + the raw loopback transfer of the round's
   bytes (``sides/raw_loopback.py``: sent whole to a plain TCP echo and back
   whole, between two small processes of their own, measured again each
   repeat). Target: overhead <= 1.5x the
   floor for 2, 5 and 10 devices. Beside it, the same bytes echoed by the
   devices on each transport, and the parameter server's own arithmetic (the
   mean of the updates, on the client). Rounds/s and host CPU per round (every
   process of the cluster) show how the cost scales (``sync.png``). Beside
   them, the least plumbing the round can have (``sides/bare_round.py``: the
   same device step in plain processes on plain sockets, the same mean): what
   this host allows any implementation, edgelab's included; and the same bare
   devices as threads in edgelab's device workers, to tell what the Dask
   worker hosting a device costs from what edgelab's own code does. And where
   the direct transport's round goes, stage by stage (``sides/round_stages.py``:
   one run traced at both ends).
B. Synchronous SGD beside TensorFlow's MultiWorkerMirroredStrategy (2 local
   processes, ring all-reduce, ``sides/mwms_worker.py``): the same MLP,
   digits, seed, batch 64 per worker and one TensorFlow thread per process.
   Target: edgelab steps/s >= 1.0x.
C. Federated averaging beside Flower's simulation engine
   (``sides/flower_fedavg.py``; edgelab's side in a fresh process too,
   ``sides/edgelab_fedavg.py``): 10 clients x 1,920 digits, one local epoch per
   round, 5 rounds. Target: rounds 2-5 per second >= 1.0x; round 1 and the
   start-up (process start to the end of round 1) reported apart.

Peers are optional (``pip install -e '.[bench]'``); asking for one that is not
installed fails before any cluster starts. Run ``python benchmarks/bench_sync.py
--help``; ``benchmarks/README.md`` says what each number means.
"""

from __future__ import annotations

import os
import sys

from bench_training import THREAD_CAP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "sides"))  # bare_round

if "tensorflow" not in sys.modules:
    os.environ.update(THREAD_CAP)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # The kernels edgelab's device workers run (edgelab.cluster.device_cluster); the peers' processes inherit it.
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import psutil  # noqa: E402
from bare_round import run_bare, run_bare_in_workers  # noqa: E402
from bench_training import host_info  # noqa: E402
from distributed.protocol import to_serialize  # noqa: E402
from round_stages import CLIENT_STAGES, DEVICE_STAGES, stage_times, trace_rounds  # noqa: E402

from edgelab.cluster import device_scheduling  # noqa: E402
from edgelab.cluster.device_cluster import DeviceCluster  # noqa: E402
from edgelab.common.environ import environment  # noqa: E402
from edgelab.common.errors import ConfigError  # noqa: E402
from edgelab.common.paths import reports_dir  # noqa: E402
from edgelab.common.results import atomic_write_text  # noqa: E402
from edgelab.data import Dataset, load_dataset  # noqa: E402
from edgelab.models.builtin import ModelSpec, build_model, prepare_images  # noqa: E402
from edgelab.runtime.devices import connect  # noqa: E402
from edgelab.runtime.fleet import CHANNELS_ENV, TRANSPORTS, Fleet  # noqa: E402
from edgelab.runtime.tasks import echo  # noqa: E402
from edgelab.training.data_parallel import TrainConfig, TrainRun, train  # noqa: E402

SIDES = Path(__file__).resolve().parent / "sides"
BATCH = 64
OVERHEAD_TARGET = 1.5  # overhead / floor, at most
#: Part A's sides: every transport on round channels, and the direct one on Dask's comms (as before channels).
SIDES_A = (*TRANSPORTS, "direct-dask")
PEER_TARGET = 1.0  # edgelab rate / peer rate, at least
DEVICE_COUNTS = (1, 2, 5, 10)
#: peer name -> (module it needs, what installs it)
PEERS = {"mwms": ("tensorflow", "pip install tensorflow-cpu"), "flower": ("flwr", "pip install -e '.[bench]'")}


def check_peers(peers: list[str]) -> None:
    """Fail before any cluster work when a peer is unknown or its package is not installed."""
    for peer in peers:
        if peer not in PEERS:
            raise ConfigError("peers", peer, f"any of {', '.join(PEERS)}")
        module, install = PEERS[peer]
        if importlib.util.find_spec(module) is None:
            raise ConfigError("peers", peer, f"a peer whose package is installed: {module} is missing ({install})")


# ------------------------------------------------------------------ floor ----


def raw_loopback_s(nbytes: int, *, repeats: int = 30) -> float:
    """Median seconds to send ``nbytes`` to another process over loopback TCP and have them all sent back.

    Measured by two small processes of their own (``sides/raw_loopback.py``), not from this one.
    """
    script = Path(__file__).resolve().parent / "sides" / "raw_loopback.py"
    done = subprocess.run(
        [sys.executable, str(script), str(nbytes), str(repeats)], capture_output=True, text=True, check=True
    )
    return float(_json_line(done.stdout)["seconds"])


def comm_round_trip_s(cluster: DeviceCluster, *, repeats: int = 200) -> float:
    """Median seconds of one small request and reply on Dask's comms, client to a device's worker."""
    address = next(iter(cluster.client.scheduler_info(n_workers=-1)["workers"]))

    async def pings() -> list[float]:
        rpc = cluster.client.rpc(address)
        times = []
        for _ in range(repeats + 5):
            start = time.perf_counter()
            await rpc.identity()
            times.append(time.perf_counter() - start)
        return times[5:]

    return float(statistics.median(cluster.client.sync(pings)))


def comm_echo_s(cluster: DeviceCluster, n: int, nbytes: int, *, repeats: int = 50) -> float:
    """Median seconds for ``nbytes`` to go to ``n`` workers at once and come back, on Dask's comms.

    What Dask itself costs to move a round's bytes (a worker's ``echo``
    handler: no task, no thread hop): the transport's own floor, beside the raw one.
    """
    addresses = sorted(cluster.client.scheduler_info(n_workers=-1)["workers"])[:n]
    payload = to_serialize([np.zeros(nbytes // 4, np.float32)])  # in a list: the handler compares its reply

    async def echoes() -> list[float]:
        rpcs = [cluster.client.rpc(a) for a in addresses]
        times = []
        for _ in range(repeats + 5):
            start = time.perf_counter()
            await asyncio.gather(*(r.echo(data=payload) for r in rpcs))
            times.append(time.perf_counter() - start)
        return times[5:]

    return float(statistics.median(cluster.client.sync(echoes)))


def channel_round_trip_s(cluster: DeviceCluster, *, repeats: int = 200) -> float:
    """Median seconds of one small call and its reply on a device's round channel (``edgelab.runtime.channel``)."""
    return channel_echo_s(cluster, 1, 0, repeats=repeats)


def channel_echo_s(cluster: DeviceCluster, n: int, nbytes: int, *, repeats: int = 50) -> float:
    """Median seconds for ``nbytes`` to go to ``n`` devices at once on their round channels and come back."""
    devices = cluster.devices[:n]
    fleet = Fleet.for_cluster(cluster, devices, lambda todo: None, log=lambda _: None)
    if fleet.channel_endpoints(devices) is None:
        raise RuntimeError("the devices' round channels could not be opened")
    payload = np.zeros(nbytes // 4, np.float32)
    calls = {d: (echo, payload) for d in devices}
    times = []
    for _ in range(repeats + 5):
        start = time.perf_counter()
        fleet.call_all(calls)
        times.append(time.perf_counter() - start)
    return float(statistics.median(times[5:]))


# ---------------------------------------------------------------- rounds ----


def _cluster_cpu_s() -> float:
    """CPU seconds of this process and every process it started (the cluster's nannies and workers)."""
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def round_costs(run: TrainRun, cores: int) -> dict[str, float]:
    """Per-round wall, compute, overhead and bytes of a per-batch run.

    A round's wall is its period: from its start to the next round's, the
    client's work between two rounds included (the last round, which has no
    next, is left out). Records without starts fall back to ``round_wall_s``
    (the calls, the wait and the aggregation alone).
    """
    records = run.records if "server_s" in run.records else run.records.assign(server_s=0.0)
    if "round_start_s" not in records:
        records = records.assign(round_start_s=np.nan)
    per_round = records.groupby("round").agg(
        start_s=("round_start_s", "first"),
        call_s=("round_wall_s", "first"),
        server_s=("server_s", "first"),
        slowest_s=("wall_s", "max"),
        device_cpu_s=("cpu_s", "sum"),
        bytes=("bytes_sent", "sum"),
        bytes_in=("bytes_received", "sum"),
    )
    rounds = len(per_round)
    if per_round["start_s"].notna().all() and rounds > 1:
        per_round["wall_s"] = per_round["start_s"].shift(-1) - per_round["start_s"]
        per_round = per_round.iloc[:-1]
    else:
        per_round["wall_s"] = per_round["call_s"]
    # On a host with fewer cores than devices the devices' compute queues for the cores.
    compute = np.maximum(per_round["slowest_s"], per_round["device_cpu_s"] / cores)
    overhead = per_round["wall_s"] - compute
    return {
        "rounds": rounds,
        "round_ms": 1e3 * float(per_round["wall_s"].median()),
        "call_ms": 1e3 * float(per_round["call_s"].median()),
        "compute_ms": 1e3 * float(compute.median()),
        "overhead_ms": 1e3 * float(overhead.median()),
        "server_ms": 1e3 * float(per_round["server_s"].median()),
        "device_cpu_ms": 1e3 * float(per_round["device_cpu_s"].median()),
        "bytes_per_round": float((per_round["bytes"] + per_round["bytes_in"]).median()),
        "bytes_out_per_device": float(per_round["bytes_in"].median()) / max(1, run.config.n_devices),
    }


def bench_rounds(dataset: Dataset, *, rounds: int, repeats: int) -> dict[str, Any]:
    """Part A: per-round overhead and its floor, host CPU per round, for each device count and side."""
    cores = len(os.sched_getaffinity(0))
    out: dict[str, Any] = {"cores": cores, "cells": [], "bare": [], "stages": []}
    n_max = max(DEVICE_COUNTS)
    data = dataset.limited(sample_limit=rounds * BATCH, test_limit=100)
    with connect(n_max, dashboard_address="127.0.0.1:0") as cluster:
        out["rtt_ms"] = 1e3 * comm_round_trip_s(cluster)
        out["channel_rtt_ms"] = 1e3 * channel_round_trip_s(cluster)
        payload = 4 * sum(w.size for w in build_model(ModelSpec("mlp")).get_weights())
        for n in DEVICE_COUNTS:
            # Every device walks the same number of batches: one round per batch, `rounds` rounds.
            cfg = TrainConfig(model="mlp", n_devices=n, batch_size=BATCH, worker_data="full")
            train(cluster, data.limited(sample_limit=4 * BATCH, test_limit=100), cfg, log=lambda _: None)
            echo_ms = 1e3 * comm_echo_s(cluster, n, payload)
            channel_echo_ms = 1e3 * channel_echo_s(cluster, n, payload)
            raws = []
            for rep in range(repeats):
                # The floor's transfer, measured again each repeat: over a few minutes it moves (2x for MBs).
                raws.append(raw_ms := 1e3 * raw_loopback_s(n * payload))
                for side in SIDES_A if rep % 2 == 0 else SIDES_A[::-1]:
                    on_dask = side in ("direct-dask", "scheduler")
                    os.environ[CHANNELS_ENV] = "0" if side == "direct-dask" else "1"
                    cpu0, t0 = _cluster_cpu_s(), time.perf_counter()
                    run = train(cluster, data, cfg, transport=side.removesuffix("-dask"), log=lambda _: None)
                    cpu, wall = _cluster_cpu_s() - cpu0, time.perf_counter() - t0
                    rtt_ms = out["rtt_ms"] if on_dask else out["channel_rtt_ms"]
                    cell = {"devices": n, "transport": side, "repeat": rep, **round_costs(run, cores)}
                    cell.update(
                        rounds_per_s=cell["rounds"] / (run.host["train_wall_s"] - run.evaluations["eval_wall_s"].sum()),
                        host_cpu_ms_per_round=1e3 * cpu / cell["rounds"],
                        # Over the whole run, set-up included, as the CPU seconds are.
                        cores_busy=cpu / wall,
                        run_wall_s=wall,
                        raw_loopback_ms=raw_ms,
                        floor_ms=rtt_ms + raw_ms,
                        dask_echo_ms=echo_ms,
                        channel_echo_ms=channel_echo_ms,
                        echo_ms=echo_ms if on_dask else channel_echo_ms,
                    )
                    cell["overhead_over_floor"] = cell["overhead_ms"] / cell["floor_ms"]
                    cell["overhead_over_echo"] = cell["overhead_ms"] / cell["echo_ms"]
                    out["cells"].append(cell)
                    _say(f"{n:2d} devices {side:11s}", cell, f", host CPU {cell['host_cpu_ms_per_round']:.1f} ms/round")
            os.environ.pop(CHANNELS_ENV, None)
            # Where the direct round's time goes: one more run, each stage stamped at both ends.
            traced_run = partial(train, cluster, data, cfg, transport="direct", log=lambda _: None)
            run, events, calls = trace_rounds(cluster.client, traced_run)
            traced = {"devices": n, **round_costs(run, cores), **stage_times(events, calls)}
            out["stages"].append(traced)
            print(f"[A] {n:2d} devices, stages: " + ", ".join(f"{k} {traced[k]:.3f}" for k in STAGE_KEYS), flush=True)
            # The same rounds with none of edgelab's plumbing, on the same host in the same minutes.
            # And in edgelab's device workers, a thread each: what hosting a device in a Dask worker costs.
            bare = run_bare(n, data.x_train, data.y_train, rounds=rounds, repeats=repeats, batch=BATCH)
            hosted = run_bare_in_workers(
                cluster.client,
                cluster.devices[:n],
                data.x_train,
                data.y_train,
                rounds=rounds,
                repeats=repeats,
                batch=BATCH,
            )
            for where, runs in (("processes", bare), ("workers", hosted)):
                for run in runs:
                    run.update(floor_ms=out["channel_rtt_ms"] + statistics.median(raws), hosts=where)
                    run["overhead_over_floor"] = run["overhead_ms"] / run["floor_ms"]
                    out["bare"].append(run)
                    _say(f"{n:2d} devices bare, {where:9s}", run)
    return out


#: A traced run's stages, as its report's columns give them.
STAGE_KEYS = (*CLIENT_STAGES, *DEVICE_STAGES)
#: The stages that are edgelab's own Python rather than the step, the bytes' flight or the mean (``own_code_ms``).
OWN_CODE = ("decode", "to_step", "bookkeeping", "encode")


def summarize_stages(part: dict[str, Any]) -> list[dict[str, Any]]:
    """Each traced run's stages, with edgelab's own code on the round's path and the overhead left without it.

    Own code = the client's time between rounds but the mean and the step,
    plus the device's decode, dispatch, bookkeeping and encode: what a round
    would lose if edgelab's Python cost nothing. ``overhead_without_own_ms``
    puts that beside the target (``target_ms``: 1.5x the median floor of the
    device count's direct runs).
    """
    floors = {r["devices"]: r["floor_ms"] for r in summarize_rounds(part) if r["transport"] == "direct"}
    rows = []
    for traced in part.get("stages", []):
        row = dict(traced)
        row["own_code_ms"] = traced["between_rounds"] - traced["mean_and_step"] + sum(traced[k] for k in OWN_CODE)
        row["overhead_without_own_ms"] = traced["overhead_ms"] - row["own_code_ms"]
        row["target_ms"] = OVERHEAD_TARGET * floors[traced["devices"]] if traced["devices"] in floors else float("nan")
        rows.append(row)
    return rows


def _say(label: str, run: dict[str, Any], more: str = "") -> None:
    """A part-A run's progress line: its round, overhead and floor."""
    print(
        f"[A] {label}: {run['round_ms']:6.2f} ms/round, overhead {run['overhead_ms']:5.2f} ms = "
        f"{run['overhead_over_floor']:.2f}x floor {run['floor_ms']:.2f} ms{more}",
        flush=True,
    )


# ----------------------------------------------------------------- peers ----


def _free_ports(n: int) -> list[int]:
    socks = [socket.create_server(("127.0.0.1", 0)) for _ in range(n)]
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _json_line(stdout: str) -> dict[str, Any]:
    return json.loads(next(line for line in reversed(stdout.splitlines()) if line.startswith("{")))


#: The scheduling policy both sides of a peer comparison run under: the kernel's default, which the peers
#: keep (edgelab's embedded devices otherwise run under SCHED_BATCH: ``edgelab.cluster.device_scheduling``).
PEER_SCHEDULING = {device_scheduling.ENV: "normal"}


def run_mwms(*, steps: int, samples: int) -> dict[str, Any]:
    """Two MultiWorkerMirroredStrategy workers on loopback: steps per second, and seconds with their set-up."""
    ports = ",".join(map(str, _free_ports(2)))
    cmd = [sys.executable, str(SIDES / "mwms_worker.py"), "--ports", ports, "--steps", str(steps)]
    procs = [
        subprocess.Popen([*cmd, "--index", str(i), "--samples", str(samples)], stdout=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a MultiWorkerMirroredStrategy worker failed: {[p.returncode for p in procs]}")
    workers = [_json_line(o) for o in outs]
    return {
        "workers": workers,
        "steps": steps,
        "steps_per_s": min(w["steps_per_s"] for w in workers),
        "with_setup_s": max(w["with_setup_s"] for w in workers),
        "batch_seen": sorted({w["batch_seen"] for w in workers}),
    }


def run_edgelab_sync(dataset: Dataset, transport: str, *, epochs: int) -> dict[str, Any]:
    """Edgelab on two devices of a cluster of their own, a round per batch of 64 each.

    Steady state: rounds per second of the training's wall (evaluations left
    out); with set-up: the cluster's start and the whole call, as one user's call
    pays them. The cluster is closed before this returns: nothing of it is alive
    while the peer is timed.
    """
    t0 = time.perf_counter()
    with connect(2, dashboard_address="127.0.0.1:0") as cluster:
        cfg = TrainConfig(model="mlp", n_devices=2, batch_size=BATCH, worker_data="shard", epochs=epochs)
        run = train(cluster, dataset, cfg, transport=transport, log=lambda _: None)
        with_setup = time.perf_counter() - t0
    rounds = int(run.records["round"].nunique())
    wall = run.host["train_wall_s"] - float(run.evaluations["eval_wall_s"].sum())
    batch_seen = sorted(set((run.records["samples"] // run.records["steps"]).astype(int).tolist()))
    return {
        "rounds": rounds,
        "wall_s": wall,
        "steps_per_s": rounds / wall,
        "with_setup_s": with_setup,
        "batch_seen": batch_seen,
    }


#: edgelab's sides against MultiWorkerMirroredStrategy: the parameter server, and the devices' own all-reduce
MWMS_EDGELAB = ("direct", "allreduce")


def bench_mwms(dataset: Dataset, *, repeats: int, epochs: int = 10) -> dict[str, Any]:
    """Part B: edgelab's synchronous rounds (each transport) and MultiWorkerMirroredStrategy's steps, interleaved.

    Both sides train ``epochs`` epochs of the digits' halves (a window of
    seconds), batch 64 per worker, one TensorFlow thread per process, under
    the kernel's default scheduling policy; each in processes of its own,
    started and ended for each measurement.
    """
    steps = epochs * (dataset.n_train // (2 * BATCH))
    sides = [*MWMS_EDGELAB, "mwms"]
    out: dict[str, Any] = {side: [] for side in sides} | {"steps": steps, "scheduling": "normal"}
    with environment(PEER_SCHEDULING):
        for rep in range(repeats):
            for side in sides if rep % 2 == 0 else sides[::-1]:
                result = (
                    run_mwms(steps=steps, samples=dataset.n_train)
                    if side == "mwms"
                    else run_edgelab_sync(dataset, side, epochs=epochs)
                )
                out[side].append(result)
                print(
                    f"[B] repeat {rep + 1}/{repeats} {side}: {result['steps_per_s']:.1f} steps/s, "
                    f"{result['with_setup_s']:.1f} s with set-up, batch seen {result['batch_seen']}",
                    flush=True,
                )
    out["mwms_steps_per_s"] = statistics.median(r["steps_per_s"] for r in out["mwms"])
    out["mwms_with_setup_s"] = statistics.median(r["with_setup_s"] for r in out["mwms"])
    for transport in MWMS_EDGELAB:
        out[f"{transport}_with_setup_s"] = statistics.median(r["with_setup_s"] for r in out[transport])
        out[f"{transport}_setup_ratio"] = out["mwms_with_setup_s"] / out[f"{transport}_with_setup_s"]
        out[f"{transport}_steps_per_s"] = statistics.median(r["steps_per_s"] for r in out[transport])
        out[f"{transport}_ratio"] = out[f"{transport}_steps_per_s"] / out["mwms_steps_per_s"]
        out[f"{transport}_paired_ratios"] = [
            e["steps_per_s"] / m["steps_per_s"] for e, m in zip(out[transport], out["mwms"], strict=True)
        ]
    best = max(MWMS_EDGELAB, key=lambda t: out[f"{t}_ratio"])
    out["best_transport"], out["ratio"] = best, out[f"{best}_ratio"]
    return out


def weights_accuracy(weights_file: str, dataset: Dataset) -> float:
    """The MLP's accuracy on the test digits with the weights a side saved (``np.savez``)."""
    model = build_model(ModelSpec("mlp"))
    with np.load(weights_file) as arrays:
        model.set_weights([arrays[f"arr_{i}"] for i in range(len(arrays.files))])
    scores = model.evaluate(prepare_images("mlp", dataset.x_test), dataset.y_test, verbose=0, return_dict=True)
    return float(scores["accuracy"])


#: Part C's sides: edgelab, Flower with the compiled loop edgelab's devices run, Flower with Keras fit.
FEDAVG_SIDES = ("edgelab", "flower", "flower-fit")


def run_fedavg_side(side: str, *, clients: int, samples: int, rounds: int, eval_data: Dataset) -> dict[str, Any]:
    """One side's federated run in a fresh process, under the default scheduling policy: times, final accuracy."""
    script = "edgelab_fedavg.py" if side == "edgelab" else "flower_fedavg.py"
    loop = [] if side == "edgelab" else ["--client-loop", "fit" if side == "flower-fit" else "compiled"]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "weights.npz")
        cmd = [sys.executable, str(SIDES / script), "--clients", str(clients), "--samples", str(samples), *loop]
        done = subprocess.run(
            [*cmd, "--rounds", str(rounds), "--out", out],
            capture_output=True,
            text=True,
            timeout=1800,
            env=os.environ | PEER_SCHEDULING,
        )
        if done.returncode:
            raise RuntimeError(f"{script} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        result = _json_line(done.stdout)
        result["accuracy"] = weights_accuracy(out, eval_data)
    later = result["round_s"][1:]
    result["round1_s"] = result["round_s"][0]
    result["later_round_s"] = statistics.median(later)
    result["rounds_per_s"] = 1.0 / result["later_round_s"]
    return result


def bench_fedavg(dataset: Dataset, *, repeats: int, clients: int, samples: int, rounds: int) -> dict[str, Any]:
    """Part C: edgelab's federated rounds and start-up beside Flower's simulation engine, interleaved."""
    out: dict[str, Any] = {side: [] for side in FEDAVG_SIDES} | {
        "clients": clients,
        "samples": samples,
        "rounds": rounds,
    }
    for rep in range(repeats):
        for side in FEDAVG_SIDES if rep % 2 == 0 else FEDAVG_SIDES[::-1]:
            result = run_fedavg_side(side, clients=clients, samples=samples, rounds=rounds, eval_data=dataset)
            out[side].append(result)
            print(
                f"[C] repeat {rep + 1}/{repeats} {side}: {result['later_round_s']:.2f} s/round (rounds 2-{rounds}), "
                f"round 1 {result['round1_s']:.1f} s, start-up to round 1's end {result['to_round1_end_s']:.1f} s, "
                f"accuracy {result['accuracy']:.3f}",
                flush=True,
            )
    for key in ("later_round_s", "round1_s", "to_round1_end_s", "accuracy"):
        for side in FEDAVG_SIDES:
            out[f"{side}_{key}"] = statistics.median(r[key] for r in out[side])
    out["rounds_ratio"] = out["flower_later_round_s"] / out["edgelab_later_round_s"]
    out["fit_rounds_ratio"] = out["flower-fit_later_round_s"] / out["edgelab_later_round_s"]
    out["startup_ratio"] = out["flower_to_round1_end_s"] / out["edgelab_to_round1_end_s"]
    return out


# ---------------------------------------------------------------- report ----


def summarize_rounds(part: dict[str, Any]) -> list[dict[str, Any]]:
    """Medians over repeats per (devices, transport), with the target verdict."""
    rows = []
    for n in DEVICE_COUNTS:
        for transport in SIDES_A:
            cells = [c for c in part["cells"] if c["devices"] == n and c["transport"] == transport]
            if not cells:
                continue
            row = {"devices": n, "transport": transport}
            for key in (
                "round_ms",
                "compute_ms",
                "overhead_ms",
                "server_ms",
                "floor_ms",
                "overhead_over_floor",
                "echo_ms",
                "overhead_over_echo",
                "rounds_per_s",
                "host_cpu_ms_per_round",
                "device_cpu_ms",
                "bytes_per_round",
                # How many of the host's cores the cluster kept busy: near their number, the host is the bound.
                "cores_busy",
            ):
                row[key] = float(statistics.median(c[key] for c in cells))
            floors = [c["floor_ms"] for c in cells]
            row["floor_min_ms"], row["floor_max_ms"] = min(floors), max(floors)
            row["target_met"] = None if n == 1 else row["overhead_over_floor"] <= OVERHEAD_TARGET
            rows.append(row)
    return rows


def summarize_bare(part: dict[str, Any]) -> list[dict[str, Any]]:
    """The least-plumbing reference's medians per device count, beside the direct transport's overhead."""
    rows = []
    direct = {r["devices"]: r for r in summarize_rounds(part) if r["transport"] == "direct"}
    for n in DEVICE_COUNTS:
        # Runs of results saved before the bare devices ran in the workers too were all processes.
        runs = [r for r in part.get("bare", []) if r["devices"] == n and r.get("hosts", "processes") == "processes"]
        if not runs:
            continue
        row = {"devices": n}
        for key in ("round_ms", "compute_ms", "overhead_ms", "floor_ms", "overhead_over_floor"):
            row[key] = float(statistics.median(r[key] for r in runs))
        hosted = [r["overhead_ms"] for r in part["bare"] if r["devices"] == n and r.get("hosts") == "workers"]
        row["in_workers_overhead_ms"] = float(statistics.median(hosted)) if hosted else float("nan")
        if n in direct:
            row["direct_overhead_ms"] = direct[n]["overhead_ms"]
            row["direct_excess_ms"] = direct[n]["overhead_ms"] - row["overhead_ms"]
        rows.append(row)
    return rows


def _range(row: dict[str, Any]) -> str:
    """`` (min-max)`` of the row's floor over its repeats, when it moved; results saved before have none."""
    lo, hi = row.get("floor_min_ms"), row.get("floor_max_ms")
    return f" ({lo:.2f}-{hi:.2f})" if lo is not None and hi is not None and hi - lo >= 0.005 else ""


def plot_scaling(rows: list[dict[str, Any]], path: Path) -> None:
    """Rounds per second and host CPU per round against devices, each transport (``sync.png``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for transport, marker in zip(SIDES_A, "os^vD", strict=False):
        mine = [r for r in rows if r["transport"] == transport]
        n = [r["devices"] for r in mine]
        left.plot(n, [r["rounds_per_s"] for r in mine], marker=marker, label=transport)
        right.plot(n, [r["host_cpu_ms_per_round"] for r in mine], marker=marker, label=f"{transport}: all processes")
        if transport == "direct":
            right.plot(n, [r["device_cpu_ms"] for r in mine], ls="--", color="grey", label="devices' training steps")
            right.plot(n, [r["floor_ms"] for r in mine], ls=":", color="black", label="floor (wall ms)")
            right.plot(n, [r["echo_ms"] for r in mine], ls="-.", color="black", label="channel echo (wall ms)")
    left.set(xlabel="devices", ylabel="rounds per second (host wall)", title="Synchronous rounds, LeNet-MLP batch 64")
    right.set(xlabel="devices", ylabel="ms per round", title="Host CPU per round")
    for ax in (left, right):
        ax.set_xticks(list(DEVICE_COUNTS))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_markdown(results: dict[str, Any]) -> str:
    """The report: overhead against the floor, then each peer side by side."""
    host = results["host"]
    lines = [
        "# Synchronization benchmark",
        "",
        f"{host['date_utc']}, {host['processor']}, {host['cpu_count']} CPUs, TF {host['tensorflow']}, "
        f"Dask {host['distributed']}; MNIST ({results['dataset']['source']}), LeNet-MLP 784-128-64-10, "
        f"SGD 0.05, batch {BATCH}, one TensorFlow thread per process everywhere. Load average "
        f"{host['loadavg_start'][0]:.1f} at start, {host['loadavg_end'][0]:.1f} at end; "
        f"{host['benchmark_wall_s'] / 60:.1f} min in all.",
    ]
    if "rounds" in results:
        a = results["rounds"]
        lines += [
            "",
            f"## A. Per-round overhead against its floor (median of {results['config']['repeats']} runs of "
            f"{results['config']['rounds']} rounds; {a['cores']} host cores)",
            "",
            f"Floor = one round trip on the side's transport (a round channel: {a['channel_rtt_ms']:.3f} ms; "
            f"Dask's comms, for scheduler and direct-dask: {a['rtt_ms']:.3f} ms) + the raw loopback TCP transfer "
            "of the round's bytes (``sides/raw_loopback.py``: sent whole to another process and back whole, "
            "between two small processes of their own; measured again each repeat, beside that repeat's runs, "
            "and its range over the repeats in brackets). Target: overhead <= 1.5x floor for 2, 5 and 10 "
            "devices. Echo = the same bytes "
            "sent to the round's devices at once and echoed back on the side's transport (no training): what "
            "moving them costs there. Server = the parameter server's mean of the updates, on the client "
            "(part of the overhead; the floor has no arithmetic).",
            "",
            "| devices | transport | round ms | compute ms | overhead ms | server ms | floor ms | overhead / floor | "
            "target | echo ms | overhead / echo | rounds/s | host CPU ms/round | cores busy | MB/round |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in a["summary"]:
            target = "-" if r["target_met"] is None else ("yes" if r["target_met"] else "no")
            lines.append(
                f"| {r['devices']} | {r['transport']} | {r['round_ms']:.2f} | {r['compute_ms']:.2f} | "
                f"{r['overhead_ms']:.2f} | {r['server_ms']:.2f} | {r['floor_ms']:.2f}{_range(r)} | "
                f"{r['overhead_over_floor']:.2f} | {target} | {r['echo_ms']:.2f} | {r['overhead_over_echo']:.2f} | "
                f"{r['rounds_per_s']:.1f} | {r['host_cpu_ms_per_round']:.1f} | {r['cores_busy']:.2f} | "
                f"{r['bytes_per_round'] / 1e6:.2f} |"
            )
        lines += [
            "",
            "Compute = the slowest device's compute wall, or the devices' CPU seconds over the host's cores when "
            "they outnumber them (ten devices queue for two cores). Host CPU: every process of the cluster "
            "(client, scheduler, nannies, workers) over the run, its set-up (data to the devices, their models "
            "warmed) included, per round; cores busy = that CPU / the run's wall: near the host's "
            f"{a['cores']} cores, the run waits for CPU, not for the link. ![scaling](sync.png)",
        ]
        bare = summarize_bare(a)
        if bare:
            lines += [
                "",
                "### The least plumbing a round can have, on this host (``sides/bare_round.py``)",
                "",
                "Plain processes on plain loopback sockets, each running the very step an edgelab device runs; the "
                "client sends the raw weights, receives each delta into a buffer of its own and sums the float64 "
                "mean in preallocated buffers. No Dask, no pickles, no records, no checks, no recovery. Its overhead "
                "is what moving the bytes, waking the processes and the mean cost here with Python at both ends: "
                "a floor under any implementation. Floor as for the round channels. In workers = the same bare "
                "devices, each a thread in one of edgelab's device workers (the processes a round channel's device "
                "answers in: Dask's event loop, heartbeats and threads, the GIL, the scheduling policy) with none of "
                "edgelab's code on the round's path.",
                "",
                "| devices | round ms | compute ms | overhead ms | floor ms | overhead / floor | "
                "in workers: overhead ms | direct's overhead ms | direct - bare ms |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for r in bare:
                lines.append(
                    f"| {r['devices']} | {r['round_ms']:.2f} | {r['compute_ms']:.2f} | {r['overhead_ms']:.2f} | "
                    f"{r['floor_ms']:.2f} | {r['overhead_over_floor']:.2f} | {r['in_workers_overhead_ms']:.2f} | "
                    f"{r.get('direct_overhead_ms', float('nan')):.2f} | {r.get('direct_excess_ms', float('nan')):.2f} |"
                )
        stages = summarize_stages(a)
        if stages:
            lines += [
                "",
                "### Where the direct transport's round goes (``sides/round_stages.py``)",
                "",
                "One more direct run of each device count, every stage of every round stamped at both ends "
                "(one monotonic clock for the host's processes; medians in ms, device stages over all the "
                "devices' calls). Between rounds = the client, from a round's last reply read to the next round's "
                "first call starting out, the mean and the step (m+s) included; sending = its first call to its "
                "last sent; in flight = from the client's end of sending a call to the device having it whole, "
                "and back from the device's end of sending its reply to the client having it decoded; to step = "
                "the call handed to ``train_round``; bookkeeping = ``train_round`` outside its step. Own code = "
                "between rounds but m+s, plus decode, to step, bookkeeping and encode: edgelab's Python on the "
                "round's path. Beside the overhead of the traced run, what would be left if that cost nothing, "
                "and the target (1.5x the floor above). The stamps cost the traced run something: its overhead beside "
                "the untraced direct runs' above says how much.",
                "",
                "| devices | round ms | step ms | overhead ms | between rounds (m+s) | sending | call in flight | "
                "decode | to step | bookkeeping | encode | send reply | reply in flight | own code ms | "
                "overhead without own code | target ms |",
                "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for r in stages:
                lines.append(
                    f"| {r['devices']} | {r['round_ms']:.2f} | {r['step']:.2f} | {r['overhead_ms']:.2f} | "
                    f"{r['between_rounds']:.2f} ({r['mean_and_step']:.2f}) | {r['sending']:.2f} | "
                    f"{r['call_in_flight']:.2f} | {r['decode']:.3f} | {r['to_step']:.3f} | {r['bookkeeping']:.3f} | "
                    f"{r['encode']:.3f} | {r['send_reply']:.2f} | {r['reply_in_flight']:.2f} | "
                    f"{r['own_code_ms']:.2f} | {r['overhead_without_own_ms']:.2f} | {r['target_ms']:.2f} |"
                )
    if "peers_host" in results:  # the peers measured again on their own, later than part A
        peers = results["peers_host"]
        lines += [
            "",
            f"Parts B and C below were measured again on their own, {peers['date_utc']} (load average "
            f"{peers['loadavg_start'][0]:.1f} at start, {peers['loadavg_end'][0]:.1f} at end; "
            f"{peers['benchmark_wall_s'] / 60:.1f} min), with each peer set up as its documentation recommends.",
        ]
    if "mwms" in results:
        b = results["mwms"]
        lines += [
            "",
            f"## B. Synchronous SGD, 2 workers x batch 64: edgelab vs MultiWorkerMirroredStrategy "
            f"(median of {len(b['mwms'])})",
            "",
            "| | steps/s (steady) | ms/step | / MWMS | s with set-up | MWMS / this, with set-up | batch seen |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for transport, label in (("direct", "parameter server"), ("allreduce", "devices' all-reduce")):
            lines.append(
                f"| edgelab, {label} (transport {transport}) | {b[f'{transport}_steps_per_s']:.1f} | "
                f"{1e3 / b[f'{transport}_steps_per_s']:.2f} | {b[f'{transport}_ratio']:.2f} | "
                f"{b[f'{transport}_with_setup_s']:.1f} | {b[f'{transport}_setup_ratio']:.2f} | "
                f"{b[transport][0]['batch_seen']} |"
            )
        lines += [
            f"| MultiWorkerMirroredStrategy (ring all-reduce, 2 processes) | {b['mwms_steps_per_s']:.1f} | "
            f"{1e3 / b['mwms_steps_per_s']:.2f} | 1.00 | {b['mwms_with_setup_s']:.1f} | 1.00 | "
            f"{b['mwms'][0]['batch_seen']} |",
            "",
            f"edgelab ({b['best_transport']}) / MWMS = **{b['ratio']:.2f}** steady (target >= {PEER_TARGET:.1f}; "
            f"paired: {', '.join(f'{x:.2f}' for x in b[b['best_transport'] + '_paired_ratios'])}); "
            f"{b['steps']} steps a side, each side in processes of its own started for each measurement (nothing "
            "of the other alive), both under the kernel's default scheduling policy. With set-up: edgelab's cluster "
            "start and one `train` call, from a process that has TensorFlow imported (as a notebook has); MWMS's "
            "from its two processes' start, their imports included.",
        ]
    if "fedavg" in results:
        c = results["fedavg"]
        lines += [
            "",
            f"## C. Federated averaging, {c['clients']} clients x {c['samples'] // c['clients']} digits, "
            f"{c['rounds']} rounds: edgelab vs Flower's simulation engine (median of {len(c['edgelab'])})",
            "",
            "| | s/round (rounds 2-5) | round 1 s | start-up to round 1's end s | final accuracy |",
            "|---|---:|---:|---:|---:|",
        ]
        names = {"edgelab": "edgelab", "flower": "Flower, compiled-loop client", "flower-fit": "Flower, fit client"}
        for side in FEDAVG_SIDES:
            lines.append(
                f"| {names[side]} | {c[f'{side}_later_round_s']:.3f} | {c[f'{side}_round1_s']:.2f} | "
                f"{c[f'{side}_to_round1_end_s']:.1f} | {c[f'{side}_accuracy']:.3f} |"
            )
        lines += [
            "",
            f"Rounds/s edgelab / Flower (compiled-loop client, the same training code and batches) = "
            f"**{c['rounds_ratio']:.2f}** (target >= {PEER_TARGET:.1f}); against Flower's Keras fit client "
            f"{c['fit_rounds_ratio']:.2f}; start-up Flower / edgelab = **{c['startup_ratio']:.2f}** (>= 1.0: "
            "edgelab starts no slower). Each side runs in a fresh process, so both pay for their imports, one at a "
            "time, under the kernel's default scheduling policy; Flower's clients load the digits once per actor.",
        ]
    return "\n".join(lines) + "\n"


def run_benchmark(*, parts: list[str], repeats: int, rounds: int, samples: int) -> dict[str, Any]:
    """Run the chosen parts; every number with its provenance and the host's load."""
    check_peers([p for p in parts if p in PEERS])
    if repeats < 1:
        raise ConfigError("repeats", repeats, "an integer >= 1")
    if rounds < 10:
        raise ConfigError("rounds", rounds, "an integer >= 10")
    dataset = load_dataset("mnist", sample_limit=samples, test_limit=None)
    host = host_info()
    t0 = time.perf_counter()
    results: dict[str, Any] = {
        "config": {"parts": parts, "repeats": repeats, "rounds": rounds, "samples": samples, "batch": BATCH},
        "dataset": dataset.provenance(),
        "host": host,
    }
    if "rounds" in parts:
        results["rounds"] = bench_rounds(dataset, rounds=rounds, repeats=repeats)
        results["rounds"]["summary"] = summarize_rounds(results["rounds"])
        results["rounds"]["bare_summary"] = summarize_bare(results["rounds"])
        results["rounds"]["stages_summary"] = summarize_stages(results["rounds"])
    if "mwms" in parts:
        results["mwms"] = bench_mwms(dataset, repeats=repeats)
    if "flower" in parts:
        results["fedavg"] = bench_fedavg(dataset, repeats=repeats, clients=10, samples=19200, rounds=5)
    host["loadavg_end"] = list(os.getloadavg())
    host["benchmark_wall_s"] = time.perf_counter() - t0
    return results


def write_results(results: dict[str, Any], out_dir: Path | None = None) -> str:
    """Write ``sync.json``, ``sync.md`` and ``sync.png`` atomically; return the markdown."""
    folder = out_dir or reports_dir() / "benchmarks"
    md = render_markdown(results)
    if "rounds" in results:
        plot_scaling(results["rounds"]["summary"], folder / "sync.png")
    atomic_write_text(folder / "sync.json", json.dumps(results, indent=1, sort_keys=True, default=str) + "\n")
    atomic_write_text(folder / "sync.md", md)
    return md


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--parts", nargs="+", default=["rounds", "mwms", "flower"], choices=["rounds", "mwms", "flower"]
    )
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=200, help="rounds per part-A run (default %(default)s)")
    parser.add_argument("--samples", type=int, default=12800, help="digits for part B (default %(default)s)")
    parser.add_argument("--out-dir", type=Path, default=None, help="default: reports/benchmarks")
    args = parser.parse_args(argv)
    results = run_benchmark(parts=args.parts, repeats=args.repeats, rounds=args.rounds, samples=args.samples)
    print(write_results(results, args.out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())

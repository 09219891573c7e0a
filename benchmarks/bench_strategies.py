"""Benchmark: every synchronization choice beside the parameter server, in rounds/s and bytes, for 2, 5, 10 devices.

The same LeNet-MLP, digits, batch 64 per device and seed as ``bench_sync.py``
part A, one process per device on this host, through ``edgelab.training.data_parallel``:

* ``ps_sync``: the parameter server over direct calls (the reference);
* ``allreduce``: the devices' own reduce-scatter + all-gather (``edgelab.peer.allreduce``);
* ``sign_ef``, ``qsgd:4``, ``topk:0.01``: the parameter server with each
  device's update compressed (``edgelab.sync.compress``);
* ``local_sgd_h4``: a round every 4 batches;
* ``fedavg_c0.5``: half the devices, drawn afresh, train each round.

Per cell: rounds/s and samples/s of host wall (evaluations left out; a round of
local SGD trains 4 batches, so samples/s is the fair speed), host milliseconds
per round, and the median bytes a device sends and receives per round as
serialized. Medians over interleaved repeats. Results and the host's load go
to ``reports/benchmarks/strategies.{json,md}``. Run ``python
benchmarks/bench_strategies.py --help``.
"""

from __future__ import annotations

import os
import sys

from bench_training import THREAD_CAP

if "tensorflow" not in sys.modules:
    os.environ.update(THREAD_CAP)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pandas as pd  # noqa: E402
from bench_training import host_info  # noqa: E402

from edgelab.common.errors import ConfigError  # noqa: E402
from edgelab.common.paths import reports_dir  # noqa: E402
from edgelab.common.results import atomic_write_text  # noqa: E402
from edgelab.data import load_dataset  # noqa: E402
from edgelab.runtime.devices import connect  # noqa: E402
from edgelab.training.data_parallel import TrainConfig, TrainRun, train  # noqa: E402

BATCH = 64
DEVICE_COUNTS = (2, 5, 10)
#: name -> (TrainConfig settings, transport)
VARIANTS: dict[str, tuple[dict[str, Any], str]] = {
    "ps_sync": ({}, "direct"),
    "allreduce": ({}, "allreduce"),
    "sign_ef": ({"compressor": "sign_ef"}, "direct"),
    "qsgd:4": ({"compressor": "qsgd:4"}, "direct"),
    "terngrad": ({"compressor": "terngrad"}, "direct"),
    "topk:0.01": ({"compressor": "topk:0.01"}, "direct"),
    "dgc:0.01:0.9": ({"compressor": "dgc:0.01:0.9"}, "direct"),
    "esgd:0.01": ({"compressor": "esgd:0.01"}, "direct"),
    "allreduce_sign_ef": ({"compressor": "sign_ef"}, "allreduce"),
    "tree": ({}, "tree"),
    "gossip_ring": ({"strategy": "gossip"}, "allreduce"),
    "gossip_random2": ({"strategy": "gossip", "gossip_topology": "random:2"}, "allreduce"),
    "local_sgd_h4": ({"sync_period": 4}, "direct"),
    "local_sgd_adaptive_h4": ({"sync_period": 4, "sync_period_rule": "adaptive"}, "direct"),
    "fedavg_c0.5": ({"client_fraction": 0.5}, "direct"),
}


def cell(run: TrainRun) -> dict[str, float]:
    """Speed and bytes of one run."""
    wall = run.host["train_wall_s"] - float(run.evaluations["eval_wall_s"].sum())
    rounds = run.records["round"].nunique()
    return {
        "rounds": rounds,
        "rounds_per_s": rounds / wall,
        "samples_per_s": float(run.records["samples"].sum()) / wall,
        "host_ms_per_round": 1e3 * wall / rounds,
        "sent_bytes_per_device_round": float(run.records["bytes_sent"].median()),
        "received_bytes_per_device_round": float(run.records["bytes_received"].median()),
        # Device to device (all-reduce, tree, gossip): what each device sent its peers, serialized.
        "peer_bytes_per_device_round": float(run.records["peer_bytes_sent"].median())
        if "peer_bytes_sent" in run.records
        else 0.0,
        "devices_per_round": float(run.records.groupby("round").size().median()),
        "final_accuracy": float(run.evaluations["accuracy"].iloc[-1]),
    }


def run_benchmark(*, rounds: int, repeats: int, variants: list[str]) -> dict[str, Any]:
    """Every variant at every device count, ``repeats`` interleaved times; cells and medians."""
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ConfigError("variants", unknown, f"names among {', '.join(VARIANTS)}")
    if repeats < 1:
        raise ConfigError("repeats", repeats, "an integer >= 1")
    host = host_info()
    t0 = time.perf_counter()
    data = load_dataset("mnist", sample_limit=rounds * BATCH, test_limit=200)
    cells = []
    with connect(max(DEVICE_COUNTS), dashboard_address="127.0.0.1:0") as cluster:
        for n in DEVICE_COUNTS:
            # every device walks the whole set in its own order: `rounds` batches each, as bench_sync part A
            base = {"model": "mlp", "n_devices": n, "batch_size": BATCH, "worker_data": "full"}
            train(cluster, data.limited(sample_limit=4 * BATCH), TrainConfig(**base), log=lambda _: None)
            for rep in range(repeats):
                for name in variants if rep % 2 == 0 else variants[::-1]:
                    settings, transport = VARIANTS[name]
                    run = train(cluster, data, TrainConfig(**base, **settings), transport=transport, log=lambda _: None)
                    row = {"devices": n, "variant": name, "repeat": rep, **cell(run)}
                    cells.append(row)
                    print(
                        f"{n:2d} devices {name:13s}: {row['rounds_per_s']:6.1f} rounds/s, "
                        f"{row['samples_per_s']:7.0f} samples/s, sent {row['sent_bytes_per_device_round']:9.0f} B "
                        f"per device and round",
                        flush=True,
                    )
    host["loadavg_end"] = list(os.getloadavg())
    host["benchmark_wall_s"] = time.perf_counter() - t0
    table = pd.DataFrame(cells).groupby(["devices", "variant"], sort=False).median(numeric_only=True).reset_index()
    reference = table[table["variant"] == "ps_sync"].set_index("devices")
    table["samples_per_s_vs_ps"] = table["samples_per_s"] / table["devices"].map(reference["samples_per_s"])
    table["sent_vs_ps"] = table["sent_bytes_per_device_round"] / table["devices"].map(
        reference["sent_bytes_per_device_round"]
    )
    return {
        "config": {"rounds": rounds, "repeats": repeats, "batch": BATCH, "variants": variants},
        "dataset": data.provenance(),
        "host": host,
        "cells": cells,
        "summary": table.drop(columns="repeat").to_dict("records"),
    }


def render_markdown(results: dict[str, Any]) -> str:
    """The summary table, with the host and its load."""
    host, cfg = results["host"], results["config"]
    lines = [
        "# Synchronization strategies beside the parameter server",
        "",
        f"{host['date_utc']}, {host['cpu_affinity']} CPUs; LeNet-MLP, batch {cfg['batch']} per device, "
        f"{cfg['rounds']} batches per device, medians of {cfg['repeats']} interleaved repeats. Load average "
        f"{host['loadavg_start'][0]:.1f} at start, {host['loadavg_end'][0]:.1f} at end; "
        f"{host['benchmark_wall_s'] / 60:.1f} min in all.",
        "",
        "| devices | variant | rounds/s | samples/s | / ps_sync | host ms/round | sent B/device/round | "
        "/ ps_sync | received B/device/round | to peers B/device/round | devices/round | accuracy |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["summary"]:
        lines.append(
            f"| {r['devices']} | {r['variant']} | {r['rounds_per_s']:.1f} | {r['samples_per_s']:.0f} | "
            f"{r['samples_per_s_vs_ps']:.2f} | {r['host_ms_per_round']:.1f} | "
            f"{r['sent_bytes_per_device_round']:,.0f} | {r['sent_vs_ps']:.3f} | "
            f"{r['received_bytes_per_device_round']:,.0f} | {r.get('peer_bytes_per_device_round', 0):,.0f} | "
            f"{r['devices_per_round']:.0f} | "
            f"{r['final_accuracy']:.3f} |"
        )
    lines += [
        "",
        "Sent bytes are what a device's update takes as serialized (the delta's arrays, or Dask's serialization "
        "of the compressor's payload: its round channel's pickle of it differs by a few header bytes), as the "
        "parameter server sees it; where devices exchange among themselves "
        "(all-reduce, tree, gossip) `to peers` is what each device really sent its peers in a round (each piece's "
        "pickle and buffers, once per peer, on its round channel).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100, help="batches per device (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats (default %(default)s)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--out-dir", type=Path, default=None, help="default: reports/benchmarks")
    args = parser.parse_args(argv)
    results = run_benchmark(rounds=args.rounds, repeats=args.repeats, variants=args.variants)
    folder = args.out_dir or reports_dir() / "benchmarks"
    md = render_markdown(results)
    atomic_write_text(folder / "strategies.json", json.dumps(results, indent=1, sort_keys=True, default=str) + "\n")
    atomic_write_text(folder / "strategies.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())

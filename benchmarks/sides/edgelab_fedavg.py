"""edgelab's federated averaging in a fresh process: its side of the Flower comparison in ``bench_sync.py``.

The same work as ``flower_fedavg.py``: ``--clients`` emulated devices, each with
its iid shard of the first ``--samples`` digits, the seeded MLP (SGD 0.05), one
local epoch of batch 64 per round (``sync_every="epoch"``), samples-weighted
averaging. Run in its own process, so its start-up pays for what Flower's does
(the interpreter's imports, the cluster, each device's model and data).

Prints one JSON line: seconds from the start of this process to the end of
round 1, each round's wall time (``TrainRun.records["round_wall_s"]``, the
evaluation after each epoch left out, as Flower's rounds have none), and
writes the final weights to ``--out``. ``--hosting virtual --workers 2``: the
devices many to a worker process, two processes (one per core), as Flower's
clients share its two actors.
"""

from __future__ import annotations

import time

PROCESS_START = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from fedavg_args import fedavg_parser  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    """Start the cluster, run the federated rounds, print the times as one JSON line."""
    parser = fedavg_parser(__doc__)
    parser.add_argument("--transport", default="direct")
    parser.add_argument("--hosting", default="process", help="process: a worker per device; virtual: many per worker")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: one per client)")
    args = parser.parse_args(argv)
    workers = args.workers or args.clients

    import numpy as np

    from edgelab.data import load_dataset
    from edgelab.runtime.devices import connect
    from edgelab.training.data_parallel import TrainConfig, train

    data = load_dataset("mnist", sample_limit=args.samples, test_limit=100)
    cfg = TrainConfig(
        model="mlp",
        n_devices=args.clients,
        epochs=args.rounds,
        batch_size=args.batch,
        sync_every="epoch",
        worker_data="shard",
        learning_rate=args.learning_rate,
        seed=args.seed,
        hosting=args.hosting,
    )
    t_connect = time.perf_counter()
    with connect(workers, dashboard_address="127.0.0.1:0") as cluster:
        connected = time.perf_counter()
        run = train(cluster, data, cfg, transport=args.transport, log=lambda _: None)
    rounds = run.records.groupby("round")["round_wall_s"].first().tolist()
    np.savez(args.out, *run.weights)
    print(
        json.dumps(
            {
                "to_connect_s": t_connect - PROCESS_START,
                "connect_s": connected - t_connect,
                "to_round1_end_s": connected - PROCESS_START + run.host["first_round_end_s"],
                "round_s": rounds,
                "clients": args.clients,
                "transport": args.transport,
                "hosting": run.host["hosting"],
                "out": args.out,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

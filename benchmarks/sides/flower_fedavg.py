"""Flower's simulation engine running federated averaging: the federated peer of ``bench_sync.py``.

The same work as edgelab's ``sync_every="epoch"`` run beside it: ``--clients``
clients, each with the same iid shard of the digits edgelab gives a device
(``edgelab.data.partition``), the same seeded MLP (``edgelab.models.builtin.build_model``,
SGD 0.05), one local epoch of batch 64 per round, weighted averaging on the
server, no evaluation inside the rounds. One CPU per client (Ray schedules two
clients at a time on two cores) and one TensorFlow thread per process, as
edgelab's devices have.

Prints one JSON line: seconds from the start of this process to the start and
the end of round 1, every round's wall time (from the strategy sending the
round's messages to its aggregation), and writes the final weights to ``--out``.
``--client-loop compiled`` trains each round in the one compiled loop
edgelab's devices run (``edgelab.runtime.steps.train_steps``, the same
seeded batch order), not Keras ``fit``. Needs ``flwr[simulation]``
(``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import time

PROCESS_START = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
from typing import Any  # noqa: E402

THREAD_CAP = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "OMP_NUM_THREADS": "1"}
# Ray's workers inherit this process's environment: the cap reaches every client process.
os.environ.update(THREAD_CAP)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")  # the kernels edgelab's device workers run

from fedavg_args import fedavg_parser  # noqa: E402

os.environ.setdefault("RAY_DEDUP_LOGS", "0")


def _cache() -> Any:
    """The client state of this process: a module in ``sys.modules``, so it outlives each message.

    Ray pickles this script's functions by value, with fresh copies of its globals
    for every message; a client would rebuild its model and reload its data every
    round. Each client process keeps them here, as a Flower user's module would.
    """
    cache = sys.modules.get("_edgelab_flower_client")
    if cache is None:
        cache = sys.modules["_edgelab_flower_client"] = types.ModuleType("_edgelab_flower_client")
        cache.shards, cache.raw, cache.model, cache.split = {}, {}, None, None
    return cache


def _settings() -> dict[str, Any]:
    return json.loads(os.environ["EDGELAB_FLOWER_BENCH"])


def _client_data(partition: int) -> tuple[Any, Any]:
    """The shard of client ``partition``, edgelab's device of that index gets it (cached per process)."""
    cache = _cache()
    shards = cache.shards
    if partition not in shards:
        from edgelab.data import load_dataset
        from edgelab.data import partition as split
        from edgelab.models.builtin import prepare_images

        s = _settings()
        if cache.split is None:  # the digits and their split, once per process (not once per client)
            data = load_dataset("mnist", sample_limit=s["samples"], test_limit=100)
            cache.split = data, split(data.y_train, s["clients"], scheme="iid", seed=s["seed"])
        data, parts = cache.split
        indices = parts[partition]
        shards[partition] = prepare_images("mlp", data.x_train[indices]), data.y_train[indices]
        _cache().raw[partition] = data.x_train[indices], data.y_train[indices].astype("int64")
    return shards[partition]  # type: ignore[no-any-return]


def _model() -> Any:
    """One model per client process, built and traced once, as a Flower user keeps it."""
    cache = _cache()
    if cache.model is None:
        from edgelab.models.builtin import ModelSpec, build_model

        cache.model = build_model(ModelSpec("mlp", learning_rate=_settings()["learning_rate"]))
    return cache.model


def _compiled_epoch(model: Any, partition: int, server_round: int, weights: list[Any]) -> list[Any]:
    """One local epoch in one compiled loop, the very code and batch order edgelab's device ``partition`` runs.

    ``edgelab.runtime.steps.train_steps`` over the device's seeded order of its
    shard in epoch ``server_round - 1``: the client trains what edgelab's device
    of the same index trains, so both sides' weights agree (to the rounding of
    the server's mean) and the comparison is of the frameworks alone.
    """
    import math

    from edgelab.runtime.steps import Shard, train_steps

    cache, s = _cache(), _settings()
    raw = cache.raw[partition]
    shard = Shard(x=raw[0], y=raw[1], channel_axis=False)
    order = shard.order(s["seed"], partition, server_round - 1)
    delta, _ = train_steps(model, shard, weights, order, math.ceil(len(order) / s["batch"]), s["batch"])
    return [w + d for w, d in zip(weights, delta.arrays, strict=True)]


def _apps() -> tuple[Any, Any, list[float], list[float]]:
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg

    client = ClientApp()

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        partition = int(context.node_config["partition-id"])
        x, y = _client_data(partition)
        model = _model()
        weights = msg.content["arrays"].to_numpy_ndarrays()
        if _settings()["client_loop"] == "compiled":
            trained = _compiled_epoch(model, partition, int(msg.content["config"]["server-round"]), weights)
        else:
            model.set_weights(weights)
            model.fit(x, y, epochs=1, batch_size=_settings()["batch"], shuffle=False, verbose=0)
            trained = model.get_weights()
        content = RecordDict({"arrays": ArrayRecord(trained), "metrics": MetricRecord({"num-examples": len(y)})})
        return Message(content=content, reply_to=msg)

    starts: list[float] = []
    ends: list[float] = []

    class TimedFedAvg(FedAvg):  # type: ignore[misc]
        def configure_train(self, server_round: int, *args: Any) -> Any:
            starts.append(time.perf_counter())
            return super().configure_train(server_round, *args)

        def aggregate_train(self, server_round: int, replies: Any) -> Any:
            result = super().aggregate_train(server_round, replies)
            ends.append(time.perf_counter())
            return result

    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        from edgelab.models.builtin import ModelSpec, build_model

        s = _settings()
        strategy = TimedFedAvg(
            fraction_train=1.0,
            fraction_evaluate=0.0,
            min_train_nodes=s["clients"],
            min_available_nodes=s["clients"],
        )
        initial = build_model(ModelSpec("mlp", learning_rate=s["learning_rate"])).get_weights()
        result = strategy.start(grid, ArrayRecord(initial), num_rounds=s["rounds"])
        import numpy as np

        np.savez(s["out"], *result.arrays.to_numpy_ndarrays())

    return server, client, starts, ends


def main(argv: list[str] | None = None) -> None:
    """Run the federated rounds; print the times as one JSON line."""
    parser = fedavg_parser(__doc__)
    parser.add_argument(
        "--client-loop",
        choices=["fit", "compiled"],
        default="fit",
        help="fit: Keras fit() per round; compiled: the one compiled loop edgelab's devices run",
    )
    args = parser.parse_args(argv)
    os.environ["EDGELAB_FLOWER_BENCH"] = json.dumps(vars(args))
    from flwr.simulation import run_simulation

    server, client, starts, ends = _apps()
    run_simulation(
        server_app=server,
        client_app=client,
        num_supernodes=args.clients,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
    )
    print(
        json.dumps(
            {
                "to_round1_start_s": starts[0] - PROCESS_START,
                "to_round1_end_s": ends[0] - PROCESS_START,
                "round_s": [e - s for s, e in zip(starts, ends, strict=True)],
                "clients": args.clients,
                "client_loop": args.client_loop,
                "out": args.out,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

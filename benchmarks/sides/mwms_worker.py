"""One worker of TensorFlow's MultiWorkerMirroredStrategy: the synchronous-SGD peer of ``bench_sync.py``.

Run by ``bench_sync.py`` as two local processes (``--index 0`` and ``1``), each
with its own half of the digits, one TensorFlow thread, the same seeded MLP
``edgelab.models.builtin.build_model`` builds and the same batch of 64 per worker. The
gradients are all-reduced by TensorFlow's collective ops (ring) between the
two processes at every step. The batches come from
``distribute_datasets_from_function`` at the per-replica batch (an
``experimental_distribute_dataset`` takes its batch as the global one and
splits it: 32 per worker for a stated 64), and the batch each step saw is
recorded. Prints one JSON line: steps per second over the measured steps,
after an unmeasured warm-up (tracing, the collective's setup), and the
seconds from the process's start to the last step's end (with set-up).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

PROCESS_START = time.perf_counter()

THREAD_CAP = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "OMP_NUM_THREADS": "1"}


def main(argv: list[str] | None = None) -> None:
    """Train ``--steps`` synchronous steps as worker ``--index`` of ``--ports``; print the rate as JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--ports", required=True, help="comma-separated ports, one per worker")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--samples", type=int, default=12800)
    args = parser.parse_args(argv)
    ports = args.ports.split(",")
    os.environ.update(THREAD_CAP)
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": args.index}}
    )
    import numpy as np
    import tensorflow as tf

    from edgelab.data import load_dataset
    from edgelab.models.builtin import ModelSpec, build_model, prepare_images

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    data = load_dataset("mnist", sample_limit=args.samples, test_limit=100)
    # Each worker its own half of the digits, as an edgelab device holds its shard.
    x = prepare_images("mlp", data.x_train[args.index :: len(ports)]).reshape(-1, 784)
    y = data.y_train[args.index :: len(ports)].astype(np.int64)
    global_batch = args.batch * strategy.num_replicas_in_sync

    def worker_batches(context: tf.distribute.InputContext) -> tf.data.Dataset:
        # This worker's own half, batched at the per-replica size: no auto-sharding, no split of a global batch.
        per_replica = context.get_per_replica_batch_size(global_batch)
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(per_replica)

    batches = iter(strategy.distribute_datasets_from_function(worker_batches))
    # edgelab's seeded MLP (784-128-64-10, ReLU, softmax) as plain variables: Keras 3's fit does not take
    # this strategy, so the step is TensorFlow's own, the way a tf.distribute user writes it.
    initial = build_model(ModelSpec("mlp", learning_rate=args.learning_rate)).get_weights()
    with strategy.scope():
        variables = [tf.Variable(w, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA) for w in initial]

    def forward(xb: tf.Tensor) -> tf.Tensor:
        w1, b1, w2, b2, w3, b3 = variables
        h = tf.nn.relu(xb @ w1 + b1)
        h = tf.nn.relu(h @ w2 + b2)
        return h @ w3 + b3  # logits of the softmax layer

    def replica_step(xb: tf.Tensor, yb: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(yb, forward(xb))
            loss = tf.reduce_sum(per_example) / global_batch
        grads = tape.gradient(loss, variables)
        # The ring all-reduce of every gradient across the workers, in one packed collective.
        grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
        for v, g in zip(variables, grads, strict=True):
            v.assign_sub(args.learning_rate * g)
        return loss, tf.shape(xb)[0]

    @tf.function
    def train_step() -> tf.Tensor:
        xb, yb = next(batches)
        return strategy.run(replica_step, args=(xb, yb))

    for _ in range(args.warmup):
        train_step()
    cpu0, start = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        loss, seen = train_step()
    float(strategy.experimental_local_results(loss)[0])  # the last step has finished
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    result = {
        "index": args.index,
        "steps": args.steps,
        "wall_s": wall,
        "steps_per_s": args.steps / wall,
        "cpu_s": cpu,
        "replicas": strategy.num_replicas_in_sync,
        "batch_seen": int(strategy.experimental_local_results(seen)[0]),
        "with_setup_s": time.perf_counter() - PROCESS_START,
    }
    print(json.dumps(result), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

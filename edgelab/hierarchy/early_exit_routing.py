"""A trained DDNN (``edgelab.hierarchy.early_exit``) run on the cluster: devices, a local aggregator, the cloud.

Each part is shipped to its own worker as its Keras config and weights and
traced there once (``deploy``). ``route`` then sends the samples through in
batches: end device i gets view i of the batch (the client stands for its
sensor) and runs its block; the aggregator worker receives the D feature
tensors from the devices (worker to worker), computes the combined tensor and
the local exit, and decides per sample (``edgelab.hierarchy.early_exit.exits_locally``).
Only the samples that do not exit go upward: their ids and combined tensors,
one ``(ids, tensor)`` pair per batch, move from the aggregator to the cloud
worker, and nothing at all when every sample of a batch exits. Every task
records the CPU time its process spent and the serialized size of what it
sends (Dask's own serialization, ``distributed.protocol.serialize_bytelist``);
the cloud records the size of what it received, which must be the same.

Emulated time (``emulated_latency``): as everywhere in edgelab, a task's CPU
seconds times its device's speed factor, plus each transfer's link latency
and bytes over the link rate. A batch's samples exit together when the
slowest device's output has reached the aggregator and it has decided; a
sample sent upward also waits for the transfer to the cloud and the cloud's
compute.
"""

from __future__ import annotations

import json
import operator
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster, device_resource
from edgelab.common.errors import ConfigError
from edgelab.hierarchy.early_exit import DDNN, check_threshold, exits_locally, normalized_entropy

# Worker-side state: the parts each worker holds, and the records its tasks wrote.
_PARTS: dict[tuple[str, str], Any] = {}
_RECORDS: dict[str, list[dict[str, Any]]] = {}


def serialized_bytes(obj: Any) -> int:
    """Bytes ``obj`` takes on Dask's wire: the frames its serialization gives, header included."""
    from distributed.protocol.serialize import serialize_bytelist

    return int(sum(memoryview(frame).nbytes for frame in serialize_bytelist(obj)))


def upward_bytes(n_samples: int, shape: tuple[int, ...]) -> int:
    """Serialized size of ``n_samples`` going upward (int32 ids and float32 tensors of ``shape``); 0 for none.

    The size depends on the shapes alone, so the zeros here give what the real tensors give.
    """
    if n_samples == 0:
        return 0
    return serialized_bytes((np.zeros(n_samples, np.int32), np.zeros((n_samples, *shape), np.float32)))


# --------------------------------------------------------------- worker side ----


def _device_name() -> str:
    from distributed import get_worker

    return str(get_worker().name)


def _record(run_id: str, **fields: Any) -> None:
    _RECORDS.setdefault(run_id, []).append({"device": _device_name(), **fields})


def load_part(run_id: str, part: str, config: str, weights: list[np.ndarray], batch: int) -> dict[str, Any]:
    """Rebuild a part from its Keras config and weights and trace it on ``batch`` samples, on this worker."""
    import keras
    import tensorflow as tf

    cpu0 = time.process_time()
    model = keras.Model.from_config(json.loads(config))
    model.set_weights(weights)
    shapes = [tuple(t.shape[1:]) for t in model.inputs]
    specs = [tf.TensorSpec((None, *s), tf.float32) for s in shapes]
    predict = tf.function(lambda *xs: model(list(xs) if len(xs) > 1 else xs[0], training=False), input_signature=specs)
    predict(*[np.zeros((batch, *s), np.float32) for s in shapes])
    _PARTS[(run_id, part)] = predict
    return {
        "device": _device_name(),
        "part": part,
        "parameters": int(model.count_params()),
        "load_cpu_s": time.process_time() - cpu0,
    }


def _held(run_id: str, part: str) -> Any:
    predict = _PARTS.get((run_id, part))
    if predict is None:
        raise ConfigError("part", f"{part} of run {run_id}", f"a part loaded on {_device_name()} (deploy first)")
    return predict


def run_device(run_id: str, part: str, batch: int, view: np.ndarray) -> np.ndarray:
    """Device block on this device's view of one batch; its feature tensor goes to the aggregator."""
    predict = _held(run_id, part)
    cpu0 = time.process_time()
    features = np.asarray(predict(view))  # (B, h, w, c) float32
    cpu_s = time.process_time() - cpu0
    _record(run_id, part=part, batch=batch, cpu_s=cpu_s, samples=len(view), bytes_sent=serialized_bytes(features))
    return features


def run_aggregator(
    run_id: str, batch: int, first_id: int, threshold: float, *features: np.ndarray
) -> tuple[dict[str, Any], tuple[np.ndarray, np.ndarray] | None]:
    """Combine the devices' features, classify at the local exit, and decide per sample.

    Returns what the client gets (local softmax, eta, which samples exit) and
    what goes upward: the non-exiting samples' ids and combined tensors, or
    ``None`` when every sample exits.
    """
    predict = _held(run_id, "aggregator")
    cpu0 = time.process_time()
    combined, local = (np.asarray(t) for t in predict(*features))  # (B, h, w, c'), (B, classes)
    eta = normalized_entropy(local)
    exits = exits_locally(eta, threshold)
    up = np.flatnonzero(~exits)
    upward = (up.astype(np.int32) + first_id, np.ascontiguousarray(combined[up])) if len(up) else None
    cpu_s = time.process_time() - cpu0
    sent = serialized_bytes(upward) if upward is not None else 0
    _record(
        run_id,
        part="aggregator",
        batch=batch,
        cpu_s=cpu_s,
        samples=len(local),
        bytes_sent=sent,
        bytes_received=sum(serialized_bytes(f) for f in features),
        upward_samples=len(up),
    )
    return {"local": local, "eta": eta, "exits": exits}, upward


def run_cloud(run_id: str, batch: int, upward: tuple[np.ndarray, np.ndarray]) -> dict[str, np.ndarray]:
    """The cloud part on the samples sent upward: their ids and final softmax."""
    predict = _held(run_id, "cloud")
    received = serialized_bytes(upward)
    ids, combined = upward
    cpu0 = time.process_time()
    final = np.asarray(predict(combined))  # (n_up, classes)
    cpu_s = time.process_time() - cpu0
    _record(run_id, part="cloud", batch=batch, cpu_s=cpu_s, samples=len(ids), bytes_received=received)
    return {"ids": ids, "final": final}


def collect(run_id: str, release: bool = False) -> list[dict[str, Any]]:
    """Take the records of ``run_id`` on this worker (each is returned once); with ``release``, its parts go too."""
    records = _RECORDS.pop(run_id, [])
    if release:
        for key in [k for k in _PARTS if k[0] == run_id]:
            del _PARTS[key]
    return records


# --------------------------------------------------------------- client side ----


@dataclass(frozen=True)
class Deployment:
    """A DDNN's parts loaded on their workers."""

    run_id: str
    devices: tuple[str, ...]  # end device i runs block i
    aggregator: str
    cloud: str
    upward_shape: tuple[int, ...]
    batch: int
    loads: tuple[dict[str, Any], ...]


def deploy(
    cluster: DeviceCluster, ddnn: DDNN, *, devices: list[str], aggregator: str, cloud: str, batch: int
) -> Deployment:
    """Ship each part of ``ddnn`` to its worker and trace it there for batches of ``batch``."""
    if len(devices) != len(ddnn.devices):
        raise ConfigError("devices", devices, f"one worker per device block ({len(ddnn.devices)})")
    run_id = uuid.uuid4().hex[:12]
    parts = [
        *((f"device-{i}", m, d) for i, (m, d) in enumerate(zip(ddnn.devices, devices, strict=True))),
        ("aggregator", ddnn.aggregator, aggregator),
        ("cloud", ddnn.cloud, cloud),
    ]
    futures = [
        cluster.client.submit(
            load_part,
            run_id,
            part,
            json.dumps(model.get_config()),
            model.get_weights(),
            batch,
            resources={device_resource(host): 1},
            pure=False,
        )
        for part, model, host in parts
    ]
    loads = tuple(cluster.client.gather(futures))
    return Deployment(run_id, tuple(devices), aggregator, cloud, ddnn.upward_shape, batch, loads)


def release(cluster: DeviceCluster, deployment: Deployment) -> None:
    """Drop the deployment's parts and records from every worker."""
    cluster.client.run(collect, deployment.run_id, True)


@dataclass(frozen=True)
class Routed:
    """One routed pass: per sample and per task."""

    threshold: float
    samples: pd.DataFrame  # per sample: eta, local, exits, final (-1 where the sample exited), prediction
    records: pd.DataFrame  # per task: device, part, batch, cpu_s, samples, bytes_sent, bytes_received, ...
    cloud_ids: np.ndarray  # every id the cloud worker received
    local_probs: np.ndarray  # (N, classes) the local exit's softmax, as the aggregator computed it

    @property
    def upward_bytes(self) -> int:
        """Bytes the aggregator sent to the cloud over the pass."""
        return int(self.records.loc[self.records["part"] == "aggregator", "bytes_sent"].sum())


def route(cluster: DeviceCluster, deployment: Deployment, views: list[np.ndarray], threshold: float) -> Routed:
    """Send every sample of ``views`` through the deployed DDNN, exiting locally where eta <= ``threshold``.

    First every batch goes through the devices and the aggregator; then the
    cloud gets each batch's upward pair, for the batches that have one.
    """
    threshold = check_threshold(threshold)
    if len(views) != len(deployment.devices):
        raise ConfigError("views", len(views), f"one view per device ({len(deployment.devices)})")
    client, d = cluster.client, deployment
    n = len(views[0])
    on = {host: {device_resource(host): 1} for host in (*d.devices, d.aggregator, d.cloud)}
    local, upward = [], []
    for b, start in enumerate(range(0, n, d.batch)):
        features = [
            client.submit(
                run_device, d.run_id, f"device-{i}", b, v[start : start + d.batch], resources=on[host], pure=False
            )
            for i, (v, host) in enumerate(zip(views, d.devices, strict=True))
        ]
        pair = client.submit(
            run_aggregator, d.run_id, b, start, threshold, *features, resources=on[d.aggregator], pure=False
        )
        # Both halves are taken on the aggregator itself: only the upward half ever leaves it, and only to the cloud.
        local.append(client.submit(operator.getitem, pair, 0, resources=on[d.aggregator], pure=False))
        upward.append(client.submit(operator.getitem, pair, 1, resources=on[d.aggregator], pure=False))
    decided = client.gather(local)
    clouds = [
        client.submit(run_cloud, d.run_id, b, up, resources=on[d.cloud], pure=False)
        for b, (up, result) in enumerate(zip(upward, decided, strict=True))
        if not result["exits"].all()
    ]
    answers = client.gather(clouds)
    del upward, clouds
    records = pd.DataFrame([r for rs in client.run(collect, d.run_id).values() for r in rs])
    eta = np.concatenate([r["eta"] for r in decided])
    probs = np.concatenate([r["local"] for r in decided])
    exits = np.concatenate([r["exits"] for r in decided])
    final = np.full(n, -1, np.int64)
    ids = np.concatenate([a["ids"] for a in answers]) if answers else np.zeros(0, np.int32)
    if answers:
        final[ids] = np.concatenate([a["final"].argmax(axis=1) for a in answers])
    samples = pd.DataFrame({"eta": eta, "local": probs.argmax(axis=1), "exits": exits, "final": final})
    samples["prediction"] = np.where(exits, samples["local"], samples["final"])
    return Routed(threshold, samples, records.sort_values(["batch", "part"], ignore_index=True), ids, probs)


def emulated_latency(
    records: pd.DataFrame,
    *,
    speed: dict[str, float],
    links: dict[str, tuple[float, float]],
    upward_samples: dict[int, int] | None = None,
) -> pd.DataFrame:
    """Emulated seconds of each batch: the local phase, and the upward phase its non-exiting samples wait for too.

    Parameters
    ----------
    records
        ``Routed.records`` (one row per task).
    speed
        Speed factor per part kind: ``"device"``, ``"aggregator"``, ``"cloud"``.
    links
        ``(latency_s, bytes_per_s)`` of the devices' link to the aggregator
        (``"device"``) and of the aggregator's link to the cloud (``"cloud"``).
    upward_samples
        Per batch, how many samples went up (default: the aggregator's records say).

    Returns
    -------
    pandas.DataFrame
        Per batch: ``samples, upward_samples, local_s, upward_s`` and
        ``mean_s``, the mean over its samples (``local_s + upward_s * up / samples``).
    """
    rows = []
    device_latency, device_rate = links["device"]
    cloud_latency, cloud_rate = links["cloud"]
    for batch, tasks in records.groupby("batch"):
        devices = tasks[tasks["part"].str.startswith("device-")]
        agg = tasks[tasks["part"] == "aggregator"].iloc[0]
        arrive = devices["cpu_s"] * speed["device"] + device_latency + devices["bytes_sent"] / device_rate
        local_s = float(arrive.max()) + float(agg["cpu_s"]) * speed["aggregator"]
        cloud = tasks[tasks["part"] == "cloud"]
        up = int(agg["upward_samples"]) if upward_samples is None else upward_samples[int(batch)]
        upward_s = 0.0
        if len(cloud):
            upward_s = (
                cloud_latency + float(agg["bytes_sent"]) / cloud_rate + float(cloud["cpu_s"].iloc[0]) * speed["cloud"]
            )
        rows.append(
            {
                "batch": int(batch),
                "samples": int(agg["samples"]),
                "upward_samples": up,
                "local_s": local_s,
                "upward_s": upward_s,
                "mean_s": local_s + upward_s * up / int(agg["samples"]),
            }
        )
    return pd.DataFrame(rows)

"""Compressed updates under the all-reduce transport: the direct run's weights, bit for bit, for less traffic.

A real three-device cluster. With a compressor each device encodes its own
delta (the same seeded rng and residual as under ``transport="direct"``) and the
devices all-gather the encoded updates (``edgelab.peer.allreduce``): every device
decodes all of them in device order and takes the parameter server's step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.cluster.faults import Kill
from edgelab.common.errors import ConfigError
from edgelab.data import Dataset
from edgelab.peer.messages import serialized
from edgelab.sync.compress import build_compressor
from edgelab.training.data_parallel import TrainConfig, TrainRun, train

# What a device measured and what the run computed; wall and CPU seconds are measurements of the host.
SAME = ["round", "device", "samples", "bytes_received", "bytes_sent", "loss", "update"]
# (compressor, devices): sign, top-k, DGC and eSGD on two devices, top-k on three (all-gather to two peers each)
CASES = [("sign_ef", 2), ("topk:0.1", 2), ("dgc:0.1:0.9", 2), ("esgd:0.1", 2), ("topk:0.1", 3)]
QUIET = {"log": lambda _: None}


def _cfg(compressor: str, n_devices: int) -> TrainConfig:
    return TrainConfig(model="mlp", n_devices=n_devices, batch_size=32, compressor=compressor, seed=3)


@pytest.fixture(scope="module")
def cluster(three_devices: DeviceCluster) -> DeviceCluster:
    """Three emulated pi3b devices (runs of two use the first two)."""
    return three_devices


@pytest.fixture(scope="module")
def runs(cluster: DeviceCluster, dataset: Dataset) -> dict[tuple[str, int], dict[str, TrainRun]]:
    """Each case trained once directly and once by all-reduce."""
    return {
        case: {t: train(cluster, dataset, _cfg(*case), transport=t, **QUIET) for t in ("direct", "allreduce")}
        for case in CASES
    }


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES, ids=[f"{c}-n{n}" for c, n in CASES])
def test_compressed_allreduce_ends_with_the_direct_weights_bit_for_bit(
    runs: dict[tuple[str, int], dict[str, TrainRun]], case: tuple[str, int]
) -> None:
    direct, ring = runs[case]["direct"], runs[case]["allreduce"]

    assert ring.host["transport"] == "allreduce"
    assert ring.weights_sha256 == direct.weights_sha256
    for got, want in zip(ring.weights, direct.weights, strict=True):
        np.testing.assert_array_equal(got, want)
    pd.testing.assert_frame_equal(ring.records[SAME], direct.records[SAME])
    pd.testing.assert_frame_equal(
        ring.evaluations[["epoch", "rounds", "accuracy", "loss"]],
        direct.evaluations[["epoch", "rounds", "accuracy", "loss"]],
    )


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES, ids=[f"{c}-n{n}" for c, n in CASES])
def test_each_device_sends_its_encoded_update_once_to_each_peer(
    runs: dict[tuple[str, int], dict[str, TrainRun]], case: tuple[str, int]
) -> None:
    # Prepare: the bytes one encoded update of the model takes on the wire (its sizes do not depend on its values)
    compressor, n = case
    records = runs[case]["allreduce"].records
    codec = build_compressor(compressor)
    assert codec is not None
    zeros = [np.zeros_like(w) for w in runs[case]["direct"].weights]
    message = serialized(codec.encode(zeros, np.random.default_rng(0)))[1]

    # Assert: an all-gather, n - 1 messages of exactly that size each way, a small part of the dense delta
    assert set(records["exchange"]) == {"allgather_encoded"}
    assert (records["peer_messages_sent"] == n - 1).all()
    assert (records["peer_bytes_sent"] == (n - 1) * message).all()
    assert (records["peer_bytes_received"] == (n - 1) * message).all()
    assert (records["peer_bytes_sent"] < 0.25 * (n - 1) * records["bytes_sent_dense"]).all()


@pytest.mark.integration
@pytest.mark.parametrize("transport", ["direct", "allreduce"])
def test_a_round_cut_by_a_lost_device_is_run_again_from_the_residuals_it_started_with(
    cluster: DeviceCluster, dataset: Dataset, runs: dict[tuple[str, int], dict[str, TrainRun]], transport: str
) -> None:
    # Prepare: a device dies as the first round starts, when no device holds a residual yet
    # (a device killed later loses its residual, as a board would, and the run differs)
    undisturbed = runs[("sign_ef", 2)]["direct"]
    kills = [Kill("pi3b-1", "train", 0)]

    # Execute
    run = train(cluster, dataset, _cfg("sign_ef", 2), kills=kills, transport=transport, **QUIET)

    # Assert: recovered, and the survivor did not fold the cut round's residual in twice
    assert run.recoveries["device"].tolist() == ["pi3b-1"]
    assert run.weights_sha256 == undisturbed.weights_sha256


@pytest.mark.parametrize(
    ("settings", "named"),
    [({"client_fraction": 0.5}, "client_fraction=0.5"), ({"deadline": "fixed:1.0"}, "deadline='fixed:1.0'")],
)
def test_a_deadline_or_a_client_fraction_is_still_refused_before_any_cluster_work(
    dataset: Dataset, settings: dict, named: str
) -> None:
    # A cluster that must not be touched: any use of it would fail on None
    idle = DeviceCluster(client=None, devices=["pi3b-0"], profile=None, emulated=True)  # type: ignore[arg-type]
    cfg = TrainConfig(model="mlp", n_devices=2, compressor="sign_ef", **settings)

    with pytest.raises(ConfigError, match=rf"transport='allreduce' is not allowed: .*averages every.*{named}"):
        train(idle, dataset, cfg, transport="allreduce", **QUIET)

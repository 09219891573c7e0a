"""Tree all-reduce as a training path: ``transport="tree"`` against the parameter server (``"direct"``).

A real three-device cluster. Under ``"tree"`` each device sends its parent its
subtree's mean delta, device 0 takes the server's step and sends it back down
the binomial tree (``edgelab.peer.allreduce``). Up to three devices every child of
the root is a leaf, so the root averages the same deltas in the same order as
the parameter server: the weights are the direct run's bit for bit (measured
max abs difference 0.0). Deeper trees round each subtree's mean once more; the
arithmetic of a five-device tree is checked without a cluster, within 1e-6.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.cluster.faults import Kill
from edgelab.common.errors import ConfigError
from edgelab.data import Dataset
from edgelab.peer.allreduce import subtree_mean, tree_links
from edgelab.peer.messages import serialized
from edgelab.sync.aggregate import weighted_mean
from edgelab.training.data_parallel import TrainConfig, TrainRun, train

# What a device measured and what the run computed; wall and CPU seconds are measurements of the host.
SAME = ["round", "device", "samples", "bytes_received", "bytes_sent", "loss", "update"]
# (devices, momentum): a two-device and a three-device tree, and server momentum once
CASES = [(2, 0.0), (3, 0.0), (3, 0.9)]
QUIET = {"log": lambda _: None}


def _cfg(n_devices: int, momentum: float) -> TrainConfig:
    return TrainConfig(model="mlp", n_devices=n_devices, batch_size=32, momentum=momentum, seed=5)


@pytest.fixture(scope="module")
def cluster(three_devices: DeviceCluster) -> DeviceCluster:
    """Three emulated pi3b devices (runs of two use the first two)."""
    return three_devices


@pytest.fixture(scope="module")
def runs(cluster: DeviceCluster, dataset: Dataset) -> dict[tuple[int, float], dict[str, TrainRun]]:
    """Each case trained once directly and once up and down the tree."""
    return {
        case: {t: train(cluster, dataset, _cfg(*case), transport=t, **QUIET) for t in ("direct", "tree")}
        for case in CASES
    }


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 13])
def test_every_device_but_the_root_has_one_parent_that_lists_it_as_a_child(n: int) -> None:
    links = [tree_links(i, n) for i in range(n)]

    assert links[0][0] is None
    for i, (parent, children) in enumerate(links):
        assert all(tree_links(c, n)[0] == i for c in children)
        if i:
            assert parent is not None and parent < i and i in links[parent][1]
    assert sorted(c for _, children in links for c in children) == list(range(1, n))


def test_subtree_means_up_a_five_device_tree_give_the_weighted_mean_within_float_rounding() -> None:
    # Prepare: five deltas with uneven samples, one device without any
    rng = np.random.default_rng(0)
    deltas = [rng.normal(size=1000).astype(np.float32) for _ in range(5)]
    samples = [32, 7, 0, 32, 19]

    # Execute: each device's subtree mean, leaves first (children have higher indices)
    up: dict[int, tuple[int, np.ndarray | None]] = {}
    for i in reversed(range(5)):
        own = (samples[i], deltas[i] if samples[i] else None)
        up[i] = subtree_mean([own] + [up[c] for c in tree_links(i, 5)[1]])

    # Assert: all the samples, and the parameter server's mean up to float32 rounding
    want = weighted_mean([[d] for d in deltas], samples)[0]
    assert up[0][0] == sum(samples)
    np.testing.assert_allclose(up[0][1], want, rtol=0, atol=1e-6)
    assert subtree_mean([(0, None), (0, None)]) == (0, None)


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES, ids=[f"n{n}-momentum{m}" for n, m in CASES])
def test_the_tree_ends_with_the_direct_weights(
    runs: dict[tuple[int, float], dict[str, TrainRun]], case: tuple[int, float]
) -> None:
    direct, tree = runs[case]["direct"], runs[case]["tree"]

    # Up to three devices the root averages the same deltas in the same order: bit for bit
    assert tree.host["transport"] == "tree"
    assert max(float(np.abs(g - w).max()) for g, w in zip(tree.weights, direct.weights, strict=True)) == 0.0
    assert tree.weights_sha256 == direct.weights_sha256
    pd.testing.assert_frame_equal(tree.records[SAME], direct.records[SAME])
    pd.testing.assert_frame_equal(
        tree.evaluations[["epoch", "rounds", "accuracy", "loss"]],
        direct.evaluations[["epoch", "rounds", "accuracy", "loss"]],
    )


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES, ids=[f"n{n}-momentum{m}" for n, m in CASES])
def test_each_device_sends_and_receives_one_delta_or_step_per_tree_link(
    runs: dict[tuple[int, float], dict[str, TrainRun]], case: tuple[int, float]
) -> None:
    # Prepare: the bytes of one dense delta (or step) on the wire
    n, _ = case
    records = runs[case]["tree"].records
    n_params = sum(w.size for w in runs[case]["direct"].weights)
    message = serialized(np.zeros(n_params, np.float32))[1]
    links = records["device_index"].map(lambda i: 1 + len(tree_links(i, n)[1]) - (i == 0))

    # Assert: a leaf sends its delta up and receives the step; the root receives and sends one per child
    assert set(records["exchange"]) == {"tree"}
    assert (records["peer_messages_sent"] == links).all()
    assert (records["peer_bytes_sent"] == links * message).all()
    assert (records["peer_bytes_received"] == links * message).all()


@pytest.mark.integration
def test_a_round_cut_by_a_lost_device_is_run_again_from_a_survivors_state(
    cluster: DeviceCluster, dataset: Dataset, runs: dict[tuple[int, float], dict[str, TrainRun]]
) -> None:
    # Prepare: a leaf of the three-device tree dies in its second round
    undisturbed = runs[(3, 0.9)]["direct"]

    # Execute
    run = train(cluster, dataset, _cfg(3, 0.9), kills=[Kill("pi3b-2", "train", 1)], transport="tree", **QUIET)

    # Assert: recovered from a survivor's weights and momentum, and the undisturbed run's weights
    assert run.recoveries["device"].tolist() == ["pi3b-2"]
    assert run.weights_sha256 == undisturbed.weights_sha256


def test_a_compressor_is_refused_under_the_tree_before_any_cluster_work(dataset: Dataset) -> None:
    # A cluster that must not be touched: any use of it would fail on None
    idle = DeviceCluster(client=None, devices=["pi3b-0"], profile=None, emulated=True)  # type: ignore[arg-type]

    with pytest.raises(ConfigError, match=r"transport='tree' is not allowed: dense updates .*compressor='sign_ef'"):
        train(idle, dataset, TrainConfig(model="mlp", n_devices=2, compressor="sign_ef"), transport="tree", **QUIET)
    with pytest.raises(ConfigError, match=r"transport='tree' is not allowed: a synchronous strategy"):
        train(idle, dataset, TrainConfig(model="mlp", n_devices=2, strategy="ps_async"), transport="tree", **QUIET)

"""Gossip averaging as a training strategy: each device keeps its own weights and mixes them with its neighbours'.

A real three-device cluster (``strategy="gossip"`` on ``transport="allreduce"``,
``edgelab.peer.gossip``). References: on a complete graph (a ring of two) with equal
samples per device, every device's weights after each round are the mean of
the devices' locally stepped weights, which is the parameter server's
synchronous SGD up to float32 rounding (the server adds the mean delta, the
devices average ``w + delta_i``): measured max abs difference 4.7e-10 after 4
rounds (6.0e-8 after 24), asserted within 1e-6. On a path the devices differ
(by up to 4.7e-3 after one round), but Metropolis weights keep their mean:
after one round it is the one-round parameter server's (``end_average``),
measured 3.0e-8 apart, asserted within 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.cluster.faults import Kill
from edgelab.common.errors import ConfigError
from edgelab.data import Dataset
from edgelab.peer.messages import serialized
from edgelab.sync.topology import build_topology, metropolis_row, mix
from edgelab.training.data_parallel import TrainConfig, TrainRun, train

QUIET = {"log": lambda _: None}
# Float32 rounding of the averaged weights against the server's float64 mean delta (measured: <= 6.0e-8)
TOLERANCE = 1e-6
# seed 1 draws a path 0 - 1 - 2 for random:1 over three devices: degrees 1, 2, 1
PATH = {"gossip_topology": "random:1", "seed": 1}


@pytest.fixture(scope="module")
def cluster(three_devices: DeviceCluster) -> DeviceCluster:
    """Three emulated pi3b devices (runs of two use the first two)."""
    return three_devices


@pytest.fixture(scope="module")
def runs(cluster: DeviceCluster, dataset: Dataset) -> dict[str, TrainRun]:
    """Gossip runs and the parameter-server runs they are held against."""
    one_round = {"sync_every": "epoch", "batch_size": 32}
    even = dataset.limited(sample_limit=255)  # 85 digits per device: equal samples, so equal weights in the mean
    settings = {
        "ps-n2": (dataset, TrainConfig(model="mlp", n_devices=2, batch_size=32), "direct"),
        "gossip-n2": (dataset, TrainConfig(model="mlp", n_devices=2, batch_size=32, strategy="gossip"), "allreduce"),
        "end-average-n3": (
            even,
            TrainConfig(model="mlp", n_devices=3, strategy="end_average", **one_round, seed=1),
            "direct",
        ),
        "gossip-path-n3": (
            even,
            TrainConfig(model="mlp", n_devices=3, strategy="gossip", **one_round, **PATH),
            "allreduce",
        ),
        "gossip-ring-n3": (
            dataset,
            TrainConfig(model="mlp", n_devices=3, batch_size=32, strategy="gossip"),
            "allreduce",
        ),
    }
    return {name: train(cluster, data, cfg, transport=t, **QUIET) for name, (data, cfg, t) in settings.items()}


def _max_abs_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(x.astype(np.float64) - y).max()) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize(
    "adjacency", [[[1], [0]], [[1, 2], [0, 2], [0, 1]], [[1], [0, 2], [1]], build_topology("random:1", 7, 3)]
)
def test_metropolis_weights_are_symmetric_and_keep_the_mean(adjacency: list[list[int]]) -> None:
    # Prepare: the mixing matrix, row by row
    n = len(adjacency)
    matrix = np.zeros((n, n))
    for i in range(n):
        for j, w in metropolis_row(adjacency, i).items():
            matrix[i, j] = w

    # Assert: doubly stochastic (the mean of the devices' weights is kept), neighbours only
    np.testing.assert_allclose(matrix, matrix.T, rtol=0, atol=1e-15)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    assert all((matrix[i] > 0).sum() == 1 + len(adjacency[i]) for i in range(n))


def test_on_a_complete_graph_every_device_mixes_to_the_same_bits() -> None:
    # Prepare: three devices' weights, each averaging all three
    rng = np.random.default_rng(0)
    vectors = {i: rng.normal(size=500).astype(np.float32) for i in range(3)}
    adjacency = build_topology("ring", 3, 0)

    # Execute
    mixed = [mix(metropolis_row(adjacency, i), vectors) for i in range(3)]

    # Assert: the same bits everywhere, the uniform mean to float32 rounding
    assert metropolis_row(adjacency, 0) == {0: 1 / 3, 1: 1 / 3, 2: 1 / 3}
    assert all(np.array_equal(m, mixed[0]) for m in mixed)
    np.testing.assert_allclose(mixed[0], np.mean(list(vectors.values()), axis=0), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (
            {"strategy": "gossip", "gossip_topology": "star"},
            r"gossip_topology='star' is not allowed: 'ring' or 'random",
        ),
        ({"strategy": "gossip", "gossip_topology": "random:0"}, r"gossip_topology='random:0'"),
        (
            {"strategy": "gossip", "gossip_topology": "random:1", "n_devices": 4, "seed": 0},
            r"gossip_topology='random:1' is not allowed: a graph connecting every worker .*n_devices=4, seed=0",
        ),
        (
            {"gossip_topology": "random:2"},
            r"gossip_topology='random:2' is not allowed: 'ring' unless strategy='gossip'",
        ),
        ({"strategy": "gossip", "momentum": 0.9}, r"momentum=0.9 is not allowed: 0 under strategy='gossip'"),
        ({"strategy": "gossip", "compressor": "sign_ef"}, r"compressor='sign_ef' is not allowed: 'none' under"),
    ],
)
def test_a_gossip_setting_that_cannot_run_is_refused_naming_it(settings: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        TrainConfig(model="mlp", **{"n_devices": 3, **settings})


def test_the_topology_is_left_out_of_old_keys_and_gossip_needs_the_device_held_path(dataset: Dataset) -> None:
    # A cluster that must not be touched: any use of it would fail on None
    idle = DeviceCluster(client=None, devices=["pi3b-0"], profile=None, emulated=True)  # type: ignore[arg-type]
    cfg = TrainConfig(model="mlp", n_devices=2, strategy="gossip")

    assert "gossip_topology" not in TrainConfig(model="mlp").to_dict()
    assert TrainConfig(model="mlp", n_devices=3, strategy="gossip", **PATH).to_dict()["gossip_topology"] == "random:1"
    with pytest.raises(ConfigError, match=r"transport='direct' is not allowed: 'allreduce' under strategy='gossip'"):
        train(idle, dataset, cfg, transport="direct", **QUIET)


@pytest.mark.integration
def test_on_a_complete_graph_gossip_is_the_parameter_servers_sgd_and_the_devices_agree(
    runs: dict[str, TrainRun],
) -> None:
    gossip, ps = runs["gossip-n2"], runs["ps-n2"]

    assert (gossip.records["samples"] == 32).all()  # equal samples: the server's mean is the uniform one
    assert _max_abs_diff(gossip.weights, ps.weights) <= TOLERANCE
    assert (gossip.evaluations["consensus_spread"] == 0.0).all()
    np.testing.assert_allclose(gossip.evaluations["accuracy"], ps.evaluations["accuracy"], rtol=0, atol=1e-9)


@pytest.mark.integration
def test_on_a_path_the_devices_differ_and_their_mean_follows_the_update(runs: dict[str, TrainRun]) -> None:
    gossip, server = runs["gossip-path-n3"], runs["end-average-n3"]

    assert len(gossip.records) == 3 and (gossip.records["samples"] == 85).all()
    assert gossip.evaluations["consensus_spread"].iloc[-1] > 1e-4
    assert _max_abs_diff(gossip.weights, server.weights) <= TOLERANCE


@pytest.mark.integration
@pytest.mark.parametrize(("name", "degrees"), [("gossip-n2", [1, 1]), ("gossip-path-n3", [1, 2, 1])])
def test_each_device_sends_its_weights_once_to_each_neighbour(
    runs: dict[str, TrainRun], name: str, degrees: list[int]
) -> None:
    # Prepare: the bytes of the weights on the wire
    records = runs[name].records
    message = serialized(np.zeros(sum(w.size for w in runs[name].weights), np.float32))[1]
    degree = records["device_index"].map(lambda i: degrees[i])

    assert set(records["exchange"]) == {"gossip"}
    assert (records["peer_messages_sent"] == degree).all()
    assert (records["peer_bytes_sent"] == degree * message).all()
    assert (records["peer_bytes_received"] == degree * message).all()


@pytest.mark.integration
def test_a_lost_device_on_a_complete_graph_comes_back_with_its_neighbours_mean_which_is_its_own(
    cluster: DeviceCluster, dataset: Dataset, runs: dict[str, TrainRun]
) -> None:
    # Prepare: after a round on a complete graph every device holds the same weights
    undisturbed = runs["gossip-ring-n3"]

    # Execute: a device dies in its second round and is recovered from its neighbours' mean
    cfg = TrainConfig(model="mlp", n_devices=3, batch_size=32, strategy="gossip")
    run = train(cluster, dataset, cfg, kills=[Kill("pi3b-2", "train", 1)], transport="allreduce", **QUIET)

    # Assert: recovered, and the undisturbed run's consensus bit for bit
    assert run.recoveries["device"].tolist() == ["pi3b-2"]
    assert run.weights_sha256 == undisturbed.weights_sha256

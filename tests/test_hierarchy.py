"""An end / edge / cloud hierarchy: tiers checked before anything starts, devices pinned by tier and name."""

from __future__ import annotations

import os

import pytest

from edgelab.common.errors import ConfigError
from edgelab.emulation.tiers import ZHANG2018, HierarchySpec, Tier
from edgelab.runtime.devices import start_hierarchy


def test_the_reports_evaluation_system() -> None:
    assert [(t.name, t.devices, t.cores, t.latency_s) for t in ZHANG2018.tiers] == [
        ("end", 8, 1, 0.0),
        ("edge", 4, 4, 0.5),
        ("cloud", 1, 8, 1.0),
    ]
    assert list(ZHANG2018.devices())[:2] == ["end-0", "end-1"] and len(ZHANG2018.devices()) == 13
    assert "memory_mb" in ZHANG2018.tier("edge").assumed  # type: ignore[union-attr]


def test_scaling_keeps_every_other_value() -> None:
    small = ZHANG2018.scaled(end=2, edge=1)

    assert [t.devices for t in small.tiers] == [2, 1, 1]
    assert small.tier("cloud") == ZHANG2018.tier("cloud")
    assert small.count("edge") == 1 and HierarchySpec((Tier("end", 1, 1, 512, 0.0, 100.0),)).count("cloud") == 0


def test_a_tiers_link_moves_bytes_at_its_rate() -> None:
    assert Tier("edge", 1, 4, 4096, 0.5, 100.0).transfer_s(12_500_000) == pytest.approx(1.0)  # 100 Mbit in 1 s


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Tier("fog", 1, 1, 512, 0.0, 100.0), r"tier='fog' is not allowed: one of end, edge, cloud"),
        (lambda: Tier("end", 0, 1, 512, 0.0, 100.0), r"end.devices=0 is not allowed: an integer >= 1"),
        (lambda: Tier("edge", 1, 0, 512, 0.0, 100.0), r"edge.cores=0 is not allowed"),
        (lambda: Tier("edge", 1, 1, 512, -0.5, 100.0), r"edge.latency_s=-0.5 is not allowed: a number of seconds"),
        (lambda: Tier("cloud", 1, 1, 512, 1.0, 0), r"cloud.link_mbps=0 is not allowed: a number of Mbit/s > 0"),
        (lambda: Tier("cloud", 1, 1, 512, 1.0, 10.0, accelerator="tpu"), r"cloud.accelerator='tpu' is not allowed"),
        (lambda: HierarchySpec((Tier("edge", 1, 4, 512, 0.5, 100.0),)), r"an end tier: every task comes from an end"),
        (lambda: HierarchySpec((ZHANG2018.tiers[0],) * 2), r"each of end, edge, cloud at most once"),
        (lambda: ZHANG2018.scaled(fog=2), r"fog=2 is not allowed: a tier of this hierarchy"),
        (lambda: ZHANG2018.tier("sky"), r"tier='sky' is not allowed"),
        (lambda: start_hierarchy("zhang2018"), r"spec='zhang2018' is not allowed: a HierarchySpec"),  # type: ignore[arg-type]
        (lambda: start_hierarchy(ZHANG2018, start_method="thread"), r"start_method='thread' is not allowed"),
    ],
)
def test_bad_input_is_refused_before_anything_starts(make: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()  # type: ignore[operator]


def _tf_threads() -> str | None:
    return os.environ.get("TF_NUM_INTRAOP_THREADS")


def _name() -> str:
    from distributed import get_worker

    return str(get_worker().name)


@pytest.mark.integration
def test_every_device_is_pinned_by_its_tier_and_its_name() -> None:
    spec = ZHANG2018.scaled(end=2, edge=1)
    host_cores = len(os.sched_getaffinity(0))

    with start_hierarchy(spec, dashboard_address="127.0.0.1:0") as cluster:
        workers = cluster.client.scheduler_info(n_workers=-1)["workers"]
        resources = {w["name"]: w["resources"] for w in workers.values()}
        threads = {workers[address]["name"]: t for address, t in cluster.client.run(_tf_threads).items()}
        on_cloud = cluster.client.submit(_name, resources={"tier-cloud": 1}, pure=False).result()
        on_edge = cluster.client.submit(_name, resources={"tier-edge": 1}, pure=False).result()

    assert cluster.devices == ["end-0", "end-1", "edge-0", "cloud-0"]
    assert cluster.info["tiers"] == {"end-0": "end", "end-1": "end", "edge-0": "edge", "cloud-0": "cloud"}
    assert resources["edge-0"] == {"device-edge-0": 1, "tier-edge": 1}
    assert resources["end-1"] == {"device-end-1": 1, "tier-end": 1}
    # A device's TensorFlow uses its tier's cores, at most the host's
    edge, cloud = str(min(4, host_cores)), str(min(8, host_cores))
    assert threads == {"end-0": "1", "end-1": "1", "edge-0": edge, "cloud-0": cloud}
    assert (on_cloud, on_edge) == ("cloud-0", "edge-0")

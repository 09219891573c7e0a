"""The hierarchy's clock: Table 1 as its calibration, and a job's stages placed device by device."""

from __future__ import annotations

import pandas as pd
import pytest

from edgelab.common.errors import ConfigError
from edgelab.emulation.schemes import Hierarchy, TierTimes, t_end, t_end_cloud
from edgelab.emulation.tier_clock import TierCalibration, schedule, zhang2018_calibration
from edgelab.emulation.tiers import ZHANG2018, HierarchySpec, Tier

NETWORKS = {"end": "mobilenet", "edge": "resnet34", "cloud": "wrn-28-10"}


def _stages(n_tasks: int, n_end: int, upper: str | None, images: int = 50) -> pd.DataFrame:
    rows = [
        {"task": i, "stage": "coarse", "device": f"end-{i % n_end}", "tier": "end", "images": images, "bytes_in": 0}
        for i in range(n_tasks)
    ]
    if upper is not None:
        rows += [
            {"task": i, "stage": "fine", "device": f"{upper}-0", "tier": upper, "images": images, "bytes_in": 0}
            for i in range(n_tasks)
        ]
    return pd.DataFrame(rows)


def test_table1_is_the_calibration() -> None:
    calibration = zhang2018_calibration()

    assert calibration.stage_s("end", "mobilenet", 50) == pytest.approx(50 * 5.20e-3)
    assert calibration.stage_s("edge", "resnet34", 50) == pytest.approx(50 * 5.53e-3)
    assert calibration.stage_s("cloud", "wrn-28-10", 1) == pytest.approx(6.99e-3)
    assert calibration.stage_s("end", "wrn-28-10-flatten", 1) == pytest.approx(1.17)  # "1.17K" ms/image


def test_an_uncalibrated_network_is_refused_until_its_times_are_given() -> None:
    calibration = zhang2018_calibration()

    with pytest.raises(ConfigError, match=r"network='mine on the edge tier' is not allowed: a network this"):
        calibration.stage_s("edge", "mine", 50)
    mine = calibration.with_times("mine", {"edge": 0.004}, "measured on my edge box")
    assert mine.stage_s("edge", "mine", 50) == pytest.approx(0.2)
    with pytest.raises(ConfigError, match=r"per_image_s\['edge'\]=-1 is not allowed"):
        calibration.with_times("mine", {"edge": -1}, "x")


def test_a_users_network_gets_the_times_given_for_it_and_the_reports_keep_table1() -> None:
    calibration = zhang2018_calibration()
    networks = {"end": "mine@abc", "edge": "resnet34", "cloud": "mine@abc"}

    missing = r"^network_times=\{'end': 0.01\} is not allowed: a time per image for mine@abc on the cloud tier"
    with pytest.raises(ConfigError, match=missing):
        calibration.with_given_times(networks, {"end": 0.01})  # the cloud's is missing
    with pytest.raises(ConfigError, match=r"^network_times\['edge'\]=0.5 is not allowed: no time for resnet34"):
        calibration.with_given_times(networks, {"end": 0.01, "edge": 0.5, "cloud": 0.001})
    with pytest.raises(ConfigError, match=r"^network_times='fog' is not allowed: tiers among end, edge, cloud"):
        calibration.with_given_times(networks, {"fog": 0.01})
    with pytest.raises(ConfigError, match=r"per_image_s\['end'\]=0 is not allowed"):
        calibration.with_given_times(networks, {"end": 0, "cloud": 0.001})

    given = calibration.with_given_times(networks, {"end": 0.01, "cloud": 0.001})
    assert given.stage_s("end", "mine@abc", 50) == pytest.approx(0.5)
    assert given.stage_s("cloud", "mine@abc", 50) == pytest.approx(0.05)
    assert given.stage_s("edge", "resnet34", 50) == calibration.stage_s("edge", "resnet34", 50)
    assert "network_times as given" in given.source
    assert calibration.with_given_times({"end": "mobilenet"}, None) == calibration


def test_end_alone_is_eq1_when_the_tasks_divide_evenly() -> None:
    spec = ZHANG2018.scaled(end=4)
    timeline, completion = schedule(_stages(200, 4, None), spec, zhang2018_calibration(), NETWORKS)

    h = Hierarchy(4, 4, 1, TierTimes(0.0, 50 * 5.20e-3), TierTimes(0.5, 0), TierTimes(1.0, 0))
    assert completion == pytest.approx(t_end(200, h))
    assert len(timeline) == 200


def test_the_cloud_starts_while_the_end_devices_work_so_the_job_ends_before_eq2() -> None:
    # Prepare: 8 end devices, one cloud, 1 s there and back, 40 tasks of 50 images
    spec = ZHANG2018
    cloud_task = 1.0 + 50 * 6.99e-3

    # Execute
    timeline, completion = schedule(_stages(40, 8, "cloud"), spec, zhang2018_calibration(), NETWORKS)

    # Assert: the cloud, the bottleneck, is busy from the first coarse answer on, one task after another
    h = Hierarchy(8, 4, 1, TierTimes(0.0, 50 * 5.20e-3), TierTimes(0.5, 0), TierTimes(1.0, 50 * 6.99e-3))
    assert completion == pytest.approx(50 * 5.20e-3 + 40 * cloud_task)
    assert completion < t_end_cloud(40, h)
    fine = timeline[timeline["stage"] == "fine"].sort_values("task")
    assert (fine["start_s"].diff().dropna() >= cloud_task - 1e-9).all()


def test_a_tasks_bytes_cross_the_link_at_its_rate() -> None:
    spec = HierarchySpec((Tier("end", 1, 1, 512, 0.0, 100.0), Tier("edge", 1, 1, 512, 0.5, 8.0)))
    stages = _stages(1, 1, "edge", images=1)
    stages.loc[stages["stage"] == "fine", "bytes_in"] = 1_000_000  # 8 Mbit over 8 Mbit/s: 1 s
    calibration = TierCalibration({("end", "mobilenet"): 0.1, ("edge", "resnet34"): 0.2}, "test")

    _, completion = schedule(stages, spec, calibration, NETWORKS)

    assert completion == pytest.approx(0.1 + 0.5 + 1.0 + 0.2)

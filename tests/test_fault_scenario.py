"""The fault scenario's steps: checked before any cluster work, fired once each, recorded as they were."""

from __future__ import annotations

from typing import Any

import pytest

from edgelab.cluster import shaped_hosts
from edgelab.cluster.faults import Kill, KillSchedule
from edgelab.common.errors import ConfigError

PHASES = {"load": 1, "train": 10}
LINKS = shaped_hosts.ShapedHosts(shaped_hosts.HostsSpec(devices=2), "tcp://10.213.0.1:8786", "elbr0")


@pytest.mark.parametrize(
    ("step", "parameter"),
    [
        ({"action": "cut"}, "kills.for_s"),  # a cut only time can end
        ({"action": "cut", "for_s": -1}, "kills.for_s"),
        ({"action": "kill", "for_s": 3}, "kills.for_s"),
        ({"action": "restore", "for_s": 3}, "kills.for_s"),
        ({"action": "slow"}, "kills.rate_mbit"),
        ({"action": "slow", "rate_mbit": 0}, "kills.rate_mbit"),
        ({"action": "restore", "rate_mbit": 5}, "kills.rate_mbit"),
        ({"action": "unplug"}, "kills.action"),
    ],
)
def test_a_bad_step_is_refused_naming_its_parameter(step: dict[str, Any], parameter: str) -> None:
    with pytest.raises(ConfigError) as info:
        KillSchedule([{"device": "pi3b-1", "phase": "train", "at": 2, **step}], phases=PHASES, links=LINKS)
    assert info.value.parameter == parameter


def test_link_steps_need_shaped_hosts() -> None:
    with pytest.raises(ConfigError, match="needs shaped hosts"):
        KillSchedule([Kill("pi3b-1", "train", 2, "slow", rate_mbit=1.0)], phases=PHASES)


def test_steps_fire_once_in_order_and_change_the_link_they_name(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: record what set_link is asked to do instead of changing a real link
    calls: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(shaped_hosts, "set_link", lambda hosts, device, **kw: calls.append((device, kw)))
    schedule = KillSchedule(
        [
            {"device": "pi3b-1", "phase": "train", "at": 2, "action": "slow", "rate_mbit": 2.0},
            {"device": "pi3b-0", "phase": "train", "at": 2, "action": "cut", "for_s": 0.05},
            {"device": "pi3b-1", "phase": "train", "at": 4, "action": "restore"},
        ],
        phases=PHASES,
        links=LINKS,
    )

    # Execute: walk the run's rounds, firing what is due (round 2 twice: a redone round)
    done = []
    for at in (0, 1, 2, 2, 3, 4, 5):
        for step in schedule.due("train", at):
            address = f"tcp://{LINKS.spec.address(int(step.device[-1]) + 1)}:4000"
            done.append((at, schedule.fire(step, None, address, local=False)))
    schedule.wait_restored()

    # Assert: each step once, at its round; the cut came back by itself after for_s
    assert done == [(2, "slow"), (2, "cut"), (4, "restore")]
    assert calls == [
        ("pi3b-1", {"rate_mbit": 2.0}),
        ("pi3b-0", {"up": False}),
        ("pi3b-0", {}),  # the timer's restore
        ("pi3b-1", {"rate_mbit": None}),
    ] or calls == [
        ("pi3b-1", {"rate_mbit": 2.0}),
        ("pi3b-0", {"up": False}),
        ("pi3b-1", {"rate_mbit": None}),
        ("pi3b-0", {}),
    ]


def test_a_plain_kill_keeps_its_key_and_a_link_step_names_its_action() -> None:
    schedule = KillSchedule(
        [Kill("pi3b-1", "train", 1), Kill("pi3b-0", "train", 3, "slow", rate_mbit=1.5, for_s=2.0)],
        phases=PHASES,
        links=LINKS,
    )
    assert schedule.to_list() == [
        {"device": "pi3b-1", "phase": "train", "at": 1},  # as before the scenario steps: stored runs keep their keys
        {"device": "pi3b-0", "phase": "train", "at": 3, "action": "slow", "rate_mbit": 1.5, "for_s": 2.0},
    ]

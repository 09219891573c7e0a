"""Zhang 2018's completion-time model (eq1-eq6) and the placement search, against hand-computed values."""

from __future__ import annotations

import itertools

import pytest

from edgelab.common.errors import ConfigError
from edgelab.emulation.schemes import (
    Hierarchy,
    TierTimes,
    completion_times,
    n_map,
    place,
    t_end,
    t_end_cloud,
    t_end_edge,
    t_mapping,
    theta_cloud,
)

# The report's evaluation system: 8 end devices, 4 edges, 1 cloud; 0.5 s to an edge, 1 s to the cloud.
PAPER = Hierarchy(
    n_end=8, n_edge=4, n_cloud=1, end=TierTimes(0.0, 0.26), edge=TierTimes(0.5, 0.2765), cloud=TierTimes(1.0, 0.3495)
)


def test_each_scheme_is_its_equation() -> None:
    n = 200  # 10,000 images in tasks of 50
    end = 200 / 8 * 0.26  # eq1: 6.5 s

    assert t_end(n, PAPER) == pytest.approx(end)
    assert t_end_cloud(n, PAPER) == pytest.approx(end + 200 / 1 * 1.3495)  # eq2
    assert t_end_edge(n, PAPER) == pytest.approx(end + 200 / 4 * 0.7765)  # eq3
    assert n_map(PAPER) == 3  # eq4: ceil(0.7765 / 0.26) = ceil(2.99)
    assert theta_cloud(PAPER) == 0.0  # eq5: 8 - 4 * 3 < 0, read as 0
    assert theta_cloud(PAPER, mapped=1) == pytest.approx(0.5)  # the report's N_map = 1: four of eight to the cloud
    assert t_mapping(n, PAPER, mapped=1) == pytest.approx(0.5 * t_end_cloud(n, PAPER) + 0.5 * t_end_edge(n, PAPER))


def test_n_map_from_the_reports_table2_process_times_is_two() -> None:
    # The catalog's derived check: edge 18.3, end 10.4 ms per image, no latency: ratio 1.76 -> 2 (the report says 1)
    h = Hierarchy(8, 4, 1, TierTimes(0, 10.4e-3), TierTimes(0, 18.3e-3), TierTimes(0, 1e-3))

    assert n_map(h) == 2


def test_mapping_lies_between_end_edge_and_end_cloud() -> None:
    for n_end in range(1, 17):
        h = Hierarchy(n_end, 4, 1, PAPER.end, PAPER.edge, PAPER.cloud)
        low, high = sorted([t_end_edge(200, h), t_end_cloud(200, h)])
        assert low - 1e-9 <= t_mapping(200, h, mapped=1) <= high + 1e-9


def test_the_schemes_a_hierarchy_cannot_run_are_left_out() -> None:
    no_cloud = Hierarchy(8, 4, 0, PAPER.end, PAPER.edge, PAPER.cloud)

    assert sorted(completion_times(200, no_cloud)) == ["End", "End-Edge", "Mapping"]  # every end device fits an edge
    assert sorted(completion_times(200, PAPER)) == ["End", "End-Cloud", "End-Edge", "Mapping"]
    with pytest.raises(ConfigError, match="n_cloud=0 is not allowed: at least 1 for scheme End-Cloud"):
        t_end_cloud(200, no_cloud)


def test_placement_is_the_best_of_every_mapping() -> None:
    # Prepare: a small hierarchy, every mapping of its end devices tried by brute force
    h = Hierarchy(5, 2, 1, TierTimes(0.0, 0.3), TierTimes(0.5, 0.3), TierTimes(1.0, 0.05))
    names = ["edge-0", "edge-1", "cloud-0"]
    per_task = {"edge-0": 0.8, "edge-1": 0.8, "cloud-0": 1.05}

    def finish(mapping: tuple[str, ...]) -> float:
        load = {t: sum(40 / 5 * per_task[t] for m in mapping if m == t) for t in names}
        return t_end(40, h) + max(load.values())

    best = min(finish(m) for m in itertools.product(names, repeat=5))

    # Execute
    placed = place(40, h)

    # Assert: the search finds the optimum, and no scheme of the report does better
    assert placed.completion_s == pytest.approx(best)
    assert finish(placed.targets) == pytest.approx(placed.completion_s)
    assert placed.completion_s <= min(v for k, v in completion_times(40, h, mapped=1).items() if k != "End") + 1e-9


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TierTimes(-0.5, 0.1), r"latency_s=-0.5 is not allowed: a number of seconds >= 0"),
        (lambda: TierTimes(0.5, float("nan")), r"process_s=nan is not allowed"),
        (lambda: Hierarchy(0, 4, 1, PAPER.end, PAPER.edge, PAPER.cloud), r"n_end=0 is not allowed: an integer >= 1"),
        (lambda: Hierarchy(8, -1, 1, PAPER.end, PAPER.edge, PAPER.cloud), r"n_edge=-1 is not allowed"),
        (lambda: t_end(0, PAPER), r"n_tasks=0 is not allowed: an integer >= 1"),
        (lambda: theta_cloud(PAPER, mapped=0), r"n_map=0 is not allowed: an integer >= 1"),
        (lambda: place(10, Hierarchy(2, 0, 0, PAPER.end, PAPER.edge, PAPER.cloud)), r"n_edge=0 is not allowed"),
    ],
)
def test_bad_input_names_the_parameter(make: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()  # type: ignore[operator]

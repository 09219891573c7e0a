"""The conv-cost experiment: bad parameters refused early, layers timed on a real device, statuses from exact counts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from edgelab.common.errors import ConfigError
from edgelab.common.results import ResultsStore
from edgelab.papers.qiao import conv_costs as exp
from edgelab.papers.qiao import conv_costs_figures as figures

TINY = {
    "kernels": [3],
    "in_channels": [8],
    "out_channels": [16],
    "widths": [7],
    "groups": [1, 2],
    "group_channels": 8,
    "group_width": 7,
    "repeats": 1,
}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kernels": [0, 3]}, r"kernels=\(0, 3\) is not allowed: a non-empty list of integers >= 1"),
        ({"groups": [1, 3]}, r"groups=3 is not allowed: a divisor of both M=64 and N=64"),
        ({"shuffle_channels": 10, "shuffle_groups": 4}, r"groups=4 is not allowed: a divisor of both M=10"),
        ({"profile": "medium"}, r"profile='medium' is not allowed: one of smoke, full"),
        ({"device_profile": "pi5"}, r"device_profile='pi5' is not allowed: one of pi3b, pi4b, native"),
        ({"networks": ["vgg16"]}, r"networks='vgg16' is not allowed: names among mobilenet"),
        ({"repeats": 0}, r"repeats=0 is not allowed: an integer >= 1"),
        ({"kernel": [3]}, r"kernel=\[3\] is not allowed: a parameter among"),
    ],
)
def test_bad_parameters_are_refused_before_any_cluster_work(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        exp.prepare(**kwargs)


def test_the_plan_lists_a_run_per_grid_point_group_and_network_batch() -> None:
    # Execute
    plan = exp.prepare(**{**TINY, "out_channels": [16, 32], "networks": ["mobilenet"], "network_batches": [1, 8]})

    # Assert
    assert [r.label() for r in plan.runs] == [
        "pair K=3 M=8 N=16 W=7",
        "pair K=3 M=8 N=32 W=7",
        "group K=3 M=8 N=8 W=7",
        "group K=3 M=8 N=8 W=7 G=2",
        "mobilenet batch 1",
        "mobilenet batch 8",
    ]
    assert plan.devices_needed(plan.runs) == 1


def test_layers_timed_on_a_device_worker_carry_their_counts_and_the_device_clock(tmp_path: Path) -> None:
    # Prepare
    plan = exp.prepare(**TINY)
    store = ResultsStore(tmp_path / "results")

    # Execute: one real device worker (pi4b), real layers
    stored = exp.run(plan, store=store)
    m = exp.measured(plan, stored)

    # Assert: every run stored; each timed layer's MACs are the formula's; device time = CPU time x speed factor
    assert len(stored) == len(plan.runs) == 3
    pairs = m.times[m.times["family"] == "pair"].set_index("kind")
    assert list(pairs.index) == list(exp.PAIR_KINDS)
    assert pairs.loc["standard", "macs"] == 3 * 3 * 8 * 16 * 7 * 7
    assert pairs.loc["separable", "macs"] == 3 * 3 * 7 * 7 * 8 + 8 * 16 * 7 * 7
    groups = m.times[m.times["family"] == "group"]
    assert list(groups["macs"]) == [3 * 3 * 8 * 8 * 49, 3 * 3 * 4 * 8 * 49]
    factor = m.calibration["speed_factor"]
    assert m.calibration["profile"] == "pi4b" and factor > 0
    assert (m.times["cpu_s"] > 0).all()
    assert m.times["emulated_s"].tolist() == pytest.approx((m.times["cpu_s"] * factor).tolist(), rel=1e-12)
    ratio = m.ratios.iloc[0]
    assert ratio["mac_ratio"] == pytest.approx(1 / 16 + 1 / 9, rel=1e-12) == ratio["formula_ratio"]
    # a rerun finds every run in the store and starts no cluster
    assert exp.pending(plan, store) == []


def test_formulas_counted_against_themselves_are_consistent_and_network_counts_are_predictions(
    tmp_path: Path,
) -> None:
    # Prepare: counts of the real layers, and the same with one standard count off by one
    plan = exp.prepare(**TINY)
    counts = exp.count(plan)
    m = exp.measured(plan, [])
    tampered = counts.pairs.copy()
    tampered.loc[0, "standard_macs"] += 1

    # Execute
    items = figures.render(tmp_path, plan, counts, m, notebook="nb", parameters={})
    broken = figures.render(tmp_path, plan, replace(counts, pairs=tampered), m, notebook="nb", parameters={})

    # Assert: the panels carry no values; the walker's MACs against the formula it implements are structural;
    # the whole networks' MAC and parameter ratios (Keras' builds) against the survey's 8-9x and 50x are predictions
    status = {i.id: i.status for i in items}
    assert list(status) == figures.IDS
    assert {status[i] for i in figures.IDS[:3]} == {"not judged"}
    assert {i.verdict.reason_class for i in items[:3]} == {"qualitative"}
    formulas = ["qiao/eq-conv-cost", "qiao/eq-dwconv-cost", "qiao/eq-dwconv-ratio", "qiao/eq-group-conv"]
    assert {status[i] for i in formulas} == {"consistent"}
    assert {c.basis.name for i in items if i.id in formulas for c in i.verdict.checks} == {"SAME_FORMULA"}
    assert status["qiao/eq-mobilenet-8to9x"] == status["qiao/eq-squeezenet-50x"] == "reproduced"
    mobilenet = items[figures.IDS.index("qiao/eq-mobilenet-8to9x")].verdict
    assert mobilenet.evidence == ["8 to 9"] and "8.56x" in mobilenet.why
    squeezenet = items[figures.IDS.index("qiao/eq-squeezenet-50x")].verdict
    assert squeezenet.evidence == ["50x vs alexnet", "50x vs alexnet_single_tower"] and "48.8x" in squeezenet.why
    assert {i.id: i.status for i in broken}["qiao/eq-conv-cost"] == "differs"
    assert all(Path(f).is_file() for i in items for f in i.files)
    assert items[0].reduction.startswith("1 of the catalog grid's 400 layer shapes")


def test_a_call_slower_than_the_limit_is_measured_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: a tiny layer, and a limit every call exceeds
    from edgelab.models import conv_costs as keras_costs

    model = keras_costs.build_layer("standard", keras_costs.ConvShape(3, 4, 4, 5))
    monkeypatch.setattr(exp, "SLOW_CALL_S", -1.0)

    # Execute
    cpu_s, wall_s, calls, repeats = exp.time_calls(model, 1, repeats=5, seed=0)

    # Assert: one call after the trace, no repeats
    assert (calls, repeats) == (1, 1)
    assert cpu_s >= 0 and wall_s > 0

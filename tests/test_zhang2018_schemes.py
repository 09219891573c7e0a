"""Zhang 2018's Figure 3 experiment: its plan, checked before any cluster work, and its claims, read off the runs."""

from __future__ import annotations

import pandas as pd
import pytest

from edgelab.common.errors import ConfigError
from edgelab.papers.zhang2018 import schemes as exp
from edgelab.papers.zhang2018 import schemes_figures as fig


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scheme": "End"}, r"scheme='End' is not allowed: a parameter among"),
        ({"schemes": ["End", "Cloud-Only"]}, r"schemes='Cloud-Only' is not allowed"),
        ({"end_devices": [0, 2]}, r"end_devices=\(0, 2\) is not allowed"),
        ({"tasks": 4}, r"tasks=4 is not allowed: >= the most end devices \(8\)"),
        ({"edge_latency_s": -0.5}, r"edge_latency_s=-0.5 is not allowed"),
        ({"cloud_network": "vgg16"}, r"cloud_network='vgg16' is not allowed: one of mobilenet"),
        ({"edge_devices": 0}, r"edge.devices=0 is not allowed: at least 1 for scheme End-Edge"),
        ({"cloud_devices": 0, "schemes": ["End-Cloud"]}, r"cloud.devices=0 is not allowed"),
        ({"end_network": lambda: _tiny(20)}, r"^network_times=None is not allowed: a time per image for tiny@"),
        ({"network_times": {"end": 0.01}}, r"^network_times\['end'\]=0.01 is not allowed: no time for mobilenet"),
        ({"edge_network": lambda: _tiny(10, side=28)}, r"^edge_network='tiny@\w+' is not allowed: a network taking"),
        ({"cloud_network": 42}, r"^cloud_network=42 is not allowed: a built-in name, a Keras functional"),
    ],
)
def test_bad_input_is_refused_before_any_data_or_cluster_work(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        exp.prepare(data_dir="/nonexistent/edgelab-data", **kwargs)


def _tiny(classes: int, side: int = 32) -> object:
    """A user's network small enough to build in a blink: pooled pixels to ``classes`` answers."""
    import keras

    return keras.Sequential(
        [keras.Input((side, side, 3)), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(classes)], name="tiny"
    )


def _plan(**kwargs: object) -> exp.Plan:
    """A plan whose images are never used: the checks run before the data loads."""
    params = exp.SchemesParams(**kwargs)  # type: ignore[arg-type]
    calibration = exp.zhang2018_calibration()
    return exp.Plan(params, None, None, exp.get_profile("native"), [], calibration)  # type: ignore[arg-type]


def test_mapping_sends_the_first_end_devices_to_the_edges_and_eq4_sets_how_many() -> None:
    facts = exp.deterministic_facts(_plan(end_devices=(1, 2, 3, 4, 5, 6, 7, 8), tasks=16)).set_index(
        ["n_end", "scheme"]
    )
    assert facts.loc[(8, "Mapping (paper)"), ["to edge", "to cloud"]].tolist() == [4, 4]
    assert facts.loc[(3, "Mapping (paper)"), ["to edge", "to cloud"]].tolist() == [3, 0]
    assert facts.loc[(8, "End-Cloud"), ["to edge", "to cloud"]].tolist() == [0, 8]
    # eq4 with tasks of 2 images: the edge's 0.5 s latency dwarfs an end device's 10.4 ms, so every end device
    # fits on the edges: ceil((0.5 + 2 x 5.53 ms + transfer) / (2 x 5.20 ms)) = 50
    assert facts.loc[(8, "Mapping (eq4)"), "n_map"] == 50
    assert facts.loc[(8, "Mapping (eq4)"), ["to edge", "to cloud"]].tolist() == [8, 0]


def test_the_report_job_puts_three_end_devices_on_each_edge_by_eq4() -> None:
    # Table 1: a 50-image task takes 0.26 s on an end device, 0.5 s + 0.2765 s + 0.0123 s on an edge (1 Gbit/s)
    report = exp.report_job(_plan())
    assert set(report.loc[report["mapping"] == "eq4", "n_map"]) == {3}
    end = report[(report["scheme"] == "End") & (report["n_end"] == 8)]["equations_s"].item()
    assert end == pytest.approx(200 / 8 * 50 * 5.20e-3)


def _summary(times: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for scheme, values in times.items():
        for n_end, t in enumerate(values, start=1):
            rows.append(
                {
                    "scheme": scheme,
                    "mapping": "paper" if scheme == "Mapping" else "-",
                    "n_map": 1,
                    "n_end": n_end,
                    "clock_s": t,
                    "equations_s": t,
                    "host_wall_s": 1.0,
                    "on_cloud": 0,
                    "on_edge": 0,
                }
            )
    return pd.DataFrame(rows)


def _curves() -> pd.DataFrame:
    return _summary(
        {
            "End": [8.0, 4.0, 2.7, 2.0, 1.6, 1.3],
            "End-Cloud": [20.0, 19.0, 18.5, 18.2, 18.1, 18.0],  # the cloud is the bottleneck
            "End-Edge": [10.0, 6.0, 4.0, 3.0, 2.6, 2.3],
            "Mapping": [10.0, 6.0, 4.0, 3.0, 6.0, 8.0],  # = End-Edge up to 4 end devices, then slower
        }
    )


def test_the_claims_are_read_off_the_curves_of_the_reports_job() -> None:
    # Prepare: curves taken as the report's job
    plan = _plan(end_devices=(1, 2, 3, 4, 5, 6), tasks=16)
    curves = _curves()

    # Execute
    verdicts = fig.claims(curves, exp.report_job(plan), plan, report_job=True).set_index("claim")["verdict"]

    # Assert
    assert verdicts["zhang2018/C15"] == "holds"  # End-Cloud's speed-up 1.11x: poor
    assert verdicts["zhang2018/C16"] == "does not hold"  # End's 6.2x: the clock charges no assignment
    assert verdicts["zhang2018/C17"] == "holds"
    assert verdicts["zhang2018/C18"] == "holds"  # the gap 2.0 -> 1.0 s shrinks
    assert verdicts["zhang2018/C19"] == "holds"
    assert verdicts["zhang2018/C20"] == "holds"
    assert verdicts["zhang2018/C21"] == "holds"
    assert verdicts["zhang2018/C23"] == "does not hold"  # eq4 gives 3 at the report's job
    # Mapping slower than End-Cloud at one point: C21 fails
    curves.loc[(curves["scheme"] == "Mapping") & (curves["n_end"] == 6), "clock_s"] = 30.0
    verdicts = fig.claims(curves, exp.report_job(plan), plan, report_job=True).set_index("claim")["verdict"]
    assert verdicts["zhang2018/C21"] == "does not hold"


def test_on_a_smaller_job_only_the_claims_that_do_not_depend_on_its_size_are_judged() -> None:
    from edgelab.report.verdict import Basis

    plan = _plan(end_devices=(1, 2, 3, 4, 5, 6), tasks=16)  # 16 tasks of 2 images, not 200 of 50

    checks = {c.name: c for c in fig.checks(_curves(), exp.report_job(plan), plan)}

    assert {n: c.passed for n, c in checks.items() if c.passed is not None} == {
        "zhang2018/C16": False,
        "zhang2018/C23": False,
    }
    for name in ("zhang2018/C15", "zhang2018/C17", "zhang2018/C18", "zhang2018/C19", "zhang2018/C21"):
        assert checks[name].undecided == "too small" and "would hold here" in checks[name].note
    assert all(c.basis is Basis.MODELLED for c in checks.values())
    assert "charges no task assignment" in checks["zhang2018/C16"].note


def test_eq1_equals_the_clock_and_eq6_must_bound_it() -> None:
    from edgelab.report import verdict

    plan = _plan(end_devices=(1, 2, 4, 8), tasks=8)
    rows = pd.DataFrame({"scheme": "End", "n_end": [1, 2, 4, 8], "clock_s": [8.0, 4.0, 2.0, 1.0]})
    same = fig.equation_check(rows.assign(equations_s=rows["clock_s"]), "equal", plan)
    assert (same.passed, same.basis) == (True, verdict.Basis.SAME_FORMULA)
    # Mapping with N_map = 1 on one end device keeps one edge busy: the clock exceeds eq6
    mapping = pd.DataFrame({"scheme": "Mapping", "n_end": [1, 8], "clock_s": [4.1, 4.0], "equations_s": [1.1, 4.5]})
    bound = fig.equation_check(mapping, "bound", plan)
    assert bound.passed is False and "N_end = 1" in bound.note and "spreads the tasks over all" in bound.note
    result = verdict.decide([bound], fitted=[], predicted=["x"], noise=verdict.Noise.none("the clock"))
    assert result.status == "differs" and not result.wrong


def test_a_users_networks_run_every_scheme_on_the_times_given_for_them(cifar10_dir: object) -> None:
    from edgelab.common.results import ResultsStore

    times = {"end": 0.02, "edge": 0.005, "cloud": 0.001}  # seconds per image, as measured on one's own devices
    plan = exp.prepare(
        end_devices=[2],
        schemes=["End", "End-Cloud", "End-Edge"],
        tasks=4,
        task_size=2,
        edge_devices=1,
        cloud_devices=1,
        end_network=lambda: _tiny(20),
        edge_network=lambda: _tiny(100),
        cloud_network=lambda: _tiny(100),
        network_times=times,
        data_dir=str(cifar10_dir),
    )
    end, cloud = plan.params.networks["end"], plan.params.networks["cloud"]
    assert end.startswith("tiny@") and cloud.startswith("tiny@") and end != cloud  # 20 answers, 100 answers

    import tempfile

    with tempfile.TemporaryDirectory() as root:
        summary = exp.summarize(plan, exp.run(plan, store=ResultsStore(root)))
    clock = summary.set_index("scheme")["clock_s"]
    # Two end devices, two tasks of two images each: End is the end network's time alone.
    assert clock["End"] == pytest.approx(2 * 2 * times["end"])
    assert clock["End-Edge"] > clock["End"] + 0.5  # the edge's latency (0.5 s) and its network's time behind it
    assert clock["End-Cloud"] > clock["End"] + 1.0


def test_the_full_profile_is_the_reports_job_once_and_the_smoke_run_says_how_it_is_smaller() -> None:
    full = _plan(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in exp.FULL_PROFILE.items() if k != "profile"})
    smoke = _plan()

    # One repeat: the clock replays the stages on Table 1's times, so a repeat gives the same time
    assert exp.is_report_job(full) and full.params.repeats == 1
    assert exp.reduction(full) == "N_end = 1, 2, 4, 6, 8 of the report's 1-8"
    assert exp.reduction(smoke) == "8 tasks of 2 images (the report: 200 of 50); N_end = 1, 2, 4, 8 of the report's 1-8"

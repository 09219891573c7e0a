"""Zhang 2018's fault-tolerance experiment: its plan, checked before any cluster work, and its verdict rules."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from edgelab.common.errors import ConfigError
from edgelab.papers.zhang2018 import faults as exp
from edgelab.papers.zhang2018 import faults_figures as fig
from edgelab.report.reference import load_reference


def _pooled() -> object:
    """A user's end network: pooled pixels to 20 answers."""
    import keras

    return keras.Sequential(
        [keras.Input((32, 32, 3)), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(20)], name="pooled"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "Monitor"}, r"method='Monitor' is not allowed: a parameter among"),
        ({"methods": ["Without", "Retry"]}, r"methods='Retry' is not allowed"),
        ({"failures": [0, 9]}, r"failures=9 is not allowed: integers from 0 to end_devices \(8\)"),
        ({"failures": []}, r"failures=\(\) is not allowed: at least one"),
        ({"tasks": 8}, r"fail_after=0 is not allowed: .* 8 tasks on 8 devices is 0: give more tasks"),
        ({"timeout_s": 0}, r"timeout_s=0 is not allowed: a number of seconds > 0"),
        ({"end_network": "vgg16"}, r"end_network='vgg16' is not allowed"),
        ({"end_network": _pooled}, r"^network_times=None is not allowed: a time per image for pooled@\w+ on the end"),
        ({"end_network": _pooled, "network_times": {"edge": 0.1}}, r"^network_times='edge' is not allowed: tiers"),
    ],
)
def test_bad_input_is_refused_before_any_data_or_cluster_work(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        exp.prepare(data_dir="/nonexistent/edgelab-data", **kwargs)


def _plan(**kwargs: object) -> exp.Plan:
    """A plan whose images are blank (only their number matters to what is tested here)."""
    params = exp.FaultsParams(**kwargs)  # type: ignore[arg-type]
    blank = np.zeros((params.tasks * params.task_size, 32, 32, 3), np.uint8)
    return exp.Plan(params, blank, None, exp.get_profile("native"), [], exp.zhang2018_calibration())  # type: ignore[arg-type]


def test_a_users_end_network_sets_the_clock_with_its_given_time(cifar10_dir: object) -> None:
    plan = exp.prepare(end_network=_pooled, network_times={"end": 0.03}, data_dir=str(cifar10_dir))
    name = plan.params.network_name

    assert name.startswith("pooled@")
    assert plan.clock.per_image_s == pytest.approx(0.03)
    assert all(plan.run_params(r)["end_network"] == name for r in plan.runs)


def _summary(durations: dict[str, list[float]], timeouts: list[int] | None = None) -> pd.DataFrame:
    rows = []
    for method, values in durations.items():
        for f, value in enumerate(values):
            rows.append(
                {
                    "method": method,
                    "failures": f,
                    "repeat": 0,
                    "finished": math.isfinite(value),
                    "duration_s": value,
                    "timeouts": (timeouts or [0] * len(values))[f] if method == "Reassign" else 0,
                    "same_answers": True,
                    "answered": 200,
                }
            )
    return pd.DataFrame(rows)


def _report_values() -> dict[str, list[float]]:
    table = load_reference("zhang2018/table5")
    return {m: [float(table[(table["row"] == m) & (table["column"] == f"device_failures_{f}")]["value"].item())
                for f in range(7)] for m in exp.PAPER_METHODS}  # fmt: skip


def test_the_report_own_numbers_at_its_job_are_reproduced() -> None:
    # Prepare: the report's job, and runs that measured exactly Table 5
    plan = _plan(tasks=200, failures=tuple(range(7)))
    table = exp.table5(_summary(_report_values()))

    # Execute
    checks = {c.name: c for c in fig.checks(table, plan)}

    # Assert: C30-C33 hold on the report's numbers (8.8x, 1.45x and 5.9x, +3.2% and +6.0%), and the level check ran
    assert {n: c.passed for n, c in checks.items()} == {
        "C30": True,
        "C31": True,
        "C32": True,
        "C33": True,
        "level": True,
    }
    assert "median error 0.0%" in checks["level"].measured


def test_a_small_job_judges_the_claims_it_can_and_not_the_seconds() -> None:
    plan = _plan()  # the smoke job: 32 tasks
    values = {"Without": [2.0, math.inf, math.inf], "Reassign": [2.0, 3.0, 20.0], "Monitor": [2.0, 3.5, 4.0]}
    table = exp.table5(_summary(values)).query("failures in (0, 1, 2)")

    checks = {c.name: c for c in fig.checks(table, plan)}

    assert checks["C30"].passed and checks["C31"].passed
    assert checks["C32"].passed is None and "judged at the report's job" in checks["C32"].note
    assert checks["C33"].passed is False and "charges the methods' bookkeeping nothing" in checks["C33"].note
    assert checks["level"].passed is None


def test_without_that_finishes_despite_a_failure_breaks_c30() -> None:
    values = {"Without": [2.0, 2.5], "Reassign": [2.0, 3.0], "Monitor": [2.1, 2.2]}

    checks = {c.name: c for c in fig.checks(exp.table5(_summary(values)), _plan())}

    assert checks["C30"].passed is False


def test_eq9_sets_the_counted_timeouts_beside_the_excess_and_the_catalog_model() -> None:
    plan = _plan(tasks=200, failures=(0, 2))
    summary = _summary({"Reassign": [6.5, 20.0]}, timeouts=[0, 24]).assign(failures=[0, 2])

    table = exp.eq9(plan, summary).set_index("failures")

    assert table.loc[2, "eq9_overhead_s"] == 24 * 0.5
    assert table.loc[2, "excess_s"] == pytest.approx(13.5)
    # 2 failed devices leave 13 tasks each; a pass sends a quarter of them to dead devices again
    assert table.loc[2, "catalog_model_timeouts"] == pytest.approx(26 / (1 - 2 / 8))
    assert table.loc[0, "eq9_overhead_s"] == 0


def test_the_same_devices_fail_for_every_method_and_the_seed_changes_them() -> None:
    plan = _plan(failures=(2,), repeats=3)

    facts = exp.deterministic_facts(plan)

    assert len(set(facts["failing devices"])) > 1  # the repeats differ
    assert exp.failure_seed(0, exp.FaultRunKey("Monitor", 2, 1)) == exp.failure_seed(0, exp.FaultRunKey("Dask", 2, 1))
    assert facts.attrs["fail_after"] == plan.fail_after == 2


def test_the_durations_are_modelled_without_is_by_design_and_a_changed_answer_is_wrong() -> None:
    from edgelab.report.verdict import Basis, Noise, decide

    # Prepare: the report's job, one run of a method whose answers differ from the undisturbed run's
    plan = _plan(tasks=200, failures=tuple(range(7)))
    summary = _summary(_report_values())
    summary.loc[(summary["method"] == "Monitor") & (summary["failures"] == 3), "same_answers"] = False

    # Execute
    found = {c.name: c for c in fig.checks(exp.table5(summary), plan, summary)}
    result = decide(list(found.values()), fitted=[], predicted=["x"], noise=Noise.none("the clock"))

    # Assert
    assert found["C30"].basis is Basis.CONFIGURED
    assert {found[n].basis for n in ("C31", "C32", "C33", "level")} == {Basis.MODELLED}
    assert found["answers"].basis is Basis.CORRECTNESS and "Monitor f=3" in found["answers"].note
    assert result.status == "differs" and [c.name for c in result.wrong] == ["answers"]


def test_eq9_is_set_against_the_clocks_excess_and_the_reduction_names_what_is_smaller() -> None:
    plan = _plan(tasks=200, failures=(0, 2))
    model = exp.eq9(plan, _summary({"Reassign": [6.5, 20.0]}, timeouts=[0, 24]).assign(failures=[0, 2]))

    check = fig.eq9_check(model)

    assert check.passed is True and "89%-89% of Reassign's excess" in check.measured  # 12 s of 13.5 s
    assert check.kind == "structural"
    assert exp.reduction(plan) == "0, 2 failed devices of the report's 0-6; 1 repeat(s) of the report's 5"
    full = _plan(**{k: v for k, v in exp.FULL_PROFILE.items() if k != "profile"})
    assert exp.reduction(full) == ""

"""The evidence policy: what may call an item reproduced, and the committed manifests held to it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from edgelab.common.paths import REPO_ROOT
from edgelab.report import catalog, verdict
from edgelab.report.manifest import ReportItem, WrongResultError, update_manifest
from edgelab.report.verdict import Basis, Check, Noise, Verdict, decide

MANIFESTS = [REPO_ROOT / "reports" / "manifest.json", REPO_ROOT / "reports" / "full-profile" / "manifest.json"]
# Every paper's figures modules: where the items are judged (a threshold there would bypass the policy).
FIGURE_MODULES = sorted((REPO_ROOT / "edgelab" / "papers").glob("*/*_figures.py"))


def _check(passed: bool | None, basis: Basis, *, runs: int = 0, undecided: str = "", name: str = "c") -> Check:
    return Check(name, passed, "measured", "rule", basis=basis, runs=runs, undecided=undecided)


def _decide(*checks: Check, noise: Noise | None = None) -> Verdict:
    return decide(checks, fitted=[], predicted=["N=2"], noise=noise or Noise.none("counted"))


# ------------------------------------------------------------------ kinds


@pytest.mark.parametrize("basis", [Basis.STRUCTURE, Basis.SAME_FORMULA, Basis.CONFIGURED, Basis.CORRECTNESS])
def test_an_item_whose_checks_are_all_structural_is_consistent_never_reproduced(basis: Basis) -> None:
    # Execute: every check holds, none is a prediction
    v = _decide(_check(True, basis), _check(True, Basis.STRUCTURE))

    # Assert
    assert v.status == "consistent"
    assert v.evidence == []


def test_reproduced_names_the_predicted_checks_it_rests_on() -> None:
    # Execute: a counted prediction and a structural check hold
    v = _decide(_check(True, Basis.COUNTED, name="bytes"), _check(True, Basis.STRUCTURE, name="layers"))

    # Assert
    assert v.status == "reproduced"
    assert v.evidence == ["bytes"]
    assert v.to_dict()["evidence"] == ["bytes"]


def test_a_predicted_check_that_cannot_decide_keeps_the_item_not_judged_with_its_class() -> None:
    # Execute: one prediction holds, another is undecided for want of the paper's data size
    v = _decide(_check(True, Basis.MODELLED), _check(None, Basis.TRAINED, runs=3, undecided="too small"))

    # Assert
    assert (v.status, v.reason_class) == ("not judged", "too small")


@pytest.mark.parametrize("basis", [Basis.COUNTED, Basis.STRUCTURE, Basis.CORRECTNESS])
def test_any_failing_check_makes_the_item_differ(basis: Basis) -> None:
    # Execute: a prediction holds, then something fails
    v = _decide(_check(True, Basis.COUNTED), _check(False, basis))

    # Assert
    assert v.status == "differs"
    assert bool(v.wrong) == (basis is Basis.CORRECTNESS)


def test_an_undecided_check_must_say_why() -> None:
    with pytest.raises(ValueError, match="undecided"):
        Check("x", None, "m", "r", basis=Basis.TRAINED)


def test_an_item_with_nothing_to_check_names_its_reason_class() -> None:
    # Execute
    none = Noise.none("a diagram")
    v = decide([], fitted=[], predicted=[], noise=none, reason="a diagram", reason_class="qualitative")

    # Assert
    assert (v.status, v.reason_class, v.why) == ("not judged", "qualitative", "a diagram")
    with pytest.raises(ValueError, match="reason_class"):
        decide([], fitted=[], predicted=[], noise=Noise.none("a diagram"))


# ------------------------------------------------------------------ noise


@pytest.mark.parametrize("basis", [Basis.EMULATED_TIME, Basis.HOST_MEASURE, Basis.TRAINED])
@pytest.mark.parametrize("runs", [0, 1, 2])
def test_a_measured_value_without_three_runs_is_not_judged(basis: Basis, runs: int) -> None:
    # Execute: the check would hold, and would fail, on too few runs
    holds = _decide(_check(True, basis, runs=runs))
    fails = _decide(_check(False, basis, runs=runs))

    # Assert: neither is decided; each says what the runs show
    for v, would in ((holds, "would hold"), (fails, "would fail")):
        assert (v.status, v.reason_class) == ("not judged", "noisy")
        assert v.checks[0].passed is None and would in v.checks[0].note


def test_a_measured_value_with_three_runs_is_judged() -> None:
    assert _decide(_check(True, Basis.EMULATED_TIME, runs=3)).status == "reproduced"
    assert _decide(_check(False, Basis.EMULATED_TIME, runs=3)).status == "differs"


def test_the_builders_count_the_runs_behind_a_series() -> None:
    import pandas as pd

    # Prepare: N=1 three runs, N=2 once
    values = pd.Series([10.0, 10.5, 9.5, 20.0], index=[1, 1, 1, 2])
    noise = verdict.noise_of(values)
    cells = values.groupby(level=0).median()

    # Execute
    check = verdict.trend(cells, +1, noise, claim="time", basis=Basis.EMULATED_TIME)

    # Assert
    assert check.runs == 3 and check.passed is True
    assert decide([check], fitted=[], predicted=["N=2"], noise=noise).status == "reproduced"


def test_a_failed_control_leaves_the_measured_checks_undecided_but_not_the_structural_ones() -> None:
    # Execute
    v = _decide(
        _check(True, Basis.EMULATED_TIME, runs=3),
        _check(False, Basis.CONTROL, runs=3),
        _check(False, Basis.STRUCTURE),
    )

    # Assert: the structural failure still counts
    assert v.status == "differs"
    assert v.checks[0].passed is None and "control fails" in v.checks[0].note


def test_noise_must_be_a_noise_not_a_string() -> None:
    with pytest.raises(TypeError, match="Noise"):
        decide([], fitted=[], predicted=[], noise="bytes are exact", reason="x", reason_class="qualitative")  # type: ignore[arg-type]
    assert Noise.none("bytes are counted").describe() == "none: bytes are counted"


# ------------------------------------------------------------------ the policy owns every status


def test_a_verdict_cannot_be_made_by_hand() -> None:
    with pytest.raises(TypeError, match="decide"):
        Verdict("reproduced", [], [], [], "none")


def test_a_report_item_takes_a_verdict_from_the_policy_only(tmp_path: Path) -> None:
    from edgelab.common.errors import ConfigError

    with pytest.raises(ConfigError, match="verdict"):
        ReportItem("park2020/fig1", [], {"status": "reproduced"}, data_source={}, clock="", paper_values_shown=False)  # type: ignore[arg-type]
    item = ReportItem("park2020/fig1", [], _decide(_check(True, Basis.COUNTED)), data_source={}, clock="",
                      paper_values_shown=False)  # fmt: skip
    assert item.status == "reproduced" and item.to_dict()["verdict"]["checks"][0]["kind"] == "predicted"


def test_a_failing_correctness_check_is_written_as_differs_then_fails_the_caller(tmp_path: Path) -> None:
    # Prepare: the pipelined outputs do not equal the whole model's
    wrong = _decide(_check(True, Basis.HOST_MEASURE, runs=3), _check(False, Basis.CORRECTNESS, name="outputs equal"))
    item = ReportItem("jeon/fig3", [], wrong, data_source={}, clock="", paper_values_shown=False)

    # Execute
    with pytest.raises(WrongResultError, match="jeon/fig3.*outputs equal"):
        update_manifest([item], root=tmp_path)

    # Assert: nothing computed is lost, and the entry reads differs
    entry = json.loads((tmp_path / "manifest.json").read_text())["items"]["jeon/fig3"]
    assert entry["status"] == "differs" and entry["verdict"]["wrong"] == ["outputs equal"]


# ------------------------------------------------------------------ the committed manifests


def _entries(path: Path) -> list[dict]:
    return list(json.loads(path.read_text())["items"].values())


@pytest.mark.parametrize("path", MANIFESTS, ids=["smoke", "full-profile"])
def test_every_item_of_the_committed_manifests_carries_a_verdict_from_the_policy(path: Path) -> None:
    for entry in _entries(path):
        if entry["status"] == "not run":
            continue
        v = entry.get("verdict") or {}
        assert {"checks", "fitted", "predicted", "noise", "choices", "evidence"} <= set(v), entry["id"]
        assert all(c["kind"] in verdict.KINDS for c in v["checks"]), entry["id"]
        # The recorded status is what the policy gives the recorded checks.
        assert verdict.redecide(entry) == entry["status"], entry["id"]
        if entry["status"] == "reproduced":
            assert v["evidence"], f"{entry['id']} is reproduced without a predicted check that holds"
        if entry["status"] == "not judged":
            assert v["reason_class"] in verdict.REASONS, entry["id"]


def test_the_full_profile_lists_every_id() -> None:
    assert {e["id"] for e in _entries(MANIFESTS[1])} == set(catalog.IDS)


def test_the_full_profile_ran_every_id() -> None:
    assert not [e["id"] for e in _entries(MANIFESTS[1]) if e["status"] == "not run"]


# ------------------------------------------------------------------ thresholds live in the policy


def _stray_thresholds(source: str) -> list[str]:
    """Numeric literals other than 0 and 1 inside a comparison: a threshold outside verdict.py."""
    stray = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for sub in ast.walk(node):
                if (
                    isinstance(sub, ast.Constant)
                    and isinstance(sub.value, int | float)
                    and not isinstance(sub.value, bool)
                    and sub.value not in (0, 1)
                ):
                    stray.append(f"line {sub.lineno}: {ast.unparse(node)}")
    return stray


def test_the_threshold_scan_finds_a_threshold() -> None:
    assert _stray_thresholds("ok = share > 1.5 / k\nfine = n > 1\n") == ["line 1: share > 1.5 / k"]


def test_the_threshold_scan_has_figure_modules_to_read() -> None:
    assert len(FIGURE_MODULES) >= 20  # one per experiment: a move that hides them fails here, not silently


@pytest.mark.parametrize("module", FIGURE_MODULES, ids=lambda p: p.name)
def test_no_figure_module_holds_a_threshold_of_its_own(module: Path) -> None:
    assert _stray_thresholds(module.read_text()) == []

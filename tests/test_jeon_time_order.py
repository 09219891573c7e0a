"""Jeon's Table 1 time order (C16): emulated times, judged only with three runs per mode and beyond their noise."""

from __future__ import annotations

import pandas as pd
import pytest

from edgelab.papers.jeon.pipeline_figures import time_order_checks
from edgelab.report.verdict import MIN_REPEATS, Basis, decide, noise_of


def _times(pipeline: float, ensemble: float, single: float) -> pd.Series:
    return pd.Series({"pipeline": pipeline, "ensemble": ensemble, "single": single})


def _repeated(spread: float, runs: int = MIN_REPEATS) -> pd.Series:
    """``runs`` runs per mode whose largest relative spread is ``spread``."""
    values = [1.0 + spread * i / (runs - 1) for i in range(runs)]
    return pd.Series(values * 3, index=[m for m in ("pipeline", "ensemble", "single") for _ in range(runs)])


@pytest.mark.parametrize("ensemble", [14.4, 15.3, 17.4])  # ensemble/single 0.88, 0.93, 1.06: all seen in smoke runs
def test_one_run_per_mode_leaves_the_order_unjudged_whatever_the_ratio(ensemble: float) -> None:
    # Prepare: one run per mode, so no cell is repeated
    noise = noise_of(pd.Series([10.4, ensemble, 16.4], index=["pipeline", "ensemble", "single"]), axis="mode")

    # Execute
    checks = time_order_checks(_times(10.4, ensemble, 16.4), noise)
    verdict = decide(checks, fitted=[], predicted=["time"], noise=noise)

    # Assert: emulated times on one run each; the policy leaves both undecided and says what they would be
    assert [c.basis for c in checks] == [Basis.EMULATED_TIME] * 2 and [c.runs for c in checks] == [1, 1]
    assert [c.passed for c in verdict.checks] == [None, None]
    assert all("on 1 run(s)" in c.note for c in verdict.checks)
    assert (verdict.status, verdict.reason_class) == ("not judged", "noisy")


def test_three_runs_judge_each_gap_against_the_noise() -> None:
    # Prepare: 5% of noise over three runs per mode
    noise = noise_of(_repeated(0.05), axis="mode")
    assert noise.runs == MIN_REPEATS and noise.relative == pytest.approx(0.05 / 1.025)

    # Execute / Assert: a 7% gap beyond 5% of noise holds; KCS is far below both
    checks = time_order_checks(_times(10.0, 15.3, 16.4), noise)
    assert [c.passed for c in checks] == [True, True]
    assert decide(checks, fitted=[], predicted=["time"], noise=noise).status == "reproduced"
    # A 3% gap is inside the noise: the ensemble check fails, with its cause, and the verdict differs
    checks = time_order_checks(_times(10.0, 15.9, 16.4), noise)
    assert [c.passed for c in checks] == [True, False]
    assert "whole MobileNetV2" in checks[1].note
    assert decide(checks, fitted=[], predicted=["time"], noise=noise).status == "differs"
    # The ensemble slower than the single board fails; KCS within the noise of the faster one fails too
    assert [c.passed for c in time_order_checks(_times(15.0, 15.5, 15.0), noise)] == [False, False]

"""Jeon's Table 1 time order (C16): judged only against the noise of repeated runs."""

from __future__ import annotations

import pandas as pd
import pytest

from edgelab.figures.jeon import time_order_checks
from edgelab.verdict import decide, noise_of


def _times(pipeline: float, ensemble: float, single: float) -> pd.Series:
    return pd.Series({"pipeline": pipeline, "ensemble": ensemble, "single": single})


def _repeated(spread: float) -> pd.Series:
    """Three runs per mode whose largest relative spread is ``spread``."""
    return pd.Series([1.0, 1.0 + spread / 2, 1.0 + spread], index=["pipeline"] * 3)


@pytest.mark.parametrize("ensemble", [14.4, 15.3, 17.4])  # ensemble/single 0.88, 0.93, 1.06: all seen in smoke runs
def test_one_run_per_mode_leaves_the_order_unjudged_whatever_the_ratio(ensemble: float) -> None:
    # Setup: one run per mode, so no cell is repeated
    noise = noise_of(pd.Series([10.4, ensemble, 16.4], index=["pipeline", "ensemble", "single"]))
    # Execute
    checks = time_order_checks(_times(10.4, ensemble, 16.4), noise, repeats=1)
    # Assert: neither gap is judged, the note says why, and the item is "not judged" on every such run
    assert [c.passed for c in checks] == [None, None]
    assert all("not measured" in c.note for c in checks)
    assert decide(checks, fitted=[], predicted=["time"], noise=noise).status == "not judged"


def test_measured_noise_judges_each_gap_against_it() -> None:
    noise = noise_of(_repeated(0.05))
    assert noise.relative == pytest.approx(0.05 / 1.025)  # (max - min) / median
    # A 7% gap beyond 5% of noise holds; KCS is far below both
    passed = [c.passed for c in time_order_checks(_times(10.0, 15.3, 16.4), noise, repeats=3)]
    assert passed == [True, True]
    # A 3% gap is inside the noise: the ensemble check fails, the verdict differs
    checks = time_order_checks(_times(10.0, 15.9, 16.4), noise, repeats=3)
    assert [c.passed for c in checks] == [True, False]
    assert decide(checks, fitted=[], predicted=["time"], noise=noise).status == "differs"
    # The ensemble slower than the single board fails; KCS within the noise of the ensemble fails too
    assert [c.passed for c in time_order_checks(_times(15.0, 15.5, 15.0), noise, repeats=3)] == [False, False]

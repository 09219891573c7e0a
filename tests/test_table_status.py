"""Tests for the verdict on a time/accuracy table (edgelab.figures.park2020.time_table_status)."""

from __future__ import annotations

import pandas as pd

from edgelab.figures.park2020 import time_table_status
from edgelab.reference import load_reference

PAPER_TIME = pd.Series([100.0, 150.0, 200.0, 250.0], index=[1, 2, 3, 4])
PAPER_ACC = pd.Series([0.96, 0.97, 0.97, 0.97], index=[1, 2, 3, 4])
FULL = 60_000


def test_growing_time_within_tolerance_is_reproduced() -> None:
    # Prepare: 10% slower than the paper at every predicted cell
    time = pd.Series([100.0, 165.0, 220.0, 275.0], index=[1, 2, 3, 4])

    # Execute
    status, why = time_table_status(PAPER_TIME, time, PAPER_ACC, PAPER_ACC.copy(), n_train=FULL)

    # Assert
    assert status == "reproduced"
    assert why == "time slope +58 s/device vs paper +50; max time error 10% at N=2"


def test_falling_time_differs() -> None:
    # Prepare
    time = pd.Series([100.0, 140.0, 130.0, 240.0], index=[1, 2, 3, 4])

    # Execute
    status, why = time_table_status(PAPER_TIME, time, PAPER_ACC, PAPER_ACC.copy(), n_train=FULL)

    # Assert
    assert status == "differs"
    assert why.startswith("time does not grow with the device count (Kendall tau 0.67, needs >= 0.8)")


def test_one_small_dip_in_a_long_rising_series_still_grows() -> None:
    # Prepare: ten device counts, N=7 a little below N=6 (as in the paper's own Table 2)
    devices = list(range(1, 11))
    paper = pd.Series([100.0 + 50 * (n - 1) for n in devices], index=devices)
    time = paper.copy()
    time[7] = time[6] - 5
    acc = pd.Series(0.97, index=devices)

    # Execute
    status, why = time_table_status(paper, time, acc, acc.copy(), n_train=FULL)

    # Assert
    assert status == "reproduced", why


def test_the_papers_own_time_series_pass_the_trend_rule() -> None:
    # The rule must not demand more than the reference itself shows.
    for item_id in ("park2020/table1", "park2020/table2"):
        # Prepare
        ref = load_reference(item_id)
        rows = ref[ref["metric"] == "elapsed_time_s"]
        paper = pd.Series(rows["value"].to_numpy(float), index=rows["devices"].astype(int).to_numpy())
        acc = pd.Series(0.97, index=paper.index)

        # Execute
        _, why = time_table_status(paper, paper.copy(), acc, acc.copy(), n_train=FULL)

        # Assert
        assert "does not grow" not in why, (item_id, why)


def test_a_constant_series_does_not_grow() -> None:
    # Prepare
    time = pd.Series(100.0, index=[1, 2, 3, 4])

    # Execute
    status, why = time_table_status(PAPER_TIME, time, PAPER_ACC, PAPER_ACC.copy(), n_train=FULL)

    # Assert
    assert status == "differs"
    assert "time does not grow with the device count (Kendall tau nan" in why


def test_time_error_above_tolerance_differs() -> None:
    # Prepare: 30% off at N=3
    time = pd.Series([100.0, 150.0, 260.0, 270.0], index=[1, 2, 3, 4])

    # Execute
    status, why = time_table_status(PAPER_TIME, time, PAPER_ACC, PAPER_ACC.copy(), n_train=FULL)

    # Assert
    assert status == "differs"
    assert "time off by more than 25%" in why and "max time error 30% at N=3" in why


def test_accuracy_gap_names_the_sample_count_when_trained_on_fewer() -> None:
    # Prepare
    acc = PAPER_ACC - 0.1

    # Execute
    status, why = time_table_status(PAPER_TIME, PAPER_TIME.copy(), PAPER_ACC, acc, n_train=1_920)

    # Assert
    assert status == "differs"
    assert "accuracy differs by up to 0.100 (trained on 1,920 of 60,000 samples)" in why


def test_worst_cell_at_a_dip_in_the_paper_series_is_named() -> None:
    # Prepare: the paper's own N=3 value falls below its N=2 value
    paper = pd.Series([100.0, 150.0, 120.0, 250.0], index=[1, 2, 3, 4])
    time = pd.Series([100.0, 150.0, 200.0, 250.0], index=[1, 2, 3, 4])

    # Execute
    _, why = time_table_status(paper, time, PAPER_ACC, PAPER_ACC.copy(), n_train=FULL)

    # Assert
    assert "max time error 67% at N=3 (the paper's 120 s there is below its 150 s at N=2)" in why


def test_devices_not_run_are_listed() -> None:
    # Prepare: only N=1..2 measured
    time = pd.Series([100.0, 150.0], index=[1, 2])

    # Execute
    _, why = time_table_status(PAPER_TIME, time, PAPER_ACC, PAPER_ACC[[1, 2]], n_train=FULL)

    # Assert
    assert why.endswith("N=3..4 not run")

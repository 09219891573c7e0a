"""Pipelined training on the device clock: hand-made schedules whose times are worked out by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from edgelab.emulation.training_clock import LinkModel, compose, idle_fraction, in_flight, steady_window, step_bubbles

# 1 MB/s and 0.5 s latency: a 1 MB activation takes 1.5 s over a link.
LINK = LinkModel(bytes_per_s=1e6, latency_s=0.5)


def _record(kind: str, stage: int, m: int, t: float, cpu: float, out: int = 1_000_000, step: int = 0) -> dict:
    return {
        "kind": kind,
        "stage": f"stage-{stage}",
        "step": step,
        "micro_batch": m,
        "device": f"d{stage}",
        "t_start": t,
        "cpu_s": cpu,
        "bytes_out": out,
    }


def test_a_two_stage_gpipe_step_waits_for_its_inputs_over_the_link_and_for_its_device() -> None:
    # Host order (t_start) as the run executed it; stages numbered from 1 as the partitioner does.
    records = pd.DataFrame(
        [
            _record("forward", 1, 0, 0.0, 1.0),
            _record("forward", 1, 1, 0.1, 1.0),
            _record("forward+backward", 2, 0, 0.2, 2.0),
            _record("forward+backward", 2, 1, 0.3, 2.0),
            _record("backward", 1, 1, 0.4, 1.0),
            _record("backward", 1, 0, 0.5, 1.0),
            _record("update", 1, -1, 0.6, 0.5, out=0),
            _record("update", 2, -1, 0.7, 0.5, out=0),
        ]
    )
    t = compose(records, speed_factor=2.0, link=LINK).set_index(["kind", "stage_index", "micro_batch"])
    # stage 0: F0 0-2, F1 2-4; F0's output leaves at 2, arrives 3.5; F1's waits for the uplink: 4 -> 5.5
    assert (t.loc[("forward", 0, 0), "start"], t.loc[("forward", 0, 0), "end"]) == (0.0, 2.0)
    assert (t.loc[("forward", 0, 1), "start"], t.loc[("forward", 0, 1), "end"]) == (2.0, 4.0)
    # stage 1: FB0 from 3.5 to 7.5, FB1 from 7.5 (its input was there at 5.5) to 11.5
    assert (t.loc[("forward+backward", 1, 0), "ready"], t.loc[("forward+backward", 1, 0), "end"]) == (3.5, 7.5)
    assert (t.loc[("forward+backward", 1, 1), "start"], t.loc[("forward+backward", 1, 1), "end"]) == (7.5, 11.5)
    # gradients back: FB0's arrives 9, FB1's 13; stage 0 runs B1 first (the schedule's order): 13-15, then B0 15-17
    assert (t.loc[("backward", 0, 1), "start"], t.loc[("backward", 0, 1), "end"]) == (13.0, 15.0)
    assert (t.loc[("backward", 0, 0), "ready"], t.loc[("backward", 0, 0), "start"]) == (9.0, 15.0)
    assert t.loc[("update", 0, -1), "end"] == 18.0 and t.loc[("update", 1, -1), "end"] == 12.5
    # busy 2+2+2+2+1 on stage 0 and 4+4+1 on stage 1 over 2 x 18 s
    assert step_bubbles(t.reset_index()).to_dict() == {0: pytest.approx(1 - 18 / 36)}


def test_idle_share_clips_passes_to_the_window() -> None:
    timeline = pd.DataFrame({"device": ["a", "a", "b"], "start": [0.0, 3.0, 1.0], "end": [2.0, 4.0, 4.0]})
    assert idle_fraction(timeline) == pytest.approx(1 - 6 / 8)
    assert idle_fraction(timeline, 1.0, 3.0) == pytest.approx(1 - 3 / 4)  # a: 1-2, b: 1-3


def test_1f1b_steady_state_and_what_each_stage_holds() -> None:
    # Two stages, three micro-batches, 1F1B: stage 0 runs F0 F1 B0 F2 B1 B2 (warm-up of 2 forwards).
    rows = []
    for kind, m in (("forward", 0), ("forward", 1), ("backward", 0), ("forward", 2), ("backward", 1), ("backward", 2)):
        rows.append({"kind": kind, "stage_index": 0, "step": 0, "micro_batch": m, "device": "d0"})
    for m in range(3):
        rows.append({"kind": "forward+backward", "stage_index": 1, "step": 0, "micro_batch": m, "device": "d1"})
    timeline = pd.DataFrame(rows)
    timeline["start"] = [0, 1, 4, 5, 7, 9, 1.5, 3, 5]
    timeline["end"] = [1, 2, 5, 6, 8, 10, 3, 4.5, 6.5]
    # steady: stage 0's first backward (4) to the end of its last forward (6)
    assert steady_window(timeline) == (4.0, 6.0)
    held = in_flight(timeline)
    stage0 = held[held["stage"] == 0]
    assert stage0["held"].max() == 2  # PipeDream's bound for the first of two stages
    assert stage0["held"].tolist() == [0, 1, 2, 1, 2, 1, 0]  # F0 F1 B0(end) F2 B1(end) B2(end)
    assert held[held["stage"] == 1]["held"].max() == 0  # the last stage keeps nothing between passes

"""One verdict policy for every item of every experiment.

An item is **reproduced** only when it predicted something: at least one of
its cells was not fitted to the paper, and every check of the item's claims
passed on the predicted cells. It **differs** when a check failed, and is
**not judged** when the measurement cannot decide (only fitted cells ran, too
few points for the claim, noise larger than the tolerance, or a setting the
paper's number does not apply to). Every verdict carries, whatever its status:
the cells fitted and the cells predicted, each check with its rule and
threshold, and the measured noise.

The checks, with their thresholds (all here, nowhere else):

* **level**: the median relative error over a series' predicted cells is at
  most ``LEVEL_TOLERANCE`` (the worst cell is named); values the paper states
  one by one must each be within it.

Where the noise is wider than a tolerance, a check cannot hold, but an error
beyond the tolerance plus the noise is still a difference.
* **trend**: Kendall's tau between the device count and the values, in the
  paper's direction, is at least ``TREND_TAU``, and the change from the first
  to the last cell exceeds the measured noise: a difference inside the noise
  is not a difference.
* **slope**: the least-squares slope is within ``SLOPE_TOLERANCE`` of the
  paper's slope over the same device counts (the paper's own slope depends on
  the range: Table 1 rises 61 s/device over N=1..3 but 49 over N=1..10).
* **effect**: a claim that only gives a direction needs a change of at least
  ``MIN_EFFECT`` of its start, and more than the noise.
* **bound**: a value the paper gives as a bound ("over 1000 KB", "none").
* **accuracy**: the worst predicted cell within ``ACCURACY_TOLERANCE``
  (absolute); judged only when the run trained on the paper's data size.
* **control**: two measurements of the same computation agree within noise;
  if they do not, the clock is not trusted and nothing is judged.

Noise is measured, not assumed: repeated cells (the same run measured several
times) give each cell's spread; an item's noise is the largest relative spread
(max - min over median) among its repeated cells.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

STATUSES = ("reproduced", "differs", "not judged")
# Errors are compared after rounding to this many digits, so float noise cannot flip a verdict at a threshold.
_DIGITS = 9

LEVEL_TOLERANCE = 0.25
SLOPE_TOLERANCE = 0.25
TREND_TAU = 0.8
MIN_EFFECT = 0.05
ACCURACY_TOLERANCE = 0.02


@dataclass(frozen=True)
class Noise:
    """Spread of repeated measurements of the same cells.

    ``cells`` maps a cell (e.g. a device count) to ``(min, median, max, n)``;
    ``relative`` is the largest (max - min) / median among cells measured more
    than once, ``nan`` when no cell was repeated.
    """

    cells: dict[Any, tuple[float, float, float, int]] = field(default_factory=dict)
    axis: str = "N"  # what a cell's key counts, for the text

    @property
    def relative(self) -> float:
        """The largest relative spread among repeated cells (``nan`` when none was repeated)."""
        spreads = [(hi - lo) / abs(mid) for lo, mid, hi, n in self.cells.values() if n > 1 and mid]
        return max(spreads) if spreads else math.nan

    @property
    def measured(self) -> bool:
        """Whether any cell was repeated."""
        return not math.isnan(self.relative)

    def describe(self) -> str:
        """One line: the spread of each repeated cell."""
        repeated = {k: v for k, v in self.cells.items() if v[3] > 1}
        if not repeated:
            return "not measured (no cell repeated)"
        parts = [
            f"{k if isinstance(k, str) else _cell(self.axis, k)}: {(hi - lo) / abs(mid):.1%} over {n} runs"
            for k, (lo, mid, hi, n) in repeated.items()
            if mid
        ]
        return f"{self.relative:.1%} (largest spread; " + ", ".join(parts) + ")"

    @classmethod
    def combine(cls, named: dict[str, Noise]) -> Noise:
        """The noise of several series measured the same way: every repeated cell of each, labelled."""
        return cls({f"{name} N={k}": v for name, noise in named.items() for k, v in noise.cells.items()})


def noise_of(values: pd.Series, *, axis: str = "N") -> Noise:
    """Noise of a series whose index repeats a cell once per repeated run (``axis`` names what the index counts)."""
    grouped = values.groupby(level=0)
    return Noise(
        {k: (float(g.min()), float(g.median()), float(g.max()), int(g.count())) for k, g in grouped if g.count() > 0},
        axis,
    )


@dataclass(frozen=True)
class Check:
    """One rule applied to one claim: what was measured, the rule, and whether it held."""

    name: str
    passed: bool | None  # None: the measurement cannot decide
    measured: str
    rule: str
    note: str = ""

    @property
    def outcome(self) -> str:
        """``holds``, ``FAILS`` or ``not judged``."""
        return {True: "holds", False: "FAILS", None: "not judged"}[self.passed]

    def line(self) -> str:
        """``name: measured (rule): outcome [note]``."""
        note = f"; {self.note}" if self.note else ""
        return f"{self.name}: {self.measured} (rule: {self.rule}): {self.outcome}{note}"


@dataclass(frozen=True)
class Verdict:
    """The status of one item and everything it rests on."""

    status: str
    checks: list[Check]
    fitted: list[str]
    predicted: list[str]
    noise: str
    reason: str = ""  # why it could not be judged, when nothing was

    @property
    def why(self) -> str:
        """One line: failing checks first, then the undecided, then those that hold."""
        if self.reason:
            return self.reason
        order = sorted(self.checks, key=lambda c: {False: 0, None: 1, True: 2}[c.passed])
        return "; ".join(c.line() for c in order)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for the manifest."""
        return {
            "status": self.status,
            "fitted": self.fitted,
            "predicted": self.predicted,
            "noise": self.noise,
            "reason": self.reason,
            "checks": [asdict(c) | {"outcome": c.outcome} for c in self.checks],
        }

    def markdown(self) -> str:
        """The verdict section of an item's page."""
        lines = [
            f"**Verdict: {self.status}.**" + (f" {self.reason}" if self.reason else ""),
            "",
            f"- Fitted to the paper (not evidence): {', '.join(self.fitted) or 'nothing'}",
            f"- Predicted: {', '.join(self.predicted) or 'nothing'}",
            f"- Noise: {self.noise}",
        ]
        lines += [f"- {c.line()}" for c in self.checks]
        return "\n".join(lines) + "\n"


def decide(checks: Sequence[Check], *, fitted: Iterable[str], predicted: Iterable[str], noise: Noise | str) -> Verdict:
    """The status the policy gives these checks (see module docstring)."""
    fitted, predicted = list(fitted), list(predicted)
    noise_text = noise if isinstance(noise, str) else noise.describe()
    control = [c for c in checks if c.name == "control" and c.passed is False]
    if control:
        return Verdict("not judged", list(checks), fitted, predicted, noise_text, f"control fails: {control[0].line()}")
    if not predicted:
        reason = "nothing predicted: only fitted cells ran" if fitted else "nothing predicted: no cell to compare"
        return Verdict("not judged", list(checks), fitted, predicted, noise_text, reason)
    if any(c.passed is False for c in checks):
        status = "differs"
    elif not checks or any(c.passed is None for c in checks):
        status = "not judged"
    else:
        status = "reproduced"
    return Verdict(status, list(checks), fitted, predicted, noise_text)


# ------------------------------------------------------------------ checks ----


def level(
    paper: pd.Series,
    measured: pd.Series,
    cells: Sequence[Any],
    noise: Noise,
    *,
    unit: str = "",
    each: bool = False,
    axis: str = "N",
) -> Check:
    """Relative error over ``cells`` within ``LEVEL_TOLERANCE``: the median of a series, or ``each`` stated value.

    A table's series is judged by its median error, so one odd cell of the
    paper's does not decide it alone; values the paper states one by one
    ("about 20 % on 1 device, 14 % on 10") must each hold.
    """
    rule = f"{'every stated value' if each else 'median'} |error| <= {LEVEL_TOLERANCE:.0%}"
    if not cells:
        return Check("level", None, "no predicted cell", rule)
    errors = (measured[list(cells)] / paper[list(cells)] - 1).abs()
    worst = errors.idxmax()
    text = (
        f"median error {errors.median():.1%}, worst {errors.max():.1%} at {_cell(axis, worst)} "
        f"({measured[worst]:,.4g}{unit} vs {paper[worst]:,.4g}{unit})"
    )
    error = errors.max() if each else errors.median()
    if noise.measured and noise.relative > LEVEL_TOLERANCE:
        # The noise is wider than the tolerance: only an error beyond both is a difference.
        if not _within(error, LEVEL_TOLERANCE + noise.relative):
            return Check(
                "level", False, text, rule, f"off by more than the tolerance plus the noise ({noise.relative:.0%})"
            )
        return Check("level", None, text, rule, f"noise {noise.relative:.0%} exceeds the tolerance")
    return Check("level", _within(error, LEVEL_TOLERANCE), text, rule)


def trend(measured: pd.Series, direction: int, noise: Noise, *, claim: str, axis: str = "N") -> Check:
    """Kendall's tau in ``direction`` (+1 grows, -1 falls) at least ``TREND_TAU``, and a change beyond the noise.

    ``axis`` names the index's quantity in the text (``N=1 to N=4``; ``K=2``, ``s=4`` for other sweeps).
    """
    from scipy.stats import kendalltau

    word = "grows" if direction > 0 else "falls"
    rule = f"{claim} {word}: Kendall tau x direction >= {TREND_TAU}, change beyond noise"
    if len(measured) < 2:
        return Check("trend", None, f"only {axis}={_cells(measured.index)} ran", rule)
    tau = kendalltau(measured.index.to_numpy(float), measured.to_numpy(float)).statistic
    change = _change(measured)
    text = f"tau {tau:+.2f}, change {change:+.1%} {_span(axis, measured.index)}"
    if not tau * direction >= TREND_TAU:  # also catches nan, from a constant series
        return Check("trend", False, text, rule)
    if noise.measured and abs(change) <= noise.relative:
        return Check("trend", False, text, rule, f"the change is inside the noise ({noise.relative:.1%})")
    return Check("trend", True, text, rule)


def slope(paper: pd.Series, measured: pd.Series, noise: Noise, *, unit: str = "") -> Check:
    """Least-squares slope within ``SLOPE_TOLERANCE`` of the paper's over the same device counts."""
    rule = f"|slope / paper's slope - 1| <= {SLOPE_TOLERANCE:.0%}, over the same N"
    cells = [n for n in measured.index if n in paper.index]
    if len(cells) < 2:
        return Check("slope", None, f"only N={cells} ran", rule)
    x = np.asarray(cells, dtype=float)
    mine = float(np.polyfit(x, measured[cells].to_numpy(float), 1)[0])
    theirs = float(np.polyfit(x, paper[cells].to_numpy(float), 1)[0])
    text = f"{mine:+,.4g}{unit}/device vs paper {theirs:+,.4g}{unit}/device over N={cells[0]}..{cells[-1]}"
    if theirs == 0:
        return Check("slope", None, text, rule, "the paper's slope is zero")
    # A slope's uncertainty from the noise of its end cells, spread over the range.
    uncertainty = (noise.relative if noise.measured else 0.0) * float(measured[cells].abs().max()) / (x[-1] - x[0])
    allowed = SLOPE_TOLERANCE * abs(theirs)
    if uncertainty > allowed:
        # The noise is wider than the tolerance: only a gap beyond both is a difference.
        if not _within(abs(mine - theirs), allowed + uncertainty):
            note = f"off by more than the tolerance plus what the noise allows (+-{uncertainty:,.3g}{unit}/device)"
            return Check("slope", False, text, rule, note)
        return Check("slope", None, text, rule, f"noise allows +-{uncertainty:,.3g}{unit}/device")
    return Check("slope", _within(abs(mine / theirs - 1), SLOPE_TOLERANCE), text, rule)


def effect(measured: pd.Series, direction: int, noise: Noise, *, claim: str, axis: str = "N") -> Check:
    """A direction-only claim's change of at least ``MIN_EFFECT`` of its start, beyond the noise."""
    floor = max(MIN_EFFECT, noise.relative if noise.measured else 0.0)
    rule = f"{claim}: change >= {MIN_EFFECT:.0%} and beyond noise, in the claimed direction"
    if len(measured) < 2:
        return Check("effect", None, f"only {axis}={_cells(measured.index)} ran", rule)
    change = _change(measured)
    text = f"{change:+.1%} {_span(axis, measured.index)}"
    return Check("effect", _within(floor, change * direction), text, rule)


def bound(
    measured: pd.Series,
    cells: Sequence[Any],
    *,
    lower: float | None = None,
    upper: float | None = None,
    claim: str,
    unit: str = "",
    axis: str = "N",
) -> Check:
    """Every cell in ``cells`` within the paper's stated bound (``axis`` names the cells in the text)."""
    rule = claim
    cells = [c for c in cells if c in measured.index]
    if not cells:
        return Check("bound", None, "no cell in range ran", rule)
    values = measured[cells]
    ok = (values >= (lower if lower is not None else -np.inf)) & (values <= (upper if upper is not None else np.inf))
    text = ", ".join(f"{_cell(axis, n)}: {v:,.4g}{unit}" for n, v in values.items())
    return Check("bound", bool(ok.all()), text, rule)


def accuracy(paper: pd.Series, measured: pd.Series, *, n_train: int, paper_n_train: int) -> Check:
    """Worst predicted accuracy cell within ``ACCURACY_TOLERANCE``, at the paper's data size."""
    rule = f"worst |accuracy - paper| <= {ACCURACY_TOLERANCE}"
    cells = [n for n in measured.index if n in paper.index]
    gaps = (measured[cells] - paper[cells]).abs()
    text = f"worst gap {gaps.max():.3f} at N={gaps.idxmax()}" if cells else "no cell"
    if n_train < paper_n_train:
        note = f"trained on {n_train:,} of the paper's {paper_n_train:,} samples; judged only at the paper's size"
        return Check("accuracy", None, text, rule, note)
    return Check("accuracy", _within(gaps.max(), ACCURACY_TOLERANCE), text, rule)


def control(a: pd.Series, b: pd.Series, *, what: str) -> Check:
    """Two groups of runs of the same computation: their medians agree within the spread inside each group.

    The spread within the groups, not across them, so a difference between the
    groups cannot widen its own allowance; at least ``MIN_EFFECT`` when a group
    ran once.
    """
    spreads = [(g.max() - g.min()) / abs(g.median()) for g in (a, b) if len(g) > 1 and g.median()]
    allowed = max([*spreads, MIN_EFFECT])
    ma, mb = float(a.median()), float(b.median())
    gap = abs(ma - mb) / abs((ma + mb) / 2) if ma + mb else 0.0
    rule = f"{what} agree within the spread of their own runs ({allowed:.1%})"
    return Check("control", _within(gap, allowed), f"medians {ma:,.4g} vs {mb:,.4g}: {gap:.1%} apart", rule)


def _within(value: float, limit: float) -> bool:
    """``value <= limit`` after rounding both, so a value exactly at a threshold is judged the same every run."""
    return bool(round(float(value), _DIGITS) <= round(float(limit), _DIGITS))


def _cell(axis: str, x: Any) -> str:
    """``N=2``: a whole float as an integer (``s=4``, not ``s=4.0``)."""
    if isinstance(x, float | np.floating) and float(x).is_integer():
        x = int(x)
    return f"{axis}={x}"


def _cells(index: Iterable[Any]) -> list[Any]:
    """The cells as listed in a text, whole floats as integers."""
    return [int(x) if isinstance(x, float | np.floating) and float(x).is_integer() else x for x in index]


def _span(axis: str, index: pd.Index) -> str:
    """``from N=1 to N=4``: the first and last cells."""
    return f"from {_cell(axis, index[0])} to {_cell(axis, index[-1])}"


def _change(measured: pd.Series) -> float:
    first, last = float(measured.iloc[0]), float(measured.iloc[-1])
    return (last - first) / abs(first) if first else math.inf * np.sign(last - first)

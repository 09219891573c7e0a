"""One verdict policy for every item of every experiment: evidence kinds, statuses and thresholds.

Every check says what its measured side rests on (its ``Basis``); the basis
alone decides the check's evidence kind:

* **predicted**: a value computed without looking at the paper's cell and not
  true by construction: a time on the emulated clock, a trained model's
  accuracy, a host measurement, a modelled value, bytes counted in a run
  against a formula that is not the code's own.
* **structural**: shapes, counts, a closed form checked against itself, a
  listing of the cluster the run itself configured. True or false, it says the
  build matches the paper's description; it confirms no measurement.
* **correctness**: the implementation computes what it must (a split model's
  outputs equal the whole model's, GPipe's update equals SGD's, a recovered
  run equals the undisturbed one). A failing one makes the item "differs"
  and fails the notebook (``Verdict.wrong``).
* **control**: two measurements of the same computation; when they disagree
  the clock is not trusted and no measured check is decided.
* **fitted**: a cell fitted to the paper: never evidence.

A measured value (time on a host or emulated clock, a host measurement, a
trained accuracy) is judged only with ``MIN_REPEATS`` runs behind it; with
fewer the check states what the runs show and stays undecided ("noisy").
A deterministic value says why it has no noise (``Noise.exact``).

The statuses, in the order they are decided:

1. **differs**: a check fails (a correctness check failing also marks the
   item wrong).
2. **reproduced**: every predicted check holds, and there is at least one.
3. **consistent**: no predicted check at all, and the structural or
   correctness checks hold: the build agrees with the paper, no measurement
   was confirmed. Counted apart, never with "reproduced".
4. **not judged**, with a reason class: ``qualitative`` (nothing
   measurable to compare), ``too small`` (the run is smaller than the claim
   needs), ``noisy`` (too few repeats, noise wider than the tolerance, a
   failed control) or ``data missing``.

The thresholds, all here and nowhere else:

* **level**: the median relative error over a series' predicted cells is at
  most ``LEVEL_TOLERANCE``; values the paper states one by one must each be
  within it. Noise wider than the tolerance leaves it undecided unless the
  error is beyond both.
* **trend**: Kendall's tau in the paper's direction at least ``TREND_TAU``,
  and a change from the first to the last cell beyond the noise.
* **slope**: the least-squares slope within ``SLOPE_TOLERANCE`` of the
  paper's over the same device counts.
* **effect**: a direction-only claim needs a change of at least
  ``MIN_EFFECT`` of its start, and more than the noise.
* **bound**: a value the paper gives as a bound.
* **accuracy**: accuracies within ``ACCURACY_TOLERANCE`` (absolute), judged
  only at the paper's data size.
* **balance**: the largest of ``k`` shares at most ``BALANCE_FACTOR / k``.
* **unbiased**: a mean within ``UNBIASED_TOLERANCE`` of its expectation.
* **control**: two groups of the same computation agree within their spread.
* the named thresholds of particular claims below the general ones (a float32
  computation done in another order, a "steep" or "flat" series, "heavily
  imbalanced" data ...), each with the wording it decides.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypedDict, Unpack

import numpy as np
import pandas as pd

from edgelab.common import checks

STATUSES = ("reproduced", "consistent", "differs", "not judged")
#: Why an item could not be judged, the first that applies in this order.
REASONS = ("data missing", "too small", "noisy", "qualitative")
KINDS = ("predicted", "structural", "correctness", "control", "fitted")

# Errors are compared after rounding to this many digits, so float noise cannot flip a verdict at a threshold.
_DIGITS = 9

LEVEL_TOLERANCE = 0.25
SLOPE_TOLERANCE = 0.25
TREND_TAU = 0.8
MIN_EFFECT = 0.05
ACCURACY_TOLERANCE = 0.02
#: Stages are balanced when the largest share of k is at most this factor of 1/k.
BALANCE_FACTOR = 1.5
#: A mean within this relative distance of its expectation is unbiased.
UNBIASED_TOLERANCE = 0.1
#: Runs a measured value needs before it is judged (its spread is shown either way).
MIN_REPEATS = 3

# Thresholds of particular claims, each named for what it decides (the papers' wording in the comment).
#: One float64 computation reached by two paths (a search's latency against the run's clock, a replayed schedule,
#: eta against scipy's entropy): equal when they differ by at most this (relative to the value, or in seconds).
ROUNDING_TOLERANCE = 1e-9
#: One float32 computation done in another order or split (GPipe's weights against plain SGD's, a split model's
#: outputs against the whole model's, stitched tiles against the untiled map): equal within this, relative to
#: the largest value.
FLOAT32_TOLERANCE = 1e-5
#: A pipeline stage idle at most this share of the steady state counts as "not idle" (1F1B: no worker idles).
IDLE_TOLERANCE = 0.10
#: Rounds of Sync-SGD a run needs before its final accuracy can decide a claim about training (fewer: "too small").
MIN_TRAINING_ROUNDS = 100
#: A gradient is sparse when at most this share of its coordinates holds 99% of its squared norm.
SPARSE_SHARE = 0.5
#: A data set is "heavily imbalanced" (Jeon's C5) when its largest class holds at least this many times its smallest.
IMBALANCE_RATIO = 2.0
#: A series "grows steeply", or one method is "much faster" than another: the ratio is at least this.
STEEP_FACTOR = 2.0
#: A series is "nearly flat", or a scheme "scales poorly": its last cell within this factor of its first.
FLAT_FACTOR = 1.5
#: "A little more" (Zhang's C33: +3.2%, +6.0%): an overhead above zero and at most this share of the base.
SMALL_OVERHEAD = 0.1
#: An image rebuilt from what a device sent is recovered when its SSIM against the original is at least this.
RECOVERED_SSIM = 0.9


class Basis(Enum):
    """What a check's measured side rests on; it decides the evidence kind and whether repeats are needed."""

    EMULATED_TIME = ("predicted", True, "a time on the emulated device clock (measured CPU time, device model)")
    HOST_MEASURE = ("predicted", True, "measured on this host (wall time, memory, CPU share, network rate)")
    TRAINED = ("predicted", True, "a trained model's accuracy, loss or outputs")
    MODELLED = ("predicted", False, "a deterministic model's prediction from its own inputs, not the paper's cell")
    COUNTED = ("predicted", False, "bytes, operations or parameters counted in a run, against the paper's figure")
    STRUCTURE = ("structural", False, "shapes, layer counts, parameter counts of what was built")
    SAME_FORMULA = ("structural", False, "a closed form checked against the same closed form")
    CONFIGURED = ("structural", False, "what the run itself configured (its cluster, where it sent the data)")
    CORRECTNESS = ("correctness", False, "the implementation computes what it must")
    CONTROL = ("control", True, "two measurements of the same computation")
    FITTED = ("fitted", False, "a cell fitted to the paper")

    def __init__(self, kind: str, measured: bool, text: str) -> None:
        self.kind = kind
        self.measured = measured
        self.text = text


@dataclass(frozen=True)
class Noise:
    """Spread of repeated measurements of the same cells, or why the values carry none.

    ``cells`` maps a cell (e.g. a device count) to ``(min, median, max, n)``;
    ``relative`` is the largest (max - min) / median among cells measured more
    than once, ``nan`` when no cell was repeated; ``runs`` the most runs any
    cell had. ``exact`` (set through ``Noise.none``) says why deterministic
    values have no noise.
    """

    cells: dict[Any, tuple[float, float, float, int]] = field(default_factory=dict)
    axis: str = "N"  # what a cell's key counts, for the text
    exact: str = ""

    @classmethod
    def none(cls, why: str) -> Noise:
        """The noise of deterministic values: none, and ``why`` (e.g. "bytes are counted, not timed")."""
        if not why:
            raise ValueError("Noise.none needs the reason the values are deterministic")
        return cls(exact=why)

    @classmethod
    def of_runs(cls, values: Iterable[float], *, cell: Any = "all runs") -> Noise:
        """The noise of one cell measured once per run (``values``)."""
        v = [float(x) for x in values]
        return cls({cell: (min(v), float(np.median(v)), max(v), len(v))}) if v else cls()

    @property
    def relative(self) -> float:
        """The largest relative spread among repeated cells (``nan`` when none was repeated)."""
        spreads = [(hi - lo) / abs(mid) for lo, mid, hi, n in self.cells.values() if n > 1 and mid]
        return max(spreads) if spreads else math.nan

    @property
    def measured(self) -> bool:
        """Whether any cell was repeated."""
        return not math.isnan(self.relative)

    @property
    def runs(self) -> int:
        """The most runs behind any cell (0 for deterministic values or no cell)."""
        return max((n for *_, n in self.cells.values()), default=0)

    def describe(self) -> str:
        """One line: the spread of each repeated cell, or why there is none."""
        if self.exact:
            return f"none: {self.exact}"
        repeated = {k: v for k, v in self.cells.items() if v[3] > 1}
        if not repeated:
            return f"not measured (each cell ran once; a measured value is judged with {MIN_REPEATS} runs)"
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
    """One rule applied to one claim: what was measured, what it rests on, the rule, and whether it held.

    ``runs`` is how many runs stand behind a measured basis (0 when unknown);
    ``undecided`` the reason class (``REASONS``) when ``passed`` is None.
    """

    name: str
    passed: bool | None  # None: the measurement cannot decide
    measured: str
    rule: str
    note: str = ""
    basis: Basis = field(kw_only=True)
    runs: int = field(default=0, kw_only=True)
    undecided: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.basis, Basis):
            raise TypeError(f"Check {self.name!r}: basis={self.basis!r}; expected a verdict.Basis")
        if self.passed is None and self.undecided not in REASONS:
            raise ValueError(
                f"Check {self.name!r} is undecided: undecided={self.undecided!r}; expected one of {', '.join(REASONS)}"
            )

    @property
    def kind(self) -> str:
        """The evidence kind its basis gives (``KINDS``)."""
        return self.basis.kind

    @property
    def outcome(self) -> str:
        """``holds``, ``FAILS`` or ``not judged``."""
        return {True: "holds", False: "FAILS", None: "not judged"}[self.passed]

    def line(self) -> str:
        """``name [kind]: measured (rule): outcome [note]``."""
        note = f"; {self.note}" if self.note else ""
        undecided = f" ({self.undecided})" if self.passed is None else ""
        return f"{self.name} [{self.kind}]: {self.measured} (rule: {self.rule}): {self.outcome}{undecided}{note}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for the manifest."""
        return {
            "name": self.name,
            "passed": self.passed,
            "measured": self.measured,
            "rule": self.rule,
            "note": self.note,
            "basis": self.basis.name,
            "kind": self.kind,
            "runs": self.runs,
            "undecided": self.undecided,
            "outcome": self.outcome,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Check:
        """The check a manifest entry records."""
        return cls(
            d["name"],
            d["passed"],
            d["measured"],
            d["rule"],
            d.get("note", ""),
            basis=Basis[d["basis"]],
            runs=int(d.get("runs", 0)),
            undecided=d.get("undecided", ""),
        )


_FROM_POLICY = object()  # only ``decide`` makes verdicts


@dataclass(frozen=True)
class Verdict:
    """The status of one item and everything it rests on; made by ``decide`` only."""

    status: str
    checks: list[Check]
    fitted: list[str]
    predicted: list[str]
    noise: str
    reason: str = ""  # why it could not be judged, when nothing was
    reason_class: str = ""  # REASONS, for "not judged"
    choices: list[str] = field(default_factory=list)  # modelling choices the paper leaves open
    _made_by: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._made_by is not _FROM_POLICY:
            raise TypeError("a Verdict is made by edgelab.report.verdict.decide, not by hand")

    @property
    def wrong(self) -> list[Check]:
        """The correctness checks that fail: the implementation is wrong there."""
        return [c for c in self.checks if c.kind == "correctness" and c.passed is False]

    @property
    def evidence(self) -> list[str]:
        """The predicted checks that hold: what the item's "reproduced" rests on."""
        return [c.name for c in self.checks if c.kind == "predicted" and c.passed is True]

    @property
    def why(self) -> str:
        """One line: the reason, else failing checks first, then the undecided, then those that hold."""
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
            "choices": self.choices,
            "noise": self.noise,
            "reason": self.reason,
            "reason_class": self.reason_class,
            "evidence": self.evidence,
            "wrong": [c.name for c in self.wrong],
            "checks": [c.to_dict() for c in self.checks],
        }

    def markdown(self) -> str:
        """The verdict section of an item's page."""
        head = f"**Verdict: {self.status}**" + (f" ({self.reason_class})" if self.reason_class else "") + "."
        lines = [
            head + (f" {self.reason}" if self.reason else ""),
            "",
            f"- Evidence (predicted checks that hold): {', '.join(self.evidence) or 'none'}",
            f"- Fitted to the paper (not evidence): {', '.join(self.fitted) or 'nothing'}",
            f"- Modelling choices (the paper leaves them open): {'; '.join(self.choices) or 'none'}",
            f"- Predicted cells: {', '.join(self.predicted) or 'none'}",
            f"- Noise: {self.noise}",
        ]
        lines += [f"- {c.line()}" for c in self.checks]
        return "\n".join(lines) + "\n"


def decide(
    checks: Sequence[Check],
    *,
    fitted: Iterable[str],
    predicted: Iterable[str],
    noise: Noise,
    choices: Iterable[str] = (),
    reason: str = "",
    reason_class: str = "",
) -> Verdict:
    """The status the policy gives these checks (see the module docstring).

    ``reason`` and ``reason_class`` explain an item with no check at all (a
    diagram, a list of terms): it is "not judged" for that reason.
    """
    if not isinstance(noise, Noise):
        raise TypeError(f"noise={noise!r}: expected a verdict.Noise (Noise.none(why) for deterministic values)")
    fitted, predicted, choices = list(fitted), list(predicted), list(choices)
    control = [c for c in checks if c.kind == "control" and c.passed is False]
    judged = [_demoted(c, control) for c in checks]

    def made(status: str, why: str = "", cls: str = "") -> Verdict:
        return Verdict(status, judged, fitted, predicted, noise.describe(), why, cls, choices, _FROM_POLICY)

    if any(c.passed is False and c.kind in ("predicted", "structural", "correctness") for c in judged):
        return made("differs")
    evidence = [c for c in judged if c.kind == "predicted"]
    if evidence and all(c.passed for c in evidence):
        return made("reproduced")
    build = [c for c in judged if c.kind in ("structural", "correctness")]
    if not evidence and any(c.passed for c in build):
        return made("consistent")
    # Why it is not judged: the undecided predicted checks' reason when there are predicted checks.
    undecided = [c for c in (evidence or judged) if c.passed is None and c.kind != "control"]
    if not judged or not undecided:
        if reason_class not in REASONS:
            raise ValueError(f"an item with nothing to decide needs reason_class among {REASONS}, not {reason_class!r}")
        why = reason or ("only fitted cells ran" if judged else "nothing to check")
        return made("not judged", why, reason_class)
    cls = next(r for r in REASONS if any(c.undecided == r for c in undecided))
    return made("not judged", reason, cls)


def _demoted(check: Check, failed_controls: list[Check]) -> Check:
    """A measured check without enough runs, or under a failed control, stays undecided (its text kept)."""
    if not check.basis.measured or check.kind == "control" or check.passed is None:
        return check
    would = "would hold" if check.passed else "would fail"
    if failed_controls:
        note = f"{would}; the control fails, so the clock is not trusted"
    elif check.runs < MIN_REPEATS:
        note = f"{would} on {check.runs} run(s); a measured value is judged with {MIN_REPEATS}"
    else:
        return check
    return Check(
        check.name,
        None,
        check.measured,
        check.rule,
        "; ".join(p for p in (check.note, note) if p),
        basis=check.basis,
        runs=check.runs,
        undecided="noisy",
    )


def redecide(entry: dict[str, Any]) -> str:
    """The status the policy gives a manifest entry's recorded verdict (for checking committed manifests)."""
    v = entry["verdict"]
    checks = [Check.from_dict(c) for c in v["checks"]]
    return decide(
        checks,
        fitted=v["fitted"],
        predicted=v["predicted"],
        noise=Noise.none("recorded"),
        choices=v.get("choices", []),
        reason=v.get("reason", ""),
        reason_class=v.get("reason_class", ""),
    ).status


# ------------------------------------------------------------------ checks ----


class Labels(TypedDict, total=False):
    """How a check names itself and its cells in its text: keywords of ``level`` and ``bound``.

    ``unit`` follows each value (default none); ``axis`` names the cells' quantity (``N=2``; default ``"N"``);
    ``name`` is the check's (default the function's name).
    """

    unit: str
    axis: str
    name: str


def _labels(function: str, labels: Mapping[str, Any]) -> tuple[str, str, str]:
    """``labels`` (``Labels``) as ``(unit, axis, name)``, with their defaults."""
    checks.keywords(function, labels, Labels)
    return labels.get("unit", ""), labels.get("axis", "N"), labels.get("name", function)


def level(
    paper: pd.Series,
    measured: pd.Series,
    cells: Sequence[Any],
    noise: Noise,
    *,
    basis: Basis,
    each: bool = False,
    **labels: Unpack[Labels],
) -> Check:
    """Relative error over ``cells`` within ``LEVEL_TOLERANCE``: the median of a series, or ``each`` stated value.

    A table's series is judged by its median error, so one odd cell of the
    paper's does not decide it alone; values the paper states one by one
    ("about 20 % on 1 device, 14 % on 10") must each hold. ``labels``: ``Labels``.
    """
    unit, axis, name = _labels("level", labels)
    rule = f"{'every stated value' if each else 'median'} |error| <= {LEVEL_TOLERANCE:.0%}"
    if not cells:
        return Check(name, None, "no predicted cell", rule, basis=basis, undecided="too small")
    errors = (measured[list(cells)] / paper[list(cells)] - 1).abs()
    worst = errors.idxmax()
    text = (
        f"median error {errors.median():.1%}, worst {errors.max():.1%} at {_cell(axis, worst)} "
        f"({measured[worst]:,.4g}{unit} vs {paper[worst]:,.4g}{unit})"
    )
    error = errors.max() if each else errors.median()
    runs = noise.runs
    if noise.measured and noise.relative > LEVEL_TOLERANCE:
        # The noise is wider than the tolerance: only an error beyond both is a difference.
        if not _within(error, LEVEL_TOLERANCE + noise.relative):
            note = f"off by more than the tolerance plus the noise ({noise.relative:.0%})"
            return Check(name, False, text, rule, note, basis=basis, runs=runs)
        note = f"noise {noise.relative:.0%} exceeds the tolerance"
        return Check(name, None, text, rule, note, basis=basis, runs=runs, undecided="noisy")
    return Check(name, _within(error, LEVEL_TOLERANCE), text, rule, basis=basis, runs=runs)


def close(
    name: str,
    measured: float,
    paper: float,
    *,
    basis: Basis,
    runs: int = 0,
    text: str = "",
    tolerance: str = "level",
) -> Check:
    """One value within the level tolerance of the paper's (relative), or ``tolerance="accuracy"`` (absolute)."""
    if tolerance == "accuracy":
        gap, rule = abs(measured - paper), f"|value - paper| <= {ACCURACY_TOLERANCE}"
        ok = _within(gap, ACCURACY_TOLERANCE)
    elif tolerance == "level":
        gap, rule = abs(measured / paper - 1) if paper else math.inf, f"|error| <= {LEVEL_TOLERANCE:.0%}"
        ok = _within(gap, LEVEL_TOLERANCE)
    else:
        raise ValueError(f"tolerance={tolerance!r}; expected 'level' or 'accuracy'")
    return Check(name, ok, text or f"{measured:,.4g} vs the paper's {paper:,.4g}", rule, basis=basis, runs=runs)


def trend(
    measured: pd.Series, direction: int, noise: Noise, *, claim: str, basis: Basis, axis: str = "N", name: str = "trend"
) -> Check:
    """Kendall's tau in ``direction`` (+1 grows, -1 falls) at least ``TREND_TAU``, and a change beyond the noise.

    ``axis`` names the index's quantity in the text (``N=1 to N=4``; ``K=2``, ``s=4`` for other sweeps).
    """
    from scipy.stats import kendalltau

    word = "grows" if direction > 0 else "falls"
    rule = f"{claim} {word}: Kendall tau x direction >= {TREND_TAU}, change beyond noise"
    if len(measured) < 2:
        return Check(name, None, f"only {axis}={_cells(measured.index)} ran", rule, basis=basis, undecided="too small")
    tau = kendalltau(measured.index.to_numpy(float), measured.to_numpy(float)).statistic
    change = _change(measured)
    text = f"tau {tau:+.2f}, change {change:+.1%} {_span(axis, measured.index)}"
    runs = noise.runs
    if not tau * direction >= TREND_TAU:  # also catches nan, from a constant series
        return Check(name, False, text, rule, basis=basis, runs=runs)
    if noise.measured and abs(change) <= noise.relative:
        note = f"the change is inside the noise ({noise.relative:.1%})"
        return Check(name, False, text, rule, note, basis=basis, runs=runs)
    return Check(name, True, text, rule, basis=basis, runs=runs)


def slope(paper: pd.Series, measured: pd.Series, noise: Noise, *, basis: Basis, unit: str = "") -> Check:
    """Least-squares slope within ``SLOPE_TOLERANCE`` of the paper's over the same device counts."""
    rule = f"|slope / paper's slope - 1| <= {SLOPE_TOLERANCE:.0%}, over the same N"
    cells = [n for n in measured.index if n in paper.index]
    if len(cells) < 2:
        return Check("slope", None, f"only N={cells} ran", rule, basis=basis, undecided="too small")
    x = np.asarray(cells, dtype=float)
    mine = float(np.polyfit(x, measured[cells].to_numpy(float), 1)[0])
    theirs = float(np.polyfit(x, paper[cells].to_numpy(float), 1)[0])
    text = f"{mine:+,.4g}{unit}/device vs paper {theirs:+,.4g}{unit}/device over N={cells[0]}..{cells[-1]}"
    runs = noise.runs
    if theirs == 0:
        return Check("slope", None, text, rule, "the paper's slope is zero", basis=basis, undecided="qualitative")
    # A slope's uncertainty from the noise of its end cells, spread over the range.
    uncertainty = (noise.relative if noise.measured else 0.0) * float(measured[cells].abs().max()) / (x[-1] - x[0])
    allowed = SLOPE_TOLERANCE * abs(theirs)
    if uncertainty > allowed:
        # The noise is wider than the tolerance: only a gap beyond both is a difference.
        if not _within(abs(mine - theirs), allowed + uncertainty):
            note = f"off by more than the tolerance plus what the noise allows (+-{uncertainty:,.3g}{unit}/device)"
            return Check("slope", False, text, rule, note, basis=basis, runs=runs)
        note = f"noise allows +-{uncertainty:,.3g}{unit}/device"
        return Check("slope", None, text, rule, note, basis=basis, runs=runs, undecided="noisy")
    return Check("slope", _within(abs(mine / theirs - 1), SLOPE_TOLERANCE), text, rule, basis=basis, runs=runs)


def effect(
    measured: pd.Series,
    direction: int,
    noise: Noise,
    *,
    claim: str,
    basis: Basis,
    axis: str = "N",
    name: str = "effect",
) -> Check:
    """A direction-only claim's change of at least ``MIN_EFFECT`` of its start, beyond the noise."""
    floor = max(MIN_EFFECT, noise.relative if noise.measured else 0.0)
    rule = f"{claim}: change >= {MIN_EFFECT:.0%} and beyond noise, in the claimed direction"
    if len(measured) < 2:
        return Check(name, None, f"only {axis}={_cells(measured.index)} ran", rule, basis=basis, undecided="too small")
    change = _change(measured)
    text = f"{change:+.1%} {_span(axis, measured.index)}"
    return Check(name, _within(floor, change * direction), text, rule, basis=basis, runs=noise.runs)


def bound(
    measured: pd.Series,
    cells: Sequence[Any],
    *,
    lower: float | None = None,
    upper: float | None = None,
    claim: str,
    basis: Basis,
    runs: int = 0,
    **labels: Unpack[Labels],
) -> Check:
    """Every cell in ``cells`` within the paper's stated bound (``labels``: ``Labels``, ``axis`` names the cells)."""
    unit, axis, name = _labels("bound", labels)
    rule = claim
    cells = [c for c in cells if c in measured.index]
    if not cells:
        return Check(name, None, "no cell in range ran", rule, basis=basis, undecided="too small")
    values = measured[cells]
    ok = (values >= (lower if lower is not None else -np.inf)) & (values <= (upper if upper is not None else np.inf))
    text = ", ".join(f"{_cell(axis, n)}: {v:,.4g}{unit}" for n, v in values.items())
    return Check(name, bool(ok.all()), text, rule, basis=basis, runs=runs)


def accuracy(
    paper: pd.Series,
    measured: pd.Series,
    *,
    n_train: int,
    paper_n_train: int,
    runs: int,
    name: str = "accuracy",
) -> Check:
    """Worst predicted accuracy cell within ``ACCURACY_TOLERANCE``, at the paper's data size, over ``runs`` seeds."""
    rule = f"worst |accuracy - paper| <= {ACCURACY_TOLERANCE}"
    cells = [n for n in measured.index if n in paper.index]
    if not cells:
        return Check(name, None, "no cell", rule, basis=Basis.TRAINED, undecided="too small")
    gaps = (measured[cells] - paper[cells]).abs()
    text = f"worst gap {gaps.max():.3f} at N={gaps.idxmax()}"
    if n_train < paper_n_train:
        note = f"trained on {n_train:,} of the paper's {paper_n_train:,} samples; judged only at the paper's size"
        return Check(name, None, text, rule, note, basis=Basis.TRAINED, runs=runs, undecided="too small")
    return Check(name, _within(gaps.max(), ACCURACY_TOLERANCE), text, rule, basis=Basis.TRAINED, runs=runs)


def accuracy_gap(name: str, better: float, worse: float, *, runs: int, claim: str, at_least: bool = True) -> Check:
    """``better`` above ``worse`` by more than ``ACCURACY_TOLERANCE`` (``at_least``), or within it (not at_least)."""
    gap = better - worse
    if at_least:
        rule = f"{claim}: gap > {ACCURACY_TOLERANCE}"
        ok = gap > ACCURACY_TOLERANCE
    else:
        rule = f"{claim}: gap <= {ACCURACY_TOLERANCE}"
        ok = _within(gap, ACCURACY_TOLERANCE)
    return Check(name, bool(ok), f"{better:.3f} vs {worse:.3f} (gap {gap:+.3f})", rule, basis=Basis.TRAINED, runs=runs)


def balanced(name: str, shares: Sequence[float], *, basis: Basis, what: str) -> Check:
    """The largest of ``k`` shares at most ``BALANCE_FACTOR / k``: parts balanced by ``what``."""
    k = len(shares)
    limit = BALANCE_FACTOR / k
    top = max(shares)
    text = f"largest share {top:.1%} of {k} parts (equal: {1 / k:.1%})"
    return Check(name, _within(top, limit), text, f"balanced by {what}: largest <= {limit:.1%}", basis=basis)


def unbiased(name: str, errors: Sequence[float], *, basis: Basis, text: str) -> Check:
    """Every relative error of a mean against its expectation at most ``UNBIASED_TOLERANCE``."""
    ok = _within(max(abs(e) for e in errors), UNBIASED_TOLERANCE)
    return Check(name, ok, text, f"every mean within {UNBIASED_TOLERANCE:.0%} of its expectation", basis=basis)


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
    measured = f"medians {ma:,.4g} vs {mb:,.4g}: {gap:.1%} apart"
    return Check("control", _within(gap, allowed), measured, rule, basis=Basis.CONTROL, runs=min(len(a), len(b)))


def holds(
    name: str,
    passed: bool | None,
    measured: str,
    rule: str,
    *,
    basis: Basis,
    runs: int = 0,
    note: str = "",
    undecided: str = "",
) -> Check:
    """A check whose outcome is a plain fact with no threshold (equal, present, in order); ``None`` needs a class."""
    return Check(name, passed, measured, rule, note, basis=basis, runs=runs, undecided=undecided)


def _within(value: float, limit: float) -> bool:
    """``value <= limit`` after rounding both, so a value exactly at a threshold is judged the same every run."""
    return bool(round(float(value), _DIGITS) <= round(float(limit), _DIGITS))


def within(value: float, limit: float) -> bool:
    """``value <= limit``, rounded as every threshold of the policy is compared."""
    return _within(value, limit)


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

"""The survey's Figure 3-3 from real pipelined training: GPipe and 1F1B as Gantt charts, GPipe's bubble against M.

fig3-3a: one GPipe mini-batch on the device's clock (a box per pass,
``F3`` / ``B3`` for micro-batch 3), the bubble against the number of
micro-batches beside ``(K - 1) / (M + K - 1)``, and the time per mini-batch.
fig3-3b: a whole 1F1B run with its warm-up, steady state and drain, the
micro-batches each stage holds (kept inputs and stashed weights) against
PipeDream's bound, and the loss per update beside plain SGD's.
fig3-3: both charts on one time axis over the bubble curve.
eq-gpipe-bubble: the formula against the measured bubble, value by value.

The survey states no values: fig3-3a is judged on its claim that more
(smaller) micro-batches shorten the idle time (the device clock: measured CPU
times, ``EMULATED_TIME``, judged with three runs), with GPipe's update equal to
plain SGD's as the implementation's correctness; fig3-3b on "no worker idles
in steady state" (``EMULATED_TIME``), on the versions weight stashing must give
(correctness) and on the micro-batches each stage holds (structure); the
formula on each M against the measured bubble.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.common.results import StoredRun
from edgelab.emulation import training_clock
from edgelab.papers.qiao import pipeline_training as exp
from edgelab.report import verdict
from edgelab.report.manifest import ReportItem
from edgelab.report.style import data_source, markdown_table, save_figure, save_table
from edgelab.report.verdict import FLOAT32_TOLERANCE, IDLE_TOLERANCE, Basis, Noise

CLOCK = (
    "the device's clock (edgelab.emulation.training_clock): each pass's CPU time measured in its worker process times "
    "the calibration's speed factor, each activation and gradient at the link's latency plus its bytes over the "
    "link's rate, one pass at a time per device in the order the run executed them"
)
#: GPipe's weights against plain SGD's: the largest absolute difference float32 rounding may leave.
SAME_WEIGHTS_ATOL = FLOAT32_TOLERANCE
_COLOURS = {"forward": "C0", "backward": "C1", "forward+backward": "C4", "update": "0.5"}


def _label(row: Any, per_step: int | None) -> str:
    m = int(row.micro_batch) if per_step is None else int(row.step) * per_step + int(row.micro_batch)
    return {"forward": f"F{m}", "backward": f"B{m}", "forward+backward": f"FB{m}"}.get(row.kind, "U")


def gantt(ax: Any, timeline: pd.DataFrame, *, per_step: int | None = None, origin: float = 0.0) -> None:
    """A box per pass (x: device clock from ``origin``, y: stage, first on top), labelled with its micro-batch."""
    k = int(timeline["stage_index"].max()) + 1
    for row in timeline.itertuples(index=False):
        y = k - 1 - int(row.stage_index)
        width = float(row.end - row.start)
        ax.broken_barh([(float(row.start) - origin, width)], (y - 0.4, 0.8), facecolors=_COLOURS.get(row.kind, "0.5"),
                       edgecolor="white", linewidth=0.5)  # fmt: skip
        ax.text(float(row.start) - origin + width / 2, y, _label(row, per_step), ha="center", va="center",
                fontsize=6, color="white", clip_on=True)  # fmt: skip
    ax.set_yticks(range(k), [f"stage {k - i} ({d})" for i, d in enumerate(_devices(timeline, k))])
    ax.set_xlabel("device clock (s)")


def _devices(timeline: pd.DataFrame, k: int) -> list[str]:
    by_stage = timeline.groupby("stage_index")["device"].first()
    return [by_stage[k - 1 - i] for i in range(k)]


def _one_step(timeline: pd.DataFrame, step: int = 1) -> pd.DataFrame:
    return timeline[timeline["step"] == step]


def _mean(summary: pd.DataFrame, column: str) -> pd.Series:
    gpipe = summary[summary["schedule"] == "gpipe"]
    return gpipe.groupby("micro_batches")[column].mean()


def _m_axis(ax: Any, ms: Any) -> None:
    """A log axis of the micro-batch counts run, labelled with them only."""
    import matplotlib.ticker as ticker

    ax.set_xscale("log")
    ax.set_xticks(list(ms), [str(m) for m in ms])
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_xlabel("micro-batches per mini-batch (M)")


def bubble_panel(ax: Any, summary: pd.DataFrame, k: int) -> None:
    """Measured bubble (device clock, host wall) against M, the formula over it."""
    gpipe = summary[summary["schedule"] == "gpipe"]
    ax.plot(gpipe["micro_batches"], gpipe["bubble"], "o", color="C0", alpha=0.5)
    ax.plot(_mean(summary, "bubble"), "-o", color="C0", label="measured, device clock")
    ax.plot(_mean(summary, "host_bubble"), ":x", color="0.5", label="measured, this host's wall clock")
    ax.plot(_mean(summary, "formula"), "--s", color="black", label=f"(K-1)/(M+K-1), K={k} (qiao/eq-gpipe-bubble)")
    ax.set(ylabel="idle share (bubble)", ylim=(0, 1))
    _m_axis(ax, sorted(gpipe["micro_batches"].unique()))
    ax.legend(fontsize=7)


def _run(timelines: dict[Any, pd.DataFrame], schedule: str, m: int | None = None) -> tuple[Any, pd.DataFrame]:
    keys = [k for k in timelines if k.schedule == schedule and k.repeat == 0 and (m is None or k.micro_batches == m)]
    return keys[0], timelines[keys[0]]


def _gpipe_shown(plan: exp.Plan) -> int:
    """The M whose GPipe mini-batch is drawn: 1F1B's, or the sweep's middle."""
    ms = sorted(set(plan.params.micro_batches))
    return plan.params.stream_micro_batches if plan.params.stream_micro_batches in ms else ms[len(ms) // 2]


def draw_gpipe(plan: exp.Plan, timelines: dict[Any, pd.DataFrame], summary: pd.DataFrame) -> Any:
    """fig3-3a: one mini-batch's Gantt chart, the bubble against M, the time per mini-batch."""
    import matplotlib.pyplot as plt

    k = len(plan.cut.stages)
    key, timeline = _run(timelines, "gpipe", _gpipe_shown(plan))
    step = _one_step(timeline)
    fig = plt.figure(figsize=(12, 7))
    top = fig.add_subplot(2, 1, 1)
    gantt(top, step, origin=float(step["start"].min()))
    top.set_title(f"GPipe, M={key.micro_batches} micro-batches of {plan.params.batch_size // key.micro_batches} "
                  "(mini-batch 2 of the run; grey: the update)")  # fmt: skip
    bubble_panel(fig.add_subplot(2, 2, 3), summary, k)
    right = fig.add_subplot(2, 2, 4)
    per_batch = _mean(summary, "s_per_mini_batch")
    right.plot(per_batch, "-o", color="C2")
    right.set(ylabel="device seconds per mini-batch", ylim=(0, None))
    _m_axis(right, per_batch.index)
    fig.suptitle(f"qiao/fig3-3a: GPipe on {k} emulated {plan.profile.name} devices, {_model(plan)}")
    fig.tight_layout()
    return fig


def _model(plan: exp.Plan) -> str:
    return f"{plan.model_identity['name']}, mini-batch {plan.params.batch_size}"


def draw_1f1b(plan: exp.Plan, timelines: dict[Any, pd.DataFrame], curves: pd.DataFrame) -> Any:
    """fig3-3b: the whole 1F1B run with its phases, micro-batches held per stage, and the losses."""
    import matplotlib.pyplot as plt

    k = len(plan.cut.stages)
    key, timeline = _run(timelines, "1f1b")
    lo, hi = training_clock.steady_window(timeline)
    fig = plt.figure(figsize=(12, 7.5))
    top = fig.add_subplot(2, 1, 1)
    gantt(top, timeline, per_step=key.micro_batches)
    for x0, x1, name in ((0, lo, "warm-up"), (lo, hi, "steady state"), (hi, float(timeline["end"].max()), "drain")):
        top.axvspan(x0, x1, color={"warm-up": "C1", "steady state": "C2", "drain": "C3"}[name], alpha=0.08)
        top.text((x0 + x1) / 2, k - 0.45, name, ha="center", va="bottom", fontsize=8)
    top.set_title(f"PipeDream 1F1B with weight stashing, {plan.params.steps * key.micro_batches} micro-batches of "
                  f"{plan.params.batch_size // key.micro_batches}, no flush")  # fmt: skip
    held = training_clock.in_flight(timeline)
    mid = fig.add_subplot(2, 2, 3)
    for s, rows in held.groupby("stage"):
        if s < k - 1:
            mid.step(rows["t"], rows["held"], where="post", color=f"C{s}", label=f"stage {s + 1} (bound {k - s})")
            mid.axhline(k - s, color=f"C{s}", linestyle=":", linewidth=0.8)
    mid.set(xlabel="device clock (s)", ylabel="micro-batches held (stashed versions)")
    mid.legend(fontsize=7)
    right = fig.add_subplot(2, 2, 4)
    for name, rows in curves.groupby("run"):
        right.plot(rows["images_seen"], rows["loss"], "-o", markersize=3, label=name)
    for _, rows in curves.groupby("run"):
        right.plot(rows["images_seen"], rows["plain_sgd_loss"], ":", color="0.4", linewidth=1)
    right.plot([], [], ":", color="0.4", label="plain SGD on the same updates")
    right.set(xlabel="training images seen", ylabel="loss")
    right.legend(fontsize=7)
    fig.suptitle(f"qiao/fig3-3b: 1F1B on {k} emulated {plan.profile.name} devices, {_model(plan)}")
    fig.tight_layout()
    return fig


def draw_composite(plan: exp.Plan, timelines: dict[Any, pd.DataFrame], summary: pd.DataFrame) -> Any:
    """fig3-3: GPipe's and 1F1B's charts on one time axis (mini-batches after the warm-up), the bubble below."""
    import matplotlib.pyplot as plt

    k = len(plan.cut.stages)
    _, gpipe = _run(timelines, "gpipe", _gpipe_shown(plan))
    _, stream = _run(timelines, "1f1b")
    gpipe, stream = gpipe[gpipe["step"] >= 1], stream[stream["step"] >= 1]
    fig, axes = plt.subplots(3, 1, figsize=(12, 9), gridspec_kw={"height_ratios": [1, 1, 1.1]})
    gantt(axes[0], gpipe, origin=float(gpipe["start"].min()))
    gantt(axes[1], stream, per_step=_gpipe_shown(plan), origin=float(stream["start"].min()))
    width = max(float(gpipe["end"].max() - gpipe["start"].min()), float(stream["end"].max() - stream["start"].min()))
    titles = ("(a) GPipe: fill, drain, one update per mini-batch", "(b) PipeDream 1F1B")
    for ax, name in zip(axes[:2], titles, strict=True):
        ax.set_xlim(0, width)
        ax.set_title(name, fontsize=10)
    bubble_panel(axes[2], summary, k)
    fig.suptitle(f"qiao/fig3-3: pipeline parallelism on {k} emulated {plan.profile.name} devices "
                 f"(mini-batches after the first)")  # fmt: skip
    fig.tight_layout()
    return fig


# ------------------------------------------------------------- verdicts ----


def _noise(summary: pd.DataFrame, column: str) -> verdict.Noise:
    gpipe = summary[summary["schedule"] == "gpipe"]
    return verdict.noise_of(gpipe.set_index("micro_batches")[column], axis="M")


def same_as_sgd(summary: pd.DataFrame) -> verdict.Check:
    """qiao/C8: GPipe's weights equal plain SGD's on the same mini-batches: the implementation's correctness."""
    gpipe = summary[summary["schedule"] == "gpipe"]
    worst = float(gpipe["max_weight_difference"].max())
    return verdict.holds(
        "GPipe's update is SGD's",
        verdict.within(worst, SAME_WEIGHTS_ATOL),
        f"largest |GPipe - plain SGD| weight difference {worst:.2e} over {len(gpipe)} run(s)",
        f"<= {SAME_WEIGHTS_ATOL:g} (GPipe's weights equal one-process SGD on the same mini-batches)",
        basis=Basis.CORRECTNESS,
    )


def gpipe_verdict(summary: pd.DataFrame, k: int, choices: list[str] | None = None) -> verdict.Verdict:
    """qiao/C7: more micro-batches, less idle time (device clock); qiao/C8: GPipe's weights are plain SGD's."""
    bubble = _mean(summary, "bubble")
    noise = _noise(summary, "bubble")
    checks = [
        verdict.trend(bubble, -1, noise, claim="GPipe's idle share (qiao/C7)", basis=Basis.EMULATED_TIME, axis="M"),
        same_as_sgd(summary),
    ]
    cells = [f"M={m}" for m in bubble.index]
    return verdict.decide(checks, fitted=[], predicted=cells, noise=noise, choices=choices or [])


def formula_verdict(summary: pd.DataFrame, choices: list[str] | None = None) -> verdict.Verdict:
    """Each M's measured bubble (the device clock) against ``(K - 1) / (M + K - 1)``."""
    bubble, formula = _mean(summary, "bubble"), _mean(summary, "formula")
    noise = _noise(summary, "bubble")
    check = verdict.level(formula, bubble, list(bubble.index), noise, basis=Basis.EMULATED_TIME, each=True, axis="M")
    cells = [f"M={m}" for m in bubble.index]
    return verdict.decide([check], fitted=[], predicted=cells, noise=noise, choices=choices or [])


def stream_idle(plan: exp.Plan, stored: list[StoredRun], timelines: dict[Any, pd.DataFrame]) -> pd.DataFrame:
    """Each 1F1B run's steady-state idle share per stage (stage, repeat, idle)."""
    frames = [
        exp.stage_table(plan, stored, key, timeline)[["stage", "idle"]].assign(repeat=key.repeat)
        for key, timeline in timelines.items()
        if key.schedule == "1f1b"
    ]
    return pd.concat(frames, ignore_index=True)


def stream_verdict(
    stages: pd.DataFrame, versions: pd.DataFrame, idle: pd.DataFrame | None = None, choices: list[str] | None = None
) -> verdict.Verdict:
    """fig3-3b: no stage idles in the steady state; each micro-batch's passes saw PipeDream's weight version.

    ``idle``: every 1F1B run's idle share per stage (``stream_idle``); without it, ``stages``' (one run).
    """
    runs = idle if idle is not None and len(idle) else stages[["stage", "idle"]].assign(repeat=0)
    per_stage = runs.groupby("stage")["idle"].median()
    count = int(runs["repeat"].nunique())
    worst = per_stage.idxmax()
    noise = verdict.noise_of(runs.set_index("stage")["idle"], axis="stage")
    idle_check = verdict.holds(
        "steady idle",
        verdict.within(per_stage.max(), IDLE_TOLERANCE),
        ", ".join(f"stage {int(s)}: {v:.0%}" for s, v in per_stage.items())
        + (f" (medians of {count} runs)" if count > 1 else ""),
        f"every stage idle <= {IDLE_TOLERANCE:.0%} of the steady state (the survey: no worker idles)",
        basis=Basis.EMULATED_TIME,
        runs=count,
        note="" if verdict.within(per_stage.max(), IDLE_TOLERANCE) else f"stage {int(worst)} waits most",
    )
    exact = versions["forward_version"].eq(versions["backward_version"]) & versions["forward_version"].eq(
        versions["expected"]
    )
    stash = verdict.holds(
        "weight stashing",
        bool(exact.all()) and len(versions) > 0,
        f"{int(exact.sum())} of {len(versions)} (stage, micro-batch) pairs saw max(0, g - (K - s) + 1) updates on "
        "both passes",
        "every backward uses the weights its forward used, PipeDream's version",
        basis=Basis.CORRECTNESS,
    )
    bounded = stages[stages["stage"] < len(stages)]
    held = verdict.holds(
        "versions held",
        bool((bounded["held_most"] <= bounded["held_bound"]).all()),
        ", ".join(f"stage {int(r.stage)}: {r.held_most}" for r in bounded.itertuples()),
        "stage s holds at most K - s + 1 micro-batches (s from 1)",
        basis=Basis.STRUCTURE,
        note="counted from the run's schedule",
    )
    return verdict.decide([idle_check, stash, held], fitted=[], predicted=["1F1B steady state"], noise=noise,
                          choices=choices or [])  # fmt: skip


def _choices(plan: exp.Plan) -> list[str]:
    """What the survey leaves open and the runs chose."""
    p = plan.params
    k = len(plan.cut.stages)
    return [
        f"the network: {plan.model_identity['name']}, cut by multiply-adds into {k} stages, one device each "
        f"({plan.profile.name})",
        f"mini-batch {p.batch_size}, SGD at {p.learning_rate}; GPipe flushes each mini-batch, 1F1B does not "
        f"(weight stashing, M={p.stream_micro_batches})",
        "the last stage runs forward, loss and backward in one pass",
        "the clock: each pass's CPU time x the calibrated speed factor, every activation and gradient over the "
        "device's link",
    ]


def reduction(plan: exp.Plan) -> str:
    """How the run is smaller than the full profile's (the survey gives no size)."""
    p, full = plan.params, exp.FULL_PROFILE
    parts = []
    if max(p.micro_batches) < max(full["micro_batches"]):
        parts.append(f"M = {sorted(set(p.micro_batches))} of {full['micro_batches']}")
    if p.steps < full["steps"]:
        parts.append(f"{p.steps} mini-batches per run of {full['steps']}")
    if p.repeats < full["repeats"]:
        parts.append(f"{p.repeats} run(s) of each of {full['repeats']}")
    return "; ".join(parts)


# --------------------------------------------------------------- render ----


def render_report(
    root: Path, plan: exp.Plan, stored: list[StoredRun], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """The notebook's items (``edgelab.papers.notebook.report``): ``render``."""
    return render(root, plan, stored, notebook=notebook, parameters=parameters)


def render(
    root: Path, plan: exp.Plan, stored: list[StoredRun], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """Write the four items and return their manifest entries."""
    k = len(plan.cut.stages)
    summary = exp.summarize(plan, stored)
    timelines = exp.timelines(plan, stored)
    curves = exp.losses(plan, stored)
    key, stream = _run(timelines, "1f1b")
    stages = exp.stage_table(plan, stored, key, stream)
    versions = exp.stash_semantics(stored, plan)
    common = {
        "data_source": data_source(plan.dataset.provenance()),
        "clock": CLOCK,
        "notebook": notebook,
        "parameters": parameters,
        "reduction": reduction(plan),
    }
    choices = _choices(plan)
    shown = summary.round(4)
    stage_lines = markdown_table(stages.round(3))
    cut = ", ".join(f"stage {i + 1}: {' '.join(s.layers)}" for i, s in enumerate(plan.cut.stages))
    setup = (
        f"{_model(plan)}, {plan.params.steps} mini-batches per run (the first a warm-up, left out), cut by "
        f"multiply-adds into {k} stages ({cut}) on {k} emulated {plan.profile.name} devices; SGD at "
        f"{plan.params.learning_rate}. Data: {plan.dataset.name} ({plan.dataset.source})."
    )
    items = []

    gpipe = gpipe_verdict(summary, k, choices)
    png = save_figure(draw_gpipe(plan, timelines, summary), "qiao/fig3-3a", root=root)
    md = [
        "# qiao/fig3-3a: GPipe, a mini-batch in micro-batches, fill then drain, one update",
        "",
        setup,
        "",
        markdown_table(shown[shown["schedule"] == "gpipe"]),
        "",
        "`bubble`: 1 - busy / (K x span) per mini-batch on the device clock, mean over mini-batches; `formula`: "
        "(K-1)/(M+K-1); `host_bubble`: the same on this machine's wall clock, where all devices share its cores. "
        "`max_weight_difference`: GPipe's trained weights against the unsplit model trained with plain SGD on the same "
        "mini-batches in one process.",
        "",
        gpipe.markdown(),
    ]
    files = [png, *save_table(shown[shown["schedule"] == "gpipe"], "\n".join(md) + "\n", "qiao/fig3-3a", root=root)]
    items.append(ReportItem.from_verdict("qiao/fig3-3a", files, gpipe, paper_values_shown=True, **common))

    formula = formula_verdict(summary, choices)
    gpipe_key, gpipe_timeline = _run(timelines, "gpipe", _gpipe_shown(plan))
    gpipe_stages = exp.stage_table(plan, stored, gpipe_key, gpipe_timeline)
    table = summary[summary["schedule"] == "gpipe"].groupby("micro_batches")[["formula", "bubble", "host_bubble"]]
    table = table.mean().reset_index().round(4)
    md = [
        "# qiao/eq-gpipe-bubble: (K - 1) / (M + K - 1) against the measured bubble",
        "",
        "Derived (GPipe's paper, not the survey): for K stages of equal time and M equal micro-batches with free "
        "communication, a stage idles (K-1) of every (M+K-1) slots. " + setup,
        "",
        markdown_table(table),
        "",
        "Where the two part, the formula's assumptions do not hold on the device: a pass has a fixed cost (a "
        "TensorFlow call, the worker's own work) that does not shrink with the micro-batch, so more micro-batches "
        "add time the formula does not count; the last stage runs forward, loss and backward in one pass, and the "
        "first stage also keeps the stem, so the stages are not equal; every activation and gradient crosses a link.",
        "",
        f"Per stage, GPipe at M={gpipe_key.micro_batches} (device milliseconds per pass, median):",
        "",
        markdown_table(gpipe_stages[["stage", "layers", "device", "forward_ms", "backward_ms"]].round(3)),
        "",
        formula.markdown(),
    ]
    files = [png, *save_table(table, "\n".join(md) + "\n", "qiao/eq-gpipe-bubble", root=root)]
    items.append(ReportItem.from_verdict("qiao/eq-gpipe-bubble", files, formula, paper_values_shown=True, **common))

    stream_check = stream_verdict(stages, versions, stream_idle(plan, stored, timelines), choices)
    png = save_figure(draw_1f1b(plan, timelines, curves), "qiao/fig3-3b", root=root)
    one_f = summary[summary["schedule"] == "1f1b"]
    same_m = summary[(summary["schedule"] == "gpipe") & (summary["micro_batches"] == key.micro_batches)]
    md = [
        "# qiao/fig3-3b: PipeDream's one-forward-one-backward with weight stashing",
        "",
        setup,
        "",
        f"Throughput on the device clock: 1F1B {one_f['images_per_s'].mean():.1f} images/s, GPipe at the same M "
        f"{same_m['images_per_s'].mean():.1f} images/s"
        f"{'' if len(same_m) else ' (not run at this M)'}. Per stage (steady-state idle share, most micro-batches "
        "held between their forward and backward, and the bytes their stashed weights take):",
        "",
        stage_lines,
        "",
        "Each micro-batch's forward and backward on stage s (from 1) saw max(0, g - (K - s) + 1) updates of that "
        "stage (g: the micro-batch's place in the stream): PipeDream's semantics, checked below pass by pass.",
        "",
        stream_check.markdown(),
    ]
    files = [png, *save_table(stages, "\n".join(md) + "\n", "qiao/fig3-3b", root=root)]
    items.append(ReportItem.from_verdict("qiao/fig3-3b", files, stream_check, paper_values_shown=True, **common))

    png = save_figure(draw_composite(plan, timelines, summary), "qiao/fig3-3", root=root)
    md = [
        "# qiao/fig3-3: pipeline parallelisms, GPipe and PipeDream",
        "",
        setup,
        "",
        f"The two panels are judged apart: qiao/fig3-3a {gpipe.status}, qiao/fig3-3b {stream_check.status}.",
        "",
        markdown_table(shown),
    ]
    files = [png, *save_table(shown, "\n".join(md) + "\n", "qiao/fig3-3", root=root)]
    why = f"composite of its panels, judged there: fig3-3a {gpipe.status}, fig3-3b {stream_check.status}"
    composite = verdict.decide([], fitted=[], predicted=[], noise=Noise.none("a composite of its panels"), reason=why,
                               reason_class="qualitative")  # fmt: skip
    items.append(ReportItem.from_verdict("qiao/fig3-3", files, composite, paper_values_shown=True, **common))
    return items

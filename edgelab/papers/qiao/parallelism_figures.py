"""The survey's Figures 3-1 and 3-2 drawn from real runs: data parallelism and model parallelism.

fig3-1: the workers and their shards as the run assigned them (rows and
labels per device), time per epoch and throughput against N, accuracy after
the same number of samples, the staleness of the asynchronous updates, and
the straggler sweep (qiao/C10). fig3-2: the layer-to-worker map of each real
split, a Gantt chart per K on the device's clock, utilisation against 1/K
(qiao/C6) and each worker's working set against the single worker's
(qiao/C28), with a model too big for one device's memory trained split
(C28's second test). The survey gives no values: each item is judged on its
claims. fig3-1's clock is the profile's device model, so its times are
modelled predictions (``MODELLED``), and the replayed schedule and the one
device's Sync-SGD = Async-SGD are correctness checks. fig3-2's "one worker
busy at a time" follows from the one batch in flight the run configured, and
the working sets are counted from the split: structural; only the measured
memory of the model too big for one device is a prediction (``HOST_MEASURE``,
one run: judged with three).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.common.results import StoredRun
from edgelab.models.costs import weight_count
from edgelab.papers.qiao import parallelism as exp
from edgelab.papers.qiao.pipeline_training_figures import gantt
from edgelab.report import verdict
from edgelab.report.manifest import ReportItem
from edgelab.report.style import data_source, markdown_table, save_figure, save_table
from edgelab.report.verdict import FLOAT32_TOLERANCE, ROUNDING_TOLERANCE, Basis, Noise

CLOCK_DATA = (
    "the profile's device model (emulation.device_model: a fixed cost per step plus FLOPs over the fitted rate) for "
    "every step; each pull and push at the link's latency plus the weights' bytes over its rate through the "
    "parameter server on the first device (emulation.timeline.compose for Sync-SGD, emulation.async_schedule for "
    "Async-SGD, whose updates the run applied in that order)"
)
CLOCK_MODEL = (
    "the device's clock (edgelab.emulation.training_clock): each pass's CPU time measured in its worker process times "
    "the calibration's speed factor, each activation and gradient at the link's latency plus its bytes over the "
    "link's rate"
)
#: The data-parallel clock: the device model, computed (no run-to-run noise).
MODELLED_CLOCK = Noise.none("the device model's clock: computed from steps and FLOPs, not timed")
#: One of the strategies per panel: fig3-1 compares two.
PAIR = 2
#: Measured over counted memory from which the page explains the gap.
MUCH_ABOVE_COUNTED = 1.5
#: A measured RSS rise this many times the counted working set, barely moving with K, is the runtime's own.
RUNTIME_RISE = 2
#: ... "barely moving": the largest K's rise at least this share of the single worker's.
FLAT_RISE = 0.8
_STRATEGY = {"ps_sync": "Sync-SGD (ps_sync)", "ps_async": "Async-SGD (ps_async)"}
_COLOUR = {"ps_sync": "C0", "ps_async": "C1"}


# ------------------------------------------------------------- fig3-1 ----


def draw_data(plan: exp.Plan, runs: pd.DataFrame, shards: pd.DataFrame, stale: pd.DataFrame,
              slow: pd.DataFrame) -> Any:  # fmt: skip
    """fig3-1: shards, epoch time, accuracy, staleness and the straggler sweep."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    n = int(shards["N"].max())
    mine = shards[shards["N"] == n].reset_index(drop=True)
    ax = axes[0, 0]
    bottom = pd.Series(0, index=mine.index)
    for c in range(10):
        ax.bar(mine["device"], mine[f"label_{c}"], bottom=bottom, color=f"C{c}", label=str(c), width=0.6)
        bottom += mine[f"label_{c}"]
    for i, row in mine.iterrows():
        ax.text(i, row["rows"] * 1.02, f"{row['rows']} rows\n{row['bytes'] / 1e6:.2f} MB", ha="center", fontsize=7)
    title = f"N={n}: disjoint shards, a full LeNet-MLP ({weight_count(exp.DATA_MODEL):,} weights) each"
    ax.set(ylabel="training rows (stacked by label)", ylim=(0, mine["rows"].max() * 1.3), title=title)
    ax.title.set_fontsize(9)
    ax.legend(title="label", ncol=5, fontsize=6, title_fontsize=7, loc="upper right")
    for strategy, rows in runs.groupby("strategy"):
        mean = rows.groupby("N").mean(numeric_only=True)
        style = {"color": _COLOUR[strategy], "label": _STRATEGY[strategy]}
        axes[0, 1].plot(mean.index, mean["epoch_s"], "-o", **style)
        axes[0, 2].plot(mean.index, mean["accuracy"], "-o", **style)
    samples = int(runs["samples"].iloc[0])
    axes[0, 1].set(xlabel="devices N", ylabel="time per epoch (s, device clock)", ylim=(0, None),
                   title=f"one epoch: {samples} samples shared out")  # fmt: skip
    axes[0, 2].set(xlabel="devices N", ylabel="test accuracy", ylim=(0, 1),
                   title=f"after the same {samples} training samples")  # fmt: skip
    for ax in axes[0, 1:]:
        ax.set_xticks(sorted(runs["N"].unique()))
        ax.legend(fontsize=8)
    ax = axes[1, 0]
    ns = sorted(stale["N"].unique())
    width = 0.8 / max(len(ns), 1)
    for j, n_devices in enumerate(ns):
        rows = stale[stale["N"] == n_devices]
        ax.bar(
            rows["staleness"] + (j - (len(ns) - 1) / 2) * width, rows["updates"], width=width, label=f"N={n_devices}"
        )
    ax.set(xlabel="staleness (updates applied between pull and push)", ylabel="updates",
           title="Async-SGD: staleness of each applied gradient")  # fmt: skip
    ax.legend(fontsize=8)
    ax = axes[1, 1]
    if "sync_epoch_s" in slow:
        ax.plot(slow["s"], slow["sync_epoch_s"], "-o", color=_COLOUR["ps_sync"], label="Sync-SGD epoch")
    if "async_epoch_s" in slow:
        ax.plot(slow["s"], slow["async_epoch_s"], "-o", color=_COLOUR["ps_async"],
                label="Async-SGD epoch (each shard once)")  # fmt: skip
    ax.set(xlabel="slow-down s of one device", ylabel="device seconds", ylim=(0, None),
           title=f"straggler: one of N={int(slow['N'].iloc[0])} devices s times slower")  # fmt: skip
    ax.legend(fontsize=8)
    ax = axes[1, 2]
    for column, strategy, label in (("sync_relative", "ps_sync", "Sync-SGD"),
                                    ("async_relative", "ps_async", "Async-SGD (devices keep training)")):  # fmt: skip
        if column in slow:
            ax.plot(slow["s"], slow[column], "-o", color=_COLOUR[strategy], label=label)
    k = int(slow["N"].iloc[0])
    ax.plot(slow["s"], 1 / slow["s"], ":", color="0.4", label="1/s (waits for the straggler)")
    ax.plot(slow["s"], (k - 1 + 1 / slow["s"]) / k, "--", color="0.4", label="(N-1+1/s)/N (loses only its share)")
    ax.set(xlabel="slow-down s of one device", ylabel="throughput / throughput at s=1", ylim=(0, 1.05),
           title="samples per second against s")  # fmt: skip
    ax.legend(fontsize=7)
    for ax in axes[1, 1:]:
        ax.set_xticks(list(slow["s"]))
    fig.suptitle(f"qiao/fig3-1: data parallelism, LeNet-MLP on MNIST, emulated {plan.profile.name} devices")
    fig.tight_layout()
    return fig


def data_verdict(
    runs: pd.DataFrame, slow: pd.DataFrame, same_single: bool | None, choices: list[str] | None = None
) -> verdict.Verdict:
    """qiao/C10: sync time grows with the straggler, async throughput falls less; updates arrive stale.

    The times are the device model's (``MODELLED``); the replay and the one device's Sync = Async are the
    implementation's correctness.
    """
    checks = []
    if "sync_epoch_s" in slow:
        series = slow.set_index("s")["sync_epoch_s"]
        checks.append(verdict.trend(series, +1, MODELLED_CLOCK, claim="Sync-SGD time per epoch against s (qiao/C10)",
                                    basis=Basis.MODELLED, axis="s"))  # fmt: skip
    if {"sync_relative", "async_relative"} <= set(slow.columns):
        last = slow.iloc[-1]
        checks.append(verdict.holds(
            "stragglers", bool(last["async_relative"] > last["sync_relative"]),
            f"at s={last['s']:g}: Async-SGD keeps {last['async_relative']:.0%} of its throughput, Sync-SGD "
            f"{last['sync_relative']:.0%}", "Async-SGD's throughput degrades less than Sync-SGD's (qiao/C10)",
            basis=Basis.MODELLED,
        ))  # fmt: skip
        replay = float(slow["replayed_s"].iloc[0])
        checks.append(verdict.holds(
            "replay is the run's schedule", verdict.within(replay, ROUNDING_TOLERANCE),
            f"replayed schedule vs the run's: largest gap {replay:.2e} s",
            f"<= {ROUNDING_TOLERANCE:g} s (the straggler replay starts from the schedule the run trained in)",
            basis=Basis.CORRECTNESS,
        ))  # fmt: skip
    stale = runs[(runs["strategy"] == "ps_async") & (runs["N"] > 1)]
    if len(stale):
        checks.append(verdict.holds(
            "stale gradients", bool((stale["staleness_max"] > 0).all()),
            ", ".join(f"N={n}: mean {r['average']:.2f}, max {int(r['most'])}"
                      + (f" ({int(r['runs'])} runs)" if r["runs"] > 1 else "")
                      for n, r in stale.groupby("N").agg(average=("staleness_mean", "mean"),
                                                         most=("staleness_max", "max"),
                                                         runs=("staleness_max", "size")).iterrows()),
            "Async-SGD applies gradients computed on weights others have updated since (qiao/C10)",
            basis=Basis.MODELLED, note="the order of the updates is the device model's schedule, which the run "
            "applied",
        ))  # fmt: skip
    if same_single is not None:
        checks.append(verdict.holds(
            "one device: Sync = Async", same_single, "N=1: Sync-SGD and Async-SGD final weights "
            + ("equal, bit for bit" if same_single else "differ"), "one device: both are the same SGD",
            basis=Basis.CORRECTNESS,
        ))  # fmt: skip
    predicted = [f"s={s:g}" for s in slow["s"]] if len(slow) else []
    return verdict.decide(checks, fitted=[], predicted=predicted, noise=MODELLED_CLOCK, choices=choices or [])


# ------------------------------------------------------------- fig3-2 ----


def draw_model(plan: exp.Plan, layers: pd.DataFrame, summary: pd.DataFrame, clocks: dict[Any, pd.DataFrame],
               oversized: pd.DataFrame) -> Any:  # fmt: skip
    """fig3-2: a Gantt chart per K (one batch after the warm-up), the layer map, utilisation and memory."""
    import matplotlib.pyplot as plt

    ks = [k for k in plan.stage_counts if k > 1]
    fig = plt.figure(figsize=(15, 2.2 * len(ks) + 4.5))
    grid = fig.add_gridspec(len(ks) + 2, 2, width_ratios=[1.6, 1])
    for row, k in enumerate(ks):
        clock = next(v for key, v in clocks.items() if key.n_stages == k and key.repeat == 0)
        step = clock[clock["step"] == 1]
        ax = fig.add_subplot(grid[row, 0])
        gantt(ax, step, origin=float(step["start"].min()))
        util = summary[summary["K"] == k]["utilisation"].mean()
        ax.set_title(f"K={k}: batch 2 of the run, utilisation {util:.0%} (1/K = {1 / k:.0%}); grey: each stage's "
                     "update", fontsize=9)  # fmt: skip
    ax = fig.add_subplot(grid[len(ks) :, 0])
    for y, (_, stages) in enumerate(layers.groupby("K")):
        left = 0.0
        total = float(stages["parameters"].sum())
        for s in stages.itertuples():
            width = s.parameters / total
            ax.barh(y, width, left=left, color=f"C{s.stage - 1}", edgecolor="white")
            text = f"{s.device}\n{s.layers}\n{s.parameters:,} w, out {s.output_bytes_per_image:,} B"
            ax.text(left + width / 2, y, text, ha="center", va="center", fontsize=6)
            left += width
    ax.set_yticks(range(layers["K"].nunique()), [f"K={k}" for k in sorted(layers["K"].unique())])
    ax.invert_yaxis()
    ax.set(xlabel="share of the network's weights; text: device, layers, weights, output bytes per image",
           title="layer-to-worker map of each real split (cut by multiply-adds)")  # fmt: skip
    ax.title.set_fontsize(9)
    mean = summary.groupby("K").mean(numeric_only=True)
    right = grid[:, 1].subgridspec(3 if len(oversized) else 2, 1)
    top = fig.add_subplot(right[0])
    top.plot(mean.index, mean["utilisation"], "-o", label="measured busy share per stage")
    top.plot(mean.index, mean["one_over_K"], "--s", color="black", label="1/K")
    top.plot(mean.index, mean["max_concurrency"], "-^", color="C3", label="most stages busy at once")
    top.set(xlabel="stages K", ylabel="share / count", ylim=(0, 2.2), title="qiao/C6: one worker busy at a time")
    top.legend(fontsize=8)
    bottom = fig.add_subplot(right[1])
    bottom.plot(
        mean.index, mean["peak_working_set_bytes"] / 1e6, "-o", label="largest working set of a worker (counted)"
    )
    bottom.plot(mean.index, mean["peak_working_set_bytes"].iloc[0] / 1e6 / mean.index, "--", color="black",
                label="single worker's / K")  # fmt: skip
    bottom.plot(mean.index, mean["rss_rise_max_bytes"] / 1e6, ":x", color="0.4", label="measured peak RSS rise")
    bottom.set(xlabel="stages K", ylabel="MB", ylim=(0, None), title="qiao/C28: memory per worker")
    bottom.legend(fontsize=7)
    for ax in (top, bottom):
        ax.set_xticks(list(mean.index))
    if len(oversized):
        _draw_oversized(fig.add_subplot(right[2]), plan, oversized)
    fig.suptitle(f"qiao/fig3-2: model parallelism (layer-wise split, one batch of {plan.params.pipeline_batch} in "
                 f"flight) on emulated {plan.profile.name} devices")  # fmt: skip
    fig.tight_layout()
    return fig


def _draw_oversized(ax: Any, plan: exp.Plan, oversized: pd.DataFrame) -> None:
    """qiao/C28's second test: each worker's measured peak against the device's training budget."""
    labels, heights, colours = [], [], []
    for row in oversized.itertuples():
        labels.append(f"K={row.K}\n{row.device}")
        heights.append((row.rss_rise_bytes or 0) / 2**20)
        colours.append("C2" if row.fits else "C3")
    ax.bar(range(len(labels)), heights, color=colours)
    ax.bar(range(len(labels)), oversized["counted_bytes"] / 2**20, width=0.3, color="0.3", label="counted")
    ax.axhline(plan.profile.training_budget_mb, color="black", linestyle="--",
               label=f"{plan.profile.name} training budget, {plan.profile.training_budget_mb} MiB")  # fmt: skip
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set(ylabel="MiB", title=f"qiao/C28: {_wide(plan)}, measured peak per worker (green: fits)")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)


def _wide(plan: exp.Plan) -> str:
    p = plan.params
    return f"MLP 784-{p.oversized_depth}x{p.oversized_width}-10"


def oversized_checks(plan: exp.Plan, oversized: pd.DataFrame) -> list[verdict.Check]:
    """qiao/C28's second test: too big for one device's budget, yet every worker of the split fits; same weights.

    The memory is measured (``HOST_MEASURE``: one run of each, as the workers measure a run's rise only once);
    the split training the single worker's weights is the pipeline's correctness.
    """
    rule = ("the single worker's measured peak exceeds the device's training budget, and every worker of the split "
            "stays within it")  # fmt: skip
    single, split = oversized[oversized["K"] == 1], oversized[oversized["K"] > 1]
    runs = 1 if len(single) else 0
    same = bool(split["same_weights"].all()) if len(split) else False
    diff = float(split["max_abs_diff"].max()) if len(split) else float("nan")
    weights = verdict.holds(
        "the split trains the same weights",
        same or verdict.within(diff, FLOAT32_TOLERANCE),
        f"weights {'bit for bit' if same else f'within {diff:.1e}'} of the single worker's",
        f"same digest, or every sampled weight within {FLOAT32_TOLERANCE:g}",
        basis=Basis.CORRECTNESS,
    )
    if single.empty or split.empty or oversized["rss_rise_bytes"].isna().any():
        missing = verdict.holds("too big for one device", None, "no peak measured (not Linux) or a run missing", rule,
                                basis=Basis.HOST_MEASURE, undecided="data missing")  # fmt: skip
        return [missing] if single.empty or split.empty else [missing, weights]
    mb = 2**20
    budget = plan.profile.training_budget_mb
    need = float(single["rss_rise_bytes"].max()) / mb
    most = float(split["rss_rise_bytes"].max()) / mb
    measured = (f"single worker {need:.0f} MiB, split K={int(split['K'].max())} at most {most:.0f} MiB, budget "
                f"{budget} MiB")  # fmt: skip
    if verdict.within(need, budget):
        fits = "the model fits one device here: nothing to show"
        memory = verdict.holds("too big for one device", None, measured, rule, basis=Basis.HOST_MEASURE, runs=runs,
                               note=fits, undecided="too small")  # fmt: skip
    else:
        memory = verdict.holds("too big for one device", verdict.within(most, budget), measured, rule,
                               basis=Basis.HOST_MEASURE, runs=runs)  # fmt: skip
    return [memory, weights]


def model_verdict(
    summary: pd.DataFrame, oversized: list[verdict.Check] | None = None, choices: list[str] | None = None
) -> verdict.Verdict:
    """qiao/C6: at most one stage busy, utilisation at most 1/K; qiao/C28: each worker holds less as K grows.

    One batch in flight, the run's own schedule, makes C6 hold whatever the times (``CONFIGURED``); the working
    sets are counted from the split (``STRUCTURE``); ``oversized`` are qiao/C28's second test's checks.
    """
    split = summary[summary["K"] > 1]
    by_k = split.groupby("K")
    noise = verdict.noise_of(split.set_index("K")["utilisation"], axis="K")
    most = by_k["max_concurrency"].max()
    util = by_k["utilisation"].max()
    over = util - 1 / util.index.to_series()
    schedule = "follows from the one batch in flight the run configured, not from the passes' times"
    checks = [
        replace(
            verdict.bound(most, list(most.index), upper=1, claim="at most one stage computes at any instant (qiao/C6)",
                          basis=Basis.CONFIGURED, axis="K", name="one stage at a time"),
            note=schedule,
        ),
        verdict.holds(
            "utilisation", bool(over.map(lambda x: verdict.within(x, ROUNDING_TOLERANCE)).all()),
            ", ".join(f"K={k}: {u:.1%} (1/K {1 / k:.1%})" for k, u in util.items()),
            "each stage busy at most 1/K of a batch's time (qiao/C6); below it by the link time",
            basis=Basis.CONFIGURED, note=schedule,
        ),
        replace(
            verdict.trend(summary.groupby("K")["working_set_vs_single"].max(), -1,
                          Noise.none("counted from the split's shapes"),
                          claim="largest working set of a worker against K (qiao/C28, counted from the split)",
                          basis=Basis.STRUCTURE, axis="K", name="working set per worker"),
            note="counted, not read from RSS",
        ),
    ]  # fmt: skip
    checks += oversized or []
    return verdict.decide(checks, fitted=[], predicted=[f"K={k}" for k in most.index], noise=noise,
                          choices=choices or [])  # fmt: skip


def _choices(plan: exp.Plan) -> list[str]:
    """What the survey leaves open and the runs chose."""
    p = plan.params
    return [
        f"the devices: {plan.profile.name}; data-parallel time from its device model, model-parallel time from "
        "measured CPU times x the calibrated speed factor",
        "the parameter server: on the first device (master_is_device)",
        "shards: disjoint, one per device (worker_data 'shard')",
        f"model parallelism: the four-block network cut by multiply-adds into K stages, one batch of "
        f"{p.pipeline_batch} in flight (an inter-layer split; qiao/P10)",
        f"the model too big for one device: {_wide(plan)}, the {plan.profile.name} profile's training budget",
    ]


def reduction(plan: exp.Plan) -> str:
    """How the run is smaller than the full profile's (the survey gives no size)."""
    p, d, full = plan.params, plan.dataset, exp.FULL_PROFILE
    parts = []
    if p.sample_limit is not None:
        parts.append(f"{d.n_train:,} training and {d.n_test:,} test images of all MNIST")
    if max(p.devices) < max(full["devices"]):
        parts.append(f"N = {list(p.devices)} of {full['devices']}")
    if p.pipeline_steps < full["pipeline_steps"]:
        parts.append(f"{p.pipeline_steps} mini-batches per split of {full['pipeline_steps']}")
    if max(p.slowdowns) < max(full["slowdowns"]):
        parts.append(f"slow-downs s = {list(p.slowdowns)} of {full['slowdowns']}")
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
    """Write both items and return their manifest entries."""
    common = {
        "data_source": data_source(plan.dataset.provenance()),
        "notebook": notebook,
        "parameters": parameters,
        "reduction": reduction(plan),
    }
    runs, shards, stale = exp.data_summary(plan, stored), exp.shards(plan, stored), exp.staleness(plan, stored)
    slow = exp.stragglers(plan, stored)
    single = {k.strategy: r.summary["weights_sha256"] for k, r in exp.data_runs(plan, stored).items()
              if k.devices == 1 and not k.repeat}  # fmt: skip
    same = single["ps_sync"] == single["ps_async"] if len(single) == PAIR else None
    data = data_verdict(runs, slow, same, _choices(plan))
    png = save_figure(draw_data(plan, runs, shards, stale, slow), "qiao/fig3-1", root=root)
    md = [
        "# qiao/fig3-1: data parallelism, Sync-SGD and Async-SGD on disjoint shards",
        "",
        f"LeNet-MLP on {plan.dataset.n_train} MNIST training images ({plan.dataset.source}), batch "
        f"{plan.params.batch_size} per device, SGD at {plan.params.learning_rate}, one epoch; test accuracy on "
        f"{plan.dataset.n_test} images. The parameter server runs on the first device. Shards as assigned "
        "(rows and labels per device):",
        "",
        markdown_table(shards),
        "",
        "Per strategy and N (device clock; accuracy after the same samples):",
        "",
        markdown_table(runs.round(4).astype(object)),
        "",
        "Staleness of the applied asynchronous updates:",
        "",
        markdown_table(stale),
        "",
        "Straggler sweep, the last device s times slower. Sync-SGD: the run's rounds composed again (exact: its "
        "weights do not depend on the clock). Async-SGD: its schedule simulated again; `async_epoch_s` is the epoch "
        "as run (each device through its own shard once, so it too ends with the straggler's last step), "
        "`async_samples_per_s` the rate of applied samples while the devices keep training (shards cycled), over "
        "the unslowed epoch's time, with its staleness. The slowed asynchronous runs were not trained again: their "
        "accuracy is not known.",
        "",
        markdown_table(slow.round(4).astype(object)),
        "",
        data.markdown(),
    ]
    files = [png, *save_table(runs, "\n".join(md) + "\n", "qiao/fig3-1", root=root)]
    items = [ReportItem.from_verdict("qiao/fig3-1", files, data, paper_values_shown=True, clock=CLOCK_DATA, **common)]

    layers, summary = exp.layer_map(plan), exp.model_summary(plan, stored)
    clocks = exp.model_timelines(plan, stored)
    oversized = exp.oversized_summary(plan, stored)
    model = model_verdict(summary, oversized_checks(plan, oversized) if len(oversized) else None, _choices(plan))
    png = save_figure(draw_model(plan, layers, summary, clocks, oversized), "qiao/fig3-2", root=root)
    md = [
        "# qiao/fig3-2: model parallelism, a layer-wise split with one batch in flight",
        "",
        f"The four-block network of qiao/fig3-3 ({FOUR}) cut by multiply-adds into K consecutive stages, one per "
        f"emulated {plan.profile.name} device, trained on {plan.params.pipeline_steps} MNIST batches of "
        f"{plan.params.pipeline_batch} (the first a warm-up, left out): each batch goes forward stage by stage, "
        "then backward, and each stage updates its own weights. K=1 is the single worker. The split is between "
        "layers (qiao/P10: the survey's l.221 describes splitting the same mini-batch across the input layer, an "
        "intra-layer split whose workers could compute at once; l.237's 'only one worker is working' holds for "
        "this one).",
        "",
        markdown_table(layers),
        "",
        "`working_set_bytes`: what the stage holds at the peak of its backward: its weights and their gradients, "
        "the kept input and every layer's output of the recomputed forward, for the one batch in flight (counted "
        "from the split).",
        "",
        markdown_table(summary.round(4).astype(object)),
        "",
        "`utilisation`: each batch's forward and backward passes' busy time over K x the batch's span; "
        "`max_concurrency`: most passes computing at the same instant; `_with_updates`: counting the updates, "
        "which a stage applies as soon as its backward is done, while the stage before it runs its own backward. "
        "`activation_bytes_per_batch` / `gradient_bytes_per_batch`: bytes sent forward / back between stages.",
        "",
        _rss_line(summary),
        "",
        *_oversized_lines(plan, oversized),
        "",
        model.markdown(),
    ]
    files = [png, *save_table(summary, "\n".join(md) + "\n", "qiao/fig3-2", root=root)]
    items.append(ReportItem.from_verdict("qiao/fig3-2", files, model, paper_values_shown=True, clock=CLOCK_MODEL,
                                         **common))  # fmt: skip
    return items


def _oversized_lines(plan: exp.Plan, oversized: pd.DataFrame) -> list[str]:
    """qiao/C28's second test in words and a table."""
    if oversized.empty:
        return ["No model larger than one device's memory was trained (`oversized_depth` 0): qiao/C28's second test "
                "is not shown."]  # fmt: skip
    p = plan.params
    weights = int(oversized[oversized["K"] == 1]["parameters"].sum())
    table = oversized.assign(
        counted_MiB=oversized["counted_bytes"] / 2**20, rss_rise_MiB=oversized["rss_rise_bytes"] / 2**20,
        budget_MiB=oversized["budget_bytes"] / 2**20,
    ).drop(columns=["counted_bytes", "rss_rise_bytes", "budget_bytes"])  # fmt: skip
    return [
        f"qiao/C28's second test, a model too big for one device: {_wide(plan)} ({weights:,} weights, "
        f"{4 * weights / 2**20:.0f} MiB as float32) trained on one batch of {p.pipeline_batch} on a single worker "
        f"and split into {p.oversized_stages} stages (the split first, on workers that never held the whole model). "
        f"The device's memory is the {plan.profile.name} profile's training budget, "
        f"{plan.profile.training_budget_mb} MiB ({plan.profile.memory_mb} MiB less {plan.profile.os_reserve_mb} MiB "
        f"for the OS and {plan.profile.framework_mb} MiB for the framework). This host has more, so the single "
        "worker's run is measured rather than refused: its peak is what a real device could not hold. "
        "`rss_rise_MiB` is a worker's peak resident memory above where the run found it (memory the process freed "
        "earlier and reuses is not seen); `counted_MiB` the stage's weights, gradients and one batch's activations. "
        f"{_measured_over_counted(oversized)}",
        "",
        markdown_table(table.round(6).astype(object)),
    ]


def _measured_over_counted(oversized: pd.DataFrame) -> str:
    """How far the measured peaks are above the counted working sets, and why, when they are."""
    ratio = (oversized["rss_rise_bytes"] / oversized["counted_bytes"]).dropna()
    if ratio.empty:
        return ""
    text = f"Measured over counted: {ratio.min():.1f}x to {ratio.max():.1f}x."
    if ratio.min() > MUCH_ABOVE_COUNTED:
        text += (" Besides the counted tensors a worker holds the weights as they arrived (the message) while it "
                 "builds the stage, and the runtime's working copies; by that count alone the model would look "
                 "smaller than it is on a device.")  # fmt: skip
    return text


def _rss_line(summary: pd.DataFrame) -> str:
    """What the measured peak RSS rise shows beside the counted working set."""
    rss = summary.groupby("K")["rss_rise_max_bytes"].median() / 1e6
    counted = summary.groupby("K")["peak_working_set_bytes"].max() / 1e6
    ratio = rss.iloc[-1] / rss.iloc[0]
    line = (
        f"Measured peak RSS rise of the busiest worker during a run: {rss.iloc[0]:.0f} MB for the single worker, "
        f"{rss.iloc[-1]:.0f} MB at K={rss.index[-1]} ({ratio:.0%}); counted working set {counted.iloc[0]:.1f} MB and "
        f"{counted.iloc[-1]:.1f} MB."
    )
    if rss.iloc[0] > RUNTIME_RISE * counted.iloc[0] and ratio > FLAT_RISE:
        line += (
            " The rise is several times the counted working set and barely moves with K, so it is not the split's "
            "tensors (by all appearances the eager runtime's own allocations): at this model's size the saving is "
            "counted, not seen in RSS."
        )
    return line


FOUR = "a 3x3 convolution stem, four 3x3 convolution blocks of 32 channels at 28x28, pooling, a linear classifier"

"""Park et al. 2020, Figures 6 and 7 (a-d): ResNet's CPU, memory and network against the device count.

Figure 6 is ResNet 32x32; Figure 7 overlays 110x64 on it. The paper gives
these panels' values only in its prose (``figure_values.csv``), so each panel
is judged on the values and bounds the prose states (``edgelab.report.verdict``).
Table 3 (the same resources for five configurations) is here too.
When 110x64 does not fit the device, Figure 7 shows its out-of-memory outcome
(measured and estimated need beside the paper's about 600 MB).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from edgelab.papers.park2020.resnet import ResnetSummary
from edgelab.papers.park2020.resnet_common import (
    NO_NOISE,
    PRIMARY,
    UNITS,
    Page,
    board_memory_mb,
    cell_rows,
    choices,
    finish,
    gate,
    level,
    named,
    networked,
    oom_note,
    out_of_memory,
    paper_values,
    select,
    series,
    time_clock,
    undecided,
)
from edgelab.papers.park2020.runs import CLOCK_LABEL
from edgelab.report import verdict as policy
from edgelab.report.manifest import ReportItem
from edgelab.report.reference import load_reference
from edgelab.report.verdict import Basis, Check, Noise, Verdict

TABLE3_CONFIGS = ("32x32", "32x64", "32x128", "80x32", "110x32")
#: The paper's device count of Table 3 (unstated; inferred 10, its largest).
PAPER_N = 10
#: Table 3's rows: the paper's metric -> (the column judged, the columns shown beside it).
TABLE3_METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cpu_utilization_pct": ("cpu_pct", ()),
    "memory_usage_mb": ("device_mb", ("host_device_mb", "measured_mb", "estimated_mb", "rss_mb_host")),
    "network_receive_kb": ("received_kb_s", ("received_kb_epoch",)),
    "network_send_kb": ("sent_kb_s", ("sent_kb_epoch",)),
}
_P15 = "P15: 32x64 and 32x128 are identical in every row of the paper (a copied column, likely)"

# panel -> (judged column, y label, columns shown beside it, the paper's metric)
_PANELS: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    "a": ("cpu_pct", "CPU utilisation (% of the device's 4 cores)", (), "cpu_utilization_pct"),
    "b": (
        "device_mb",
        "memory on the device (MB)",
        ("host_device_mb", "measured_mb", "rss_mb_host", "estimated_mb"),
        "memory_usage_mb",
    ),
    # Ganglia's bytes_out/bytes_in are rates, so the paper's "KB" is judged as KB/s; KB per epoch is shown.
    "c": ("sent_kb_s", "KB/s sent per device (mean)", ("sent_kb_epoch",), "network_send_kb"),
    "d": ("received_kb_s", "KB/s received per device (mean)", ("received_kb_epoch",), "network_receive_kb"),
}


def _c11_points() -> float:
    """The paper's bound on the CPU's spread across device counts: under 3 points (C11; fig6a's prose)."""
    return abs(paper_values("park2020/fig6a", "cpu_utilization_change_pct")[0])


def _one_core(summary: ResnetSummary) -> str:
    """Why the emulated CPU share cannot reach the paper's about 40 %."""
    return (
        f"the emulation charges a device's step to one core of its {summary.profile.cores} (one TensorFlow "
        f"thread): at most {100 / summary.profile.cores:.0f} %; the paper's about 40 % means MXNet used more"
    )


def _constructed(summary: ResnetSummary, ns: list[int]) -> list[int]:
    """Device counts whose CPU share is the one-core ceiling by construction (no exchange over a network)."""
    return [n for n in ns if n not in networked([n], summary.topology)]


def judge_fig6(panel: str, summary: ResnetSummary, dm: pd.DataFrame) -> Verdict:
    """A Figure 6 panel (ResNet 32x32 against N): the prose's level, bound or trend."""
    column, _, _, metric = _PANELS[panel]
    item, values = f"park2020/fig6{panel}", series(dm, "32x32", column)
    ns = list(values.index)
    predicted = ns
    if panel == "a":
        # One device with the server on it exchanges nothing: it reads the one-core ceiling, not a prediction.
        left = _constructed(summary, ns)
        predicted = [n for n in ns if n not in left]
        paper = pd.Series(paper_values(item, metric)[0], index=ns)
        points = _c11_points()
        rule = f"CPU differs by less than {points:g} points across device counts (C11)"
        cpu = level(paper, values, predicted, what="32x32 vs about 40 % in most cases", unit=" %")
        notes = [f"cause: {_one_core(summary)}"] if cpu.passed is False else []
        notes += [f"N={n} left out: it reads the one-core ceiling by construction (no exchange)" for n in left]
        if len(values) > 1:
            spread = float(values.max() - values.min())
            text = f"spread {spread:.1f} points over N={ns}"
            bound = policy.holds("bound", policy.within(spread, points), text, rule, basis=Basis.MODELLED)
        else:
            bound = undecided("bound", f"only N={ns} ran", rule, basis=Basis.MODELLED, reason="too small")
        checks = [replace(cpu, note="; ".join([cpu.note, *notes]).strip("; ")), bound]
        noise: Noise = NO_NOISE
    elif panel == "b":
        paper = pd.Series(
            {1: paper_values(item, metric, "1 device")[0], 10: paper_values(item, metric, "10 devices")[0]}
        )
        noise = NO_NOISE  # the board's memory model: deterministic
        claim = "memory (280 -> 250 MB) falls"
        cells = [n for n in paper.index if n in ns]
        what = "32x32 vs 280 / 250 MB"
        checks = [
            _memory_trend(values, claim),
            level(paper, values, cells, what=what, unit=" MB", each=True, basis=Basis.MODELLED, noise=noise),
        ]
    else:
        # "About 150 to 250 KB": the range widened by the level tolerance, as every "about" value is judged.
        low, high = sorted(paper_values(item, metric))
        low, high = low * (1 - policy.LEVEL_TOLERANCE), high * (1 + policy.LEVEL_TOLERANCE)
        claim = f"about 150-250 KB (read as KB/s, Ganglia's rate) at every networked N: {low:.1f}-{high:.1f} KB/s"
        cells = networked(ns, summary.topology)
        predicted = cells
        checks = [
            policy.bound(
                values,
                cells,
                lower=low,
                upper=high,
                claim=f"{claim}, +-{policy.LEVEL_TOLERANCE:.0%}",
                basis=Basis.MODELLED,
                unit=" KB/s",
            )
        ]
        noise = NO_NOISE
    return policy.decide(
        checks, fitted=[], predicted=[f"32x32 N={n}" for n in predicted], noise=noise, choices=choices(summary)
    )


def _memory_trend(values: pd.Series, claim: str) -> Check:
    """Memory against N, on the board's memory model: predicted where the model's need moves with N.

    Weights, their gradients and momentum, and a batch's kept activations do
    not depend on N; the image-record iterators' decoded images do, once a
    device's part of the record file fits in one chunk (the validation part
    from N = 3). Where no device count of the run moves it, the check says so
    as its cause.
    """
    if len(values) <= 1:
        return undecided("trend", f"only N={list(values.index)} ran", claim, basis=Basis.STRUCTURE, reason="too small")
    if values.nunique() > 1:
        return policy.trend(values, -1, NO_NOISE, claim=claim, basis=Basis.MODELLED)
    note = (
        "cause: at these device counts every part of the record files a device reads outgrows a chunk, so the "
        "board holds the same buffers at each N (P25)"
    )
    text = f"{values.iloc[0]:,.1f} MB at every N={list(values.index)}"
    return Check("trend", False, text, f"{claim} with N", note, basis=Basis.STRUCTURE)


def judge_fig7(panel: str, summary: ResnetSummary, dm: pd.DataFrame, oom: pd.DataFrame) -> Verdict:
    """A Figure 7 panel: 110x64 against the prose, and against 32x32 at the same N; its outcome if it did not train."""
    column, _, _, metric = _PANELS[panel]
    item, big, base = f"park2020/fig7{panel}", series(dm, "110x64", column), series(dm, "32x32", column)
    basis = Basis.MODELLED
    if big.empty:
        need = oom[oom["config"] == "110x64"]
        noise: Noise = NO_NOISE
        if need.empty:
            rule = "needs a trained 110x64 run"
            checks = [undecided("outcome", "110x64 not run", rule, basis=basis, reason="too small")]
        elif panel == "b":
            r, fw = need.iloc[0], summary.profile.framework_mb
            # Figure 7 gives no device count: Table 3's
            board = board_memory_mb(summary.profile, 110, 64, PAPER_N)
            text = (
                f"the board's memory model: 110x64 holds {board:,.0f} MB on the device "
                f"({board - fw:,.0f} MB above the framework) against the paper's about "
                f"{paper_values(item, metric)[0]:.0f} MB"
            )
            rule = f"the paper trained 110x64: its step fits the {r.budget_mb:,.0f} MB training budget"
            fits = policy.within(board - fw, float(r.budget_mb))
            note = f"the run here: {oom_note(r)}"
            base = board_memory_mb(summary.profile, 32, 32, PAPER_N)
            fold = paper_values(item, "memory_usage_ratio")[0]
            checks = [
                Check("fits in memory", fits, text, rule, note, basis=basis),
                level(
                    pd.Series({"110x64": paper_values(item, metric)[0]}),
                    pd.Series({"110x64": board}),
                    ["110x64"],
                    what="the board's 110x64 vs about 600 MB",
                    at="",
                    unit=" MB",
                ),
                level(
                    pd.Series({"110x64": fold}),
                    pd.Series({"110x64": board / base}),
                    ["110x64"],
                    what=f"the board's 110x64 / 32x32 vs about {fold:g}-fold",
                    at="",
                    unit="x",
                ),
            ]
        else:
            text, rule = "110x64 ran out of memory here", "needs a trained 110x64 run"
            why = "no run here can measure it: 110x64 does not fit the device (see fig7b)"
            checks = [undecided("outcome", text, rule, why, basis=basis, reason="qualitative")]
        return policy.decide(checks, fitted=[], predicted=["110x64"], noise=noise, choices=choices(summary))
    ns = list(big.index)
    shared = [n for n in ns if n in base.index]
    noise = NO_NOISE
    if panel == "a":
        points = _c11_points()
        claim = f"similar to 32x32: within {points:g} points at the same N"
        left = _constructed(summary, ns)
        predicted = [n for n in ns if n not in left]
        paper = pd.Series(paper_values(item, metric)[0], index=ns)
        cpu = level(paper, big, predicted, what="110x64 vs about 40 %", unit=" %")
        checks = [
            replace(cpu, note=f"cause: {_one_core(summary)}") if cpu.passed is False else cpu,
            policy.bound(
                (big[shared] - base[shared]).abs(), shared, upper=points, claim=claim, basis=basis, unit=" points"
            ),
        ]
    elif panel == "b":
        noise = NO_NOISE  # the board's memory model: deterministic
        ratio, fold = big[shared] / base[shared], paper_values(item, "memory_usage_ratio")[0]
        about = pd.Series(paper_values(item, metric)[0], index=ns)
        what = f"110x64 / 32x32 vs about {fold:g}-fold"
        checks = [
            level(about, big, ns, what="110x64 vs about 600 MB", unit=" MB", basis=basis, noise=noise),
            level(pd.Series(fold, index=shared), ratio, shared, what=what, unit="x", basis=basis, noise=noise),
        ]
    else:
        less = paper_values("park2020/fig7c", "network_send_change_kb")[0]  # "reduced by up to 100 KB"
        low = less * (1 + policy.LEVEL_TOLERANCE)  # "up to about 100 KB less", with the level tolerance
        claim = f"110x64 moves up to {-less:g} KB less than 32x32 (read as KB/s) at the same N: {low:.0f} to 0 KB/s"
        diff = big[shared] - base[shared]
        cells = networked(shared, summary.topology)
        checks = [policy.bound(diff, cells, lower=low, upper=0.0, claim=claim, basis=basis, unit=" KB/s")]
    predicted = [f"110x64 N={n}" for n in ns]
    return policy.decide(checks, fitted=[], predicted=predicted, noise=noise, choices=choices(summary))


def _sync_rows(summary: ResnetSummary, item_id: str, dm: pd.DataFrame) -> list[dict[str, Any]]:
    """P13: the paper's 72 synchronizations against the deterministic count per device per epoch."""
    (count,) = paper_values(item_id.replace("6d", "6c"), "number_of_synchronizations", "resnet")
    keys = [("32x32", n) for n in series(dm, "32x32", "paper_rounds").index]
    note = (count, "ResNet 32x32, device count unstated (P13); shown, not judged")
    return cell_rows(
        summary, item_id, keys, "paper_rounds", "synchronizations_per_device_per_epoch", dict.fromkeys(keys, note)
    )


def _plot_panel(
    ax: Any, item_id: str, summary: ResnetSummary, dm: pd.DataFrame, column: str, configs: list[str], paper: bool
) -> None:
    """Each configuration's values against N, with the paper's stated values when ``paper``."""
    for config in configs:
        values = series(dm, config, column)
        if not values.empty:
            what = "the board's memory model" if column == "device_mb" else "measured"
            ax.plot(values.index, values.to_numpy(), marker="o", label=f"{config}, {what}")
    fig6, panel = "fig6" in item_id, item_id[-1]
    if not paper:
        return
    metric = _PANELS[panel][3]
    if panel == "a":
        ax.axhline(paper_values(item_id, metric)[0], color="black", ls="--", label="paper: about 40 %")
        ax.axhline(100 / summary.profile.cores, color="grey", ls=":", label="one core of four (emulation's ceiling)")
    elif panel == "b" and fig6:
        ax.scatter(
            [1, 10],
            [paper_values(item_id, metric, f"{n} device")[0] for n in (1, 10)],
            color="black",
            marker="s",
            zorder=3,
            label="paper",
        )
    elif panel == "b":
        ax.axhline(paper_values(item_id, metric)[0], color="black", ls="--", label="paper 110x64: about 600 MB")
    elif fig6:
        low, high = sorted(paper_values(item_id, metric))
        ax.axhspan(low, high, color="black", alpha=0.1, label="paper: about 150-250 KB")


def _figure(item_id: str, summary: ResnetSummary, dm: pd.DataFrame, oom: pd.DataFrame, verdict: Verdict) -> Any:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panel = item_id[-1]
    column, ylabel, extra, _ = _PANELS[panel]
    configs = ["32x32"] if "fig6" in item_id else ["32x32", "110x64"]
    wide = panel in "cd"
    fig, axes = plt.subplots(1, 2 if wide else 1, figsize=(12 if wide else 7, 4), squeeze=False, layout="constrained")
    ax = axes[0][0]
    _plot_panel(ax, item_id, summary, dm, column, configs, True)
    if panel == "b":
        for config in configs:
            rss = series(dm, config, "rss_mb_host")
            if not rss.empty:
                ax.plot(rss.index, rss.to_numpy(), ls=":", marker=".", label=f"{config}, host RSS (TensorFlow, x86)")
        ax.axhline(summary.profile.usable_memory_mb, color="red", ls="-.", label="device memory left after the OS")
    need = oom[oom["config"] == "110x64"]
    if "fig7" in item_id and not need.empty:
        r, fw = need.iloc[0], summary.profile.framework_mb
        for need_mb, color, how in ((r.measured_mb, "red", "measured"), (r.estimated_mb, "orange", "estimated")):
            if panel == "b":
                ax.axhline(need_mb + fw, color=color, ls="--", label=f"110x64 need, {how}: {need_mb + fw:,.0f} MB")
        text = f"110x64: OUT OF MEMORY\nneeds {r.measured_mb:,.0f} MB (estimated {r.estimated_mb:,.0f})"
        if getattr(r, "decided_by", "host") == "board":
            text = f"110x64: OUT OF MEMORY\nthe board needs {r.deciding_mb:,.0f} MB (this host {r.measured_mb:,.0f})"
        ax.text(
            0.5,
            0.25,
            f"{text}\nabove the framework;\nbudget {r.budget_mb:,.0f} MB",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=8,
            bbox={"facecolor": "white", "edgecolor": "red"},
        )
    ax.set(xlabel="devices", ylabel=ylabel)
    if panel in "cd":
        _plot_panel(axes[0][1], item_id, summary, dm, extra[0], configs, False)
        axes[0][1].set(xlabel="devices", ylabel=f"KB per device per projected epoch ({extra[0].split('_')[0]})")
        # P13: each point's synchronizations per device per epoch, against the paper's 72 (device count unstated).
        for r in dm[dm["config"] == "32x32"].itertuples():
            axes[0][1].annotate(f"{r.paper_rounds} syncs", (r.devices, getattr(r, extra[0])), fontsize=7)
        if "fig6" in item_id:
            axes[0][1].set_title("paper: 72 synchronizations, device count unstated (P13)", fontsize=8)
    axes[0][-1].legend(*ax.get_legend_handles_labels(), fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    for a in axes[0]:
        a.xaxis.set_major_locator(MaxNLocator(integer=True))  # device counts
    fig.suptitle(f"{item_id} ({verdict.status})", fontsize=11)
    return fig


def hardware_figures(summary: ResnetSummary, root: Path | None, common: dict[str, Any]) -> list[ReportItem]:
    """Render fig6a-d (ResNet 32x32) and fig7a-d (110x64 over 32x32), each with its verdict."""
    dm, oom = select(summary), out_of_memory(summary)
    items = []
    for fig6, panel in ((f, p) for f in (True, False) for p in "abcd"):
        item_id = f"park2020/fig{6 if fig6 else 7}{panel}"
        column, _, extra, metric = _PANELS[panel]
        configs = ["32x32"] if fig6 else ["32x32", "110x64"]
        verdict = judge_fig6(panel, summary, dm) if fig6 else judge_fig7(panel, summary, dm, oom)
        keys = [(c, n) for c in configs for n in sorted(set(dm["devices"]) | set(oom["devices"]))]
        paper = _paper_cells(item_id, keys)
        keys += sorted(k for k in paper if k not in keys)  # the paper's cells that did not run, shown as "not run"
        rows = cell_rows(summary, item_id, keys, column, metric, paper)
        for other in extra:
            rows += cell_rows(summary, item_id, keys, other, other)
        if fig6 and panel in "cd":
            rows += _sync_rows(summary, item_id, dm)
        body = _notes(item_id, summary)
        clock = (
            "memory has no clock: this host's measured working set plus the profile's framework footprint"
            if panel == "b"
            else f"{CLOCK_LABEL[PRIMARY]}: {summary.device_model.describe()}"
        )
        fig = _figure(item_id, summary, dm, oom, verdict)
        title = "ResNet 32x32" if fig6 else "ResNet 110x64 over 32x32"
        table = pd.DataFrame(rows)
        page = Page(item_id, f"{title}, {metric}", fig, table, body)
        items.append(finish(summary, page, verdict, clock=clock, root=root, common=common))
    return items


def _paper_cells(item_id: str, keys: list[tuple[str, Any]]) -> dict[tuple[str, Any], tuple[float, str]]:
    """The paper's value placed on each (config, N) cell it speaks of."""
    panel, metric = item_id[-1], _PANELS[item_id[-1]][3]
    if "fig6" in item_id and panel == "b":
        return {("32x32", n): (paper_values(item_id, metric, f"{n} device")[0], f"{n} device(s)") for n in (1, 10)}
    if "fig6" in item_id and panel in "cd":
        low, high = sorted(paper_values(item_id, metric))
        return {k: (np.nan, f"{low:.0f}-{high:.0f} KB over device counts") for k in keys if k[0] == "32x32"}
    if panel == "a":
        return {k: (paper_values(item_id, metric)[0], "about, most device counts") for k in keys}
    if panel == "b":
        return {k: (paper_values(item_id, metric)[0], "about; 2.5-fold 32x32") for k in keys if k[0] == "110x64"}
    return {k: (np.nan, "up to 100 KB less than 32x32") for k in keys if k[0] == "110x64"}


def _notes(item_id: str, summary: ResnetSummary) -> list[str]:
    """What a reader needs to read a panel's comparison."""
    panel, p = item_id[-1], summary.profile
    if panel == "a":
        return [
            f"The emulation charges a device's step to one core (one TensorFlow thread): at most {100 / p.cores:.0f} "
            "% of 4 cores. The paper's about 40 % implies MXNet used more than one core. P24: the paper's "
            "'decreases by 3 %' sentence is garbled; C11's spread under 3 points is judged."
        ]
    if panel == "b":
        return [
            f"Judged: memory on the device by the board's memory model = the profile's framework footprint "
            f"({p.framework_mb} MB, assumed) + weights, gradients and momentum + the tensors a batch's backward "
            "pass needs (edgelab.emulation.memory_model; CIFAR streamed, so it does not depend on N). This host's "
            "measured working set + the framework, its RSS (TensorFlow, with the data it holds) and the analytic "
            "estimate are shown beside it. P25: the paper's fall "
            "with N (and LeNet's rise) is unexplained; a smaller resident shard per device could explain it. "
            "P27: '2.5-fold to 600 MB' is 2.37x 253.6 MB or 2.14x 280 MB."
        ]
    lines = [
        "Traffic is shown as the mean KB/s (Ganglia's meaning; judged) and as KB per device per projected "
        "epoch (beside). P16: the paper's unit is undefined."
    ]
    if "fig6" in item_id:
        lines.append(
            "P13: the paper's 72 synchronizations (ResNet 32x32) and 9 (LeNet) come without device count or "
            "unit; the rows 'synchronizations_per_device_per_epoch' give ceil(shard / batch) per N "
            "beside 72 (shown, not judged)."
        )
    else:
        lines.append(
            "P27: 'up to 100 KB less' compares with Table 3's 124-126 KB drop for 32x32 -> 32x64. "
            "ResNet-110 moves 3.7x the bytes per synchronization of ResNet-32, so KB/s and KB per "
            "epoch can differ in sign."
        )
    return lines


# ---------------------------------------------------------------- table3 ----


def table3(summary: ResnetSummary, root: Path | None, common: dict[str, Any]) -> ReportItem:
    """Render Table 3: five configurations at the largest device count run, beside the paper's columns."""
    import matplotlib.pyplot as plt

    dm, ref = select(summary), load_reference("park2020/table3")
    n_star = int(dm["devices"].max()) if not dm.empty else 1
    rows_at = dm[dm["devices"] == n_star]
    at = rows_at.set_index("config")
    keys = [(c, n_star) for c in TABLE3_CONFIGS]
    rows, checks = [], []
    why_n = f"the paper's device count is unstated (inferred 10); N={n_star} here: CPU and traffic depend on N"
    for metric, (column, extra) in TABLE3_METRICS.items():
        paper = ref[ref["metric"] == metric].set_index("config")["value"].astype(float)
        notes = {
            c: _P15 + ("; left out of the checks" if c == "32x128" else "") if c in ("32x64", "32x128") else ""
            for c in TABLE3_CONFIGS
        }
        rows += cell_rows(
            summary, "park2020/table3", keys, column, metric, {k: (paper[k[0]], notes[k[0]]) for k in keys}
        )
        for other in extra:
            rows += cell_rows(summary, "park2020/table3", keys, other, other)
        measured = at[column].astype(float) if column in at else pd.Series(dtype=float)
        cells = [c for c in TABLE3_CONFIGS if c in measured.index and c != "32x128"]
        what, unit = f"{metric} at N={n_star}", f" {UNITS[column]}"
        if metric == "memory_usage_mb":  # the board's memory model: deterministic, and the same at every N
            check = level(paper, measured, cells, what=what, at="", unit=unit, basis=Basis.MODELLED, noise=NO_NOISE)
        else:
            check = gate(level(paper, measured, cells, what=what, at="", unit=unit), n_star == PAPER_N, why_n)
        if metric.startswith("network") and not networked([n_star], summary.topology):
            check = gate(check, False, f"N={n_star}: no exchange crosses the network")
        checks.append(check)
    for what, path in (
        ("batch, 32 layers", ["32x32", "32x64", "32x128"]),
        ("depth, batch 32", ["32x32", "80x32", "110x32"]),
    ):
        got = at["device_mb"].reindex([c for c in path if c in at.index]).astype(float) if "device_mb" in at else []
        claim = f"memory grows with {what} (the board's memory model)"
        effect = policy.effect(pd.Series(got, dtype=float), +1, NO_NOISE, claim=claim, basis=Basis.MODELLED)
        checks.append(named(effect, what, at=""))
    predicted = [f"{c} N={n_star}" for c in TABLE3_CONFIGS if c in at.index]
    verdict = policy.decide(checks, fitted=[], predicted=predicted, noise=NO_NOISE, choices=choices(summary))
    table = pd.DataFrame(rows)
    body = [
        f"Measured at N={n_star}, the largest device count run (the paper's is unstated; inferred 10). {_P15}. "
        "Traffic: judged as the mean KB/s (Ganglia's rate); KB per device per epoch beside it. Memory: judged as "
        "the board's memory model (framework footprint + weights, gradients and momentum + the tensors a batch's "
        "backward pass needs; CIFAR streamed); the framework footprint + this host's measured working set, the "
        "analytic estimate and this host's RSS beside it. P20: the conclusion's '+100 MB' matches none of the "
        "table's differences.",
        "",
        "| metric (measured / paper) | " + " | ".join(TABLE3_CONFIGS) + " |",
        "|---|" + "---|" * len(TABLE3_CONFIGS),
    ]
    for metric, group in table.groupby("metric", sort=False):
        cells = [
            (f"{r.measured:,.1f}" if r.outcome == "trained" else r.outcome.replace("_", " "))
            + ("" if pd.isna(r.paper) else f" / {r.paper:,.1f}")
            for r in group.itertuples()
        ]
        body.append(f"| {metric} ({group['unit'].iloc[0]}) | " + " | ".join(cells) + " |")
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.8))
    for ax, (metric, (column, _)) in zip(axes, TABLE3_METRICS.items(), strict=True):
        part = table[table["metric"] == metric]
        pos = np.arange(len(part))
        ax.bar(pos - 0.2, part["measured"].to_numpy(float), 0.4, label=f"measured, N={n_star}")
        ax.bar(pos + 0.2, part["paper"].to_numpy(float), 0.4, color="black", alpha=0.6, label="paper")
        for i in np.flatnonzero(part["outcome"].to_numpy() != "trained"):
            ax.text(pos[i] - 0.2, 0, part["outcome"].iloc[i].replace("_", " "), rotation=90, fontsize=7, va="bottom")
        ax.set_xticks(pos, part["config"], rotation=45)
        ax.set_title(f"{metric} ({UNITS[column]})", fontsize=9)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"park2020/table3 — hardware by configuration ({verdict.status})")
    return finish(
        summary,
        Page("park2020/table3", "hardware resources by layers and batch size", fig, table, body),
        verdict,
        clock=time_clock(summary),
        root=root,
        common=common,
    )

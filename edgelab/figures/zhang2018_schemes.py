"""Zhang 2018's Figure 3 and its equations: completion time of the four schemes against the number of end devices.

Left: this job's runs on the hierarchy's clock (markers) beside eq1-eq6 for
the same job (dashed). Right: eq1-eq6 at the report's job (200 tasks of 50
images) on the same calibration, with no run behind them. The figure prints
no values in the report, so it is not judged; its claims (C15-C21, C23) are
checked on the runs and listed with the figure. Each equation gets its own
item: its prediction beside the clock's completion time per number of end
devices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.experiments import zhang2018_schemes as exp
from edgelab.figures.style import data_source, markdown_table, save_figure, save_table
from edgelab.report import ReportItem

ID = "zhang2018/fig3"
EQUATIONS = {
    "zhang2018/eq1": ("End", "T_End = N_t / N_end x (t_end^c + t_end^p)"),
    "zhang2018/eq2": ("End-Cloud", "T_End-Cloud = T_End + N_t / N_cloud x (t_cloud^c + t_cloud^p)"),
    "zhang2018/eq3": ("End-Edge", "T_End-Edge = T_End + N_t / N_edge x (t_edge^c + t_edge^p)"),
    "zhang2018/eq6": ("Mapping", "T_Mapping = theta_cloud x T_End-Cloud + (1 - theta_cloud) x T_End-Edge"),
}
CLOCK = (
    "the hierarchy's clock (edgelab.tier_clock): each stage's images at zhang2018/table1's stand-alone time per "
    "image of its network on its tier, plus the upper tier's latency and the task's bytes at its bandwidth, "
    "in the order the run's stages went"
)
COLOURS = {"End": "C0", "End-Cloud": "C3", "End-Edge": "C2", "Mapping": "C1"}


def curves(summary: pd.DataFrame) -> pd.DataFrame:
    """Median over repeats per scheme, mapping and number of end devices."""
    keys = ["scheme", "mapping", "n_map", "n_end"]
    table = summary.groupby(keys, as_index=False)[["clock_s", "equations_s", "host_wall_s", "on_cloud", "on_edge"]]
    # The stage counts are the same in every repeat (the routing is the scheme's): whole numbers.
    return table.median().astype({"on_cloud": int, "on_edge": int})


def _label(scheme: str, mapping: str) -> str:
    return scheme if scheme != "Mapping" else f"Mapping (N_map {'= 1' if mapping == 'paper' else 'by eq4'})"


def draw(table: pd.DataFrame, report: pd.DataFrame, plan: exp.Plan) -> Any:
    """The two panels: this job (runs and equations) and the report's job (equations only)."""
    import matplotlib.pyplot as plt

    p = plan.params
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4))
    for (scheme, mapping), group in table.groupby(["scheme", "mapping"], sort=False):
        style = "--" if mapping == "eq4" else "-"
        colour = COLOURS[scheme]
        left.plot(group["n_end"], group["clock_s"], style, marker="o", color=colour, label=_label(scheme, mapping))
        left.plot(group["n_end"], group["equations_s"], ":", color=colour, alpha=0.7)
    left.set(
        title=f"this job: {p.tasks} tasks of {p.task_size} images, clock on real runs\n(dotted: eq1-eq6 for it)",
        xlabel="end devices",
        ylabel="completion time (s)",
    )
    left.legend(fontsize=7)
    for (scheme, mapping), group in report.groupby(["scheme", "mapping"], sort=False):
        style = "--" if mapping == "eq4" else "-"
        right.plot(
            group["n_end"],
            group["equations_s"],
            style,
            marker=".",
            color=COLOURS[scheme],
            label=_label(scheme, mapping),
        )
    right.set(
        title=f"the report's job: {exp.REPORT_TASKS} tasks of {exp.REPORT_TASK_SIZE} images\n"
        "eq1-eq6 on Table 1's times, no run",
        xlabel="end devices",
        ylabel="completion time (s)",
    )
    right.legend(fontsize=7)
    fig.suptitle(
        f"zhang2018/fig3: completion time against end devices ({p.edge_devices} edges, "
        f"{p.cloud_devices} cloud; latency {p.edge_latency_s} s / {p.cloud_latency_s} s)"
    )
    fig.tight_layout()
    return fig


def claims(table: pd.DataFrame, report: pd.DataFrame, plan: exp.Plan, value: str = "clock_s") -> pd.DataFrame:
    """The report's claims about Figure 3 and eq4-eq6, each checked on ``table``'s ``value`` (default: the clock)."""
    p = plan.params
    paper = table[table["mapping"].isin(["-", "paper"])]
    t = paper.pivot_table(index="n_end", columns="scheme", values=value)
    n = list(t.index)
    lo, hi = n[0], n[-1]
    speedup = {s: float(t.loc[lo, s] / t.loc[hi, s]) for s in t.columns}
    rows = []

    def add(claim: str, text: str, seen: str, holds: bool | None) -> None:
        verdict = "not tested" if holds is None else ("holds" if holds else "does not hold")
        rows.append({"claim": claim, "report says": text, "seen here": seen, "verdict": verdict})

    rate = ", ".join(f"{s} {v:.2f}x" for s, v in speedup.items())
    if {"End-Cloud", "End-Edge", "End"} <= set(t.columns):
        add(
            "zhang2018/C15",
            "End-Cloud scales poorly: the cloud's delay is the bottleneck",
            f"speed-up from {lo} to {hi} end devices: {rate} (poorly: under a quarter of {hi / lo:.0f}x)",
            speedup["End-Cloud"] < hi / lo / 4,
        )
    add(
        "zhang2018/C16",
        "End scales poorly at many end devices: assigning tasks is the bottleneck",
        "the clock charges no assignment cost (eq1 neither); the host's wall time is a laptop's, not the report's",
        None,
    )
    if {"End-Cloud", "End-Edge", "Mapping", "End"} <= set(t.columns):
        better = min(t.loc[hi, "End-Edge"], t.loc[hi, "Mapping"]) < t.loc[hi, "End-Cloud"]
        add(
            "zhang2018/C17",
            "End-Edge and Mapping scale better than End-Cloud (and End)",
            f"at {hi} end devices: End-Edge {t.loc[hi, 'End-Edge']:.2f} s, Mapping {t.loc[hi, 'Mapping']:.2f} s, "
            f"End-Cloud {t.loc[hi, 'End-Cloud']:.2f} s, End {t.loc[hi, 'End']:.2f} s; speed-ups {rate}",
            bool(better and speedup["End-Edge"] > speedup["End-Cloud"]),
        )
    if {"End-Edge", "End"} <= set(t.columns):
        gap = t["End-Edge"] - t["End"]
        add(
            "zhang2018/C18",
            "End-Edge's time approaches End's as end devices are added",
            f"End-Edge minus End: {gap.loc[lo]:.2f} s at {lo}, {gap.loc[hi]:.2f} s at {hi} end devices",
            bool(gap.loc[hi] < gap.loc[lo]),
        )
    if {"End-Edge", "Mapping"} <= set(t.columns):
        few = [k for k in n if k <= p.edge_devices]
        many = [k for k in n if k > p.edge_devices]
        diff = (t.loc[few, "Mapping"] - t.loc[few, "End-Edge"]).abs() / t.loc[few, "End-Edge"]
        why = (
            f"; with N_map = 1 each end device feeds one edge, so {few[0]} end device(s) keep only as many edges "
            f"busy while End-Edge deals tasks to all {p.edge_devices} (and eq6, through eq3, assumes all "
            f"{p.edge_devices})"
        )
        add(
            "zhang2018/C19",
            f"with N_map = 1, Mapping differs only slightly from End-Edge for 1-{p.edge_devices} end devices",
            f"largest relative difference for {few[0]}-{few[-1]}: {diff.max():.1%}"
            + (why if diff.max() >= 0.05 else ""),
            bool(diff.max() < 0.05),
        )
        if many:
            extra = t.loc[many, "Mapping"] - t.loc[many, "End-Edge"]
            add(
                "zhang2018/C20",
                f"beyond {p.edge_devices} end devices the cloud limits Mapping",
                "Mapping minus End-Edge: " + ", ".join(f"{v:.2f} s at {k}" for k, v in extra.items()),
                bool((extra > 0).all()),
            )
    if {"End-Edge", "Mapping", "End-Cloud"} <= set(t.columns):
        between = (t["Mapping"] >= t["End-Edge"] - 1e-9) & (t["Mapping"] <= t["End-Cloud"] + 1e-9)
        add(
            "zhang2018/C21",
            "T_Mapping lies between T_End-Edge and T_End-Cloud",
            f"between at {int(between.sum())} of {len(between)} device counts",
            bool(between.all()),
        )
    eq4 = report[report["mapping"] == "eq4"]
    if len(eq4):
        n_map = sorted({int(v) for v in eq4["n_map"]})
        add(
            "zhang2018/C23",
            "N_map = 1 for the evaluation system",
            f"eq4 on Table 1's times plus the 0.5 s edge latency, tasks of {exp.REPORT_TASK_SIZE}: N_map = "
            f"{', '.join(map(str, n_map))} (the catalog's P-Nmap: 2 from Table 2's times); "
            f"for this job's tasks of {p.task_size}: "
            f"{', '.join(str(plan.n_map(exp.SchemeRunKey('Mapping', k, 'eq4', 0))) for k in n[:1])}",
            n_map == [1],
        )
    return pd.DataFrame(rows)


def render(
    root: Path, plan: exp.Plan, summary: pd.DataFrame, *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """Write Figure 3, its claims and the equations' items; return their manifest entries."""
    p = plan.params
    table = curves(summary)
    report = exp.report_job(plan)
    checked = claims(table, report, plan)
    on_report = claims(report, report, plan, value="equations_s").set_index("claim")
    checked["report's job, by the equations"] = [on_report["verdict"].get(c, "-") for c in checked["claim"]]
    data = plan.dataset.provenance()
    source = data_source(data)
    standin = "stand-in" in str(data.get("source")) or "standin" in str(data.get("source"))
    data_note = (
        " The images are the offline stand-in for CIFAR-100 (CIFAR-10 test images): the networks answer "
        "them all the same, and time does not depend on which images they are."
        if standin
        else ""
    )
    png = save_figure(draw(table, report, plan), ID, root=root)
    shown = table.assign(
        clock_s=table["clock_s"].round(3),
        equations_s=table["equations_s"].round(3),
        host_wall_s=table["host_wall_s"].round(2),
    )
    md = [
        f"# {ID}: completion time of the four schemes against the number of end devices",
        "",
        f"Each run: {p.tasks} tasks of {p.task_size} images (the report: {exp.REPORT_TASKS} of "
        f"{exp.REPORT_TASK_SIZE}) through the networks ({' / '.join(p.networks.values())}, end / edge / cloud) "
        f"on {p.edge_devices} edge devices and {p.cloud_devices} cloud, medians of "
        f"{p.repeats} repeat(s). `clock_s` is the hierarchy's clock on the run's stages; `equations_s` is "
        "eq1-eq6 for the same job; `host_wall_s` is this machine's wall time, which emulates thirteen devices "
        f"on its own cores and is no device's time.{data_note}",
        "",
        markdown_table(shown),
        "",
        "The report prints no values for this figure, so it is not judged. Its claims, checked on these runs "
        "(and, last column, on the equations at the report's job):",
        "",
        markdown_table(checked),
        "",
        "Where the clock and the equations part: eq2, eq3 and eq6 add the upper stage after the end stage; "
        "on the clock an upper device starts on the first task while the end devices work on later ones, so "
        "runs that send second stages finish earlier than their equation. End matches eq1 when the tasks "
        "divide evenly over the end devices. The encryption module, on in the report's runs, is not in these.",
        "",
        "The equations at the report's job (no run behind them):",
        "",
        markdown_table(report.assign(equations_s=report["equations_s"].round(2))),
    ]
    files = [png, *save_table(shown, "\n".join(md) + "\n", ID, root=root)]
    items = [
        ReportItem(
            ID,
            [str(f) for f in files],
            data_source=source,
            clock=CLOCK,
            paper_values_shown=True,
            status="not judged",
            why="the report prints no values for Figure 3; its claims are checked on the runs: "
            + "; ".join(f"{r['claim']} {r['verdict']}" for r in checked.to_dict("records")),
            notebook=notebook,
            parameters=parameters,
        )
    ]
    for item_id, (scheme, formula) in EQUATIONS.items():
        rows = table[(table["scheme"] == scheme) & (table["mapping"].isin(["-", "paper"]))]
        if rows.empty:
            continue
        eq = rows[["n_end", "clock_s", "equations_s"]].assign(
            ratio=(rows["clock_s"] / rows["equations_s"]).round(3),
            clock_s=rows["clock_s"].round(3),
            equations_s=rows["equations_s"].round(3),
        )
        text = [
            f"# {item_id}: {formula}",
            "",
            f"{scheme} on this job ({p.tasks} tasks of {p.task_size} images): the equation's prediction beside "
            "the clock's completion time of the real runs. The report plugs in no values.",
            "",
            markdown_table(eq),
        ]
        eq_files = save_table(eq, "\n".join(text) + "\n", item_id, root=root)
        items.append(
            ReportItem(
                item_id,
                [str(f) for f in eq_files],
                data_source=source,
                clock=CLOCK,
                paper_values_shown=True,
                status="not judged",
                why="the report plugs no values into the equation; its prediction stands beside the runs' clock "
                f"(clock / equation {eq['ratio'].min():.2f}-{eq['ratio'].max():.2f})",
                notebook=notebook,
                parameters=parameters,
            )
        )
    items += _mapping_items(table, report, plan, source, root=root, notebook=notebook, parameters=parameters)
    return items


def _mapping_items(
    table: pd.DataFrame, report: pd.DataFrame, plan: exp.Plan, source: dict[str, Any], **entry: Any
) -> list[ReportItem]:
    """eq4 (end devices per edge) against the report's N_map = 1, and eq5 (the cloud's share) against the runs."""
    p = plan.params
    mapping = table[(table["scheme"] == "Mapping") & (table["mapping"] == "paper")]
    if mapping.empty:
        return []
    eq4 = report[report["mapping"] == "eq4"][["n_end", "n_map"]].drop_duplicates()
    n_map_report = sorted({int(v) for v in eq4["n_map"]})
    n_map_job = sorted({int(v) for v in table.loc[table["mapping"] == "eq4", "n_map"]})
    h = plan.analytic(max(p.end_devices), exp.REPORT_TASK_SIZE)
    text4 = [
        "# zhang2018/eq4: N_map = ceil((t_edge^c + t_edge^p) / (t_end^c + t_end^p))",
        "",
        f'The report sets N_map = 1 "according to the evaluation system setup". On Table 1\'s times, a task of '
        f"{exp.REPORT_TASK_SIZE} images takes {h.end.task_s:.3f} s on an end device and {h.edge.task_s:.3f} s on "
        f"an edge device ({h.edge.latency_s:.3f} s of it latency and transfer), so eq4 gives N_map = "
        f"{', '.join(map(str, n_map_report))}; Table 2's processing times give 2 (the catalog's P-Nmap). For this "
        f"job's tasks of {p.task_size} images the latency dominates and eq4 gives {', '.join(map(str, n_map_job))}. "
        "Mapping runs both ways; Figure 3 shows both.",
    ]
    files4 = save_table(eq4, "\n".join(text4) + "\n", "zhang2018/eq4", root=entry.get("root"))
    cloud_share = mapping.assign(
        theta_cloud=[max(0.0, (k - p.edge_devices) / k) for k in mapping["n_end"]],
        measured=(mapping["on_cloud"] / (mapping["on_cloud"] + mapping["on_edge"])).round(4),
    )[["n_end", "theta_cloud", "measured"]]
    text5 = [
        "# zhang2018/eq5: theta_cloud = (N_end - N_edge x N_map) / N_end, read as at least 0",
        "",
        f"With N_map = 1 and {p.edge_devices} edge devices, beside the share of this job's second stages that "
        f"went to the cloud in the Mapping runs ({p.tasks} tasks dealt to the end devices in turn, so the shares "
        "match where the tasks divide evenly).",
        "",
        markdown_table(cloud_share.round(4)),
    ]
    files5 = save_table(cloud_share, "\n".join(text5) + "\n", "zhang2018/eq5", root=entry.get("root"))
    common = {"data_source": source, "clock": "none (counts and the calibration's times)", "paper_values_shown": True}
    return [
        ReportItem(
            "zhang2018/eq4",
            [str(f) for f in files4],
            **common,
            status="differs",
            why=f"the report's N_map = 1; eq4 on its own Table 1 times gives {', '.join(map(str, n_map_report))} "
            "(Table 2's give 2): the report's 1 follows its 4 edges for 4 end devices, not eq4",
            notebook=entry["notebook"],
            parameters=entry["parameters"],
        ),
        ReportItem(
            "zhang2018/eq5",
            [str(f) for f in files5],
            **common,
            status="not judged",
            why="the report plugs no values in; the equation and the runs' cloud share stand side by side",
            notebook=entry["notebook"],
            parameters=entry["parameters"],
        ),
    ]

"""The survey's placement problem (qiao/method-placement): search time against chain length, greedy against best.

Left: how long the exhaustive search and the greedy rule take as the chain
grows (log scale; the exhaustive search tries hosts^n placements). Right: the
latency of each rule's placement, with the real runs' clock latency as
markers. The survey gives no values, so nothing is predicted; the one check
is the implementation's: each placement, run for real, shows the latency the
search predicted for it (``CORRECTNESS``). It shows the cost of searching and
of not searching, and proves no hardness.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.common.results import StoredRun
from edgelab.hierarchy.placement import hosts_of
from edgelab.papers.qiao import placement as exp
from edgelab.report.manifest import ReportItem
from edgelab.report.style import data_source, markdown_table, save_figure, save_table
from edgelab.report.verdict import ROUNDING_TOLERANCE, Basis, Check, Noise, Verdict, decide, holds, within

ID = "qiao/method-placement"
CLOCK = (
    "the hierarchy's clock (hierarchy.placement): each stage's share of the network's MACs times zhang2018/table1's "
    "time per image on its host's tier, each move between hosts at half the higher tier's round-trip latency plus "
    "the bytes the stage really received at its bandwidth"
)


def draw(search: pd.DataFrame, runs: pd.DataFrame, plan: exp.Plan) -> Any:
    """The two panels: search time and latency against the number of stages."""
    import matplotlib.pyplot as plt

    p = plan.params
    hosts = len(hosts_of(p.hierarchy())[0])
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4))
    left.semilogy(search["stages"], search["search_s"], "-o", color="C3", label=f"exhaustive ({hosts}^n placements)")
    left.semilogy(search["stages"], search["greedy_search_s"], "-o", color="C0", label=f"greedy ({hosts} x n tried)")
    left.set(xlabel="stages in the chain", ylabel="search time on this host (s)", title="searching")
    left.legend(fontsize=8)
    right.plot(search["stages"], search["exhaustive_s"], "-o", color="C3", label="exhaustive: the best placement")
    right.plot(search["stages"], search["greedy_s"], "-o", color="C0", label="greedy")
    for rule, colour in (("exhaustive", "C3"), ("greedy", "C0")):
        done = runs[runs["rule"] == rule]
        if len(done):
            right.plot(done["stages"], done["clock_s"], "s", color=colour, markersize=9, fillstyle="none",
                       label=f"{rule}, run on the hierarchy")  # fmt: skip
    right.set(
        xlabel="stages in the chain",
        ylabel="latency of one task (s, clock)",
        title=f"{p.network_name}, {p.images} images from an end device",
    )
    right.legend(fontsize=8)
    fig.suptitle(
        f"qiao/method-placement: a chain of stages on 1 end, {p.edge_devices} edge, {p.cloud_devices} cloud "
        f"(latency {p.edge_latency_s} s / {p.cloud_latency_s} s)"
    )
    fig.tight_layout()
    return fig


def agreement(runs: pd.DataFrame) -> Check:
    """Each real run's clock latency (from the bytes its stages received) equals the search's for that placement."""
    gap = ((runs["clock_s"] - runs["predicted_s"]).abs() / runs["predicted_s"].abs()).max()
    return holds(
        "runs match the search",
        within(gap, ROUNDING_TOLERANCE),
        f"{len(runs)} run(s): largest relative gap {gap:.2g} between the clock and the search's latency",
        f"the clock of each run, from the bytes its stages received, equals the search's latency to "
        f"{ROUNDING_TOLERANCE:g} (relative)",
        basis=Basis.CORRECTNESS,
    )


def placement_verdict(plan: exp.Plan, search: pd.DataFrame, runs: pd.DataFrame) -> Verdict:
    """No value to predict; the real runs against the search's latency (correctness), and the findings in words."""
    worst = search.loc[search["greedy / best"].idxmax()]
    growth = search["search_s"].iloc[-1] / search["search_s"].iloc[-2] if len(search) > 1 else float("nan")
    why = (
        f"the survey gives no values; greedy up to {worst['greedy / best']:.2f}x the best latency, exhaustive "
        f"search {growth:.1f}x longer per stage"
    )
    p = plan.params
    choices = [
        f"the chain: {p.network_name} cut into stages balanced by multiply-accumulates, {p.images} images per task",
        f"the hosts: 1 end, {p.edge_devices} edge, {p.cloud_devices} cloud device(s); round trips "
        f"{p.edge_latency_s} s (edge) and {p.cloud_latency_s} s (cloud)",
        "a stage's time: its share of the network's MACs times zhang2018/table1's time per image on its tier",
    ]
    checks = [agreement(runs)] if len(runs) else []
    noise = Noise.none("the search and the clock are computed from counted bytes and Table 1's times, not timed")
    return decide(checks, fitted=[], predicted=[], noise=noise, choices=choices, reason=why, reason_class="qualitative")


def reduction(plan: exp.Plan) -> str:
    """How the run is smaller than the full profile's (the survey gives no size)."""
    p, full = plan.params, exp.FULL_PROFILE
    parts = []
    if max(p.stages) < max(full["stages"]):
        parts.append(f"chains of 1..{max(p.stages)} stages of the full profile's 1..{max(full['stages'])}")
    if set(p.run_stages) < set(full["run_stages"]):
        parts.append(f"run on the hierarchy at {list(p.run_stages)} stages of {full['run_stages']}")
    if p.edge_devices < full["edge_devices"]:
        parts.append(f"{p.edge_devices} edge devices of {full['edge_devices']}")
    if p.repeats < full["repeats"]:
        parts.append(f"{p.repeats} run(s) of each placement of {full['repeats']}")
    return "; ".join(parts)


def render_report(
    root: Path, plan: exp.Plan, stored: list[StoredRun], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """The notebook's items (``edgelab.papers.notebook.report``): ``render`` of the plan's search and the runs."""
    return render(root, plan, plan.searched, exp.summarize(plan, stored), notebook=notebook, parameters=parameters)


def render(
    root: Path, plan: exp.Plan, search: pd.DataFrame, runs: pd.DataFrame, *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """Write the figure and its tables; return the manifest entry."""
    p = plan.params
    png = save_figure(draw(search, runs, plan), ID, root=root)
    shown = search.assign(
        exhaustive_s=search["exhaustive_s"].round(3),
        greedy_s=search["greedy_s"].round(3),
        search_s=search["search_s"].map(lambda v: f"{v:.2g}"),
        greedy_search_s=search["greedy_search_s"].map(lambda v: f"{v:.2g}"),
        **{"greedy / best": search["greedy / best"].round(3)},
    )
    worst = search.loc[search["greedy / best"].idxmax()]
    growth = search["search_s"].iloc[-1] / search["search_s"].iloc[-2] if len(search) > 1 else float("nan")
    jobs = exp.job_level(plan)
    data = plan.dataset.provenance()
    source = data_source(data)
    md = [
        f"# {ID}: placing a chain of stages on the end / edge / cloud continuum",
        "",
        f"{p.network_name} cut into n stages balanced by multiply-accumulates; one task of {p.images} images starts at "
        f"end-0 and its answer returns there. Hosts: end-0, {p.edge_devices} edge and {p.cloud_devices} cloud "
        "device(s). The exhaustive search tries every host for every stage; the greedy rule puts each stage on the "
        "host that finishes it first from where the last one ended (ties to the host nearest the edge).",
        "",
        markdown_table(shown),
        "",
        f"The greedy placement is up to {worst['greedy / best']:.2f}x slower than the best (at {int(worst['stages'])} "
        f"stages: it stays near the edge, where each stage alone is cheapest, while the best placement pays one "
        f"move to a faster tier). The exhaustive search's time grows {growth:.1f}x per stage added here: hosts^n "
        "placements. The survey's remark that placing operator chains is NP-hard is illustrated, not proved.",
        "",
        "Real runs: each placement run on the hierarchy (stages built on their hosts, images and activations "
        "crossing between the workers); `clock_s` is the latency composed from the bytes each stage received, "
        "`predicted_s` the search's; `host_wall_s` is this machine's compute, which emulates the hosts.",
        "",
        markdown_table(runs.round(4)) if len(runs) else "(no run)",
        "",
        f"The job-level choice for the same hierarchy with 8 end devices (the report's job: {exp.REPORT_TASKS} tasks "
        f"of {exp.REPORT_TASK_SIZE} images, its networks per tier): each scheme's eq1-eq6 time and the per-device "
        "mapping that finishes first (emulation.schemes.place). End is the fastest because it gives only the coarse "
        "answer; the others add the fine one.",
        "",
        markdown_table(jobs.round(3)),
    ]
    result = placement_verdict(plan, search, runs)
    md += ["", result.markdown()]
    files = [png, *save_table(shown, "\n".join(md) + "\n", ID, root=root)]
    return [
        ReportItem.from_verdict(
            ID,
            files,
            result,
            data_source=source,
            clock=CLOCK,
            paper_values_shown=True,
            notebook=notebook,
            parameters=parameters,
            reduction=reduction(plan),
        )
    ]

"""The end / edge / cloud hierarchy drawn from what a run recorded: zhang2018/fig1 and qiao/fig1-1.

Both source figures are lost from their texts (architecture sketches with no
values). Here the hierarchy is drawn from the cluster the runs used (its
devices, their tiers, cores and TensorFlow threads, each tier's network,
latency and link), and the routing panels from the tasks each end device
really sent up under each scheme. Neither source figure has a value to
predict: zhang2018/fig1's one stated content, its panel (e), is the evaluation
system (8 end devices of 1 vCPU, 4 edge devices of 4, one cloud; 0.5 s and 1 s
of added latency), checked against the hierarchy the runs configured
(structural); qiao/fig1-1 is a sketch and is not judged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.report import verdict
from edgelab.report.manifest import ReportItem
from edgelab.report.reference import load_reference
from edgelab.report.style import markdown_table, save_figure, save_table
from edgelab.report.verdict import Basis, Check, Noise

ROWS = {"cloud": 2.0, "edge": 1.0, "end": 0.0}
COLOURS = {"end": "#4c72b0", "edge": "#55a868", "cloud": "#c44e52"}


def _positions(tiers: dict[str, str]) -> dict[str, tuple[float, float]]:
    by_tier: dict[str, list[str]] = {}
    for device, tier in tiers.items():
        by_tier.setdefault(tier, []).append(device)
    pos = {}
    for tier, devices in by_tier.items():
        for i, device in enumerate(devices):
            pos[device] = ((i + 0.5) / len(devices), ROWS[tier])
    return pos


def _nodes(ax: Any, tiers: dict[str, str], pos: dict[str, tuple[float, float]], size: float = 300) -> None:
    for device, (x, y) in pos.items():
        ax.scatter([x], [y], s=size, color=COLOURS[tiers[device]], zorder=3)
        ax.annotate(device, (x, y), textcoords="offset points", xytext=(0, -14), ha="center", fontsize=6)
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(-0.5, 2.5)
    ax.axis("off")


def draw(info: dict[str, Any], networks: dict[str, str], routes: pd.DataFrame, labels: dict[str, str]) -> Any:
    """The topology (left) and, per scheme, the tasks each end device sent up (right, arrow width = tasks)."""
    import matplotlib.pyplot as plt

    tiers = info["tiers"]
    spec = {t["name"]: t for t in info["hierarchy"]["tiers"]}
    pos = _positions(tiers)
    panels = list(routes.groupby(["scheme", "mapping"], sort=False)) if len(routes) else []
    fig = plt.figure(figsize=(13, 4.6))
    grid = fig.add_gridspec(
        2, 1 + max(1, (len(panels) + 1) // 2), width_ratios=[2.2] + [1] * max(1, (len(panels) + 1) // 2)
    )
    ax = fig.add_subplot(grid[:, 0])
    _nodes(ax, tiers, pos)
    for tier, y in ROWS.items():
        if tier not in spec:
            continue
        t = spec[tier]
        text = (
            f"{labels[tier]}: {t['devices']} x {t['cores']} core(s), {t['memory_mb']} MB, {networks.get(tier, '-')}\n"
            f"added latency {t['latency_s']} s per task, link {t['link_mbps']:g} Mbit/s"
            f" (TensorFlow threads here: {info.get('tf_threads', {}).get(tier, '?')})"
        )
        ax.text(0.5, y + 0.32, text, ha="center", fontsize=7)
    for device, tier in tiers.items():
        if tier == "end":
            continue
        x, y = pos[device]
        ends = [d for d, t in tiers.items() if t == "end"]
        for end in ends:
            ax.plot([pos[end][0], x], [pos[end][1], y], color="0.85", lw=0.5, zorder=1)
    ax.set_title("the hierarchy the runs used (grey: possible routes)", fontsize=9)
    for k, ((scheme, mapping), group) in enumerate(panels):
        sub = fig.add_subplot(grid[k % 2, 1 + k // 2])
        _nodes(sub, tiers, pos, size=60)
        for row in group.itertuples():
            (x0, y0), (x1, y1) = pos[row.end], pos[row.upper]
            sub.annotate("", (x1, y1), (x0, y0), arrowprops={"arrowstyle": "->", "lw": 0.4 + 0.3 * row.tasks})
        name = scheme if mapping == "-" else f"{scheme} ({mapping})"
        sub.set_title(f"{name}: {int(group['tasks'].sum())} tasks up", fontsize=8)
    fig.tight_layout()
    return fig


def panel_e(info: dict[str, Any]) -> Check:
    """The hierarchy the runs configured against the report's evaluation system (its Fig. 1(e), Sec. 4.2)."""
    stated = load_reference("zhang2018/fig1").set_index(["condition", "metric"])["value"]
    system = "evaluation system (Fig. 1(e), Sec. 4.2)"
    want = {
        "end": (stated[system, "end_devices"], stated["end device VM", "vcpus"], 0.0),
        "edge": (
            stated[system, "edge_devices"],
            stated["edge device VM", "vcpus"],
            stated["simulated delay to edge devices (default)", "latency_s"],
        ),
        "cloud": (stated[system, "clouds"], None, stated["simulated delay to the cloud (default)", "latency_s"]),
    }
    tiers = {t["name"]: t for t in info.get("hierarchy", {}).get("tiers", [])}
    off = []
    for name, (devices, cores, latency) in want.items():
        tier = tiers.get(name)
        if tier is None:
            off.append(f"no {name} tier")
            continue
        has = {"devices": int(devices), "cores": None if cores is None else int(cores), "latency_s": float(latency)}
        if any(v is not None and tier[k] != v for k, v in has.items()):
            off.append(f"{name}: {tier['devices']} device(s) of {tier['cores']} core(s), {tier['latency_s']} s")
    seen = (
        ", ".join(f"{n} {t['devices']} x {t['cores']} core(s), {t['latency_s']} s" for n, t in tiers.items())
        or "no hierarchy recorded"
    )
    return verdict.holds(
        "panel (e)",
        not off,
        seen,
        "the hierarchy drawn is the report's evaluation system: 8 end devices of 1 vCPU, 4 edge devices of 4, "
        "one cloud; 0.5 s added to an edge, 1 s to the cloud",
        basis=Basis.CONFIGURED,
        note="; ".join(off),
    )


def render(
    root: Path,
    info: dict[str, Any],
    networks: dict[str, str],
    routes: pd.DataFrame,
    *,
    notebook: str,
    parameters: dict[str, Any],
    reduction: str | None = None,
) -> list[ReportItem]:
    """zhang2018/fig1 (the evaluation system and its routes) and qiao/fig1-1 (the IoT-fog-cloud continuum).

    ``reduction`` says how the runs whose routes are drawn are smaller than the
    report's job; by default it is read from ``parameters`` (a Figure 3 run's).
    """
    if reduction is None:
        from edgelab.papers.zhang2018.schemes import job_reduction

        keys = ("tasks", "task_size", "end_devices")
        reduction = job_reduction(*(parameters[k] for k in keys)) if all(k in parameters for k in keys) else ""
    items = []
    table = routes.groupby(["scheme", "mapping", "upper"], as_index=False)[["tasks", "bytes"]].sum()
    sketch = "an architecture sketch with no values, lost from the text; drawn from the running hierarchy"
    results = {
        "zhang2018/fig1": verdict.decide(
            [panel_e(info)],
            fitted=[],
            predicted=[],
            noise=Noise.none("the devices the runs configured, listed"),
            choices=[
                "memory, bandwidth and the cloud's cores, which the report does not state (edgelab.emulation.tiers)"
            ],
        ),
        "qiao/fig1-1": verdict.decide(
            [], fitted=[], predicted=[], noise=Noise.none("a diagram"), reason=sketch, reason_class="qualitative"
        ),
    }
    for item_id, labels, title, note in (
        (
            "zhang2018/fig1",
            {"end": "end devices", "edge": "edge devices", "cloud": "cloud"},
            "the evaluation system (the report's panel (e): 8 end, 4 edge, 1 cloud) and where each scheme sent tasks",
            "The report's Figure 1 is lost from its text and carries no values; its panel (e) is the 8 / 4 / 1 "
            "system with 1 s and 0.5 s of added latency, which is the hierarchy drawn here, from the cluster the "
            "Figure 3 runs used. The routing panels are those runs' own tasks at the most end devices.",
        ),
        (
            "qiao/fig1-1",
            {"end": "IoT devices (things)", "edge": "fog / edge", "cloud": "cloud"},
            "the IoT-fog-cloud continuum, as a running hierarchy",
            "The survey's architecture sketch (no values), drawn as the emulated continuum edgelab runs: things at "
            "the bottom answer coarsely on their own, fog nodes close by and the distant cloud take what goes up. "
            "Only what the scheme sends crosses a link (table: tasks and bytes per upper device).",
        ),
    ):
        result = results[item_id]
        png = save_figure(draw(info, networks, routes, labels), item_id, root=root)
        md = [f"# {item_id}: {title}", "", note, "", markdown_table(table), "", result.markdown()]
        files = [png, *save_table(table, "\n".join(md) + "\n", item_id, root=root)]
        items.append(
            ReportItem.from_verdict(
                item_id,
                files,
                result,
                data_source={"name": "the runs' cluster and stages", "source": "zhang2018/fig3 runs"},
                clock="none (a diagram of the devices and the tasks they exchanged)",
                paper_values_shown=True,
                notebook=notebook,
                parameters=parameters,
                reduction=reduction,
            )
        )
    return items

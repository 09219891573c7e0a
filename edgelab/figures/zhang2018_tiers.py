"""Zhang 2018's Tables 1 and 2: the three networks on the three tiers, alone and with each tier's latency."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.experiments import zhang2018_tiers as exp
from edgelab.figures.style import data_source, markdown_table, save_figure, save_table
from edgelab.report import ReportItem

CLOCK = (
    "report times: zhang2018/table1 itself, the hierarchy's calibration (fitted, not judged); this host's: wall "
    "time of real inference on one worker per tier (TensorFlow at the tier's cores, capped at the host's)"
)


def draw(times: pd.DataFrame) -> Any:
    """Time per image of each network on each tier: the report's and this host's, on a log scale."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=False)
    for ax, (column, title) in zip(
        axes, (("report_ms", "the report (Table 1)"), ("host_ms", "this host, one worker per tier")), strict=True
    ):
        t = times.pivot_table(index="network", columns="tier", values=column)[list(exp.TIERS)]
        t.plot.bar(ax=ax, logy=True, rot=0)
        ax.set(title=title, xlabel="", ylabel="ms per image")
    fig.suptitle("zhang2018/table1: inference time per image, stand-alone (batch of a task)")
    fig.tight_layout()
    return fig


def render(
    root: Path, plan: exp.Plan, times: pd.DataFrame, sizes: pd.DataFrame, *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """Write Tables 1 and 2 beside the report's values; return their manifest entries."""
    p = plan.params
    data = plan.dataset.provenance()
    source = data_source(data)
    ratio = exp.ratios(times)
    host = times.pivot_table(index="tier", columns="network", values="host_ms")
    order = [n for n in ("mobilenet", "resnet34", "wrn-28-10") if n in host.columns]
    ordered = all(list(host.loc[t, order].sort_values().index) == order for t in host.index)
    png = save_figure(draw(times), "zhang2018/table1", root=root)
    shown = times.assign(
        report_ms=times["report_ms"].round(2),
        host_ms=times["host_ms"].round(1),
        host_cpu_ms=times["host_cpu_ms"].round(1),
    )
    md1 = [
        "# zhang2018/table1: the networks on the tiers, alone: time per image, accuracy, parameters, file size",
        "",
        f"Time per image. `report_ms` is Table 1, which is the hierarchy's calibration: every run of the "
        f"hierarchy charges it, so it is fitted here and not judged. `host_ms` is real inference on this host, "
        f"one worker per tier, {p.tasks} tasks of {p.task_size} images each, one task at a time (the report: 200 "
        "of 50); a laptop's cores are not the report's VMs and GPU, so compare the ratios below.",
        "",
        markdown_table(shown),
        "",
        markdown_table(ratio.round(2)),
        "",
        "On this host the edge and cloud workers both get the host's two cores and no GPU, so their times are "
        "alike where the report's cloud is 3-32x faster than its edge. The ordering between networks on each "
        f"tier (MobileNet fastest, WRN-28-10 slowest) {'holds here too' if ordered else 'does not hold here'}.",
        "",
        "Parameters and the weights file Keras writes, alone and once compiled with the optimizer the report "
        "trains the network with (the file then holds the optimizer's slots):",
        "",
        markdown_table(sizes),
        "",
        "The report's sizes match a MobileNet file with Adam's two slots, a ResNet-34 file of weights alone and "
        "a WRN-28-10 (flattening head) file with SGD momentum's slot: the catalog's P-size, measured.",
        "",
        "Accuracy (rows 4 and 5): not run. The networks are built with seeded random weights; training them on "
        "CIFAR-100 (100-500 epochs in the report) is the next step of this work, so no accuracy is reported.",
    ]
    files1 = [png, *save_table(shown, "\n".join(md1) + "\n", "zhang2018/table1", root=root)]
    t2 = exp.table2(plan, times)
    lo, hi = t2["clock / report"].min(), t2["clock / report"].max()
    md2 = [
        "# zhang2018/table2: processing time per image in the running system, with each tier's latency",
        "",
        "The clock's prediction for a task of 50 images: Table 1's time per image, plus (above the end device) "
        "the tier's latency and the transfer of the task's images at its bandwidth, spread over the 50 images.",
        "",
        markdown_table(t2),
        "",
        f"The clock gives {lo:.0%}-{hi:.0%} of the report's processing times. The report's own inference times "
        "in the running system exceed its Table 1 by 5-42% (HTTP serving, packing, synchronisation), and at "
        "0 s latency it adds another 2.4-3.4 ms per image on top; the clock charges neither. The latency's share "
        "does match: the report's 0.5 s and 1 s columns exceed its 0 s ones by 9.9 and 20.2 ms per image, the "
        "latency over 50 images being 10 and 20 ms (claim C14), as the clock has it by construction.",
    ]
    files2 = save_table(t2, "\n".join(md2) + "\n", "zhang2018/table2", root=root)
    entry = {"notebook": notebook, "parameters": parameters, "data_source": source, "paper_values_shown": True}
    return [
        ReportItem(
            "zhang2018/table1",
            [str(f) for f in files1],
            clock=CLOCK,
            status="not judged",
            why="its time rows are the hierarchy's calibration (fitted); accuracy not run (the networks are not "
            "trained yet); parameters and file sizes measured beside the report's",
            **entry,
        ),
        ReportItem(
            "zhang2018/table2",
            [str(f) for f in files2],
            clock="the hierarchy's clock: zhang2018/table1's time per image plus the tier's latency and transfer",
            status="differs",
            why=f"the clock gives {lo:.0%}-{hi:.0%} of the printed processing times: it does not charge the "
            "report's framework overhead (its inference alone is 5-42% above Table 1); the latency's share matches",
            **entry,
        ),
    ]

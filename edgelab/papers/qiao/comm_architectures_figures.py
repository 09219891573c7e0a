"""The survey's Figure 3-4 from measured traffic: parameter server, peer-to-peer and AllReduce.

Each panel is a traffic diagram drawn from the bytes-per-directed-link matrix
the devices really sent in one iteration (edge width proportional to bytes,
values annotated in KB): workers on a circle, the parameter server's shards
inside it. The survey gives no values; qiao/fig3-4b carries the verdict of
claim C11 (with the remedy the text names: peer-to-peer rerun with compressed
gradients, drawn beside the fp32 run), qiao/fig3-4c that of C12,
qiao/eq-comm-volume the formulas'. The bytes are counted where each piece is
sent, so the claims and formulas are predictions of counted bytes
(``COUNTED``); every worker ending with the same average is the collectives'
correctness. fig3-4a and the composite fig3-4 carry no claim of their own.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from edgelab.common.results import StoredRun
from edgelab.papers.qiao import comm_architectures as exp
from edgelab.report import verdict
from edgelab.report.manifest import ReportItem
from edgelab.report.style import apply_style, data_source, markdown_table, save_figure, save_table
from edgelab.report.verdict import Noise

#: The bytes are counted where each piece is sent; the host and emulated times are shown, not judged.
COUNTED = Noise.none("bytes are counted where each piece is sent, not timed")
#: The worker count the diagrams show when it ran.
SHOWN_N = 4
#: Bytes from which a size reads in MB rather than KB.
MEGABYTE = 1e6

CLOCK = (
    "host: wall time of one iteration on this machine (every device a worker process on loopback TCP), median over "
    "iterations; emulated: the devices' links from the bytes Dask serialized, steps in sequence, each step one "
    "latency plus its busiest full-duplex port's bytes at the link rate (emulated_links_s: every directed link "
    "its own rate)"
)
NAMES = {"ps": "parameter server", "p2p": "peer-to-peer", "ring": "ring AllReduce", "tree": "tree AllReduce"}
TABLE_COLUMNS = ["workers", "pattern", "steps", "total_bytes", "max_link_bytes", "max_port_bytes",
                 "sent_per_worker_mean", "wire_bytes", "host_s", "emulated_s", "emulated_links_s"]  # fmt: skip
#: fig3-4b's table: fp32 P2P's rows, then the compressed reruns' (ratios: fp32 bytes over compressed).
P2P_COLUMNS = ["workers", "compressor", "total_bytes", "wire_bytes", "max_link_bytes", "sent_per_worker_mean",
               "payload_ratio", "wire_ratio", "error_vs_fp32", "mean_error", "equals_simulation",
               "bytes_equal_encodings", "host_s", "emulated_s", "emulated_codec_s"]  # fmt: skip


def _positions(n: int, servers: int) -> list[tuple[float, float]]:
    """Workers on the unit circle (worker 0 at the top, clockwise), servers on a small inner one."""
    spots = [(math.sin(2 * math.pi * i / n), math.cos(2 * math.pi * i / n)) for i in range(n)]
    if servers == 1:
        return [*spots, (0.0, 0.0)]
    return spots + [(0.3 * math.sin(2 * math.pi * k / servers), 0.3 * math.cos(2 * math.pi * k / servers))
                    for k in range(servers)]  # fmt: skip


def draw_traffic(ax: Any, matrix: np.ndarray, workers: int, title: str, widest: float) -> None:
    """One traffic diagram: an arrow per directed link that carried bytes, its width the bytes over ``widest``."""
    from matplotlib.patches import FancyArrowPatch

    servers = matrix.shape[0] - workers
    spots = _positions(workers, servers)
    for src, dst in zip(*np.nonzero(matrix), strict=True):
        (x0, y0), (x1, y1) = spots[src], spots[dst]
        width = 0.6 + 5.0 * matrix[src, dst] / widest
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), connectionstyle="arc3,rad=0.18", arrowstyle="-|>",
                                     mutation_scale=9, linewidth=width, color="C0", alpha=0.55,
                                     shrinkA=13, shrinkB=13))  # fmt: skip
        # The label sits off the chord on the arrow's side, so the two directions of a link do not overlap.
        mx, my = (x0 + x1) / 2, (y0 + y1) / 2
        nx, ny = y1 - y0, x0 - x1
        ax.text(mx - 0.12 * nx, my - 0.12 * ny, f"{matrix[src, dst] / 1e3:.0f}", fontsize=6.5, ha="center",
                va="center", color="C0")  # fmt: skip
    for i, (x, y) in enumerate(spots):
        server = i >= workers
        ax.scatter([x], [y], s=420, color="C3" if server else "C2", zorder=3)
        ax.text(x, y, f"S{i - workers}" if server else f"W{i}", ha="center", va="center", fontsize=8, zorder=4,
                color="white", weight="bold")  # fmt: skip
    ax.set(xlim=(-1.35, 1.35), ylim=(-1.35, 1.35), aspect="equal", title=title)
    ax.axis("off")


def draw_panels(
    plan: exp.Plan, stored: list[StoredRun], n: int, patterns: list[str], gossip: pd.DataFrame | None = None
) -> Any:
    """Traffic diagrams of ``patterns`` side by side for ``n`` workers, on one width scale (then gossip's curve)."""
    import matplotlib.pyplot as plt

    apply_style()
    matrices = {p: exp.link_matrix(plan, stored, n, p) for p in patterns}
    widest = max(float(m.max()) for m in matrices.values())
    panels = len(patterns) + (gossip is not None)
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 4.4), squeeze=False)
    if gossip is not None:
        _gossip_panel(axes[0][-1], gossip)
    for ax, pattern in zip(axes[0], patterns, strict=False):
        m = matrices[pattern]
        title = f"{NAMES[pattern]}\ntotal {m.sum() / 1e6:.2f} MB, busiest link {m.max() / 1e3:.0f} KB"
        draw_traffic(ax, m, n, title, widest)
    fig.suptitle(f"bytes per directed link, one iteration, N = {n} workers (KB; width proportional to bytes)")
    fig.tight_layout()
    return fig


def _size(value: float) -> str:
    return f"{value / 1e6:.2f} MB" if value >= MEGABYTE else f"{value / 1e3:.1f} KB"


def draw_p2p(plan: exp.Plan, stored: list[StoredRun], n: int, rows: pd.DataFrame) -> Any:
    """fp32 P2P's traffic and each compressed rerun's for ``n`` workers (one width scale), then bytes per worker."""
    import matplotlib.pyplot as plt

    apply_style()
    specs = [c for c in rows["compressor"].unique() if c != "none"]
    matrices = {"none": exp.link_matrix(plan, stored, n, "p2p")}
    matrices |= {c: exp.link_matrix(plan, stored, n, "p2p", compressor=c) for c in specs}
    widest = max(float(m.max()) for m in matrices.values())
    panels = len(matrices) + bool(specs)
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 4.4), squeeze=False)
    for ax, (spec, m) in zip(axes[0], matrices.items(), strict=False):
        title = f"peer-to-peer, {'fp32' if spec == 'none' else spec}\ntotal {_size(m.sum())}, per link {_size(m.max())}"
        draw_traffic(ax, m, n, title, widest)
    if specs:
        _per_worker_panel(axes[0][-1], rows)
    fig.suptitle(f"bytes per directed link, one iteration, N = {n} workers (KB; width proportional to bytes)")
    fig.tight_layout()
    return fig


def _per_worker_panel(ax: Any, rows: pd.DataFrame) -> None:
    """Serialized bytes each worker sends per iteration, fp32 and compressed, per N (log scale; ratios on top)."""
    ns = sorted(rows["workers"].unique())
    specs = list(dict.fromkeys(rows["compressor"]))
    width = 0.8 / len(specs)
    for k, spec in enumerate(specs):
        mine = rows[rows["compressor"] == spec].set_index("workers").reindex(ns)
        x = np.arange(len(ns)) + (k - (len(specs) - 1) / 2) * width
        label = "fp32" if spec == "none" else spec
        ax.bar(x, mine["wire_bytes"] / mine.index, width, color=f"C{k}", label=label)
        if spec != "none":
            for xi, ratio, height in zip(x, mine["wire_ratio"], mine["wire_bytes"] / mine.index, strict=True):
                ax.text(xi, height * 1.15, f"{ratio:.3g}x", ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylim(top=float((rows["wire_bytes"] / rows["workers"]).max()) * 12)  # room for the legend above the bars
    ax.set_xticks(np.arange(len(ns)), [f"N={n}" for n in ns])
    ax.set(ylabel="serialized bytes a worker sends / iteration", title="fp32 over compressed (x fewer)")
    ax.legend(fontsize=8, ncol=len(specs), loc="upper center")


def _gossip_panel(ax: Any, curve: pd.DataFrame) -> None:
    """Gossip's relative distance to the mean per step, per N (log scale)."""
    for column in curve.columns:
        ax.semilogy(curve.index, curve[column].clip(lower=1e-9), "-o", markersize=3, label=column)
    ax.set(xlabel="gossip step", ylabel="RMS distance to the mean / |mean|", title="gossip averaging (no exact mean)")
    ax.legend(fontsize=8)


def render_report(
    root: Path, plan: exp.Plan, stored: list[StoredRun], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """The notebook's items (``edgelab.papers.notebook.report``): ``render``."""
    return render(root, plan, stored, notebook=notebook, parameters=parameters)


def render(
    root: Path, plan: exp.Plan, stored: list[StoredRun], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """Write the five items' figures and tables; return their manifest entries."""
    p = plan.params
    table = exp.traffic(plan, stored)
    first = stored[0].summary
    vector_bytes = int(first["vector_bytes"])
    ns = sorted(table["workers"].unique())
    n_shown = SHOWN_N if SHOWN_N in ns else ns[-1]
    shown = table[TABLE_COLUMNS].assign(host_s=table["host_s"].round(4), emulated_s=table["emulated_s"].round(4),
                                        emulated_links_s=table["emulated_links_s"].round(4),
                                        sent_per_worker_mean=table["sent_per_worker_mean"].round(1))  # fmt: skip
    setup = (
        f"Each of N workers ({plan.profile.name} devices, {plan.profile.link_mbps:g} Mbit/s, "
        f"{plan.profile.latency_s * 1e3:g} ms latency) computes a real gradient of {_model_name(p.model)} "
        f"({first['parameters']:,} float32 parameters, |g| = {vector_bytes:,} bytes) on {p.batch_size} MNIST samples "
        f"({first['dataset']['source']}); the pattern then runs worker to worker over Dask's comms, "
        f"{p.iterations} iteration(s) per pattern; PS with {p.servers} server device(s). Bytes are payload bytes "
        "counted where each piece is sent (`wire_bytes`: Dask's serialized frames, header included)."
    )
    common = {"data_source": data_source(first["dataset"]), "clock": CLOCK, "notebook": notebook,
              "parameters": parameters, "reduction": reduction(plan)}  # fmt: skip
    compressed = exp.compression(plan, stored)
    cells, choices = [f"N={n}" for n in ns], _choices(plan, first)
    c11 = verdict.decide(exp.c11(table, compressed, servers=p.servers), fitted=[], predicted=cells, noise=COUNTED,
                         choices=choices)  # fmt: skip
    c12 = verdict.decide(exp.c12(table, servers=p.servers), fitted=[], predicted=cells, noise=COUNTED,
                         choices=choices)  # fmt: skip
    volume = exp.volume(plan, table, vector_bytes)
    formulas = verdict.decide(exp.comm_volume(volume), fitted=[], predicted=cells, noise=COUNTED,
                              choices=choices)  # fmt: skip
    items = []

    def page(item_id: str, heading: str, body: list[str], frame: pd.DataFrame, fig: Any) -> list[Any]:
        png = save_figure(fig, item_id, root=root)
        md = [f"# {item_id}: {heading}", "", setup, "", *body, "", markdown_table(frame)]
        return [png, *save_table(frame, "\n".join(md) + "\n", item_id, root=root)]

    def rows(pattern: str) -> pd.DataFrame:
        return shown[shown["pattern"] == pattern]

    files = page("qiao/fig3-4a", f"parameter server, N = {n_shown}",
                 [f"Each worker pushes slice k of its gradient to server k and pulls the summed slice back: |g| each "
                  f"way per worker, and the {p.servers} server(s) together carry 2N|g|."], rows("ps"),
                 draw_panels(plan, stored, n_shown, ["ps"]))  # fmt: skip
    ps_why = (f"the survey gives no values; the server port carries {_ratio(table, 'ps')} a worker's bytes "
              "(see qiao/fig3-4b for C11, qiao/eq-comm-volume for the bytes)")  # fmt: skip
    items.append(ReportItem.from_verdict("qiao/fig3-4a", files, _qualitative(ps_why), paper_values_shown=False,
                                         **common))  # fmt: skip

    p2p = _p2p_rows(table, compressed)
    files = page("qiao/fig3-4b", f"peer-to-peer, N = {n_shown}, fp32 and compressed",
                 ["Every worker sends its whole gradient to every other and sums all N in worker order. Claim C11 "
                  "(l.252): peer-to-peer removes the server bottleneck but raises worker-to-worker traffic; "
                  "\"therefore, parameter compression [...] [is] proposed to reduce the traffic\".", "",
                  _remedy_text(p.compressors), "", c11.markdown()],
                 p2p, draw_p2p(plan, stored, n_shown, p2p))  # fmt: skip
    items.append(ReportItem.from_verdict("qiao/fig3-4b", files, c11, paper_values_shown=False, **common))

    gossip = exp.gossip_curve(plan, stored)
    files = page("qiao/fig3-4c", f"AllReduce (ring and tree), N = {n_shown}",
                 ["Ring: reduce-scatter then all-gather, N-1 steps each. Tree: a binomial tree, reduce up then "
                  "broadcast down, 2 ceil(log2 N) steps. Claim C12 (l.254): AllReduce lowers traffic relative to PS "
                  "and P2P.", "", c12.markdown(), "",
                  f"Gossip over a {p.topology} graph does not give the mean in one step; its RMS distance to the "
                  "mean relative to the mean's norm, per step (simulated on the same gradients; the devices' run "
                  "matches the simulation bit for bit when `equals_simulation`):", "",
                  markdown_table(gossip.reset_index().map(lambda v: f"{v:.3g}"))],
                 pd.concat([rows("ring"), rows("tree"), rows("gossip")]),
                 draw_panels(plan, stored, n_shown, ["ring", "tree"], gossip))  # fmt: skip
    items.append(ReportItem.from_verdict("qiao/fig3-4c", files, c12, paper_values_shown=False, **common))

    files = page("qiao/fig3-4", "parameter server, peer-to-peer and AllReduce from measured traffic",
                 [f"The panels are judged apart: qiao/fig3-4b (C11) {c11.status}, qiao/fig3-4c (C12) {c12.status}. "
                  "Every pattern's average, on every worker:", "",
                  markdown_table(table[["workers", "pattern", "mean_error", "same_on_every_worker",
                                        "equals_simulation"]].assign(mean_error=table["mean_error"].map(
                                            lambda v: f"{v:.2g}")))],
                 shown, draw_panels(plan, stored, n_shown, ["ps", "p2p", "ring", "tree"]))  # fmt: skip
    why = f"composite of its panels, judged there: fig3-4b (C11) {c11.status}, fig3-4c (C12) {c12.status}"
    items.append(ReportItem.from_verdict("qiao/fig3-4", files, _qualitative(why), paper_values_shown=False,
                                         **common))  # fmt: skip

    files = page("qiao/eq-comm-volume", "bytes per iteration against the formulas",
                 ["Derived (not in the survey): PS each worker sends and receives |g|, servers 2N|g|; P2P (N-1)|g| "
                  "each way; ring 2(N-1)/N |g| per worker; tree 2 ceil(log2 N) steps, 2(N-1)|g| in all. Ratios are "
                  "measured payload bytes over the formula (per-worker columns: the mean over workers). "
                  "`busiest worker / formula`: the ring cuts |g| into N slices by `slice_bounds`, so when N does not "
                  "divide the parameter count a worker may send a few bytes more than 2(N-1)/N |g|; the tree's root "
                  "sends ceil(log2 N) |g|. Dask's serialization adds the overhead column on top of the payload.", "",
                  formulas.markdown()], volume.round(6),
                 draw_volume(volume))  # fmt: skip
    items.append(ReportItem.from_verdict("qiao/eq-comm-volume", files, formulas, paper_values_shown=True, **common))
    return items


def _qualitative(why: str) -> verdict.Verdict:
    """A panel with no claim of its own: not judged (qualitative), and why."""
    return verdict.decide([], fitted=[], predicted=[], noise=COUNTED, reason=why, reason_class="qualitative")


def _choices(plan: exp.Plan, first: dict[str, Any]) -> list[str]:
    """What the survey leaves open and the runs chose."""
    p = plan.params
    return [
        f"the gradient: {_model_name(p.model)}'s ({first['parameters']:,} float32) on {p.batch_size} MNIST samples "
        "per worker",
        f"the parameter server: {p.servers} shard(s), each a device of its own (not on a worker)",
        "bytes: payload counted where each piece is sent (Dask's serialized frames beside it, as wire_bytes)",
        f"gossip: a {p.topology} graph, {p.gossip_steps} averaging steps",
        f"the emulated time (shown, not judged): {plan.profile.name} links, full-duplex ports, one latency per step",
    ]


def reduction(plan: exp.Plan) -> str:
    """How the run is smaller than the full profile's (the survey gives no size; the catalog asks N = 2, 4, 8)."""
    p, full = plan.params, exp.FULL_PROFILE
    parts = []
    if max(p.worker_counts) < max(full["worker_counts"]):
        parts.append(f"N = {list(p.worker_counts)} of {full['worker_counts']}")
    if p.servers < full["servers"]:
        parts.append(f"{p.servers} parameter-server shard(s) of {full['servers']}")
    if p.iterations < full["iterations"]:
        parts.append(f"{p.iterations} iteration(s) of each pattern of {full['iterations']} (the bytes repeat exactly)")
    return "; ".join(parts)


def _p2p_rows(table: pd.DataFrame, compressed: pd.DataFrame) -> pd.DataFrame:
    """fp32 P2P's rows (ratios 1) then the compressed reruns', in ``P2P_COLUMNS``."""
    fp32 = table[table["pattern"] == "p2p"].assign(compressor="none", payload_ratio=1.0, wire_ratio=1.0,
                                                        error_vs_fp32=0.0)  # fmt: skip
    frame = pd.concat([fp32, compressed], ignore_index=True).reindex(columns=P2P_COLUMNS)
    rounding = {"sent_per_worker_mean": 1, "payload_ratio": 3, "wire_ratio": 3, "host_s": 4, "emulated_s": 4,
                "emulated_codec_s": 4}  # fmt: skip
    return frame.round(rounding).assign(error_vs_fp32=frame["error_vs_fp32"].map(lambda v: f"{v:.3g}"),
                                        mean_error=frame["mean_error"].map(lambda v: f"{v:.2g}"))  # fmt: skip


def _remedy_text(compressors: tuple[str, ...]) -> str:
    if not compressors:
        return "The compressed rerun was not asked for (`compressors` empty)."
    return (
        f"The remedy, rerun: the same gradients exchanged peer-to-peer again, each encoded once by its worker with "
        f"{', '.join(f'`{c}`' for c in compressors)} (`edgelab.sync.compress`; top-k keeps 1% of each layer as int32 "
        "index and float32 value, `qsgd:127` is the 8-bit quantiser: a 7-bit level and a sign bit per element, one "
        "float32 norm per layer) and sent to every other worker; each worker decodes all N and averages them. "
        "`total_bytes` are the arrays' bytes, `wire_bytes` Dask's serialized frames (the ratios: fp32 over "
        "compressed); `bytes_equal_encodings`: every send weighs what the numpy encoding of the sender's gradient "
        "does; `mean_error`: each worker's average against the mean of the decoded gradients (relative); "
        "`error_vs_fp32`: the compressed average's relative L2 distance to the fp32 mean; `emulated_codec_s`: the "
        "slowest worker's encode plus decode CPU time on the device (host CPU time x speed factor), which the "
        "link time `emulated_s` does not include."
    )


def _ratio(table: pd.DataFrame, pattern: str) -> str:
    rows = table[table["pattern"] == pattern]
    return ", ".join(f"{r.max_port_bytes / r.sent_per_worker_mean:.2g}x (N={r.workers})" for r in rows.itertuples())


def draw_volume(volume: pd.DataFrame) -> Any:
    """Measured / formula per pattern and N (1 is exact), and the serialization overhead."""
    import matplotlib.pyplot as plt

    apply_style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for i, (pattern, rows) in enumerate(volume.groupby("pattern", sort=False)):
        left.plot(rows["workers"], rows["total / formula"], "-o", color=f"C{i}", label=pattern)
        right.plot(rows["workers"], 100 * rows["serialization overhead"], "-o", color=f"C{i}", label=pattern)
    left.axhline(1.0, color="black", linestyle="--", linewidth=1, label="formula")
    left.set(xlabel="workers N", ylabel="measured / formula total bytes", title="payload bytes",
             ylim=(0.9, 1.1))  # fmt: skip
    right.set(xlabel="workers N", ylabel="wire over payload (%)", title="Dask serialization overhead")
    left.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _model_name(model: Any) -> str:
    """LeNet-MLP for the built-in ``mlp``; a user's model by its name and digest."""
    return f"the LeNet-{model.upper()}" if isinstance(model, str) else f"the user's model {model}"

"""DeepThings' fused tiles (qiao/fig3-6): the image's tile regions, the output grid, the measures, bytes over depth.

Top: the real input image with each tile's input region (halo included)
outlined, next to the stitched output map (channel mean) cut by the output
grid, and the output bytes of every layer over the network's depth, the fused
block shaded and the first layer smaller than the image marked. Bottom: per
grid size, peak activation memory per worker against untiled, total MACs over
untiled MACs (the halo's recomputation), and the latency on the emulated
clock with the bytes gathered. The survey gives no values, so nothing is
predicted: the stitched output must equal the untiled one (``CORRECTNESS``),
and the survey's two points about shapes are checked on the network as built
(``STRUCTURE``): early layers output more bytes than later ones (C18), and a
tile needs less activation memory than the whole map. Times are shown, not
judged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.common.results import StoredRun
from edgelab.papers.qiao import tiles as exp
from edgelab.report import verdict
from edgelab.report.manifest import ReportItem
from edgelab.report.style import data_source, markdown_table, save_figure, save_table
from edgelab.report.verdict import FLOAT32_TOLERANCE, Basis, Noise

ID = "qiao/fig3-6"
CLOCK = (
    "emulated device time (edgelab.emulation.stream_clock.compose): the gather node sends the tiles' regions one after "
    "another over its link, each tile's CPU time measured in its worker times the calibrated speed factor, each "
    "output back over its device's link (bytes as Dask serializes them, plus the link latency)"
)
#: A feature map's shape: height, width, channels (a classifier's output has fewer axes).
MAP_RANK = 3


def draw(plan: exp.Plan, runs: list[StoredRun], summary: pd.DataFrame, depth: pd.DataFrame) -> Any:
    """Six panels: regions on the image, the output grid, bytes over depth; memory, MACs, latency per grid."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    g = max(plan.grids)
    grid = plan.grids[g]
    stitched = next((r.arrays.get("stitched_mean") for r in runs if r.params["grid"] == g), None)
    fig, axes = plt.subplots(2, 3, figsize=(15, 9.5))
    image_ax, out_ax, depth_ax = axes[0]
    image_ax.imshow(plan.raw_image)
    for k, tile in enumerate(grid.tiles):
        (r0, r1), (c0, c1) = tile.input_region
        colour = f"C{k % 10}"
        inset = 0.5 + 0.8 * k  # tiles overlap by their halo: shift each outline a little to keep it visible
        image_ax.add_patch(Rectangle((c0 - 0.5 + inset, r0 - 0.5 + inset), c1 - c0 - 2 * inset, r1 - r0 - 2 * inset,
                                     fill=False, edgecolor=colour, linewidth=2))  # fmt: skip
        image_ax.text(c0 + 2 + inset, r0 + 6 + inset, f"{tile.row},{tile.col}", color=colour, fontsize=9,
                      fontweight="bold")  # fmt: skip
    image_ax.set(title=f"input regions of the {g}x{g} tiles (halo included)", xticks=[], yticks=[])
    if stitched is not None:
        out_ax.imshow(stitched, cmap="viridis")
    height, width, channels = grid.output_shape
    for k, tile in enumerate(grid.tiles):
        (r0, r1), (c0, c1) = tile.output_region
        out_ax.add_patch(Rectangle((c0 - 0.5, r0 - 0.5), c1 - c0, r1 - r0, fill=False, edgecolor=f"C{k % 10}",
                                   linewidth=2))  # fmt: skip
        out_ax.text(c0, r0, f"{tile.row},{tile.col}", color="white", fontsize=9, va="top")
    out_ax.set(title=f"stitched output of {grid.layers[-1].name}: {height}x{width}x{channels} (channel mean)",
               xticks=[], yticks=[])  # fmt: skip
    depth_ax.semilogy(depth["depth"], depth["output_bytes"], "-", color="C0", linewidth=1)
    fused = depth[depth["fused"]]
    depth_ax.axvspan(fused["depth"].min() - 0.5, fused["depth"].max() + 0.5, color="C2", alpha=0.15,
                     label="fused block (tiled)")  # fmt: skip
    cut = exp.compressor_cut(depth)
    depth_ax.axhline(depth["output_bytes"].iloc[0], color="grey", linestyle=":", label="the image")
    depth_ax.plot([cut["depth"]], [cut["output_bytes"]], "v", color="C3", markersize=9,
                  label=f"first layer below the image: {cut['layer']}")  # fmt: skip
    depth_ax.set(xlabel="layer (depth)", ylabel="output bytes per image", title="a CNN as a compressor (C18)")
    depth_ax.legend(fontsize=8)
    grids = summary["devices"] ** 0.5
    mem_ax, mac_ax, clock_ax = axes[1]
    mem_ax.plot(grids, summary["peak_per_worker_bytes"] / 1e6, "-o", label="per worker, from the shapes")
    mem_ax.plot(grids, summary["untiled_peak_bytes"] / 1e6, "--", color="black", label="untiled")
    mem_ax.set(xlabel="tiles per side g", ylabel="peak activation memory (MB)", title="memory per worker")
    mem_ax.legend(fontsize=8)
    mac_ax.plot(grids, summary["mac_redundancy"], "-o", color="C1")
    mac_ax.set(xlabel="tiles per side g", ylabel="total tile MACs / untiled MACs", title="halo recomputation")
    clock_ax.plot(grids, summary["clock_s"] * 1e3, "-o", color="C3", label="latency (emulated clock)")
    clock_ax.set(xlabel="tiles per side g", ylabel="latency (ms, emulated clock)", title="latency and bytes gathered")
    bytes_ax = clock_ax.twinx()
    bytes_ax.plot(grids, summary["gathered_bytes"] / 1e3, "s--", color="C4", label="bytes to the gather node")
    bytes_ax.set_ylabel("kB sent to the gather node", color="C4")
    bytes_ax.grid(False)
    for ax in (mem_ax, mac_ax, clock_ax):
        ax.set_xticks(list(grids))
    p = plan.params
    fig.suptitle(
        f"qiao/fig3-6: fused tiles of {p.network_name} (alpha {p.alpha}, {p.image_size}x{p.image_size}) through "
        f"{p.last_layer} on {p.device_profile} devices"
    )
    fig.tight_layout()
    return fig


def tiles_verdict(plan: exp.Plan, summary: pd.DataFrame, depth: pd.DataFrame) -> verdict.Verdict:
    """Stitched = untiled (correctness); bytes fall with depth and memory per worker with g (structure)."""
    p = plan.params
    worst = float(summary["relative_diff"].max())
    exact = verdict.holds(
        "stitched equals untiled",
        verdict.within(worst, FLOAT32_TOLERANCE),
        f"largest |stitched - untiled| {worst:.2g} of the output's largest value, over {len(summary)} grid(s)",
        f"the tiles' stitched output equals the untiled output to {FLOAT32_TOLERANCE:g} (float32, relative)",
        basis=Basis.CORRECTNESS,
    )
    peak = depth.loc[depth["output_bytes"].idxmax()]
    maps = depth[depth["output_shape"].map(lambda s: len(s) == MAP_RANK and s[0] > 1)]
    last = maps.iloc[-1]
    shapes = Noise.none("bytes and memory are counted from the layers' shapes")
    compressor = verdict.effect(
        pd.Series([float(peak["output_bytes"]), float(last["output_bytes"])], index=[peak["depth"], last["depth"]]),
        -1,
        shapes,
        claim=f"output bytes, the largest layer ({peak['layer']}) to the last feature map ({last['layer']}): early "
        "layers output more than later ones (qiao/C18)",
        basis=Basis.STRUCTURE,
        axis="layer",
        name="a CNN as a compressor",
    )
    per_worker = summary.assign(g=summary["devices"] ** 0.5).set_index("g")["peak_per_worker_bytes"].sort_index()
    memory = verdict.trend(
        per_worker.astype(float),
        -1,
        shapes,
        claim="peak activation memory per worker against tiles per side (qiao/C19: a tile holds less than the map)",
        basis=Basis.STRUCTURE,
        axis="g",
        name="memory per worker",
    )
    choices = [
        f"the network: {p.network_name} (alpha {p.alpha}, random seeded weights), fused through {p.last_layer}",
        f"the input: one {p.image_size}x{p.image_size} PlantVillage tomato leaf (validation image {p.image_index})",
        f"the devices: {p.device_profile}, one per tile; the client gathers and stitches",
    ]
    return verdict.decide([exact, compressor, memory], fitted=[], predicted=[], noise=shapes, choices=choices)


def reduction(plan: exp.Plan) -> str:
    """How the run is smaller than the full profile's (the survey gives no size)."""
    p, full = plan.params, exp.FULL_PROFILE
    parts = []
    if p.image_size < full["image_size"]:
        parts.append(f"a {p.image_size} px image of the full profile's {full['image_size']} px")
    if max(p.grids) < max(full["grids"]):
        parts.append(f"grids g = {list(p.grids)} of {full['grids']}")
    if p.repeats < full["repeats"]:
        parts.append(f"{p.repeats} timed runs per tile of {full['repeats']}")
    return "; ".join(parts)


def render_report(
    root: Path, plan: exp.Plan, stored: list[StoredRun], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """The notebook's items (``edgelab.papers.notebook.report``): ``render`` with the runs' summary."""
    return render(root, plan, stored, exp.summarize(plan, stored), notebook=notebook, parameters=parameters)


def render(
    root: Path,
    plan: exp.Plan,
    runs: list[StoredRun],
    summary: pd.DataFrame,
    *,
    notebook: str,
    parameters: dict[str, Any],
) -> list[ReportItem]:
    """Write the figure and its tables; return the manifest entry."""
    p = plan.params
    depth = exp.depth_bytes(plan)
    png = save_figure(draw(plan, runs, summary, depth), ID, root=root)
    cut = exp.compressor_cut(depth)
    peak = depth.loc[depth["output_bytes"].idxmax()]
    # The last layer with a spatial output (a 1x1 map is a classifier's, not a feature map).
    last_map = depth[depth["output_shape"].map(lambda s: len(s) == MAP_RANK and s[0] > 1)].iloc[-1]
    g = max(plan.grids)
    largest = next(r for r in runs if r.params["grid"] == g).tables["tiles"]
    calibration = runs[0].summary["calibration"]
    shown = summary.assign(
        max_abs_diff=summary["max_abs_diff"].map(lambda v: f"{v:.2g}"),
        relative_diff=summary["relative_diff"].map(lambda v: f"{v:.2g}"),
        memory_ratio=summary["memory_ratio"].round(3),
        mac_redundancy=summary["mac_redundancy"].round(3),
        clock_s=summary["clock_s"].round(4),
        max_tile_cpu_s=summary["max_tile_cpu_s"].round(4),
    )
    worst = summary.loc[summary["devices"].idxmax()]
    md = [
        f"# {ID}: DeepThings' fused tiles — the early layers cut vertically",
        "",
        f"{p.network_name} (alpha {p.alpha}, random seeded weights) on a {p.image_size}x{p.image_size} PlantVillage "
        f"tomato leaf (validation image {p.image_index}, {plan.dataset.source}), fused through `{p.last_layer}` "
        f"({len(plan.grids[g].layers)} layers, output {plan.grids[g].output_shape}). Each of g x g "
        f"{p.device_profile} device workers receives its tile's image region, halo included, runs the fused "
        "layers with padding only where the tile meets the map's border, and sends its output to the gather node "
        "(the client), which stitches them and compares with the untiled output it computes itself.",
        "",
        markdown_table(shown),
        "",
        "`max_abs_diff`: stitched against untiled (float32); `peak_per_worker_bytes`: the largest tile's padded input "
        "plus output of one layer, from the shapes, against the same for the whole map (`untiled_peak_bytes`); "
        "`measured_peak_rss_delta_bytes`: the worker process's peak resident memory during a run above its "
        "resident memory before (Linux VmHWM; TensorFlow's allocator keeps buffers between runs, so it is small "
        "and noisy); `gathered_bytes` / `sent_bytes`: the tiles' outputs and inputs as Dask serializes them "
        f"(compression: {runs[0].summary['compression']}); `mac_redundancy`: total tile MACs over untiled MACs; "
        f"`clock_s`: {CLOCK}; speed factor {calibration['speed_factor']:.2f} ({calibration['profile']}).",
        "",
        f"The {g}x{g} tiles:",
        "",
        markdown_table(largest.assign(cpu_s=largest["cpu_s"].round(5))),
        "",
        f"Bytes over depth (C18): the largest output is `{peak['layer']}` ({int(peak['output_bytes']):,} B, layer "
        f"{int(peak['depth'])} of {len(depth) - 1}); the image is {int(depth['output_bytes'].iloc[0]):,} B; the "
        f"first layer whose output is smaller than the image is `{cut['layer']}` (layer {int(cut['depth'])}, "
        f"{int(cut['output_bytes']):,} B), a cheap place for the horizontal cut; the last feature map "
        f"(`{last_map['layer']}`) is {int(last_map['output_bytes']):,} B and the network's output "
        f"{int(depth['output_bytes'].iloc[-1]):,} B.",
    ]
    result = tiles_verdict(plan, summary, depth)
    md += [
        "",
        f"At {worst['grid']} the peak activation memory per worker is {worst['memory_ratio']:.2f}x the untiled for "
        f"{worst['mac_redundancy']:.2f}x the MACs; the largest layer output ({peak['layer']}) is "
        f"{peak['output_bytes'] / last_map['output_bytes']:.0f}x the last feature map's ({last_map['layer']}). The "
        "survey gives no values: nothing is predicted.",
        "",
        result.markdown(),
    ]
    files = [png, *save_table(summary, "\n".join(md) + "\n", ID, root=root)]
    return [
        ReportItem.from_verdict(
            ID,
            files,
            result,
            data_source=data_source(plan.dataset.provenance()),
            clock=CLOCK,
            paper_values_shown=True,
            notebook=notebook,
            parameters=parameters,
            reduction=reduction(plan),
        )
    ]

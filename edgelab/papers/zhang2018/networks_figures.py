"""Zhang 2018's Figure 2: the three networks of the hierarchy, drawn from the models edgelab builds.

The report's figure (its image is lost from the text) shows the layer
structures of MobileNet (end devices), ResNet-34 (edge devices) and WRN-28-10
(the cloud). Here each network is built (``edgelab.models.tiers``), its layers
listed with output shapes and parameters, and drawn as its profile: channels
and spatial size of every convolution's output along the depth. The totals sit
beside the report's Table 1 (parameters) and the first layers beside its
Table 3; WRN-28-10 is shown with both heads (the canonical one and the one
whose total the report prints). The item's checks are structural (counts and
shapes of what was built against the report's): it is "consistent" at best,
and the same at every size (nothing is trained or timed).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.common.results import atomic_write_text
from edgelab.models.tiers import build_tier_network, sizes
from edgelab.papers.zhang2018.networks import NetworksPlan
from edgelab.report import verdict
from edgelab.report.manifest import ReportItem, item_path
from edgelab.report.reference import load_reference
from edgelab.report.style import markdown_table, save_figure, save_table
from edgelab.report.verdict import Basis, Check, Noise

ID = "zhang2018/fig2"
#: The networks drawn, with the report's column name in Table 1 and the tier that runs it.
NETWORKS = (
    ("mobilenet", "MobileNet", "end"),
    ("resnet34", "ResNet", "edge"),
    ("wrn-28-10", "WRN", "cloud"),
    ("wrn-28-10-flatten", "WRN", "cloud"),
)
CLOCK = "none (layer shapes and parameter counts of the built models; nothing timed)"
#: The head the report's WRN-28-10 total implies is a choice: the hierarchy runs the canonical one.
CHOICES = [
    "WRN-28-10's head: the canonical pooled one (36.55 M parameters, what the hierarchy runs) or one that flattens "
    "the last 8x8x640 map (40.59 M, the report's 40.6 M; the catalog's P-WRN); the report names no implementation",
    "parameters count batch normalisation's moving statistics (Keras' total, as the report's MobileNet does)",
]


def layer_table(model: Any) -> pd.DataFrame:
    """Every layer with weights or a new shape: name, type, output shape (per image), parameters."""
    rows = []
    for layer in model.layers:
        shape = tuple(layer.output.shape[1:])
        rows.append(
            {
                "layer": layer.name,
                "type": type(layer).__name__,
                "output": "x".join(str(d) for d in shape),
                "parameters": int(sum(math.prod(w.shape) for w in layer.weights)),
            }
        )
    return pd.DataFrame(rows)


def totals(built: dict[str, Any]) -> pd.DataFrame:
    """Each network's parameters beside Table 1's, and its first convolution beside Table 3's."""
    printed = load_reference("zhang2018/table1")
    params = printed[printed["row"] == "number_of_parameters"].set_index("column")["value"].astype(float)
    first = load_reference("zhang2018/table3")
    first_params = first[first["row"] == "number_of_parameters"].set_index("column")["value"]
    first_out = first[first["row"] == "dimension_of_output"].set_index("column")["value"]
    rows = []
    for name, column, tier in NETWORKS:
        model = built[name]
        counted = sizes(model)
        stem = next(layer for layer in model.layers if layer.weights)
        rows.append(
            {
                "network": name,
                "tier": tier,
                "parameters (M)": round(counted["parameters"] / 1e6, 2),
                "paper (M)": params[column],
                "first layer parameters": int(sum(math.prod(w.shape) for w in stem.weights)),
                "paper": first_params.get(column, "-"),
                "first layer output": "x".join(str(d) for d in stem.output.shape[1:]),
                "paper output": first_out.get(column, "-"),
            }
        )
    return pd.DataFrame(rows)


def draw(built: dict[str, Any]) -> Any:
    """Each network's profile: output channels of every convolution along the depth, marked by spatial size."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, (name, column, tier) in zip(axes, NETWORKS[:3], strict=True):
        convs = [layer for layer in built[name].layers if "Conv" in type(layer).__name__]
        channels = [layer.output.shape[-1] for layer in convs]
        spatial = [layer.output.shape[1] for layer in convs]
        for size in sorted(set(spatial), reverse=True):
            xs = [i for i, s in enumerate(spatial) if s == size]
            ax.bar(xs, [channels[i] for i in xs], width=1.0, label=f"{size}x{size}")
        params = sizes(built[name])["parameters"] / 1e6
        ax.set(
            title=f"{column} on the {tier} ({params:.2f} M parameters)",
            xlabel="convolution (input to output)",
            ylabel="output channels",
        )
        ax.set_yscale("log", base=2)
        ax.legend(title="map", fontsize=7, title_fontsize=7)
    fig.suptitle("zhang2018/fig2: the three networks, drawn from the built models (32x32x3 input)")
    fig.tight_layout()
    return fig


def checks(built: dict[str, Any], table: pd.DataFrame) -> list[Check]:
    """The built networks against the report: parameters (Table 1), first layers (Table 3), inputs and outputs."""
    shown = table.set_index("network")
    found = [
        verdict.level(
            shown["paper (M)"].astype(float),
            shown["parameters (M)"],
            list(shown.index),
            Noise.none("counted"),
            basis=Basis.STRUCTURE,
            unit=" M",
            each=True,
            axis="network",
            name="parameters",
        )
    ]
    stated = shown[shown["paper"] != "-"]
    off = [
        n
        for n, r in stated.iterrows()
        if str(r["first layer parameters"]) != str(r["paper"]) or r["first layer output"] != r["paper output"]
    ]
    found.append(
        verdict.holds(
            "first layers",
            not off,
            ", ".join(
                f"{n}: {r['first layer parameters']} parameters, {r['first layer output']}"
                for n, r in stated.iterrows()
            ),
            "each upper network's first convolution has Table 3's parameters and output",
            basis=Basis.STRUCTURE,
            note=f"not at {', '.join(off)}" if off else "",
        )
    )
    prose = load_reference(ID).set_index(["condition", "metric"])["value"]
    want = {
        "mobilenet": prose["MobileNet on end devices", "outputs"],
        "resnet34": prose["ResNet on edge devices", "outputs"],
        "wrn-28-10": prose["WRN on the cloud", "outputs"],
    }
    side = prose["MobileNet on end devices", "input_shape"]
    got = {n: (int(built[n].output.shape[-1]), "x".join(str(d) for d in built[n].input.shape[1:])) for n in want}
    wrong = [n for n, (out, shape) in got.items() if out != int(want[n]) or shape != side]
    found.append(
        verdict.holds(
            "inputs and outputs",
            not wrong,
            ", ".join(f"{n}: {shape} in, {out} out" for n, (out, shape) in got.items()),
            f"{side} images in; the report's {want['mobilenet']} coarse labels out of MobileNet, "
            f"{want['resnet34']} fine labels out of ResNet-34 and WRN-28-10",
            basis=Basis.STRUCTURE,
            note=f"not at {', '.join(wrong)}" if wrong else "",
        )
    )
    return found


def render_report(
    root: Path, plan: NetworksPlan, results: None, *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """The notebook's items (``edgelab.papers.notebook.report``): ``render``."""
    return render(root, notebook=notebook, parameters=parameters)


def render(root: Path, *, notebook: str, parameters: dict[str, Any]) -> list[ReportItem]:
    """Build the networks, write the figure, the totals and every layer table; return the manifest entry."""
    built = {name: build_tier_network(name) for name, _, _ in NETWORKS}
    png = save_figure(draw(built), ID, root=root)
    table = totals(built)
    result = verdict.decide(
        checks(built, table),
        fitted=[],
        predicted=[],
        noise=Noise.none("the networks are built and counted, not trained or timed"),
        choices=CHOICES,
    )
    md = [
        f"# {ID}: the networks of the end, edge and cloud tiers",
        "",
        "Built by `edgelab.models.tiers` for 32x32x3 CIFAR-100 images. Parameters count every weight, batch "
        "normalisation's moving statistics included (Keras' total, which is what the report prints for "
        "MobileNet). The report's values are its Table 1 (parameters) and Table 3 (first layers).",
        "",
        markdown_table(table),
        "",
        "MobileNet (width 0.5, 20 outputs) and ResNet-34 (biased 7x7/2 stem, 100 outputs) give the printed "
        "totals to their digits. The canonical WRN-28-10 has 36.55 M, not 40.6 M; the head that flattens the "
        "last 8x8x640 map into the dense layer (the catalog's P-WRN) gives 40.59 M: the report's total, "
        "though the report names no implementation. Every layer of each network: the CSV files beside this one.",
        "",
        "The figure's image is lost from the report; what it shows, the three networks' structures, is checked "
        "against the report's own numbers for them. These are counts and shapes of what was built "
        "(structural): they say the networks are the report's, not that anything it measured was reproduced.",
        "",
        result.markdown(),
    ]
    files = [png, *save_table(table, "\n".join(md) + "\n", ID, root=root)]
    for name, _, _ in NETWORKS:
        path = item_path(ID, "csv", root).with_name(f"fig2-layers-{name}.csv")
        atomic_write_text(path, layer_table(built[name]).to_csv(index=False))
        files.append(path)
    return [
        ReportItem.from_verdict(
            ID,
            files,
            result,
            data_source={"name": "none: layer shapes only", "source": "edgelab.models.tiers"},
            clock=CLOCK,
            paper_values_shown=True,
            notebook=notebook,
            parameters=parameters,
            reduction="",  # the networks are the same at every size
        )
    ]

"""Zhang 2018's privacy module: Tables 3 and 4, eq7 and eq8, and an inversion attack the report does not try.

Table 3 (the modules' output, parameters, file size) is measured from the
built networks. Table 4 (the time overhead of the module against the cloud
link's latency, run at the end or at an edge device) is the hierarchy's clock
(``edgelab.hierarchy.privacy.overhead``) beside the report's. The attack
(``edgelab.hierarchy.privacy.attack``) reconstructs the images from what the module
sends, knowing only the module's weights: it tests the report's claim C29 that
the module protects the images sent to the cloud (which made the weights).

Table 3's shapes and counts are structural checks; the clock's overheads
(Table 4, eq8's parts) and the attack are predictions, deterministic (nothing
in them is timed). eq7 is the definition Table 4 measures, with nothing of its
own to check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from edgelab.emulation.tier_clock import zhang2018_calibration
from edgelab.emulation.tiers import ZHANG2018
from edgelab.hierarchy import privacy
from edgelab.models.tiers import build_tier_network
from edgelab.papers.zhang2018.privacy import REPORT_TASK_IMAGES, PrivacyPlan
from edgelab.report import verdict
from edgelab.report.manifest import ReportItem
from edgelab.report.reference import REFERENCE_DIR, load_reference
from edgelab.report.style import data_source, markdown_table, save_figure, save_table
from edgelab.report.verdict import Basis, Check, Noise

#: The modules, by the network they come from and Table 3's column.
MODULES = (("resnet34", "ResNet"), ("wrn-28-10", "WRN"))
LATENCIES = (0.5, 1.0, 1.5, 2.0)
CLOCK = (
    "the hierarchy's clock: zhang2018/table1's time per image of WRN-28-10 on each tier times the first "
    "convolution's share of its multiply-accumulates, and bytes at the tiers' links (1 Gbit/s, assumed)"
)
#: Why the clock's overheads carry no noise.
EXACT = "the clock: Table 1's times, the first convolution's share of the work and bytes at the link; nothing timed"
FITTED = ["WRN-28-10's time per image on each tier (zhang2018/table1, the clock's calibration)"]
CHOICES = [
    "links of 1 Gbit/s (the report states no bandwidth)",
    "the latency varied is the cloud link's, added once per task",
    "the module is WRN-28-10's first convolution (the cloud runs WRN; the report does not say which)",
    "encrypting at an edge: the images cross the end-edge link at its rate, with no added latency",
    "the module's compute: its share of WRN-28-10's multiply-accumulates of the network's Table 1 time on that tier",
]


def modules() -> dict[str, privacy.Stem]:
    """Each upper network's first convolution, with the network's seeded weights."""
    return {name: privacy.stem(build_tier_network(name), name) for name, _ in MODULES}


def table3(stems: dict[str, privacy.Stem]) -> pd.DataFrame:
    """Output, parameters, file and payload bytes of each module beside Table 3."""
    printed = load_reference("zhang2018/table3").set_index(["row", "column"])["value"]
    rows = []
    for name, column in MODULES:
        s = stems[name]
        rows.append(
            {
                "module of": name,
                "output": "x".join(map(str, s.output_shape)),
                "report output": printed["dimension_of_output", column],
                "parameters": s.parameters,
                "report parameters": int(printed["number_of_parameters", column]),
                "weights file (KB)": round(s.file_bytes() / 1e3, 1),
                "report (KB)": float(printed["size_of_weights_file", column]),
                "payload per 50 images (KB)": round(s.payload_bytes(50) / 1e3, 1),
                "raw images (KB)": round(50 * 3072 / 1e3, 1),
            }
        )
    return pd.DataFrame(rows)


def table4(stems: dict[str, privacy.Stem]) -> pd.DataFrame:
    """The overhead of WRN's module, run at the end or at an edge, against the cloud link's latency."""
    printed = load_reference("zhang2018/table4").set_index(["row", "column"])["value"].astype(float)
    model = stems["wrn-28-10"]
    share = privacy.stem_share(build_tier_network("wrn-28-10"))
    calibration = zhang2018_calibration()
    rows = []
    for at in ("end", "edge"):
        for latency in LATENCIES:
            o = privacy.overhead(
                ZHANG2018, calibration, "wrn-28-10", share, model.payload_bytes(50), latency_s=latency, at=at
            )
            rows.append(
                {
                    "encrypt at": at,
                    "latency (s)": latency,
                    "report overhead (%)": printed[f"encrypt_at_{at}_dev", f"network_latency_{latency:g}s"],
                    "clock overhead (%)": round(o["overhead_pct"], 2),
                    "delta t_encrypt (ms)": round(1e3 * o["delta_encrypt_s"], 2),
                    "delta t_comm (ms)": round(1e3 * o["delta_comm_s"], 2),
                    "t_wo (s)": round(o["t_wo_s"], 3),
                }
            )
    return pd.DataFrame(rows)


def attacks(stems: dict[str, privacy.Stem], images: np.ndarray) -> pd.DataFrame:
    """How well an attacker holding each module's features and weights reconstructs the images."""
    return pd.DataFrame([{"module of": name, **privacy.attack(stems[name], images)} for name, _ in MODULES])


def draw(stems: dict[str, privacy.Stem], images: np.ndarray) -> Any:
    """Four images, and what an attacker recovers from each module's features."""
    import matplotlib.pyplot as plt

    shown = images[:4]
    x = shown.astype(np.float32) / 255.0
    rows = [("sent by neither: the image", x)]
    for name, _ in MODULES:
        features = np.asarray(stems[name].model.predict_on_batch(x))
        rows.append((f"recovered from {name}'s module", privacy.invert(stems[name], features)))
    fig, axes = plt.subplots(len(rows), len(shown), figsize=(1.8 * len(shown), 1.9 * len(rows)))
    for r, (title, batch) in enumerate(rows):
        for c in range(len(shown)):
            axes[r, c].imshow(np.clip(batch[c], 0, 1))
            axes[r, c].set_xticks([])
            axes[r, c].set_yticks([])
        axes[r, 0].set_ylabel(title, fontsize=7)
    fig.suptitle("zhang2018/table3: what the 'encryption' module hides from whoever holds its weights")
    fig.tight_layout()
    return fig


def table3_checks(t3: pd.DataFrame, attacked: pd.DataFrame) -> list[Check]:
    """The modules against Table 3 and C24 (structural), and C29 against the attack (a prediction)."""
    exact = bool((t3["output"] == t3["report output"]).all() and (t3["parameters"] == t3["report parameters"]).all())
    found = [
        verdict.holds(
            "outputs and parameters",
            exact,
            ", ".join(f"{r['module of']}: {r['output']}, {r['parameters']:,}" for r in t3.to_dict("records")),
            "each module's output shape and parameters are Table 3's",
            basis=Basis.STRUCTURE,
        ),
        verdict.level(
            t3.set_index("module of")["report (KB)"],
            t3.set_index("module of")["weights file (KB)"],
            list(t3["module of"]),
            Noise.none("the file Keras writes, counted"),
            basis=Basis.STRUCTURE,
            unit=" KB",
            each=True,
            axis="module of",
            name="weights file",
        ),
    ]
    mobilenet = int(build_tier_network("mobilenet").count_params())
    share = pd.Series({name: 100 * p / mobilenet for name, p in zip(t3["module of"], t3["parameters"], strict=True)})
    prose = _prose("zhang2018/table3")
    paper = pd.Series(
        {
            "resnet34": float(prose["ResNet encryption module vs MobileNet", "parameter_share_pct"]),
            "wrn-28-10": float(prose["WRN encryption module vs MobileNet", "parameter_share_pct"]),
        }
    )
    found.append(
        verdict.level(
            paper,
            share,
            list(paper.index),
            Noise.none("parameters counted"),
            basis=Basis.STRUCTURE,
            unit="%",
            each=True,
            axis="module of",
            name="C24",
        )
    )
    ssim = float(attacked["ssim_min"].min())
    recovered = verdict.within(verdict.RECOVERED_SSIM, ssim)
    found.append(
        verdict.holds(
            "C29",
            not recovered,
            f"{int(attacked['images'].iloc[0])} images rebuilt from each module's features and weights: PSNR "
            f"{attacked['psnr_min_db'].min():.0f} dB or more, SSIM at least {np.floor(ssim * 1e4) / 1e4:.4f}",
            "the module protects the images from the cloud it sends to (which made its weights): an attacker "
            f"holding the weights rebuilds no image (worst SSIM under {verdict.RECOVERED_SSIM})",
            basis=Basis.MODELLED,
            note="each module is linear up to its bias and has more outputs (16,384) than inputs (3,072): least "
            "squares inverts it to float rounding; it hides the image only from whoever lacks the weights"
            if recovered
            else "",
        )
    )
    return found


def _prose(item_id: str) -> pd.Series:
    """The catalog's prose values of ``item_id``, by condition and metric.

    An item whose table has a file of its own keeps its prose values in the
    paper's shared file, which ``load_reference`` does not return for it.
    """
    paper = item_id.partition("/")[0]
    rows = pd.read_csv(REFERENCE_DIR / paper / "prose_values.csv")
    return rows[rows["id"] == item_id].set_index(["condition", "metric"])["value"]


def table4_checks(t4: pd.DataFrame) -> list[Check]:
    """The clock's overheads against Table 4, and C26-C28 on them."""
    keyed = t4.assign(cell=[f"{a} L={lat:g}" for a, lat in zip(t4["encrypt at"], t4["latency (s)"], strict=True)])
    keyed = keyed.set_index("cell")
    exact = Noise.none(EXACT)
    found = [
        verdict.level(
            keyed["report overhead (%)"].astype(float),
            keyed["clock overhead (%)"],
            list(keyed.index),
            exact,
            basis=Basis.MODELLED,
            unit="%",
            axis="cell",
        )
    ]
    by = t4.pivot_table(index="latency (s)", columns="encrypt at", values="clock overhead (%)")
    for at in ("end", "edge"):
        found.append(
            verdict.trend(
                by[at],
                -1,
                exact,
                claim=f"the overhead, encrypting at the {at}, as the latency",
                basis=Basis.MODELLED,
                axis="L",
                name=f"C26 ({at})",
            )
        )
    lower = bool((by["edge"] < by["end"]).all())
    found.append(
        verdict.holds(
            "C27",
            lower,
            ", ".join(f"L={lat:g}: edge {r['edge']:.2f}% vs end {r['end']:.2f}%" for lat, r in by.iterrows()),
            "encrypting on the stronger (edge) device costs less than on the end device at every latency",
            basis=Basis.MODELLED,
        )
    )
    found.append(
        verdict.holds(
            "C28",
            None,
            f"{by.min().min():.2f}% at {by.index.max():g} s on the clock",
            'in real systems with large, unstable latency the overhead is "considerably small"',
            basis=Basis.MODELLED,
            undecided="qualitative",
            note="no bound is stated, and no run here has unstable latency",
        )
    )
    return found


def eq8_check(t4: pd.DataFrame) -> Check:
    """C25: delta t_comm is subtle beside delta t_encrypt, on the clock."""
    comm, enc = t4["delta t_comm (ms)"], t4["delta t_encrypt (ms)"]
    subtle = bool((comm < enc).all())
    return verdict.holds(
        "C25",
        subtle,
        f"delta t_comm {comm.max():.2f} ms against delta t_encrypt {enc.min():.2f}-{enc.max():.2f} ms per task",
        "delta t_comm is subtle compared with the encryption's compute difference: smaller at every setting",
        basis=Basis.MODELLED,
        note=""
        if subtle
        else "the module sends 16,384 float32 values per image for 3,072 uint8 bytes (21x); at the assumed "
        "1 Gbit/s that is more than the first convolution's few ms. No bandwidth makes both hold: a link fast "
        "enough for C25 leaves Table 4's overhead at about 1%, the first convolution being a tiny share of "
        "WRN-28-10's work",
    )


def plan_facts(plan: PrivacyPlan) -> str:
    """What nbval checks: the modules beside Table 3 (weights files left out), and Table 4 on the clock."""
    stems = modules()
    t3 = table3(stems).drop(columns=["weights file (KB)"]).to_string(index=False)
    return f"{t3}\n{table4(stems).to_string(index=False)}"


def render_report(
    root: Path, plan: PrivacyPlan, results: None, *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """The notebook's items (``edgelab.papers.notebook.report``): ``render`` with the plan's images."""
    data = plan.dataset
    return render(root, data.x_test, data.provenance(), notebook=notebook, parameters=parameters)


def render(
    root: Path, images: np.ndarray, data: dict[str, Any], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """Write Tables 3 and 4 and eq7, eq8 beside the report's values; return their manifest entries."""
    stems = modules()
    t3, t4, attacked = table3(stems), table4(stems), attacks(stems, images)
    source = data_source(data)
    entry = {"notebook": notebook, "parameters": parameters, "paper_values_shown": True, "data_source": source}
    png = save_figure(draw(stems, images), "zhang2018/table3", root=root)
    result3 = verdict.decide(
        table3_checks(t3, attacked),
        fitted=[],
        predicted=["C29: the attack's reconstructions"],
        noise=Noise.none("shapes and counts of the built modules; the attack is least squares on fixed images"),
        choices=["the weights file is Keras' HDF5 for the layer alone (the report names no format)"],
    )
    md3 = [
        "# zhang2018/table3: the privacy ('encryption') module: the upper network's first convolution",
        "",
        markdown_table(t3),
        "",
        "Outputs and parameters are the built networks' own; the file is the one Keras writes for the layer "
        "(HDF5), whose container differs from the report's by a few KB. Each module sends 16,384 float32 "
        "values per image where the image is 3,072 bytes: 21x the bytes.",
        "",
        f"Beyond the report's numbers, its claim C29 (the module protects the images sent to the cloud): an "
        f"attacker who holds the module's weights (the upper tier made them) and the features it receives solves "
        f"for the image by least squares (LSQR over the convolution; no training data, no image prior), on "
        f"{len(images)} test images ({data.get('source')}):",
        "",
        markdown_table(attacked.round(6)),
        "",
        "Both modules are linear up to their bias and have more outputs than inputs, so the images come back "
        "to within float rounding: the module is no encryption against the tier it sends to. It hides the "
        "image only from someone without the weights.",
        "",
        result3.markdown(),
    ]
    files3 = [png, *save_table(t3, "\n".join(md3) + "\n", "zhang2018/table3", root=root)]
    lo, hi = t4["clock overhead (%)"].min(), t4["clock overhead (%)"].max()
    share = privacy.stem_share(build_tier_network("wrn-28-10"))
    extra = 0.39  # s per task: the catalog's least-squares fit of the report's rows (0.37-0.41 s)
    feature_mb = stems["wrn-28-10"].payload_bytes(50) / 1e6
    cells = [f"{a} L={lat:g}" for a, lat in zip(t4["encrypt at"], t4["latency (s)"], strict=True)]
    result4 = verdict.decide(
        table4_checks(t4), fitted=FITTED, predicted=cells, noise=Noise.none(EXACT), choices=CHOICES
    )
    md4 = [
        "# zhang2018/table4: time overhead of the module against the cloud link's latency",
        "",
        "One task of 50 images to the cloud (WRN-28-10), with the module run at the end device or at an edge "
        "device, on the hierarchy's clock (eq7: overhead = t_w - t_wo; eq8: = delta t_encrypt + delta t_comm):",
        "",
        markdown_table(t4),
        "",
        f"The clock's overhead is {lo:.1f}-{hi:.1f}% where the report's is 15.9-57.1%. The report's ordering (the "
        "overhead falls as latency grows, and is lower at the edge than at the end) is the clock's too, but "
        "not the size: the report's rows fit a fixed extra 0.37-0.41 s per task (the catalog's derived fit), "
        f"while the first convolution is {100 * share:.4f}% of WRN-28-10's work (a few ms even on an end "
        "device). Sending its features is the "
        f"larger part here (claim C25 says the opposite): {feature_mb:.2f} MB instead of 0.15 MB per task. The "
        f"report's extra {extra} s would take a link of about "
        f"{8 * (feature_mb - 0.1536) / extra:.0f} Mbit/s to come from bytes alone; its bandwidth is not stated.",
        "",
        result4.markdown(),
    ]
    files4 = save_table(t4, "\n".join(md4) + "\n", "zhang2018/table4", root=root)
    eq = t4[
        ["encrypt at", "latency (s)", "t_wo (s)", "delta t_encrypt (ms)", "delta t_comm (ms)", "clock overhead (%)"]
    ]
    result7 = verdict.decide(
        [],
        fitted=[],
        predicted=[],
        noise=Noise.none("a definition"),
        reason="a definition (overhead = t_w - t_wo) into which the report plugs no values: its values are "
        "Table 4's, judged there",
        reason_class="qualitative",
    )
    files7 = save_table(
        eq,
        "# zhang2018/eq7: Overhead = t_w - t_wo\n\nOn the clock, per task of 50 images (see zhang2018/table4):\n\n"
        + markdown_table(eq)
        + "\n"
        + result7.markdown(),
        "zhang2018/eq7",
        root=root,
    )
    result8 = verdict.decide([eq8_check(t4)], fitted=FITTED, predicted=cells, noise=Noise.none(EXACT), choices=CHOICES)
    files8 = save_table(
        eq,
        "# zhang2018/eq8: Overhead = delta t_encrypt + delta t_comm\n\nThe two parts on the clock: moving the "
        "first convolution to the weaker device, and sending float32 features instead of uint8 pixels. The "
        "transfer is the larger part at the assumed 1 Gbit/s; the report says the compute is (C25).\n\n"
        + markdown_table(eq)
        + "\n"
        + result8.markdown(),
        "zhang2018/eq8",
        root=root,
    )
    attack_size = (
        ""
        if len(images) >= REPORT_TASK_IMAGES
        else f"the attack (C29) on {len(images)} test images, not a task of {REPORT_TASK_IMAGES}"
    )
    return [
        ReportItem.from_verdict(
            "zhang2018/table3",
            files3,
            result3,
            clock="none (shapes, parameter counts, file sizes; the attack is not timed)",
            reduction=attack_size,
            **entry,
        ),
        *(
            ReportItem.from_verdict(item_id, files, result, clock=CLOCK, reduction="", **entry)
            for item_id, files, result in (
                ("zhang2018/table4", files4, result4),
                ("zhang2018/eq7", files7, result7),
                ("zhang2018/eq8", files8, result8),
            )
        ),
    ]

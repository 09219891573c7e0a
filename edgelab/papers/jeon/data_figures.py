"""Jeon et al., Figures 1, 7, 8 and 9 and the augmentation arithmetic: the model, the data and its training.

fig1 is read from the real flat MobileNetV2 (``edgelab.models.mobilenet.flat_mobilenet_v2``); fig7, fig8 and
jeon/eq-augmentation are counts of the data set as loaded and as augmented on the device workers
(``edgelab.papers.jeon.augment``); fig9 is the Keras history of the two training phases, F1 and the confusion matrix.

Two limits of this workplace, not of the paper (catalog "How to read"): the Kaggle PlantVillage files and the
ImageNet weights cannot be downloaded here. A run on the 1,600-image offline sample, or from random weights, says so
in every item it touches; its counts and accuracies are then not the paper's and are not judged, while structural
facts (tensor shapes, bytes, whether the counts add up) still are.

Paper: Jeon, Lee, Lee, Kim and Kim, "Implementation of AIoT Edge Cluster System via Distributed Deep Learning
Pipeline" (catalog: papers/catalog/jeon.md). Figure 1's block: Sandler et al., "MobileNetV2: Inverted Residuals and
Linear Bottlenecks", CVPR 2018, arXiv:1801.04381.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import numpy as np
import pandas as pd

from edgelab.common.checks import integer, keywords
from edgelab.common.errors import ConfigError
from edgelab.report.manifest import ReportItem
from edgelab.report.reference import load_reference
from edgelab.report.style import PAPER_STYLE, apply_style, markdown_table, save_figure, save_table
from edgelab.report.verdict import (
    ACCURACY_TOLERANCE,
    IMBALANCE_RATIO,
    LEVEL_TOLERANCE,
    Basis,
    Check,
    Noise,
    Verdict,
    accuracy_gap,
    decide,
    holds,
    within,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

MOSTLY_SYNTHETIC = 0.5  # fig8's flag in the text (not a verdict): a class whose share of augmented copies exceeds this
# fig8 draws the paper's target line when it is at most this multiple of the run's target (else the bars flatten).
PAPER_LINE_SPAN = 2
PAPER_CLASSES = 10  # tomato classes (l.139)
FP32_BYTES = 4
P13_LINE = (
    "Augmentation was applied to the training split only: the train/validation split came first and validation "
    "images are never augmented, so no copy of a validation image reaches training (jeon/P13)."
)
_PER_CLASS = ("class", "device", "raw", "augmented", "factor", "made", "wall_s", "images_per_s")
_HISTORY = ("epoch", "phase", "loss", "accuracy", "val_loss", "val_accuracy")
_COUNTS = Noise.none("images are counted, not timed")
#: Trained values rest on one training run per model (the stream repeats reuse its weights).
TRAINING_RUNS = 1


def _item(item_id: str, files: list[Path], verdict: Verdict, shown: bool, clock: str, **common: Any) -> ReportItem:
    return ReportItem.from_verdict(item_id, files, verdict, paper_values_shown=shown, clock=clock, **common)


def _need(frame: pd.DataFrame, columns: tuple[str, ...], name: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing or frame.empty:
        raise ConfigError(name, list(frame.columns), f"a non-empty frame with columns {', '.join(columns)}")


class Record(TypedDict):
    """Where an item is written (``root``: ``reports/`` when None) and what the manifest records of its run.

    The keywords every ``render_*`` here takes.
    """

    root: Path | None
    notebook: str
    parameters: dict[str, Any]
    data_source: dict[str, Any]


def _record(function: str, record: Mapping[str, Any]) -> tuple[Path | None, dict[str, Any]]:
    """``record`` (``Record``) as the reports folder and the manifest's keywords, each keyword checked."""
    keywords(function, record, Record)
    missing = [key for key in Record.__required_keys__ if key not in record]
    if missing:
        raise TypeError(f"{function}() missing required keyword argument {sorted(missing)[0]!r}")
    return record["root"], {key: record[key] for key in ("notebook", "parameters", "data_source")}


def _shape(tensor: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in tensor.shape[1:])  # (H, W, C) without the batch axis


# ------------------------------------------------------------------ fig1 ----


def block_tensors(model: Any, block: str = "block_2") -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tensors of one inverted-residual block read from ``model``, and a ResNet-style counterpart's.

    Parameters
    ----------
    model
        A Keras model holding MobileNetV2's layers (``<block>_expand`` ... ``<block>_add``).
    block
        Name prefix of a stride-1 block with a residual add.

    Returns
    -------
    real, wide : pandas.DataFrame
        One row per tensor (layer, kind, shape, channels, bytes_fp32 per image, role). ``real`` starts with the
        layer feeding the block; ``wide`` is computed, not read: the same sizes with the skip joining the wide tensors.
    """
    names = [layer.name for layer in model.layers]
    if f"{block}_add" not in names or f"{block}_expand" not in names:
        raise ConfigError("block", block, "a MobileNetV2 block with expand and add layers, e.g. 'block_2'")
    by_output = {id(layer.output): layer for layer in model.layers}
    feed = by_output[id(model.get_layer(f"{block}_expand").input)]
    add = model.get_layer(f"{block}_add")
    joined = [by_output[id(t)].name for t in add.input]
    h, w, narrow = _shape(feed.output)
    wide_c = _shape(model.get_layer(f"{block}_expand").output)[2]
    skip = "skip source (block input)" + (", joined by the add" if feed.name in joined else "")
    real = [(feed.name, type(feed).__name__, _shape(feed.output), skip)]
    for layer in (m for m in model.layers if m.name.startswith(f"{block}_")):
        role = "block output" if layer is add else ("joined by the add" if layer.name in joined else "")
        real.append((layer.name, type(layer).__name__, _shape(layer.output), role))
    wide = [
        ("input (wide)", "Tensor", (h, w, wide_c), "skip source (block input), joined by the add"),
        ("reduce 1x1 + BN + ReLU", "Conv2D", (h, w, narrow), ""),
        ("conv 3x3 + BN + ReLU", "Conv2D", (h, w, narrow), ""),
        ("expand 1x1 + BN", "Conv2D", (h, w, wide_c), "joined by the add"),
        ("add (+ ReLU)", "Add", (h, w, wide_c), "block output"),
    ]
    columns = ["layer", "kind", "shape", "channels", "bytes_fp32", "role"]
    real, wide = (
        pd.DataFrame(
            [(n, k, "x".join(map(str, s)), s[-1], math.prod(s) * FP32_BYTES, r) for n, k, s, r in rows], columns=columns
        )
        for rows in (real, wide)
    )
    return real, wide


def _draw_block(ax: Axes, frame: pd.DataFrame, heading: str, narrow: int) -> None:
    n = len(frame)
    ax.set(xlim=(0, 10), ylim=(0, n + 1))
    ax.axis("off")
    ax.set_title(heading, fontsize=9)
    for i, row in enumerate(frame.itertuples()):
        y = n - i
        color = "#d9ead3" if row.channels <= narrow else "#f4cccc"
        label = f"{row.layer} ({row.kind})\n{row.shape}  ·  {row.bytes_fp32:,} B"
        ax.text(4.2, y, label, ha="center", va="center", fontsize=7, bbox={"fc": color, "ec": "0.3", "pad": 3})
        if i:
            ax.annotate("", xy=(4.2, y + 0.28), xytext=(4.2, y + 0.72), arrowprops={"arrowstyle": "->", "color": "0.3"})
    skip = frame.iloc[0]
    ax.annotate(
        "",
        xy=(7.2, 1.0),
        xytext=(7.2, n),
        arrowprops={"arrowstyle": "->", "color": "tab:blue", "connectionstyle": "arc3,rad=-0.25", "lw": 1.5},
    )
    text = f"skip holds\n{skip['shape']}\n{skip['bytes_fp32']:,} B\nper image"
    ax.text(9.3, (n + 1) / 2, text, ha="center", va="center", fontsize=8, color="tab:blue")


def render_fig1(*, image_size: int = 224, **record: Unpack[Record]) -> ReportItem:
    """jeon/fig1: MobileNetV2's real ``block_2`` with per-image activation bytes, beside a wide-skip counterpart.

    Parameters
    ----------
    image_size
        Side of the model's input (the paper does not state it; 224 gives the catalog's 56x56 tensors).
    **record
        ``Record``: the reports folder (``reports/`` when None) and what the manifest records of the run.

    Returns
    -------
    ReportItem
        png diagram, csv and md table; judged on claim C19 (structure and bytes, deterministic).
    """
    root, common = _record("render_fig1", record)
    from edgelab.models.mobilenet import flat_mobilenet_v2

    model = flat_mobilenet_v2(10, image_size=image_size, weights=None)
    real, wide = block_tensors(model, "block_2")
    narrow, wide_c = int(real.iloc[0]["channels"]), int(wide.iloc[0]["channels"])
    joined = real[real["role"].str.contains("joined by the add")]
    skip, wide_skip = int(real.iloc[0]["bytes_fp32"]), int(wide.iloc[0]["bytes_fp32"])
    # The add joins the block's input (the skip) and its projection, both narrow.
    pair = {str(real.iloc[0]["layer"]), "block_2_project_BN"}
    checks = [
        holds(
            "C19 structure",
            bool(set(joined["layer"]) == pair and (joined["channels"] == narrow).all() and narrow < wide_c),
            f"block_2_add joins {', '.join(joined['layer'])} ({', '.join(joined['shape'])}); expanded to {wide_c} ch",
            "the skip joins the narrow (bottleneck) tensors, not the expanded ones",
            basis=Basis.STRUCTURE,
        ),
        holds(
            "C19 memory",
            skip < wide_skip,
            f"skip {skip:,} B vs wide skip {wide_skip:,} B per image (fp32), {wide_skip / skip:.1f}x less",
            "the narrow skip holds fewer activation bytes than a skip carrying the wide tensor",
            basis=Basis.STRUCTURE,
            note="bytes are the shapes read from the model times 4: structure, not a measurement",
        ),
    ]
    verdict = decide(
        checks,
        fitted=[],
        predicted=[],
        noise=Noise.none("tensor shapes and fp32 bytes are read from the built model"),
        choices=[f"input {image_size}x{image_size} px (not stated, P14)"],
    )
    apply_style()
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 7.5), gridspec_kw={"width_ratios": [1, 1]})
    _draw_block(axes[0], real, "MobileNetV2 inverted residual (block_2, read from the model)", narrow)
    _draw_block(axes[1], wide, "ResNet-style counterpart: skip joins the wide tensors (computed)", narrow)
    fig.suptitle(f"jeon/fig1 — inverted residual vs wide skip, {image_size}x{image_size} input ({verdict.status})")
    png = save_figure(fig, "jeon/fig1", root=root)
    table = pd.concat(
        [real.assign(block="MobileNetV2 block_2 (read from the model)"), wide.assign(block="ResNet-style (computed)")]
    )
    md = [
        "# jeon/fig1 — The core operating mechanism of MobileNetV2",
        "",
        f"![jeon/fig1]({png.name})",
        "",
        f"Flat MobileNetV2 (`flat_mobilenet_v2`, weights=None: shapes do not depend on weights), {image_size}x"
        f"{image_size} input (not stated in the paper, P14). Bytes are per image at fp32. The expansion factor "
        f"{wide_c // narrow} comes from the MobileNetV2 paper, not from Jeon et al. (derived). The paper's figure has "
        "no values.",
        "",
        markdown_table(table[["block", "layer", "kind", "shape", "bytes_fp32", "role"]]),
        verdict.markdown(),
    ]
    files = [png, *save_table(table, "\n".join(md), "jeon/fig1", root=root)]
    return _item("jeon/fig1", files, verdict, False, "none (tensor shapes and byte counts)", **common)


# ------------------------------------------------------------------ fig7 ----


def class_counts(y: np.ndarray, class_names: list[str]) -> pd.DataFrame:
    """Images per class of integer labels ``y``, every class of ``class_names`` listed (0 when absent).

    Parameters
    ----------
    y
        1-D integer labels in ``0 .. len(class_names) - 1``.
    class_names
        Name of each class index.

    Returns
    -------
    pandas.DataFrame
        Columns ``class``, ``class_name``, ``count``.

    Examples
    --------
    >>> class_counts(np.array([0, 1, 1]), ["a", "b"])["count"].tolist()
    [1, 2]
    """
    y = np.asarray(y)
    if not class_names:
        raise ConfigError("class_names", class_names, "a non-empty list of class names")
    if (
        y.ndim != 1
        or not np.issubdtype(y.dtype, np.integer)
        or (y.size and (y.min() < 0 or y.max() >= len(class_names)))
    ):
        raise ConfigError("y", f"{y.dtype}{y.shape}", f"1-D integer labels in 0..{len(class_names) - 1}")
    counts = np.bincount(y, minlength=len(class_names))
    return pd.DataFrame({"class": range(len(class_names)), "class_name": list(class_names), "count": counts})


def render_fig7(
    counts_raw: pd.DataFrame,
    *,
    full_set: bool,
    paper_total: int = 16023,
    **record: Unpack[Record],
) -> ReportItem:
    """jeon/fig7: images per class before augmentation, as loaded; the total against the paper's and the imbalance.

    Parameters
    ----------
    counts_raw
        ``class_counts`` of the loaded images (columns class, class_name, count).
    full_set
        Whether the full Kaggle set was loaded; a sample is drawn and labelled as a stand-in and is not judged.
    paper_total
        The paper's image count (l.139).
    **record
        ``Record``: the reports folder and what the manifest records of the run.

    Returns
    -------
    ReportItem
        png bar chart, csv and md table; claim C5 and the total.
    """
    root, common = _record("render_fig7", record)
    _need(counts_raw, ("class", "class_name", "count"), "counts_raw")
    counts = counts_raw.assign(share=counts_raw["count"] / counts_raw["count"].sum())
    total = int(counts["count"].sum())
    big, small = counts.loc[counts["count"].idxmax()], counts.loc[counts["count"].idxmin()]
    ratio = float(big["count"] / small["count"]) if small["count"] else float("inf")
    balanced = "balanced " if ratio == 1 else ""
    note = "" if full_set else f"a {total:,}-image {balanced}sample, not Kaggle's {paper_total:,}"
    missing = "" if full_set else "data missing"
    checks = [
        holds(
            "C5 imbalance",
            within(IMBALANCE_RATIO, ratio) if full_set else None,
            f"largest/smallest {ratio:.2f} ({big['class_name']} {big['count']:,} / {small['class_name']} "
            f"{small['count']:,})",
            f"heavily imbalanced: largest/smallest class >= {IMBALANCE_RATIO:g}",
            basis=Basis.COUNTED,
            note=note,
            undecided=missing,
        ),
        holds(
            "total",
            total == paper_total if full_set else None,
            f"{total:,} images loaded vs the paper's {paper_total:,}",
            "the loaded total equals the paper's",
            basis=Basis.COUNTED,
            note=note,
            undecided=missing,
        ),
    ]
    verdict = decide(checks, fitted=[], predicted=["images per class as loaded"], noise=_COUNTS)
    apply_style()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.bar(counts["class_name"], counts["count"], color="tab:blue" if full_set else "tab:gray")
    ax.set(ylabel="images before augmentation")
    ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    label = "full set" if full_set else "stand-in sample"
    ax.set_title(
        f"jeon/fig7 — images per class, {label}: {total:,} (paper: {paper_total:,}), "
        f"largest/smallest {ratio:.2f} ({verdict.status})",
        fontsize=10,
    )
    png = save_figure(fig, "jeon/fig7", root=root)
    md = [
        "# jeon/fig7 — Distribution of pre-processing data by class",
        "",
        f"![jeon/fig7]({png.name})",
        "",
        f"Data as loaded: **{label}**" + (f" ({note}; its counts are not the paper's)." if note else "."),
        f"Loaded total {total:,} vs the paper's {paper_total:,} (l.139); largest/smallest class {ratio:.2f}. The paper "
        "gives only the total and the class count; its per-class counts are not in the text.",
        "",
        markdown_table(counts.assign(share=counts["share"].round(4))),
        verdict.markdown(),
    ]
    files = [png, *save_table(counts, "\n".join(md), "jeon/fig7", root=root)]
    return _item("jeon/fig7", files, verdict, True, "none (counts)", **common)


# ------------------------------------------------------------------ fig8 ----


def _per_class(per_class: pd.DataFrame) -> pd.DataFrame:
    _need(per_class, _PER_CLASS, "per_class")
    frame = per_class.copy()
    if "class_name" not in frame.columns:
        frame["class_name"] = frame["class"].astype(str)
    frame["synthetic_share"] = frame["made"] / frame["augmented"]
    return frame


def render_fig8(
    per_class: pd.DataFrame,
    *,
    target: int,
    settings: dict[str, Any],
    paper_target: int = 10000,
    **record: Unpack[Record],
) -> ReportItem:
    """jeon/fig8: images per class before and after augmentation on the device workers.

    Parameters
    ----------
    per_class
        One row per class from ``edgelab.papers.jeon.augment``: class, class_name (optional), device, raw, augmented,
        factor, made, wall_s, images_per_s.
    target
        Images per class the run augmented to.
    settings
        The augmentation layers' settings (``edgelab.papers.jeon.augment.AUGMENTATION``), recorded in the md.
    paper_target
        The paper's images per class (l.146).
    **record
        ``Record``: the reports folder and what the manifest records of the run.

    Returns
    -------
    ReportItem
        png (before | after), csv and md; claim C6 and the target against the paper's.
    """
    root, common = _record("render_fig8", record)
    integer("target", target, at_least=1)
    frame = _per_class(per_class)
    counts = frame["augmented"]
    at_paper = target == paper_target
    checks = [
        holds(
            "C6 counts",
            bool((counts == target).all()),
            f"{len(frame)} classes, {counts.min():,}..{counts.max():,} per class, {counts.sum():,} in all",
            f"every class holds exactly the target ({target:,})",
            basis=Basis.STRUCTURE,
            note="structural: the augmentation makes each class up to the target it is given",
        ),
        holds(
            "C6 target",
            True if at_paper else None,
            f"target {target:,} per class vs the paper's {paper_target:,}",
            "the run's target equals the paper's",
            basis=Basis.CONFIGURED,
            note="" if at_paper else f"profile augments to {target:,} per class",
            undecided="" if at_paper else "too small",
        ),
    ]
    verdict = decide(checks, fitted=[], predicted=[], noise=_COUNTS)
    mostly = frame.loc[frame["synthetic_share"] > MOSTLY_SYNTHETIC, "class_name"].tolist()
    workers = frame.groupby("device", sort=True).agg(
        classes=("class_name", lambda s: ", ".join(map(str, s))), made=("made", "sum"), wall_s=("wall_s", "sum")
    )
    workers["images_per_s"] = workers["made"] / workers["wall_s"]
    apply_style()
    import matplotlib.pyplot as plt

    fig, (before, after) = plt.subplots(1, 2, figsize=(12, 4.5), sharex=True)
    before.bar(frame["class_name"], frame["raw"], color="tab:gray")
    after.bar(frame["class_name"], frame["raw"], color="tab:gray", label="original")
    after.bar(frame["class_name"], frame["made"], bottom=frame["raw"], color="tab:orange", label="augmented copies")
    if paper_target <= PAPER_LINE_SPAN * target:
        # A far larger paper target would flatten the run's bars; it is then named in the title.
        after.axhline(
            paper_target, color=PAPER_STYLE["color"], linestyle="--", label=f"paper: {paper_target:,} per class"
        )
    before.set(title="(a) before augmentation (training split)", ylabel="images")
    after.set(title=f"(b) after, target {target:,} per class (paper: {paper_target:,})")
    after.legend(fontsize=7)
    for ax in (before, after):
        ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    fig.suptitle(f"jeon/fig8 — images per class before and after augmentation ({verdict.status})", fontsize=11)
    png = save_figure(fig, "jeon/fig8", root=root)
    shown = ["class", "class_name", "device", "raw", "augmented", "factor", "made", "synthetic_share", "wall_s"]
    md = [
        "# jeon/fig8 — Distribution of data after pre-processing by class",
        "",
        f"![jeon/fig8]({png.name})",
        "",
        P13_LINE,
        "Each class was augmented on one device worker (classes spread round-robin); wall time and images/s are the "
        "host's wall clock on the emulated workers.",
        "",
        "Augmentation settings (the paper names the layers, not their settings):",
        "",
        markdown_table(pd.DataFrame({"setting": list(settings), "value": [str(v) for v in settings.values()]})),
        f"Mostly synthetic (more than {MOSTLY_SYNTHETIC:.0%} augmented copies): {', '.join(mostly) or 'none'}. "
        "Such classes hold few distinct images however many copies they get.",
        "",
        markdown_table(frame[[*shown, "images_per_s"]].round(3)),
        "Per worker:",
        "",
        markdown_table(workers.reset_index().round(3)),
        verdict.markdown(),
    ]
    files = [png, *save_table(frame, "\n".join(md), "jeon/fig8", root=root)]
    clock = "none (counts); wall time and images/s: host wall clock on the emulated device workers"
    return _item("jeon/fig8", files, verdict, True, clock, **common)


def render_eq_augmentation(
    per_class: pd.DataFrame,
    *,
    target: int,
    n_raw_total: int,
    full_set: bool,
    paper_target: int = 10000,
    paper_raw: int = 16023,
    **record: Unpack[Record],
) -> ReportItem:
    """jeon/eq-augmentation: classes x target = total, total / raw = overall factor, beside the paper's arithmetic.

    Parameters
    ----------
    per_class
        As for ``render_fig8``.
    target
        Images per class the run augmented to.
    n_raw_total
        Raw images the overall factor divides by (the paper's 16,023 are all its images).
    full_set
        Whether the full Kaggle set was loaded; the paper's numbers are compared only then, at its target.
    paper_target, paper_raw
        The paper's 10,000 per class (stated, l.146) and 16,023 raw images (stated, l.139).
    **record
        ``Record``: the reports folder and what the manifest records of the run.

    Returns
    -------
    ReportItem
        csv and md of the arithmetic and the per-class factors.
    """
    root, common = _record("render_eq_augmentation", record)
    integer("target", target, at_least=1)
    integer("n_raw_total", n_raw_total, at_least=1)
    frame = _per_class(per_class)
    n, total, raw_sum, made = len(frame), *(int(frame[c].sum()) for c in ("augmented", "raw", "made"))
    factor, paper_total = total / n_raw_total, PAPER_CLASSES * paper_target
    paper_factor = paper_total / paper_raw
    adds_up = (
        n * target == total
        and bool((frame["raw"] + frame["made"] == frame["augmented"]).all())
        and bool(np.allclose(frame["factor"], frame["augmented"] / frame["raw"]))
    )
    comparable = full_set and target == paper_target
    why = (
        ""
        if comparable
        else f"ran {n_raw_total:,} {'images' if full_set else 'sample images'} to {target:,} per class; the paper's "
        f"numbers apply to its {paper_raw:,} images at {paper_target:,} per class"
    )
    checks = [
        holds(
            "counts add up",
            adds_up,
            f"{n} x {target:,} = {n * target:,}; counted {total:,} = {raw_sum:,} raw + {made:,} made",
            "classes x target = total; raw + made = augmented per class; factor = augmented / raw",
            basis=Basis.SAME_FORMULA,
        ),
        holds(
            "paper's numbers",
            bool(n == PAPER_CLASSES and total == paper_total and n_raw_total == paper_raw) if comparable else None,
            f"{total:,} images, factor {factor:.2f}x vs {paper_total:,}, {paper_factor:.2f}x",
            "the run's total and overall factor equal the paper's",
            basis=Basis.CONFIGURED,
            note=why,
            undecided="" if comparable else ("too small" if full_set else "data missing"),
        ),
    ]
    verdict = decide(checks, fitted=[], predicted=[], noise=_COUNTS)
    sums = pd.DataFrame(
        [
            ("classes", n, PAPER_CLASSES, "stated (l.139)"),
            ("images per class after augmentation", target, paper_target, "stated (l.146)"),
            ("total = classes x per class", total, paper_total, "stated (l.146): 10 x 10,000 = 100,000"),
            ("raw images", n_raw_total, paper_raw, "stated (l.139)"),
            ("overall factor = total / raw", round(factor, 2), round(paper_factor, 2), "derived by the cataloguer"),
        ],
        columns=["quantity", "run", "paper", "paper source"],
    )
    md = [
        "# jeon/eq-augmentation — 10 classes x 10,000 = 100,000 images",
        "",
        markdown_table(
            sums.assign(**{c: sums[c].map(lambda v: f"{v:,.2f}" if v % 1 else f"{v:,.0f}") for c in ("run", "paper")})
        ),
        f"The paper's overall factor {paper_total:,} / {paper_raw:,} = {paper_factor:.2f}x is derived by the "
        "cataloguer, not printed in the paper; its per-class factors are unknown (no per-class counts in the text). "
        f"The run's raw images in the augmented (training) split: {raw_sum:,}; total / those = {total / raw_sum:.2f}x.",
        P13_LINE,
        "",
        "Per-class factors (augmented / raw):",
        "",
        markdown_table(frame[["class", "class_name", "raw", "made", "augmented", "factor"]].round(3)),
        verdict.markdown(),
    ]
    table = pd.concat([sums.assign(table="arithmetic"), frame.assign(table="per class")], ignore_index=True)
    files = save_table(table, "\n".join(md), "jeon/eq-augmentation", root=root)
    return _item("jeon/eq-augmentation", files, verdict, True, "none (arithmetic on counts)", **common)


# ------------------------------------------------------------------ fig9 ----


def _paper_train(reference: pd.DataFrame | None) -> dict[tuple[str, str], float]:
    ref = load_reference("jeon/prose-train") if reference is None else reference
    values = {}
    for row, column, value in ref[["row", "column", "value"]].itertuples(index=False):
        try:
            values[(str(row), str(column))] = float(value)
        except ValueError:
            continue
    needed = [(f"phase {p} result", c) for p in (1, 2) for c in ("val_accuracy", "val_loss")] + [
        ("phase 2 result", "F1")
    ]
    missing = [k for k in needed if k not in values]
    if missing:
        raise ConfigError("reference", missing, "rows 'phase 1 result'/'phase 2 result' of jeon/prose-train")
    return values


def _phase_check(name: str, end: pd.Series | None, paper: dict[tuple[str, str], float], phase: int, note: str) -> Check:
    acc, loss = paper[(f"phase {phase} result", "val_accuracy")], paper[(f"phase {phase} result", "val_loss")]
    rule = f"|val_accuracy - paper| <= {ACCURACY_TOLERANCE} and |val_loss / paper - 1| <= {LEVEL_TOLERANCE:.0%}"
    trained = {"basis": Basis.TRAINED, "runs": TRAINING_RUNS}
    if end is None:
        return holds(name, None, f"phase {phase} did not run", rule, undecided="too small", **trained)
    measured = f"val_accuracy {end['val_accuracy']:.4f} vs {acc}, val_loss {end['val_loss']:.4f} vs {loss}"
    if note:
        return holds(name, None, measured, rule, note=note, undecided="data missing", **trained)
    ok = within(abs(end["val_accuracy"] - acc), ACCURACY_TOLERANCE) and within(
        abs(end["val_loss"] / loss - 1), LEVEL_TOLERANCE
    )
    return holds(name, ok, measured, rule, **trained)


def render_fig9(
    history: pd.DataFrame,
    y_true: np.ndarray,
    y_pred: np.ndarray,
    class_names: list[str],
    *,
    weights_source: str,
    full_data: bool,
    reference: pd.DataFrame | None = None,
    choices: list[str] | None = None,
    **record: Unpack[Record],
) -> ReportItem:
    """jeon/fig9: accuracy and loss of both training phases, F1 and the confusion matrix on the validation split.

    Parameters
    ----------
    history
        One row per epoch: epoch (global), phase (1 frozen base, 2 fine-tuning), loss, accuracy, val_loss,
        val_accuracy.
    y_true, y_pred
        Validation labels and predicted class indices.
    class_names
        Name of each class index.
    weights_source
        Where the base's starting weights came from ("imagenet", "none (random)", a file).
    full_data
        Whether training used the paper's full data; accuracy, loss and F1 are compared with the paper only when
        this is True and ``weights_source`` is ImageNet.
    reference
        Rows of ``jeon/prose-train`` (id,row,column,value,unit); read with ``load_reference`` when None.
    choices
        The training settings the paper leaves open, as the run chose them (listed on the verdict).
    **record
        ``Record``: the reports folder and what the manifest records of the run.

    Returns
    -------
    ReportItem
        png ((a) accuracy, (b) loss, (c) confusion matrix), csv and md; claims C7-C10.
    """
    root, common = _record("render_fig9", record)
    from sklearn.metrics import confusion_matrix, f1_score

    _need(history, _HISTORY, "history")
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    if y_true.shape != y_pred.shape or y_true.ndim != 1 or not y_true.size:
        raise ConfigError("y_pred", y_pred.shape, f"non-empty 1-D labels shaped like y_true {y_true.shape}")
    paper = _paper_train(reference)
    hist = history.sort_values("epoch").reset_index(drop=True)
    ends = {p: (g.iloc[-1] if len(g) else None) for p in (1, 2) for g in [hist[hist["phase"] == p]]}
    labels = np.arange(len(class_names))
    f1 = {
        avg: float(f1_score(y_true, y_pred, labels=labels, average=avg, zero_division=0))
        for avg in ("macro", "weighted")
    }
    cm = confusion_matrix(y_true, y_pred, labels=labels)
    last = hist.iloc[-1]
    acc_gap, loss_gap = float(last["accuracy"] - last["val_accuracy"]), float(last["loss"] - last["val_loss"])
    reasons = [] if weights_source.strip().lower() == "imagenet" else [f"weights {weights_source!r}, not ImageNet"]
    reasons += [] if full_data else ["a stand-in sample, not the paper's 16,023 images"]
    note = f"not comparable to the paper: {' and '.join(reasons)}" if reasons else ""
    f1_paper = paper[("phase 2 result", "F1")]
    close_f1 = [within(abs(v - f1_paper), ACCURACY_TOLERANCE) for v in f1.values()]
    split = any(close_f1) != all(close_f1)  # one averaging close, the other not: the paper's is not stated
    f1_note = note or ("only one averaging is within: the paper's is not stated" if split else "")
    checks = [
        _phase_check("C7 phase 1", ends[1], paper, 1, note),
        _phase_check("C8 phase 2", ends[2], paper, 2, note),
        holds(
            "C9 F1",
            None if note or split else all(close_f1),
            f"macro {f1['macro']:.4f}, weighted {f1['weighted']:.4f} vs {f1_paper}",
            f"both within {ACCURACY_TOLERANCE} of the paper (its averaging is not stated); one only: undecided",
            basis=Basis.TRAINED,
            runs=TRAINING_RUNS,
            note=f1_note,
            undecided="data missing" if note else ("qualitative" if split else ""),
        ),
        accuracy_gap(
            "C10 overfitting",
            float(last["accuracy"]),
            float(last["val_accuracy"]),
            runs=TRAINING_RUNS,
            claim="no overfitting: final train accuracy above validation by at most the accuracy tolerance "
            f"(loss gap {loss_gap:+.4f} reported only)",
            at_least=False,
        ),
    ]
    predicted = ["validation accuracy and loss per epoch", "F1 (macro, weighted)", "final train - val gap"]
    verdict = decide(
        checks,
        fitted=[],
        predicted=predicted,
        noise=Noise.of_runs([float(last["val_accuracy"])], cell="one training run"),
        choices=choices or [],
    )
    apply_style()
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), gridspec_kw={"width_ratios": [1, 1, 1.1]})
    for ax, metric, tag in ((axes[0], "accuracy", "(a) accuracy"), (axes[1], "loss", "(b) loss")):
        ax.plot(hist["epoch"], hist[metric], marker="o", label=f"train {metric}")
        ax.plot(hist["epoch"], hist[f"val_{metric}"], marker="o", label=f"validation {metric}")
        if all(end is not None for end in ends.values()):
            ax.axvline(ends[1]["epoch"] + 0.5, color="0.5", linestyle=":", label="base unfrozen")
        for phase, end in ends.items():
            value = paper[(f"phase {phase} result", f"val_{metric}")]
            ax.axhline(value, color=PAPER_STYLE["color"], linestyle="--", linewidth=0.8)
            x = end["epoch"] if end is not None else hist["epoch"].iloc[-1]
            ax.scatter([x], [value], color="black", marker=PAPER_STYLE["marker"], zorder=3)
            ax.annotate(
                f"paper, end of phase {phase}: {value}",
                (x, value),
                fontsize=7,
                xytext=(-110, 4),
                textcoords="offset points",
            )
        ax.set(title=tag, xlabel="epoch (both phases)", ylabel=metric)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=7)
    axes[2].imshow(cm, cmap="Blues")
    axes[2].set(
        title="(c) confusion matrix (validation)", xlabel="predicted", ylabel="true", xticks=labels, yticks=labels
    )
    for (i, j), v in np.ndenumerate(cm):
        dark = v + v > cm.max()  # white text on the darker half of the colour scale
        axes[2].text(j, i, str(v), ha="center", va="center", fontsize=6, color="white" if dark else "black")
    fig.suptitle(f"jeon/fig9 — training results, weights {weights_source} ({verdict.status})", fontsize=11)
    png = save_figure(fig, "jeon/fig9", root=root)
    summary = {"f1_macro": f1["macro"], "f1_weighted": f1["weighted"], "acc_gap": acc_gap, "loss_gap": loss_gap}
    long = hist.melt(id_vars=["epoch", "phase"], value_vars=list(_HISTORY[2:]), var_name="metric").assign(
        source="measured"
    )
    paper_rows = [
        {"source": "paper", "epoch": np.nan, "phase": p, "metric": c, "value": paper[(f"phase {p} result", c)]}
        for p in (1, 2)
        for c in ("val_accuracy", "val_loss")
    ] + [{"source": "paper", "epoch": np.nan, "phase": 2, "metric": "F1", "value": f1_paper}]
    summary_rows = [
        {"source": "measured", "epoch": last["epoch"], "phase": last["phase"], "metric": k, "value": v}
        for k, v in summary.items()
    ]
    table = pd.concat([long, pd.DataFrame(paper_rows + summary_rows)], ignore_index=True)
    matrix = pd.DataFrame(cm, columns=[f"pred {n}" for n in class_names]).assign(true=class_names)
    md = [
        "# jeon/fig9 — Graph of Training Results",
        "",
        f"![jeon/fig9]({png.name})",
        "",
        f"Weights: {weights_source}; data: {'the full set' if full_data else 'a stand-in sample'}. "
        + (f"Accuracy, loss and F1 are {note}; they are shown, not judged." if note else ""),
        f"F1 on the validation split: macro {f1['macro']:.4f}, weighted {f1['weighted']:.4f}. The paper does not say "
        f"which averaging its {f1_paper} uses, so both are compared with it.",
        f"Overfitting check (C10): final train - validation gap, accuracy {acc_gap:+.4f}, loss {loss_gap:+.4f}.",
        "",
        markdown_table(hist[list(_HISTORY)].round(4)),
        "Confusion matrix (rows true, columns predicted):",
        "",
        markdown_table(matrix[["true", *matrix.columns[:-1]]]),
        verdict.markdown(),
    ]
    files = [png, *save_table(table, "\n".join(md), "jeon/fig9", root=root)]
    return _item("jeon/fig9", files, verdict, True, "none (training history)", **common)

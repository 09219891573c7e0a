"""The survey's federated learning (qiao/method-fedavg), and its claim qiao/C27.

Left: test accuracy against rounds, IID against label-skewed shards, with
and without the shared subset, and each C, E, B varied. Middle: the same
runs and the sketched-update variant against the bytes the devices
uploaded. Right: local SGD, a fixed period against the adaptive one, against
the bytes uploaded (each marker a round). The survey gives no values, so
only what C27 says is checked: raw data stays on the devices (the transfer
log), sketched updates cut the upload, and the shared subset raises
accuracy under label skew.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from edgelab import verdict
from edgelab.experiments import qiao_fedavg as exp
from edgelab.figures.style import data_source, markdown_table, save_figure, save_table
from edgelab.report import ReportItem
from edgelab.results import StoredRun

ID = "qiao/method-fedavg"
CLOCK = (
    "device_s: every round composed by edgelab.timeline.compose: the slowest trained device's compute from the "
    "profile's device model (steps and samples), plus each device's pull and push at the profile's link rate; "
    "accuracy and bytes are measured"
)
#: A sketched upload must be at most this share of a dense one to count as a cut.
MAX_SKETCH_SHARE = 0.5
#: Accuracy claims are judged by a gain beyond this many standard errors of the difference of two test accuracies.
SIGMAS = 2.0


def draw(table: pd.DataFrame, plan: exp.Plan) -> Any:
    """The three panels: accuracy against rounds, against bytes uploaded, and local SGD's periods.

    A full grid has some forty runs: each setting (C, E, B, shared or sketched)
    keeps one colour in both federated panels and the partition its line
    style, so one legend of settings, beside the panels, names them all.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter

    p = plan.params
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(18, 5.2), layout="constrained")
    styles = {"iid": "-", "label": "--"}
    federated = table[table["kind"] != "local_sgd"]
    pairs = zip(federated["run"], federated["partition"], strict=True)
    settings = list(dict.fromkeys(_setting(name, partition) for name, partition in pairs))
    palette = plt.get_cmap("tab20" if len(settings) > 10 else "tab10")
    colours = {s: palette(i % palette.N) for i, s in enumerate(settings)}
    for name, run in table.groupby("run", sort=False):
        kind = run["kind"].iloc[0]
        mb = run["bytes_up"] / 1e6
        if kind == "local_sgd":
            right.plot(mb, run["accuracy"], "-o", markersize=3, label=f"{name} ({len(run)} rounds)")
            continue
        partition = run["partition"].iloc[0]
        look = {"linestyle": styles.get(partition, "-"), "marker": "o", "markersize": 3}
        look["color"] = colours[_setting(name, partition)]
        if kind != "sketched":
            left.plot(run["round"], run["accuracy"], **look)
        middle.plot(mb, run["accuracy"], **look)
    left.set(xlabel="round", ylabel="test accuracy", title="FedAvg: accuracy against rounds")
    middle.set(xlabel="MB uploaded by the devices (cumulative)", ylabel="test accuracy", xscale="log",
               title="against bytes uploaded")  # fmt: skip
    middle.xaxis.set_minor_formatter(NullFormatter())  # within a decade, labelled minor ticks overlap
    right.set(xlabel="MB uploaded by the devices (cumulative)", ylabel="test accuracy",
              title=f"local SGD, H={p.local_sgd_period} batches: fixed vs adaptive")  # fmt: skip
    right.legend(fontsize=7)
    handles = [Line2D([], [], color="black", linestyle=styles[k], label=f"{k} shards") for k in styles]
    handles += [Line2D([], [], color=colours[s], marker="o", markersize=3, label=s) for s in settings]
    fig.legend(handles=handles, loc="outside right center", fontsize=7, title="FedAvg runs", title_fontsize=8)
    fig.suptitle(
        f"qiao/method-fedavg: LeNet-MLP on {plan.dataset.n_train} MNIST digits over {p.devices} emulated "
        f"{plan.profile.name} devices ({plan.dataset.source}), test {plan.dataset.n_test}"
    )
    return fig


def _setting(name: str, partition: str) -> str:
    """A run's name without its partition: ``"label C=1 E=1 B=10"`` -> ``"C=1 E=1 B=10"``."""
    return name.removeprefix(f"{partition} ")


def _gain_check(name: str, base: pd.Series, other: pd.Series, n_test: int, judged: bool, rule: str) -> verdict.Check:
    """``other``'s accuracy beats ``base``'s by more than SIGMAS standard errors (unpaired binomial)."""
    a, b = float(base["accuracy"]), float(other["accuracy"])
    se = math.sqrt(a * (1 - a) / n_test + b * (1 - b) / n_test)
    measured = f"{base['run']}: {a:.3f}; {other['run']}: {b:.3f} (gain {b - a:+.3f}, SE {se:.3f})"
    if not judged:
        return verdict.Check(name, None, measured, rule, "smoke-sized data: accuracy claims are judged in full only")
    passed = True if b - a > SIGMAS * se else False if b - a < -SIGMAS * se else None
    return verdict.Check(name, passed, measured, rule, "" if passed is not None else "within the noise")


def c27_verdict(plan: exp.Plan, runs: pd.DataFrame, log: pd.DataFrame) -> verdict.Verdict:
    """qiao/C27: data stays (transfer log), sketched updates cut the upload, the shared subset helps under skew."""
    checks = [
        verdict.Check(
            "C27 raw data stays on the devices",
            bool(log["uploads_as_expected"].all() and log["downloads_are_weights"].all()),
            f"{int(log['uploads'].sum())} uploads in {len(log)} runs: each the parameters' "
            f"{int(log['parameter_bytes'].iloc[0])} B or the compressor's payload for its round, while the samples "
            f"trained per upload ranged {int(log['samples_min'].min())}-{int(log['samples_max'].max())}; "
            "every download the weights; "
            f"data moved once, to the devices at the load ({int(log['data_load_bytes'].min())}-"
            f"{int(log['data_load_bytes'].max())} B per run)",
            "every record's bytes_sent equals the expected payload exactly and bytes_received the weights' bytes",
        )
    ]
    dense = runs[(runs["kind"] == "fedavg")]
    sketched = runs[runs["kind"] == "sketched"]
    if len(sketched) and len(dense):
        base = dense.iloc[0]
        share = float(sketched["bytes_per_upload"].iloc[0] / base["bytes_per_upload"])
        checks.append(
            verdict.Check(
                "C27 sketched updates cut upload cost",
                share <= MAX_SKETCH_SHARE,
                f"{sketched['run'].iloc[0]}: {sketched['bytes_per_upload'].iloc[0]:.0f} B per upload, {share:.3f} of "
                f"dense ({base['bytes_per_upload']:.0f} B); accuracy after {int(base['rounds'])} rounds "
                f"{float(sketched['accuracy'].iloc[0]):.3f} against {float(base['accuracy']):.3f}",
                f"bytes per upload <= {MAX_SKETCH_SHARE:g} of the dense upload's",
            )
        )
    shared = runs[runs["kind"] == "shared"]
    skewed = dense[dense["run"].str.startswith("label C=1 ")]
    if len(shared) and len(skewed):
        checks.append(
            _gain_check(
                "C27 a shared subset raises accuracy under label skew",
                skewed.iloc[0],
                shared.iloc[0],
                plan.dataset.n_test,
                plan.params.train_samples is None,
                f"accuracy gain after the same rounds > {SIGMAS:g} standard errors of the difference",
            )
        )
    noise = "binomial standard error of each test accuracy, sqrt(p (1 - p) / n_test); one seed per run"
    return verdict.decide(checks, fitted=[], predicted=list(runs["run"]), noise=noise)


def render(
    root: Path, plan: exp.Plan, stored: list[StoredRun], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """Write the figure and its tables; return the manifest entry."""
    p = plan.params
    table = exp.curves(plan, stored)
    runs = exp.summarize(plan, stored)
    log = exp.transfer_log(plan, stored)
    result = c27_verdict(plan, runs, log)
    png = save_figure(draw(table, plan), ID, root=root)
    shown = runs.assign(
        accuracy=runs["accuracy"].round(4),
        bytes_per_upload=runs["bytes_per_upload"].round(0),
        device_s=runs["device_s"].round(3),
    )
    md = [
        f"# {ID}: federated averaging, sketched updates, a shared subset, local SGD",
        "",
        f"LeNet-MLP on {plan.dataset.n_train} MNIST training digits ({plan.dataset.source}) split over {p.devices} "
        f"emulated {plan.profile.name} devices (Dask workers); the parameter server (the client process) averages "
        f"the updates weighted by samples (ps_sync) and evaluates on {plan.dataset.n_test} test digits after every "
        f"round. FedAvg runs {p.rounds} rounds: each round a seeded draw of max(1, floor(C N)) devices trains E "
        f"local epochs in batches of B (learning rate {p.learning_rate}). Shards: iid, or label-skewed (two label "
        f"chunks per device); shared: {p.shared_fraction:.0%} of the training set on every device besides its "
        f"label-skewed shard; sketched: the {p.compressor} random mask (kept values and a seed travel). Local SGD: "
        f"a round every H={p.local_sgd_period} batches, fixed or adaptive (AdaComm), {p.local_sgd_epochs} epochs. "
        "The survey gives no C, E, B or rounds: nothing here is a paper value.",
        "",
        markdown_table(shown),
        "",
        "## The transfer log: only parameter tensors move after the data load",
        "",
        markdown_table(log),
        "",
        "## qiao/C27",
        "",
        result.markdown(),
    ]
    files = [png, *save_table(shown, "\n".join(md) + "\n", ID, root=root)]
    # One line: each C27 check's outcome (the page and the manifest's verdict hold the measurements).
    held = "; ".join(c.name.removeprefix("C27 ") + f": {c.outcome}" + (f" ({c.note})" if c.note else "")
                     for c in result.checks)  # fmt: skip
    why = f"survey gives no values; C27: {held}"
    return [
        ReportItem(
            ID,
            [str(f) for f in files],
            data_source=data_source(plan.dataset.provenance()),
            clock=CLOCK,
            paper_values_shown=False,
            status=result.status,
            why=why,
            notebook=notebook,
            parameters=parameters,
            verdict=result.to_dict(),
        )
    ]

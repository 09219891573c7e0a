"""The survey's federated learning (qiao/method-fedavg), and its claim qiao/C27.

Left: test accuracy against rounds, IID against label-skewed shards, with
and without the shared subset, and each C, E, B varied. Middle: the same
runs and the sketched-update variant against the bytes the devices
uploaded. Right: local SGD, a fixed period against the adaptive one, against
the bytes uploaded (each marker a round). The survey gives no values, so
only what C27 says is checked: raw data stays on the devices (the transfer
log: where the run sent what, ``CONFIGURED``), sketched updates cut the upload
(bytes counted in the runs, ``COUNTED``), and the shared subset raises
accuracy under label skew (``TRAINED``: judged with three seeds of each run,
at the full data size only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.common.results import StoredRun
from edgelab.papers.qiao import fedavg as exp
from edgelab.report import verdict
from edgelab.report.manifest import ReportItem
from edgelab.report.style import data_source, markdown_table, save_figure, save_table
from edgelab.report.verdict import Basis, Noise

ID = "qiao/method-fedavg"
CLOCK = (
    "device_s: every round composed by edgelab.emulation.timeline: the slowest trained device's compute from the "
    "profile's device model (steps and samples), plus each device's pull and push at the profile's link rate; "
    "accuracy and bytes are measured"
)
#: The tab10 palette's colours; more settings than these take tab20's.
TAB10 = 10


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
    palette = plt.get_cmap("tab20" if len(settings) > TAB10 else "tab10")
    colours = {s: palette(i % palette.N) for i, s in enumerate(settings)}
    for name, run in table[table["repeat"] == 0].groupby("run", sort=False):
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


def _gain_check(name: str, base: pd.DataFrame, other: pd.DataFrame, full_data: bool, claim: str) -> verdict.Check:
    """``other``'s median accuracy above ``base``'s by more than ``ACCURACY_TOLERANCE``, over their seeds."""
    runs = min(len(base), len(other))
    b, o = float(base["accuracy"].median()), float(other["accuracy"].median())
    gap = verdict.accuracy_gap(name, o, b, runs=runs, claim=claim)
    seeds = f"; medians of {runs} seeds" if runs > 1 else ""
    what = f"{other['run'].iloc[0]} {o:.3f} vs {base['run'].iloc[0]} {b:.3f} (gain {o - b:+.3f}{seeds})"
    if full_data:
        return verdict.holds(name, gap.passed, what, gap.rule, basis=Basis.TRAINED, runs=runs)
    note = f"smoke-sized data: accuracy claims are judged at the full data size only ({gap.outcome} here)"
    return verdict.holds(name, None, what, gap.rule, basis=Basis.TRAINED, runs=runs, note=note, undecided="too small")


def c27_verdict(plan: exp.Plan, runs: pd.DataFrame, log: pd.DataFrame) -> verdict.Verdict:
    """qiao/C27: data stays (transfer log), sketched updates cut the upload, the shared subset helps under skew."""
    checks = [
        verdict.holds(
            "C27 raw data stays on the devices",
            bool(log["uploads_as_expected"].all() and log["downloads_are_weights"].all()),
            f"{int(log['uploads'].sum())} uploads in {len(log)} runs: each the parameters' "
            f"{int(log['parameter_bytes'].iloc[0])} B or the compressor's payload for its round, while the samples "
            f"trained per upload ranged {int(log['samples_min'].min())}-{int(log['samples_max'].max())}; "
            "every download the weights; "
            f"data moved once, to the devices at the load ({int(log['data_load_bytes'].min())}-"
            f"{int(log['data_load_bytes'].max())} B per run)",
            "every record's bytes_sent equals the expected payload exactly and bytes_received the weights' bytes",
            basis=Basis.CONFIGURED,
            note="where the run sent what: what the implementation does, not a measurement",
        )
    ]
    first = runs[runs["repeat"] == 0]
    dense = first[(first["kind"] == "fedavg")]
    sketched = first[first["kind"] == "sketched"]
    if len(sketched) and len(dense):
        base = dense.iloc[0]
        uploads = pd.Series(
            [float(base["bytes_per_upload"]), float(sketched["bytes_per_upload"].iloc[0])], index=["dense", "sketched"]
        )
        cut = verdict.effect(uploads, -1, Noise.none("bytes are counted"), claim="sketched updates cut the bytes "
                             "per upload", basis=Basis.COUNTED, axis="upload", name="C27 sketched updates cut upload "
                             "cost")  # fmt: skip
        share = uploads["sketched"] / uploads["dense"]
        measured = (
            f"{sketched['run'].iloc[0]}: {uploads['sketched']:.0f} B per upload, {share:.3f} of dense "
            f"({uploads['dense']:.0f} B; {cut.measured}); accuracy after {int(base['rounds'])} rounds "
            f"{float(sketched['accuracy'].iloc[0]):.3f} against {float(base['accuracy']):.3f} (not judged)"
        )
        checks.append(verdict.holds(cut.name, cut.passed, measured, cut.rule, basis=Basis.COUNTED))
    shared = runs[runs["kind"] == "shared"]
    p = plan.params
    # The label-skewed base and its repeats (the same settings, other seeds).
    settings = runs["run"].str.replace(r" \(repeat \d+\)$", "", regex=True)
    skewed = runs[(runs["kind"] == "fedavg") & (settings == f"label C=1 E={min(p.local_epochs)} B={p.batch_sizes[0]}")]
    if len(shared) and len(skewed):
        checks.append(
            _gain_check(
                "C27 a shared subset raises accuracy under label skew",
                skewed,
                shared,
                p.train_samples is None,
                "the shared subset's accuracy above the label-skewed base's after the same rounds",
            )
        )
    trained = pd.concat([skewed, shared])
    noise = verdict.noise_of(trained.set_index("kind")["accuracy"], axis="run") if len(trained) else Noise()
    return verdict.decide(checks, fitted=[], predicted=list(first["run"]), noise=noise, choices=_choices(plan))


def _choices(plan: exp.Plan) -> list[str]:
    """What the survey leaves open (it gives no C, E, B or rounds) and the run chose."""
    p = plan.params
    return [
        f"LeNet-MLP on MNIST over {p.devices} emulated {plan.profile.name} devices, {p.rounds} rounds, learning rate "
        f"{p.learning_rate}",
        "the server: the client process (ps_sync), updates weighted by samples",
        "non-IID: label-skewed shards, two label chunks per device",
        f"the shared subset: {p.shared_fraction:.0%} of the training set on every device",
        f"the sketched update: the {p.compressor} random mask (kept values and a seed travel)",
    ]


def reduction(plan: exp.Plan) -> str:
    """How the run is smaller than the full profile's (the survey gives no size)."""
    p, d, full = plan.params, plan.dataset, exp.FULL_PROFILE
    parts = []
    if p.train_samples is not None:
        parts.append(f"{d.n_train:,} training and {d.n_test:,} test digits of all MNIST")
    if p.devices < full["devices"] or p.rounds < full["rounds"]:
        parts.append(f"{p.devices} devices and {p.rounds} rounds of {full['devices']} and {full['rounds']}")
    if p.sweep != full["sweep"]:
        parts.append(f"C, E, B varied one at a time (C {list(p.client_fractions)}, E {list(p.local_epochs)}, B "
                     f"{list(p.batch_sizes)}), not the full grid")  # fmt: skip
    if p.repeats < full["repeats"]:
        parts.append(f"{p.repeats} seed(s) of the runs C27's accuracy compares of {full['repeats']}")
    return "; ".join(parts)


def render_report(
    root: Path, plan: exp.Plan, stored: list[StoredRun], *, notebook: str, parameters: dict[str, Any]
) -> list[ReportItem]:
    """The notebook's items (``edgelab.papers.notebook.report``): ``render``."""
    return render(root, plan, stored, notebook=notebook, parameters=parameters)


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
    return [
        ReportItem.from_verdict(
            ID,
            files,
            result,
            data_source=data_source(plan.dataset.provenance()),
            clock=CLOCK,
            paper_values_shown=False,
            notebook=notebook,
            parameters=parameters,
            reduction=reduction(plan),
        )
    ]

"""Park et al. 2020, Figures 1 and 2: the concept and the system, drawn from a stored ResNet run, not by hand.

The run is a ``park2020_resnet`` one (``pick_run``: the trained run with the
most devices). fig1 (a) is its data parallelism: a box per device worker with
its shard's id and size (an iid shard's index range is not stored), the model,
its parameters and final digest, the bytes of one synchronization; (b) cuts the
same layers into N stages by multiply-adds, illustrative (park2020 uses only
(a)). fig2 is the master, the workers and the monitor with the configured link
and the bytes measured, beside a "paper vs this run" table. Neither has a value
to predict: their checks are structural (what the run configured and built,
against the paper's description), so each is "consistent" when they hold and
"differs" when one fails, never "reproduced".
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import replace
from itertools import accumulate
from pathlib import Path
from typing import Any

import pandas as pd

from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.emulation import timeline
from edgelab.emulation.timeline import Topology
from edgelab.models.costs import is_resnet, layers, parameter_count, weight_count
from edgelab.papers.park2020.resnet import PAPER_TRAIN_SIZE
from edgelab.papers.park2020.runs import fewer, reduction
from edgelab.report import verdict as policy
from edgelab.report.manifest import ReportItem
from edgelab.report.style import apply_style, markdown_table, save_figure, save_table
from edgelab.report.verdict import Basis, Check, Noise, Verdict
from edgelab.training.config import TrainConfig, samples_per_device, steps_per_device

EXPERIMENT = "park2020_resnet"
PAPER_LINK_MBPS = 100.0
PAPER_BOARDS = 10
PAPER_MONITOR_S = 30.0
CLOCK = "none (a diagram of one stored run: counts and bytes from its records)"
_NOISE = Noise.none("counts, sizes and settings of one run: nothing timed")
#: The nodes fig2 draws besides the device workers.
_OTHER_NODES = ("master / parameter server", "monitor")
_BLOCK_END = re.compile(r"^(stem_relu|s\d+b\d+_relu|pool)$")
_MB = 1e6
_SMALL = {"fontsize": 6, "ha": "center", "va": "center"}


def pick_run(runs: Iterable[StoredRun]) -> StoredRun:
    """The trained ``park2020_resnet`` run with the most devices (then one epoch, the smallest model, batch)."""
    trained = [
        r
        for r in runs
        if r.params.get("experiment") == EXPERIMENT
        and r.summary.get("outcome") == "trained"
        and not r.tables.get("records", pd.DataFrame()).empty
    ]
    if not trained:
        raise ConfigError("runs", "no trained run", f"at least one trained {EXPERIMENT} run with records")

    def key(r: StoredRun) -> tuple[int, int, int, int]:
        t = r.params["train"]
        return (t["n_devices"], -t.get("epochs", 1), -parameter_count(t["model"]), -t["batch_size"])

    return max(trained, key=key)


def render_diagrams(
    runs: Iterable[StoredRun],
    *,
    root: Path | None = None,
    notebook: str = "",
    parameters: dict[str, Any] | None = None,
    topology: Topology | None = None,
) -> list[ReportItem]:
    """park2020/fig1 and fig2 from the run ``pick_run`` chooses among ``runs``."""
    run = pick_run(runs)
    rest = {"root": root, "notebook": notebook, "parameters": parameters}
    return [render_fig1(run, **rest), render_fig2(run, topology=topology, **rest)]


# ------------------------------------------------------------- the run ----


def _config(run: StoredRun) -> TrainConfig:
    return TrainConfig(**run.params["train"])


def devices_table(run: StoredRun) -> pd.DataFrame:
    """One row per device: shard, samples trained in the first epoch, bytes per synchronization and in all."""
    cfg, records = _config(run), run.tables["records"]
    n_train = int(run.params["dataset"]["n_train"])
    shards, steps = samples_per_device(cfg, n_train), steps_per_device(cfg, n_train)
    first = records[records["epoch"] == records["epoch"].min()] if "epoch" in records else records
    sent, received = ("bytes_sent", "median"), ("bytes_received", "median")
    table = records.groupby("device_index", sort=True).agg(
        device=("device", "first"), syncs=("device", "size"), push_bytes_per_sync=sent, pull_bytes_per_sync=received
    )
    table["pushed_bytes"] = records.groupby("device_index")["bytes_sent"].sum().astype(float)
    table["pulled_bytes"] = records.groupby("device_index")["bytes_received"].sum().astype(float)
    epoch = first.groupby("device_index").agg(trained_per_epoch=("samples", "sum"), batches_per_epoch=("steps", "sum"))
    index = [int(i) for i in table.index]
    table.insert(1, "shard", index)
    table.insert(2, "shard_samples", [shards[i] for i in index])
    table.insert(3, "expected_per_epoch", [min(shards[i], steps[i] * cfg.batch_size) for i in index])
    table = table.join(epoch).fillna({"trained_per_epoch": 0, "batches_per_epoch": 0}).reset_index(drop=True)
    table = table.astype({"trained_per_epoch": int, "batches_per_epoch": int})
    digest = run.summary.get("weights_sha256", "")
    return table.assign(model=cfg.model, parameters=parameter_count(cfg.model), weights_sha256=digest)


def _valid_cuts(model: str) -> list[int]:
    """Layers after which a model can be cut with one tensor crossing: ResNet block ends; else any unfused edge."""
    rows = layers(model)
    if is_resnet(model):
        return [i for i, r in enumerate(rows[:-1]) if _BLOCK_END.match(r.name)]
    return [i for i in range(len(rows) - 1) if not rows[i + 1].fused]


def balanced_cuts(costs: Sequence[float], valid: Sequence[int], n_stages: int) -> list[int]:
    """Cut points (stage ends but the last) minimising the largest stage's cost, at most ``n_stages`` stages.

    Examples
    --------
    >>> balanced_cuts([1, 1, 1, 1], [0, 1, 2], 2)
    [1]
    """
    ends = sorted({*valid, len(costs) - 1})
    n_stages = max(1, min(n_stages, len(ends)))
    prefix = [0.0, *accumulate(float(c) for c in costs)]

    def cost(after: int, end: int) -> float:  # layers after+1 .. end
        return prefix[end + 1] - prefix[after + 1]

    best: dict[tuple[int, int], tuple[float, int]] = {(1, e): (cost(-1, e), -1) for e in ends}
    for k in range(2, n_stages + 1):
        for e in ends:
            options = [(max(best[(k - 1, p)][0], cost(p, e)), p) for p in ends if p < e and (k - 1, p) in best]
            if options:
                best[(k, e)] = min(options)
    cuts, k, e = [], n_stages, ends[-1]
    while k > 1:
        e = best[(k, e)][1]
        cuts.append(e)
        k -= 1
    return sorted(cuts)


def stages_table(model: str, n_stages: int, batch_size: int) -> pd.DataFrame:
    """The model's layers cut into ``n_stages`` contiguous stages balanced by multiply-adds (illustrative)."""
    rows = layers(model)
    cuts = balanced_cuts([r.macs for r in rows], _valid_cuts(model), n_stages)
    total = sum(r.macs for r in rows) or 1
    out, start = [], 0
    for s, end in enumerate([*cuts, len(rows) - 1]):
        part = rows[start : end + 1]
        out.append(
            {
                "stage": s + 1,
                "first_layer": part[0].name,
                "last_layer": part[-1].name,
                "layers": len(part),
                "macs": sum(r.macs for r in part),
                "macs_share": sum(r.macs for r in part) / total,
                "parameters": sum(r.params for r in part),
                "activation_floats_per_sample": rows[end].output_size if end < len(rows) - 1 else 0,
                "activation_bytes_per_batch": 4 * rows[end].output_size * batch_size if end < len(rows) - 1 else 0,
            }
        )
        start = end + 1
    return pd.DataFrame(out)


def _diagram_verdict(checks: list[Check], reason: str, choices: list[str]) -> Verdict:
    """The policy's verdict on a diagram's structural checks: consistent, differs, or not judged for ``reason``."""
    return policy.decide(
        checks, fitted=[], predicted=[], noise=_NOISE, choices=choices, reason=reason, reason_class="qualitative"
    )


def _choices(run: StoredRun, topology: Topology | None = None) -> list[str]:
    """The modelling choices the diagram's run made where the paper is silent."""
    cfg = run.params["train"]
    split = "its 1/N shard" if cfg.get("worker_data") == "shard" else "the whole training set"
    where = topology.describe() if topology is not None else "not recorded by the run"
    return [f"worker_data={cfg.get('worker_data')}: each device trains {split}", f"topology: {where}"]


def _box(ax: Any, x: float, y: float, text: str, color: str, size: float = 7) -> None:
    style = {"boxstyle": "round,pad=0.4", "fc": color, "ec": "0.3"}
    ax.text(x, y, text, ha="center", va="center", fontsize=size, bbox=style, zorder=3)


def _arrow(
    ax: Any, start: tuple[float, float], end: tuple[float, float], label: str = "", at: float = 0.5, **style: Any
) -> None:
    ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "color": "0.35", **style}, zorder=1)
    if label:
        mid = (start[0] + (end[0] - start[0]) * at, start[1] + (end[1] - start[1]) * at)
        ax.text(*mid, label, fontsize=6, ha="center", va="center", bbox={"fc": "white", "ec": "none", "pad": 1})


def _common(run: StoredRun, notebook: str, parameters: dict[str, Any] | None) -> dict[str, Any]:
    source = {"experiment": EXPERIMENT, "run": run.key, "dataset": run.summary.get("dataset", run.params["dataset"])}
    common = {"data_source": source, "clock": CLOCK, "notebook": notebook, "parameters": parameters or {}}
    n, n_train = int(run.params["train"]["n_devices"]), int(run.params["dataset"]["n_train"])
    images = fewer(n_train, int(run.params["dataset"].get("full_train_size") or PAPER_TRAIN_SIZE), "training images")
    return common | {"reduction": reduction(fewer(n, PAPER_BOARDS, "boards"), images)}


# ----------------------------------------------------------------- fig1 ----


def render_fig1(
    run: StoredRun, *, root: Path | None = None, notebook: str = "", parameters: dict[str, Any] | None = None
) -> ReportItem:
    """park2020/fig1 from a stored ResNet run: (a) its data parallelism, (b) an illustrative model split."""
    import matplotlib.pyplot as plt

    apply_style()
    item_id = "park2020/fig1"
    cfg, records = _config(run), run.tables["records"]
    n_train = int(run.params["dataset"]["n_train"])
    devices = devices_table(run)
    stages = stages_table(cfg.model, cfg.n_devices, cfg.batch_size)
    n, params, digest = cfg.n_devices, parameter_count(cfg.model), str(run.summary.get("weights_sha256", ""))
    pull = weight_count(cfg.model) * 4

    shard_total, trained = int(devices["shard_samples"].sum()), devices["trained_per_epoch"]
    full = cfg.worker_data == "full"
    shard_text = (
        f"shards {' + '.join(f'{v:,}' for v in devices['shard_samples'])} = {shard_total:,}; {n_train:,} samples"
    )
    shard_rule = "every device holds the whole training set" if full else "the iid shards partition the training set"
    trained_text = f"{int(trained.sum()):,} samples in epoch 1 ({', '.join(f'{v:,}' for v in trained)} per device)"
    trained_rule = f"each device trains min(shard, batches x {cfg.batch_size}) samples per epoch " + (
        f"({', '.join(f'{v:,}' for v in devices['expected_per_epoch'])})"
    )
    pulls = sorted(set(records["bytes_received"].astype(int)))
    pull_rule = f"every device pulls the whole {cfg.model} every synchronization ({pull:,} bytes: every weight x 4)"
    stage_text = f"{' + '.join(f'{v:,}' for v in stages['parameters'])} = {int(stages['parameters'].sum()):,}"
    configured, built = Basis.CONFIGURED, Basis.STRUCTURE
    checks = [
        Check(
            "workers",
            len(devices) == n,
            f"{len(devices)} worker boxes; n_devices={n}",
            "one box per device",
            basis=configured,
        ),
        Check("shards", shard_total == (n * n_train if full else n_train), shard_text, shard_rule, basis=configured),
        Check(
            "samples trained",
            bool((trained == devices["expected_per_epoch"]).all()),
            trained_text,
            trained_rule,
            basis=configured,
        ),
        Check("same model", pulls == [pull], f"pulls of {pulls} bytes", pull_rule, basis=built),
        Check(
            "stage parameters",
            int(stages["parameters"].sum()) == params,
            stage_text,
            f"(b) holds {params:,}",
            basis=built,
        ),
    ]
    reason = "a concept diagram: no values to compare (the paper's Fig 1 has none)"
    verdict = _diagram_verdict(checks, reason, _choices(run))

    fig, (ax_a, ax_b) = plt.subplots(2, 1, figsize=(max(10.0, 2.2 * n), 8.5), height_ratios=(1.6, 1))
    for ax, low in ((ax_a, 0), (ax_b, 3.5)):
        ax.set(xlim=(0, n), ylim=(low, 10))
        ax.axis("off")
    xs = [i + 0.5 for i in range(n)]
    name = run.summary.get("dataset", {}).get("name", run.params["dataset"].get("name", "data"))
    _box(ax_a, n / 2, 9.2, f"{name}: {n_train:,} training samples, split {cfg.partition} into {n} shards", "#eeeeee")
    server = f"parameter server: holds {cfg.model} ({params:,} parameters)\nfinal weights sha256 {digest[:16]}…"
    _box(ax_a, n / 2, 1.0, server, "#cfe2f3")
    for x, d in zip(xs, devices.itertuples(), strict=True):
        text = (
            f"{d.device}\nshard {d.shard}: {d.shard_samples:,} samples\ntrained {d.trained_per_epoch:,}/epoch "
            f"({d.batches_per_epoch} batches)\n{d.model}, {d.parameters:,} params\nsha256 {digest[:10]}…"
        )
        _box(ax_a, x, 5.6, text, "#d9ead3")
        _arrow(ax_a, (n / 2, 8.8), (x, 6.9))
        label = f"push {d.push_bytes_per_sync / _MB:.2f} MB\npull {d.pull_bytes_per_sync / _MB:.2f} MB\nper sync"
        _arrow(ax_a, (x, 4.3), (n / 2, 1.6), label, at=0.25, arrowstyle="<->")
    ax_a.set_title(f"(a) data parallel: the run's {n} device workers, each a full copy of {cfg.model}", fontsize=10)
    width = n / len(stages)
    _box(ax_b, n / 2, 9.2, f"the same input batch ({cfg.batch_size} images) reaches stage 1", "#eeeeee")
    for s in stages.itertuples():
        x = (s.stage - 0.5) * width
        text = (
            f"stage {s.stage}\n{s.first_layer} …\n… {s.last_layer}\n{s.layers} layers\n"
            f"{s.macs / 1e6:,.1f} M MACs ({s.macs_share:.0%})\n{s.parameters:,} params"
        )
        _box(ax_b, x, 5.0, text, "#fde9c9")
        if s.activation_bytes_per_batch:
            per = f"{s.activation_bytes_per_batch / _MB:.2f} MB/batch"
            ax_b.text(s.stage * width, 6.3, f"{s.activation_floats_per_sample:,} floats/sample\n{per}", **_SMALL)
            _arrow(ax_b, ((s.stage - 0.1) * width, 5.0), ((s.stage + 0.1) * width, 5.0))
    _arrow(ax_b, (n / 2, 8.8), (0.5 * width, 5.8))
    ax_b.set_title(
        f"(b) model parallel, {len(stages)} stages balanced by multiply-adds — illustrative, not used in park2020",
        fontsize=10,
    )
    fig.suptitle(f"{item_id} — parallelization methods, drawn from run {run.key} ({verdict.status})", fontsize=11)

    parts = [devices.assign(panel="a data parallel"), stages.assign(panel="b model parallel (illustrative)")]
    table = pd.concat(parts, ignore_index=True).convert_dtypes()
    table = table[["panel", *[c for c in table.columns if c != "panel"]]].assign(id=item_id)
    md = [
        f"# {item_id}: parallelization methods, drawn from a live run",
        "",
        f"Run {run.key}: {cfg.model}, batch {cfg.batch_size}, {n} devices, {cfg.worker_data} data ({cfg.partition}), "
        f"max_steps {cfg.max_steps}. An iid shard's index range is not stored: shards are shown by id and size.",
        "Panel (b) is illustrative, not used in park2020: the layers of `edgelab.models.costs` cut at block ends "
        "(one tensor crosses) into contiguous stages minimising the largest stage's multiply-adds.",
        f"\n{verdict.markdown()}\n(a) Device workers:\n",
        markdown_table(devices.drop(columns=["weights_sha256"])),
        f"Final weights sha256: `{digest}`\n\n(b) Stages (illustrative):\n",
        markdown_table(stages.assign(macs_share=stages["macs_share"].round(3))),
    ]
    files = save_table(table, "\n".join(md), item_id, root=root)
    files.append(save_figure(fig, item_id, root=root))
    return ReportItem.from_verdict(
        item_id, files, verdict, paper_values_shown=False, **_common(run, notebook, parameters)
    )


# ----------------------------------------------------------------- fig2 ----


def nodes_table(run: StoredRun, topology: Topology | None = None) -> pd.DataFrame:
    """One row per node drawn: the master/parameter server, every device worker, the monitor."""
    topology = topology or Topology()
    p, cluster = run.summary["profile"], run.summary.get("cluster", {})
    records = run.tables["records"]
    devices = devices_table(run)
    wire = timeline.wire_bytes(records, topology)
    monitor = run.tables.get("monitor", pd.DataFrame())
    samples = monitor.groupby("device").size() if "device" in monitor else pd.Series(dtype=int)
    base = {"cores": p["cores"], "clock_ghz": p["clock_ghz"], "memory_mb": p["memory_mb"]}
    base |= {"link_mbps": p["link_mbps"], "latency_ms": p["latency_s"] * 1e3}
    first = devices["device"].iloc[0]
    where = f"on {first} (its board and link)" if topology.master_is_device else "a machine of its own"
    pushed, pulled = float(devices["pushed_bytes"].sum()), float(devices["pulled_bytes"].sum())
    on_link = wire.loc[first] if topology.master_is_device else {"sent": pulled, "received": pushed}
    rows = [{"node": "master / parameter server", "role": "master", "where": where, **base}]
    rows[0] |= {"pushed_bytes": pushed, "pulled_bytes": pulled}
    rows[0] |= {"link_sent_bytes": float(on_link["sent"]), "link_received_bytes": float(on_link["received"])}
    dask = f"Dask worker, {cluster.get('threads_per_worker', '?')} thread, limit {cluster.get('memory_limit', '?')}"
    for d in devices.itertuples():
        row = {"node": d.device, "role": "worker", "where": dask, **base}
        row |= {"pushed_bytes": d.pushed_bytes, "pulled_bytes": d.pulled_bytes}
        row |= {"link_sent_bytes": float(wire.loc[d.device, "sent"])}
        row |= {"link_received_bytes": float(wire.loc[d.device, "received"])}
        rows.append(row | {"monitor_samples": int(samples.get(d.device, 0))})
    interval = run.params.get("monitor_interval_s")
    rows.append({"node": "monitor", "role": "monitor", "where": f"a sampler thread on each device, every {interval} s"})
    return pd.DataFrame(rows)


def paper_vs_run(run: StoredRun, topology: Topology | None = None) -> pd.DataFrame:
    """The side table: the paper's setup (Fig 2 and section 3) against this run's."""
    topology = topology or Topology()
    p, s = run.summary["profile"], run.summary
    model, cluster, cal = s.get("device_model", {}), s.get("cluster", {}), s.get("calibration", {})
    n = run.params["train"]["n_devices"]
    hosts = f"attached cluster {cluster['address']}" if "address" in cluster else "Dask worker processes on one host"
    fitted = " and ".join(model.get("fitted_on", [])) or "?"
    budget, nan = p["memory_mb"] - p["os_reserve_mb"] - p.get("framework_mb", 0), float("nan")
    rate = f"{model.get('step_s', nan) * 1e3:.1f} ms/step + {model.get('flops_per_s', nan) / 1e9:.3f} GFLOP/s"
    rows = {
        "boards": ("10 Raspberry Pi 3B (master among them? not given, P23)", f"{n} emulated {p['name']}, {hosts}"),
        "CPU": (
            "1.2 GHz quad-core (Cortex-A53)",
            f"{p['cores']} cores at {p['clock_ghz']} GHz (the CPU % denominator); time from the device model "
            f"{rate}, fitted on {fitted}; host speed factor {cal.get('speed_factor', nan):.1f} (nominal, unused)",
        ),
        "memory": (
            "1 GB",
            f"{p['memory_mb']} MB: {p['os_reserve_mb']} OS + {p.get('framework_mb', 0)} framework, {budget} MB "
            f"training budget enforced per step; Dask limit {cluster.get('memory_limit', '?')} (safety net)",
        ),
        "network": (
            "100 Mbit/s Ethernet",
            f"modelled {p['link_mbps']:g} Mbit/s, {p['latency_s'] * 1e3:.2f} ms one way (no tc netem: "
            f"edgelab.emulation.timeline times the measured bytes); {topology.describe()}",
        ),
        "monitoring": (
            "Ganglia 3.7.2, UDP, every 30 s",
            f"a sampler thread per device every {run.params.get('monitor_interval_s')} s; its samples travel with "
            "each round's result",
        ),
        "transport": (
            "MXNet 0.9.5 KVStore (the paper says MPI; ps-lite in fact, P23)",
            "Dask: the driver holds the weights; each round the devices pull them and push their updates",
        ),
    }
    return pd.DataFrame([(k, *v) for k, v in rows.items()], columns=["", "paper", "this run"])


def render_fig2(
    run: StoredRun,
    *,
    root: Path | None = None,
    notebook: str = "",
    parameters: dict[str, Any] | None = None,
    topology: Topology | None = None,
) -> ReportItem:
    """park2020/fig2 from a stored ResNet run; ``topology`` is the experiment's (the run does not record it)."""
    import matplotlib.pyplot as plt

    apply_style()
    item_id = "park2020/fig2"
    topology = topology or Topology()
    nodes, side = nodes_table(run, topology), paper_vs_run(run, topology)
    n = int(run.params["train"]["n_devices"])
    link = float(run.summary["profile"]["link_mbps"])
    interval = run.params.get("monitor_interval_s")
    boards = n + (0 if topology.master_is_device else 1)
    workers = int((nodes["role"] == "worker").sum())
    node_text = f"{len(nodes)} nodes drawn: master + {workers} workers + monitor ({boards} boards)"
    configured = Basis.CONFIGURED
    link_text = f"{link:g} Mbit/s vs the paper's {PAPER_LINK_MBPS:g}"
    link_check = policy.close("link rate", link, PAPER_LINK_MBPS, basis=configured, text=link_text)
    link_check = replace(link_check, note="a setting: the device profile copies the paper's link")
    fewer = f"the run used {n} of the paper's {PAPER_BOARDS}" if n < PAPER_BOARDS else ""
    period = "a setting; the sampler is not Ganglia"
    same_period = interval is not None and policy.within(abs(float(interval) - PAPER_MONITOR_S), 0.0)
    checks = [
        Check(
            "nodes", len(nodes) == n + len(_OTHER_NODES), node_text, "node count = N + 1 (+ monitor)", basis=configured
        ),
        link_check,
        Check(
            "boards",
            None if fewer else n == PAPER_BOARDS,
            f"{n} devices",
            f"{PAPER_BOARDS} boards",
            fewer,
            basis=configured,
            undecided="too small" if fewer else "",
        ),
        Check(
            "monitor period",
            True if same_period else None,
            f"{interval} s",
            f"Ganglia's {PAPER_MONITOR_S:g} s",
            period if same_period else f"{period}; a short run samples more often to see anything",
            basis=configured,
            undecided="" if same_period else "too small",
        ),
    ]
    reason = (
        "a system diagram: its numbers (100 Mbit/s, ten boards, 30 s) are settings copied into the run, not "
        "predictions: nothing to reproduce"
    )
    verdict = _diagram_verdict(checks, reason, _choices(run, topology))

    fig, (ax, ax_t) = plt.subplots(2, 1, figsize=(max(10.0, 2.2 * n), 10.5), height_ratios=(3, 1.3))
    ax.set(xlim=(0, n), ylim=(0, 10))
    ax.axis("off")
    master, workers, monitor = nodes.iloc[0], nodes[nodes["role"] == "worker"], nodes.iloc[-1]
    served = f"serves {master['pulled_bytes'] / _MB:.1f} MB, collects {master['pushed_bytes'] / _MB:.1f} MB"
    _box(ax, n / 2, 9.0, f"master / parameter server ({master['where']})\ndatasets and weights\n{served}", "#cfe2f3")
    model, nan = run.summary.get("device_model", {}), float("nan")
    rate = f"{model.get('step_s', nan) * 1e3:.1f} ms/step + {model.get('flops_per_s', nan) / 1e9:.2f} GFLOP/s"
    for i, w in enumerate(workers.itertuples()):
        x = i + 0.5
        text = (
            f"{w.node}\n{int(w.cores)} cores @ {w.clock_ghz} GHz, {int(w.memory_mb)} MB\n{w.where}\n"
            f"link {w.link_mbps:g} Mbit/s, {w.latency_ms:.2f} ms\n"
            f"{rate}\n{int(w.monitor_samples)} monitor samples"
        )
        _box(ax, x, 5.0, text, "#d9ead3", size=6.5)
        local = topology.master_is_device and i == 0
        label = ("local (same board)\n" if local else f"{link:g} Mbit/s\n") + (
            f"push {w.pushed_bytes / _MB:.1f} MB\npull {w.pulled_bytes / _MB:.1f} MB"
        )
        _arrow(ax, (x, 6.1), (n / 2, 8.3), label, at=0.3, arrowstyle="<->")
        _arrow(ax, (x, 3.9), (n / 2, 1.5), linestyle=":")
    _box(ax, n / 2, 1.0, f"monitor: {monitor['where']}\n(the paper: a Ganglia server, UDP, every 30 s)", "#eeeeee")
    ax.set_title(
        f"{item_id} — distributed training environment, drawn from run {run.key} ({verdict.status})", fontsize=10
    )
    ax_t.axis("off")
    cells = [[textwrap.fill(str(v), w) for v, w in zip(row, (12, 40, 85), strict=True)] for row in side.values]
    grid = ax_t.table(
        cellText=cells, colLabels=["", "paper", "this run"], colWidths=[0.1, 0.3, 0.6], loc="center", cellLoc="left"
    )
    grid.auto_set_font_size(False)
    grid.set_fontsize(6.5)
    for (r, _), cell in grid.get_celld().items():
        lines = max(str(c).count("\n") + 1 for c in cells[r - 1]) if r else 1
        cell.set_height(0.055 * lines)
        cell.get_text().set_wrap(True)
    ax_t.set_title("paper vs this run", fontsize=9)

    md = [
        f"# {item_id}: distributed training environment, drawn from a live run",
        "",
        f"Run {run.key}: {run.params['train']['model']} on {n} devices. Where the parameter server sits is the "
        f"experiment's topology, which the run does not record: {topology.describe()}.",
        "Bytes are the weights and updates each device moved (its records); the link columns are what each "
        "device's own link carried under that topology. Data shards sent before training are not in the records.",
        f"\n{verdict.markdown()}",
        markdown_table(nodes.convert_dtypes()),
        "Paper vs this run:\n",
        markdown_table(side),
    ]
    files = save_table(nodes.assign(id=item_id), "\n".join(md), item_id, root=root)
    files.append(save_figure(fig, item_id, root=root))
    return ReportItem.from_verdict(
        item_id, files, verdict, paper_values_shown=True, **_common(run, notebook, parameters)
    )

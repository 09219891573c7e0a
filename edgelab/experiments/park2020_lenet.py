"""Park et al. 2020, LeNet on MNIST: Tables 1-2 and Figure 4 (a-d).

Paper: Park, Lee, Kim, "Hardware Resource Analysis in Distributed Training with
Edge Devices", Electronics 9(1):28, 2020 (doi 10.3390/electronics9010028).

The notebook ``notebooks/park2020_lenet.ipynb`` calls, in order:
``prepare`` (load data, validate every run before any cluster work),
``run`` (train what the results store does not hold yet), ``summarize``
(emulated device time and hardware use per run, calibrated per table on the
paper's 1-device cell) and ``edgelab.figures.park2020.render_lenet``.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from edgelab import timeline
from edgelab.cluster import DeviceCluster, connect
from edgelab.data import DATASETS, Dataset, load_dataset
from edgelab.devices import DeviceProfile, calibrate, get_profile, with_memory
from edgelab.errors import ConfigError
from edgelab.models import parameter_count
from edgelab.monitor import utilisation
from edgelab.reference import load_reference
from edgelab.results import ResultsStore, StoredRun
from edgelab.train import TrainConfig, TrainRun, check, samples_per_device, train

EXPERIMENT = "park2020_lenet"
# Part of every results-store key: raise it when a change moves what the same
# parameters measure, so stored runs are re-measured, never mixed with new ones.
# 2: device workers start without Dask's MALLOC_TRIM_THRESHOLD_ (edgelab.cluster).
MEASUREMENT_REVISION = 2
# The paper trains on all 60,000 MNIST training images per epoch.
PAPER_TRAIN_SIZE = 60_000
TABLE_OF_MODEL = {"mlp": "park2020/table1", "cnn": "park2020/table2"}

#: parameters papermill injects for the paper-sized run (``edgelab reproduce --profile full``)
FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "device_counts": list(range(1, 11)),
    "sample_limit": None,
    "test_limit": None,
    "monitor_interval_s": 30.0,
}


@dataclass(frozen=True)
class LenetParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    models: tuple[str, ...] = ("mlp", "cnn")
    device_counts: tuple[int, ...] = (1, 2, 3)
    worker_data: tuple[str, ...] = ("full", "shard")
    epochs: int = 1
    batch_size: int = 64
    sample_limit: int | None = 1920
    test_limit: int | None = 1000
    dataset: str = "mnist"
    device_profile: str = "pi3b"
    device_memory_mb: int | None = None
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0
    sync_every: str = "batch"
    ps_link: str = "shared"
    # The optimizer of MXNet's image-classification example the paper ran
    # (train_mnist.py: lr 0.05; common/fit.py: SGD, momentum 0.9, wd 0.0001).
    learning_rate: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0001
    monitor_interval_s: float = 0.25

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ConfigError("dataset", self.dataset, f"one of {', '.join(DATASETS)}")
        if not self.models:
            raise ConfigError("models", self.models, "a non-empty list of mlp, cnn")
        if not self.device_counts or any(not isinstance(n, int) or n < 1 for n in self.device_counts):
            raise ConfigError("device_counts", self.device_counts, "a non-empty list of integers >= 1")
        if not self.monitor_interval_s > 0:
            raise ConfigError("monitor_interval_s", self.monitor_interval_s, "a number of seconds > 0")
        if self.ps_link not in timeline.PS_LINKS:
            raise ConfigError("ps_link", self.ps_link, f"one of {', '.join(timeline.PS_LINKS)}")

    def configs(self) -> list[TrainConfig]:
        """One training run per (model, device count, worker data)."""
        return [
            TrainConfig(
                model=m,
                n_devices=n,
                epochs=self.epochs,
                batch_size=self.batch_size,
                sync_every=self.sync_every,
                worker_data=w,
                learning_rate=self.learning_rate,
                momentum=self.momentum,
                weight_decay=self.weight_decay,
                seed=self.seed,
            )
            for m, n, w in itertools.product(self.models, sorted(self.device_counts), self.worker_data)
        ]


@dataclass
class Plan:
    """Validated work: the data, the device, and every run to do."""

    params: LenetParams
    dataset: Dataset
    profile: DeviceProfile
    configs: list[TrainConfig]
    memory_mb: dict[str, float] = field(default_factory=dict)

    def run_params(self, cfg: TrainConfig) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        d = self.dataset
        return {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "train": cfg.to_dict(),
            "dataset": {
                "name": d.name,
                "source": d.source,
                "n_train": d.n_train,
                "n_test": d.n_test,
                "checksum": d.checksum_status,
            },
            "device_profile": self.profile.name,
            "device_memory_mb": self.profile.memory_mb,
            "cluster": self.params.scheduler_address or "emulated",
            "monitor_interval_s": self.params.monitor_interval_s,
        }


def prepare(**kwargs: Any) -> Plan:
    """Load the data and check every run, before any cluster work.

    Keyword arguments are the fields of ``LenetParams`` (lists are accepted for
    the tuple fields, as papermill passes them).
    """
    known = set(LenetParams.__dataclass_fields__)
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ConfigError(unknown[0], kwargs[unknown[0]], f"a parameter among {', '.join(sorted(known))}")
    for name in ("models", "device_counts", "worker_data"):
        if name in kwargs and isinstance(kwargs[name], list | tuple):
            kwargs[name] = tuple(kwargs[name])
        elif name in kwargs:
            kwargs[name] = (kwargs[name],)
    params = LenetParams(**kwargs)
    profile = with_memory(get_profile(params.device_profile), params.device_memory_mb)
    configs = params.configs()  # validates model, worker_data ... through TrainConfig
    dataset = load_dataset(
        params.dataset,
        data_dir=params.data_dir,
        sample_limit=params.sample_limit,
        test_limit=params.test_limit,
        seed=params.seed,
    )
    memory = {}
    for cfg in configs:
        estimate = check(cfg, n_train=dataset.n_train, profile=profile)
        memory[f"{cfg.model}/N={cfg.n_devices}/{cfg.worker_data}"] = round(estimate["total"], 1)
    return Plan(params, dataset, profile, configs, memory)


def pending(plan: Plan, store: ResultsStore) -> list[TrainConfig]:
    """Runs the store does not hold yet."""
    return [cfg for cfg in plan.configs if store.get(plan.run_params(cfg)) is None]


def open_cluster(plan: Plan, store: ResultsStore, *, dashboard_address: str = ":8787") -> DeviceCluster | None:
    """Start (or attach) a cluster big enough for the pending runs; ``None`` if nothing is pending."""
    todo = pending(plan, store)
    if not todo:
        return None
    return connect(
        max(c.n_devices for c in todo),
        profile=plan.profile.name,
        scheduler_address=plan.params.scheduler_address,
        dashboard_address=dashboard_address,
    )


def run(plan: Plan, *, store: ResultsStore | None = None, cluster: DeviceCluster | None = None) -> list[StoredRun]:
    """Train every pending run and store it; return all runs of the plan.

    A cluster is started (or attached) only when something is pending, with as
    many devices as the largest run needs, and closed again if we started it.
    """
    store = store or ResultsStore()
    todo = pending(plan, store)
    if todo:
        own = cluster is None
        if cluster is None:
            cluster = open_cluster(plan, store, dashboard_address=":0")
        assert cluster is not None  # something is pending
        try:
            calibration = calibrate(cluster.profile if not cluster.emulated else plan.profile)
            for cfg in todo:
                result = train(cluster, plan.dataset, cfg, monitor_interval_s=plan.params.monitor_interval_s)
                _store(store, plan, result, calibration.to_dict(), cluster.info)
        finally:
            if own:
                cluster.close()
    runs = [store.get(plan.run_params(cfg)) for cfg in plan.configs]
    return [r for r in runs if r is not None]


def _store(
    store: ResultsStore, plan: Plan, result: TrainRun, calibration: dict[str, Any], cluster: dict[str, Any]
) -> StoredRun:
    summary = {
        "host": result.host,
        "cluster": cluster,
        "calibration": calibration,
        "dataset": plan.dataset.provenance(),
        "profile": asdict(plan.profile),
    }
    tables = {
        "records": result.records,
        "evaluations": result.evaluations,
        "monitor": result.monitor,
        "shards": result.shards,
        "recoveries": result.recoveries,
    }
    return store.put(plan.run_params(result.config), summary, tables)


# ------------------------------------------------------------ summaries ----


def run_summary(run: StoredRun, profile: DeviceProfile, *, speed_factor: float, ps_link: str) -> dict[str, Any]:
    """Emulated time and hardware use of one stored run at a given speed factor."""
    cfg = run.params["train"]
    records = run.tables["records"]
    rounds = timeline.compose(records, profile, speed_factor=speed_factor, ps_link=ps_link)
    elapsed = float(rounds["elapsed_s"].iloc[-1])
    n_train = int(run.params["dataset"]["n_train"])
    scale = PAPER_TRAIN_SIZE / n_train
    per_device = records.groupby("device")
    cpu_pct = timeline.emulated_cpu_percent(records, elapsed, speed_factor=speed_factor, cores=profile.cores)
    monitor = run.tables["monitor"]
    host_rss_mb = monitor.groupby("device")["rss_bytes"].mean().mean() / 2**20 if not monitor.empty else float("nan")
    host_cpu = (
        pd.concat([utilisation(g) for _, g in monitor.groupby("device")])["cpu_pct"].mean()
        if not monitor.empty
        else float("nan")
    )
    evaluations = run.tables["evaluations"]
    return {
        "model": cfg["model"],
        "devices": int(cfg["n_devices"]),
        "worker_data": cfg["worker_data"],
        "accuracy": float(evaluations["accuracy"].iloc[-1]),
        "rounds": int(records["round"].nunique()),
        "syncs_per_device": int(per_device.size().max()),
        "emulated_s": elapsed,
        "emulated_projected_s": elapsed * scale,
        "compute_share": float(rounds["compute_max_s"].sum() / elapsed),
        "cpu_pct_emulated": float(cpu_pct.mean()),
        "cpu_pct_host": float(host_cpu),
        "rss_mb_host": float(host_rss_mb),
        "working_set_mb": float(records["working_set_bytes"].mean() / 2**20),
        "sent_kb_per_device": float(per_device["bytes_sent"].sum().mean() / 1e3),
        "received_kb_per_device": float(per_device["bytes_received"].sum().mean() / 1e3),
        "sent_kb_projected": float(per_device["bytes_sent"].sum().mean() / 1e3 * scale),
        "received_kb_projected": float(per_device["bytes_received"].sum().mean() / 1e3 * scale),
        "sent_kb_s": float(per_device["bytes_sent"].sum().mean() / 1e3 / elapsed),
        "received_kb_s": float(per_device["bytes_received"].sum().mean() / 1e3 / elapsed),
        "host_train_wall_s": float(run.summary["host"]["train_wall_s"]),
        "n_train": n_train,
        "speed_factor": speed_factor,
    }


@dataclass
class LenetSummary:
    """Per-run results under the nominal and the calibrated speed factor."""

    runs: pd.DataFrame  # one row per (model, devices, worker_data, calibration)
    calibration: dict[str, Any]  # per model: the cell, the factor, the host measurement
    dataset: dict[str, Any]


def summarize(plan: Plan, runs: list[StoredRun]) -> LenetSummary:
    """Summarize every run twice: with the nominal factor, and calibrated per table.

    The calibrated factor of a model is the one at which its 1-device run,
    projected to the paper's 60,000-sample epoch, takes exactly the paper's
    1-device time; every other cell is then a prediction, not a fit.
    """
    profile, ps_link = plan.profile, plan.params.ps_link
    rows, calibration = [], {}
    for model in sorted({r.params["train"]["model"] for r in runs}):
        model_runs = [r for r in runs if r.params["train"]["model"] == model]
        nominal = float(model_runs[0].summary["calibration"]["speed_factor"])
        paper = load_reference(TABLE_OF_MODEL[model])
        paper_1 = float(paper.query("devices == 1 and metric == 'elapsed_time_s'")["value"].iloc[0])
        ones = [r for r in model_runs if r.params["train"]["n_devices"] == 1]
        fitted = None
        if ones:
            one = ones[0]
            scale = PAPER_TRAIN_SIZE / int(one.params["dataset"]["n_train"])

            def projected(factor: float, one: StoredRun = one, scale: float = scale) -> float:
                rounds = timeline.compose(one.tables["records"], profile, speed_factor=factor, ps_link=ps_link)
                return float(rounds["elapsed_s"].iloc[-1]) * scale

            fitted = timeline.solve_speed_factor(projected, paper_1)
        calibration[model] = {
            "cell": f"{TABLE_OF_MODEL[model]} devices=1 elapsed_time_s={paper_1:g}",
            "nominal_speed_factor": nominal,
            "calibrated_speed_factor": fitted,
            "host": model_runs[0].summary["calibration"],
        }
        for r in model_runs:
            rows.append({"calibration": "nominal", **run_summary(r, profile, speed_factor=nominal, ps_link=ps_link)})
            if fitted is not None:
                rows.append(
                    {"calibration": "calibrated", **run_summary(r, profile, speed_factor=fitted, ps_link=ps_link)}
                )
    return LenetSummary(pd.DataFrame(rows), calibration, plan.dataset.provenance())


def deterministic_facts(plan: Plan) -> pd.DataFrame:
    """Values that depend only on the parameters: nbval checks them exactly."""
    rows = []
    for cfg in plan.configs:
        per_device = samples_per_device(cfg, plan.dataset.n_train)
        params = parameter_count(cfg.model)
        rows.append(
            {
                "model": cfg.model,
                "devices": cfg.n_devices,
                "worker_data": cfg.worker_data,
                "parameters": params,
                "bytes_per_sync_each_way": params * 4,
                "samples_per_device": max(per_device),
                "syncs_per_device_per_epoch": -(-max(per_device) // cfg.batch_size),
            }
        )
    return pd.DataFrame(rows)

"""Zhang 2018, the three networks on the three tiers: Table 1 (stand-alone times, sizes) and Table 2 (with latency).

Table 1 times each network on each tier alone (batch 50, no communication).
Those nine times are the hierarchy's calibration (``edgelab.emulation.tier_clock``):
on every run of the hierarchy they are what a stage costs, so here they are
fitted, shown, never judged. Beside them stand the times measured on this
host: each network built on a device of each tier of a small hierarchy (one
end, one edge, one cloud worker; TensorFlow at the tier's threads, capped at
the host's cores) and timed over ``tasks`` tasks of ``task_size`` images, one
task at a time (``edgelab.hierarchy.tiered.standalone``). A laptop is not the report's
VMs and GPU, so only the ratios between networks can be compared.

The sizes are measured, not computed: the weights file Keras writes for each
network alone and once compiled with the optimizer the report trains it
with (its slots are in the file). The accuracy rows come from training each
network (``edgelab.hierarchy.tier_training``, the report's recipes) on a device of the
hierarchy's cloud tier for ``epochs`` epochs of ``train_images`` images and
scoring it on ``test_images`` test images at both label levels. The report
trains 100-500 epochs on 50,000 images; the smoke profile trains one brief
epoch, a check that the path works, and every accuracy says what it was
trained on. The times never depend on the training: they are the calibration.

Table 2 adds each tier's latency (sending and receiving, once per task of
50 images) and the transfer of the task's images: the clock's prediction of
its processing time per image, beside the report's.
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from distributed import KilledWorker
from distributed.client import FutureCancelledError

from edgelab.cluster.device_cluster import DeviceCluster, device_resource
from edgelab.common import checks
from edgelab.common.errors import ClusterError, ConfigError
from edgelab.common.results import StoredRun
from edgelab.data import Dataset, load_dataset
from edgelab.data.cifar100 import coarse_of
from edgelab.emulation.profiles import DeviceProfile, get_profile
from edgelab.emulation.tier_clock import TierCalibration, zhang2018_calibration
from edgelab.emulation.tiers import ZHANG2018, HierarchySpec
from edgelab.hierarchy.tier_training import RECIPES, train_and_score
from edgelab.hierarchy.tiered import TASK_SIZE, deploy, standalone
from edgelab.models.tiers import REPORT_OPTIMIZERS, TIER_NETWORK_NAMES, build_tier_network, saved_bytes, sizes
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.report.reference import load_reference
from edgelab.runtime.devices import connect, start_hierarchy

EXPERIMENT = "zhang2018_tiers"
MEASUREMENT_REVISION = 1
TIERS = ("end", "edge", "cloud")
#: Table 1's columns, by network.
COLUMNS = {"mobilenet": "MobileNet", "resnet34": "ResNet", "wrn-28-10": "WRN", "wrn-28-10-flatten": "WRN"}
#: Each tier's network and latency column in Table 2.
TABLE2 = (
    ("end", "mobilenet", 0.0, "end_dev_MobileNet_latency_0s"),
    ("edge", "resnet34", 0.0, "edge_dev_ResNet_latency_0s"),
    ("edge", "resnet34", 0.5, "edge_dev_ResNet_latency_0.5s"),
    ("cloud", "wrn-28-10", 0.0, "cloud_WRN_latency_0s"),
    ("cloud", "wrn-28-10", 1.0, "cloud_WRN_latency_1s"),
)

FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "tasks": 20,
    "task_size": TASK_SIZE,
    "accuracy_networks": ["mobilenet", "resnet34", "wrn-28-10"],
    "train_images": 2000,
    "test_images": 2000,
    "epochs": 3,
    "train_eagerly": False,
}
#: The report's training set: CIFAR-100's 50,000 images; its shortest schedule (MobileNet's) in epochs.
REPORT_TRAIN_IMAGES = 50_000
REPORT_MIN_EPOCHS = 100
STANDIN_LABELS = "the CIFAR-10 stand-in (its 10 classes as fine labels, 5 coarse groups)"


@dataclass(frozen=True)
class TiersParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    networks: tuple[str, ...] = ("mobilenet", "resnet34", "wrn-28-10")
    tasks: int = 2
    task_size: int = 10
    # Table 1's accuracy rows: which networks to train, on how many images, for how long.
    accuracy_networks: tuple[str, ...] = ("mobilenet",)
    train_images: int = 128
    test_images: int = 200
    epochs: int = 1
    train_eagerly: bool = True
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for field_name in ("networks", "accuracy_networks"):
            for network in getattr(self, field_name):
                if network not in TIER_NETWORK_NAMES:
                    raise ConfigError(field_name, network, f"names among {', '.join(TIER_NETWORK_NAMES)}")
        for name in ("tasks", "task_size", "train_images", "test_images", "epochs"):
            checks.integer(name, getattr(self, name), at_least=1)
        checks.flag("train_eagerly", self.train_eagerly)

    def hierarchy(self) -> HierarchySpec:
        """One device per tier: each network is timed alone."""
        return ZHANG2018.scaled(end=1, edge=1, cloud=1)


@dataclass(frozen=True)
class TierRun:
    """One network timed on one tier's device."""

    network: str
    tier: str


@dataclass(frozen=True)
class AccuracyRun:
    """One network trained on the cloud tier's device and scored at both label levels."""

    network: str


@dataclass
class Plan(harness.Plan):
    """Validated work: the images, the calibration, every (network, tier) run and every training run."""

    params: TiersParams
    images: np.ndarray
    dataset: Dataset
    profile: DeviceProfile
    runs: list[TierRun | AccuracyRun]
    calibration: TierCalibration
    training: Dataset | None

    def describe(self) -> str:
        """The runs, the networks trained and the images."""
        p = self.params
        timed = f"each network on each tier ({p.tasks} tasks x {p.task_size} images)"
        return f"{len(self.runs)} runs: {timed}, {len(p.accuracy_networks)} trained; images: {self.dataset.source}"

    @functools.cached_property
    def sizes(self) -> pd.DataFrame:
        """``file_sizes`` of the networks, measured once."""
        return file_sizes(self.params.networks)

    def run_params(self, run: TierRun | AccuracyRun) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        p = self.params
        if isinstance(run, AccuracyRun):
            data = self.training
            assert data is not None
            return {
                "experiment": EXPERIMENT,
                "measurement_revision": MEASUREMENT_REVISION,
                "kind": "accuracy",
                "network": run.network,
                "train_images": p.train_images,
                "test_images": p.test_images,
                "epochs": p.epochs,
                "train_eagerly": p.train_eagerly,
                "hierarchy": p.hierarchy().to_dict(),
                "dataset": {"name": data.name, "source": data.source, "n_test": data.n_test},
                "seed": p.seed,
                "cluster": p.scheduler_address or "emulated",
            }
        return {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "network": run.network,
            "tier": run.tier,
            "tasks": p.tasks,
            "task_size": p.task_size,
            "hierarchy": p.hierarchy().to_dict(),
            "dataset": {"name": self.dataset.name, "source": self.dataset.source, "n_test": self.dataset.n_test},
            "seed": p.seed,
            "cluster": p.scheduler_address or "emulated",
        }

    def devices_needed(self, runs: list[TierRun]) -> int:
        """One device per tier."""
        return len(TIERS)

    def start_cluster(self, runs: list[TierRun], dashboard_address: str) -> DeviceCluster:
        """A hierarchy of one end, one edge and one cloud device, or the scheduler given."""
        if self.params.scheduler_address:
            return connect(len(TIERS), scheduler_address=self.params.scheduler_address)
        # Every worker may hold what the cloud holds: the cloud trains (WRN-28-10 at batch 128 needs ~3 GB here).
        return start_hierarchy(
            self.params.hierarchy(), dashboard_address=dashboard_address, worker_memory_limit=_cloud_memory()
        )

    def setup(self, cluster: DeviceCluster) -> dict[str, Any]:
        """What every run records: the cluster."""
        return {"cluster": cluster.info}

    def execute(self, cluster: DeviceCluster, run: TierRun | AccuracyRun, context: dict[str, Any]) -> Outcome:
        """Time a network on a tier's device, or train and score one on the cloud's."""
        if isinstance(run, AccuracyRun):
            return self._train(cluster, run, context)
        p = self.params
        spec = p.hierarchy()
        device = next(d for d, t in spec.devices().items() if t == run.tier)
        with deploy(
            cluster, spec, {run.tier: run.network}, tiers=(run.tier,), seed=p.seed, batch_sizes=(p.task_size,)
        ) as deployed:
            tasks = standalone(deployed, run.tier, device, self.images, task_size=p.task_size)
        summary = {"cluster": context["cluster"], "dataset": self.dataset.provenance(), "device": device}
        return summary, {"tasks": tasks}

    def _train(self, cluster: DeviceCluster, run: AccuracyRun, context: dict[str, Any]) -> Outcome:
        """Train the network where a deployment would, on the cloud tier's device, and score it."""
        p, data = self.params, self.training
        assert data is not None
        device = next(d for d, t in p.hierarchy().devices().items() if t == "cloud")
        arrays = {
            "x_train": data.x_train,
            "y_train_fine": data.y_train,
            "x_test": data.x_test,
            "y_test_fine": data.y_test,
            "fine_to_coarse": coarse_of(data),
        }
        [shipped] = cluster.client.scatter([arrays], hash=False)
        future = cluster.client.submit(
            train_and_score,
            run.network,
            shipped,
            epochs=p.epochs,
            seed=p.seed,
            run_eagerly=p.train_eagerly,
            resources={device_resource(device): 1},
            pure=False,
        )
        try:
            result = future.result()
        except (FutureCancelledError, KilledWorker) as exc:
            recipe = RECIPES.get(run.network)
            raise ClusterError(
                f"the cloud device {device} was lost while training {run.network} (batch "
                f"{recipe.batch_size if recipe else '?'}): most likely it ran out of memory (worker limit "
                f"{_cloud_memory()}); the runs before it are stored, so running again resumes there"
            ) from exc
        loss = pd.DataFrame({"epoch": range(1, len(result["loss"]) + 1), "loss": result["loss"]})
        summary = {
            "cluster": context["cluster"],
            "dataset": data.provenance(),
            "device": device,
            **{k: v for k, v in result.items() if k != "loss"},
        }
        return summary, {"loss": loss}


def _cloud_memory() -> str:
    """The cloud tier's memory, as a Dask worker memory limit."""
    cloud = ZHANG2018.tier("cloud")
    assert cloud is not None
    return f"{cloud.memory_mb}MiB"


def prepare(**kwargs: Any) -> Plan:
    """Check every run and load the images, before any cluster work."""
    params = harness.parse_params(TiersParams, kwargs, sequences=("networks",))
    calibration = zhang2018_calibration()
    runs: list[TierRun | AccuracyRun] = [TierRun(n, t) for n in params.networks for t in TIERS]
    runs += [AccuracyRun(n) for n in params.accuracy_networks]
    dataset = load_dataset(
        "cifar100", data_dir=params.data_dir, test_limit=params.tasks * params.task_size, seed=params.seed
    )
    training = None
    if params.accuracy_networks:
        training = load_dataset(
            "cifar100",
            data_dir=params.data_dir,
            sample_limit=params.train_images,
            test_limit=params.test_images,
            seed=params.seed,
        )
    return Plan(params, dataset.x_test, dataset, get_profile("native"), runs, calibration, training)


#: The report's Table 1 timing: 200 tasks of 50 images ("10K/50 = 200 runs").
REPORT_TASKS = 200


def reduction(plan: Plan) -> str:
    """How Table 1's runs are smaller than the report's (empty at its size): the timing and the training."""
    p = plan.params
    parts = []
    if (p.tasks, p.task_size) != (REPORT_TASKS, TASK_SIZE):
        parts.append(f"{p.tasks} tasks of {p.task_size} images timed (the report: {REPORT_TASKS} of {TASK_SIZE})")
    if p.accuracy_networks and (p.train_images < REPORT_TRAIN_IMAGES or p.epochs < REPORT_MIN_EPOCHS):
        parts.append(
            f"{', '.join(p.accuracy_networks)} trained on {p.train_images:,} images x {p.epochs} epoch(s) (the "
            f"report: {REPORT_TRAIN_IMAGES:,} x {REPORT_MIN_EPOCHS}-500)"
        )
    return "; ".join(parts)


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: no source supplies CIFAR-100 or its stand-in; None if one does."""
    return harness.missing_dataset("cifar100", data_dir)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = TiersParams

pending = harness.pending
run = harness.run


# ------------------------------------------------------------ summaries ----


def times(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """Per network and tier: the report's time per image (the calibration) and this host's, in ms."""
    printed = load_reference("zhang2018/table1")
    rows = []
    for run, result in harness.by_run(plan, stored).items():
        if not isinstance(run, TierRun):
            continue
        tasks = result.tables["tasks"]
        host_ms = 1e3 * float(tasks["wall_s"].sum() / tasks["images"].sum())
        report_ms = 1e3 * plan.calibration.stage_s(run.tier, run.network, 1)
        row = printed[
            (printed["row"] == f"inference_time_{_ROW[run.tier]}") & (printed["column"] == COLUMNS[run.network])
        ]
        rows.append(
            {
                "network": run.network,
                "tier": run.tier,
                "report_ms": report_ms,
                "printed": row["printed"].item() if len(row) else "",
                "host_ms": host_ms,
                "host_cpu_ms": 1e3 * float(tasks["cpu_s"].sum() / tasks["images"].sum()),
            }
        )
    return pd.DataFrame(rows)


_ROW = {"end": "end_device", "edge": "edge_device", "cloud": "cloud"}


def ratios(table: pd.DataFrame) -> pd.DataFrame:
    """Each network's slow-down on the end and edge against the cloud, and each tier's against MobileNet."""
    rows = []
    for source in ("report_ms", "host_ms"):
        t = table.pivot_table(index="network", columns="tier", values=source)
        for network in t.index:
            rows.append(
                {
                    "times": "report" if source == "report_ms" else "this host",
                    "network": network,
                    "end / cloud": t.loc[network, "end"] / t.loc[network, "cloud"],
                    "edge / cloud": t.loc[network, "edge"] / t.loc[network, "cloud"],
                    "end / edge": t.loc[network, "end"] / t.loc[network, "edge"],
                    "on the end, / MobileNet": t.loc[network, "end"] / t.loc["mobilenet", "end"]
                    if "mobilenet" in t.index
                    else np.nan,
                }
            )
    return pd.DataFrame(rows)


def file_sizes(networks: tuple[str, ...]) -> pd.DataFrame:
    """Parameters and weights-file bytes of each network, alone and with its report optimizer's state."""
    printed = load_reference("zhang2018/table1")
    params_m = printed[printed["row"] == "number_of_parameters"].set_index("column")["value"].astype(float)
    size_mb = printed[printed["row"] == "size_of_weights_file"].set_index("column")["value"].astype(float)
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgelab-sizes-") as folder:
        for name in (*networks, *(["wrn-28-10-flatten"] if "wrn-28-10" in networks else [])):
            model = build_tier_network(name)
            counted = sizes(model)
            files = saved_bytes(model, REPORT_OPTIMIZERS[name], folder)
            rows.append(
                {
                    "network": name,
                    "parameters (M)": round(counted["parameters"] / 1e6, 2),
                    "report (M)": params_m[COLUMNS[name]],
                    "weights file (MB)": round(files["weights_file_bytes"] / 1e6, 1),
                    "with optimizer state (MB)": round(files["with_optimizer_file_bytes"] / 1e6, 1),
                    "optimizer": REPORT_OPTIMIZERS[name],
                    "report (MB)": size_mb[COLUMNS[name]],
                }
            )
    return pd.DataFrame(rows)


def table2(plan: Plan, measured: pd.DataFrame) -> pd.DataFrame:
    """Table 2's inference and processing times per image: the clock's for tasks of 50 beside the report's."""
    printed = load_reference("zhang2018/table2")
    proc = printed[printed["row"] == "proc_time"].set_index("column")["value"].astype(float)
    inf = printed[printed["row"] == "inf_time"].set_index("column")["value"].astype(float)
    spec = ZHANG2018
    rows = []
    for tier, network, latency, column in TABLE2:
        inference = plan.calibration.stage_s(tier, network, TASK_SIZE)
        per_task = inference
        if tier != "end":
            per_task += latency + spec.tier(tier).transfer_s(TASK_SIZE * 32 * 32 * 3)  # type: ignore[union-attr]
        predicted = 1e3 * per_task / TASK_SIZE
        host = measured[(measured["tier"] == tier) & (measured["network"] == network)]["host_ms"]
        rows.append(
            {
                "device, network": f"{tier}, {network}",
                "latency (s)": latency,
                "report inference (ms/image)": inf[column],
                "report processing (ms/image)": proc[column],
                # The clock's inference alone (Table 1's calibration): the report's in-system row is a prediction
                "clock inference (ms/image)": round(1e3 * inference / TASK_SIZE, 2),
                "clock (ms/image)": round(predicted, 2),
                "clock / report": round(predicted / proc[column], 3),
                "this host's inference (ms/image)": round(float(host.iloc[0]), 1) if len(host) else np.nan,
            }
        )
    return pd.DataFrame(rows)


def accuracy(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """Per trained network: its coarse and fine test accuracy, what it was trained on, and the report's."""
    printed = load_reference("zhang2018/table1")
    rows: list[dict[str, Any]] = []
    if plan.training is None:
        return pd.DataFrame(rows)
    mapping = coarse_of(plan.training)
    n_coarse, n_fine = int(mapping.max()) + 1, len(mapping)
    for run, result in harness.by_run(plan, stored).items():
        if not isinstance(run, AccuracyRun):
            continue
        s = result.summary
        paper = printed[printed["column"] == COLUMNS[run.network]].set_index("row")["value"]
        rows.append(
            {
                "network": run.network,
                "trained on": s["level"],
                "classes": s["classes"],
                "images x epochs": f"{s['train_images']:,} x {s['epochs']}",
                "coarse accuracy": s["coarse_accuracy"],
                "fine accuracy": s["fine_accuracy"],
                "report coarse": _number(paper.get("accuracy_20_labels")),
                "report fine": _number(paper.get("accuracy_100_labels")),
                "coarse chance": 1 / n_coarse,
                "fine chance": 1 / n_fine,
                "final loss": float(result.tables["loss"]["loss"].iloc[-1]),
                "train s": s["train_wall_s"],
            }
        )
    # A coarse-only network has no fine accuracy: NaN, so the columns stay numbers when it trains alone.
    numbers = ["coarse accuracy", "fine accuracy", "report coarse", "report fine"]
    return pd.DataFrame(rows).astype(dict.fromkeys(numbers, float)) if rows else pd.DataFrame(rows)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


# ------------------------------------------------------------ notebook ----


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: each network's parameters and weights files (``Plan.sizes``)."""
    return plan.sizes.to_string(index=False)


def run_facts(plan: Plan, stored: list[StoredRun]) -> str:
    """What nbval checks of the runs: Table 2 as the clock predicts it (Table 1's times, the tiers' links)."""
    return table2(plan, times(plan, stored)).drop(columns=["this host's inference (ms/image)"]).to_string(index=False)


def measurements(plan: Plan, stored: list[StoredRun]) -> list[Any]:
    """What the notebook shows of the runs: each network's time on each tier's worker here, and the accuracy rows."""
    return [times(plan, stored).round(2), accuracy(plan, stored).round(3)]

"""Zhang 2018, the three networks on the three tiers: Table 1 (stand-alone times, sizes) and Table 2 (with latency).

Table 1 times each network on each tier alone (batch 50, no communication).
Those nine times are the hierarchy's calibration (``edgelab.tier_clock``):
on every run of the hierarchy they are what a stage costs, so here they are
fitted, shown, never judged. Beside them stand the times measured on this
host: each network built on a device of each tier of a small hierarchy (one
end, one edge, one cloud worker; TensorFlow at the tier's threads, capped at
the host's cores) and timed over ``tasks`` tasks of ``task_size`` images, one
task at a time (``edgelab.tiered.standalone``). A laptop is not the report's
VMs and GPU, so only the ratios between networks can be compared.

The sizes are measured, not computed: the weights file Keras writes for each
network alone and once compiled with the optimizer the report trains it
with (its slots are in the file). Accuracy needs the networks trained on
CIFAR-100, which this module does not do yet: those rows say so.

Table 2 adds each tier's latency (sending and receiving, once per task of
50 images) and the transfer of the task's images: the clock's prediction of
its processing time per image, beside the report's.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster import DeviceCluster, connect
from edgelab.data import Dataset, load_dataset
from edgelab.devices import DeviceProfile, get_profile
from edgelab.errors import ConfigError
from edgelab.experiments import harness
from edgelab.experiments.harness import Outcome
from edgelab.hierarchy import ZHANG2018, HierarchySpec, start_hierarchy
from edgelab.reference import load_reference
from edgelab.results import StoredRun
from edgelab.tier_clock import TierCalibration, zhang2018_calibration
from edgelab.tier_models import REPORT_OPTIMIZERS, TIER_NETWORK_NAMES, build_tier_network, saved_bytes, sizes
from edgelab.tiered import TASK_SIZE, deploy, standalone

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

FULL_PROFILE: dict[str, Any] = {"profile": "full", "tasks": 20, "task_size": TASK_SIZE}


@dataclass(frozen=True)
class TiersParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    networks: tuple[str, ...] = ("mobilenet", "resnet34", "wrn-28-10")
    tasks: int = 2
    task_size: int = 10
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for network in self.networks:
            if network not in TIER_NETWORK_NAMES:
                raise ConfigError("networks", network, f"names among {', '.join(TIER_NETWORK_NAMES)}")
        for name in ("tasks", "task_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, value, "an integer >= 1")

    def hierarchy(self) -> HierarchySpec:
        """One device per tier: each network is timed alone."""
        return ZHANG2018.scaled(end=1, edge=1, cloud=1)


@dataclass(frozen=True)
class TierRun:
    """One network timed on one tier's device."""

    network: str
    tier: str


@dataclass
class Plan(harness.Plan):
    """Validated work: the images, the calibration, every (network, tier) run."""

    params: TiersParams
    images: np.ndarray
    dataset: Dataset
    profile: DeviceProfile
    runs: list[TierRun]
    calibration: TierCalibration

    def run_params(self, run: TierRun) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        p = self.params
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
        return start_hierarchy(self.params.hierarchy(), dashboard_address=dashboard_address)

    def setup(self, cluster: DeviceCluster) -> dict[str, Any]:
        """What every run records: the cluster."""
        return {"cluster": cluster.info}

    def execute(self, cluster: DeviceCluster, run: TierRun, context: dict[str, Any]) -> Outcome:
        """Build the network on the tier's device and time it over the tasks, one after another."""
        p = self.params
        spec = p.hierarchy()
        device = next(d for d, t in spec.devices().items() if t == run.tier)
        with deploy(
            cluster, spec, {run.tier: run.network}, tiers=(run.tier,), seed=p.seed, batch_sizes=(p.task_size,)
        ) as deployed:
            tasks = standalone(deployed, run.tier, device, self.images, task_size=p.task_size)
        summary = {"cluster": context["cluster"], "dataset": self.dataset.provenance(), "device": device}
        return summary, {"tasks": tasks}


def prepare(**kwargs: Any) -> Plan:
    """Check every run and load the images, before any cluster work."""
    params = harness.parse_params(TiersParams, kwargs, sequences=("networks",))
    calibration = zhang2018_calibration()
    runs = [TierRun(n, t) for n in params.networks for t in TIERS]
    dataset = load_dataset(
        "cifar100", data_dir=params.data_dir, test_limit=params.tasks * params.task_size, seed=params.seed
    )
    return Plan(params, dataset.x_test, dataset, get_profile("native"), runs, calibration)


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: no source supplies CIFAR-100 or its stand-in; None if one does."""
    return harness.missing_dataset("cifar100", data_dir)


pending = harness.pending
open_cluster = harness.open_cluster
run = harness.run


# ------------------------------------------------------------ summaries ----


def times(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """Per network and tier: the report's time per image (the calibration) and this host's, in ms."""
    printed = load_reference("zhang2018/table1")
    rows = []
    for run, result in harness.by_run(plan, stored).items():
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
    """Table 2's processing time per image: the clock's prediction for tasks of 50 beside the report's."""
    printed = load_reference("zhang2018/table2")
    proc = printed[printed["row"] == "proc_time"].set_index("column")["value"].astype(float)
    inf = printed[printed["row"] == "inf_time"].set_index("column")["value"].astype(float)
    spec = ZHANG2018
    rows = []
    for tier, network, latency, column in TABLE2:
        per_task = plan.calibration.stage_s(tier, network, TASK_SIZE)
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
                "clock (ms/image)": round(predicted, 2),
                "clock / report": round(predicted / proc[column], 3),
                "this host's inference (ms/image)": round(float(host.iloc[0]), 1) if len(host) else np.nan,
            }
        )
    return pd.DataFrame(rows)

"""The survey's placement problem (qiao/method-placement): a network's stages placed on an end / edge / cloud hierarchy.

A network (the edge tier's ResNet-34 by default) is cut into n stages
balanced by multiply-accumulates (``edgelab.pipeline.partition``); one task's
images start at an end device. For each n, ``edgelab.hierarchy.placement`` finds the
fastest placement by trying every host for every stage, and a greedy one
that walks the chain once; both are timed, with how many placements each
tried. For the chosen n, each placement is run for real: every stage built
on its host (pinned by resource), the images and activations crossing
between the workers, and its latency composed on the hierarchy's clock from
the bytes each stage really received (Table 1's times per image, the tiers'
latencies and links). Beside it, the job-level choice the report's schemes
make for the same hierarchy: eq1-eq6 and the per-device mapping that
finishes the report's job first (``edgelab.emulation.schemes.place``).
"""

from __future__ import annotations

import functools
import json
import uuid
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster, device_resource
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.data import Dataset, load_dataset
from edgelab.emulation import schemes
from edgelab.emulation.profiles import DeviceProfile, get_profile
from edgelab.emulation.tier_clock import TierCalibration, analytic_hierarchy, zhang2018_calibration
from edgelab.emulation.tiers import ZHANG2018, HierarchySpec
from edgelab.hierarchy import placement
from edgelab.models.tiers import TIER_NETWORKS, build_tier_network, tier_network
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.pipeline import partition, stage_model
from edgelab.pipeline import worker as stage_worker
from edgelab.pipeline.user_network import seeded_network
from edgelab.runtime.devices import connect, start_hierarchy

EXPERIMENT = "qiao_placement"
MEASUREMENT_REVISION = 1
RULES = ("exhaustive", "greedy")
#: The report's job, for the scheme-level choice.
REPORT_TASKS, REPORT_TASK_SIZE = 200, 50

FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "stages": [1, 2, 3, 4, 5, 6, 7, 8],
    "run_stages": [2, 4, 6, 8],
    "edge_devices": 4,
    "repeats": 3,
}


@dataclass(frozen=True)
class PlacementParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    network: Any = TIER_NETWORKS["edge"]  # a built-in name, or a Keras model or a function that builds one
    network_times: dict[str, float] | None = None  # a user's network: its seconds per image on each tier
    stages: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7)
    run_stages: tuple[int, ...] = (4,)
    images: int = 200
    edge_devices: int = 2
    cloud_devices: int = 1
    edge_latency_s: float = 0.5
    cloud_latency_s: float = 1.0
    repeats: int = 1
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0

    @property
    def network_name(self) -> str:
        """The network by name (a user's: name@digest), as the clock and the results store know it."""
        return tier_network("network", self.network, self.seed)[0]

    def __post_init__(self) -> None:
        self.network_name  # noqa: B018 - checks the network now
        for name in ("stages", "run_stages"):  # stages in the chain
            values = getattr(self, name)
            if not values or not all(checks.is_integer(n) and 1 <= n <= 12 for n in values):
                raise ConfigError(name, values, "a list of integers from 1 to 12 (stages in the chain)")
        for name, least in (("images", 1), ("repeats", 1), ("edge_devices", 0), ("cloud_devices", 0)):
            checks.integer(name, getattr(self, name), at_least=least)
        for name in ("edge_latency_s", "cloud_latency_s"):  # under the notebook's names, before the tiers'
            checks.number(name, getattr(self, name), at_least=0, unit="seconds")
        self.hierarchy()  # checks the latencies

    def hierarchy(self) -> HierarchySpec:
        """One end device (the images' source), the edge and cloud devices, the report's links."""
        spec = ZHANG2018.scaled(end=1, edge=self.edge_devices, cloud=self.cloud_devices)
        latency = {"edge": self.edge_latency_s, "cloud": self.cloud_latency_s}
        return replace(spec, tiers=tuple(replace(t, latency_s=latency.get(t.name, t.latency_s)) for t in spec.tiers))


@dataclass(frozen=True)
class PlacementRunKey:
    """One real run: the chain cut into ``n_stages``, placed by ``rule``."""

    n_stages: int
    rule: str
    repeat: int


@dataclass
class Plan(harness.Plan):
    """Validated work: the task's images, the calibration, every run."""

    params: PlacementParams
    images: np.ndarray
    dataset: Dataset
    profile: DeviceProfile
    runs: list[PlacementRunKey]
    calibration: TierCalibration

    def describe(self) -> str:
        """The runs and the images."""
        return f"{len(self.runs)} runs; images: {self.dataset.source}"

    @functools.cached_property
    def searched(self) -> pd.DataFrame:
        """``search``, done once: every chain length's placements, exhaustive and greedy."""
        return search(self)

    @property
    def tiers(self) -> tuple[str, ...]:
        """The tiers the hierarchy has."""
        return tuple(t.name for t in self.params.hierarchy().tiers if t.devices)

    def chain(self, n_stages: int) -> tuple[Any, Any, placement.Chain]:
        """The network, its cut into ``n_stages`` (balanced by MACs), and the chain of one task through it."""
        p = self.params
        model = _network(p.network, p.seed)
        cut = partition(model, n_stages)
        chain = placement.Chain.from_partition(cut, self.calibration, p.network_name, p.images, self.tiers)
        return model, cut, chain

    def place(self, n_stages: int, rule: str) -> placement.Placed:
        """The placement ``rule`` picks for the chain of ``n_stages``."""
        _, _, chain = self.chain(n_stages)
        search = placement.exhaustive if rule == "exhaustive" else placement.greedy
        return search(chain, self.params.hierarchy())

    def run_params(self, run: PlacementRunKey) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        p = self.params
        d = self.dataset
        return {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "network": p.network_name,
            "n_stages": run.n_stages,
            "rule": run.rule,
            "repeat": run.repeat,
            "images": p.images,
            "hierarchy": p.hierarchy().to_dict(),
            "dataset": {"name": d.name, "source": d.source, "n_test": d.n_test},
            "seed": p.seed,
            "cluster": p.scheduler_address or "emulated",
        }

    def devices_needed(self, runs: list[PlacementRunKey]) -> int:
        """Every host of the hierarchy."""
        return len(self.params.hierarchy().devices())

    def start_cluster(self, runs: list[PlacementRunKey], dashboard_address: str) -> DeviceCluster:
        """The hierarchy (one worker per device, pinned by name and tier), or the scheduler given."""
        if self.params.scheduler_address:
            return connect(self.devices_needed(runs), scheduler_address=self.params.scheduler_address)
        return start_hierarchy(self.params.hierarchy(), dashboard_address=dashboard_address)

    def setup(self, cluster: DeviceCluster) -> dict[str, Any]:
        """What every run records: the cluster."""
        return {"cluster": cluster.info}

    def execute(self, cluster: DeviceCluster, run: PlacementRunKey, context: dict[str, Any]) -> Outcome:
        """Build each stage on its host, send the task through, and put its latency on the clock."""
        p = self.params
        model, cut, chain = self.chain(run.n_stages)
        placed = self.place(run.n_stages, run.rule)
        records = run_chain(cluster, model, cut, placed.hosts, self.images)
        spec = p.hierarchy()
        _, source, tier_of = placement.hosts_of(spec)
        measured = placement.Chain(chain.stage_s, tuple(int(r["bytes_in"]) for r in records), chain.result_bytes)
        summary = {
            "cluster": context["cluster"],
            "dataset": self.dataset.provenance(),
            "calibration": self.calibration.source,
            "hosts": list(placed.hosts),
            "predicted_s": placed.latency_s,
            "clock_s": placement.latency(measured, spec, placed.hosts, tier_of, source),
            "result_bytes": int(records[-1]["bytes_out"]),
        }
        return summary, {"stages": pd.DataFrame(records)}


@functools.lru_cache(maxsize=2)
def _network(network: Any, seed: int) -> Any:
    """The network, built once: every cut of it (and every stage built from a cut) needs the same layers."""
    return build_tier_network(network, seed=seed) if isinstance(network, str) else seeded_network(network, seed)


def run_chain(
    cluster: DeviceCluster, model: Any, cut: Any, hosts: tuple[str, ...], images: np.ndarray
) -> list[dict[str, Any]]:
    """Stage i of ``cut`` built on ``hosts[i]``, the images sent through; a record per stage (device, bytes, times).

    The activations go from worker to worker (Dask's comms); only the last
    stage's output and the records come back.
    """
    client = cluster.client
    run_id = uuid.uuid4().hex[:12]
    loads = []
    for stage, host in zip(cut.stages, hosts, strict=True):
        sub = stage_model(model, stage)
        loads.append(
            client.submit(
                stage_worker.load_stage,
                run_id,
                f"stage-{stage.index}",
                json.dumps(sub.get_config()),
                sub.get_weights(),
                len(images),
                resources={device_resource(host): 1},
                pure=False,
            )
        )
    client.gather(loads)
    try:
        payload: Any = images
        for stage, host in zip(cut.stages, hosts, strict=True):
            payload = client.submit(
                stage_worker.run_stage,
                run_id,
                f"stage-{stage.index}",
                0,
                payload,
                resources={device_resource(host): 1},
                pure=False,
            )
        _, records = payload.result()
    finally:
        client.run(stage_worker.release_run, run_id)
    return list(records)


def prepare(**kwargs: Any) -> Plan:
    """Load the task's images and check every run, before any cluster work."""
    params = harness.parse_params(PlacementParams, kwargs, sequences=("stages", "run_stages"))
    on_every_tier = dict.fromkeys(("end", "edge", "cloud"), params.network_name)
    calibration = zhang2018_calibration().with_given_times(on_every_tier, params.network_times)
    runs = [
        PlacementRunKey(n, rule, r)
        for n in sorted(set(params.run_stages))
        for rule in RULES
        for r in range(params.repeats)
    ]
    dataset = load_dataset("cifar100", data_dir=params.data_dir, test_limit=params.images, seed=params.seed)
    if len(dataset.x_test) < params.images:
        raise ConfigError("images", params.images, f"at most {len(dataset.x_test)} (the test images available)")
    return Plan(params, dataset.x_test[: params.images], dataset, get_profile("native"), runs, calibration)


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: no source supplies CIFAR-100 or its stand-in; None if one does."""
    return harness.missing_dataset("cifar100", data_dir)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = PlacementParams

pending = harness.pending
run = harness.run


# ------------------------------------------------------------ summaries ----


def search(plan: Plan) -> pd.DataFrame:
    """Per number of stages: both searches' placement, latency, placements tried and search time."""
    rows = []
    for n in sorted(set(plan.params.stages)):
        best, quick = plan.place(n, "exhaustive"), plan.place(n, "greedy")
        rows.append(
            {
                "stages": n,
                "exhaustive": _hosts(best.hosts),
                "exhaustive_s": best.latency_s,
                "tried": best.evaluated,
                "search_s": best.search_s,
                "greedy": _hosts(quick.hosts),
                "greedy_s": quick.latency_s,
                "greedy_tried": quick.evaluated,
                "greedy_search_s": quick.search_s,
                "greedy / best": quick.latency_s / best.latency_s,
            }
        )
    return pd.DataFrame(rows)


def _hosts(hosts: tuple[str, ...]) -> str:
    """``end-0 x2, cloud-0 x3``: runs of the same host."""
    parts: list[list[Any]] = []
    for host in hosts:
        if parts and parts[-1][0] == host:
            parts[-1][1] += 1
        else:
            parts.append([host, 1])
    return ", ".join(f"{h} x{k}" if k > 1 else h for h, k in parts)


def summarize(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """A row per real run: its placement, the clock's latency beside the prediction, bytes moved, host time."""
    rows = []
    for run, result in harness.by_run(plan, stored).items():
        s = result.summary
        stages = result.tables["stages"]
        hosts = list(s["hosts"])
        moved = sum(int(b) for b, a, h in zip(stages["bytes_in"], ["end-0", *hosts[:-1]], hosts, strict=True) if a != h)
        rows.append(
            {
                "stages": run.n_stages,
                "rule": run.rule,
                "repeat": run.repeat,
                "hosts": _hosts(tuple(hosts)),
                "clock_s": float(s["clock_s"]),
                "predicted_s": float(s["predicted_s"]),
                "bytes_moved": moved,
                "host_wall_s": float((stages["t_end"] - stages["t_start"]).sum()),
            }
        )
    return pd.DataFrame(rows)


def job_level(plan: Plan) -> pd.DataFrame:
    """For the report's job on this hierarchy: each scheme's completion time (eq1-eq6) and the best per-device mapping.

    The report's own networks per tier (MobileNet, ResNet-34, WRN-28-10) and
    its 8 end devices, on this experiment's edge and cloud devices and links.
    """
    p = plan.params
    spec = p.hierarchy().scaled(end=8)
    h = analytic_hierarchy(spec, plan.calibration, dict(TIER_NETWORKS), REPORT_TASK_SIZE)
    rows = [{"placement": scheme, "completion_s": s} for scheme, s in schemes.completion_times(REPORT_TASKS, h).items()]
    if p.edge_devices or p.cloud_devices:
        best = schemes.place(REPORT_TASKS, h)
        rows.append({"placement": "per-device search: " + ", ".join(best.targets), "completion_s": best.completion_s})
    return pd.DataFrame(rows)


# ------------------------------------------------------------ notebook ----


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: the placements and their latencies (the search times left out)."""
    columns = ["stages", "exhaustive", "exhaustive_s", "tried", "greedy", "greedy_s", "greedy / best"]
    return plan.searched[columns].round(4).to_string(index=False)


def run_facts(plan: Plan, stored: list[StoredRun]) -> str:
    """What nbval checks of the runs: each on the clock (from the bytes its stages received), the job-level choice."""
    runs = summarize(plan, stored)[["stages", "rule", "hosts", "clock_s", "predicted_s", "bytes_moved"]]
    return f"{runs.round(4).to_string(index=False)}\n{job_level(plan).round(3).to_string(index=False)}"


def measurements(plan: Plan, stored: list[StoredRun]) -> list[Any]:
    """What the notebook shows that varies: the searches' times on this machine, every run with its wall time."""
    return [plan.searched[["stages", "tried", "search_s", "greedy_tried", "greedy_search_s"]], summarize(plan, stored)]

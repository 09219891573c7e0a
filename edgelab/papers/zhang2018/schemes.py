"""Zhang 2018, the four scheduling schemes against the number of end devices: Figure 3.

A job of ``tasks`` tasks of ``task_size`` CIFAR-100 test images comes from
the end devices (task i to end device i mod N_end). Under each scheme
(``edgelab.hierarchy.tiered``) every task gets its coarse answer on its end device and,
except under End, its fine answer on an edge device or the cloud. Every run
is real: the report's networks (``edgelab.models.tiers``) built once on every
device of the hierarchy, each stage an inference pinned to its device, the
images crossing from end to upper device over Dask's worker-to-worker comms.

Time is the hierarchy's clock (``edgelab.emulation.tier_clock``): each stage's images
at Table 1's stand-alone time per image of its network on its tier, plus each
upper tier's latency and the transfer of the task's bytes, placed in the
order the run's stages went. No measured time enters the clock: its inputs are
Table 1's times (fitted), the tiers' latencies and links, and which device ran
which stage, which the scheme fixes. It is a model (``verdict.Basis.MODELLED``),
and a repeat replays the same stages to the same completion time; only the
host's wall time, which emulates thirteen devices on a laptop's cores and is
never judged, changes. Beside it stand the report's equations (eq1-eq6) for the
same job, which add the two stages without overlap. Mapping runs both with the
report's N_map = 1 and with eq4's N_map for the job.

The report's Figure 3 prints no values, and its job (200 tasks of 50 images)
puts 10,000 images through WRN-28-10, most of an hour of CPU per run that sends
them all to the cloud: the smoke profile runs a small job, and the figure adds
the equations at the report's job, labelled as such; ``full`` runs the report's
job on 1, 2, 4, 6 and 8 end devices, once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.data import Dataset, load_dataset
from edgelab.emulation import schemes
from edgelab.emulation.profiles import DeviceProfile, get_profile
from edgelab.emulation.schemes import SCHEMES, completion_times
from edgelab.emulation.tier_clock import TierCalibration, analytic_hierarchy, schedule, zhang2018_calibration
from edgelab.emulation.tiers import ZHANG2018, HierarchySpec
from edgelab.hierarchy.tiered import deploy, run_scheme
from edgelab.models.tiers import TIER_NETWORKS, tier_network
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.runtime.devices import connect, start_hierarchy

EXPERIMENT = "zhang2018_schemes"
MEASUREMENT_REVISION = 1
#: The report's job: the CIFAR-100 test set in tasks of 50 images.
REPORT_TASKS, REPORT_TASK_SIZE = 200, 50
#: Mapping's two choices of end devices per edge device: the report's 1, and eq4's for the job.
MAPPINGS = ("paper", "eq4")

#: The report's x axis: 1 to 8 end devices (its system has 8).
REPORT_END_DEVICES = (1, 2, 3, 4, 5, 6, 7, 8)

# The report's job, on 5 of its 8 points: few end devices (1, 2, 4: at most one per edge) and many (6, 8). Every
# run sending to the cloud puts up to 10,000 images through WRN-28-10 (80-400 ms each here, by the load), so all
# eight points would take 2.5-10 hours; these five take about 1.5-2.5 on a quiet machine. One repeat: the clock
# replays a run's stages (fixed by the scheme) on Table 1's times, so a repeat gives the same completion time;
# only the host's wall time, never judged, would change.
FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "end_devices": [1, 2, 4, 6, 8],
    "tasks": REPORT_TASKS,
    "task_size": REPORT_TASK_SIZE,
    "repeats": 1,
}

TIERS = ("end", "edge", "cloud")


@dataclass(frozen=True)
class SchemesParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    end_devices: tuple[int, ...] = (1, 2, 4, 8)
    schemes: tuple[str, ...] = SCHEMES
    tasks: int = 8
    task_size: int = 2
    repeats: int = 1
    edge_devices: int = 4
    cloud_devices: int = 1
    edge_latency_s: float = 0.5
    cloud_latency_s: float = 1.0
    # A tier's network: a built-in name, or a Keras model or a function that builds one (then its time is given).
    end_network: Any = TIER_NETWORKS["end"]
    edge_network: Any = TIER_NETWORKS["edge"]
    cloud_network: Any = TIER_NETWORKS["cloud"]
    network_times: dict[str, float] | None = None  # seconds per image of a user's network, by tier
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for scheme in self.schemes:
            if scheme not in SCHEMES:
                raise ConfigError("schemes", scheme, f"names among {', '.join(SCHEMES)}")
        if not self.end_devices or not all(checks.is_integer(n) and n >= 1 for n in self.end_devices):
            raise ConfigError("end_devices", self.end_devices, "a list of integers >= 1")
        for name in ("tasks", "task_size", "repeats"):
            checks.integer(name, getattr(self, name), at_least=1)
        for name in ("edge_devices", "cloud_devices"):
            checks.integer(name, getattr(self, name), at_least=0)
        for name in ("edge_latency_s", "cloud_latency_s"):
            checks.number(name, getattr(self, name), at_least=0, below=float("inf"), unit="seconds")
        if self.tasks < max(self.end_devices):
            raise ConfigError("tasks", self.tasks, f">= the most end devices ({max(self.end_devices)}), so each works")
        self.networks  # noqa: B018 - checks each tier's network now

    @property
    def networks(self) -> dict[str, str]:
        """Each tier's network by name (a user's: name@digest), as the clock and the results store know it."""
        return {t: tier_network(f"{t}_network", getattr(self, f"{t}_network"), self.seed)[0] for t in TIERS}

    @property
    def deployed(self) -> dict[str, Any]:
        """What each tier's devices build: a built-in's name, or the user's model or builder."""
        return {t: getattr(self, f"{t}_network") for t in TIERS}

    def hierarchy(self, n_end: int | None = None) -> HierarchySpec:
        """The report's hierarchy with this experiment's device counts and latencies."""
        spec = ZHANG2018.scaled(end=n_end or max(self.end_devices), edge=self.edge_devices, cloud=self.cloud_devices)
        tiers = tuple(
            replace(t, latency_s={"edge": self.edge_latency_s, "cloud": self.cloud_latency_s}.get(t.name, t.latency_s))
            for t in spec.tiers
        )
        return replace(spec, tiers=tiers)


@dataclass(frozen=True)
class SchemeRunKey:
    """One run: a scheme on the first ``n_end`` end devices; Mapping's ``mapping`` is "paper" or "eq4"."""

    scheme: str
    n_end: int
    mapping: str | None
    repeat: int


@dataclass
class Plan(harness.Plan):
    """Validated work: the images, the hierarchy, its calibration, every run."""

    params: SchemesParams
    images: np.ndarray
    dataset: Dataset
    profile: DeviceProfile
    runs: list[SchemeRunKey]
    calibration: TierCalibration

    def describe(self) -> str:
        """The runs, the job and the images."""
        p = self.params
        return f"{len(self.runs)} runs of {p.tasks} tasks x {p.task_size} images; images: {self.dataset.source}"

    def n_map(self, run: SchemeRunKey) -> int | None:
        """End devices per edge device of a Mapping run (None for the other schemes)."""
        if run.scheme != "Mapping":
            return None
        if run.mapping == "paper":
            return 1
        return schemes.n_map(self.analytic(run.n_end))

    def analytic(self, n_end: int, task_size: int | None = None) -> Any:
        """The report's model (``edgelab.emulation.schemes.Hierarchy``) of the hierarchy with ``n_end`` end devices."""
        p = self.params
        return analytic_hierarchy(p.hierarchy(n_end), self.calibration, p.networks, task_size or p.task_size)

    def run_params(self, run: SchemeRunKey) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        p = self.params
        d = self.dataset
        return {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "scheme": run.scheme,
            "n_end": run.n_end,
            "n_map": self.n_map(run),
            "repeat": run.repeat,
            "tasks": p.tasks,
            "task_size": p.task_size,
            "hierarchy": p.hierarchy().to_dict(),
            "networks": p.networks,
            "dataset": {"name": d.name, "source": d.source, "n_test": d.n_test},
            "seed": p.seed,
            "cluster": p.scheduler_address or "emulated",
        }

    def devices_needed(self, runs: list[SchemeRunKey]) -> int:
        """Every device of the hierarchy with the most end devices."""
        return sum(self.params.hierarchy().count(t) for t in ("end", "edge", "cloud"))

    def start_cluster(self, runs: list[SchemeRunKey], dashboard_address: str) -> DeviceCluster:
        """The emulated hierarchy (one worker per device, pinned by name and tier), or the scheduler given."""
        if self.params.scheduler_address:
            return connect(self.devices_needed(runs), scheduler_address=self.params.scheduler_address)
        return start_hierarchy(self.params.hierarchy(), dashboard_address=dashboard_address)

    def setup(self, cluster: DeviceCluster) -> dict[str, Any]:
        """Build every tier's network on each of its devices, once for all runs."""
        p = self.params
        sizes = tuple(sorted({p.task_size, len(self.images) % p.task_size or p.task_size}))
        deployment = deploy(cluster, p.hierarchy(), p.deployed, seed=p.seed, batch_sizes=sizes)
        return {"cluster": cluster.info, "deployment": deployment}

    def teardown(self, context: dict[str, Any]) -> None:
        """Drop the networks from the devices."""
        context["deployment"].release()

    def execute(self, cluster: DeviceCluster, run: SchemeRunKey, context: dict[str, Any]) -> Outcome:
        """Run the job through one scheme on the first ``n_end`` end devices."""
        p = self.params
        result = run_scheme(
            cluster,
            p.hierarchy(run.n_end),
            run.scheme,
            self.images,
            task_size=p.task_size,
            n_map=self.n_map(run),
            deployment=context["deployment"],
        )
        summary = {
            "cluster": context["cluster"],
            "dataset": self.dataset.provenance(),
            "calibration": self.calibration.source,
            "host_wall_s": result.host_wall_s,
        }
        arrays = {"coarse": result.coarse}
        if result.fine is not None:
            arrays["fine"] = result.fine
        return summary, {"stages": result.stages}, arrays


def prepare(**kwargs: Any) -> Plan:
    """Load the job's images and check every run, before any cluster work."""
    params = harness.parse_params(SchemesParams, kwargs, sequences=("end_devices", "schemes"))
    calibration = zhang2018_calibration().with_given_times(params.networks, params.network_times)
    runs = []
    for n_end in sorted(set(params.end_devices)):
        for scheme in params.schemes:
            for mapping in MAPPINGS if scheme == "Mapping" else (None,):
                runs += [SchemeRunKey(scheme, n_end, mapping, r) for r in range(params.repeats)]
    nothing = np.zeros((0, 32, 32, 3), np.uint8)
    plan = Plan(params, nothing, None, get_profile("native"), runs, calibration)  # type: ignore[arg-type]
    for run in runs:
        _check_run(plan, run)
    dataset = load_dataset(
        "cifar100", data_dir=params.data_dir, test_limit=params.tasks * params.task_size, seed=params.seed
    )
    return replace(plan, images=dataset.x_test, dataset=dataset)


def _check_run(plan: Plan, run: SchemeRunKey) -> None:
    """The scheme can run on the hierarchy with ``run.n_end`` end devices (raises ConfigError otherwise)."""
    from edgelab.hierarchy.tiered import assignment

    assignment(run.scheme, plan.params.hierarchy(run.n_end), plan.n_map(run))


def is_report_job(plan: Plan) -> bool:
    """Whether the runs are the report's job (200 tasks of 50 images): only then do Figure 3's claims apply to them."""
    p = plan.params
    return (p.tasks, p.task_size) == (REPORT_TASKS, REPORT_TASK_SIZE)


def reduction(plan: Plan) -> str:
    """How the runs are smaller than the report's (empty at its size): the job and the end devices."""
    p = plan.params
    return job_reduction(p.tasks, p.task_size, p.end_devices)


def job_reduction(tasks: int, task_size: int, end_devices: Any) -> str:
    """How a job of ``tasks`` tasks of ``task_size`` images on ``end_devices`` is smaller than the report's."""
    parts = []
    if (tasks, task_size) != (REPORT_TASKS, REPORT_TASK_SIZE):
        parts.append(f"{tasks} tasks of {task_size} images (the report: {REPORT_TASKS} of {REPORT_TASK_SIZE})")
    ran = sorted(set(end_devices))
    if not set(REPORT_END_DEVICES) <= set(ran):
        parts.append(f"N_end = {', '.join(map(str, ran))} of the report's 1-{max(REPORT_END_DEVICES)}")
    return "; ".join(parts)


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: no source supplies CIFAR-100 or its stand-in; None if one does."""
    return harness.missing_dataset("cifar100", data_dir)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = SchemesParams

pending = harness.pending
run = harness.run


# ------------------------------------------------------------ summaries ----


def summarize(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """A row per run: the clock's completion time, the equations' for the same job, the host's wall time."""
    p = plan.params
    rows = []
    for run, result in harness.by_run(plan, stored).items():
        stages = result.tables["stages"]
        _, clock_s = schedule(stages, p.hierarchy(run.n_end), plan.calibration, p.networks)
        mapped = plan.n_map(run)
        predicted = completion_times(p.tasks, plan.analytic(run.n_end), mapped)
        rows.append(
            {
                "scheme": run.scheme,
                "mapping": run.mapping or "-",
                "n_map": mapped if mapped is not None else "-",
                "n_end": run.n_end,
                "repeat": run.repeat,
                "clock_s": clock_s,
                "equations_s": predicted[run.scheme],
                "host_wall_s": float(result.summary["host_wall_s"]),
                "fine_stages": int((stages["stage"] == "fine").sum()),
                "on_cloud": int((stages["tier"] == "cloud").sum()),
                "on_edge": int((stages["tier"] == "edge").sum()),
            }
        )
    return pd.DataFrame(rows)


def report_job(plan: Plan) -> pd.DataFrame:
    """The equations at the report's job (200 tasks of 50 images) on the same calibration: no run behind them."""
    rows = []
    for n_end in sorted(set(plan.params.end_devices)):
        h = plan.analytic(n_end, REPORT_TASK_SIZE)
        times = completion_times(REPORT_TASKS, h, 1)
        times_eq4 = completion_times(REPORT_TASKS, h)
        for scheme in plan.params.schemes:
            rows.append(
                {
                    "scheme": scheme,
                    "mapping": "paper" if scheme == "Mapping" else "-",
                    "n_end": n_end,
                    "equations_s": times[scheme],
                }
            )
            if scheme == "Mapping":
                rows.append(
                    {
                        "scheme": scheme,
                        "mapping": "eq4",
                        "n_end": n_end,
                        "equations_s": times_eq4[scheme],
                        "n_map": schemes.n_map(h),
                    }
                )
    return pd.DataFrame(rows)


def deterministic_facts(plan: Plan) -> pd.DataFrame:
    """Values that depend only on the parameters: where each scheme sends second stages, checked by nbval."""
    from edgelab.hierarchy.tiered import assignment

    rows = []
    for n_end in sorted(set(plan.params.end_devices)):
        for scheme in plan.params.schemes:
            for mapping in MAPPINGS if scheme == "Mapping" else (None,):
                key = SchemeRunKey(scheme, n_end, mapping, 0)
                targets = assignment(scheme, plan.params.hierarchy(n_end), plan.n_map(key))
                rows.append(
                    {
                        "n_end": n_end,
                        "scheme": scheme + (f" ({mapping})" if mapping else ""),
                        "n_map": plan.n_map(key) or "-",
                        "to edge": targets.count("edge"),
                        "to cloud": targets.count("cloud"),
                    }
                )
    return pd.DataFrame(rows)


def routes(plan: Plan, stored: list[StoredRun], n_end: int) -> pd.DataFrame:
    """Which end device sent how many tasks (and bytes) to which upper device, per scheme, at ``n_end`` end devices."""
    rows = []
    for run, result in harness.by_run(plan, stored).items():
        if run.n_end != n_end or run.repeat != 0:
            continue
        stages = result.tables["stages"]
        end_of = stages[stages["stage"] == "coarse"].set_index("task")["device"]
        fine = stages[stages["stage"] == "fine"]
        for (end, upper), group in fine.groupby([fine["task"].map(end_of), "device"]):
            rows.append(
                {
                    "scheme": run.scheme,
                    "mapping": run.mapping or "-",
                    "end": end,
                    "upper": upper,
                    "tasks": len(group),
                    "bytes": int(group["bytes_in"].sum()),
                }
            )
    return pd.DataFrame(rows, columns=["scheme", "mapping", "end", "upper", "tasks", "bytes"])


def cluster_info(stored: list[StoredRun]) -> dict[str, Any]:
    """The running hierarchy as the runs recorded it (devices, tiers, TensorFlow threads)."""
    return dict(stored[0].summary["cluster"]) if stored else {}


def curves(summary: pd.DataFrame) -> pd.DataFrame:
    """Median over repeats per scheme, mapping and number of end devices."""
    keys = ["scheme", "mapping", "n_map", "n_end"]
    table = summary.groupby(keys, as_index=False)[["clock_s", "equations_s", "host_wall_s", "on_cloud", "on_edge"]]
    # The stage counts are the same in every repeat (the routing is the scheme's): whole numbers.
    return table.median().astype({"on_cloud": int, "on_edge": int})


# ------------------------------------------------------------ notebook ----


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: ``deterministic_facts``."""
    return deterministic_facts(plan).to_string(index=False)


def run_facts(plan: Plan, stored: list[StoredRun]) -> str:
    """What nbval checks of the runs: completion time on the clock and by the equations (routing and calibration)."""
    table = curves(summarize(plan, stored))
    columns = ["scheme", "mapping", "n_map", "n_end", "on_edge", "on_cloud", "clock_s", "equations_s"]
    return table[columns].round(3).to_string(index=False)


def measurements(plan: Plan, stored: list[StoredRun]) -> list[Any]:
    """What the notebook shows of the runs: every one, the host's wall time among them."""
    return [summarize(plan, stored)]

"""Zhang 2018, fault tolerance: Table 5, Figure 4 and eq9 — a job on 8 end devices while some of them fail.

Each run classifies ``tasks`` tasks of ``task_size`` CIFAR-100 test images on
the end devices (MobileNet, as on the report's end tier) while ``failures``
of them switch themselves off after answering half their share, under one
method: the report's Without, Reassign and Monitor, and Dask's own recovery
(``edgelab.hierarchy.fault_tolerance``). The failures are real: each failing device's
worker is SIGKILLed, for good, and brought back (with its network rebuilt)
before the next run. Which devices fail is drawn from the seed, the same for
every method at a given number of failures and repeat.

Time is the clock of ``edgelab.hierarchy.fault_tolerance``: Table 1's end-device time
per image (the hierarchy's calibration, ``edgelab.emulation.tier_clock``), the end
link for each send, the report's 0.5 s for each send to a dead device, and
Monitor's query interval (not stated by the report; a parameter). The smoke
profile runs the report's tasks (50 images) but fewer of them, with 0 and 3
failures; ``full`` runs the report's job (200 tasks, 0-6 failures, 5 repeats).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import dask
import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.data import Dataset, load_dataset
from edgelab.emulation.profiles import DeviceProfile, get_profile
from edgelab.emulation.tier_clock import TierCalibration, zhang2018_calibration
from edgelab.emulation.tiers import ZHANG2018, HierarchySpec
from edgelab.hierarchy.fault_tolerance import METHODS, FaultClock, check_job, run_job
from edgelab.hierarchy.tiered import deploy
from edgelab.models.tiers import TIER_NETWORKS, tier_network
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.report.reference import load_reference
from edgelab.runtime.devices import connect, start_hierarchy

EXPERIMENT = "zhang2018_faults"
MEASUREMENT_REVISION = 1
#: The report's job: 200 tasks of 50 images on 8 end devices, 0.5 s timeout.
REPORT_JOB = {"tasks": 200, "task_size": 50, "end_devices": 8, "timeout_s": 0.5}
#: The report's three methods, as Table 5 names its rows.
PAPER_METHODS = ("Without", "Reassign", "Monitor")
#: The report's failures (Table 5's columns) and its runs per cell (it averages 5).
REPORT_FAILURES = (0, 1, 2, 3, 4, 5, 6)
REPORT_REPEATS = 5

# The report's job, failures and repeats. The clock is deterministic for given failing devices (it charges Table 1's
# time, the link, the timeout and the query interval: nothing measured); the repeats draw other failing devices,
# as the report's 5 runs would.
FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "failures": list(REPORT_FAILURES),
    "tasks": REPORT_JOB["tasks"],
    "repeats": REPORT_REPEATS,
}


@dataclass(frozen=True)
class FaultsParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    methods: tuple[str, ...] = METHODS
    failures: tuple[int, ...] = (0, 3)
    end_devices: int = 8
    tasks: int = 32
    task_size: int = 50
    fail_after: int | None = None
    timeout_s: float = 0.5
    heartbeat_s: float = 1.0
    deadline_s: float = 600.0
    repeats: int = 1
    end_network: Any = TIER_NETWORKS["end"]  # a built-in name, or a Keras model or a function that builds one
    network_times: dict[str, float] | None = None  # a user's end network: its seconds per image, {"end": s}
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for method in self.methods:
            if method not in METHODS:
                raise ConfigError("methods", method, f"names among {', '.join(METHODS)}")
        for name in ("end_devices", "tasks", "task_size", "repeats"):
            checks.integer(name, getattr(self, name), at_least=1)
        for f in self.failures:
            if not checks.is_integer(f) or not 0 <= f <= self.end_devices:
                raise ConfigError("failures", f, f"integers from 0 to end_devices ({self.end_devices})")
        if not self.failures:
            raise ConfigError("failures", self.failures, "at least one number of failed devices")
        self.network_name  # noqa: B018 - checks the end network now
        self.clock(1.0)  # checks the times

    @property
    def network_name(self) -> str:
        """The end network by name (a user's: name@digest), as the clock and the results store know it."""
        return tier_network("end_network", self.end_network, self.seed)[0]

    def clock(self, per_image_s: float) -> FaultClock:
        """The clock's charges, with the end network's time per image."""
        end = ZHANG2018.tier("end")
        assert end is not None
        return FaultClock(per_image_s, end.latency_s, end.link_mbps, self.timeout_s, self.heartbeat_s, self.deadline_s)

    def hierarchy(self) -> HierarchySpec:
        """The report's end tier alone, with ``end_devices`` devices: Table 5 uses only end devices."""
        end = ZHANG2018.tier("end")
        assert end is not None
        return HierarchySpec((replace(end, devices=self.end_devices),), "zhang2018-end", ZHANG2018.notes)


@dataclass(frozen=True)
class FaultRunKey:
    """One run: a method with ``failures`` failing devices, one repeat."""

    method: str
    failures: int
    repeat: int


@dataclass
class Plan(harness.Plan):
    """Validated work: the images, the calibration, every run."""

    params: FaultsParams
    images: np.ndarray
    dataset: Dataset
    profile: DeviceProfile
    runs: list[FaultRunKey]
    calibration: TierCalibration

    def describe(self) -> str:
        """The runs, the job and the images."""
        p = self.params
        return f"{len(self.runs)} runs of {p.tasks} tasks x {p.task_size} images; images: {self.dataset.source}"

    @property
    def devices(self) -> list[str]:
        """The end devices, by name."""
        return list(self.params.hierarchy().devices())

    @property
    def clock(self) -> FaultClock:
        """The clock every run uses."""
        p = self.params
        return p.clock(self.calibration.stage_s("end", p.network_name, 1))

    @property
    def fail_after(self) -> int:
        """Tasks a failing device answers before it switches off."""
        p = self.params
        return check_job("Without", self.devices, self.images, p.task_size, 0, p.fail_after)

    def run_params(self, run: FaultRunKey) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        p = self.params
        d = self.dataset
        return {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "method": run.method,
            "failures": run.failures,
            "repeat": run.repeat,
            "tasks": p.tasks,
            "task_size": p.task_size,
            "fail_after": self.fail_after,
            "clock": self.clock.__dict__,
            "hierarchy": p.hierarchy().to_dict(),
            "end_network": p.network_name,
            "dataset": {"name": d.name, "source": d.source, "n_test": d.n_test},
            "seed": p.seed,
            "cluster": p.scheduler_address or "emulated",
        }

    def devices_needed(self, runs: list[FaultRunKey]) -> int:
        """Every end device."""
        return self.params.end_devices

    def start_cluster(self, runs: list[FaultRunKey], dashboard_address: str) -> DeviceCluster:
        """The end tier (one worker per device), or the scheduler given.

        Dask's own recovery gives up on a task once it was on ``allowed-failures``
        dying workers (3 by default): the emulated scheduler allows one per end
        device, so that every method faces the same failures.
        """
        if self.params.scheduler_address:
            return connect(self.devices_needed(runs), scheduler_address=self.params.scheduler_address)
        with dask.config.set({"distributed.scheduler.allowed-failures": self.params.end_devices}):
            return start_hierarchy(self.params.hierarchy(), dashboard_address=dashboard_address)

    def setup(self, cluster: DeviceCluster) -> dict[str, Any]:
        """Build the end network on every end device, once; a run brings back the devices the last one shut down."""
        p = self.params
        sizes = tuple(sorted({p.task_size, len(self.images) % p.task_size or p.task_size}))
        deployment = deploy(
            cluster, p.hierarchy(), {"end": p.end_network}, tiers=("end",), seed=p.seed, batch_sizes=sizes
        )
        return {"cluster": cluster.info, "deployment": deployment}

    def teardown(self, context: dict[str, Any]) -> None:
        """Bring every device back and drop the networks."""
        deployment = context["deployment"]
        deployment.restore(self.devices)
        deployment.release()

    def execute(self, cluster: DeviceCluster, run: FaultRunKey, context: dict[str, Any]) -> Outcome:
        """Run the job under one method while ``run.failures`` devices fail."""
        p = self.params
        deployment = context["deployment"]
        restored = deployment.restore(self.devices)
        result = run_job(
            deployment,
            self.devices,
            self.images,
            run.method,
            self.clock,
            task_size=p.task_size,
            failures=run.failures,
            fail_after=self.fail_after,
            seed=failure_seed(p.seed, run),
        )
        summary = {
            "cluster": context["cluster"],
            "dataset": self.dataset.provenance(),
            "calibration": self.calibration.source,
            "finished": result.finished,
            "duration_s": result.duration_s,
            "timeouts": result.timeouts,
            "queries": result.queries,
            "failing": result.failing,
            "fail_after": result.fail_after,
            "kills": result.kills,
            "restored_before": restored,
            "host_wall_s": result.host_wall_s,
        }
        return summary, {"tasks": result.tasks, "events": result.events}, {"answers": result.answers}


def failure_seed(seed: int, run: FaultRunKey) -> list[int]:
    """The seed that picks the failing devices: the same for every method at one number of failures and repeat."""
    return [seed, run.failures, run.repeat]


def prepare(**kwargs: Any) -> Plan:
    """Load the job's images and check every run, before any cluster work."""
    params = harness.parse_params(FaultsParams, kwargs, sequences=("methods", "failures"))
    calibration = zhang2018_calibration().with_given_times({"end": params.network_name}, params.network_times)
    runs = [
        FaultRunKey(m, f, r)
        for f in sorted(set(params.failures))
        for m in params.methods
        for r in range(params.repeats)
    ]
    blank = np.zeros((params.tasks * params.task_size, 32, 32, 3), np.uint8)
    plan = Plan(params, blank, None, get_profile("native"), runs, calibration)  # type: ignore[arg-type]
    plan.fail_after  # noqa: B018  (checks the job's shape before the images are read)
    dataset = load_dataset(
        "cifar100", data_dir=params.data_dir, test_limit=params.tasks * params.task_size, seed=params.seed
    )
    if len(dataset.x_test) < params.tasks * params.task_size:
        raise ConfigError(
            "tasks", params.tasks, f"at most {len(dataset.x_test) // params.task_size} tasks of {params.task_size}"
        )
    return replace(plan, images=dataset.x_test, dataset=dataset)


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: no source supplies CIFAR-100 or its stand-in; None if one does."""
    return harness.missing_dataset("cifar100", data_dir)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = FaultsParams

pending = harness.pending
run = harness.run


# ------------------------------------------------------------ summaries ----


def summarize(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """A row per run: finished or not, the clock's duration, timeouts, answers, kills, and the host's wall time.

    ``same_answers``: the answers delivered equal those of the run with no
    failure (each image's answer comes from the same network whichever
    device gave it).
    """
    by_run = harness.by_run(plan, stored)
    reference = next((r.arrays["answers"] for k, r in by_run.items() if k.failures == 0), None)
    rows = []
    for run, result in by_run.items():
        s = result.summary
        tasks = result.tables["tasks"]
        answers = result.arrays["answers"]
        got = answers >= 0
        rows.append(
            {
                "method": run.method,
                "failures": run.failures,
                "repeat": run.repeat,
                "finished": bool(s["finished"]),
                "duration_s": float(s["duration_s"]),
                "timeouts": int(s["timeouts"]),
                "timeout_wait_s": int(s["timeouts"]) * plan.params.timeout_s,
                "queries": int(s["queries"]),
                "answered": int((tasks["device"] != "").sum()),
                "lost": int((tasks["device"] == "").sum()),
                "killed": len(s["kills"]),
                "same_answers": bool(reference is not None and np.array_equal(answers[got], reference[got])),
                "host_wall_s": float(s["host_wall_s"]),
            }
        )
    return pd.DataFrame(rows)


def table5(summary: pd.DataFrame) -> pd.DataFrame:
    """Mean duration per method and number of failures (``inf`` when any repeat never finished), the report's beside."""
    printed = load_reference("zhang2018/table5")
    rows = []
    for (method, failures), group in summary.groupby(["method", "failures"], sort=False):
        mean = float(group["duration_s"].mean()) if group["finished"].all() else math.inf
        paper = printed[(printed["row"] == method) & (printed["column"] == f"device_failures_{failures}")]
        rows.append(
            {
                "method": method,
                "failures": int(failures),
                "duration_s": mean,
                "report_s": float(paper["value"].iloc[0]) if len(paper) else math.nan,
                "finished": f"{int(group['finished'].sum())}/{len(group)}",
                "timeouts": float(group["timeouts"].mean()),
                "repeats": len(group),
            }
        )
    table = pd.DataFrame(rows)
    order = {m: i for i, m in enumerate(METHODS)}
    return table.sort_values(["method", "failures"], key=lambda c: c.map(order) if c.name == "method" else c)


def eq9(plan: Plan, summary: pd.DataFrame) -> pd.DataFrame:
    """Reassign's timeouts x t_comm (eq9) beside its measured excess over no failure, and the catalog's model.

    The catalog's derived model (not the report's): each failed device leaves
    ``share - fail_after`` tasks, and every pass over the full list sends a
    fraction f / n of them to dead devices again: ``lost / (1 - f / n)``
    timeouts.
    """
    p = plan.params
    reassign = summary[summary["method"] == "Reassign"]
    if reassign.empty:
        return pd.DataFrame()
    means = reassign.groupby("failures")[["duration_s", "timeouts"]].mean()
    base = means["duration_s"].get(0, math.nan)
    share = p.tasks // p.end_devices
    rows = []
    for f, row in means.iterrows():
        lost = int(f) * (share - plan.fail_after)
        model = lost / (1 - int(f) / p.end_devices) if int(f) < p.end_devices else math.inf
        rows.append(
            {
                "failures": int(f),
                "timeouts": float(row["timeouts"]),
                "eq9_overhead_s": float(row["timeouts"]) * p.timeout_s,
                "excess_s": float(row["duration_s"] - base),
                "catalog_model_timeouts": model,
                "catalog_model_s": model * p.timeout_s,
            }
        )
    return pd.DataFrame(rows)


def is_report_job(plan: Plan) -> bool:
    """Whether the runs are the report's job (only then are Table 5's seconds comparable)."""
    p = plan.params
    return (p.tasks, p.task_size, p.end_devices, p.timeout_s) == tuple(REPORT_JOB.values())


def reduction(plan: Plan) -> str:
    """How the runs are smaller than the report's (empty at its size): the job, the failures, the repeats."""
    p = plan.params
    parts = []
    if not is_report_job(plan):
        job = REPORT_JOB
        parts.append(
            f"{p.tasks} tasks of {p.task_size} images on {p.end_devices} devices, timeout {p.timeout_s} s (the "
            f"report: {job['tasks']} of {job['task_size']} on {job['end_devices']}, {job['timeout_s']} s)"
        )
    ran = sorted(set(p.failures))
    if not set(REPORT_FAILURES) <= set(ran):
        parts.append(f"{', '.join(map(str, ran))} failed devices of the report's 0-{max(REPORT_FAILURES)}")
    if p.repeats < REPORT_REPEATS:
        parts.append(f"{p.repeats} repeat(s) of the report's {REPORT_REPEATS}")
    return "; ".join(parts)


def deterministic_facts(plan: Plan) -> pd.DataFrame:
    """What depends only on the parameters (checked by nbval): the failing devices and each device's share."""
    p = plan.params
    from edgelab.hierarchy.fault_tolerance import failing_devices

    rows = []
    for f in sorted(set(p.failures)):
        for r in range(p.repeats):
            failing = failing_devices(plan.devices, f, failure_seed(p.seed, FaultRunKey("Without", f, r)))
            rows.append({"failures": f, "repeat": r, "failing devices": ", ".join(failing) or "-"})
    facts = pd.DataFrame(rows)
    facts.attrs["fail_after"] = plan.fail_after
    return facts


# ------------------------------------------------------------ notebook ----


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: after how many answers a failing device stops, and which devices fail."""
    facts = deterministic_facts(plan).to_string(index=False)
    return f"a failing device answers {plan.fail_after} tasks, then switches off\n{facts}"


def run_facts(plan: Plan, stored: list[StoredRun]) -> str:
    """What nbval checks of the runs: the report's three methods on the clock (fixed rules, seeded failures).

    Dask places tasks itself, so its runs are only shown (``measurements``).
    """
    summary = summarize(plan, stored)
    report = summary[summary["method"].isin(PAPER_METHODS)]
    columns = ["method", "failures", "repeat", "finished", "duration_s", "timeouts", "answered", "lost", "killed"]
    return report[[*columns, "same_answers"]].round(3).to_string(index=False)


def measurements(plan: Plan, stored: list[StoredRun]) -> list[Any]:
    """What the notebook shows of the runs: every one, Dask's and the host's wall time among them."""
    return [summarize(plan, stored)]

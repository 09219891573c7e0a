"""Park et al. 2020, LeNet on MNIST: Tables 1-2 and Figure 4 (a-d).

Paper: Park, Lee, Kim, "Hardware Resource Analysis in Distributed Training with
Edge Devices", Electronics 9(1):28, 2020 (doi 10.3390/electronics9010028).

The notebook ``notebooks/park2020_lenet.ipynb`` calls, through
``edgelab.papers.notebook``: ``prepare`` (load data, validate every run before
any cluster work; ``plan_facts`` what follows from it), the harness's run
(train what the results store does not hold yet), ``summarize`` (elapsed time
and hardware use of every run on its clocks; ``run_facts`` and
``measurements`` what it shows) and
``edgelab.papers.park2020.lenet_figures.render_lenet`` (items and verdicts).

The cells at the smallest and the largest device count run ``repeats`` times,
so every item shows the run-to-run noise its verdict is weighed against (a
measured value is judged with three runs, ``edgelab.report.verdict.MIN_REPEATS``).
A repeat is one of two kinds:

* ``repeat_steps`` an integer (smoke): the repeat keeps its cell's seed and
  trains at most that many batches per device, projected to the whole epoch
  (``edgelab.emulation.projection``). With the same seed it would train the first run's
  weights bit for bit, so it adds only the spread of the measured CPU clocks
  (and, when it trains the whole epoch, of the host's memory): the cell's
  accuracy is the first run's, one run.
* ``repeat_steps=None`` (full): the repeat trains the whole epoch with a seed
  of its own (``seed + repeat``: other weights, shards and batch order), an
  independent run of every measured value, its accuracy included.

The device-model time (counted steps, FLOPs and bytes) is the same in every
repeat: deterministic, it needs none.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster, device_names
from edgelab.cluster.faults import KillSchedule
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.data import Dataset, load_dataset
from edgelab.emulation.device_model import DeviceModel, has_model
from edgelab.emulation.device_model import for_profile as device_model_for
from edgelab.emulation.memory_model import device_memory
from edgelab.emulation.profiles import DeviceProfile, get_profile, with_memory
from edgelab.emulation.projection import contention, fit_speed_factor, is_attached, link_models, recoveries, run_summary
from edgelab.emulation.timeline import Topology
from edgelab.models.builtin import parameter_count
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.papers.park2020.runs import device_rate_basis
from edgelab.report.reference import load_reference
from edgelab.training.data_parallel import TrainConfig, check, phase_counts, samples_per_device, steps_per_device, train

EXPERIMENT = "park2020_lenet"
# Part of every results-store key: raise it when a change moves what the same
# parameters measure, so stored runs are re-measured, never mixed with new ones.
# 2: device workers start without Dask's MALLOC_TRIM_THRESHOLD_ (edgelab.cluster.device_cluster).
# 3: each device's model is warmed on a real batch of the run's size before round 0.
# 4: rounds by direct call, weights by raw ops, one-batch gathers in numpy, epoch rounds without
#    fit()'s set-up: the same weights, less host CPU per step (what the labelled CPU clocks read).
# 5: device workers run TensorFlow's oneDNN kernels (edgelab.cluster.device_cluster): the same math in another
#    float rounding, about half the host CPU per convolutional step.
# 6: a one-batch round is one compiled call (edgelab.runtime.plugin): the same weights, bit for bit,
#    about half the host CPU per LeNet-MLP step (what the labelled CPU clocks read).
# 7: a device builds its optimizer without tracing Keras' own train step, which it never runs (less
#    memory held, less warm-up CPU), and its many-batch loop is traced once for every shape: an
#    epoch-long round 0 no longer holds a retrace in its measured CPU time (edgelab.runtime.plugin).
MEASUREMENT_REVISION = 7
# The paper trains on all 60,000 MNIST training images per epoch.
PAPER_TRAIN_SIZE = 60_000
#: MNIST's test set, which the example script validates on.
PAPER_TEST_SIZE = 10_000
# LeNet takes 28x28 grey digits.
LENET_DATASETS = ("mnist",)
TABLE_OF_MODEL = {"mlp": "park2020/table1", "cnn": "park2020/table2"}

#: parameters papermill injects for the paper-sized run (``edgelab reproduce --profile full``)
FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "device_counts": list(range(1, 11)),
    "sample_limit": None,
    "test_limit": None,
    "monitor_interval_s": 30.0,
    # N=1 and N=10 three times each, every repeat a whole epoch with its own seed: the accuracy and host
    # memory the items judge stand on three independent runs (the device-model time needs none).
    "repeats": 3,
    "repeat_steps": None,
}


@dataclass(frozen=True)
class LenetParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    models: tuple[str, ...] = ("mlp", "cnn")
    device_counts: tuple[int, ...] = (1, 2, 3)
    worker_data: tuple[str, ...] = ("full", "shard")
    repeats: int = 2
    # Batches per device of a repeat with its cell's seed (the first run of a cell trains them all);
    # None: every repeat trains the whole epoch with a seed of its own (seed + repeat), an independent run.
    repeat_steps: int | None = 100
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
    duplex: str = "full"
    master_is_device: bool = True
    # The optimizer of MXNet's image-classification example the paper ran
    # (train_mnist.py: lr 0.05; common/fit.py: SGD, momentum 0.9, wd 0.0001).
    learning_rate: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0001
    monitor_interval_s: float = 0.25
    kills: tuple[dict[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.dataset not in LENET_DATASETS:
            raise ConfigError("dataset", self.dataset, f"one of {', '.join(LENET_DATASETS)}")
        if not self.models:
            raise ConfigError("models", self.models, "a non-empty list of mlp, cnn")
        for model in self.models:  # each row sits beside its paper table (TABLE_OF_MODEL): no other model has one
            if not isinstance(model, str) or model not in TABLE_OF_MODEL:
                raise ConfigError("models", model, "mlp or cnn, the models of Tables 1 and 2")
        if not self.device_counts or not all(checks.is_integer(n) and n >= 1 for n in self.device_counts):
            raise ConfigError("device_counts", self.device_counts, "a non-empty list of integers >= 1")
        checks.integer("repeats", self.repeats, at_least=1)  # runs of the end cells, to measure noise
        checks.integer("repeat_steps", self.repeat_steps, at_least=1, none="a whole epoch, its own seed")
        checks.number("monitor_interval_s", self.monitor_interval_s, above=0, unit="seconds")
        self.topology  # noqa: B018 - validates ps_link, duplex and master_is_device now

    @property
    def topology(self) -> Topology:
        """Where the parameter server sits and how its link carries traffic."""
        return Topology(self.ps_link, self.duplex, self.master_is_device)

    def runs(self, n_train: int | None = None) -> list[tuple[TrainConfig, int]]:
        """Every run: one per (model, device count, worker data), the end device counts ``repeats`` times.

        The whole sweep runs once before any repeat, so a drift of the host over
        a session spreads into each cell's repeats instead of separating cells
        that ran at different times (N=1 full and shard are one computation).
        Given ``n_train``, a repeat whose devices would train more than
        ``repeat_steps`` batches trains that many (``TrainConfig.max_steps``),
        when it synchronizes per batch: then every round costs the same, and the
        rounds measured stand for the rest. With ``repeat_steps=None`` repeat
        ``r`` trains the whole epoch with the seed ``seed + r``.
        """
        counts = sorted(self.device_counts)
        ends = {counts[0], counts[-1]}
        runs = [
            (
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
                    # A whole repeat with its cell's seed would train the same weights again: it gets its own.
                    seed=self.seed + (r if self.repeat_steps is None else 0),
                ),
                r,
            )
            for r in range(self.repeats)
            for m, n, w in itertools.product(self.models, counts, self.worker_data)
            if r == 0 or n in ends
        ]
        if n_train is None or self.repeat_steps is None or self.sync_every != "batch":
            return runs
        steps = self.repeat_steps
        return [
            (replace(cfg, max_steps=steps) if r and max(steps_per_device(cfg, n_train)) > steps else cfg, r)
            for cfg, r in runs
        ]


@dataclass
class Plan(harness.Plan):
    """Validated work: the data, the device, and every run to do."""

    params: LenetParams
    dataset: Dataset
    profile: DeviceProfile
    runs: list[tuple[TrainConfig, int]]
    memory_mb: dict[str, float] = field(default_factory=dict)

    @property
    def configs(self) -> list[TrainConfig]:
        """The distinct training configurations (repeats left out)."""
        return [cfg for cfg, repeat in self.runs if repeat == 0]

    def describe(self) -> str:
        """The runs, where the parameter server sits, and the data."""
        return f"{len(self.runs)} runs; {self.params.topology.describe()}\ndata: {self.dataset.provenance()}"

    def label(self, run: tuple[TrainConfig, int]) -> str:
        """Model, devices, what each iterates, and the repeat."""
        cfg, repeat = run
        return f"{cfg.model} N={cfg.n_devices} {cfg.worker_data} repeat {repeat}"

    def kills_for(self, cfg: TrainConfig) -> list[dict[str, Any]]:
        """The kills that apply to a run: those naming one of its devices."""
        names = device_names(self.profile, cfg.n_devices)
        return [k for k in self.params.kills if k["device"] in names or self.params.scheduler_address]

    def run_params(self, run: tuple[TrainConfig, int]) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        cfg, repeat = run
        d = self.dataset
        params = {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "train": cfg.to_dict(),
            "repeat": repeat,
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
        kills = self.kills_for(cfg)
        if kills:
            params["kills"] = kills
        return params

    def devices_needed(self, runs: list[tuple[TrainConfig, int]]) -> int:
        """The largest device count among ``runs``."""
        return max(cfg.n_devices for cfg, _ in runs)

    def execute(self, cluster: DeviceCluster, run: tuple[TrainConfig, int], context: dict[str, Any]) -> Outcome:
        """Train one run and return what the store keeps of it."""
        cfg, _ = run
        result = train(
            cluster,
            self.dataset,
            cfg,
            monitor_interval_s=self.params.monitor_interval_s,
            kills=self.kills_for(cfg),
        )
        summary = {
            "host": result.host,
            # A sampled repeat: the rounds it trained and the rounds of the whole epoch it stands for.
            "sampled": {
                "rounds_measured": int(result.records["round"].nunique()),
                "rounds_planned": max(steps_per_device(replace(cfg, max_steps=None), self.dataset.n_train)),
            }
            if cfg.max_steps
            else None,
            "cluster": context["cluster"],
            "calibration": context["calibration"],
            "dataset": self.dataset.provenance(),
            "profile": asdict(self.profile),
            "weights_sha256": result.weights_sha256,
        }
        tables = {
            "records": result.records,
            "evaluations": result.evaluations,
            "monitor": result.monitor,
            "shards": result.shards,
            "recoveries": result.recoveries,
            "kills": result.kills,
        }
        return summary, tables


def prepare(**kwargs: Any) -> Plan:
    """Load the data and check every run, before any cluster work.

    Keyword arguments are the fields of ``LenetParams`` (lists are accepted for
    the tuple fields, as papermill passes them).
    """
    if "kills" in kwargs:
        kwargs["kills"] = [dict(k) if isinstance(k, dict) else k for k in kwargs["kills"] or ()]
    params = harness.parse_params(LenetParams, kwargs, sequences=("models", "device_counts", "worker_data", "kills"))
    profile = with_memory(get_profile(params.device_profile), params.device_memory_mb)
    params.runs()  # validates model, worker_data ... through TrainConfig, before the data loads
    dataset = load_dataset(
        params.dataset,
        data_dir=params.data_dir,
        sample_limit=params.sample_limit,
        test_limit=params.test_limit,
        seed=params.seed,
    )
    plan = Plan(params, dataset, profile, params.runs(dataset.n_train))
    for cfg in plan.configs:
        estimate = check(cfg, n_train=dataset.n_train, profile=profile)
        plan.memory_mb[f"{cfg.model}/N={cfg.n_devices}/{cfg.worker_data}"] = round(estimate["total"], 1)
    _check_kills(plan)
    return plan


def _check_kills(plan: Plan) -> None:
    """Every kill names a phase, a point and a device some run has (before any cluster work)."""
    if not plan.params.kills:
        return
    for cfg in plan.configs:
        KillSchedule(plan.kills_for(cfg), phases=phase_counts(cfg, plan.dataset.n_train))
    if plan.params.scheduler_address:
        return  # a real cluster's device names are known once connected; train checks them then
    largest = device_names(plan.profile, max(plan.params.device_counts))
    for kill in plan.params.kills:
        if kill.get("device") not in largest:
            raise ConfigError("kills.device", kill.get("device"), f"a device of the runs: {', '.join(largest)}")


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = LenetParams

# The shared harness does the rest: what is pending, a cluster only for that, each run stored as it finishes.
pending = harness.pending
run = harness.run


# ------------------------------------------------------------ summaries ----


@dataclass
class LenetSummary:
    """Every run read on its clocks, and how each clock was set."""

    runs: pd.DataFrame  # one row per (run, clock): see edgelab.emulation.projection.run_summary
    calibration: dict[str, Any]  # per model: the fitted cell, the factors, the host measurement
    dataset: dict[str, Any]
    topology: Topology
    clocks: list[str]  # the clocks the rows are on, primary first
    recoveries: pd.DataFrame  # every recovery of every run, with its run's cell
    # The same runs under each of projection.LINK_MODELS, each fitted on its own 1-device cell (emulated only).
    link_models: pd.DataFrame = field(default_factory=pd.DataFrame)
    device_model: DeviceModel | None = None  # the profile's one device model (the primary emulated clock)


def summarize(plan: Plan, runs: list[StoredRun]) -> LenetSummary:
    """Read every run on its clocks.

    On the emulated cluster: the device model's clock (primary: the profile's
    one device model, fitted once on the two 1-device cells of Tables 1 and 2,
    the same model every other experiment of the profile uses), the nominal
    clock, and the per-table alternative, the calibrated clock whose factor is
    fitted per table on the paper's 1-device cell (the median of every
    1-device run of that model: both settings are the same computation at
    N=1). On a real cluster reached by address: the measured wall time only,
    with nothing fitted.
    """
    profile, topology = plan.profile, plan.params.topology
    model_of_device = device_model_for(profile.name) if has_model(profile.name) else None
    attached = bool(runs) and all(is_attached(r) for r in runs)
    rows, calibration, alternatives = [], {}, []
    # Host contention is an artefact of emulation: real devices (attached clusters) have none to remove.
    factors = {} if attached else contention(runs)
    for model in sorted({r.params["train"]["model"] for r in runs}):
        model_runs = [r for r in runs if r.params["train"]["model"] == model]
        if attached:
            calibration[model] = {"clock": "wall", "cell": None, "host": model_runs[0].summary["calibration"]}
            rows += [_row(r, profile, "wall", 1.0, topology) for r in model_runs]
            continue
        nominal = float(model_runs[0].summary["calibration"]["speed_factor"])
        paper = load_reference(TABLE_OF_MODEL[model])
        paper_1 = float(paper.query("devices == 1 and metric == 'elapsed_time_s'")["value"].iloc[0])
        ones = [r for r in model_runs if r.params["train"]["n_devices"] == 1]
        fitted = (
            fit_speed_factor(ones, profile, topology=topology, target_s=paper_1, paper_train_size=PAPER_TRAIN_SIZE)
            if ones
            else None
        )
        primary = "device_model" if model_of_device is not None else "calibrated" if fitted is not None else "nominal"
        calibration[model] = {
            "clock": primary,
            "device_model": model_of_device.describe() if model_of_device is not None else None,
            "cell": f"{TABLE_OF_MODEL[model]} devices=1 elapsed_time_s={paper_1:g}",
            "fitted_on_runs": len(ones),
            "nominal_speed_factor": nominal,
            "calibrated_speed_factor": fitted,
            "host": model_runs[0].summary["calibration"],
        }
        for r in model_runs:
            cell = factors.get((model, int(r.params["train"]["n_devices"])), 1.0)
            if model_of_device is not None:
                rows.append(_row(r, profile, "device_model", 1.0, topology, device_model=model_of_device))
            rows.append(_row(r, profile, "nominal", nominal, topology, cell))
            if fitted is not None:
                rows.append(_row(r, profile, "calibrated", fitted, topology, cell))
        if ones:
            alternatives += link_models(
                model_runs,
                ones,
                profile,
                target_s=paper_1,
                paper_train_size=PAPER_TRAIN_SIZE,
                contention=factors,
                chosen=topology,
            )
    frame = pd.DataFrame(rows)
    order = ("wall", "device_model", "calibrated", "nominal")
    clocks = [c for c in order if not frame.empty and (frame["clock"] == c).any()]
    summary = LenetSummary(frame, calibration, plan.dataset.provenance(), topology, clocks, recoveries(runs))
    summary.link_models = pd.DataFrame(alternatives)
    summary.device_model = model_of_device
    return summary


def _row(
    run: StoredRun,
    profile: DeviceProfile,
    clock: str,
    factor: float,
    topology: Topology,
    contention: float = 1.0,
    device_model: DeviceModel | None = None,
) -> dict[str, Any]:
    row = run_summary(
        run,
        profile,
        clock=clock,
        speed_factor=factor,
        topology=topology,
        paper_train_size=PAPER_TRAIN_SIZE,
        contention=contention,
        device_model=device_model,
    )
    # Runs of one seed train the same weights: the items count a cell's accuracy once per seed.
    return row | {"seed": int(run.params["train"].get("seed", 0)), "device_mb": board_memory_mb(profile, run)}


#: Bytes a sample of MNIST takes in memory on the paper's board: MXNet's MNIST iterator holds float32 pixels.
MNIST_BYTES_PER_SAMPLE = 28 * 28 * 4


def board_memory_mb(profile: DeviceProfile, run: StoredRun) -> float:
    """MB the board holds training the run's LeNet at the paper's size (``edgelab.emulation.memory_model``).

    The data is resident: MXNet 0.9.5's ``train_mnist.py``, the paper's
    example, reads MNIST into float32 arrays its ``NDArrayIter`` iterates:
    the training images the device trains on (all 60,000 with
    ``worker_data="full"``, its 1/N shard with ``"shard"``) and the 10,000
    test images it validates on.
    """
    cfg = run.params["train"]
    n = int(cfg["n_devices"])
    train = PAPER_TRAIN_SIZE if cfg["worker_data"] == "full" else -(-PAPER_TRAIN_SIZE // n)
    samples = train + PAPER_TEST_SIZE
    batch, per_sample = int(cfg["batch_size"]), MNIST_BYTES_PER_SAMPLE
    need = device_memory(profile, cfg["model"], batch, resident_samples=samples, data_bytes_per_sample=per_sample)
    return need.total_mb


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
                "runs": sum(1 for c, _ in plan.runs if replace(c, max_steps=None, seed=cfg.seed) == cfg),
                "parameters": params,
                "bytes_per_sync_each_way": params * 4,
                "samples_per_device": max(per_device),
                "syncs_per_device_per_epoch": -(-max(per_device) // cfg.batch_size),
            }
        )
    return pd.DataFrame(rows)


def noise_table(summary: LenetSummary) -> pd.DataFrame:
    """Spread of the repeated cells on the primary clock: min, median, max and relative spread."""
    clock = summary.clocks[0] if summary.clocks else "nominal"
    rows = summary.runs[summary.runs["clock"] == clock]
    grouped = rows.groupby(["model", "worker_data", "devices"])["projected_s"]
    out = grouped.agg(["count", "min", "median", "max"])
    out = out[out["count"] > 1]
    out["spread"] = (out["max"] - out["min"]) / out["median"]
    return out.assign(spread=lambda t: t["spread"].map(lambda v: f"{v:.1%}")).round(1).replace({np.nan: None})


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: ``deterministic_facts`` and the analytic memory need of each run."""
    facts = deterministic_facts(plan)
    facts["memory_need_mb"] = list(plan.memory_mb.values())
    return facts.to_string(index=False)


def run_facts(summary: LenetSummary) -> str:
    """What nbval checks of the runs: the global model's validation accuracy (seeded), median over repeats."""
    accuracy = summary.runs.pivot_table(
        index=["model", "worker_data"], columns="devices", values="accuracy", aggfunc="median"
    )
    return accuracy.round(3).to_string()


def clock_lines(summary: LenetSummary) -> str:
    """How each model's clock was set: measured wall time, or the speed factors and the cell they were fitted on."""
    lines = [f"clocks: {', '.join(summary.clocks)}"]
    for model, cal in summary.calibration.items():
        if cal["clock"] == "wall":
            lines.append(f"  {model}: measured wall time on the attached cluster; nothing fitted")
        else:
            lines.append(
                f"  {model}: nominal speed factor {cal['nominal_speed_factor']:.1f} "
                f"(host {cal['host']['host_gflops']} GFLOPS measured / device {cal['host']['device_gflops']} GFLOPS "
                f"{device_rate_basis(cal['host'])}), calibrated {cal['calibrated_speed_factor']} on {cal['cell']}"
            )
    return "\n".join(lines)


#: The columns of each run the notebook shows: time on each clock, hardware use, the host's own time.
MEASURED_COLUMNS = [
    "clock", "model", "devices", "worker_data", "repeat", "projected_s", "compute_share", "cpu_pct",
    "rss_mb_host", "sent_kb_s", "round0_cpu_ratio", "host_train_wall_s",
]  # fmt: skip


def measurements(summary: LenetSummary) -> list[Any]:
    """What the notebook shows of the runs that varies from run to run: clocks, recoveries, times, noise."""
    shown: list[Any] = [clock_lines(summary)]
    if not summary.recoveries.empty:
        recoveries = summary.recoveries.round(1).to_string(index=False)
        shown.append(f"recoveries (device lost, brought back, interrupted step run again):\n{recoveries}")
    return [*shown, summary.runs[MEASURED_COLUMNS].round(2), noise_table(summary)]

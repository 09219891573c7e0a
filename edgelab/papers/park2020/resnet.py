"""Park et al. 2020, ResNet on CIFAR-10: Figures 5-7, Tables 3-4 (and the live diagrams of Figures 1-2).

Every cell of the depth x batch x device-count grid trains the CIFAR ResNet
v1 (``edgelab.models.builtin``) with synchronous parameter-server SGD on the emulated
Pi 3B devices, each device on its 1/N shard (MXNet's ``train_cifar10.py``
splits the data by worker). A run trains the first ``max_steps`` batches of
each device's epoch and projects the rest: under per-batch synchronization
every round of an epoch costs the same, so the epoch takes
``rounds per epoch / rounds measured`` times the measured rounds (stated on
every item). Table 4's run trains several epochs on ten devices.

Emulated time comes from the profile's device model (``edgelab.emulation.device_model``,
fitted on LeNet's two 1-device cells and nothing of this experiment's); a
speed factor fitted on this experiment's own 1-device 32x32 cell (20,000 s)
is kept beside it as the labelled per-table alternative.

Memory is a limit: each step's working set above the framework is measured
on the device (peak RSS, the data it holds left out, since a Pi streams
CIFAR from its card) against the profile's training budget. A configuration
that needs more ends as an out-of-memory outcome, recorded and shown; the
sweep goes on. Its analytic estimate (``edgelab.training.config.estimate_memory_mb``)
is computed before any cluster work and shown beside the measurement. The
need is a host measurement: ``memory_repeats`` probes of each configuration
(fresh processes) give its median and spread, and the items judge it with
three (``edgelab.report.verdict.MIN_REPEATS``); the outcome is the first probe's.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster, device_resource
from edgelab.common import checks
from edgelab.common.errors import ConfigError, DeviceOutOfMemory
from edgelab.common.results import StoredRun
from edgelab.data import Dataset, load_dataset
from edgelab.emulation import timeline
from edgelab.emulation.device_model import DeviceModel, for_profile
from edgelab.emulation.memory_model import device_memory, record_iterator_mb
from edgelab.emulation.profiles import DeviceProfile, get_profile, with_memory
from edgelab.emulation.timeline import Topology
from edgelab.models import costs
from edgelab.models.costs import parameter_count, weight_count
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.runtime import tasks as runtime
from edgelab.training.data_parallel import TrainConfig, check, probe_memory_needs, train

EXPERIMENT = "park2020_resnet"
# 3: rounds by direct call, weights by raw ops, one-batch gathers in numpy, epoch rounds without
#    fit()'s set-up: the same weights, less host CPU per step (what the labelled CPU clocks read).
# 4: device workers run TensorFlow's oneDNN kernels (edgelab.cluster.device_cluster): the same math in another
#    float rounding, about half the host CPU per convolutional step.
# 5: a one-batch round is one compiled call (edgelab.runtime.plugin): the same weights, bit for bit,
#    about half the host CPU per LeNet-MLP step (what the labelled CPU clocks read).
# 6: a device builds its optimizer without tracing Keras' own train step, which it never runs (less
#    memory held, less warm-up CPU), and its many-batch loop is traced once for every shape: an
#    epoch-long round 0 no longer holds a retrace in its measured CPU time (edgelab.runtime.plugin).
# 7: the ResNets take 28x28 crops of CIFAR's images, as MXNet's example trains them (edgelab.models.costs.RESNET_SIDE):
#    about 0.77 of the FLOPs and activations a 32x32 image has.
# 8: the board's memory model (board_need_mb), not this host's TensorFlow, decides whether a configuration fits
#    the device; this host's need is still probed and kept beside it.
MEASUREMENT_REVISION = 8
#: CIFAR-10's training set: the paper's epoch.
PAPER_TRAIN_SIZE = 50_000
#: CIFAR-10's test set, the validation records the example opens beside the training records.
PAPER_TEST_SIZE = 10_000
#: Bytes a CIFAR-10 image takes in MXNet's record files: MXNet's scripts wrote each image as a PNG (apache/mxnet
#: issue 235) and packed it whole. Measured here: PNG (Pillow's default compression) of CIFAR-10's training
#: images 0-3,999 (the lossless sample), with the image header (24 B) and the record's (8 B, padded to 4 B):
#: 2,300 B on average (test images 0-999: 2,298 B). Checked by tests/test_park2020_resnet_memory.py.
CIFAR_RECORD_BYTES = 2_300
#: The per-table alternative is fitted on this cell: fig5a, ResNet 32x32 on one device, one epoch.
PER_TABLE_CELL = ("park2020/fig5a", 32, 32, 1, 20_000.0)

FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "depths": [32, 80, 110],
    "batch_sizes": [32, 64, 128],
    "device_counts": [1, 2, 5, 10],
    "max_steps": 8,
    "sample_limit": None,
    "test_limit": 1000,
    "table4_devices": 10,
    "table4_epochs": 5,
    "monitor_interval_s": 30.0,
    # Three probes of every configuration's memory need: the one measured value the items judge (time, CPU and
    # traffic are the device model's, deterministic; accuracy after 8 steps is not judged).
    "memory_repeats": 3,
}


def board_memory_mb(profile: DeviceProfile, depth: int, batch: int, devices: int) -> float:
    """MB a board of ``devices`` holds training ResNet-``depth`` at ``batch`` (``edgelab.emulation.memory_model``).

    No data is resident: MXNet's image-record iterator, which the paper's
    example trains CIFAR with, streams the images from the card; what it
    buffers is counted, for the two the example opens: one on the training
    records and one on the validation records, each on the device's 1/N part.
    """
    n = int(devices)
    train, test = -(-PAPER_TRAIN_SIZE // n), -(-PAPER_TEST_SIZE // n)
    side = costs.RESNET_SIDE
    buffers = sum(
        record_iterator_mb(part, int(batch), image_floats=3 * side * side, record_bytes=CIFAR_RECORD_BYTES)
        for part in (train, test)
    )
    return device_memory(profile, f"resnet{depth}", int(batch), buffers_mb=buffers).total_mb


def board_need_mb(profile: DeviceProfile, depth: int, batch: int, devices: int) -> float:
    """What the board's training needs above its framework (``board_memory_mb``): held against its training budget."""
    return board_memory_mb(profile, depth, batch, devices) - profile.framework_mb


@dataclass(frozen=True)
class ResnetParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    # Smoke's second depth is 56, not the paper's 110: ResNet-110's runs add ~75 s to the smoke reproduction here.
    depths: tuple[int, ...] = (32, 56)
    batch_sizes: tuple[int, ...] = (32,)
    device_counts: tuple[int, ...] = (1, 2)
    max_steps: int | None = 2
    table4_devices: int = 2
    table4_epochs: int = 2
    sample_limit: int | None = 512
    test_limit: int | None = 200
    dataset: str = "cifar10"
    device_profile: str = "pi3b"
    device_memory_mb: int | None = None
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0
    # MXNet's train_cifar10.py with common/fit.py: SGD lr 0.05, momentum 0.9, wd 0.0001.
    learning_rate: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0001
    ps_link: str = "shared"
    duplex: str = "full"
    master_is_device: bool = True
    monitor_interval_s: float = 0.25
    # Probes of each configuration's memory need (fresh processes); a measured value is judged with three.
    memory_repeats: int = 1

    def __post_init__(self) -> None:
        if self.dataset != "cifar10":
            raise ConfigError("dataset", self.dataset, "cifar10")
        for depth in self.depths:
            if not checks.is_integer(depth) or depth < 8 or (depth - 2) % 6:
                raise ConfigError("depths", depth, "ResNet depths 6n+2 >= 8 (the paper's: 32, 80, 110)")
        if not self.depths:
            raise ConfigError("depths", self.depths, "a non-empty list of depths 6n+2")
        for name in ("batch_sizes", "device_counts"):
            values = getattr(self, name)
            if not values or not all(checks.is_integer(v) and v >= 1 for v in values):
                raise ConfigError(name, values, "a non-empty list of integers >= 1")
        for name in ("table4_devices", "table4_epochs"):  # 0 leaves Table 4 out
            checks.integer(name, getattr(self, name), at_least=0)
        checks.number("monitor_interval_s", self.monitor_interval_s, above=0, unit="seconds")
        checks.integer("memory_repeats", self.memory_repeats, at_least=1)  # probes of each memory need
        # The training settings, checked before any data loads (TrainConfig checks them only once it is built).
        checks.number("learning_rate", self.learning_rate, above=0)
        checks.number("momentum", self.momentum, at_least=0, below=1)
        checks.number("weight_decay", self.weight_decay, at_least=0)
        checks.integer("max_steps", self.max_steps, at_least=1, none="every batch")
        self.topology  # noqa: B018 - validates the link settings now

    @property
    def topology(self) -> Topology:
        """Where the parameter server sits and how its link carries traffic."""
        return Topology(self.ps_link, self.duplex, self.master_is_device)


@dataclass(frozen=True)
class ResnetRun:
    """One run: a ResNet depth and batch size on some devices for some epochs."""

    depth: int
    batch_size: int
    devices: int
    epochs: int = 1

    @property
    def model(self) -> str:
        """The model's name."""
        return f"resnet{self.depth}"


@dataclass
class Plan(harness.Plan):
    """Validated work: the data, the device, its model, and every run."""

    params: ResnetParams
    dataset: Dataset
    profile: DeviceProfile
    runs: list[ResnetRun]
    device_model: DeviceModel
    memory_mb: dict[tuple[int, int], dict[str, float]] = field(default_factory=dict)

    def describe(self) -> str:
        """The runs, where the parameter server sits, the device model and the data."""
        return (
            f"{len(self.runs)} runs; {self.params.topology.describe()}\n"
            f"device model: {self.device_model.describe()}\ndata: {self.dataset.provenance()}"
        )

    def config(self, run: ResnetRun) -> TrainConfig:
        """The training configuration of a run."""
        p = self.params
        return TrainConfig(
            model=run.model,
            n_devices=run.devices,
            epochs=run.epochs,
            batch_size=run.batch_size,
            worker_data="shard",
            learning_rate=p.learning_rate,
            momentum=p.momentum,
            weight_decay=p.weight_decay,
            seed=p.seed,
            # This host measures each step's need; only one beyond the board's whole memory stops a run here
            # (execute: the board's memory model decides against its training budget).
            memory_budget_mb=float(self.profile.memory_mb),
            max_steps=p.max_steps,
        )

    def run_params(self, run: ResnetRun) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        d = self.dataset
        params = {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "train": self.config(run).to_dict(),
            "dataset": {"name": d.name, "source": d.source, "n_train": d.n_train, "n_test": d.n_test},
            "device_profile": self.profile.name,
            "device_memory_mb": self.profile.memory_mb,
            "cluster": self.params.scheduler_address or "emulated",
            "monitor_interval_s": self.params.monitor_interval_s,
        }
        if self.params.memory_repeats > 1:  # a run probed once keeps the key it always had
            params["memory_repeats"] = self.params.memory_repeats
        return params

    def devices_needed(self, runs: list[ResnetRun]) -> int:
        """The largest device count among ``runs``."""
        return max(r.devices for r in runs)

    def before_runs(self, cluster: DeviceCluster, runs: list[ResnetRun]) -> dict[str, Any]:
        """Measure every pending depth and batch's memory need up front, side by side (each run then finds it).

        With ``memory_repeats`` > 1 each configuration is probed that many
        times in all (fresh processes, side by side, at most one per host core
        on emulated devices): ``context["memory_probes"]`` holds the repeats'
        needs (MB) by (depth, batch), the first probe being the run's own.
        """
        probe_memory_needs(cluster, cluster.devices, [self.config(run) for run in runs])
        repeats = self.params.memory_repeats - 1
        configs = list(dict.fromkeys((run.depth, run.batch_size) for run in runs))
        hosts = cluster.devices[: os.cpu_count() or 1] if cluster.emulated else cluster.devices
        futures = {
            (key, k): cluster.client.submit(
                runtime.probe_memory,
                ResnetRun(*key, 1).model,
                key[1],
                resources={device_resource(hosts[i % len(hosts)]): 1},
                pure=False,
            )
            for i, (key, k) in enumerate(itertools.product(configs, range(repeats)))
        }
        probes: dict[tuple[int, int], list[float]] = {}
        for (key, _), future in futures.items():
            probes.setdefault(key, []).append(float(future.result()["need_mb"]))
        return {"memory_probes": probes}

    def execute(self, cluster: DeviceCluster, run: ResnetRun, context: dict[str, Any]) -> Outcome:
        """Train one run; a configuration whose need, by the board's memory model, exceeds its budget is out of memory.

        The model (``board_need_mb``) predicts the paper's memory cells within 16%; this host's TensorFlow
        needs more than MXNet 0.9.5 did on the Pi (ResNet-110 at batch 64: 739-756 MB against the board's 521),
        and held to the budget it stopped configurations the paper trained.
        """
        summary = {
            "cluster": context["cluster"],
            "calibration": context["calibration"],
            "dataset": self.dataset.provenance(),
            "profile": asdict(self.profile),
            "device_model": self.device_model.to_dict(),
        }
        budget = float(self.profile.training_budget_mb)
        board = board_need_mb(self.profile, run.depth, run.batch_size, run.devices)
        repeats = context.get("memory_probes", {}).get((run.depth, run.batch_size), [])
        where = {"budget_mb": budget, "board_need_mb": board, "measured_at": f"devices={run.devices}"}
        if board > budget:
            # The board decides: this host's TensorFlow keeps more than MXNet 0.9.5 did on the Pi (every layer's
            # output), so its need, probed all the same, is kept beside the board's, not held against the budget.
            host = probe_memory_needs(cluster, cluster.devices, [self.config(run)])[0]["need_mb"]
            memory = {"device": "board", "needed_mb": board, "decided_by": "board", **where}
            memory["probes_mb"] = [float(host), *repeats]
            return {**summary, "outcome": "out_of_memory", "memory": memory}, {}
        try:
            result = train(
                cluster,
                self.dataset,
                self.config(run),
                monitor_interval_s=self.params.monitor_interval_s,
                topology=self.params.topology,
                device_model=self.device_model,
            )
        except DeviceOutOfMemory as exc:  # this host's need beyond the board's whole memory: no run to emulate
            memory = {"device": exc.device, "needed_mb": exc.needed_mb, "decided_by": "host", **where}
            memory |= {"host_limit_mb": exc.budget_mb, "probes_mb": [float(exc.needed_mb), *repeats]}
            return {**summary, "outcome": "out_of_memory", "memory": memory}, {}
        summary |= {"outcome": "trained", "host": result.host, "weights_sha256": result.weights_sha256}
        summary["memory"] = {**result.memory, **where}
        if "need_mb" in result.memory:
            summary["memory"]["probes_mb"] = [float(result.memory["need_mb"]), *repeats]
        tables = {"records": result.records, "evaluations": result.evaluations, "monitor": result.monitor}
        return summary, tables


def prepare(**kwargs: Any) -> Plan:
    """Load the data and check every run, before any cluster work."""
    params = harness.parse_params(ResnetParams, kwargs, sequences=("depths", "batch_sizes", "device_counts"))
    profile = with_memory(get_profile(params.device_profile), params.device_memory_mb)
    dataset = load_dataset(
        params.dataset,
        data_dir=params.data_dir,
        sample_limit=params.sample_limit,
        test_limit=params.test_limit,
        seed=params.seed,
    )
    # Most devices first: every device of the cluster builds and traces the model at once (ResNet-110's
    # traces take ~20 s of host time each), and the smaller runs of the configuration find it built.
    runs = [
        ResnetRun(depth, batch, n)
        for depth, batch, n in itertools.product(
            params.depths, params.batch_sizes, sorted(set(params.device_counts), reverse=True)
        )
    ]
    if params.table4_devices and params.table4_epochs:
        table4 = ResnetRun(min(params.depths), min(params.batch_sizes), params.table4_devices, params.table4_epochs)
        # Right after the runs of its model, which the devices then still hold: ResNet-32 built and
        # traced again after the deeper runs cost each device ~8 s of host CPU.
        last = max(i for i, r in enumerate(runs) if (r.depth, r.batch_size) == (table4.depth, table4.batch_size))
        runs.insert(last + 1, table4)
    plan = Plan(params, dataset, profile, runs, for_profile(profile.name))
    for run in runs:
        # Shapes and shards are checked here; memory is only estimated (running out of it is a result).
        estimate = check(
            plan.config(run), n_train=dataset.n_train, profile=profile, memory="estimate", data_resident=False
        )
        plan.memory_mb[(run.depth, run.batch_size)] = estimate
    return plan


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: no source supplies CIFAR-10; None if one does."""
    return harness.missing_dataset("cifar10", data_dir)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = ResnetParams

pending = harness.pending
run = harness.run


# ------------------------------------------------------------ summaries ----


@dataclass
class ResnetSummary:
    """Every run read on the device model's clock (and the per-table alternative), projected to the paper's epoch."""

    runs: pd.DataFrame  # one row per (run, clock); outcome "trained" or "out_of_memory"
    epochs: pd.DataFrame  # Table 4: one row per (run, epoch) of the multi-epoch run: cumulative time, accuracy
    memory: pd.DataFrame  # one row per (depth, batch): estimated and measured need, budget, outcome
    device_model: DeviceModel
    per_table_factor: float | None  # speed factor of the per-table alternative
    dataset: dict[str, Any]
    topology: Topology
    profile: DeviceProfile
    max_steps: int | None
    stored: list[StoredRun] = field(default_factory=list)  # the runs read (the live diagrams draw one)


def paper_rounds(run: ResnetRun, n_train: int = PAPER_TRAIN_SIZE) -> int:
    """Synchronizations per device in one epoch of the paper's data: ceil(shard / batch)."""
    return math.ceil(math.ceil(n_train / run.devices) / run.batch_size)


def summarize(plan: Plan, stored: list[StoredRun]) -> ResnetSummary:
    """Read every stored run: times projected to the paper's epoch, accuracy, memory, CPU, network."""
    keyed = harness.by_run(plan, stored)
    factor = _per_table_factor(plan, keyed)
    rows, epochs = [], []
    for run, result in keyed.items():
        base = {"depth": run.depth, "batch": run.batch_size, "devices": run.devices, "epochs": run.epochs}
        base |= {"config": f"{run.depth}x{run.batch_size}", "paper_rounds": paper_rounds(run)}
        estimate = plan.memory_mb[(run.depth, run.batch_size)]["total"]
        if result.summary.get("outcome") == "out_of_memory":
            memory = result.summary["memory"]
            rows.append(
                {
                    **base,
                    "clock": "device_model",
                    "outcome": "out_of_memory",
                    "estimated_mb": estimate,
                    **_probes(memory, "needed_mb"),
                    "deciding_mb": memory["needed_mb"],  # what stopped it: the board's need, or this host's probe
                    "decided_by": memory.get("decided_by", "host"),
                    "budget_mb": memory["budget_mb"],
                    "host_limit_mb": memory.get("host_limit_mb", memory["budget_mb"]),  # what this host's probe met
                    "measured_at": memory.get("measured_at", f"devices={run.devices}"),
                }
            )
            continue
        for clock in ("device_model", "per_table"):
            if clock == "per_table" and factor is None:
                continue
            row, per_epoch = _read(plan, run, result, clock, factor or 1.0)
            rows.append({**base, "clock": clock, "outcome": "trained", "estimated_mb": estimate, **row})
            if run.epochs > 1:
                epochs += [{**base, "clock": clock, **e} for e in per_epoch]
    frame = pd.DataFrame(rows)
    return ResnetSummary(
        runs=frame,
        epochs=pd.DataFrame(epochs),
        memory=_memory_table(plan, frame),
        device_model=plan.device_model,
        per_table_factor=factor,
        dataset=plan.dataset.provenance(),
        topology=plan.params.topology,
        profile=plan.profile,
        max_steps=plan.params.max_steps,
        stored=list(stored),
    )


def _compute(result: StoredRun, run: ResnetRun, clock: str, factor: float, model: DeviceModel) -> np.ndarray:
    records = result.tables["records"]
    if clock == "device_model":
        return model.records_compute_s(records, run.model)
    return records["cpu_s"].to_numpy(dtype=float) * factor


def _read(
    plan: Plan, run: ResnetRun, result: StoredRun, clock: str, factor: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    records = result.tables["records"]
    compute = _compute(result, run, clock, factor, plan.device_model)
    topology = plan.params.topology
    rounds = timeline.compose(records, plan.profile, topology=topology, compute_s=compute)
    measured_per_epoch = int(records.loc[records["epoch"] == 0, "round"].nunique())
    scale = paper_rounds(run) / measured_per_epoch
    elapsed = float(rounds["elapsed_s"].iloc[-1])
    projected = elapsed * scale / run.epochs  # one epoch
    busy = timeline.device_busy(records, compute_s=compute)
    cpu = 100.0 * busy / (plan.profile.cores * elapsed)
    wire = timeline.wire_bytes(records, topology) / run.epochs
    evaluations = result.tables["evaluations"]
    row = {
        "rounds_measured": measured_per_epoch,
        "scale": scale,
        "elapsed_measured_s": elapsed,
        "projected_s": projected,
        "accuracy": float(evaluations["accuracy"].iloc[-1]),
        "cpu_pct": float(cpu.mean()),
        "compute_share": float(rounds["compute_max_s"].sum() / elapsed),
        **_probes(result.summary.get("memory", {}), "need_mb"),
        "rss_mb_host": float(records["rss_bytes"].mean() / 2**20),
        "sent_kb_epoch": float(wire["sent"].mean() * scale / 1e3),
        "received_kb_epoch": float(wire["received"].mean() * scale / 1e3),
        "bytes_per_sync": weight_count(run.model) * 4,
        "parameters": parameter_count(run.model),
    }
    row["sent_kb_s"] = row["sent_kb_epoch"] / projected
    row["received_kb_s"] = row["received_kb_epoch"] / projected
    per_epoch = []
    by_epoch = rounds.groupby("epoch")["round_s"].sum() * scale
    for epoch, seconds in by_epoch.items():
        accuracy = evaluations.loc[evaluations["epoch"] == epoch + 1, "accuracy"]
        per_epoch.append({"epoch": int(epoch) + 1, "epoch_s": float(seconds), "accuracy": float(accuracy.iloc[0])})
    cumulative = np.cumsum([e["epoch_s"] for e in per_epoch])
    for e, total in zip(per_epoch, cumulative, strict=True):
        e["elapsed_s"] = float(total)
    return row, per_epoch


def _probes(memory: dict[str, Any], key: str) -> dict[str, Any]:
    """A run's memory need: the median of its probes (the first probe alone when not repeated), spread, count."""
    probes = [float(v) for v in memory.get("probes_mb") or [memory.get(key, float("nan"))]]
    return {
        "measured_mb": float(np.median(probes)),
        "memory_min_mb": min(probes),
        "memory_max_mb": max(probes),
        "memory_runs": sum(1 for v in probes if not math.isnan(v)),
    }


def _per_table_factor(plan: Plan, keyed: dict[ResnetRun, StoredRun]) -> float | None:
    """Speed factor at which the 1-device 32x32 run's projected epoch takes the paper's 20,000 s."""
    _, depth, batch, devices, target = PER_TABLE_CELL
    cell = keyed.get(ResnetRun(depth, batch, devices, 1))
    if cell is None or cell.summary.get("outcome") != "trained":
        return None
    records = cell.tables["records"]
    scale = paper_rounds(ResnetRun(depth, batch, devices)) / records["round"].nunique()

    def projected(factor: float) -> float:
        compute = records["cpu_s"].to_numpy(dtype=float) * factor
        rounds = timeline.compose(records, plan.profile, topology=plan.params.topology, compute_s=compute)
        return float(rounds["elapsed_s"].iloc[-1]) * scale

    return timeline.solve_speed_factor(projected, target)


def _memory_table(plan: Plan, runs: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: the estimate, the largest measured need, the budget and the outcome."""
    rows = []
    for (depth, batch), estimate in sorted(plan.memory_mb.items()):
        cell = runs[(runs["depth"] == depth) & (runs["batch"] == batch)] if not runs.empty else runs
        outcome = "not run"
        measured = float("nan")
        if not cell.empty:
            outcome = "out_of_memory" if (cell["outcome"] == "out_of_memory").any() else "trained"
            measured = float(cell["measured_mb"].max())
        rows.append(
            {
                "config": f"{depth}x{batch}",
                "depth": depth,
                "batch": batch,
                "estimated_mb": round(estimate["total"], 1),
                "measured_mb": round(measured, 1),
                "budget_mb": plan.profile.training_budget_mb,
                "estimate_says": "out_of_memory" if estimate["total"] > plan.profile.training_budget_mb else "fits",
                "outcome": outcome,
            }
        )
    return pd.DataFrame(rows)


def deterministic_facts(plan: Plan) -> pd.DataFrame:
    """Values that depend only on the parameters: nbval checks them exactly."""
    rows = []
    for run in plan.runs:
        rows.append(
            {
                "model": run.model,
                "batch": run.batch_size,
                "devices": run.devices,
                "epochs": run.epochs,
                "parameters": parameter_count(run.model),
                "bytes_per_sync_each_way": weight_count(run.model) * 4,
                "syncs_per_device_per_paper_epoch": paper_rounds(run),
                "estimated_need_mb": round(plan.memory_mb[(run.depth, run.batch_size)]["total"], 1),
            }
        )
    return pd.DataFrame(rows)


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: ``deterministic_facts``."""
    return deterministic_facts(plan).to_string(index=False)


#: The columns of each run the notebook shows: time per epoch on each clock, CPU and network.
TIME_COLUMNS = [
    "clock",
    "config",
    "devices",
    "epochs",
    "outcome",
    "rounds_measured",
    "projected_s",
    "compute_share",
    "cpu_pct",
    "sent_kb_s",
    "received_kb_s",
]


def measurements(summary: ResnetSummary) -> list[Any]:
    """What the notebook shows of the runs, none of it checked: outcome and accuracy, memory, time per epoch.

    After two steps of ResNet the accuracy is noise near chance whose digits, and whether ResNet-110 x 32
    fits the budget (within 1 MB of it), follow the host CPU's oneDNN kernels.
    """
    cells = summary.runs[summary.runs["clock"] == "device_model"]
    outcome = cells[["config", "devices", "epochs", "outcome", "accuracy"]].round(3).to_string(index=False)
    return [
        f"per-table speed factor (labelled alternative): {summary.per_table_factor}",
        outcome,
        summary.memory,
        summary.runs[[c for c in TIME_COLUMNS if c in summary.runs]].round(2),
    ]

"""Park et al. 2020, synchronous against asynchronous training: Figure 3 (a, b).

Three ways to synchronize, on the same devices and data (``edgelab.sync``):

* ``ps_sync``: MXNet ``dist_sync``, a barrier and the mean of the updates
  every batch (section 3; every other figure of the paper);
* ``ps_async``: MXNet ``dist_async``, each update applied as it arrives,
  in the order the emulated clock gives (staleness recorded per update);
* ``end_average``: section 2's definition, each device trains alone and the
  server averages once, at the end of training.

Fig 3a runs LeNet-CNN (MNIST; Table 2's setting) and ResNet 32x32 (CIFAR-10;
Figure 5's) on ``devices`` devices for one epoch under each; Fig 3b evaluates
asynchronous LeNet-CNN every ``eval_every`` updates on 1, 5 and 10 devices.
Times are on the profile's device model (``edgelab.emulation.device_model``) and
projected to the paper's epoch: ``steps per device in the paper's epoch /
steps measured`` times the measured time. They are deterministic (counted
steps, FLOPs and bytes; the asynchronous order replayed on that clock).

Accuracies are trained values, judged with three runs (``edgelab.report.verdict.
MIN_REPEATS``): every whole-epoch run (LeNet-CNN's three methods and Fig 3b's
asynchronous curves) runs ``repeats`` times, repeat ``r`` with the seed
``seed + r``. ResNet's runs train ``resnet_max_steps`` batches, whose accuracy
is not judged, and run once. A fixed-length run whose Fig 3b twin (the same
model, method and devices, with evaluations along the way) is planned is that
run: the evaluations only read the weights, so one training serves both.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.data import Dataset, load_dataset
from edgelab.emulation import timeline
from edgelab.emulation.device_model import DeviceModel, for_profile
from edgelab.emulation.profiles import DeviceProfile, get_profile, with_memory
from edgelab.emulation.timeline import Topology
from edgelab.models.builtin import check_model
from edgelab.models.user import UserModel, check_data, user_model
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.training.config import WORKER_DATA, steps_per_device
from edgelab.training.data_parallel import TrainConfig, check, train

EXPERIMENT = "park2020_async"
# 2: rounds by direct call, weights by raw ops, one-batch gathers in numpy, epoch rounds without
#    fit()'s set-up: the same weights, less host CPU per step (what the labelled CPU clocks read).
# 3: device workers run TensorFlow's oneDNN kernels (edgelab.cluster.device_cluster): the same math in another
#    float rounding, about half the host CPU per convolutional step.
# 4: a one-batch round is one compiled call (edgelab.runtime.plugin): the same weights, bit for bit,
#    about half the host CPU per LeNet-MLP step (what the labelled CPU clocks read).
# 5: a device builds its optimizer without tracing Keras' own train step, which it never runs (less
#    memory held, less warm-up CPU), and its many-batch loop is traced once for every shape: an
#    epoch-long round 0 no longer holds a retrace in its measured CPU time (edgelab.runtime.plugin).
# 6: the ResNets take 28x28 crops of CIFAR's images, as MXNet's example trains them (edgelab.models.costs.RESNET_SIDE).
MEASUREMENT_REVISION = 6
PAPER_TRAIN_SIZE = {"mnist": 60_000, "cifar10": 50_000}
DATASET_OF = {"cnn": "mnist", "mlp": "mnist"}  # every ResNet trains on CIFAR-10
#: Image shapes of the two datasets: a user's model trains on the one its input takes.
IMAGE_SHAPES = {"mnist": (28, 28), "cifar10": (32, 32, 3)}
#: The paper's methods (MXNet dist_sync, dist_async, and section 2's average at the end).
PAPER_STRATEGIES = ("ps_sync", "ps_async", "end_average")
# A model whose mean test loss is this many times a uniform guess's (ln of the classes) answers nearly one
# class whatever the image: its accuracy is that class's share of the test images, and which class wins
# turns on the last bits of its logits (``run_facts``).
COLLAPSED_LOSS_FACTOR = 10

FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "devices": 10,
    "progress_devices": [1, 5, 10],
    "sample_limit": None,
    "test_limit": 1000,
    "resnet_max_steps": 8,
    "eval_every": 50,
    # Three seeds of every whole-epoch LeNet run: the accuracies of Fig 3a and 3b stand on three runs each.
    "repeats": 3,
}


@dataclass(frozen=True)
class AsyncParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    models: tuple[Any, ...] = ("cnn", "resnet32")  # built-in names, or Keras models or functions that build one
    strategies: tuple[str, ...] = PAPER_STRATEGIES
    devices: int = 3
    progress_devices: tuple[int, ...] = (1, 3)
    lenet_batch: int = 64
    resnet_batch: int = 32
    lenet_worker_data: str = "full"
    resnet_max_steps: int | None = 2
    eval_every: int = 10
    eval_limit: int = 500
    sample_limit: int | None = 1920
    test_limit: int | None = 500
    device_profile: str = "pi3b"
    device_memory_mb: int | None = None
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0
    learning_rate: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0001
    monitor_interval_s: float = 0.25
    # Runs of every whole-epoch run, each with its own seed (seed + repeat); a trained accuracy is judged with three.
    repeats: int = 1

    def __post_init__(self) -> None:
        if not self.models:
            raise ConfigError("models", self.models, "at least one model")
        object.__setattr__(self, "models", tuple(_checked_model(m, self.seed) for m in self.models))
        for strategy in self.strategies:
            if strategy not in PAPER_STRATEGIES:
                raise ConfigError("strategies", strategy, f"names among {', '.join(PAPER_STRATEGIES)}")
        for name in ("devices", "lenet_batch", "resnet_batch", "eval_every", "eval_limit", "repeats"):
            checks.integer(name, getattr(self, name), at_least=1)
        if not all(checks.is_integer(n) and n >= 1 for n in self.progress_devices):
            raise ConfigError("progress_devices", self.progress_devices, "a list of integers >= 1")
        # The training settings, checked before any data loads (TrainConfig checks them only once it is built).
        checks.number("learning_rate", self.learning_rate, above=0)
        checks.number("momentum", self.momentum, at_least=0, below=1)
        checks.number("weight_decay", self.weight_decay, at_least=0)
        # Checked here, under the notebook's own names, before TrainConfig would name them as it does.
        checks.choice("lenet_worker_data", self.lenet_worker_data, WORKER_DATA)
        checks.integer("resnet_max_steps", self.resnet_max_steps, at_least=1, none="every batch")
        checks.number("monitor_interval_s", self.monitor_interval_s, above=0, unit="seconds")


def _checked_model(model: Any, seed: int) -> str | UserModel:
    """A built-in name as it is, a user's model resolved (under ``seed``) and matched to a dataset."""
    if isinstance(model, str):
        try:
            return check_model(model)
        except ConfigError as err:  # named as this experiment names it
            raise ConfigError("models", model, err.allowed) from err
    user = user_model(model, seed=seed)
    dataset_of(user)
    return user


def dataset_of(model: str | UserModel) -> str:
    """The dataset ``model`` trains on: LeNet's MNIST, ResNet's CIFAR-10, or the one a user's model's input takes."""
    if isinstance(model, str):
        return DATASET_OF.get(model, "cifar10")
    for name, shape in IMAGE_SHAPES.items():
        if model.input_shape in (shape, (*shape, 1)):
            check_data(model, shape, n_classes=10)
            return name
    allowed = f"an input of MNIST's (28, 28) or CIFAR-10's (32, 32, 3) images; it takes {model.input_shape}"
    raise ConfigError("models", model.key, allowed)


@dataclass(frozen=True)
class AsyncRun:
    """One run: a model, a strategy, a device count; ``progress`` runs evaluate every ``eval_every`` updates."""

    model: str | UserModel
    strategy: str
    devices: int
    progress: bool = False
    repeat: int = 0  # trains with the seed ``seed + repeat``


@dataclass
class Plan(harness.Plan):
    """Validated work: the two datasets, the device, its model, every run."""

    params: AsyncParams
    datasets: dict[str, Dataset]
    profile: DeviceProfile
    runs: list[AsyncRun]
    device_model: DeviceModel

    def describe(self) -> str:
        """The runs, the device model and each dataset."""
        data = "\n".join(f"{name}: {d.provenance()}" for name, d in self.datasets.items())
        return f"{len(self.runs)} runs; device model: {self.device_model.describe()}\n{data}"

    def dataset(self, model: str) -> Dataset:
        """The dataset a model trains on."""
        return self.datasets[dataset_of(model)]

    def twin(self, run: AsyncRun) -> AsyncRun | None:
        """The planned Fig 3b run that trains what a fixed-length run trains (evaluating along the way), if any."""
        if run.progress:
            return None
        twin = AsyncRun(run.model, run.strategy, run.devices, progress=True, repeat=run.repeat)
        return twin if twin in self.runs else None

    def config(self, run: AsyncRun) -> TrainConfig:
        """The training configuration of a run (a fixed-length run with a Fig 3b twin is the twin's)."""
        p = self.params
        lenet = dataset_of(run.model) == "mnist"  # LeNet's settings for every MNIST model, ResNet's for CIFAR-10
        progress = run.progress or self.twin(run) is not None
        return TrainConfig(
            model=run.model,
            n_devices=run.devices,
            batch_size=p.lenet_batch if lenet else p.resnet_batch,
            worker_data=p.lenet_worker_data if lenet else "shard",
            strategy=run.strategy,
            sync_every="epoch" if run.strategy == "end_average" else "batch",
            learning_rate=p.learning_rate,
            momentum=p.momentum,
            weight_decay=p.weight_decay,
            seed=p.seed + run.repeat,
            eval_every=p.eval_every if progress else None,
            eval_limit=p.eval_limit if progress else None,
            max_steps=None if lenet else p.resnet_max_steps,
        )

    def run_params(self, run: AsyncRun) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        d = self.dataset(run.model)
        return {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "train": self.config(run).to_dict(),
            "dataset": {"name": d.name, "source": d.source, "n_train": d.n_train, "n_test": d.n_test},
            "device_profile": self.profile.name,
            "device_memory_mb": self.profile.memory_mb,
            "cluster": self.params.scheduler_address or "emulated",
        }

    def devices_needed(self, runs: list[AsyncRun]) -> int:
        """The largest device count among ``runs``."""
        return max(r.devices for r in runs)

    def execute(self, cluster: DeviceCluster, run: AsyncRun, context: dict[str, Any]) -> Outcome:
        """Train one run (a run whose twin is stored already is the twin's: it is not trained again)."""
        stored = context["store"].get(self.run_params(run)) if "store" in context else None
        if stored is not None:
            return stored.summary, stored.tables
        result = train(
            cluster,
            self.dataset(run.model),
            self.config(run),
            monitor_interval_s=self.params.monitor_interval_s,
            device_model=self.device_model,
        )
        summary = {
            "cluster": context["cluster"],
            "calibration": context["calibration"],
            "dataset": self.dataset(run.model).provenance(),
            "profile": asdict(self.profile),
            "device_model": self.device_model.to_dict(),
            "host": result.host,
            "weights_sha256": result.weights_sha256,
        }
        tables = {"records": result.records, "evaluations": result.evaluations, "progress": result.progress}
        return summary, tables


def prepare(**kwargs: Any) -> Plan:
    """Load both datasets and check every run, before any cluster work."""
    params = harness.parse_params(AsyncParams, kwargs, sequences=("models", "strategies", "progress_devices"))
    profile = with_memory(get_profile(params.device_profile), params.device_memory_mb)
    names = sorted({dataset_of(m) for m in params.models} | {"mnist"})
    datasets = {
        name: load_dataset(
            name,
            data_dir=params.data_dir,
            sample_limit=params.sample_limit,
            test_limit=params.test_limit,
            seed=params.seed,
        )
        for name in names
    }
    runs = [AsyncRun(m, s, params.devices) for m in params.models for s in params.strategies]
    runs += [AsyncRun("cnn", "ps_async", n, progress=True) for n in sorted(params.progress_devices)]
    runs.append(AsyncRun("cnn", "ps_sync", max(params.progress_devices), progress=True))
    # Repeats, after the whole first sweep: the runs whose accuracy is judged (whole epochs; Fig 3b's
    # asynchronous curves), each with its own seed. The synchronous curve is Fig 3b's reference only.
    whole = [
        r
        for r in runs
        if not (r.progress and r.strategy == "ps_sync")
        and (dataset_of(r.model) == "mnist" or params.resnet_max_steps is None)
    ]
    runs += [replace(r, repeat=k) for k in range(1, params.repeats) for r in whole]
    plan = Plan(params, datasets, profile, runs, for_profile(profile.name))
    for r in runs:
        resident = dataset_of(r.model) == "mnist"
        check(plan.config(r), n_train=plan.dataset(r.model).n_train, profile=profile, data_resident=resident)
    return plan


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: no source supplies CIFAR-10 (ResNet's runs); None if one does."""
    return harness.missing_dataset("cifar10", data_dir)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = AsyncParams

pending = harness.pending
run = harness.run


# ------------------------------------------------------------ summaries ----


@dataclass
class AsyncSummary:
    """Each run's time (job and mean over devices), accuracy and staleness; the progress curves."""

    runs: pd.DataFrame
    progress: pd.DataFrame  # fig3b: updates (batches applied), samples seen, accuracy per run
    device_model: DeviceModel
    datasets: dict[str, Any]
    profile: DeviceProfile
    eval_every: int  # fig3b's evaluation interval, in updates
    eval_limit: int  # and the validation images of each evaluation


def scale_of(plan: Plan, run: AsyncRun, records: pd.DataFrame) -> float:
    """Steps per device in the paper's epoch over the steps each device measured."""
    cfg = plan.config(run)
    paper = PAPER_TRAIN_SIZE[plan.dataset(run.model).name]
    shard = paper if cfg.worker_data == "full" else math.ceil(paper / run.devices)
    measured = records.groupby("device")["steps"].sum().max()
    return math.ceil(shard / cfg.batch_size) / float(measured)


def summarize(plan: Plan, stored: list[StoredRun]) -> AsyncSummary:
    """Read every run on the device model's clock, projected to the paper's epoch."""
    rows, progress = [], []
    for run, result in harness.by_run(plan, stored).items():
        records = result.tables["records"]
        scale = scale_of(plan, run, records)
        if run.strategy == "ps_async":
            finish = records.groupby("device")["t_applied_s"].max()
            job_s, mean_s = float(finish.max()), float(finish.mean())
        else:
            compute = plan.device_model.records_compute_s(records, run.model)
            rounds = timeline.compose(records, plan.profile, compute_s=compute, topology=Topology())
            job_s = mean_s = float(rounds["elapsed_s"].iloc[-1])
        rows.append(
            {
                "model": str(run.model),  # a user's model by name and digest
                "dataset": plan.dataset(run.model).name,
                "strategy": run.strategy,
                "devices": run.devices,
                "progress_run": run.progress,
                "repeat": run.repeat,
                "seed": plan.config(run).seed,
                "worker_data": plan.config(run).worker_data,
                "elapsed_s": job_s * scale,
                "mean_device_s": mean_s * scale,
                "scale": scale,
                "accuracy": float(result.tables["evaluations"]["accuracy"].iloc[-1]),
                "loss": float(result.tables["evaluations"]["loss"].iloc[-1]),
                "collapsed": collapsed(result.tables["evaluations"]["loss"].iloc[-1], plan.dataset(run.model)),
                "updates": int(records["update"].nunique()) if "update" in records else int(len(records)),
                "staleness_mean": float(records["staleness"].mean()),
                "staleness_max": int(records["staleness"].max()),
                "n_train": plan.dataset(run.model).n_train,
            }
        )
        table = result.tables.get("progress")
        if run.progress and table is not None and not table.empty:  # a fixed-length twin's curve is its twin's
            progress.append(
                table.assign(model=str(run.model), strategy=run.strategy, devices=run.devices, repeat=run.repeat)
            )
    return AsyncSummary(
        runs=pd.DataFrame(rows),
        progress=pd.concat(progress, ignore_index=True) if progress else pd.DataFrame(),
        device_model=plan.device_model,
        datasets={k: d.provenance() for k, d in plan.datasets.items()},
        profile=plan.profile,
        eval_every=plan.params.eval_every,
        eval_limit=plan.params.eval_limit,
    )


def deterministic_facts(plan: Plan) -> pd.DataFrame:
    """Values that depend only on the parameters: nbval checks them exactly."""
    rows = []
    for run in plan.runs:
        if run.repeat:
            continue  # counted in its first run's row
        cfg = plan.config(run)
        steps = steps_per_device(cfg, plan.dataset(run.model).n_train)
        rows.append(
            {
                "model": str(run.model),
                "strategy": run.strategy,
                "devices": run.devices,
                "progress_run": run.progress,
                "batch": cfg.batch_size,
                "worker_data": cfg.worker_data,
                "steps_per_device": max(steps),
                "updates": sum(steps)
                if run.strategy == "ps_async"
                else (max(steps) if cfg.sync_every == "batch" else 1),
                "eval_every": cfg.eval_every if run.progress else "-",
            }
        )
        if plan.params.repeats > 1:  # a column only when repeated, so a single sweep's facts read as they always did
            rows[-1]["runs"] = sum(1 for r in plan.runs if replace(r, repeat=0) == run)
    return pd.DataFrame(rows)


def ratios(summary: AsyncSummary) -> pd.DataFrame:
    """Per model, what Fig 3a states: sync - async time, sync / async accuracy, for each asynchronous method."""
    rows = []
    runs = summary.runs[~summary.runs["progress_run"]]
    for model, group in runs.groupby("model"):
        # The median over a method's repeats (its time is the same in each: deterministic).
        by = group.groupby("strategy")[["mean_device_s", "accuracy"]].median()
        if "ps_sync" not in by.index:
            continue
        for method in ("ps_async", "end_average"):
            if method in by.index:
                rows.append(
                    {
                        "model": model,
                        "method": method,
                        "sync_minus_async_s": float(
                            by.loc["ps_sync", "mean_device_s"] - by.loc[method, "mean_device_s"]
                        ),
                        "sync_over_async_accuracy": float(by.loc["ps_sync", "accuracy"] / by.loc[method, "accuracy"]),
                    }
                )
    return pd.DataFrame(rows, columns=["model", "method", "sync_minus_async_s", "sync_over_async_accuracy"])


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: ``deterministic_facts``."""
    return deterministic_facts(plan).to_string(index=False)


def run_facts(summary: AsyncSummary) -> str:
    """What nbval checks of the runs: final accuracy, updates applied and their staleness (seeded, clock-ordered).

    A collapsed model's accuracy (``collapsed``) is shown as "collapsed", its number in ``measurements``: it is
    the share of whichever class the model answers, and which one turns on the last bits. The smoke runs'
    asynchronous LeNet-CNN (diverged, as the paper's, ``park2020/C19``) and all three 2-batch ResNets (their
    batch-norm statistics still the initial ones) collapse; their accuracies read 0.092 with oneDNN's AVX2
    kernels and 0.130 with AVX-512 ones (the LeNet), and 0.094 and once 0.090 (the synchronous ResNet, in a
    CI run, with AVX2; not seen again here, an AMD EPYC, in 25 runs: alone, under load, three at once, or with a
    device killed in each phase; oneDNN also sizes its kernels' blocks by the CPU's caches, and the CI host's CPU
    is not known here). Every other value is checked as it is: the suite holds oneDNN at AVX2
    (``conftest.py``), and ``notebooks/record.py`` records the checked outputs under that cap.
    """
    columns = ["model", "strategy", "devices", "progress_run", "updates", "staleness_mean", "staleness_max"]
    facts = summary.runs[columns].round(3)
    facts["accuracy"] = [
        "collapsed" if gone else f"{accuracy:.3f}"
        for accuracy, gone in zip(summary.runs["accuracy"], summary.runs["collapsed"], strict=True)
    ]
    return facts.to_string(index=False)


def collapsed(loss: float, dataset: Dataset) -> bool:
    """Whether a mean test ``loss`` says the model answers nearly one class (``COLLAPSED_LOSS_FACTOR``).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> ten = SimpleNamespace(y_test=np.arange(10))
    >>> collapsed(0.38, ten), collapsed(92.9, ten), collapsed(float("nan"), ten)
    (False, True, True)
    """
    classes = max(int(np.max(dataset.y_test)) + 1, 2)
    return not loss <= COLLAPSED_LOSS_FACTOR * math.log(classes)


def measurements(summary: AsyncSummary) -> list[Any]:
    """What the notebook shows unchecked: time per epoch (the job's, the mean device's), accuracy, loss, ratios."""
    columns = ["model", "strategy", "devices", "progress_run", "elapsed_s", "mean_device_s", "scale"]
    runs = summary.runs[columns].round(1).join(summary.runs[["accuracy", "loss"]].round(3))
    return [runs, ratios(summary).round(3)]

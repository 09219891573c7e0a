"""The survey's data against model parallelism (qiao/fig3-1, qiao/fig3-2), both drawn from real runs.

fig3-2, model parallelism: a network cut layer-wise into K consecutive
stages, one per emulated device, trained with one batch in flight (GPipe's
machinery, ``edgelab.pipeline.training``, with a single micro-batch: plain
model parallelism). The single-worker run (K = 1) trains the same network on
the same batches beside it. Every pass is put on the device's clock
(``edgelab.emulation.training_clock``), where the most passes running at once
and each stage's busy share are measured (qiao/C6), with the bytes of
activations and gradients between stages and what each worker holds at its
peak (qiao/C28). The split is layer-wise (inter-layer): the survey's l.221
describes an intra-layer split whose workers could run at once (qiao/P10).

qiao/C28's second test, a model too big for one device: a wide MLP
(``wide_mlp``) trains one mini-batch on a single worker and split into
``oversized_stages`` stages, each worker's peak resident memory measured
above where the run found it. The device's memory is the profile's training
budget (``DeviceProfile.training_budget_mb``: its RAM less the OS and the
framework); the host has more, so the single worker's run is measured, not
refused, and shows what a real device could not hold. The split runs first,
on workers that never held the whole model, so no worker reuses memory the
single worker's run freed.

fig3-1, data parallelism: LeNet-MLP on MNIST shards over N devices, under
``ps_sync`` and ``ps_async`` (``edgelab.training.data_parallel``, as ``park2020_async`` runs
them), timed on the profile's device model (``edgelab.emulation.device_model``). The
straggler sweep (qiao/C10) slows one device by s: for synchronous training
post hoc and exactly (``edgelab.emulation.timeline.compose`` with that device's compute
times s; the weights do not depend on it); for asynchronous training the
update order does, so the schedule is simulated again
(``edgelab.emulation.async_schedule.run_schedule``) for throughput and staleness. The slowed
asynchronous runs are not trained again: their accuracy is not known.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster, device_names, scheduler_workers
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.data import Dataset, load_dataset
from edgelab.data import partition as shard_indices
from edgelab.emulation import async_schedule, timeline, training_clock
from edgelab.emulation.device_model import FIT_CELLS, DeviceModel, for_profile, has_model
from edgelab.emulation.profiles import DeviceProfile, get_profile
from edgelab.emulation.timeline import Topology
from edgelab.models.graph import LayerCost, layer_costs
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.papers.qiao.pipeline_training import FOUR_BLOCKS, four_blocks
from edgelab.pipeline.partition import Partition, partition
from edgelab.pipeline.training import train_pipelined
from edgelab.training.data_parallel import TrainConfig, check, train

EXPERIMENT = "qiao_parallelism"
# 2: a device builds its optimizer without tracing Keras' own train step, which it never runs (less
#    memory held, less warm-up CPU), and its many-batch loop is traced once for every shape: an
#    epoch-long round 0 no longer holds a retrace in its measured CPU time (edgelab.runtime.plugin).
MEASUREMENT_REVISION = 2
STRATEGIES = ("ps_sync", "ps_async")
DATA_MODEL = "mlp"  # LeNet-MLP: fig3-1's network on every device

#: qiao/C28's model too big for one device: hidden layers of ``width`` units (see ``wide_mlp``).
WIDE_MLP = "wide_mlp"

FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "devices": [1, 2, 4, 8],
    "sample_limit": None,
    "test_limit": None,
    "pipeline_steps": 5,
    "slowdowns": [1, 2, 4, 8],
    "repeats": 3,
}


@dataclass(frozen=True)
class ParallelismParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    stages: tuple[int, ...] = (2, 3, 4)  # fig3-2's K; the single worker (K = 1) always runs beside
    pipeline_batch: int = 32  # images per mini-batch, one batch in flight
    pipeline_steps: int = 2  # mini-batches per model-parallel run; the first is a warm-up
    devices: tuple[int, ...] = (1, 2, 4)  # fig3-1's N
    strategies: tuple[str, ...] = STRATEGIES
    slowdowns: tuple[float, ...] = (1.0, 2.0, 4.0)  # the straggler's compute times s
    batch_size: int = 64  # per device and step, data parallel
    sample_limit: int | None = 1024  # MNIST training images shared out (None: all)
    test_limit: int | None = 500
    device_profile: str = "pi3b"
    learning_rate: float = 0.05
    repeats: int = 1
    oversized_width: int = 4096  # qiao/C28: units of each hidden layer of the model too big for one device
    oversized_depth: int = 5  # its hidden layers (0: no such run)
    oversized_stages: int = 4  # the split it trains in
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name, values, most in (("stages", self.stages, 8), ("devices", self.devices, 16)):
            if not values or not all(checks.is_integer(n) and 1 <= n <= most for n in values):
                raise ConfigError(name, values, f"a list of integers from 1 to {most}")
        checks.choices("strategies", self.strategies, STRATEGIES)
        if not self.slowdowns:
            raise ConfigError("slowdowns", self.slowdowns, "a list of numbers >= 1 (1: no straggler)")
        for s in self.slowdowns:
            checks.number("slowdowns", s, at_least=1)  # 1: no straggler
        for name, least in (("pipeline_batch", 1), ("pipeline_steps", 2), ("batch_size", 1), ("repeats", 1),
                            ("oversized_width", 1), ("oversized_depth", 0)):  # fmt: skip
            checks.integer(name, getattr(self, name), at_least=least)
        if not has_model(get_profile(self.device_profile).name):
            raise ConfigError(
                "device_profile",
                self.device_profile,
                f"a profile with a device model: {', '.join(FIT_CELLS)}, or a board measured by `edgelab calibrate`",
            )
        checks.number("learning_rate", self.learning_rate, above=0, below=10)
        if self.oversized_depth:  # at most one stage per dense layer
            checks.integer(
                "oversized_stages", self.oversized_stages, at_least=2, at_most=min(8, self.oversized_depth + 1)
            )


@dataclass(frozen=True)
class ModelRun:
    """fig3-2: the network in ``n_stages`` consecutive stages, one batch in flight."""

    n_stages: int
    repeat: int = 0


@dataclass(frozen=True)
class OversizedRun:
    """qiao/C28: the model too big for one device, on one worker (``n_stages`` 1) or split, one mini-batch."""

    n_stages: int
    repeat: int = 0


@dataclass(frozen=True)
class DataRun:
    """fig3-1: LeNet-MLP on ``devices`` shards under ``strategy``."""

    strategy: str
    devices: int
    repeat: int = 0


@dataclass
class Plan(harness.Plan):
    """Validated work: the images, the cuts, the device and its model, every run."""

    params: ParallelismParams
    profile: DeviceProfile
    runs: list[ModelRun | OversizedRun | DataRun]
    dataset: Dataset
    cuts: dict[int, Partition]
    device_model: DeviceModel = field(repr=False)
    oversized_cuts: dict[int, Partition] = field(default_factory=dict)  # the wide MLP's, single worker (1) included
    oversized_costs: list[LayerCost] = field(default_factory=list, repr=False)  # the wide MLP's layers

    def describe(self) -> str:
        """The runs and the images."""
        return f"{len(self.runs)} runs; images: {self.dataset.name} ({self.dataset.source})"

    @property
    def stage_counts(self) -> list[int]:
        """K of every model-parallel run, the single worker first."""
        return sorted(self.cuts)

    def config(self, run: DataRun) -> TrainConfig:
        """The training configuration of a data-parallel run."""
        p = self.params
        return TrainConfig(
            model=DATA_MODEL,
            n_devices=run.devices,
            batch_size=p.batch_size,
            strategy=run.strategy,
            learning_rate=p.learning_rate,
            seed=p.seed,
        )

    def oversized_model(self) -> Any:
        """The wide MLP of qiao/C28's second test, with this plan's seed."""
        p = self.params
        return wide_mlp(p.oversized_width, p.oversized_depth, seed=p.seed)

    def run_params(self, run: ModelRun | OversizedRun | DataRun) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        p, d = self.params, self.dataset
        common = {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "repeat": run.repeat,
            "dataset": {"name": d.name, "source": d.source, "n_train": d.n_train, "n_test": d.n_test},
            "device_profile": self.profile.name,
            "cluster": p.scheduler_address or "emulated",
        }
        if isinstance(run, DataRun):
            return {**common, "kind": "data", "train": self.config(run).to_dict()}
        if isinstance(run, OversizedRun):
            return {
                **common,
                "kind": "oversized",
                "model": f"{WIDE_MLP}:{p.oversized_width}x{p.oversized_depth}",
                "stages": [list(s.layers) for s in self.oversized_cuts[run.n_stages].stages],
                "batch_size": p.pipeline_batch,
                "steps": 1,
                "learning_rate": p.learning_rate,
                "seed": p.seed,
            }
        return {
            **common,
            "kind": "model",
            "model": FOUR_BLOCKS,
            "stages": [list(s.layers) for s in self.cuts[run.n_stages].stages],
            "batch_size": p.pipeline_batch,
            "steps": p.pipeline_steps,
            "learning_rate": p.learning_rate,
            "seed": p.seed,
        }

    def devices_needed(self, runs: list[ModelRun | OversizedRun | DataRun]) -> int:
        """One device per stage or per shard, whichever is more."""
        return max(r.devices if isinstance(r, DataRun) else r.n_stages for r in runs)

    def execute(
        self, cluster: DeviceCluster, run: ModelRun | OversizedRun | DataRun, context: dict[str, Any]
    ) -> Outcome:
        """Train one run: the split network, the model too big for one device, or the shards."""
        if isinstance(run, ModelRun):
            return self._model_parallel(cluster, run, context)
        if isinstance(run, OversizedRun):
            return self._oversized(cluster, run, context)
        result = train(cluster, self.dataset, self.config(run), device_model=self.device_model, log=lambda _: None)
        summary = {
            "cluster": context["cluster"],
            "calibration": context["calibration"],
            "dataset": self.dataset.provenance(),
            "weights_sha256": result.weights_sha256,
        }
        tables = {"records": result.records, "evaluations": result.evaluations, "shards": result.shards}
        return summary, tables

    def _model_parallel(self, cluster: DeviceCluster, run: ModelRun, context: dict[str, Any]) -> Outcome:
        trained, summary = self._train_split(
            cluster, partial(four_blocks, seed=self.params.seed), self.cuts[run.n_stages], self.params.pipeline_steps,
            context,
        )  # fmt: skip
        return summary, {"records": trained.records, "losses": trained.losses}

    def _oversized(self, cluster: DeviceCluster, run: OversizedRun, context: dict[str, Any]) -> Outcome:
        trained, summary = self._train_split(cluster, self.oversized_model, self.oversized_cuts[run.n_stages], 1,
                                             context)  # fmt: skip
        weights = trained.full_weights()
        summary["weights_sha256"] = weights_digest(weights)
        return summary, {"records": trained.records, "losses": trained.losses, "weights": weight_sample(weights)}

    def _train_split(
        self, cluster: DeviceCluster, model: Any, cut: Partition, steps: int, context: dict[str, Any]
    ) -> tuple[Any, dict[str, Any]]:
        """``steps`` MNIST batches through ``model`` cut as ``cut``, one in flight; each worker's peak RSS rise."""
        p = self.params
        n = p.pipeline_batch * steps
        x = (self.dataset.x_train[:n].astype(np.float32) / 255.0).reshape(n, 28, 28, 1)
        y = self.dataset.y_train[:n].astype(np.int64)
        devices = cluster.devices[: len(cut.stages)]
        cluster.client.run(_start_peak_window, workers=_addresses(cluster, devices))
        trained = train_pipelined(
            cluster,
            model,
            x,
            y,
            cuts=[s.layers[-1] for s in cut.stages[:-1]],
            batch_size=p.pipeline_batch,
            micro_batches=1,
            steps=steps,
            schedule="gpipe",
            learning_rate=p.learning_rate,
            log=lambda _: None,
        )
        rises = cluster.client.run(_peak_rise, workers=_addresses(cluster, devices))
        summary = {
            "calibration": context["calibration"],
            "cluster": context["cluster"],
            "dataset": self.dataset.provenance(),
            "devices": trained.devices,
            "stage_weight_bytes": {k: int(sum(w.nbytes for w in ws)) for k, ws in trained.weights.items()},
            "rss_rise_bytes": {d["device"]: d["rise"] for d in rises.values()},
            "host_wall_s": trained.wall_s,
        }
        return trained, summary


#: Every this-many-th value of each trained tensor is kept, to compare runs whose digests differ.
SAMPLE_STRIDE = 9973


def weights_digest(weights: list[np.ndarray]) -> str:
    """sha256 over every tensor's float32 bytes, in order."""
    digest = hashlib.sha256()
    for w in weights:
        digest.update(np.ascontiguousarray(w, np.float32).tobytes())
    return digest.hexdigest()


def weight_sample(weights: list[np.ndarray]) -> pd.DataFrame:
    """Every ``SAMPLE_STRIDE``-th value of each tensor (and its first): (tensor, position, value)."""
    frames = []
    for i, w in enumerate(weights):
        flat = np.ravel(w)
        positions = np.arange(0, flat.size, SAMPLE_STRIDE)
        frames.append(pd.DataFrame({"tensor": i, "position": positions, "value": flat[positions].astype(np.float64)}))
    return pd.concat(frames, ignore_index=True)


def wide_mlp(width: int, depth: int, *, seed: int = 0) -> Any:
    """MNIST's 784 inputs, ``depth`` ReLU layers of ``width`` units, a softmax over 10: big by its weights alone.

    At 4096 x 5 it has 70.4 M weights (282 MB as float32), more than a
    Raspberry Pi 3B's training budget holds once its gradients and the
    framework's working copies join them. Initial weights depend on ``seed``.
    """
    import keras

    from edgelab.common.seeding import seeded

    with seeded(seed):
        x = inputs = keras.Input((28, 28, 1), name="image")
        x = keras.layers.Flatten(name="flatten")(x)
        for i in range(depth):
            x = keras.layers.Dense(width, activation="relu", name=f"dense_{i + 1}")(x)
        outputs = keras.layers.Dense(10, activation="softmax", name="classifier")(x)
        return keras.Model(inputs, outputs, name=f"{WIDE_MLP}_{width}x{depth}")


def _addresses(cluster: DeviceCluster, devices: list[str]) -> list[str]:
    """The workers' addresses of ``devices`` (a device's worker is named after it)."""
    return [address for address, w in scheduler_workers(cluster.client).items() if w.get("name") in devices]


def _start_peak_window(dask_worker: Any = None) -> None:
    """On a worker: start a new peak-RSS window and note the RSS it starts from."""
    from edgelab.common import process_memory

    process_memory.reset_peak()
    _WINDOW["start"] = process_memory.rss_bytes()


def _peak_rise(dask_worker: Any = None) -> dict[str, Any]:
    """On a worker: its peak RSS since ``_start_peak_window`` above the RSS it started from (bytes)."""
    from edgelab.common import process_memory

    peak = process_memory.peak_bytes()
    name = dask_worker.name if dask_worker is not None else ""
    return {"device": name, "rise": None if peak is None else int(peak - _WINDOW.get("start", peak))}


_WINDOW: dict[str, int] = {}  # per worker process: the RSS its peak window started from


def prepare(**kwargs: Any) -> Plan:
    """Load MNIST, cut the network for every K and check every run, before any cluster work."""
    params = harness.parse_params(ParallelismParams, kwargs, sequences=("stages", "devices", "strategies", "slowdowns"))
    profile = get_profile(params.device_profile)
    dataset = load_dataset(
        "mnist", data_dir=params.data_dir, sample_limit=params.sample_limit, test_limit=params.test_limit,
        seed=params.seed,
    )  # fmt: skip
    if dataset.n_train < params.pipeline_batch * params.pipeline_steps:
        raise ConfigError(
            "pipeline_steps", params.pipeline_steps, f"at most {dataset.n_train // params.pipeline_batch} batches"
        )
    model = four_blocks(seed=params.seed)
    cuts = {k: partition(model, k) for k in sorted({1, *params.stages})}
    runs: list[ModelRun | OversizedRun | DataRun] = [ModelRun(k, r) for r in range(params.repeats) for k in cuts]
    oversized: dict[int, Partition] = {}
    wide_costs: list[LayerCost] = []
    if params.oversized_depth:
        wide = wide_mlp(params.oversized_width, params.oversized_depth, seed=params.seed)
        oversized = {k: partition(wide, k) for k in (params.oversized_stages, 1)}
        wide_costs = layer_costs(wide)
        del wide
        runs += [OversizedRun(k) for k in oversized]  # the split first: see the module's docstring
    runs += [DataRun(s, n, r) for r in range(params.repeats) for s in params.strategies for n in sorted(params.devices)]
    plan = Plan(params, profile, runs, dataset, cuts, for_profile(profile.name), oversized, wide_costs)
    for item in runs:
        if isinstance(item, DataRun):
            check(plan.config(item), n_train=dataset.n_train, profile=profile)
    return plan


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = ParallelismParams

pending = harness.pending
run = harness.run


# --------------------------------------------------------- model parallel ----


def layer_map(plan: Plan) -> pd.DataFrame:
    """Per K and stage: its device, layers, parameters and bytes, and the working set it holds at its peak.

    The working set is what a stage holds during its backward with one batch
    in flight (GPipe's re-materialization): its weights and their gradients
    (plain SGD keeps no slots), the kept input, and every layer's output of the
    recomputed forward. Counted from the real split, not read from RSS.
    """
    costs = layer_costs(four_blocks(seed=plan.params.seed))
    batch = plan.params.pipeline_batch
    rows = []
    for k, cut in plan.cuts.items():
        names = device_names(plan.profile, k)  # the emulated devices, in the order the stages are placed
        for s, stage in enumerate(cut.stages):
            outputs = sum(c.output_bytes for c in costs[stage.first : stage.last + 1])
            kept = cut.stages[s - 1].output_bytes if s else 0  # the first stage's input is its Input layer's output
            rows.append(
                {
                    "K": k,
                    "stage": s + 1,
                    "device": names[s],
                    "layers": ", ".join(stage.layers),
                    "parameters": stage.params,
                    "weight_bytes": 4 * stage.params,
                    "output_bytes_per_image": stage.output_bytes,
                    "output_bytes_per_batch": batch * stage.output_bytes,
                    "working_set_bytes": 2 * 4 * stage.params + batch * (kept + outputs),
                }
            )
    return pd.DataFrame(rows)


def model_timelines(plan: Plan, stored: list[StoredRun]) -> dict[ModelRun, pd.DataFrame]:
    """Every model-parallel run's passes on the device's clock."""
    link = training_clock.LinkModel(plan.profile.link_bytes_per_s, plan.profile.latency_s)
    out = {}
    for key, result in harness.by_run(plan, stored).items():
        if isinstance(key, ModelRun):
            factor = float(result.summary["calibration"]["speed_factor"])
            out[key] = training_clock.compose(result.tables["records"], speed_factor=factor, link=link)
    return out


def max_concurrency(passes: pd.DataFrame) -> int:
    """The most passes running at the same instant (an end at t frees its device before a start at t)."""
    events = sorted([(float(t), 1) for t in passes["start"]] + [(float(t), -1) for t in passes["end"]])
    running = most = 0
    for _, change in sorted(events, key=lambda e: (e[0], e[1])):
        running += change
        most = max(most, running)
    return most


def model_summary(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """Per K (after the warm-up batch): concurrency, utilisation beside 1/K, time, bytes between stages, memory."""
    working = layer_map(plan).groupby("K")["working_set_bytes"].max()
    results = harness.by_run(plan, stored)
    rows = []
    for key, clock in model_timelines(plan, stored).items():
        k = key.n_stages
        after = clock[clock["step"] >= 1]
        passes = after[after["kind"] != "update"]
        shares, spans = [], []
        for _, step in after.groupby("step"):
            span = float(step["end"].max() - step["start"].min())
            work = step[step["kind"] != "update"]
            shares.append(float((work["end"] - work["start"]).sum()) / (k * span))
            spans.append(span)
        forward = passes[(passes["kind"] == "forward") & (passes["stage_index"] < k - 1)]
        backward = passes[passes["kind"].isin(["backward", "forward+backward"]) & (passes["stage_index"] > 0)]
        steps = after["step"].nunique()
        rises = [v for v in results[key].summary["rss_rise_bytes"].values() if v is not None]
        rows.append(
            {
                "K": k,
                "repeat": key.repeat,
                "max_concurrency": max_concurrency(passes),
                "max_concurrency_with_updates": max_concurrency(after),
                "utilisation": float(np.mean(shares)),
                "one_over_K": 1 / k,
                "s_per_batch": float(np.mean(spans)),
                "activation_bytes_per_batch": int(forward["bytes_out"].sum()) // steps,
                "gradient_bytes_per_batch": int(backward["bytes_out"].sum()) // steps,
                "peak_working_set_bytes": int(working[k]),
                "working_set_vs_single": float(working[k] / working[1]),
                "rss_rise_max_bytes": max(rises) if rises else float("nan"),
            }
        )
    return pd.DataFrame(rows).sort_values(["K", "repeat"]).reset_index(drop=True)


def oversized_summary(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """qiao/C28's second test: per run and worker, what it held (counted and measured) against the device's budget.

    ``rss_rise_bytes`` is the worker's peak resident memory during the run
    above its resident memory when the run began; ``counted_bytes`` the
    stage's weights and gradients and, for the batch, its kept input and
    every layer's output (as ``layer_map`` counts). ``same_weights``: the
    trained weights' digest equals the single worker's; ``max_abs_diff`` is
    over the kept sample of values (``weight_sample``).
    """
    costs = plan.oversized_costs
    budget = plan.profile.training_budget_mb * 2**20
    results = {k: v for k, v in harness.by_run(plan, stored).items() if isinstance(k, OversizedRun)}
    single = next((v for k, v in results.items() if k.n_stages == 1), None)
    rows = []
    for key, result in sorted(results.items(), key=lambda kv: kv[0].n_stages):
        cut = plan.oversized_cuts[key.n_stages]
        same = diff = None
        if single is not None:
            same = result.summary["weights_sha256"] == single.summary["weights_sha256"]
            mine, theirs = result.tables["weights"], single.tables["weights"]
            diff = float(np.max(np.abs(mine["value"].to_numpy() - theirs["value"].to_numpy())))
        rises = result.summary["rss_rise_bytes"]
        for s, (stage, device) in enumerate(zip(cut.stages, result.summary["devices"], strict=True)):
            kept = cut.stages[s - 1].output_bytes if s else 0
            outputs = sum(c.output_bytes for c in costs[stage.first : stage.last + 1])
            rise = rises.get(device)
            rows.append(
                {
                    "K": key.n_stages,
                    "stage": s + 1,
                    "device": device,
                    "layers": ", ".join(stage.layers),
                    "parameters": stage.params,
                    "counted_bytes": 2 * 4 * stage.params + plan.params.pipeline_batch * (kept + outputs),
                    "rss_rise_bytes": rise,
                    "budget_bytes": budget,
                    "fits": None if rise is None else bool(rise <= budget),
                    "same_weights": same,
                    "max_abs_diff": diff,
                }
            )
    return pd.DataFrame(rows)


# ---------------------------------------------------------- data parallel ----


def data_runs(plan: Plan, stored: list[StoredRun]) -> dict[DataRun, StoredRun]:
    """The stored data-parallel runs of ``plan``, keyed by run."""
    return {k: v for k, v in harness.by_run(plan, stored).items() if isinstance(k, DataRun)}


def _sync_rounds(plan: Plan, records: pd.DataFrame, slow: int | None = None, s: float = 1.0) -> pd.DataFrame:
    """A synchronous run's rounds on the device model's clock, device index ``slow`` computing ``s`` times longer."""
    compute = plan.device_model.records_compute_s(records, DATA_MODEL)
    if slow is not None:
        compute = np.where(records["device_index"].to_numpy() == slow, compute * s, compute)
    return timeline.compose(records, plan.profile, compute_s=compute, topology=Topology())


def _async_schedule(
    plan: Plan, records: pd.DataFrame, slow: int | None = None, s: float = 1.0, cycles: int = 1
) -> pd.DataFrame:
    """An asynchronous run's schedule played again on the clock, one device slowed.

    ``edgelab.emulation.async_schedule.run_schedule``, as ``edgelab.training.data_parallel`` called it
    for the run, on the steps each device took. With ``cycles`` > 1 every
    device goes through its shard that many times. Adds each update's
    ``samples``.
    """
    per_device = records.sort_values(["device_index", "epoch", "first_step"]).groupby("device_index")["samples"]
    n = int(records["device_index"].max()) + 1
    samples = [list(per_device.get_group(i)) * cycles for i in range(n)]
    played = async_schedule.run_schedule(
        DATA_MODEL,
        samples,
        device_model=plan.device_model,
        profile=plan.profile,
        topology=Topology(),
        slowdown={} if slow is None else {slow: s},
    )
    return played.assign(samples=[samples[i][k] for i, k in zip(played["device_index"], played["step"], strict=True)])


def _busy_rate(plan: Plan, records: pd.DataFrame, slow: int, s: float, horizon: float) -> pd.DataFrame:
    """The updates an asynchronous server applies by ``horizon`` when no device runs out of data (shards cycled)."""
    cycles = 2
    while True:
        played = _async_schedule(plan, records, slow=slow, s=s, cycles=cycles)
        if played.groupby("device_index")["t_applied"].max().min() > horizon:
            return played[played["t_applied"] <= horizon]
        cycles *= 2


def data_summary(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """Per strategy and N: time per epoch (device clock), samples/s, accuracy after the epoch, staleness."""
    rows = []
    for key, result in data_runs(plan, stored).items():
        records = result.tables["records"]
        if key.strategy == "ps_sync":
            epoch_s = float(_sync_rounds(plan, records)["elapsed_s"].iloc[-1])
        else:
            epoch_s = float(records["t_applied_s"].max())
        samples = int(records["samples"].sum())
        rows.append(
            {
                "strategy": key.strategy,
                "N": key.devices,
                "repeat": key.repeat,
                "epoch_s": epoch_s,
                "samples": samples,
                "samples_per_s": samples / epoch_s,
                "updates": len(records) if key.strategy == "ps_async" else int(records["round"].nunique()),
                "accuracy": float(result.tables["evaluations"]["accuracy"].iloc[-1]),
                "staleness_mean": float(records["staleness"].mean()),
                "staleness_max": int(records["staleness"].max()),
            }
        )
    return pd.DataFrame(rows).sort_values(["strategy", "N", "repeat"]).reset_index(drop=True)


def shards(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """Per N and device: the rows it was sent (the run's own record) and their labels.

    The labels are those of the indices ``edgelab.training.data_parallel`` sent, drawn again by
    the same call (``edgelab.data.partition``, same seed); the row counts are
    checked against what each device reported it loaded.
    """
    rows = []
    seen = set()
    for key, result in data_runs(plan, stored).items():
        if key.devices in seen or key.repeat:
            continue
        seen.add(key.devices)
        cfg = plan.config(key)
        indices = shard_indices(plan.dataset.y_train, cfg.n_devices, scheme=cfg.partition, seed=cfg.seed)
        loaded = result.tables["shards"]
        for i, (device, samples, sent) in enumerate(loaded[["device", "samples", "bytes"]].itertuples(index=False)):
            if len(indices[i]) != int(samples):
                raise RuntimeError(f"{device} loaded {samples} rows, the partition gives it {len(indices[i])}")
            counts = np.bincount(plan.dataset.y_train[indices[i]].astype(int), minlength=10)
            rows.append(
                {"N": key.devices, "device": device, "rows": int(samples), "bytes": int(sent),
                 **{f"label_{c}": int(v) for c, v in enumerate(counts)}}
            )  # fmt: skip
    return pd.DataFrame(rows)


def staleness(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """Asynchronous runs: how many updates of each staleness the server applied, per N (repeat 0)."""
    rows = []
    for key, result in data_runs(plan, stored).items():
        if key.strategy == "ps_async" and not key.repeat:
            for value, count in result.tables["records"]["staleness"].value_counts().sort_index().items():
                rows.append({"N": key.devices, "staleness": int(value), "updates": int(count)})
    return pd.DataFrame(rows, columns=["N", "staleness", "updates"])


def stragglers(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """The largest N's runs with its last device s times slower: epoch times, throughputs, staleness.

    Sync: the run's own rounds composed again (exact: the weights do not
    depend on the clock); throughput is the epoch's samples over its time.
    Async: the schedule simulated again. ``async_epoch_s`` is the epoch as run,
    each device through its own shard once, so it ends with the straggler's
    last step; ``async_samples_per_s`` is the rate at which the server applies
    samples when the devices keep training (shards cycled) over the unslowed
    epoch's time, the throughput the survey's claim is about. ``replayed_s``
    (s = 1) is the largest gap between the replay and the schedule the run
    really trained in: the replay is the run's own.
    """
    runs = data_runs(plan, stored)
    n = max(k.devices for k in runs)
    by = {k.strategy: v.tables["records"] for k, v in runs.items() if k.devices == n and not k.repeat}
    rows = []
    for s in sorted({1.0, *map(float, plan.params.slowdowns)}):
        row: dict[str, Any] = {"N": n, "s": s}
        if "ps_sync" in by:
            rounds = _sync_rounds(plan, by["ps_sync"], slow=n - 1, s=s)
            row["sync_epoch_s"] = float(rounds["elapsed_s"].iloc[-1])
            row["sync_round_s"] = float(rounds["round_s"].mean())
            row["sync_samples_per_s"] = float(by["ps_sync"]["samples"].sum()) / row["sync_epoch_s"]
        if "ps_async" in by:
            records = by["ps_async"]
            horizon = float(records["t_applied_s"].max())
            played = _async_schedule(plan, records, slow=n - 1, s=s)
            busy = _busy_rate(plan, records, n - 1, s, horizon)
            row["async_epoch_s"] = float(played["t_applied"].max())
            row["async_samples_per_s"] = float(busy["samples"].sum()) / horizon
            row["async_staleness_mean"] = float(busy["staleness"].mean())
            row["async_staleness_max"] = int(busy["staleness"].max())
            if s == 1.0:
                applied = records.sort_values("update")["t_applied_s"].to_numpy()
                row["replayed_s"] = float(np.max(np.abs(played["t_applied"].to_numpy() - applied)))
        rows.append(row)
    out = pd.DataFrame(rows)
    for column in ("sync_samples_per_s", "async_samples_per_s"):
        if column in out:
            out[column.replace("samples_per_s", "relative")] = out[column] / float(out[column].iloc[0])
    return out


# ------------------------------------------------------------ notebook ----


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: ``layer_map``, counted from the splits."""
    return layer_map(plan).to_string(index=False)


def run_facts(plan: Plan, stored: list[StoredRun]) -> str:
    """What nbval checks of the runs: what does not depend on this host's speed.

    At most one stage computing at any instant and the bytes between stages; the shards as assigned; the seeded
    accuracies, update counts and staleness (the asynchronous order comes from the device model's clock); the
    straggler sweep on the device model's clock.
    """
    model = model_summary(plan, stored)[
        ["K", "max_concurrency", "activation_bytes_per_batch", "gradient_bytes_per_batch", "peak_working_set_bytes"]
    ]
    data = data_summary(plan, stored)[
        ["strategy", "N", "samples", "updates", "accuracy", "staleness_mean", "staleness_max"]
    ]
    return "\n".join(
        [
            model.to_string(index=False),
            shards(plan, stored).to_string(index=False),
            data.round(4).to_string(index=False),
            stragglers(plan, stored).round(4).to_string(index=False),
        ]
    )


def measurements(plan: Plan, stored: list[StoredRun]) -> list[Any]:
    """What the notebook shows of the runs: the model-parallel and the data-parallel summaries, times included."""
    return [model_summary(plan, stored).round(4), data_summary(plan, stored).round(4)]

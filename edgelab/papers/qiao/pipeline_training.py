"""The survey's pipeline parallelism (qiao/fig3-3, fig3-3a, fig3-3b, eq-gpipe-bubble): GPipe and 1F1B, really run.

A network cut into K stages (four equal convolution blocks by default, so
the stages balance as GPipe's bubble formula assumes; any functional Keras
model or builder instead) trains on K emulated Pi-class devices with
``edgelab.pipeline.training``: GPipe's fill-drain schedule for each number
of micro-batches M per mini-batch (the mini-batch fixed), and PipeDream's
one-forward-one-backward schedule with weight stashing at one M. Every pass
records its CPU time and bytes; ``edgelab.emulation.training_clock`` puts them
on the device's clock, where the bubble (idle share) is measured and set
beside ``(K - 1) / (M + K - 1)``. Each run also trains the unsplit model with
plain SGD on the same mini-batches in the client, the reference of GPipe's
"same parameters" claim (qiao/C8) and of both loss curves.

The first mini-batch of every run is a warm-up (TensorFlow's first calls on
a shape), kept out of the bubble and the throughput.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.common.seeding import seeded
from edgelab.data import Dataset, load_dataset
from edgelab.emulation import training_clock
from edgelab.emulation.profiles import PROFILES, DeviceProfile, get_profile
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.pipeline.partition import Partition, partition
from edgelab.pipeline.training import SCHEDULES, gpipe_bubble, train_pipelined
from edgelab.pipeline.user_network import network_identity, rebuilder

EXPERIMENT = "qiao_pipeline_training"
MEASUREMENT_REVISION = 1
#: The built-in network: a stem and four equal 3x3 convolution blocks at 28x28, then a linear classifier.
FOUR_BLOCKS = "four_blocks"

FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "micro_batches": [1, 2, 4, 8, 16],
    "steps": 5,
    "repeats": 3,
}


def four_blocks(*, seed: int = 0) -> Any:
    """Four equal blocks (32 channels of 3x3 at 28x28, ~7.2 M multiply-adds per image each): stages that balance.

    Its initial weights depend on ``seed`` alone (``edgelab.common.seeding.seeded``).
    """
    import keras

    with seeded(seed):
        inputs = keras.Input((28, 28, 1), name="pixels")
        x = keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="stem")(inputs)
        for i in range(1, 5):
            x = keras.layers.Conv2D(32, 3, padding="same", activation="relu", name=f"block{i}")(x)
        x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
        outputs = keras.layers.Dense(10, activation="softmax", name="classes")(x)
        return keras.Model(inputs, outputs, name=FOUR_BLOCKS)


@dataclass(frozen=True)
class PipelineTrainingParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    model: Any = FOUR_BLOCKS  # "four_blocks", or a functional Keras model, or a function that builds one
    n_stages: int = 4
    batch_size: int = 32
    micro_batches: tuple[int, ...] = (1, 2, 4, 8)  # GPipe's sweep
    stream_micro_batches: int = 4  # 1F1B's micro-batches per mini-batch
    steps: int = 3  # mini-batches per run; the first is a warm-up
    device: str = "pi4b"
    learning_rate: float = 0.05
    repeats: int = 1
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.model, str) and self.model != FOUR_BLOCKS:
            raise ConfigError(
                "model", self.model, f"{FOUR_BLOCKS!r}, a functional Keras model or a function that builds one"
            )
        for name, least, most in (("n_stages", 2, 8), ("batch_size", 1, 4096), ("steps", 2, 1000), ("repeats", 1, 100)):
            checks.integer(name, getattr(self, name), at_least=least, at_most=most)
        for name, values in (
            ("micro_batches", self.micro_batches),
            ("stream_micro_batches", (self.stream_micro_batches,)),
        ):
            bad = [m for m in values if not checks.is_integer(m) or m < 1 or self.batch_size % m]
            if not values or bad:
                raise ConfigError(name, values, f"integers >= 1 dividing batch_size ({self.batch_size})")
        if self.device not in PROFILES or self.device == "native":
            allowed = ", ".join(p for p in PROFILES if p != "native")
            raise ConfigError("device", self.device, f"a device profile: {allowed}")
        checks.integer("seed", self.seed, at_least=0)
        checks.number("learning_rate", self.learning_rate, above=0, below=10)


@dataclass(frozen=True)
class PipelineRunKey:
    """One real run: a schedule at M micro-batches per mini-batch."""

    schedule: str
    micro_batches: int
    repeat: int


@dataclass
class Plan(harness.Plan):
    """Validated work: the network and its cut, the training images, every run."""

    params: PipelineTrainingParams
    profile: DeviceProfile
    runs: list[PipelineRunKey]
    dataset: Dataset
    x: np.ndarray
    y: np.ndarray
    cut: Partition
    model_identity: dict[str, Any]
    build: Callable[[], Any] = field(repr=False)

    def describe(self) -> str:
        """The runs and the images."""
        return f"{len(self.runs)} runs; images: {self.dataset.name} ({self.dataset.source})"

    def report_parameters(self) -> dict[str, Any]:
        """The parameters every item records, the model by its identity (a Keras model is no JSON)."""
        return {**{k: v for k, v in vars(self.params).items() if k != "model"}, "model": self.model_identity}

    def run_params(self, run: PipelineRunKey) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        p = self.params
        return {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "schedule": run.schedule,
            "micro_batches": run.micro_batches,
            "repeat": run.repeat,
            "model": self.model_identity,
            "stages": [list(s.layers) for s in self.cut.stages],
            "batch_size": p.batch_size,
            "steps": p.steps,
            "device": p.device,
            "learning_rate": p.learning_rate,
            "dataset": {"name": self.dataset.name, "source": self.dataset.source},
            "seed": p.seed,
            "cluster": p.scheduler_address or "emulated",
        }

    def devices_needed(self, runs: list[PipelineRunKey]) -> int:
        """One device per stage."""
        return len(self.cut.stages)

    def execute(self, cluster: DeviceCluster, run: PipelineRunKey, context: dict[str, Any]) -> Outcome:
        """Train the pipeline, and the unsplit model with plain SGD on the same mini-batches beside it."""
        p = self.params
        trained = train_pipelined(
            cluster,
            self.build(),
            self.x,
            self.y,
            cuts=[s.layers[-1] for s in self.cut.stages[:-1]],
            batch_size=p.batch_size,
            micro_batches=run.micro_batches,
            steps=p.steps,
            schedule=run.schedule,
            learning_rate=p.learning_rate,
            log=lambda line: print(f"  {line}", flush=True),
        )
        reference_weights, reference = plain_sgd(self.build(), self.x, self.y, p, run)
        difference = max(
            float(np.max(np.abs(a - b))) for a, b in zip(trained.full_weights(), reference_weights, strict=True)
        )
        scale = max(float(np.max(np.abs(w))) for w in reference_weights)
        stage_bytes = {name: int(sum(w.nbytes for w in ws)) for name, ws in trained.weights.items()}
        summary = {
            "calibration": context["calibration"],
            "cluster": context["cluster"],
            "dataset": self.dataset.provenance(),
            "devices": trained.devices,
            "stage_weight_bytes": stage_bytes,
            "host_wall_s": trained.wall_s,
            "max_weight_difference": difference,
            "largest_weight": scale,
        }
        return summary, {"records": trained.records, "losses": trained.losses, "reference": reference}


def plain_sgd(model: Any, x: np.ndarray, y: np.ndarray, p: PipelineTrainingParams, run: PipelineRunKey) -> Any:
    """The unsplit model trained in this process on the run's SGD steps: its weights and its losses per step.

    GPipe's steps are the mini-batches; 1F1B makes a step of every micro-batch.
    """
    import keras
    import tensorflow as tf

    loss_fn = keras.losses.get("sparse_categorical_crossentropy")
    optimizer = keras.optimizers.SGD(learning_rate=p.learning_rate)
    size = p.batch_size if run.schedule == "gpipe" else p.batch_size // run.micro_batches
    rows = []
    for k in range(p.steps * p.batch_size // size):
        xb, yb = x[k * size : (k + 1) * size], y[k * size : (k + 1) * size]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(yb, model(xb, training=True)))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        rows.append({"step": k * size // p.batch_size, "update": k, "images": len(xb), "loss": float(loss)})
    return [np.asarray(w) for w in model.get_weights()], pd.DataFrame(rows)


def _builder(model: Any, seed: int) -> Callable[[], Any]:
    """A function that builds the run's network afresh, with the same initial weights every time."""
    return partial(four_blocks, seed=seed) if isinstance(model, str) else rebuilder(model, seed)


def prepare(**kwargs: Any) -> Plan:
    """Build the network, cut it, load the images and check every run, before any cluster work."""
    params = harness.parse_params(PipelineTrainingParams, kwargs, sequences=("micro_batches",))
    build = _builder(params.model, params.seed)
    model = build()
    cut = partition(model, params.n_stages)
    images = params.steps * params.batch_size
    dataset = load_dataset("mnist", data_dir=params.data_dir, sample_limit=images, seed=params.seed)
    shape = tuple(model.input_shape[1:])
    x = dataset.x_train.astype(np.float32) / 255.0
    if int(np.prod(shape)) != int(np.prod(x.shape[1:])):
        raise ConfigError("model", model.name, f"a network taking MNIST's 28x28 images (its input is {shape})")
    x = x.reshape(len(x), *shape)
    runs = [
        PipelineRunKey(schedule, m, r)
        for r in range(params.repeats)
        for schedule, ms in (("gpipe", sorted(set(params.micro_batches))), ("1f1b", [params.stream_micro_batches]))
        for m in ms
    ]
    assert {r.schedule for r in runs} <= set(SCHEDULES)
    y = dataset.y_train.astype(np.int64)
    return Plan(params, get_profile(params.device), runs, dataset, x, y, cut, network_identity(model), build)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = PipelineTrainingParams

pending = harness.pending
run = harness.run


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: the cut (by multiply-adds) and the runs."""
    stages = [f"stage {i}: {', '.join(stage.layers)}" for i, stage in enumerate(plan.cut.stages, start=1)]
    return "\n".join([*stages, *map(str, plan.runs)])


# ------------------------------------------------------------ summaries ----


def timelines(plan: Plan, stored: list[StoredRun]) -> dict[PipelineRunKey, pd.DataFrame]:
    """Every run's passes on the device's clock (``edgelab.emulation.training_clock``)."""
    link = training_clock.LinkModel(plan.profile.link_bytes_per_s, plan.profile.latency_s)
    out = {}
    for key, result in harness.by_run(plan, stored).items():
        factor = float(result.summary["calibration"]["speed_factor"])
        out[key] = training_clock.compose(result.tables["records"], speed_factor=factor, link=link)
    return out


def summarize(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """A row per run: bubble (device clock, and host wall), the formula's, time per mini-batch, throughput."""
    p = plan.params
    k = len(plan.cut.stages)
    rows = []
    results = harness.by_run(plan, stored)
    for key, timeline in timelines(plan, stored).items():
        result = results[key]
        after = timeline[timeline["step"] >= 1]  # the first mini-batch is the warm-up
        span = float(after["end"].max() - after["start"].min())
        if key.schedule == "gpipe":
            bubble = float(training_clock.step_bubbles(after).mean())
            host = _host_bubble(result.tables["records"])
            steady = float("nan")
        else:
            bubble = training_clock.idle_fraction(after)
            host = float("nan")
            steady = training_clock.idle_fraction(timeline, *training_clock.steady_window(timeline))
        rows.append(
            {
                "schedule": key.schedule,
                "micro_batches": key.micro_batches,
                "repeat": key.repeat,
                "bubble": bubble,
                "formula": gpipe_bubble(k, key.micro_batches) if key.schedule == "gpipe" else float("nan"),
                "host_bubble": host,
                "steady_idle": steady,
                "s_per_mini_batch": span / (p.steps - 1),
                "images_per_s": (p.steps - 1) * p.batch_size / span,
                "max_weight_difference": float(result.summary["max_weight_difference"]),
            }
        )
    return pd.DataFrame(rows)


def _host_bubble(records: pd.DataFrame) -> float:
    """The same measure on the host's wall clock (the emulation's own schedule, not a Pi's)."""
    wall = records.rename(columns={"t_start": "start", "t_end": "end"})
    return float(training_clock.step_bubbles(wall[wall["step"] >= 1]).mean())


def stage_table(plan: Plan, stored: list[StoredRun], key: PipelineRunKey, timeline: pd.DataFrame) -> pd.DataFrame:
    """Per stage of one run: its layers, device time per pass, idle share, most micro-batches held and their bytes."""
    result = harness.by_run(plan, stored)[key]
    k = len(plan.cut.stages)
    held = training_clock.in_flight(timeline).groupby("stage")["held"].max()
    window = training_clock.steady_window(timeline) if key.schedule == "1f1b" else (None, None)
    rows = []
    for s, stage in enumerate(plan.cut.stages):
        passes = timeline[timeline["stage_index"] == s]
        backwards = passes[passes["kind"].isin(["backward", "forward+backward"])]
        weight_bytes = int(result.summary["stage_weight_bytes"][f"stage-{stage.index}"])
        most = int(held.get(s, 0))
        rows.append(
            {
                "stage": s + 1,
                "layers": ", ".join(stage.layers),
                "device": passes["device"].iloc[0],
                "forward_ms": 1e3 * float(passes[passes["kind"] == "forward"]["compute_s"].median()),
                "backward_ms": 1e3 * float(backwards["compute_s"].median()),
                "idle": training_clock.idle_fraction(passes, *window) if key.schedule == "1f1b" else float("nan"),
                "held_most": most,
                "held_bound": k - s if s < k - 1 else 0,
                "weight_bytes": weight_bytes,
                "stash_bytes": most * weight_bytes if key.schedule == "1f1b" else 0,
            }
        )
    return pd.DataFrame(rows)


def losses(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """Each run's loss per SGD update beside plain SGD's on the same updates (repeat 0)."""
    frames = []
    for key, result in harness.by_run(plan, stored).items():
        if key.repeat:
            continue
        mine = result.tables["losses"].sort_values(["step", "micro_batch"]).reset_index(drop=True)
        reference = result.tables["reference"]
        if key.schedule == "gpipe":
            weighted = mine.assign(w=mine["loss"] * mine["images"]).groupby("step")[["w", "images"]].sum()
            values = (weighted["w"] / weighted["images"]).to_numpy()
        else:
            values = mine["loss"].to_numpy()
        frames.append(
            pd.DataFrame(
                {
                    "run": f"{key.schedule} M={key.micro_batches}",
                    "update": reference["update"],
                    "images_seen": (reference["update"] + 1) * reference["images"],
                    "loss": values,
                    "plain_sgd_loss": reference["loss"],
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def stash_semantics(stored: list[StoredRun], plan: Plan) -> pd.DataFrame:
    """1F1B's versions: per stage and micro-batch, the updates its forward and its backward saw, and PipeDream's."""
    k = len(plan.cut.stages)
    rows = []
    for key, result in harness.by_run(plan, stored).items():
        if key.schedule != "1f1b":
            continue
        r = result.tables["records"]
        r = r[r["kind"] != "update"].assign(stage_index=r["stage"].map(training_clock.stage_index))
        r = r.assign(g=r["step"] * key.micro_batches + r["micro_batch"])
        r["stage_index"] -= r["stage_index"].min()
        for (s, g), passes in r.groupby(["stage_index", "g"]):
            rows.append(
                {
                    "repeat": key.repeat,
                    "stage": int(s) + 1,
                    "micro_batch": int(g),
                    "forward_version": int(passes["version"].iloc[0]),
                    "backward_version": int(passes["version"].iloc[-1]),
                    "expected": max(0, int(g) - (k - int(s)) + 1),
                }
            )
    return pd.DataFrame(rows)


def run_facts(plan: Plan, stored: list[StoredRun]) -> str:
    """What nbval checks of the runs: GPipe's weights equal plain SGD's, 1F1B's passes on PipeDream's versions."""
    summary = summarize(plan, stored)
    gpipe = summary[summary["schedule"] == "gpipe"]
    versions = stash_semantics(stored, plan)
    forward = versions["forward_version"]
    same = forward.eq(versions["backward_version"]) & forward.eq(versions["expected"])
    return (
        f"GPipe weights equal plain SGD's: {bool((gpipe['max_weight_difference'] <= 1e-5).all())}\n"
        f"1F1B passes on PipeDream's version: {int(same.sum())} of {len(versions)}"
    )


def measurements(plan: Plan, stored: list[StoredRun]) -> list[Any]:
    """What the notebook shows of the runs: bubbles, times per mini-batch and throughput (``summarize``)."""
    return [summarize(plan, stored).round(4)]

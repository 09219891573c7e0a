"""Jeon et al., MobileNetV2 cut into a five-stage pipeline on Raspberry Pi 4B boards: all 16 jeon ids.

Paper: Jeon, Lee, Lee, Kim and Kim, "Implementation of AIoT Edge Cluster System
via Distributed Deep Learning Pipeline" (Pusan National University).

The runs, in order, each stored as it finishes (``edgelab.papers.harness``):

1. ``augment``: the training split's classes grown to ``augment_per_class`` on the devices;
2. ``train``: the ten-class model (``kcs``) and the five binary ensemble members, two phases each;
0. ``cluster``: the live cluster's listings (nodes, deployments, services, hardware), as it runs;
3. ``stream``: the validation images through the pipeline (Jeon's KCS), the ensemble and one device,
   ``repeats`` times each, every mode once before any repeat;
4. ``solo``: the pipeline with one micro-batch in flight, so no other stage computes at the same time
   (each stage's cost without host contention), and ``latency``: the pipeline and the single device
   one image at a time (per-image latency);
5. ``fault``: the pipeline with one stage's device killed mid-stream (the pods' restart policy).

``summarize`` puts every stream on the emulated clock of the Pi 4B profile
(``edgelab.emulation.stream_clock``); ``edgelab.papers.jeon.pipeline_figures`` renders the items.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster, device_names
from edgelab.common import checks
from edgelab.common.errors import ConfigError, DeviceMemoryError
from edgelab.data import Dataset, load_dataset
from edgelab.data.plantvillage import MIN_IMAGE_SIZE
from edgelab.emulation.profiles import DeviceProfile, get_profile, with_memory
from edgelab.models.graph import layer_costs
from edgelab.models.mobilenet import flat_mobilenet_v2
from edgelab.models.transfer import RANDOM_BASE, TransferConfig, imagenet_weights, preprocess
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.papers.jeon import augment as augmentation
from edgelab.pipeline.partition import Partition, jeon_cuts, partition, stage_model
from edgelab.pipeline.stream import Placement, StageSpec, StreamResult, stream

EXPERIMENT = "jeon_pipeline"
# 2: device workers run TensorFlow's oneDNN kernels (edgelab.cluster.device_cluster): the same math in another
#    float rounding, about half the host CPU per convolutional step.
MEASUREMENT_REVISION = 2
#: The ensemble's class pairs: not stated in the paper (jeon/P7); a fixed pairing, recorded.
ENSEMBLE_PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))
MODES = ("pipeline", "ensemble", "single")
SPLITS = ("jeon", "macs", "params")

#: Parameters papermill injects for the paper-sized run (``edgelab reproduce --profile full``): the paper's
#: structure (224 px, ten classes augmented to one target each, 5 frozen + 1 fine-tuning epochs, five stages,
#: ensemble and single board) with every judged time measured three times (``verdict.MIN_REPEATS``), reduced to
#: 160 augmented training images per class (1,600, not the paper's 100,000). Measured at 224 px on this 2-core
#: host: a training process holds ~3.6 MB per training image (peak 7.0 GB at 1,600), so 1,000 per class would
#: need ~37 GB (a 192-per-class trial was killed for memory at 8.5 GB); fine-tuning costs ~0.115 CPU-s per image
#: and model. This profile: ~29 CPU-minutes (six trainings ~23, three repeats of the streams ~5), about 20 min
#: on a quiet host and about 70 min when the host is shared as it was when measured. Which images train changes
#: no judged value here: without the Kaggle set and ImageNet weights accuracy is "data missing" at any size.
FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "image_size": 224,
    "augment_per_class": 160,
    "phase1_epochs": 5,
    "phase2_epochs": 1,
    "repeats": 3,
}


@dataclass(frozen=True)
class JeonParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    image_size: int = 96
    validation_fraction: float = 0.2
    augment_per_class: int = 128
    weights: str | None = "imagenet"
    phase1_epochs: int = 2
    phase1_learning_rate: float = 1e-3
    phase2_epochs: int = 0
    phase2_learning_rate: float = 1e-5
    dropout: float = 0.2
    batch_size: int = 32
    split: Any = "jeon"
    n_stages: int = 5
    micro_batch: int = 32
    max_in_flight: int = 8
    latency_images: int = 32
    repeats: int = 1
    fault_stage: int | None = 4
    fault_at: int = 3
    device_profile: str = "pi4b"
    device_memory_mb: int | None = None
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("micro_batch", "max_in_flight", "latency_images", "repeats", "n_stages", "batch_size"):
            checks.integer(name, getattr(self, name), at_least=1)
        checks.integer("image_size", self.image_size, at_least=MIN_IMAGE_SIZE)
        checks.integer("augment_per_class", self.augment_per_class, at_least=1)
        checks.choice("weights", self.weights, ("imagenet", None))
        checks.integer("phase1_epochs", self.phase1_epochs, at_least=0)
        checks.integer("phase2_epochs", self.phase2_epochs, at_least=0)
        checks.integer("fault_at", self.fault_at, at_least=0)
        for name in ("phase1_learning_rate", "phase2_learning_rate"):
            checks.number(name, getattr(self, name), above=0)
        checks.number("validation_fraction", self.validation_fraction, above=0, at_most=0.5)
        checks.number("dropout", self.dropout, at_least=0, at_most=0.9)
        if isinstance(self.split, str) and self.split not in SPLITS:
            raise ConfigError("split", self.split, f"one of {', '.join(SPLITS)}, or a list of cut layers")
        if self.split == "jeon" and self.n_stages != 5:
            raise ConfigError("n_stages", self.n_stages, "5 with split='jeon' (Jeon's 27/27/36/53/14)")
        if self.fault_stage is not None and not 1 <= self.fault_stage <= self.n_stages:
            raise ConfigError("fault_stage", self.fault_stage, f"a stage 1..{self.n_stages}, or None for no fault run")


@dataclass
class Plan(harness.Plan):
    """Validated work: the data, the partition, the devices, every run."""

    params: JeonParams
    dataset: Dataset
    profile: DeviceProfile
    cut: Partition
    weights: str | None
    weights_source: str
    runs: list[tuple[Any, ...]]
    memory_mb: dict[str, float] = field(default_factory=dict)
    # Trained models built from the store, by name: each stream run used to rebuild them (1.5 s apiece).
    built: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def describe(self) -> str:
        """The runs, the weights and the data."""
        return f"{len(self.runs)} runs; weights: {self.weights_source}\ndata: {self.dataset.provenance()}"

    def label(self, run: tuple[Any, ...]) -> str:
        """The run's kind and its parts, e.g. ``stream pipeline 0``."""
        return " ".join(map(str, run))

    def devices_needed(self, runs: list[tuple[Any, ...]]) -> int:
        """One device per stage and per ensemble member."""
        return max(self.params.n_stages, len(ENSEMBLE_PAIRS))

    def training(self, name: str) -> TransferConfig:
        """How the model ``name`` (``kcs`` or ``member-k``) is trained."""
        p = self.params
        classes, output = (tuple(range(10)), "softmax")
        if name != "kcs":
            classes, output = ENSEMBLE_PAIRS[int(name.split("-")[1])], "sigmoid"
        return TransferConfig(
            classes=classes,
            image_size=p.image_size,
            weights=self.weights,
            output=output,
            dropout=p.dropout,
            batch_size=p.batch_size,
            phase1_epochs=p.phase1_epochs,
            phase1_learning_rate=p.phase1_learning_rate,
            phase2_epochs=p.phase2_epochs,
            phase2_learning_rate=p.phase2_learning_rate,
            seed=p.seed,
        )

    def run_params(self, run: tuple[Any, ...]) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        p, d = self.params, self.dataset
        key: dict[str, Any] = {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "run": list(run),
            "dataset": {"name": d.name, "source": d.source, "n_train": d.n_train, "n_test": d.n_test},
            "image_size": p.image_size,
            "validation_fraction": p.validation_fraction,
            "augment_per_class": p.augment_per_class,
            "seed": p.seed,
            "cluster": p.scheduler_address or "emulated",
        }
        if run[0] in ("augment", "cluster"):
            return key
        key["weights"] = self.weights_source
        key["training"] = {name: self.training(name).to_dict() for name in self.trained_for(run)}
        if run[0] != "train":
            key |= {
                "cuts": list(self.cut.cuts),
                "micro_batch": 1 if run[0] == "latency" else p.micro_batch,
                "max_in_flight": 1 if run[0] == "solo" else p.max_in_flight,
                "device_profile": self.profile.name,
                "device_memory_mb": self.profile.memory_mb,
            }
        if run[0] == "fault":
            key["kill"] = self.fault_kill()
        return key

    def trained_for(self, run: tuple[Any, ...]) -> list[str]:
        """The trained models a run uses."""
        if run[0] == "train":
            return [run[1]]
        if run[0] in ("stream", "latency", "solo") and run[1] == "ensemble":
            return [f"member-{k}" for k in range(len(ENSEMBLE_PAIRS))]
        return ["kcs"]

    def fault_kill(self) -> dict[str, Any]:
        """The kill of the fault run: the device of ``fault_stage``, before micro-batch ``fault_at`` enters."""
        device = device_names(self.profile, self.params.n_stages)[(self.params.fault_stage or 1) - 1]
        return {"device": device, "phase": "stream", "at": self.params.fault_at}

    def execute(self, cluster: DeviceCluster, run: tuple[Any, ...], context: dict[str, Any]) -> Outcome:
        """Execute one run (see the module docstring)."""
        store = context["store"]
        base = {"calibration": context["calibration"], "cluster": context["cluster"], "profile": asdict(self.profile)}
        if run[0] == "cluster":
            return self._listing(cluster, context), {}
        if run[0] == "augment":
            x, y, per_class = augmentation.augment(
                cluster,
                self.dataset.x_train,
                self.dataset.y_train,
                per_class=self.params.augment_per_class,
                seed=self.params.seed,
            )
            summary = {**base, "settings": augmentation.AUGMENTATION, "dataset": self.dataset.provenance()}
            return summary, {"per_class": per_class}, {"x": x, "y": y}
        if run[0] == "train":
            from edgelab.models import transfer

            augmented = store.get(self.run_params(("augment",)))
            cfg = self.training(run[1])
            trained = transfer.train(cfg, augmented.arrays["x"], augmented.arrays["y"], *self._validation())
            arrays = {f"w{i:03d}": w for i, w in enumerate(trained.weights)} | {"scores": trained.scores}
            summary = {**base, "train_s": trained.train_s, "weights_source": self.weights_source}
            return summary, {"history": trained.history}, arrays
        return self._stream(cluster, run, store, base)

    def roles(self, devices: list[str]) -> dict[str, str]:
        """Role -> device: the pipeline's stages (the paper's deployments 1-5 on scv1-scv5)."""
        return {f"pipeline-stage-{i + 1}": d for i, d in enumerate(devices[: self.params.n_stages])}

    def _listing(self, cluster: DeviceCluster, context: dict[str, Any]) -> dict[str, Any]:
        """The live cluster's listings (jeon/fig2, 4, 5, 6, 10), read while it runs this experiment."""
        from edgelab.data.sources import default_data_dir
        from edgelab.papers.jeon import cluster_figures as jeon_cluster

        view = jeon_cluster.collect(
            cluster.client,
            roles=self.roles(cluster.devices),
            data_dir=self.params.data_dir or default_data_dir(),
            profile=self.profile,
            emulated=cluster.emulated,
            speed_factor=context["calibration"]["speed_factor"],
        )
        frames = {k: v.to_dict("records") for k, v in vars(view).items() if isinstance(v, pd.DataFrame)}
        return {"frames": frames, "data_dir": str(view.data_dir), "collected": view.collected}

    def _validation(self) -> tuple[np.ndarray, np.ndarray]:
        return self.dataset.x_test, self.dataset.y_test

    def _model(self, store: Any, name: str) -> Any:
        """The trained model ``name``, built once (streams only read it: cutting it adds nodes, not weights).

        An ensemble member is its weights on the members' one architecture (a ``StageSpec``): the
        five have the same layers, so one build serves them all, where five cost the client ~6 s more.
        """
        from edgelab.models import transfer

        if name not in self.built:
            trained = store.get(self.run_params(("train", name)))
            weights = [trained.arrays[k] for k in sorted(trained.arrays) if k.startswith("w")]
            if name == "kcs":
                model = transfer.build(self.training(name))
                model.set_weights(weights)
                self.built[name] = model
            else:
                cfg = self.training(name)
                # Classes and output decide the head; everything else is the plan's, the same for every member.
                architecture = f"architecture: {len(cfg.classes)} {cfg.output}"
                if architecture not in self.built:
                    self.built[architecture] = transfer.build(cfg)
                self.built[name] = StageSpec.like(self.built[architecture], weights)
        return self.built[name]

    def _stream(self, cluster: DeviceCluster, run: tuple[Any, ...], store: Any, base: dict[str, Any]) -> Outcome:
        p = self.params
        kind, mode = run[0], ("pipeline" if run[0] == "fault" else run[1])
        devices = cluster.devices
        if mode == "ensemble":
            members = [f"member-{k}" for k in range(len(ENSEMBLE_PAIRS))]
            models = {m: self._model(store, m) for m in members}
            placement = Placement.ensemble(members, devices)
        elif mode == "single":
            models = {"whole": self._model(store, "kcs")}
            placement = Placement(((("whole", devices[0]),),))
        else:
            whole = self._model(store, "kcs")
            cut = partition(whole, cuts=list(self.cut.cuts))
            models = {f"stage-{s.index}": stage_model(whole, s) for s in cut.stages}
            placement = Placement.pipeline(list(models), devices)
        x = preprocess(self.dataset.x_test[: p.latency_images] if kind == "latency" else self.dataset.x_test)
        result: StreamResult = stream(
            cluster,
            placement,
            models,
            x,
            micro_batch=1 if kind == "latency" else p.micro_batch,
            max_in_flight=1 if kind == "solo" else p.max_in_flight,
            kills=[self.fault_kill()] if kind == "fault" else None,
        )
        summary = {
            **base,
            "mode": mode,
            "kind": kind,
            "wall_s": result.wall_s,
            "branches": [list(map(list, chain)) for chain in placement.branches],
            "micro_batch": result.micro_batch,
            "max_in_flight": result.max_in_flight,
            "replayed": result.replayed,
        }
        tables = {
            "records": result.records,
            "sends": result.sends,
            "receives": result.receives,
            "loads": result.loads,
            "recoveries": pd.DataFrame(result.recoveries),
            "kills": pd.DataFrame(result.kills),
        }
        arrays = {f"out{b}": out for b, out in enumerate(result.outputs)}
        return summary, tables, arrays


def _runs(p: JeonParams) -> list[tuple[Any, ...]]:
    runs: list[tuple[Any, ...]] = [("cluster",), ("augment",), ("train", "kcs")]
    runs += [("train", f"member-{k}") for k in range(len(ENSEMBLE_PAIRS))]
    runs += [("stream", mode, r) for r, mode in itertools.product(range(p.repeats), MODES)]
    # The pipeline once more with one micro-batch in flight: each stage's cost with no other stage computing.
    runs += [("solo", "pipeline"), ("latency", "pipeline"), ("latency", "single")]
    if p.fault_stage is not None:
        runs.append(("fault",))
    return runs


def prepare(**kwargs: Any) -> Plan:
    """Load the data, cut the model and check every run, before any cluster work.

    Keyword arguments are the fields of ``JeonParams``.
    """
    if isinstance(kwargs.get("split"), list):
        kwargs["split"] = tuple(kwargs["split"])
    params = harness.parse_params(JeonParams, kwargs)
    profile = with_memory(get_profile(params.device_profile), params.device_memory_mb)
    dataset = load_dataset(
        "plantvillage_tomato",
        data_dir=params.data_dir,
        seed=params.seed,
        image_size=params.image_size,
        validation_fraction=params.validation_fraction,
    )
    # The model's structure (not its weights) decides the cuts: build it once, untrained.
    model = flat_mobilenet_v2(10, image_size=params.image_size, weights=None, dropout=params.dropout)
    if params.split == "jeon":
        cut = partition(model, cuts=list(jeon_cuts(model)))
    elif isinstance(params.split, str):
        cut = partition(model, params.n_stages, balance=params.split)
    else:
        cut = partition(model, params.n_stages, cuts=list(params.split))
    weights, source = (None, f"none: weights=None; {RANDOM_BASE}")
    if params.weights is not None:
        weights, source = imagenet_weights(params.image_size, data_dir=params.data_dir)
    plan = Plan(params, dataset, profile, cut, weights, source, _runs(params))
    _check_memory(plan, layer_costs(model))
    largest = int(np.bincount(dataset.y_train).max())
    checks.integer("augment_per_class", params.augment_per_class, at_least=largest)  # the largest class's images
    return plan


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: no source supplies PlantVillage (no package ships it); None if one does."""
    # The smallest images decode fastest; the check needs only the files to load.
    return harness.missing_dataset("plantvillage_tomato", data_dir, image_size=MIN_IMAGE_SIZE)


def _check_memory(plan: Plan, costs: list[Any]) -> None:
    """Each stage's weights and the activations of one micro-batch must fit its device (analytic, MB)."""
    usable = plan.profile.usable_memory_mb
    mb = plan.params.micro_batch
    for stage in plan.cut.stages:
        largest = max(c.output_bytes for c in costs[stage.first : stage.last + 1])
        # Weights once; a micro-batch's largest activation, its input and its output alive at once.
        need = (stage.params * 4 + 3 * mb * largest) / 2**20
        plan.memory_mb[f"stage-{stage.index}"] = round(need, 1)
        if need > usable:
            raise DeviceMemoryError(
                f"stage {stage.index} needs ~{need:.0f} MB for micro_batch={mb} but a {plan.profile.name} has "
                f"{usable} MB usable; allowed: a smaller micro_batch, more stages or device_memory_mb"
            )


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = JeonParams

# The shared harness does the rest: what is pending, a cluster only for that, each run stored as it finishes.
pending = harness.pending
run = harness.run


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: the cut, each stage's analytic memory need, the split's class counts.

    Each stage's layers, MACs, parameters and the activation bytes it passes on.
    """
    return "\n".join(
        [
            plan.cut.to_frame().to_string(index=False),
            f"speed-up bound from MAC shares: {plan.cut.speedup_bound:.2f}x; memory need (MB): {plan.memory_mb}",
            f"train per class: {np.bincount(plan.dataset.y_train).tolist()}",
            f"validation per class: {np.bincount(plan.dataset.y_test).tolist()}",
        ]
    )

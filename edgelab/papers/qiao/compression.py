"""The survey's model compression (qiao/method-compression): Deep Compression's three stages on LeNet-5.

Qiao et al. name Deep Compression's pipeline (pruning, quantization, Huffman
coding) and give no numbers. Here edgelab's LeNet-5 (``cnn``) is trained on
MNIST, then for each sparsity of the sweep its kernels are pruned by
magnitude and fine-tuned, converted to a full-int8 TensorFlow Lite model and
DEFLATE-coded (``edgelab.models.compression``). Each stage's model is measured: its
bytes, its test accuracy and its latency on an emulated Pi: run in the
device's Dask worker by a one-thread interpreter, one image per invoke, its
thread CPU time after warm-up times the calibration's speed factor.

The training and the conversions run in the same worker (one TensorFlow
thread, so seeded runs repeat exactly); compressing happens on a workstation
in practice, and nothing here times it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster, device_resource
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.data import Dataset, load_dataset
from edgelab.emulation.profiles import DeviceProfile, get_profile
from edgelab.models import compression
from edgelab.models.builtin import ModelSpec, prepare_images
from edgelab.models.compression import STAGES, check_sparsity
from edgelab.papers import harness
from edgelab.papers.harness import Outcome

EXPERIMENT = "qiao_compression"
MEASUREMENT_REVISION = 1
MODEL = "cnn"  # edgelab's LeNet-5
PROFILES = ("smoke", "full")
#: Pi-class devices a model may be timed on.
DEVICES = ("pi3b", "pi4b")

FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "sparsities": [0.0, 0.25, 0.5, 0.75, 0.9, 0.95],
    "headline_sparsity": 0.9,
    "train_samples": None,
    "test_samples": None,
    "epochs": 5,
    "fine_tune_epochs": 2,
    "representative_samples": 500,
    "latency_images": 1000,
    "latency_repeats": 5,
}


@dataclass(frozen=True)
class CompressionParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    profile: str = "smoke"
    sparsities: tuple[float, ...] = (0.5, 0.9)
    headline_sparsity: float = 0.9
    stages: tuple[str, ...] = STAGES
    train_samples: int | None = 2000
    test_samples: int | None = 1000
    epochs: int = 1
    fine_tune_epochs: int = 1
    batch_size: int = 32
    learning_rate: float = 0.05
    representative_samples: int = 100
    latency_images: int = 200
    latency_repeats: int = 3
    device: str = "pi3b"
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        checks.choice("profile", self.profile, PROFILES)
        if not self.sparsities:
            raise ConfigError("sparsities", self.sparsities, "at least one fraction in [0, 1)")
        for s in self.sparsities:
            check_sparsity(s, "sparsities")
        if check_sparsity(self.headline_sparsity, "headline_sparsity") not in self.sparsities:
            raise ConfigError("headline_sparsity", self.headline_sparsity, f"one of sparsities {self.sparsities}")
        for stage in self.stages:
            if stage not in STAGES:
                raise ConfigError("stages", stage, f"stage names among {', '.join(STAGES)}")
        if not self.stages or tuple(self.stages) != STAGES[: len(self.stages)]:
            raise ConfigError("stages", self.stages, f"a first part of {', '.join(STAGES)} (each needs the one before)")
        for name, least in (
            ("epochs", 1), ("fine_tune_epochs", 0), ("batch_size", 1), ("representative_samples", 1),
            ("latency_images", 1), ("latency_repeats", 1),
        ):  # fmt: skip
            checks.integer(name, getattr(self, name), at_least=least)
        checks.number("learning_rate", self.learning_rate, above=0)
        checks.choice("device", self.device, DEVICES)
        checks.integer("train_samples", self.train_samples, at_least=1, none="all")
        checks.integer("test_samples", self.test_samples, at_least=1, none="all")

    def spec(self) -> ModelSpec:
        """The LeNet-5 every run builds."""
        return ModelSpec(MODEL, learning_rate=self.learning_rate, seed=self.seed)


@dataclass(frozen=True)
class CompressionRunKey:
    """One run: training the float model (``sparsity`` None), or compressing it at ``sparsity``."""

    sparsity: float | None


TRAIN = CompressionRunKey(None)


@dataclass
class Plan(harness.Plan):
    """Validated work: the data, the device, every run."""

    params: CompressionParams
    dataset: Dataset
    profile: DeviceProfile
    runs: list[CompressionRunKey]

    def describe(self) -> str:
        """The runs and the device."""
        return f"{len(self.runs)} runs on one {self.profile.name} device"

    def run_params(self, run: CompressionRunKey) -> dict[str, Any]:
        """What a run's result depends on: its results-store key (a compression run, on the training's too)."""
        p, d = self.params, self.dataset
        key: dict[str, Any] = {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "model": MODEL,
            "dataset": {"name": d.name, "source": d.source, "n_train": d.n_train, "n_test": d.n_test},
            "training": {"epochs": p.epochs, "batch_size": p.batch_size, "learning_rate": p.learning_rate},
            "latency": {"images": p.latency_images, "repeats": p.latency_repeats},
            "device": p.device,
            "seed": p.seed,
            "cluster": p.scheduler_address or "emulated",
        }
        if run.sparsity is not None:
            key["compression"] = {
                "sparsity": run.sparsity,
                "fine_tune_epochs": p.fine_tune_epochs,
                "representative_samples": p.representative_samples,
                "stages": list(p.stages),
            }
        return key

    def devices_needed(self, runs: list[CompressionRunKey]) -> int:
        """One device: every model is timed on the same one."""
        return 1

    def setup(self, cluster: DeviceCluster) -> dict[str, Any]:
        """The calibration and the cluster; the images placed on the device once."""
        d, spec = self.dataset, self.params.spec()
        data = {
            "x": prepare_images(spec.name, d.x_train), "y": d.y_train,
            "x_test": prepare_images(spec.name, d.x_test), "y_test": d.y_test,
        }  # fmt: skip
        return {**super().setup(cluster), "data": cluster.client.scatter(data, broadcast=True)}

    def execute(self, cluster: DeviceCluster, run: CompressionRunKey, context: dict[str, Any]) -> Outcome:
        """Train (or compress) on the device's worker, then time each resulting model there."""
        p = self.params
        client, pin = cluster.client, {"resources": {device_resource(cluster.devices[0]): 1}, "pure": False}
        data = context["data"]
        if run.sparsity is None:
            made = client.submit(_train, p.spec(), data, p.epochs, p.batch_size, **pin).result()
            models = {"float32": (made.pop("tflite"), False)}
        else:
            trained = context["store"].get(self.run_params(TRAIN))
            weights = [trained.arrays[f"w{i}"] for i in range(sum(k.startswith("w") for k in trained.arrays))]
            made = client.submit(
                _compress, p.spec(), weights, run.sparsity, p.stages, data, p.fine_tune_epochs, p.batch_size,
                p.representative_samples, **pin,
            ).result()  # fmt: skip
            models = {s: (made.pop(f"{s}_model"), s == "entropy") for s in p.stages[1:]}
        images = data["x_test"].result()[: p.latency_images]
        factor = float(context["calibration"]["speed_factor"])
        timed = []
        for stage, (model_bytes, coded) in models.items():
            for repeat in range(p.latency_repeats):
                t = client.submit(compression.time_inference, model_bytes, images, coded=coded, **pin).result()
                device_ms = {"device_ms_per_image": 1000 * t["cpu_s_per_image"] * factor,
                             "device_load_ms": 1000 * t["load_cpu_s"] * factor}  # fmt: skip
                timed.append({"stage": stage, "repeat": repeat, **t, **device_ms})
        layers = pd.DataFrame(made.pop("layers", []))
        arrays = {f"w{i}": w for i, w in enumerate(made.pop("weights", []))}
        if arrays:
            arrays["float32_tflite"] = np.frombuffer(models["float32"][0], dtype=np.uint8)
        summary = {
            **made,
            "cluster": context["cluster"],
            "calibration": context["calibration"],
            "dataset": self.dataset.provenance(),
            "runtime": client.submit(compression.runtime_name, **pin).result(),
        }
        return summary, {"latency": pd.DataFrame(timed), "layers": layers}, arrays


def _train(spec: ModelSpec, data: dict[str, np.ndarray], epochs: int, batch_size: int) -> dict[str, Any]:
    """On the device's worker: train the float model; its weights file, flatbuffer and test accuracy."""
    import keras

    from edgelab.models.builtin import build_model

    keras.utils.clear_session()  # layer names (kept in the flatbuffer) count from zero every run
    model = build_model(spec)
    model.fit(data["x"], data["y"], batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0)
    flatbuffer = compression.to_tflite(model)
    return {
        "weights": model.get_weights(),
        "tflite": flatbuffer,
        "float32_bytes": len(compression.keras_weights(model)),
        "float32_tflite_bytes": len(flatbuffer),
        "float32_accuracy": _accuracy(compression.predict(flatbuffer, data["x_test"]), data["y_test"]),
    }


def _compress(
    spec: ModelSpec,
    weights: list[np.ndarray],
    sparsity: float,
    stages: tuple[str, ...],
    data: dict[str, np.ndarray],
    fine_tune_epochs: int,
    batch_size: int,
    representative_samples: int,
) -> dict[str, Any]:
    """On the device's worker: prune and fine-tune, quantize, code; each stage's model, bytes and accuracy."""
    import keras

    from edgelab.models.builtin import build_model

    keras.utils.clear_session()
    model = build_model(spec)
    model.set_weights(weights)
    compression.prune(model, sparsity, data["x"], data["y"], epochs=fine_tune_epochs, batch_size=batch_size)
    pruned = compression.to_tflite(model)
    reference = compression.predict(pruned, data["x_test"])
    out: dict[str, Any] = {
        "layers": compression.sparsity_of(model),
        "pruned_model": pruned,
        "pruned_bytes": len(compression.encode(compression.keras_weights(model))),
        "pruned_tflite_bytes": len(pruned),
        "pruned_accuracy": _accuracy(reference, data["y_test"]),
    }
    if "int8" in stages:
        int8 = compression.to_tflite(model, representative=data["x"][:representative_samples])
        answers = compression.predict(int8, data["x_test"])
        out |= {
            "int8_model": int8,
            "int8_bytes": len(int8),
            "int8_accuracy": _accuracy(answers, data["y_test"]),
            "int8_max_abs_diff": float(np.abs(answers - reference).max()),
            "int8_mean_abs_diff": float(np.abs(answers - reference).mean()),
            "int8_agreement": float((answers.argmax(1) == reference.argmax(1)).mean()),
        }
    if "entropy" in stages:
        coded = out["entropy_model"] = compression.encode(out["int8_model"])
        symbols = compression.int8_weights(out["int8_model"])
        out |= {
            "entropy_bytes": len(coded),
            "entropy_accuracy": _accuracy(
                compression.predict(compression.decode(coded), data["x_test"]), data["y_test"]
            ),  # fmt: skip
            "weight_symbols": int(symbols.size),
            "weights_bound_bytes": compression.entropy_bound_bytes(symbols),
            "weights_huffman_bytes": compression.huffman_bytes(symbols),
            "weights_deflate_bytes": len(compression.encode(symbols.tobytes())),
        }
    return out


def _accuracy(outputs: np.ndarray, labels: np.ndarray) -> float:
    return float((outputs.argmax(1) == labels).mean())


def prepare(**kwargs: Any) -> Plan:
    """Load MNIST and check every run, before any cluster work."""
    params = harness.parse_params(CompressionParams, kwargs, sequences=("sparsities", "stages"))
    dataset = load_dataset(
        "mnist", data_dir=params.data_dir, sample_limit=params.train_samples, test_limit=params.test_samples,
        seed=params.seed,
    )  # fmt: skip
    if params.representative_samples > dataset.n_train:
        raise ConfigError("representative_samples", params.representative_samples,
                          f"at most {dataset.n_train} (the training images)")  # fmt: skip
    runs = [TRAIN, *(CompressionRunKey(float(s)) for s in sorted(set(params.sparsities)))]
    return Plan(params, dataset, get_profile(params.device), runs)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = CompressionParams

pending = harness.pending
run = harness.run


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: the runs and the digits they use."""
    d = plan.dataset
    return f"{len(plan.runs)} runs; MNIST from {d.source}: {d.n_train} training, {d.n_test} test digits"


# ------------------------------------------------------------ summaries ----

#: What each stage's model is, for tables and the chart.
STAGE_LABELS = {
    "float32": "float32 (Keras .weights.h5)",
    "pruned": "pruned, DEFLATE-zipped .weights.h5",
    "int8": "int8 TFLite flatbuffer",
    "entropy": "int8 + DEFLATE (Huffman) coded",
}


def stages(plan: Plan, stored: list[StoredRun], sparsity: float) -> pd.DataFrame:
    """A row per stage at ``sparsity``: bytes, times smaller than float32, accuracy and the Pi's latency."""
    held = harness.by_run(plan, stored)
    rows = []
    for run_key, stage in [(TRAIN, "float32"), *((CompressionRunKey(sparsity), s) for s in plan.params.stages[1:])]:
        result = held[run_key]
        latency = result.tables["latency"]
        mine = latency[latency["stage"] == stage]
        rows.append(
            {
                "stage": stage,
                "model": STAGE_LABELS[stage],
                "bytes": int(result.summary[f"{stage}_bytes"]),
                "accuracy": float(result.summary[f"{stage}_accuracy"]),
                "device_ms_per_image": float(mine["device_ms_per_image"].median()),
                "spread_ms": float(mine["device_ms_per_image"].max() - mine["device_ms_per_image"].min()),
                "device_load_ms": float(mine["device_load_ms"].median()),
            }
        )
    table = pd.DataFrame(rows)
    return table.assign(smaller=table["bytes"].iloc[0] / table["bytes"])


def sweep(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """A row per sparsity: each stage's bytes and accuracy, and the int8 weights' entropy figures."""
    held = harness.by_run(plan, stored)
    base = held[TRAIN].summary
    rows = []
    for run_key, result in held.items():
        if run_key.sparsity is None:
            continue
        s = result.summary
        layers = result.tables["layers"]
        row = {"sparsity": run_key.sparsity, "zeros": int(layers["zeros"].sum()), "kernel_weights":
               int(layers["weights"].sum()), "float32_bytes": int(base["float32_bytes"]),
               "float32_accuracy": float(base["float32_accuracy"])}  # fmt: skip
        for stage in plan.params.stages[1:]:
            row[f"{stage}_bytes"] = int(s[f"{stage}_bytes"])
            row[f"{stage}_accuracy"] = float(s[f"{stage}_accuracy"])
        for key in ("int8_agreement", "int8_max_abs_diff", "weight_symbols", "weights_bound_bytes",
                    "weights_huffman_bytes", "weights_deflate_bytes"):  # fmt: skip
            if key in s:
                row[key] = s[key]
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass
class CompressionSummary:
    """What the notebook shows and the figure draws: the headline sparsity stage by stage, and the sweep."""

    stages: pd.DataFrame  # ``stages`` at the headline sparsity
    sweep: pd.DataFrame
    stored: list[StoredRun]


def summarize(plan: Plan, stored: list[StoredRun]) -> CompressionSummary:
    """The headline sparsity's stages and the sweep over every sparsity."""
    return CompressionSummary(stages(plan, stored, plan.params.headline_sparsity), sweep(plan, stored), stored)


def run_facts(summary: CompressionSummary) -> str:
    """What nbval checks: each stage's bytes and accuracy, and the sweep's (seeded runs; latencies left out)."""
    table = summary.stages
    headline = table[["stage", "bytes", "accuracy"]].assign(smaller=table["smaller"].round(2)).to_string(index=False)
    swept = summary.sweep.drop(columns=["int8_max_abs_diff"], errors="ignore").round(4).astype(object).T
    return f"{headline}\n{swept.to_string()}"


def measurements(summary: CompressionSummary) -> list[Any]:
    """What the notebook shows of the headline sparsity: every stage, its latency on the device among them."""
    return [summary.stages]

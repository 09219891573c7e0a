"""Gradient compression in Sync-SGD (qiao/method-grad-quant, qiao/method-grad-sparsify).

LeNet-MLP trained on MNIST by N emulated Pi devices with a parameter server
that averages every batch (``ps_sync``); each device sends its round delta
through one compressor of ``edgelab.sync.compress`` (fp32, 1-bit sign with and
without error feedback, TernGrad with and without clipping, QSGD at several
levels, top-k with local accumulation, random-k), and the server decodes
before it averages. Each run records the serialized bytes every device sent,
the global model's accuracy every few rounds, and the CPU time of every round
(compression included), from which the emulated time per step on a slow link
is composed (``edgelab.emulation.timeline.compose``).

Beside the training runs, one device trains a few batches in fp32 from the
seeded initial weights and returns the deltas it would send: their measured
density per layer, and the empirical unbiasedness check of random-k over many
draws (pure numpy on those real deltas), come from them.

Compression applies to the upload only: the server still broadcasts the dense
weights, which the time per step shows.

``repeats`` runs every scheme and the gradient sample again from seeds
``seed + r`` (other initial weights and batch order): the accuracies and the
density the claims judge then rest on that many runs (``final_accuracies``,
``sparsity_runs``); the tables and curves show the first.
"""

from __future__ import annotations

import math
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
from edgelab.emulation.profiles import DeviceProfile, get_profile
from edgelab.emulation.timeline import Topology, compose
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.runtime import tasks as runtime
from edgelab.sync.compress import QSGD, RandomK, Sign, TernGrad, build_compressor
from edgelab.training.config import TrainConfig, check
from edgelab.training.data_parallel import train

EXPERIMENT = "qiao_grad_compression"
# 2: a device builds its optimizer without tracing Keras' own train step, which it never runs (less
#    memory held, less warm-up CPU), and its many-batch loop is traced once for every shape: an
#    epoch-long round 0 no longer holds a retrace in its measured CPU time (edgelab.runtime.plugin).
MEASUREMENT_REVISION = 2
#: The schemes of each id, fp32 (``"none"``) first in both.
QUANT = ("none", "sign", "sign_ef", "terngrad", "terngrad_noclip", "qsgd:1", "qsgd:2", "qsgd:4", "qsgd:16")
SPARSIFY = ("none", "topk:0.1", "topk:0.01", "topk:0.001", "dgc:0.01:0.9", "esgd:0.01", "randomk:0.1")
#: The run that samples real fp32 deltas on one device (density, random-k check).
GRADIENTS = "gradients"
#: Largest shares of a delta's coordinates whose share of its squared norm is reported.
TOP_SHARES = (0.1, 0.01, 0.001)

#: parameters papermill injects for the paper-sized run: a full epoch of MNIST on 4 devices (235 rounds)
FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "steps": None,
    "sample_limit": None,
    "test_limit": None,
    "batch_size": 64,
    "eval_every": 20,
    "eval_limit": 2000,
    "budget_rounds": 20,
    "gradient_batches": 20,
    "draws": 2000,
    "repeats": 3,
}


@dataclass(frozen=True)
class GradCompressionParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    schemes: tuple[str, ...] = tuple(dict.fromkeys(QUANT + SPARSIFY))
    n_devices: int = 4
    batch_size: int = 32
    # Batches per device (rounds of the run); None: the whole shard.
    steps: int | None = 4
    learning_rate: float = 0.1
    sample_limit: int | None = 512
    test_limit: int | None = 300
    # Rounds between evaluations of the global model (the points of the accuracy-against-bytes curves).
    eval_every: int = 2
    eval_limit: int | None = None
    # The byte budget: what fp32 uploads (all devices) in this many rounds.
    budget_rounds: int = 2
    # The slow link every device sits behind, for the time per step.
    link_mbps: float = 10.0
    # fp32 deltas sampled on one device (density per layer), and random-k draws over the first one.
    gradient_batches: int = 2
    draws: int = 100
    randomk_density: float = 0.1
    device_profile: str = "pi3b"
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0
    monitor_interval_s: float = 5.0
    # Runs of every scheme and of the gradient sample, each from seed + r (the claims' accuracies need 3).
    repeats: int = 1

    def __post_init__(self) -> None:
        if not self.schemes or "none" not in self.schemes:
            raise ConfigError("schemes", self.schemes, "a list of compressor specs that includes 'none' (fp32)")
        for spec in self.schemes:
            build_compressor(spec)  # raises ConfigError("compressor", ...) for a bad one
        for name in ("n_devices", "batch_size", "eval_every", "budget_rounds", "gradient_batches", "draws", "repeats"):
            checks.integer(name, getattr(self, name), at_least=1)
        checks.integer("steps", self.steps, at_least=1, none="the whole shard")
        checks.number("link_mbps", self.link_mbps, above=0, unit="Mbit/s")
        checks.number("randomk_density", self.randomk_density, above=0, below=1)  # a keep probability
        self.config("none")  # checks steps, learning_rate and the rest through TrainConfig

    def config(self, scheme: str, repeat: int = 0) -> TrainConfig:
        """The training run of one scheme (its ``repeat``: from seed + repeat)."""
        return TrainConfig(
            model="mlp",
            n_devices=self.n_devices,
            batch_size=self.batch_size,
            sync_every="batch",
            strategy="ps_sync",
            learning_rate=self.learning_rate,
            seed=self.seed + repeat,
            eval_every=self.eval_every,
            eval_limit=self.eval_limit,
            max_steps=self.steps,
            compressor=scheme,
        )


@dataclass(frozen=True)
class RunKey:
    """A training run of one scheme, or the gradient sample (``scheme`` = ``GRADIENTS``); ``repeat`` r: seed + r."""

    scheme: str
    repeat: int = 0


@dataclass
class Plan(harness.Plan):
    """Validated work: the data, the device, every run."""

    params: GradCompressionParams
    dataset: Dataset
    profile: DeviceProfile
    runs: list[RunKey]

    def describe(self) -> str:
        """The runs and the digits."""
        return f"{len(self.runs)} runs; data: {self.dataset.source}, {self.dataset.n_train} training digits"

    def run_params(self, run: RunKey) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        p, d = self.params, self.dataset
        params: dict[str, Any] = {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "dataset": {"name": d.name, "source": d.source, "n_train": d.n_train, "n_test": d.n_test},
            "device_profile": self.profile.name,
            "cluster": p.scheduler_address or "emulated",
        }
        if run.scheme == GRADIENTS:
            return {**params, "gradients": {"batches": p.gradient_batches, **p.config("none", run.repeat).to_dict()}}
        return {**params, "train": p.config(run.scheme, run.repeat).to_dict()}

    def devices_needed(self, runs: list[RunKey]) -> int:
        """The run's devices (the gradient sample uses the first)."""
        return self.params.n_devices

    def execute(self, cluster: DeviceCluster, run: RunKey, context: dict[str, Any]) -> Outcome:
        """Train one scheme, or sample fp32 deltas on the first device."""
        p = self.params
        common = {"cluster": context["cluster"], "calibration": context["calibration"]}
        if run.scheme == GRADIENTS:
            deltas = sample_deltas(cluster, self.dataset, p.config("none", run.repeat), p.gradient_batches)
            arrays = {f"b{b}_l{i}": a for b, delta in enumerate(deltas) for i, a in enumerate(delta)}
            return {**common, "batches": len(deltas), "layers": len(deltas[0])}, {}, arrays
        cfg = p.config(run.scheme, run.repeat)
        result = train(cluster, self.dataset, cfg, monitor_interval_s=p.monitor_interval_s)
        summary = {
            **common,
            "host": result.host,
            "dataset": self.dataset.provenance(),
            "weights_sha256": result.weights_sha256,
        }
        tables = {"records": result.records, "evaluations": result.evaluations, "progress": result.progress}
        return summary, tables


def sample_deltas(cluster: DeviceCluster, dataset: Dataset, cfg: TrainConfig, batches: int) -> list[list[np.ndarray]]:
    """The fp32 deltas the first device sends for its first ``batches`` batches, training from the initial weights.

    The device's own round task (``runtime.train_round``), one batch per round,
    each from the weights the last one left: what plain SGD on that device sends.
    """
    device = cluster.devices[0]
    client, pin = cluster.client, {"resources": {device_resource(device): 1}, "pure": False}
    run_id = f"{EXPERIMENT}-{uuid.uuid4().hex[:8]}"
    n = min(dataset.n_train, batches * cfg.batch_size)
    x, y = dataset.x_train[:n], dataset.y_train[:n]
    try:
        client.submit(runtime.load_shard, run_id, cfg.spec, x, y, cfg.batch_size, 1, **pin).result()
        weights = client.submit(runtime.initial_weights, cfg.spec, **pin).result()
        deltas = []
        for b in range(math.ceil(n / cfg.batch_size)):
            task = runtime.RoundTask(run_id, cfg.spec, 0, b, 0, b, 1, cfg.batch_size, cfg.seed)
            delta, _ = client.submit(runtime.train_round, task, weights, **pin).result()
            deltas.append([np.asarray(d) for d in delta])
            weights = [w + d for w, d in zip(weights, deltas[-1], strict=True)]
    finally:
        client.run(runtime.release, run_id, on_error="ignore")
    return deltas


def prepare(**kwargs: Any) -> Plan:
    """Load the data and check every run, before any cluster work."""
    params = harness.parse_params(GradCompressionParams, kwargs, sequences=("schemes",))
    profile = get_profile(params.device_profile)
    dataset = load_dataset(
        "mnist", data_dir=params.data_dir, sample_limit=params.sample_limit, test_limit=params.test_limit,
        seed=params.seed,
    )  # fmt: skip
    for scheme in params.schemes:
        check(params.config(scheme), n_train=dataset.n_train, profile=profile)
    runs = [RunKey(s, r) for r in range(params.repeats) for s in (*params.schemes, GRADIENTS)]
    return Plan(params, dataset, profile, runs)


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: no source supplies MNIST; None if one does."""
    return harness.missing_dataset("mnist", data_dir)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = GradCompressionParams

pending = harness.pending
run = harness.run


# ------------------------------------------------------------ summaries ----


def _trained(plan: Plan, stored: list[StoredRun]) -> dict[str, StoredRun]:
    """The first run of every scheme, by scheme (what the tables and curves show)."""
    return {k.scheme: r for k, r in harness.by_run(plan, stored).items() if k.scheme != GRADIENTS and not k.repeat}


def final_accuracies(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """A row per training run, repeats included: scheme, repeat, rounds and the global model's final accuracy."""
    rows = [
        {
            "scheme": key.scheme,
            "repeat": key.repeat,
            "rounds": int(r.tables["records"]["round"].nunique()),
            "accuracy": float(r.tables["evaluations"].iloc[-1]["accuracy"]),
        }
        for key, r in harness.by_run(plan, stored).items()
        if key.scheme != GRADIENTS
    ]
    return pd.DataFrame(rows)


def slow_link(plan: Plan) -> DeviceProfile:
    """The device profile behind the slow link."""
    return replace(plan.profile, link_mbps=plan.params.link_mbps)


#: The parameter server is a machine of its own: every device's exchange crosses the slow link.
TOPOLOGY = Topology(ps_link="shared", master_is_device=False)


def curves(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """Per scheme and evaluation: rounds, bytes uploaded by all devices so far, and the global model's accuracy."""
    rows = []
    for scheme, result in _trained(plan, stored).items():
        records, progress = result.tables["records"], result.tables["progress"]
        uploaded = records.groupby("round")["bytes_sent"].sum().cumsum()
        for _, point in progress.iterrows():
            rounds = int(point["updates"])
            rows.append(
                {
                    "scheme": scheme,
                    "rounds": rounds,
                    "uploaded_bytes": int(uploaded.iloc[rounds - 1]),
                    "accuracy": float(point["accuracy"]),
                }
            )
    return pd.DataFrame(rows)


def summarize(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """A row per scheme: bytes per step, accuracy after the run and at the byte budget, time per step on the link."""
    trained = _trained(plan, stored)
    points = curves(plan, stored)
    budget = byte_budget(plan, stored)
    rows = []
    for scheme, result in trained.items():
        records = result.tables["records"]
        speed = float(result.summary["calibration"]["speed_factor"])
        clock = compose(records, slow_link(plan), speed_factor=speed, topology=TOPOLOGY)
        within = points[(points["scheme"] == scheme) & (points["uploaded_bytes"] <= budget) & (points["rounds"] > 0)]
        final = result.tables["evaluations"].iloc[-1]
        rows.append(
            {
                "scheme": scheme,
                "rounds": int(records["round"].nunique()),
                "bytes_per_step": float(records["bytes_sent"].mean()),
                "smaller": float(records["bytes_sent_dense"].mean() / records["bytes_sent"].mean()),
                "accuracy": float(final["accuracy"]),
                "accuracy_at_budget": float(within["accuracy"].iloc[-1]) if len(within) else float("nan"),
                "rounds_in_budget": int(within["rounds"].iloc[-1]) if len(within) else 0,
                "step_s": float(clock["round_s"].mean()),
                "compute_s": float(clock["compute_max_s"].mean()),
                "comm_s": float(clock["comm_s"].mean()),
                "device_cpu_ms": 1000 * float(records["cpu_s"].mean()),
            }
        )
    return pd.DataFrame(rows)


def byte_budget(plan: Plan, stored: list[StoredRun]) -> float:
    """The byte budget: what fp32 uploads in ``budget_rounds`` rounds (all devices)."""
    dense = _trained(plan, stored)["none"].tables["records"]
    return plan.params.budget_rounds * float(dense.groupby("round")["bytes_sent"].sum().mean())


def _deltas(plan: Plan, stored: list[StoredRun], repeat: int = 0) -> list[list[np.ndarray]]:
    result = next(r for k, r in harness.by_run(plan, stored).items() if k.scheme == GRADIENTS and k.repeat == repeat)
    s = result.summary
    return [[result.arrays[f"b{b}_l{i}"] for i in range(s["layers"])] for b in range(s["batches"])]


#: LeNet-MLP's weights in Keras order (edgelab.models.builtin, "mlp"): 109,386 parameters.
LENET_MLP = ((784, 128), (128,), (128, 64), (64,), (64, 10), (10,))
LAYERS = tuple(("kernel " if len(s) == 2 else "bias ") + "x".join(map(str, s)) for s in LENET_MLP)


def density(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """Per layer, the mean over the sampled fp32 deltas of how sparse they are.

    ``zero``: share of coordinates exactly 0; ``for_99``: the smallest share
    of coordinates holding 99% of the delta's squared norm; ``top_<q>``: the
    share of the squared norm the largest ``q`` of the coordinates hold.
    """
    deltas = _deltas(plan, stored)
    rows = []
    for i in range(len(deltas[0])):
        stats = [_sparsity(np.asarray(d[i], np.float64).ravel()) for d in deltas]
        row: dict[str, Any] = {
            "layer": LAYERS[i] if len(deltas[0]) == len(LAYERS) else str(i),
            "params": deltas[0][i].size,
        }
        row.update({k: float(np.mean([s[k] for s in stats])) for k in stats[0]})
        rows.append(row)
    everything = [_sparsity(np.concatenate([np.ravel(a) for a in d]).astype(np.float64)) for d in deltas]
    rows.append(
        {"layer": "all", "params": sum(a.size for a in deltas[0]),
         **{k: float(np.mean([s[k] for s in everything])) for k in everything[0]}}
    )  # fmt: skip
    return pd.DataFrame(rows)


def sparsity_runs(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """A row per gradient sample (repeats included): the whole delta's sparsity, the mean over its batches."""
    repeats = sorted(k.repeat for k in harness.by_run(plan, stored) if k.scheme == GRADIENTS)
    rows = []
    for repeat in repeats:
        stats = [_sparsity(np.concatenate([np.ravel(a) for a in d]).astype(np.float64))
                 for d in _deltas(plan, stored, repeat)]  # fmt: skip
        rows.append({"repeat": repeat, **{k: float(np.mean([s[k] for s in stats])) for k in stats[0]}})
    return pd.DataFrame(rows)


def _sparsity(x: np.ndarray) -> dict[str, float]:
    energy = np.sort(x**2)[::-1]
    total = energy.sum()
    cumulative = np.cumsum(energy) / total if total > 0 else np.ones_like(energy)
    out = {"zero": float(np.mean(x == 0)), "for_99": (int(np.searchsorted(cumulative, 0.99)) + 1) / x.size}
    for q in TOP_SHARES:
        k = max(1, math.ceil(q * x.size))
        out[f"top_{q:g}"] = float(cumulative[k - 1])
    return out


def randomk_check(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """Random-k over many seeded draws of the first real delta: the mean's error, with and without the 1/p rescale.

    Rescaled, the mean of M draws has no bias: its expected squared error is
    pure variance, (1 - p) / (p M) ||g||^2, so its relative error should be
    sqrt((1 - p) / (p M)). Without the rescale the mean tends to p g: a
    relative error of 1 - p that more draws do not remove.
    """
    p = plan.params
    g = [np.asarray(a, np.float64) for a in _deltas(plan, stored)[0]]
    c = RandomK(density=p.randomk_density, spec=f"randomk:{p.randomk_density}")
    rng = np.random.default_rng(p.seed)
    total = [np.zeros_like(a) for a in g]
    for _ in range(p.draws):
        total = [t + d for t, d in zip(total, c.decode(c.encode(g, rng)), strict=True)]
    norm = math.sqrt(sum(float(np.sum(a**2)) for a in g))
    rescaled = [t / p.draws for t in total]
    plain = [m * p.randomk_density for m in rescaled]  # the same draws, kept values not rescaled
    dp = p.randomk_density

    def error(mean: list[np.ndarray]) -> float:
        return math.sqrt(sum(float(np.sum((m - a) ** 2)) for m, a in zip(mean, g, strict=True))) / norm

    return pd.DataFrame(
        [
            {"estimator": "random-k, kept x/p (unbiased)", "draws": p.draws, "density": dp,
             "relative_error": error(rescaled), "expected": math.sqrt((1 - dp) / (dp * p.draws))},
            {"estimator": "random-k, kept x (no rescale)", "draws": p.draws, "density": dp,
             "relative_error": error(plain), "expected": 1 - dp},
        ]
    )  # fmt: skip


def payload_ratios(plan: Plan) -> pd.DataFrame:
    """Bytes of each scheme's arrays for one LeNet-MLP delta against fp32, before the pickle's framing.

    Deterministic (the shapes decide it; for random-k the seeded mask): the
    catalog's derived values are 32x for 1 bit and at least 16x for ternary,
    before the per-tensor scale factors (``scales_bytes``: a float32 per tensor).
    """
    delta = [np.full(s, 0.01, np.float32) for s in LENET_MLP]
    dense = 4 * sum(math.prod(s) for s in LENET_MLP)
    rows = []
    for scheme in plan.params.schemes:
        c = build_compressor(scheme)
        payload = dense if c is None else c.encode(delta, np.random.default_rng(0)).payload_bytes
        scales = 4 * len(LENET_MLP) if isinstance(c, Sign | TernGrad | QSGD) else 0
        rows.append(
            {"scheme": scheme, "payload_bytes": payload, "scales_bytes": scales, "smaller": dense / payload,
             "smaller_before_scales": dense / (payload - scales)}
        )  # fmt: skip
    return pd.DataFrame(rows)


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: ``payload_ratios``, fixed by the shapes."""
    return payload_ratios(plan).round(3).to_string(index=False)


def run_facts(plan: Plan, stored: list[StoredRun]) -> str:
    """What nbval checks: each scheme's bytes on the wire and seeded accuracies, the deltas' density, random-k's."""
    columns = ["scheme", "rounds", "bytes_per_step", "smaller", "accuracy", "accuracy_at_budget"]
    return "\n".join(
        [
            summarize(plan, stored)[columns].round(4).to_string(index=False),
            density(plan, stored).round(4).to_string(index=False),
            randomk_check(plan, stored).round(4).to_string(index=False),
        ]
    )


def measurements(plan: Plan, stored: list[StoredRun]) -> list[Any]:
    """What the notebook shows that varies: the emulated time per step behind the slow link (host CPU times)."""
    return [summarize(plan, stored)[["scheme", "step_s", "compute_s", "comm_s", "device_cpu_ms"]].round(3)]

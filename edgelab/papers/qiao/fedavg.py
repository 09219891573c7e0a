"""The survey's federated learning (qiao/method-fedavg): FedAvg, sketched updates, a shared subset, local SGD.

Qiao et al. (line 287) describe federated averaging [71]: each round a random
share C of the devices trains B-sized batches for E local epochs on its own
data and a server averages the results; sketched updates [72] cut the upload,
and a small shared global subset [73] raises accuracy on non-IID data. They
give no C, E, B or rounds. Here every run is ``edgelab.training.data_parallel`` on emulated Pi
devices (one Dask worker each) with the parameter server in the client
process (``ps_sync``, updates weighted by samples): LeNet-MLP on MNIST, shards
IID or label-skewed (two label chunks per device), every round evaluated.
Beside FedAvg: the label-skewed shards with a 5% shared subset on every device
(Zhao et al. 2018), the random-mask "sketched" update (``randomk:<density>``,
``edgelab.sync.compress``), and local SGD with a fixed period of H batches
against AdaComm's adaptive one (``edgelab.sync.local_sgd``).

What crosses the wire after the data load is read from each run's records
(one row per device and round): ``transfer_log`` checks that every upload is
exactly the model's parameter bytes, or exactly the payload the compressor
makes for that device's round (rebuilt here from the same seed), whatever the
number of samples the device trained on.

``repeats`` trains the two runs qiao/C27's accuracy claim compares (the
label-skewed base and the shared subset) again from seeds ``seed + r``: other
shards, initial weights and draws, so their accuracies rest on that many runs.

Papers: McMahan et al., "Communication-Efficient Learning of Deep Networks from
Decentralized Data", AISTATS 2017 (arxiv.org/abs/1602.05629); Konecny et al.,
"Federated Learning: Strategies for Improving Communication Efficiency", 2016
(arxiv.org/abs/1610.05492); Zhao et al., "Federated Learning with Non-IID
Data", 2018 (arxiv.org/abs/1806.00582); Wang and Joshi, "Adaptive
Communication Strategies to Achieve the Best Error-Runtime Trade-off in
Local-Update SGD", SysML 2019 (arxiv.org/abs/1810.08313).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.data import Dataset, load_dataset
from edgelab.emulation.device_model import for_profile as device_model_for
from edgelab.emulation.profiles import DeviceProfile, get_profile
from edgelab.emulation.timeline import compose
from edgelab.models.costs import weight_count
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.training.config import PARTITIONS
from edgelab.training.data_parallel import TrainConfig, check, samples_per_device, steps_per_device, train

EXPERIMENT = "qiao_fedavg"
# 2: a device builds its optimizer without tracing Keras' own train step, which it never runs (less
#    memory held, less warm-up CPU), and its many-batch loop is traced once for every shape: an
#    epoch-long round 0 no longer holds a retrace in its measured CPU time (edgelab.runtime.plugin).
MEASUREMENT_REVISION = 2
MODEL = "mlp"  # LeNet-MLP (edgelab.models.builtin)
PROFILES = ("smoke", "full")
SWEEPS = ("one_at_a_time", "grid")
#: What a run shows: plain FedAvg, FedAvg with the shared subset, with sketched updates, or local SGD.
KINDS = ("fedavg", "shared", "sketched", "local_sgd")

FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "devices": 10,
    "train_samples": None,
    "test_samples": None,
    "rounds": 20,
    "client_fractions": [0.1, 0.5, 1.0],
    "local_epochs": [1, 2, 5],
    "batch_sizes": [10, 50],
    "sweep": "grid",
    "local_sgd_epochs": 5,
    "repeats": 3,
}


@dataclass(frozen=True)
class FedavgParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    profile: str = "smoke"
    devices: int = 4
    train_samples: int | None = 500
    test_samples: int | None = 300
    rounds: int = 4
    partitions: tuple[str, ...] = ("iid", "label")
    client_fractions: tuple[float, ...] = (0.5, 1.0)
    local_epochs: tuple[int, ...] = (1, 2)
    batch_sizes: tuple[int, ...] = (10,)
    sweep: str = "one_at_a_time"
    shared_fraction: float = 0.05
    compressor: str = "randomk:0.1"
    local_sgd_period: int = 10  # batches per round (H); the adaptive rule starts here and shortens it
    local_sgd_epochs: int = 2
    learning_rate: float = 0.05
    device_profile: str = "pi3b"
    monitor_interval_s: float = 5.0
    repeats: int = 1  # runs (seeds) of the label-skewed base and the shared subset, whose accuracies C27 compares
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        checks.choice("profile", self.profile, PROFILES)
        checks.choice("sweep", self.sweep, SWEEPS)
        for name in ("devices", "rounds", "local_sgd_period", "local_sgd_epochs", "repeats"):
            checks.integer(name, getattr(self, name), at_least=1)
        for name in ("client_fractions", "local_epochs", "batch_sizes", "partitions"):
            if not getattr(self, name):
                raise ConfigError(name, getattr(self, name), "a non-empty list")
        checks.choices("partitions", self.partitions, PARTITIONS)
        checks.integer("train_samples", self.train_samples, at_least=1, none="all")
        checks.integer("test_samples", self.test_samples, at_least=1, none="all")
        checks.number("shared_fraction", self.shared_fraction, at_least=0, at_most=1)
        if 1.0 not in self.client_fractions:
            raise ConfigError("client_fractions", self.client_fractions, "a list holding 1.0 (the base: every device)")
        checks.number("monitor_interval_s", self.monitor_interval_s, above=0, unit="seconds")
        self.runs()  # every setting checked by TrainConfig now, before any data loads

    def fedavg(self, partition: str, fraction: float, epochs: int, batch: int, **extra: Any) -> TrainConfig:
        """One FedAvg run: ``rounds`` rounds of ``epochs`` local epochs on a share ``fraction`` of the devices."""
        return TrainConfig(
            model=MODEL, n_devices=self.devices, epochs=self.rounds * epochs, batch_size=batch, sync_every="epoch",
            sync_period=epochs, partition=partition, client_fraction=fraction, learning_rate=self.learning_rate,
            seed=self.seed, **extra,
        )  # fmt: skip

    def runs(self) -> list[FedRun]:
        """Every run, the base (C=1, the smallest E, the first B) first; then the variants."""
        e0, b0 = min(self.local_epochs), self.batch_sizes[0]
        if self.sweep == "grid":
            cells = list(itertools.product(self.partitions, self.client_fractions, self.local_epochs, self.batch_sizes))
            cells.sort(key=lambda c: (c[0], c[1] != 1.0, c[2] != e0, c[3] != b0))
        else:
            # The base for every partition; each of C, E and B varied alone from it on the first partition.
            first = self.partitions[0]
            cells = [(p, 1.0, e0, b0) for p in self.partitions]
            cells += [(first, c, e0, b0) for c in self.client_fractions if c != 1.0]
            cells += [(first, 1.0, e, b0) for e in self.local_epochs if e != e0]
            cells += [(first, 1.0, e0, b) for b in self.batch_sizes if b != b0]
        runs = [FedRun("fedavg", self.fedavg(*cell)) for cell in dict.fromkeys(cells)]
        if "label" in self.partitions and self.shared_fraction > 0:
            runs.append(FedRun("shared", self.fedavg("label", 1.0, e0, b0, shared_fraction=self.shared_fraction)))
        if self.compressor != "none":
            runs.append(FedRun("sketched", self.fedavg(self.partitions[0], 1.0, e0, b0, compressor=self.compressor)))
        local = TrainConfig(
            model=MODEL, n_devices=self.devices, epochs=self.local_sgd_epochs, batch_size=b0, sync_every="batch",
            sync_period=self.local_sgd_period, partition=self.partitions[0], learning_rate=self.learning_rate,
            seed=self.seed, eval_every=1,
        )  # fmt: skip
        runs += [FedRun("local_sgd", local), FedRun("local_sgd", replace(local, sync_period_rule="adaptive"))]
        # C27's accuracy claim compares the label-skewed base with the shared subset: each again from other seeds.
        base = self.fedavg("label", 1.0, e0, b0)
        compared = [r for r in runs if r.kind == "shared" or (r.kind == "fedavg" and r.cfg == base)]
        runs += [
            FedRun(r.kind, replace(r.cfg, seed=self.seed + k), k) for k in range(1, self.repeats) for r in compared
        ]
        return runs


@dataclass(frozen=True)
class FedRun:
    """One training run and what it shows."""

    kind: str
    cfg: TrainConfig
    repeat: int = 0  # 0: the run; k: the same settings again from seed + k

    @property
    def label(self) -> str:
        """``label C=0.5 E=2 B=10 shared 5%``: the settings that tell this run from the others (and its repeat)."""
        c = self.cfg
        if self.kind == "local_sgd":
            return f"local SGD {c.partition} H={c.sync_period} {c.sync_period_rule} B={c.batch_size}"
        parts = [c.partition, f"C={c.client_fraction:g}", f"E={c.sync_period}", f"B={c.batch_size}"]
        if c.shared_fraction:
            parts.append(f"shared {c.shared_fraction:.0%}")
        if c.compressor != "none":
            parts.append(c.compressor)
        if self.repeat:
            parts.append(f"(repeat {self.repeat})")
        return " ".join(parts)


@dataclass
class Plan(harness.Plan):
    """Validated work: the data, the device, every run."""

    params: FedavgParams
    dataset: Dataset
    profile: DeviceProfile
    runs: list[FedRun]

    def describe(self) -> str:
        """The runs and the digits."""
        return f"{len(self.runs)} runs; digits: {self.dataset.source}"

    def run_params(self, run: FedRun) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        d = self.dataset
        return {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "kind": run.kind,
            "train": run.cfg.to_dict(),
            "dataset": {"name": d.name, "source": d.source, "n_train": d.n_train, "n_test": d.n_test},
            "device_profile": self.profile.name,
            "cluster": self.params.scheduler_address or "emulated",
        }

    def devices_needed(self, runs: list[FedRun]) -> int:
        """Every run uses all the devices (a share of them trains in each round)."""
        return self.params.devices

    def setup(self, cluster: DeviceCluster) -> dict[str, Any]:
        """What every run records: the cluster (no host calibration: the clock is the profile's device model)."""
        return {"cluster": cluster.info}

    def execute(self, cluster: DeviceCluster, run: FedRun, context: dict[str, Any]) -> Outcome:
        """Train one run; keep its per-round records (the transfer log), evaluations and shards."""
        result = train(cluster, self.dataset, run.cfg, monitor_interval_s=self.params.monitor_interval_s)
        summary = {
            "cluster": context["cluster"],
            "dataset": self.dataset.provenance(),
            "host": result.host,
            "weights_sha256": result.weights_sha256,
            "weight_shapes": [list(w.shape) for w in result.weights],
            "weight_dtypes": [str(w.dtype) for w in result.weights],
        }
        # The compressor object a record names is the run's own (its spec is in the key).
        records = result.records.drop(columns=["compressor"], errors="ignore")
        tables = {"records": records, "evaluations": result.evaluations, "shards": result.shards}
        if len(result.progress):
            tables["progress"] = result.progress
        return summary, tables


def prepare(**kwargs: Any) -> Plan:
    """Load MNIST and check every run, before any cluster work."""
    params = harness.parse_params(
        FedavgParams, kwargs, sequences=("partitions", "client_fractions", "local_epochs", "batch_sizes")
    )
    profile = get_profile(params.device_profile)
    dataset = load_dataset(
        "mnist", data_dir=params.data_dir, sample_limit=params.train_samples, test_limit=params.test_samples,
        seed=params.seed,
    )  # fmt: skip
    runs = params.runs()
    for run in runs:
        check(run.cfg, n_train=dataset.n_train, profile=profile)
    per_epoch = min(steps_per_device(runs[-1].cfg, dataset.n_train))
    if params.local_sgd_period > per_epoch:
        raise ConfigError(
            "local_sgd_period", params.local_sgd_period, f"at most the {per_epoch} batches of a device's epoch"
        )
    return Plan(params, dataset, profile, runs)


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: no source supplies MNIST; None if one does."""
    return harness.missing_dataset("mnist", data_dir)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = FedavgParams

pending = harness.pending
run = harness.run


# ------------------------------------------------------------ summaries ----


def _local_epochs(records: pd.DataFrame) -> np.ndarray:
    """Local epochs of each record's round (1 under local SGD)."""
    for column in ("local_epochs", "epochs"):
        if column in records:
            return records[column].to_numpy(dtype=float)
    return np.ones(len(records))


def curves(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """A row per (run, evaluated round): rounds, uploads and bytes uploaded so far, test accuracy."""
    rows = []
    for run, result in harness.by_run(plan, stored).items():
        records = result.tables["records"]
        per_round = records.groupby("round").agg(uploads=("device", "count"), bytes_up=("bytes_sent", "sum"))
        cumulative = per_round.cumsum()
        scores = result.tables.get("progress")
        if scores is None or scores.empty:
            scores = result.tables["evaluations"].rename(columns={"rounds": "updates"})
        for row in scores.itertuples():
            done = int(row.updates)
            rows.append(
                {
                    "run": run.label,
                    "kind": run.kind,
                    "repeat": run.repeat,
                    "partition": run.cfg.partition,
                    "round": done,
                    "uploads": int(cumulative["uploads"].iloc[done - 1]),
                    "bytes_up": int(cumulative["bytes_up"].iloc[done - 1]),
                    "accuracy": float(row.accuracy),
                }
            )
    return pd.DataFrame(rows)


def summarize(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """A row per run: rounds, uploads, bytes up, final accuracy, and its time on the profile's device model.

    The emulated time composes every round (``edgelab.emulation.timeline.compose``): the
    slowest trained device's compute from the device model (steps and samples),
    plus each device's pull and push over the profile's link.
    """
    model = device_model_for(plan.profile.name)
    rows = []
    for run, result in harness.by_run(plan, stored).items():
        records = result.tables["records"]
        evaluations = result.tables["evaluations"]
        compute = model.compute_s(MODEL, records["steps"].to_numpy(dtype=float) * _local_epochs(records),
                                  records["samples"])  # fmt: skip
        clock = compose(records, plan.profile, compute_s=np.asarray(compute, dtype=float))
        rows.append(
            {
                "run": run.label,
                "kind": run.kind,
                "repeat": run.repeat,
                "rounds": int(records["round"].nunique()),
                "uploads": len(records),
                "bytes_per_upload": float(records["bytes_sent"].mean()),
                "bytes_up": int(records["bytes_sent"].sum()),
                "samples_trained": int(records["samples"].sum()),
                "accuracy": float(evaluations["accuracy"].iloc[-1]),
                "device_s": float(clock["elapsed_s"].iloc[-1]),
            }
        )
    return pd.DataFrame(rows)


def expected_upload_bytes(run: FedRun, records: pd.DataFrame, shapes: list[list[int]], dtypes: list[str]) -> np.ndarray:
    """What each record's upload must be: the parameters' bytes, or the compressor's payload for that round.

    A compressed upload is rebuilt from what the device seeds it with (seed,
    device, round) on zeros of the parameters' shapes: the mask, and so the
    payload's size, depend on nothing else; never on the device's samples.
    """
    zeros = [np.zeros(s, dtype=d) for s, d in zip(shapes, dtypes, strict=True)]
    dense = sum(z.nbytes for z in zeros)
    compressor = run.cfg.compression
    if compressor is None:
        return np.full(len(records), dense, dtype=np.int64)
    from edgelab.runtime.tasks import serialized_bytes
    from edgelab.sync.compress import compress_with_feedback

    sizes = []
    for r in records.itertuples():
        rng = np.random.default_rng([run.cfg.seed, int(r.device_index), int(r.round)])
        encoded, _ = compress_with_feedback(compressor, zeros, None, rng)
        sizes.append(serialized_bytes(encoded))
    return np.array(sizes, dtype=np.int64)


def transfer_log(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """A row per run: what the devices received as data (once), and what they uploaded after, checked exactly.

    ``uploads_as_expected``: every record's ``bytes_sent`` equals
    ``expected_upload_bytes``; ``downloads_are_weights``: every record's
    ``bytes_received`` equals the parameters' bytes. The samples a device
    trained per round vary (local epochs, shard sizes) while these do not.
    """
    rows = []
    for run, result in harness.by_run(plan, stored).items():
        records, shards = result.tables["records"], result.tables["shards"]
        shapes, dtypes = result.summary["weight_shapes"], result.summary["weight_dtypes"]
        params = sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in zip(shapes, dtypes, strict=True))
        expected = expected_upload_bytes(run, records, shapes, dtypes)
        sent = records["bytes_sent"].to_numpy(dtype=np.int64)
        rows.append(
            {
                "run": run.label,
                "data_load_bytes": int(shards["bytes"].sum()),
                "parameter_bytes": params,
                "uploads": len(records),
                "upload_bytes_min": int(sent.min()),
                "upload_bytes_max": int(sent.max()),
                "uploads_as_expected": bool((sent == expected).all()),
                "downloads_are_weights": bool((records["bytes_received"] == params).all()),
                "dense_bytes_are_weights": bool((records["bytes_sent_dense"] == params).all()),
                "samples_min": int(records["samples"].min()),
                "samples_max": int(records["samples"].max()),
            }
        )
    return pd.DataFrame(rows)


def facts(plan: Plan) -> pd.DataFrame:
    """Values that depend only on the parameters: nbval checks them exactly."""
    rows = []
    for run in plan.runs:
        c = run.cfg
        rows.append(
            {
                "run": run.label,
                "devices_per_round": max(1, int(np.floor(c.client_fraction * c.n_devices + 1e-9))),
                "rounds_planned": c.epochs // c.epochs_per_round if c.sync_every == "epoch" else None,
                "samples_per_device": max(samples_per_device(c, plan.dataset.n_train)),
                "parameter_bytes": weight_count(MODEL) * 4,
            }
        )
    return pd.DataFrame(rows)


def settings(plan: Plan) -> dict[str, Any]:
    """The run settings every figure caption repeats."""
    p = plan.params
    return {**asdict(p), "n_train": plan.dataset.n_train, "n_test": plan.dataset.n_test}


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: ``facts``."""
    return facts(plan).to_string(index=False)


def run_facts(plan: Plan, stored: list[StoredRun]) -> str:
    """What nbval checks: per run its rounds, uploads, bytes and accuracy (seeded), then the transfer log."""
    table = summarize(plan, stored)[["run", "rounds", "uploads", "bytes_up", "samples_trained", "accuracy"]]
    return f"{table.round(3).to_string(index=False)}\n{transfer_log(plan, stored).to_string(index=False)}"


def measurements(plan: Plan, stored: list[StoredRun]) -> list[Any]:
    """What the notebook shows beside: each run's bytes per upload and emulated time on the device model."""
    return [summarize(plan, stored)[["run", "bytes_per_upload", "device_s"]]]

"""Lightweight-model cost formulas (qiao/fig3-5, eq-conv-cost ... eq-squeezenet-50x), counted and timed.

Qiao et al. (lines 262-279) state the cost of a standard convolution, of
MobileNet's depthwise separable one and their ratio 1/N + 1/K², MobileNet's
"8 to 9 times less computation", that group convolution cuts cost (and
ShuffleNet's channel shuffle mixes the groups), and SqueezeNet's "50 times
less parameters" than AlexNet. Here every count comes from real Keras layers
(``edgelab.models.conv_costs``) and is compared with the formula exactly; every
layer and network is also timed on one emulated Pi-class device worker: the
CPU time its process spends per call after a warm-up (median of repeats),
times the calibration's speed factor, is the emulated device time.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster, device_resource
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.emulation.profiles import DeviceProfile, get_profile
from edgelab.models import conv_costs as keras_costs
from edgelab.models.conv_costs import NETWORKS, ConvShape, build_network
from edgelab.papers import harness
from edgelab.papers.harness import Outcome

EXPERIMENT = "qiao_conv_costs"
MEASUREMENT_REVISION = 1
PROFILES = ("smoke", "full")
#: The layer kinds timed per grid point: the standard conv, the separable pair, and each of its two steps.
PAIR_KINDS = ("standard", "separable", "depthwise", "pointwise")
#: Each timed repeat runs the layer enough times to last this long on the host (a timer tick is not a cost).
MIN_REPEAT_S = 0.02
#: Host CPU seconds above which a call is measured once, not repeated.
SLOW_CALL_S = 1.0
#: A layer achieving less than this share of its kind's median MAC/s is an outlier: reported, and left out of one fit.
OUTLIER_SHARE = 0.05

#: The catalog's re-run (qiao/eq-conv-cost, eq-group-conv, eq-mobilenet-8to9x): what a run's ``reduction`` is against.
CATALOG: dict[str, Any] = {
    "kernels": (1, 3, 5, 7),
    "in_channels": (16, 32, 64, 128, 256),
    "out_channels": (16, 32, 64, 128, 256),
    "widths": (7, 14, 28, 56),
    "groups": (1, 2, 4, 8, 16, 32),
    "networks": NETWORKS,
    "network_batches": (1, 8),
}
#: The parameters whose product is the grid of layer pairs.
GRID_AXES = ("kernels", "in_channels", "out_channels", "widths")

FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "kernels": [1, 3, 5, 7],
    "in_channels": [16, 32, 64, 128, 256],
    "out_channels": [16, 32, 64, 128, 256],
    "widths": [7, 14, 28, 56],
    "groups": [1, 2, 4, 8, 16, 32],
    "networks": list(NETWORKS),
    "network_batches": [1, 8],
    "repeats": 5,
}


@dataclass(frozen=True)
class ConvCostParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    profile: str = "smoke"
    kernels: tuple[int, ...] = (3, 5)
    in_channels: tuple[int, ...] = (64,)
    out_channels: tuple[int, ...] = (16, 64, 256)
    widths: tuple[int, ...] = (28,)
    groups: tuple[int, ...] = (1, 4, 16)
    group_channels: int = 64  # M = N of the grouped 3×3 conv
    group_width: int = 28
    shuffle_channels: int = 12  # the connectivity matrices' channels and groups
    shuffle_groups: int = 3
    networks: tuple[str, ...] = ()  # networks timed (each is counted anyway); smoke times none
    network_batches: tuple[int, ...] = (1,)
    batch: int = 1  # images per call of a single layer
    repeats: int = 3
    device_profile: str = "pi4b"
    scheduler_address: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        checks.choice("profile", self.profile, PROFILES)
        for name in ("kernels", "in_channels", "out_channels", "widths", "groups", "network_batches"):
            values = getattr(self, name)
            if not values or not all(checks.is_integer(v) and v >= 1 for v in values):
                raise ConfigError(name, values, "a non-empty list of integers >= 1")
        for name in ("group_channels", "group_width", "shuffle_channels", "shuffle_groups", "batch", "repeats"):
            checks.integer(name, getattr(self, name), at_least=1)
        unknown = [n for n in self.networks if n not in NETWORKS]  # none timed is allowed (smoke)
        if unknown:
            raise ConfigError("networks", unknown[0], f"names among {', '.join(NETWORKS)}")
        get_profile(self.device_profile)
        checks.integer("seed", self.seed, at_least=0)
        self.pair_shapes()  # checks K, M, N, W
        self.group_shapes()  # checks that each G divides the channels
        ConvShape(1, self.shuffle_channels, self.shuffle_channels, 1, self.shuffle_groups)

    def pair_shapes(self) -> list[ConvShape]:
        """Every grid point: K × M × N × W."""
        return [
            ConvShape(k, m, n, w)
            for k in self.kernels
            for m in self.in_channels
            for n in self.out_channels
            for w in self.widths
        ]

    def group_shapes(self) -> list[ConvShape]:
        """The grouped 3×3 conv for each G."""
        c, w = self.group_channels, self.group_width
        return [ConvShape(3, c, c, w, g) for g in self.groups]


@dataclass(frozen=True)
class CostRun:
    """One timing task on the device: a grid point's layer pair, one grouped conv, or one network at a batch."""

    family: str  # "pair", "group" or "network"
    shape: ConvShape | None = None
    network: str = ""
    batch: int = 1

    def label(self) -> str:
        """What the run times, in a line."""
        return f"{self.network} batch {self.batch}" if self.shape is None else f"{self.family} {self.shape.label()}"


@dataclass
class Plan(harness.Plan):
    """Validated work: the grid, the grouped convs and the networks, each a timing run on one device."""

    params: ConvCostParams
    profile: DeviceProfile
    runs: list[CostRun]

    def describe(self) -> str:
        """The timing runs and the device."""
        return f"{len(self.runs)} timing runs on one {self.profile.name} device"

    def label(self, run: CostRun) -> str:
        """What the run times, in a line."""
        return run.label()

    @functools.cached_property
    def counts(self) -> Counts:
        """Every layer, grouped conv and network of the plan, counted from built layers (``count``), once."""
        return count(self)

    def run_params(self, run: CostRun) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        p = self.params
        return {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "family": run.family,
            "shape": asdict(run.shape) if run.shape else None,
            "network": run.network,
            "batch": run.batch,
            "repeats": p.repeats,
            "device_profile": p.device_profile,
            "seed": p.seed,
            "cluster": p.scheduler_address or "emulated",
        }

    def devices_needed(self, runs: list[CostRun]) -> int:
        """One device: every layer is timed alone on it."""
        return 1

    def execute(self, cluster: DeviceCluster, run: CostRun, context: dict[str, Any]) -> Outcome:
        """Build the run's layers on the device, time each, and put its CPU time on the device's clock."""
        p = self.params
        device = cluster.devices[0]
        future = cluster.client.submit(
            time_on_device,
            run.family,
            asdict(run.shape) if run.shape else None,
            run.network,
            run.batch,
            repeats=p.repeats,
            seed=p.seed,
            resources={device_resource(device): 1},
            pure=False,
        )
        records = pd.DataFrame(future.result())
        factor = float(context["calibration"]["speed_factor"])
        records["emulated_s"] = records["cpu_s"] * factor
        summary = {"device": device, "calibration": context["calibration"], "cluster": context["cluster"]}
        return summary, {"timings": records}


def prepare(**kwargs: Any) -> Plan:
    """Check every parameter and list the runs, before any cluster work."""
    seqs = ("kernels", "in_channels", "out_channels", "widths", "groups", "networks", "network_batches")
    params = harness.parse_params(ConvCostParams, kwargs, sequences=seqs)
    runs = [CostRun("pair", s, batch=params.batch) for s in params.pair_shapes()]
    runs += [CostRun("group", s, batch=params.batch) for s in params.group_shapes()]
    runs += [CostRun("network", network=n, batch=b) for n in params.networks for b in params.network_batches]
    profile = get_profile(params.device_profile)
    return Plan(params, profile, runs)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = ConvCostParams

pending = harness.pending
run = harness.run


# ------------------------------------------------------------ on the device ----


def time_on_device(
    family: str, shape: dict[str, int] | None, network: str, batch: int, *, repeats: int, seed: int
) -> list[dict[str, Any]]:
    """Time the run's models in this worker: a record per model (MACs, parameters, CPU and wall s per call)."""
    if family == "network":
        models = {network: build_network(network, seed=seed)}
    else:
        conv = ConvShape(**shape)  # type: ignore[arg-type]
        kinds = PAIR_KINDS if family == "pair" else ("standard",)
        models = {kind: keras_costs.build_layer(kind, conv, seed=seed) for kind in kinds}
    records = []
    for kind, model in models.items():
        cpu_s, wall_s, calls, repeated = time_calls(model, batch, repeats=repeats, seed=seed)
        records.append(
            {
                "kind": kind,
                "macs": keras_costs.counted_macs(model) * batch,
                "params": int(model.count_params()),
                "cpu_s": cpu_s,
                "wall_s": wall_s,
                "calls_per_repeat": calls,
                "repeats": repeated,
            }
        )
    return records


def time_calls(model: Any, batch: int, *, repeats: int, seed: int) -> tuple[float, float, int, int]:
    """Median process CPU and wall time per call of the traced model after a warm-up; calls per repeat, repeats.

    A call slower than ``SLOW_CALL_S`` after the warm-up is measured once: some oneDNN convolution shapes take
    seconds per call here (see the report), and repeating them would hold the device for minutes.
    """
    import tensorflow as tf

    x = tf.constant(np.random.default_rng(seed).random((batch, *model.input_shape[1:]), dtype=np.float32))
    call = tf.function(lambda t: model(t, training=False))
    call(x).numpy()  # traces (and, for groups > 1, compiles with XLA)
    # Process CPU time: TensorFlow computes in its own threads, which a thread clock would miss.
    cpu0, wall0 = time.process_time(), time.perf_counter()
    call(x).numpy()
    cpu_once, wall_once = time.process_time() - cpu0, time.perf_counter() - wall0
    if cpu_once > SLOW_CALL_S:
        return cpu_once, wall_once, 1, 1
    calls = max(1, math.ceil(MIN_REPEAT_S / max(wall_once, 1e-9)))
    cpu, wall = [], []
    for _ in range(repeats):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(calls):
            out = call(x)
        out.numpy()
        cpu.append((time.process_time() - cpu0) / calls)
        wall.append((time.perf_counter() - wall0) / calls)
    return float(np.median(cpu)), float(np.median(wall)), calls, repeats


# ------------------------------------------------------------ counts ----


def pair_counts(plan: Plan) -> pd.DataFrame:
    """Per grid point: counted MACs and parameters of both layers beside the formulas, and the exact ratio check."""
    rows = []
    for s in plan.params.pair_shapes():
        std = keras_costs.build_layer("standard", s, seed=plan.params.seed)
        sep = keras_costs.build_layer("separable", s, seed=plan.params.seed)
        c_std, c_sep = keras_costs.counted_macs(std), keras_costs.counted_macs(sep)
        rows.append(
            {
                "K": s.k,
                "M": s.m,
                "N": s.n,
                "W": s.w,
                "standard_macs": c_std,
                "formula_standard": s.standard_macs,
                "separable_macs": c_sep,
                "formula_separable": s.separable_macs,
                "standard_params": int(std.count_params()),
                "separable_params": int(sep.count_params()),
                "mac_ratio": c_sep / c_std,
                "formula_ratio": keras_costs.separable_ratio(k=s.k, n=s.n),
                # sep / std = 1/N + 1/K²  <=>  sep·K²·N = std·(K² + N): an identity in integers
                "ratio_exact": c_sep * s.k**2 * s.n == c_std * (s.k**2 + s.n),
            }
        )
    return pd.DataFrame(rows)


def group_counts(plan: Plan) -> pd.DataFrame:
    """Per G: the grouped conv's counted MACs and parameters beside K·K·(M/G)·N·W·H, and the share of G = 1."""
    rows = []
    for s in plan.params.group_shapes():
        model = keras_costs.build_layer("standard", s, seed=plan.params.seed)
        rows.append(
            {
                "G": s.groups,
                "macs": keras_costs.counted_macs(model),
                "formula": s.standard_macs,
                "params": int(model.count_params()),
            }
        )
    table = pd.DataFrame(rows)
    full = table["formula"].iloc[0] * table["G"].iloc[0]  # the G = 1 cost
    table["share_of_standard"] = table["macs"] / full
    return table


def network_counts(plan: Plan) -> pd.DataFrame:
    """Every network of ``NETWORKS``: its counted MACs per image and parameters (each built, untrained)."""
    rows = []
    for name in NETWORKS:
        model = _mobilenet(plan.params.seed) if name == "mobilenet" else build_network(name, seed=plan.params.seed)
        rows.append({"network": name, "macs": keras_costs.counted_macs(model), "params": int(model.count_params())})
        del model  # AlexNet holds 244 MB of weights
    return pd.DataFrame(rows)


@functools.lru_cache(maxsize=1)
def _mobilenet(seed: int) -> Any:
    return keras_costs.mobilenet(seed=seed)


def mobilenet_pairs(plan: Plan) -> pd.DataFrame:
    """MobileNet's 13 separable pairs: M, N, output side, both costs and the per-pair reduction."""
    model = _mobilenet(plan.params.seed)
    macs = keras_costs.macs_by_layer(model)
    rows = []
    for i in range(1, 14):
        dw, pw = model.get_layer(f"conv_dw_{i}"), model.get_layer(f"conv_pw_{i}")
        w = pw.output.shape[1]
        std = keras_costs.conv_macs(k=3, m=dw.input.shape[-1], n=pw.filters, w=w)
        sep = macs[dw.name] + macs[pw.name]
        rows.append(
            {
                "pair": i,
                "M": dw.input.shape[-1],
                "N": pw.filters,
                "W": w,
                "separable_macs": sep,
                "standard_macs": std,
                "reduction": std / sep,
            }
        )
    return pd.DataFrame(rows)


def connectivity(plan: Plan) -> dict[str, np.ndarray]:
    """ShuffleNet's point (qiao/C16): the two stacked group convs' channel reach, without and with the shuffle."""
    p = plan.params
    c, g = p.shuffle_channels, p.shuffle_groups
    return {
        "no shuffle": keras_costs.connectivity(channels=c, groups=g, shuffle=False),
        "channel shuffle": keras_costs.connectivity(channels=c, groups=g, shuffle=True),
    }


@dataclass(frozen=True)
class Counts:
    """Everything counted from built layers (no cluster): deterministic, checked exactly."""

    pairs: pd.DataFrame
    groups: pd.DataFrame
    networks: pd.DataFrame
    mobilenet_pairs: pd.DataFrame
    connectivity: dict[str, np.ndarray]


def count(plan: Plan) -> Counts:
    """Count every layer, grouped conv and network of the plan."""
    return Counts(
        pair_counts(plan), group_counts(plan), network_counts(plan), mobilenet_pairs(plan), connectivity(plan)
    )


# ------------------------------------------------------------ timings ----


def timings(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """A row per timed model: what it is, its MACs per call, host CPU s, emulated device s, device MAC/s."""
    rows = []
    for r, result in harness.by_run(plan, stored).items():
        s = r.shape
        for rec in result.tables["timings"].to_dict("records"):
            rows.append(
                {
                    "family": r.family,
                    "kind": rec["kind"],
                    "K": s.k if s else None,
                    "M": s.m if s else None,
                    "N": s.n if s else None,
                    "W": s.w if s else None,
                    "G": s.groups if s else None,
                    "batch": r.batch,
                    "macs": int(rec["macs"]),
                    "params": int(rec["params"]),
                    "cpu_s": float(rec["cpu_s"]),
                    "emulated_s": float(rec["emulated_s"]),
                    "speed_factor": float(result.summary["calibration"]["speed_factor"]),
                }
            )
    table = pd.DataFrame(rows)
    if len(table):
        table["device_macs_per_s"] = table["macs"] / table["emulated_s"]
    return table


def time_ratios(times: pd.DataFrame) -> pd.DataFrame:
    """Per grid point: separable over standard, in MACs (the formula) and in emulated device time."""
    pairs = times[times["family"] == "pair"]
    wide = pairs.pivot_table(index=["K", "M", "N", "W"], columns="kind", values=["macs", "emulated_s"])
    out = pd.DataFrame(
        {
            "mac_ratio": wide[("macs", "separable")] / wide[("macs", "standard")],
            "time_ratio": wide[("emulated_s", "separable")] / wide[("emulated_s", "standard")],
            "depthwise_share": wide[("emulated_s", "depthwise")] / wide[("emulated_s", "separable")],
        }
    ).reset_index()
    out[["K", "M", "N", "W"]] = out[["K", "M", "N", "W"]].astype(int)
    out["formula_ratio"] = [keras_costs.separable_ratio(k=k, n=n) for k, n in zip(out["K"], out["N"], strict=True)]
    out["time / mac ratio"] = out["time_ratio"] / out["mac_ratio"]
    return out


def fit_time(times: pd.DataFrame) -> pd.DataFrame:
    """Per layer kind: least-squares emulated time = a + b·MACs, its R² (also without outliers), median device MAC/s.

    An outlier achieves less than ``OUTLIER_SHARE`` of its kind's median MAC/s (a slow kernel path); the fit
    without them is reported beside the fit over every layer, never instead of it.
    """
    rows = []
    layers = times[times["family"] == "pair"]  # grouped convs run another kernel (XLA)
    for kind, group in [("all grid layers", layers), *layers.groupby("kind")]:
        rate = group["device_macs_per_s"]
        slow = rate < OUTLIER_SHARE * rate.median()
        slope, intercept, r2 = _line(group)
        rows.append(
            {
                "kind": kind,
                "layers": len(group),
                "r2": r2,
                "intercept_s": intercept,
                "fitted_macs_per_s": 1 / slope if slope > 0 else math.nan,
                "median_macs_per_s": float(rate.median()),
                "outliers": int(slow.sum()),
                "r2_without_outliers": _line(group[~slow])[2],
            }
        )
    return pd.DataFrame(rows)


def _line(group: pd.DataFrame) -> tuple[float, float, float]:
    """Slope, intercept and R² of emulated time against MACs (NaN for fewer than 3 distinct points)."""
    x, y = group["macs"].to_numpy(float), group["emulated_s"].to_numpy(float)
    if len(group) < 3 or np.ptp(x) == 0:
        return math.nan, math.nan, math.nan
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    return float(slope), float(intercept), 1 - float(residual @ residual) / float(((y - y.mean()) ** 2).sum())


def outliers(times: pd.DataFrame) -> pd.DataFrame:
    """The timed layers below ``OUTLIER_SHARE`` of their kind's median MAC/s."""
    layers = times[times["family"] == "pair"]  # grouped convs run another kernel (XLA)
    median = layers.groupby("kind")["device_macs_per_s"].transform("median")
    return layers[layers["device_macs_per_s"] < OUTLIER_SHARE * median]


def network_times(times: pd.DataFrame) -> pd.DataFrame:
    """Emulated device time per call of each timed network and batch, and MobileNet's time ratio to its twin."""
    nets = times[times["family"] == "network"][["kind", "batch", "macs", "params", "cpu_s", "emulated_s"]]
    nets = nets.rename(columns={"kind": "network"}).reset_index(drop=True)
    ratio = []
    for row in nets.itertuples():
        twin = nets[(nets["network"] == "mobilenet_twin") & (nets["batch"] == row.batch)]
        ratio.append(
            float(twin["emulated_s"].iloc[0] / row.emulated_s) if row.network == "mobilenet" and len(twin) else math.nan
        )
    nets["twin_time_ratio"] = ratio
    return nets


@dataclass(frozen=True)
class Measured:
    """Everything timed on the device, and what follows from it."""

    times: pd.DataFrame
    ratios: pd.DataFrame
    fit: pd.DataFrame
    networks: pd.DataFrame
    calibration: dict[str, Any]


def measured(plan: Plan, stored: list[StoredRun]) -> Measured:
    """The stored runs' timings, the ratios against the formula, the time-vs-MACs fit and the networks' times."""
    times = timings(plan, stored)
    if not len(times):  # nothing timed yet: the counts alone can still be rendered
        ratios = pd.DataFrame(columns=["K", "M", "N", "W", "mac_ratio", "time_ratio", "formula_ratio"])
        fit = pd.DataFrame(
            columns=[
                "kind",
                "layers",
                "r2",
                "intercept_s",
                "fitted_macs_per_s",
                "median_macs_per_s",
                "outliers",
                "r2_without_outliers",
            ]
        )
        networks = pd.DataFrame(columns=["network", "batch", "macs", "params", "emulated_s", "twin_time_ratio"])
        return Measured(times, ratios, fit, networks, {})
    return Measured(times, time_ratios(times), fit_time(times), network_times(times), stored[0].summary["calibration"])


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: every count beside its formula (``Plan.counts``), and the connectivity.

    The grid's standard and separable pairs, the grouped conv for each G, MobileNet's separable pairs, the whole
    networks, and which input channels reach which output channel through two stacked group convs without and
    with ShuffleNet's channel shuffle.
    """
    counts = plan.counts
    lines = [
        counts.pairs.round(6).to_string(index=False),
        counts.groups.to_string(index=False),
        counts.mobilenet_pairs.round(3).to_string(index=False),
        counts.networks.to_string(index=False),
    ]
    for name, reach in counts.connectivity.items():
        lines += [f"{name}:", "\n".join("".join("#" if v else "." for v in row) for row in reach)]
    return "\n".join(lines)


def measurements(m: Measured) -> list[Any]:
    """What the notebook shows of the timings: the speed factor, the time ratios, the fit, the networks' times."""
    tables = [m.ratios.round(4), m.fit, m.networks]
    if not m.calibration:  # nothing timed
        return tables
    return [f"speed factor {m.calibration['speed_factor']:.2f} ({m.calibration['profile']})", *tables]

"""DeepThings' fused tiles (qiao/fig3-6): the early layers cut vertically, one tile per device, outputs gathered.

The first layers of a sequential CNN (MobileNet V1, random seeded weights, up
to a stride-8 layer by default; or a plain VGG-like stack) are split into a
g x g grid of fused tiles (``edgelab.pipeline.tiles``). Each of g^2 device
workers receives its tile's image region, halo included, runs its fused
layers, and sends its output to the gather node (the client), which stitches
them and compares with the untiled output computed there. Measured per grid:
(i) the largest absolute difference, stitched against untiled; (ii) peak
activation memory per worker from the shapes, beside the untiled, and the
measured peak resident memory of the run; (iii) the bytes sent to the gather
node as Dask frames them; (iv) total tile MACs over untiled MACs (the halo's
recomputation); (v) the latency on the emulated clock (the tiles' inputs sent
one after another over the gather node's link, each tile's CPU time times the
calibrated speed factor, its output back over its own link:
``edgelab.emulation.stream_clock.compose``). Beside them, the output bytes of every
layer of the whole network over depth (claim C18, "a CNN acts as a compressor").

The input is one real PlantVillage tomato leaf (the data directory's offline
sample), resized by the loader to the network's input size.
"""

from __future__ import annotations

import functools
import json
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster, device_resource
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.results import StoredRun
from edgelab.common.seeding import seeded
from edgelab.data import Dataset, load_dataset
from edgelab.data.plantvillage import MIN_IMAGE_SIZE
from edgelab.emulation.profiles import DeviceProfile, get_profile
from edgelab.emulation.stream_clock import compose
from edgelab.papers import harness
from edgelab.papers.harness import Outcome
from edgelab.pipeline import layer_costs, tile_worker, tiles
from edgelab.pipeline import worker as stage_worker
from edgelab.pipeline.user_network import network_identity, seeded_network

EXPERIMENT = "qiao_tiles"
MEASUREMENT_REVISION = 1
NETWORKS = ("mobilenet", "vgg")
#: The stride-8 layer of each network: where the default fused block ends.
STRIDE8_LAYER = {"mobilenet": "conv_pw_5_relu", "vgg": "block3_pool"}

#: Side of a built-in network's square input in the smoke profile.
DEFAULT_IMAGE_SIZE = 96

FULL_PROFILE: dict[str, Any] = {
    "profile": "full",
    "image_size": 224,
    "grids": [1, 2, 3],
    "repeats": 5,
}


@dataclass(frozen=True)
class TilesParams:
    """Every knob of the experiment; defaults are the smoke profile."""

    network: Any = "mobilenet"  # NETWORKS, or a Keras model or a function of no arguments that builds one
    alpha: float = 1.0  # MobileNet's width multiplier
    image_size: int | None = None  # side of the square input: 96 for a built-in (paper-sized: 224), else its input's
    upto: str | int | None = None  # last fused layer, or how many to fuse; None: a built-in's stride-8 layer
    grids: tuple[int, ...] = (1, 2)
    repeats: int = 3  # timed runs of every tile (after one traced warm-up); the median is used
    device_profile: str = "pi3b"
    image_index: int = 0  # which validation image of PlantVillage
    scheduler_address: str | None = None
    data_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.network, str):
            if self.network not in NETWORKS:
                allowed = f"one of {', '.join(NETWORKS)}, a Keras model or a function that builds one"
                raise ConfigError("network", self.network, allowed)
            if self.image_size is None:
                object.__setattr__(self, "image_size", DEFAULT_IMAGE_SIZE)
        else:
            self._take_users_network()
        checks.number("alpha", self.alpha, above=0, at_most=1)  # MobileNet's width multiplier
        if not self.grids or not all(checks.is_integer(g) and g >= 1 for g in self.grids):
            raise ConfigError("grids", self.grids, "a list of integers >= 1 (tiles per side)")
        for name, least in (("image_size", 32), ("repeats", 1), ("image_index", 0)):
            checks.integer(name, getattr(self, name), at_least=least)
        get_profile(self.device_profile)
        checks.integer("seed", self.seed, at_least=0)

    def _take_users_network(self) -> None:
        """Build a user's network once, under the seed; take the image size from its input."""
        if self.upto is None:
            allowed = "the last layer to fuse, or how many layers: required with a user's network"
            raise ConfigError("upto", None, allowed)
        try:
            model = seeded_network(self.network, self.seed)
        except ConfigError as err:  # named as this experiment names it
            raise ConfigError("network", err.value, err.allowed) from err
        shape = tuple(model.input_shape[1:])
        if len(shape) != 3 or shape[0] is None or shape[0] != shape[1] or shape[2] != 3:
            raise ConfigError("network", model.name, f"a network taking square RGB images; its input is {shape}")
        if self.image_size not in (None, shape[0]):
            raise ConfigError("image_size", self.image_size, f"the side of the network's input, {shape[0]}")
        object.__setattr__(self, "network", model)
        object.__setattr__(self, "image_size", int(shape[0]))

    @property
    def network_name(self) -> str:
        """The network's name, for figures and reports."""
        return self.network if isinstance(self.network, str) else self.network.name

    @property
    def last_layer(self) -> str | int:
        """The last fused layer's name, or how many layers are fused (as a user gave it)."""
        return self.upto if self.upto is not None else STRIDE8_LAYER[self.network]


@dataclass(frozen=True)
class TilesRunKey:
    """One real run: the fused block cut into ``grid`` x ``grid`` tiles."""

    grid: int


@dataclass
class Plan(harness.Plan):
    """Validated work: the image, the network, every grid's tiles, every run."""

    params: TilesParams
    image: np.ndarray  # (1, H, W, 3) float32, as the network takes it
    raw_image: np.ndarray  # (H, W, 3) uint8, for the figure
    dataset: Dataset
    profile: DeviceProfile
    runs: list[TilesRunKey]
    grids: dict[int, tiles.TileGrid]

    def describe(self) -> str:
        """The runs and the image."""
        return f"{len(self.runs)} runs; image: {self.dataset.name} ({self.dataset.source})"

    def model(self) -> Any:
        """The whole network."""
        return network_of(self.params)

    @functools.cached_property
    def network_key(self) -> str | dict[str, str]:
        """A built-in network by name, a user's by name and digests of its structure and weights."""
        network = self.params.network
        return network if isinstance(network, str) else network_identity(network)

    def run_params(self, run: TilesRunKey) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""
        p = self.params
        return {
            "experiment": EXPERIMENT,
            "measurement_revision": MEASUREMENT_REVISION,
            "network": self.network_key,
            "alpha": p.alpha,
            "image_size": p.image_size,
            "upto": p.last_layer,
            "grid": run.grid,
            "repeats": p.repeats,
            "device_profile": p.device_profile,
            "image": {"dataset": self.dataset.name, "source": self.dataset.source, "index": p.image_index},
            "seed": p.seed,
            "cluster": p.scheduler_address or "emulated",
        }

    def devices_needed(self, runs: list[TilesRunKey]) -> int:
        """One device per tile of the largest grid."""
        return max(r.grid for r in runs) ** 2

    def execute(self, cluster: DeviceCluster, run: TilesRunKey, context: dict[str, Any]) -> Outcome:
        """Load each tile on its device, run it on its image region, gather, stitch and compare."""
        plan = self.grids[run.grid]
        model = self.model()
        measured = run_tiles(cluster, model, plan, self.image, self.params.repeats)
        untiled = np.asarray(tiles.prefix_model(model, self.params.last_layer)(self.image, training=False))
        frame, stitched = measured["tiles"], measured["stitched"]
        speed = float(context["calibration"]["speed_factor"])
        clock = tile_clock(frame, self.profile, speed)
        summary = {
            "cluster": context["cluster"],
            "calibration": context["calibration"],
            "max_abs_diff": float(np.abs(stitched - untiled).max()),
            "max_abs_output": float(np.abs(untiled).max()),
            "compression": _compression(),
            "clock_s": clock.processing_s,
            "bottleneck": clock.bottleneck,
        }
        # The output map the figure draws: the stitched result, averaged over channels.
        return summary, {"tiles": frame}, {"stitched_mean": stitched[0].mean(axis=-1)}


def network_of(params: TilesParams) -> Any:
    """The whole network: a built-in built once per process (seeded), or the user's as the params built it."""
    p = params
    return build_network(p.network, p.image_size, p.alpha, p.seed) if isinstance(p.network, str) else p.network


@functools.lru_cache(maxsize=2)
def build_network(network: str, image_size: int, alpha: float, seed: int) -> Any:
    """MobileNet V1 (ten classes, random weights) or a plain VGG-like stack, seeded."""
    import keras

    shape = (image_size, image_size, 3)
    with seeded(seed):
        if network == "mobilenet":
            return keras.applications.MobileNet(input_shape=shape, alpha=alpha, weights=None, classes=10)
        layers: list[Any] = [keras.Input(shape)]
        for block, width in enumerate((32, 64, 128, 256), start=1):
            for conv in (1, 2):
                layers.append(keras.layers.Conv2D(width, 3, padding="same", name=f"block{block}_conv{conv}"))
                layers.append(keras.layers.ReLU(name=f"block{block}_relu{conv}"))
            layers.append(keras.layers.MaxPooling2D(2, name=f"block{block}_pool"))
        layers += [keras.layers.GlobalAveragePooling2D(name="pool"), keras.layers.Dense(10, name="predictions")]
        return keras.Sequential(layers, name="vgg_like")


def run_tiles(
    cluster: DeviceCluster, model: Any, plan: tiles.TileGrid, image: np.ndarray, repeats: int
) -> dict[str, Any]:
    """Tile k of ``plan`` loaded on device k and run ``repeats`` times on its image region; outputs gathered here.

    Returns the stitched output (of the first repeat) and one row per tile: its device, regions, bytes in
    and out (shapes and serialized), MACs, peak activation bytes from the shapes, median CPU seconds and
    the largest measured peak memory above the resident memory before a run.
    """
    client = cluster.client
    devices = cluster.devices[: len(plan.tiles)]
    parts = tiles.split_input(plan, image)
    run_id = uuid.uuid4().hex[:12]
    loads = []
    for tile, device in zip(plan.tiles, devices, strict=True):
        sub = tiles.tile_model(model, plan, tile)
        args = (run_id, _stage(tile), json.dumps(sub.get_config()), sub.get_weights())
        loads.append(client.submit(tile_worker.load_tile, *args, resources={device_resource(device): 1}, pure=False))
    loaded = client.gather(loads)
    try:
        results = []
        for r in range(repeats):
            futures = [
                client.submit(tile_worker.run_tile, run_id, _stage(t), r, part, resources={device_resource(d): 1},
                              pure=False)
                for t, part, d in zip(plan.tiles, parts, devices, strict=True)
            ]  # fmt: skip
            results.append(client.gather(futures))
    finally:
        client.run(stage_worker.release_run, run_id)
    rows = []
    for k, (tile, device, part, load) in enumerate(zip(plan.tiles, devices, parts, loaded, strict=True)):
        records = [result[k][1][-1] for result in results]
        (r0, r1), (c0, c1) = tile.input_region
        (o0, o1), (p0, p1) = tile.output_region
        peaks = [rec["peak_rss_delta_bytes"] for rec in records if rec["peak_rss_delta_bytes"] is not None]
        rows.append(
            {
                "tile": _stage(tile),
                "device": device,
                "input_rows": f"{r0}-{r1 - 1}",
                "input_cols": f"{c0}-{c1 - 1}",
                "output_rows": f"{o0}-{o1 - 1}",
                "output_cols": f"{p0}-{p1 - 1}",
                "input_pixels": (r1 - r0) * (c1 - c0),
                "input_bytes": plan.input_bytes(tile),
                "sent_bytes": tile_worker.serialized_bytes(part),
                "output_bytes": plan.output_bytes(tile),
                "gathered_bytes": int(records[0]["bytes_serialized"]),
                "macs": tile.macs,
                "peak_activation_bytes": tile.peak_bytes,
                "cpu_s": float(np.median([rec["cpu_s"] for rec in records])),
                "measured_peak_rss_delta_bytes": max(peaks) if peaks else None,
                "working_set_bytes": int(load["working_set_bytes"]),
            }
        )
    stitched = tiles.stitch(plan, [out for out, _ in results[0]])
    return {"stitched": stitched, "tiles": pd.DataFrame(rows)}


def _compression() -> str:
    """How Dask compresses the frames it sends (the serialized byte counts are after it)."""
    import dask

    return str(dask.config.get("distributed.comm.compression"))


def _stage(tile: tiles.Tile) -> str:
    return f"tile-{tile.row}-{tile.col}"


def tile_clock(frame: pd.DataFrame, profile: DeviceProfile, speed_factor: float) -> Any:
    """The tiles on the emulated clock: each a one-stage branch fed its own region (``pipeline.timeline.compose``)."""
    records = frame.assign(branch=range(len(frame)), stage=frame["tile"], micro_batch=0, images=1)
    records = records.assign(bytes_out=frame["gathered_bytes"])
    sends = pd.DataFrame({"micro_batch": 0, "branch": range(len(frame)), "bytes": frame["sent_bytes"]})
    branches = [[(t, d)] for t, d in zip(frame["tile"], frame["device"], strict=True)]
    return compose(records, sends, branches, profile=profile, speed_factor=speed_factor, max_in_flight=1)


def prepare(**kwargs: Any) -> Plan:
    """Load the image, build the network, plan every grid's tiles: every bad input refused before cluster work."""
    params = harness.parse_params(TilesParams, kwargs, sequences=("grids",))
    model = network_of(params)
    grids = {g: tiles.plan_tiles(model, params.last_layer, g) for g in sorted(set(params.grids))}
    dataset = load_dataset("plantvillage_tomato", data_dir=params.data_dir, image_size=params.image_size)
    if params.image_index >= len(dataset.x_test):
        raise ConfigError("image_index", params.image_index, f"at most {len(dataset.x_test) - 1}")
    raw = dataset.x_test[params.image_index]
    # MobileNet's own scaling to [-1, 1]; the VGG-like stack takes the same.
    image = (raw[None].astype(np.float32) / 127.5 - 1.0).astype(np.float32)
    runs = [TilesRunKey(g) for g in grids]
    return Plan(params, image, raw, dataset, get_profile(params.device_profile), runs, grids)


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: no PlantVillage source; None if one is there."""
    # The smallest images decode fastest; the check needs only the files to load.
    return harness.missing_dataset("plantvillage_tomato", data_dir, image_size=MIN_IMAGE_SIZE)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = TilesParams

pending = harness.pending
run = harness.run


# ------------------------------------------------------------ summaries ----


def summarize(plan: Plan, stored: list[StoredRun]) -> pd.DataFrame:
    """A row per grid: exactness, memory per worker against untiled, bytes gathered, MAC redundancy, latency."""
    rows = []
    for run, result in harness.by_run(plan, stored).items():
        grid, s, frame = plan.grids[run.grid], result.summary, result.tables["tiles"]
        measured = frame["measured_peak_rss_delta_bytes"].dropna()
        rows.append(
            {
                "grid": f"{run.grid}x{run.grid}",
                "devices": run.grid**2,
                "max_abs_diff": float(s["max_abs_diff"]),
                # Random weights leave small activations: the difference relative to the output's scale.
                "relative_diff": float(s["max_abs_diff"]) / float(s["max_abs_output"]),
                "peak_per_worker_bytes": int(frame["peak_activation_bytes"].max()),
                "untiled_peak_bytes": grid.untiled_peak_bytes,
                "memory_ratio": frame["peak_activation_bytes"].max() / grid.untiled_peak_bytes,
                "measured_peak_rss_delta_bytes": int(measured.max()) if len(measured) else None,
                "gathered_bytes": int(frame["gathered_bytes"].sum()),
                "sent_bytes": int(frame["sent_bytes"].sum()),
                "mac_redundancy": grid.redundancy,
                "clock_s": float(s["clock_s"]),
                "max_tile_cpu_s": float(frame["cpu_s"].max()),
            }
        )
    return pd.DataFrame(rows)


def depth_bytes(plan: Plan) -> pd.DataFrame:
    """Output bytes per image of every layer of the whole network, in depth order, the fused ones marked."""
    fused = {g.name for g in plan.grids[min(plan.grids)].layers}
    costs = layer_costs(plan.model())
    rows = [
        {"depth": c.index, "layer": c.name, "kind": c.kind, "output_shape": c.output_shape,
         "output_bytes": c.output_bytes, "fused": c.name in fused}
        for c in costs
    ]  # fmt: skip
    return pd.DataFrame(rows)


def compressor_cut(depth: pd.DataFrame) -> pd.Series:
    """The first layer whose output is smaller than the image it was computed from: a cheap place to cut."""
    smaller = depth[(depth["depth"] > 0) & (depth["output_bytes"] < depth["output_bytes"].iloc[0])]
    return smaller.iloc[0]


# ------------------------------------------------------------ notebook ----


def plan_facts(plan: Plan) -> str:
    """What nbval checks before any run: the tiles and the bytes over depth, which follow from the shapes alone.

    Each tile's image region with its halo, the MACs and the activations it holds at once against the untiled
    block; the image's bytes, the largest layer output, and the first layer whose output is below the image.
    """
    lines = []
    for g, grid in plan.grids.items():
        regions = ", ".join(f"{t.input_region}" for t in grid.tiles)
        lines.append(
            f"{g}x{g}: MACs {grid.redundancy:.4f}x untiled; peak activations per worker "
            f"{max(t.peak_bytes for t in grid.tiles):,} B of {grid.untiled_peak_bytes:,} B; regions {regions}"
        )
    depth = depth_bytes(plan)
    cut = compressor_cut(depth)
    lines.append(
        f"image {int(depth['output_bytes'].iloc[0]):,} B; largest output {int(depth['output_bytes'].max()):,} B; "
        f"first layer below the image: {cut['layer']} ({int(cut['output_bytes']):,} B)"
    )
    return "\n".join(lines)


def run_facts(plan: Plan, stored: list[StoredRun]) -> str:
    """What nbval checks of the runs: the bytes each tile holds and sends, and the stitched output's exactness."""
    summary = summarize(plan, stored)
    columns = ["grid", "devices", "peak_per_worker_bytes", "memory_ratio", "gathered_bytes", "sent_bytes"]
    exact = bool((summary["relative_diff"] <= 1e-5).all())
    return (
        f"{summary[[*columns, 'mac_redundancy']].round(4).to_string(index=False)}\n"
        f"stitched equals untiled to 1e-5 of the output's scale: {exact}"
    )


def measurements(plan: Plan, stored: list[StoredRun]) -> list[Any]:
    """What the notebook shows of the runs: ``summarize``, this host's memory, CPU time and clock among them."""
    return [summarize(plan, stored)]

"""Device profiles and the calibration that relates this host's speed to a device's.

A profile says what one emulated device has: cores, memory, link and a nominal
compute speed. ``calibrate`` measures this host on a micro-benchmark and turns
the profile's nominal speed into a *speed factor*: device seconds per second of
host CPU time. ``edgelab.emulation.timeline`` multiplies each task's measured CPU time by
it. The factor and the measurement behind it are written into every report.

Besides the built-in ``PROFILES``, a board of one's own is a JSON file that
``edgelab calibrate`` wrote on the board (``edgelab.runtime.board_calibration``):
``get_profile`` takes its path wherever a profile's name is taken, and the
board then carries its own measured device model (``step_s``, ``flops_per_s``).
"""

from __future__ import annotations

import json
import platform
import re
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from edgelab.common.errors import ConfigError


@dataclass(frozen=True)
class DeviceProfile:
    """What one emulated device has.

    Parameters
    ----------
    name
        Profile id, also the prefix of device names (``pi3b-0``, ``pi3b-1`` ...).
    cores, clock_ghz
        CPU of the device; ``cores`` is the denominator of CPU utilisation.
    memory_mb
        Physical memory of the device.
    os_reserve_mb
        Memory the OS and daemons hold before training starts.
    link_mbps, latency_s
        Ethernet link of the device: rate in Mbit/s and one-way latency.
    reference_gflops
        Sustained single-core float32 GEMM rate of the device, the speed the
        calibration compares this host with. ``None`` means the device *is* the
        host (``native``): the speed factor is 1.
    reference_note
        Where ``reference_gflops`` comes from.
    framework_mb, framework_note
        Memory the training framework holds on the device before any model
        (interpreter, libraries), and where the number comes from. What is
        left, ``training_budget_mb``, is what a run's working set may use.
    step_s, flops_per_s
        The device model measured on the board itself (``edgelab calibrate``):
        seconds per training step and training FLOP rate. ``None`` for the
        built-in boards, whose model is fitted on paper cells
        (``edgelab.emulation.device_model.FIT_CELLS``).
    measured_on
        Where and when the board was measured (empty for the built-in ones).
    dense_flops_per_s, param_s, wire_s_per_byte
        The measured model's terms two paper cells cannot separate (see
        ``edgelab.emulation.device_model``): dense layers' own FLOP rate,
        seconds per trainable parameter per step, the device's seconds per
        byte of weights it exchanges. Unset or zero for the built-in boards.
    """

    name: str
    cores: int
    clock_ghz: float | None
    memory_mb: int
    os_reserve_mb: int
    link_mbps: float
    latency_s: float
    reference_gflops: float | None
    reference_note: str = ""
    framework_mb: int = 0
    framework_note: str = ""
    step_s: float | None = None
    flops_per_s: float | None = None
    measured_on: str = ""
    dense_flops_per_s: float | None = None
    param_s: float = 0.0
    wire_s_per_byte: float = 0.0

    @property
    def usable_memory_mb(self) -> int:
        """Memory left for training after the OS allowance."""
        return self.memory_mb - self.os_reserve_mb

    @property
    def training_budget_mb(self) -> int:
        """Memory a training run may use above the OS and the framework's own footprint."""
        return self.memory_mb - self.os_reserve_mb - self.framework_mb

    @property
    def link_bytes_per_s(self) -> float:
        """Link rate in bytes per second."""
        return self.link_mbps * 1e6 / 8


PROFILES: dict[str, DeviceProfile] = {
    # Raspberry Pi 3 Model B, as in Park et al. 2020: BCM2837, 4x Cortex-A53 at
    # 1.2 GHz, 1 GB LPDDR2, 100 Mbit/s Ethernet (on the USB 2.0 bus).
    "pi3b": DeviceProfile(
        name="pi3b",
        cores=4,
        clock_ghz=1.2,
        memory_mb=1024,
        os_reserve_mb=200,
        link_mbps=100.0,
        latency_s=0.0005,
        reference_gflops=2.0,
        reference_note=(
            "assumed: about half the 4.8 GFLOPS float32 NEON peak of one Cortex-A53 "
            "core at 1.2 GHz (4 FLOP/cycle); not measured on a Pi here, so the "
            "report also calibrates on one paper cell"
        ),
        framework_mb=81,
        framework_note=(
            "read off the paper's one-device LeNet-CNN (Fig 4b, about 300 MB): Python, MXNet 0.9.5 and Raspbian "
            "hold what the memory model leaves of it once MNIST's training and test images (as float32, as "
            "MXNet's example holds them: 209 MB), the weights and the batch's tensors (10 MB) are taken away"
        ),
    ),
    # Raspberry Pi 4 Model B, as in Jeon et al.: BCM2711, 4x Cortex-A72 at 1.5 GHz,
    # 1/2/4/8 GB LPDDR4 (the paper does not say which; 4 GB here, a parameter),
    # Gigabit Ethernet. The same rule as the Pi 3B sets its nominal speed.
    "pi4b": DeviceProfile(
        name="pi4b",
        cores=4,
        clock_ghz=1.5,
        memory_mb=4096,
        os_reserve_mb=300,
        link_mbps=1000.0,
        latency_s=0.0002,
        reference_gflops=6.0,
        reference_note=(
            "assumed: about half the 12 GFLOPS float32 NEON peak of one Cortex-A72 "
            "core at 1.5 GHz (8 FLOP/cycle), the rule that gives the Pi 3B its 2.0; "
            "not measured on a Pi here"
        ),
    ),
    # The machine the workers run on; a real cluster attached by address.
    "native": DeviceProfile(
        name="native",
        cores=1,
        clock_ghz=None,
        memory_mb=1 << 20,
        os_reserve_mb=0,
        link_mbps=1e5,
        latency_s=0.0,
        reference_gflops=None,
        reference_note="the device is the host: the two clocks coincide",
    ),
}


#: The profiles edgelab ships; a measured board joins ``PROFILES`` when loaded, never under one of these names.
_BUILT_IN = tuple(PROFILES)
#: What a board profile file must say: its format, and every field of ``DeviceProfile``.
BOARD_FORMAT = "edgelab board profile 1"
#: A board's name prefixes its device names and Dask resources: a lowercase identifier.
_BOARD_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


def get_profile(name: str) -> DeviceProfile:
    """Look up a device profile by name, or load a board's from the JSON file ``edgelab calibrate`` wrote.

    A loaded board is registered under its name, so what refers to it by
    name afterwards (``profile.name``) finds it in this process too.
    """
    if isinstance(name, str) and name.endswith(".json"):
        return load_board(name)
    if name not in PROFILES:
        raise ConfigError(
            "device_profile", name, f"one of {', '.join(PROFILES)}, or the .json file `edgelab calibrate` wrote"
        )
    return PROFILES[name]


def check_board_name(name: str) -> str:
    """``name`` if a board may take it: a lowercase identifier that is not a built-in profile's."""
    if not isinstance(name, str) or not _BOARD_NAME.fullmatch(name):
        raise ConfigError("name", name, "a lowercase identifier of up to 32 characters (a-z, 0-9, _), e.g. mypi5")
    if name in _BUILT_IN:
        raise ConfigError("name", name, f"a name other than the built-in profiles ({', '.join(_BUILT_IN)})")
    return name


def save_board(profile: DeviceProfile, path: str | Path, measurements: dict[str, Any]) -> Path:
    """Write a measured board's profile, and the measurements behind it, as JSON."""
    out = Path(path)
    doc = {"format": BOARD_FORMAT, "profile": asdict(profile), "measurements": measurements}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return out


#: Fields of a board file added after its format was fixed (a file without them loads with their defaults).
_LATER_TERMS = ("dense_flops_per_s", "param_s", "wire_s_per_byte")


def load_board(path: str | Path) -> DeviceProfile:
    """The profile in a board file (``save_board``), registered under its name."""
    where = Path(path)
    try:
        doc = json.loads(where.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError("device_profile", str(path), f"a readable board profile file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != BOARD_FORMAT or not isinstance(doc.get("profile"), dict):
        raise ConfigError("device_profile", str(path), f"a file whose format is {BOARD_FORMAT!r} (edgelab calibrate)")
    known = {f.name for f in fields(DeviceProfile)}
    values = doc["profile"]
    # Boards measured before a term existed lack it: it takes its default (the model without that term).
    missing, unknown = known - set(values) - set(_LATER_TERMS), set(values) - known
    if missing or unknown:
        what = f"missing {sorted(missing)}" if missing else f"unknown {sorted(unknown)}"
        raise ConfigError("device_profile", str(path), f"a board profile with every field of DeviceProfile ({what})")
    check_board_name(values["name"])
    if values["step_s"] is None or not values["flops_per_s"] or not values["flops_per_s"] > 0:
        raise ConfigError("device_profile", str(path), "a board with its measured step_s and flops_per_s")
    profile = DeviceProfile(**values)
    PROFILES[profile.name] = profile
    return profile


def with_memory(profile: DeviceProfile, memory_mb: int | None) -> DeviceProfile:
    """Return the profile with another memory size (``None`` keeps it)."""
    if memory_mb is None:
        return profile
    floor = profile.os_reserve_mb + profile.framework_mb
    if memory_mb <= floor:
        raise ConfigError(
            "device_memory_mb",
            memory_mb,
            f"an integer > {floor} MB: the OS allowance ({profile.os_reserve_mb} MB) plus the framework's "
            f"footprint ({profile.framework_mb} MB)",
        )
    return replace(profile, memory_mb=int(memory_mb))


@dataclass(frozen=True)
class Calibration:
    """How fast this host is against a device, and the factor that follows."""

    profile: str
    host_gflops: float
    device_gflops: float | None
    speed_factor: float
    method: str
    host: str
    # Where the device's rate comes from: an assumption unless someone measured the device.
    device_gflops_source: str = ""

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form for the report."""
        return asdict(self)


def measure_host_gflops(*, size: int = 512, repeats: int = 5) -> float:
    """Single-thread float32 GEMM rate of this host, in GFLOPS (best of ``repeats``).

    One thread because each device worker runs TensorFlow with one intra-op
    thread, so its CPU time is one core's time.
    """
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a = rng.random((size, size), dtype=np.float32)
    b = rng.random((size, size), dtype=np.float32)
    best = float("inf")
    with threadpool_limits(limits=1):
        a @ b  # warm up BLAS
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def sustained_gflops(
    *,
    seconds: float = 2.0,
    repeats: int = 3,
    size: int = 512,
    clock: str = "wall",
    burst_s: float | None = None,
    idle_s: float = 0.0,
) -> float:
    """Single-thread float32 GEMM rate this machine keeps up over ``seconds`` (the median of ``repeats`` windows).

    Not the best single product, as ``measure_host_gflops`` takes: under a CPU
    quota a product of a few milliseconds fits inside one period's allowance
    and runs at the full core's speed, while a board held to a fifth of a core
    does a fifth of the work in any window of seconds. So a board measures its
    rate over windows long against the quota's period (and a real board's
    sustained rate, thermal throttling included): ``clock="wall"``.

    ``clock="cpu"`` counts the windows in this thread's CPU time instead: the
    work one CPU second does here, the rate that turns CPU seconds measured
    here into a board's. On a virtual machine a wall-clock window also holds
    the time its hypervisor gave other guests (steal: 18-42% of what this
    project's VM wanted in minutes of 2026-12-03), which no CPU second counts.

    ``burst_s``: the products in bursts of that much of this thread's CPU, each
    followed by ``idle_s`` asleep, as a pipeline stage computes a micro-batch and
    waits for the next (the windows then pass in wall seconds, the rate is still
    per CPU second: ``clock="cpu"`` only). A thread that wakes to a cooled cache
    does less per CPU second than one that never stops: on this project's VM
    0.75-1.01 of the continuous rate, unthrottled, beside streams of 2026-12-07.
    """
    from threadpoolctl import threadpool_limits

    if clock not in ("wall", "cpu"):
        raise ConfigError("clock", clock, "'wall' (seconds that pass) or 'cpu' (this thread's CPU seconds)")
    if burst_s is not None and clock != "cpu":
        raise ConfigError("clock", clock, "'cpu' when burst_s is given (a window of bursts holds sleep)")
    if burst_s is not None and not burst_s > 0:
        raise ConfigError("burst_s", burst_s, "a CPU time in seconds above 0, or None for no bursts")
    if not idle_s >= 0 or (idle_s and burst_s is None):
        raise ConfigError("idle_s", idle_s, "seconds of 0 or more between bursts, with burst_s given")
    now = time.perf_counter if clock == "wall" else time.thread_time
    window = time.perf_counter if burst_s is not None else now

    rng = np.random.default_rng(0)
    a = rng.random((size, size), dtype=np.float32)
    b = rng.random((size, size), dtype=np.float32)
    rates = []
    with threadpool_limits(limits=1):
        a @ b
        for _ in range(repeats):
            done, opened, start, burst = 0, window(), now(), time.thread_time()
            while window() - opened < seconds:
                a @ b
                done += 1
                if burst_s is not None and time.thread_time() - burst >= burst_s:
                    time.sleep(idle_s)
                    burst = time.thread_time()
            rates.append(2 * size**3 * done / (now() - start) / 1e9)
    return float(np.median(rates))


def calibrate(profile: DeviceProfile, *, host_gflops: float | None = None) -> Calibration:
    """Relate this host's speed to the device's.

    Parameters
    ----------
    profile
        The emulated device.
    host_gflops
        A measurement to reuse; measured now when ``None``.

    Returns
    -------
    Calibration
        ``speed_factor`` = host GFLOPS / device GFLOPS: one second of host CPU
        time stands for that many seconds on the device.
    """
    measured = measure_host_gflops() if host_gflops is None else host_gflops
    if profile.reference_gflops is None:
        factor = 1.0
    else:
        factor = measured / profile.reference_gflops
    return Calibration(
        profile=profile.name,
        host_gflops=round(measured, 3),
        device_gflops=profile.reference_gflops,
        speed_factor=factor,
        method="single-thread float32 GEMM 512x512 (numpy), best of 5",
        host=f"{platform.processor() or platform.machine()} / {platform.node()}",
        device_gflops_source=profile.reference_note,
    )

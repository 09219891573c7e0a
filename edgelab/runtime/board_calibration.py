"""``edgelab calibrate``: measure a board of one's own, and write the profile every ``device_profile`` takes.

Runs on the board itself and needs only what a device worker needs
(TensorFlow, numpy, edgelab; no JupyterLab). By default in a child process whose
TensorFlow has one thread per pool, as a device worker's
(``cluster/pi/edgelab-worker.service``), it times the very training rounds a
worker runs (``edgelab.runtime.steps.train_steps``: one compiled loop over the
round's batches) of LeNet-MLP and LeNet-CNN at three batch sizes, and fits the
device model's terms on them (``edgelab.emulation.device_model``) by
non-negative least squares: a cost per step, a cost per trainable parameter per
step, a FLOP rate for convolutions and one for dense layers. Each model's batch
sizes give its cost per sample (the MLP's is nearly all dense, the CNN's
mostly convolution) and its cost per step (the two models differ fourfold in
parameters); the six cells leave two degrees of freedom to show the fit's
residual. The Pi 3B's model is fitted on the same two models, from the paper's
two cells instead of a timer, so it has only a step cost and one rate.

It also times the device's own work on a round's weights (decrypt as TLS does,
the arrays' views, the delta, encrypt) per byte: a cost the link's rate leaves out.

Besides: the single-thread float32 GEMM rate the board sustains over windows
of seconds (the CPU-time clocks' speed factor,
``edgelab.emulation.profiles.calibrate``; ``sustained_gflops`` says why not the
best single product), the cores and memory the
board gives a process (affinity, and any cgroup CPU quota or memory limit:
a container or a cgroup-limited host is measured as the board it is), what the
OS holds already, and the framework's own footprint. A link cannot be measured
from one end: its rate and latency are given (``--link-mbps``,
``--latency-ms``) and recorded as given. On a virtual machine, the share of
the CPU time the machine wanted that its hypervisor gave other guests while the
steps were timed (``edgelab.common.machine_cpu``): a board measured in an hour
when it took much is a slower board than the same machine in a quiet one.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from edgelab.common import checks, machine_cpu
from edgelab.common.errors import ConfigError
from edgelab.emulation.profiles import DeviceProfile, check_board_name, save_board, sustained_gflops
from edgelab.models.costs import parameter_count, training_flops_by_class

#: The timed cells: (model, batch size). Two models far apart in FLOPs per sample, each at three batch sizes.
CELLS = (("mlp", 64), ("mlp", 32), ("mlp", 16), ("cnn", 64), ("cnn", 32), ("cnn", 16))
#: Samples of the shard the timed rounds gather their batches from, in a shuffled order as a worker does: a
#: training set's worth (MNIST's, 47 MB of uint8 images), not a cache's. From a 4096-image shard (3.2 MB) the
#: same LeNet-MLP steps took 0.81-0.86 ms on one core of this project's machine, from 57,600 images 0.88-0.95.
SHARD_SAMPLES = 60_000
#: The terms ``fit_terms`` gives, in the order of its design matrix's columns.
TERMS = ("step_s", "param_s", "s_per_conv_flop", "s_per_dense_flop")
#: Largest spread of a cell's repeats ((slowest - fastest) / median) a calibration on a quiet board shows.
QUIET_SPREAD = 0.10
#: Largest share of the CPU time the machine wanted a hypervisor may keep (steal) while a quiet board is timed.
QUIET_STEAL = 0.05
#: The environment a device worker's TensorFlow runs with (one thread per pool).
WORKER_THREADS = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "OMP_NUM_THREADS": "1"}


def calibrate_board(
    name: str,
    *,
    seconds: float = 5.0,
    repeats: int = 3,
    link_mbps: float = 1000.0,
    latency_ms: float = 0.2,
    in_process: bool = False,
) -> tuple[DeviceProfile, dict[str, Any]]:
    """Measure this machine as a board named ``name``: its profile, and the measurements behind it.

    Parameters
    ----------
    name
        The board's name: a lowercase identifier, not a built-in profile's.
    seconds
        Length of each timed window (a round of as many steps as fill it).
    repeats
        Timed windows per cell; the median is kept.
    link_mbps, latency_ms
        The board's link, as given (a link has two ends: one board cannot time it).
    in_process
        Time the steps in this process instead of a child: for a call that runs
        as a task on a device's own worker, whose TensorFlow already has a
        worker's threads, so the board is timed in the process that will train
        (its event loop, its heartbeats and its memory beside the steps). The
        framework's memory is then that worker's, whatever it holds besides.
    """
    check_board_name(name)
    checks.number("seconds", seconds, above=0)
    checks.integer("repeats", repeats, at_least=1)
    checks.number("link_mbps", link_mbps, above=0)
    checks.number("latency_ms", latency_ms, at_least=0)
    limits = resource_limits()
    before = machine_cpu.read()
    steps = _time_cells(seconds, repeats) if in_process else _timed_steps(seconds, repeats)
    # On a virtual machine the hypervisor may take some of its cores meanwhile: a slower board, at that hour.
    machine = machine_cpu.shares(before, machine_cpu.read())
    terms = fit_terms(steps)
    gemm = sustained_gflops(seconds=seconds / 2, repeats=repeats)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    host = f"{platform.machine()} {platform.node()}"
    framework_mb = int(math.ceil(steps["framework_rss_mb"]))
    profile = DeviceProfile(
        name=name,
        cores=max(1, math.ceil(limits["cpus"])),
        clock_ghz=limits["clock_ghz"],
        memory_mb=int(limits["memory_mb"]),
        os_reserve_mb=int(limits["os_reserve_mb"]),
        link_mbps=float(link_mbps),
        latency_s=float(latency_ms) / 1e3,
        reference_gflops=round(gemm, 3),
        reference_note=(
            f"measured by edgelab calibrate: single-thread float32 GEMM 512x512 sustained over {seconds / 2:g} s "
            f"windows on {host}, {when}"
        ),
        framework_mb=framework_mb,
        framework_note=(
            "measured by edgelab calibrate: resident memory of the worker process it ran in, its own data included"
            if in_process
            else "measured by edgelab calibrate: resident memory of a worker's TensorFlow with LeNet built"
        ),
        step_s=terms["step_s"],
        flops_per_s=terms["flops_per_s"],
        measured_on=f"{host}, {when}",
        dense_flops_per_s=terms["dense_flops_per_s"],
        param_s=terms["param_s"],
        wire_s_per_byte=steps["wire"]["s_per_byte"],
    )
    measurements = {
        "limits": limits,
        "cells": steps["cells"],
        "largest_spread": max(cell["spread"] for cell in steps["cells"]),
        "machine": machine,
        "fit": terms,
        "wire": steps["wire"],
        "gemm_gflops": gemm,
        "link": {"link_mbps": link_mbps, "latency_ms": latency_ms, "source": "given, not measured"},
        "tensorflow": steps["tensorflow"],
        "timed_in": {**steps["timed_in"], "process": "this one" if in_process else "a child"},
        "python": platform.python_version(),
    }
    return profile, measurements


def write_board(name: str, out: str | os.PathLike[str] | None = None, **options: Any) -> Path:
    """Measure (``calibrate_board``) and write ``<out>`` (default ``<name>.json``); its path."""
    check_board_name(name)
    path = Path(out) if out is not None else Path(f"{name}.json")
    if path.suffix != ".json":
        raise ConfigError("out", str(path), "a file name ending in .json (device_profile takes it by that suffix)")
    if not path.parent.is_dir():
        raise ConfigError("out", str(path), "a file in an existing folder")
    profile, measurements = calibrate_board(name, **options)
    return save_board(profile, path, measurements)


def fit_terms(steps: dict[str, Any]) -> dict[str, Any]:
    """The device model's terms that best give the timed cells (non-negative least squares).

    Returns ``step_s``, ``param_s``, ``flops_per_s`` (convolutions and
    element-wise work), ``dense_flops_per_s``, the root-mean-square of the
    cells' relative residuals, and ``terms``: which terms were fitted. Where the
    cells cannot tell the two rates apart (either fitted to zero seconds per
    FLOP: an infinitely fast class), one rate is fitted for both and
    ``dense_flops_per_s`` is ``None``.
    """
    from scipy.optimize import nnls

    columns = []
    for cell in steps["cells"]:
        split = training_flops_by_class(cell["model"])
        batch = cell["batch_size"]
        columns.append(
            (
                1.0,
                parameter_count(cell["model"]),
                batch * (split["conv"] + split["elementwise"]),
                batch * split["dense"],
            )
        )
    # Each cell weighted by its own time, so a short cell counts as much as a long one.
    times = np.array([cell["step_s"] for cell in steps["cells"]])
    design = np.array(columns) / times[:, None]
    solution, _ = nnls(design, np.ones(len(times)))
    names = TERMS
    if not (solution[2] > 0 and solution[3] > 0):
        shared = np.column_stack([design[:, 0], design[:, 1], design[:, 2] + design[:, 3]])
        solution, _ = nnls(shared, np.ones(len(times)))
        design, names = shared, ("step_s", "param_s", "s_per_flop")
    terms = dict(zip(names, (float(v) for v in solution), strict=True))
    s_per_conv = terms.get("s_per_conv_flop", terms.get("s_per_flop", 0.0))
    if not s_per_conv > 0:
        raise RuntimeError(f"the timed cells gave no FLOP rate ({terms}): {steps['cells']}")
    residual = float(np.sqrt(np.mean((design @ solution - 1.0) ** 2)))
    return {
        "step_s": terms["step_s"],
        "param_s": terms["param_s"],
        "flops_per_s": 1.0 / s_per_conv,
        "dense_flops_per_s": 1.0 / terms["s_per_dense_flop"] if "s_per_dense_flop" in terms else None,
        "relative_rms_residual": residual,
        "terms": list(names),
    }


def resource_limits() -> dict[str, Any]:
    """CPUs and memory this process may use (affinity, cgroup quota and limit), the clock, and what the OS holds."""
    meminfo = _meminfo_mb()
    affinity = len(os.sched_getaffinity(0))
    quota = _cgroup_cpu_quota()
    limit_mb = _cgroup_memory_limit_mb()
    memory_mb = min(meminfo["MemTotal"], limit_mb) if limit_mb else meminfo["MemTotal"]
    held_mb = meminfo["MemTotal"] - meminfo.get("MemAvailable", meminfo["MemTotal"])
    return {
        "cpus": min(affinity, quota) if quota else affinity,
        "affinity_cpus": affinity,
        "cgroup_cpu_quota": quota,
        "memory_mb": memory_mb,
        "cgroup_memory_limit_mb": limit_mb,
        # Under a cgroup limit the rest of the machine is not the board's OS: only its own usage counts.
        "os_reserve_mb": 0 if limit_mb else held_mb,
        "clock_ghz": _clock_ghz(),
    }


def _meminfo_mb(path: str = "/proc/meminfo") -> dict[str, float]:
    out = {}
    for line in Path(path).read_text().splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) / 1024  # kB
    return out


def _cgroup_cpu_quota(root: str = "/sys/fs/cgroup") -> float | None:
    """CPUs the cgroup's quota allows (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), or ``None`` for no quota.

    Under v1 the quota that holds is the smallest of this process's own group's and its ancestors'
    (a process placed in a limited group, as a limited shaped host's worker is).
    """
    v2 = Path(root, "cpu.max")
    if v2.exists():
        quota, _, period = v2.read_text().partition(" ")
        return None if quota == "max" else int(quota) / int(period)
    quotas = []
    for folder in _v1_groups(root, "cpu", ("cpu", "cpu,cpuacct")):
        quota_file = folder / "cpu.cfs_quota_us"
        if quota_file.exists() and (quota_us := int(quota_file.read_text())) > 0:
            quotas.append(quota_us / int((folder / "cpu.cfs_period_us").read_text()))
    return min(quotas, default=None)


def _cgroup_memory_limit_mb(root: str = "/sys/fs/cgroup") -> float | None:
    """The cgroup's memory limit in MB (v2 ``memory.max``, v1 ``memory.limit_in_bytes``: the least up the tree)."""
    v2 = Path(root, "memory.max")
    if v2.exists():
        text = v2.read_text().strip()
        return None if text == "max" else int(text) / 2**20
    limits = []
    for folder in _v1_groups(root, "memory", ("memory",)):
        path = folder / "memory.limit_in_bytes"
        # v1 writes "no limit" as a number near 2**63.
        if path.exists() and (limit := int(path.read_text())) < 1 << 60:
            limits.append(limit / 2**20)
    return min(limits, default=None)


def _v1_groups(root: str, controller: str, mounts: tuple[str, ...]) -> list[Path]:
    """The own v1 group of this process in ``controller`` and every group above it, under each of ``mounts``."""
    from edgelab.cluster.device_cgroups import own_group

    own = Path(own_group(controller).lstrip("/"))
    return [Path(root, mount, group) for mount in mounts for group in (own, *own.parents)]


def _clock_ghz() -> float | None:
    """The CPU's top clock, where the kernel says it; ``None`` where it does not."""
    top = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if top.exists():
        return round(int(top.read_text()) / 1e6, 3)  # kHz
    speeds = [float(line.split(":")[1]) for line in _cpuinfo_lines() if line.lower().startswith("cpu mhz")]
    return round(max(speeds) / 1e3, 3) if speeds else None


def _cpuinfo_lines() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def _timed_steps(seconds: float, repeats: int) -> dict[str, Any]:
    """Time the cells in a child process with a worker's TensorFlow threads (this process's may differ)."""
    env = {**os.environ, **WORKER_THREADS, "TF_CPP_MIN_LOG_LEVEL": "2"}
    args = [sys.executable, "-m", "edgelab.runtime.board_calibration", str(seconds), str(repeats)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the timed training steps failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _time_cells(seconds: float, repeats: int) -> dict[str, Any]:
    """Seconds per step of each cell: the median of ``repeats`` rounds, each as many steps as fill ``seconds``.

    The repeats are interleaved (every cell once per pass); ``spread`` is a cell's (slowest - fastest) / median.
    """
    import psutil
    import tensorflow as tf

    from edgelab.models.builtin import ModelSpec, build_model
    from edgelab.runtime.steps import Shard, get_weights, train_steps

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(SHARD_SAMPLES, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, size=SHARD_SAMPLES).astype(np.int64)
    models = {name: build_model(ModelSpec(name)) for name in {m for m, _ in CELLS}}
    framework_rss_mb = psutil.Process().memory_info().rss / 2**20
    rounds = []
    for name, batch in CELLS:
        model = models[name]
        shard = Shard(x, y, channel_axis=name == "cnn")
        weights = get_weights(model)

        def round_s(steps: int, model: Any = model, shard: Shard = shard, weights: Any = weights, batch: int = batch):
            order = np.resize(shard.order(0, 0, 0), steps * batch)  # shuffled, as a worker's epoch is
            start = time.perf_counter()
            train_steps(model, shard, weights, order, steps, batch)
            return time.perf_counter() - start

        round_s(2)  # traces the compiled loop
        steps = 4
        while (took := round_s(steps)) < seconds / 4:  # grow the round until it fills a quarter of the window
            steps *= 2
        rounds.append((round_s, max(2, round(steps * seconds / took))))
    cells = []
    for (name, batch), (_, steps), timed in zip(CELLS, rounds, interleaved(rounds, repeats), strict=True):
        median = timed[len(timed) // 2]
        cells.append(
            {
                "model": name,
                "batch_size": batch,
                "steps": steps,
                "step_s": median,
                "all": timed,
                "spread": (timed[-1] - timed[0]) / median,
            }
        )
    wire = _time_wire([get_weights(models[name]) for name in ("mlp", "cnn")], seconds, repeats)
    # TensorFlow's threads as its environment sets them (its config API reads 0, "unset", for those)
    threads = {key: os.environ.get(key) for key in WORKER_THREADS}
    return {
        "cells": cells,
        "framework_rss_mb": framework_rss_mb,
        "tensorflow": tf.__version__,
        "wire": wire,
        "timed_in": {"pid": os.getpid(), "threads": threads},
    }


def interleaved(rounds: list[tuple[Callable[[int], float], int]], repeats: int) -> list[list[float]]:
    """Each round's seconds per step over ``repeats`` passes, sorted; a pass times every round once, in order.

    ``rounds`` are ``(timer, steps)``: ``timer(steps)`` runs that many steps and returns their seconds.
    Interleaved, a slow spell of the machine lands on every cell alike instead of on one cell's
    repeats, where it would bend the fit.
    """
    times: list[list[float]] = [[] for _ in rounds]
    for _ in range(repeats):
        for timed, (timer, steps) in zip(times, rounds, strict=True):
            timed.append(timer(steps) / steps)
    return [sorted(timed) for timed in times]


def _time_wire(weights: list[list[np.ndarray]], seconds: float, repeats: int) -> dict[str, Any]:
    """Seconds per byte of the device's side of a round's exchange, over both models' weights.

    What a device does to the weights it is sent and the delta it sends back,
    beside the training: decrypt the record layer (AES-GCM, as TLS 1.3 does,
    through OpenSSL as the ``ssl`` module does), view the flat buffer as the
    model's arrays, take the delta, copy it out, encrypt. The sockets' kernel
    copies are not in it.
    """
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from edgelab.common.wire import Flat, pack

    cipher, nonce = AESGCM(bytes(32)), bytes(12)
    per_byte = []
    for arrays in weights:
        layout, (flat,) = pack(arrays)  # one float32 buffer, as a round's weights travel
        sealed = cipher.encrypt(nonce, flat.tobytes(), None)

        def exchange(times: int, sealed: bytes = sealed, layout: Any = layout, flat: np.ndarray = flat) -> float:
            start = time.perf_counter()
            for _ in range(times):
                received = np.frombuffer(cipher.decrypt(nonce, sealed, None), dtype=np.float32)
                Flat(layout, (received,))  # the arrays' views a device's model takes
                delta = received - flat
                cipher.encrypt(nonce, delta.tobytes(), None)
            return time.perf_counter() - start

        times = 1
        while (took := exchange(times)) < seconds / 8:
            times *= 2
        times = max(1, round(times * seconds / 4 / took))
        runs = sorted(exchange(times) / times for _ in range(repeats))
        per_byte.append(runs[len(runs) // 2] / (2 * len(sealed)))  # a round receives and sends the weights' bytes
    return {
        "s_per_byte": float(np.median(per_byte)),
        "per_model": dict(zip(("mlp", "cnn"), per_byte, strict=True)),
        "what": "AES-GCM decrypt, the arrays' views, delta, copy out, AES-GCM encrypt; per byte each way",
    }


if __name__ == "__main__":
    print(json.dumps(_time_cells(float(sys.argv[1]), int(sys.argv[2]))))

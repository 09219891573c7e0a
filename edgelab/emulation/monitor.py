"""Per-device hardware monitoring: CPU, resident memory and network bytes over time.

This plays the role Ganglia plays in Park et al. 2020 (there: every 30 s over
UDP). Each device worker runs a ``ResourceSampler`` thread that reads its own
process at a fixed interval:

* ``cpu_s``: CPU seconds of the whole worker process (all threads; TensorFlow
  computes in its own threads),
* ``rss_bytes``: resident set size,
* ``bytes_sent`` / ``bytes_received``: the payload bytes the device moved
  through Dask (weights in, updates out, data shards), counted exactly by the
  runtime at the point they cross the wire;
* ``nic_bytes_sent`` / ``nic_bytes_received``: what the host's network
  interfaces (all but loopback) counted, headers and Dask's own messages
  included. On a real board, or a shaped host (``edgelab.cluster.shaped_hosts``, a
  network namespace per device), that is the device's own link; on the
  embedded cluster the devices talk over loopback, so these count the
  machine's other traffic, none of theirs.

The samples leave the device with every round's result (``drain``), as
Ganglia's reports leave a board every 30 s: a device that dies loses only what
it sampled since its last round.

``utilisation`` turns cumulative samples into per-interval rates.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd
import psutil

# A smoke run lasts seconds; sample often enough to get several points.
DEFAULT_INTERVAL_S = 0.25


@dataclass
class ResourceSampler:
    """Sample one process at a fixed interval in a daemon thread.

    Parameters
    ----------
    counters
        Returns the cumulative ``(bytes_sent, bytes_received)`` of the device.
    interval_s
        Seconds between samples.
    pid
        Process to watch; this process by default.
    """

    counters: Callable[[], tuple[int, int]]
    interval_s: float = DEFAULT_INTERVAL_S
    pid: int | None = None
    samples: list[dict[str, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {self.interval_s!r}")
        self._process = psutil.Process(self.pid)

    def sample(self) -> dict[str, float]:
        """Take one sample now and keep it."""
        cpu = self._process.cpu_times()
        sent, received = self.counters()
        nic_sent, nic_received = nic_counters()
        row = {
            "t": time.time(),
            "cpu_s": cpu.user + cpu.system,
            "rss_bytes": float(self._process.memory_info().rss),
            "bytes_sent": float(sent),
            "bytes_received": float(received),
            "nic_bytes_sent": float(nic_sent),
            "nic_bytes_received": float(nic_received),
        }
        with self._lock:
            self.samples.append(row)
        return row

    def start(self) -> None:
        """Start sampling in the background (one sample immediately)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self.sample()
        self._thread = threading.Thread(target=self._run, name="edgelab-monitor", daemon=True)
        self._thread.start()

    def drain(self) -> list[dict[str, float]]:
        """Hand over the samples taken since the last drain, and keep sampling."""
        with self._lock:
            taken, self.samples = self.samples, []
        return taken

    def stop(self) -> list[dict[str, float]]:
        """Stop sampling, take a last sample and hand over every sample not drained yet."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5 * self.interval_s + 1)
            self._thread = None
        self.sample()
        return self.drain()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()


def nic_counters() -> tuple[int, int]:
    """Bytes sent and received by this network namespace's interfaces, loopback left out."""
    counters = psutil.net_io_counters(pernic=True)
    real = [c for name, c in counters.items() if name != "lo"]
    return sum(c.bytes_sent for c in real), sum(c.bytes_recv for c in real)


def utilisation(samples: pd.DataFrame, *, cores: int = 1) -> pd.DataFrame:
    """Per-interval rates from cumulative samples of one device.

    Parameters
    ----------
    samples
        Columns ``t, cpu_s, rss_bytes, bytes_sent, bytes_received`` in time order.
    cores
        CPU utilisation is given as a percentage of this many cores.

    Returns
    -------
    pandas.DataFrame
        One row per interval: ``t`` (end), ``dt``, ``cpu_pct``, ``rss_mb``,
        ``sent_kb_s``, ``received_kb_s``.
    """
    s = samples.sort_values("t")
    dt = s["t"].diff()
    out = pd.DataFrame(
        {
            "t": s["t"],
            "dt": dt,
            "cpu_pct": 100.0 * s["cpu_s"].diff() / dt / cores,
            "rss_mb": s["rss_bytes"] / 2**20,
            "sent_kb_s": s["bytes_sent"].diff() / dt / 1e3,
            "received_kb_s": s["bytes_received"].diff() / dt / 1e3,
        }
    )
    return out[out["dt"] > 0].reset_index(drop=True)

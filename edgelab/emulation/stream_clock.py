"""Emulated device time of a stream: measured stage costs composed as a pipeline runs them.

The same device model as the rest of edgelab (``edgelab.emulation.timeline``): a stage's
time on a device is the CPU time its process measured for the micro-batch,
times the profile's speed factor; a transfer takes the link's latency plus
the bytes really sent over the link's rate. Composition, micro-batch by
micro-batch in the order they entered:

* the master (the client; a board of the same profile, Jeon's master node)
  sends each branch its copy of the input over its uplink, one send at a time;
* a device starts a micro-batch when its input has arrived and it finished the
  previous one (one micro-batch at a time per device, first in first out);
* a device's output goes over its own uplink to the next device, or back to the
  master (full-duplex switched Ethernet: every link direction carries one flow);
* a device's work on a message's bytes (``MessageCost.per_byte_s``: TLS,
  framing, the socket) occupies the device as its compute does, but runs while
  the bytes are on the wire: taking an input in starts when its first byte is
  sent and the device is free, and the input is in when both its last byte has
  arrived and that work is done; handing an output on runs beside the uplink,
  whose last byte leaves no sooner than the work is done;
* at most ``max_in_flight`` micro-batches are in the system: the next is sent
  when one comes out (the stream's backpressure);
* a hand-off (``MessageCost.per_hop_s``, default none) takes that much more wall
  time between a micro-batch leaving one device and arriving at the next, beside
  the link's latency: the framework's path from one task to the next (the
  scheduler told, the next device told, the data fetched), which no device is
  busy for the whole of.

The bound is the slowest resource's median time per micro-batch (a device's
compute or a link), the most throughput any schedule of these measured costs
could reach.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from edgelab.common.errors import ConfigError
from edgelab.emulation.profiles import DeviceProfile

MASTER = "master"


@dataclass(frozen=True)
class EmulatedStream:
    """A stream on the emulated clock."""

    timeline: pd.DataFrame  # one row per (branch, stage, micro-batch): device, arrive, start, end, compute, queue
    processing_s: float  # first input sent -> last output received at the master
    images: int
    throughput: float  # images / processing_s
    steady_throughput: float  # images after the first output / time between the first and the last output
    bound_throughput: float  # micro-batch images / the slowest resource's median time per micro-batch
    bottleneck: str  # which resource that is
    resources: pd.DataFrame  # median seconds per micro-batch of every device and link

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no per-row timeline)."""
        return {
            "processing_s": self.processing_s,
            "images": self.images,
            "throughput": self.throughput,
            "steady_throughput": self.steady_throughput,
            "bound_throughput": self.bound_throughput,
            "steady_over_bound": self.steady_throughput / self.bound_throughput if self.bound_throughput else None,
            "bottleneck": self.bottleneck,
        }


@dataclass(frozen=True)
class MessageCost:
    """Device seconds a stage spends on a micro-batch's messages: taking its input in, handing its output on.

    ``per_message_s`` whatever their size (the event loop, the task's bookkeeping), ``per_byte_s`` on each
    byte in and out (TLS, framing, the socket). ``per_hop_s``: not device time but the wall a hand-off takes
    beyond the link's latency and bytes, on every hop (the master's to the first stage and back included).
    """

    per_message_s: float = 0.0
    per_byte_s: float = 0.0
    per_hop_s: float = 0.0

    def byte_seconds(self, row: Any, column: str) -> float:
        """The device's work on one side's bytes of a stage's record (``bytes_in`` or ``bytes_out``)."""
        return self.per_byte_s * float(row[column]) if self.per_byte_s else 0.0


def stage_contention(stream: pd.DataFrame, alone: pd.DataFrame, cpu_column: str = "cpu_s") -> dict[str, float]:
    """Per stage: its median CPU per micro-batch in ``stream`` over the same in ``alone``.

    ``alone``: records of the same stages with one micro-batch in flight, so no
    other stage computes meanwhile. Separate boards share no caches and no
    cores; the emulated cluster's device processes share this host's, and a
    stage's CPU time grows with the others busy beside it (measured for Jeon's
    five stages on two cores, and for ResNet-20 cut in five on limited hosts:
    12.9 s of board time for the busiest stage's 8.7 s of wall). Stages
    ``alone`` lacks get no factor.
    """
    for name, frame in (("stream", stream), ("alone", alone)):
        if cpu_column not in frame:
            raise ConfigError("cpu_column", cpu_column, f"a column of the {name} records: cpu_s or compute_cpu_s")
    busy = stream.groupby("stage")[cpu_column].median()
    own = alone.groupby("stage")[cpu_column].median()
    return {str(s): float(busy[s] / own[s]) for s in own.index if s in busy.index and own[s] > 0}


def without_contention(records: pd.DataFrame, factors: dict[str, float], cpu_column: str = "cpu_s") -> pd.DataFrame:
    """``records`` with each stage's CPU divided by its contention factor (``stage_contention``; 1 where none)."""
    return records.assign(**{cpu_column: records[cpu_column] / records["stage"].map(factors).fillna(1.0)})


def compose(
    records: pd.DataFrame,
    sends: pd.DataFrame,
    branches: list[list[tuple[str, str]]],
    *,
    profile: DeviceProfile,
    speed_factor: float,
    max_in_flight: int,
    messages: MessageCost | None = None,
    cpu_column: str = "cpu_s",
) -> EmulatedStream:
    """Compose measured stage records into the stream's emulated timeline.

    Parameters
    ----------
    records
        ``StreamResult.records``: branch, stage, micro_batch, images, cpu_s, bytes_out.
    sends
        ``StreamResult.sends``: micro_batch, branch, bytes.
    branches
        The placement's chains of (stage, device).
    profile
        Device profile of every device and of the master (link rate and latency).
    speed_factor
        Device seconds per host CPU second.
    max_in_flight
        The stream's backpressure limit.
    messages
        What each micro-batch's messages cost a stage's device beside its
        compute (default: nothing), measured where it can be.
    cpu_column
        The records' column of a stage's host CPU seconds: ``cpu_s``, its
        process's (the comms' work meanwhile included), or ``compute_cpu_s``,
        its computing threads' alone, for a clock that charges the messages
        through ``messages`` (else they would be paid twice).

    Returns
    -------
    EmulatedStream
        Per-row times and the stream's totals on the emulated clock.
    """
    messages = messages or MessageCost()
    if cpu_column not in records:
        raise ConfigError("cpu_column", cpu_column, "a column of the stream's records: cpu_s or compute_cpu_s")
    rate, latency = profile.link_bytes_per_s, profile.latency_s
    cost = records.set_index(["branch", "stage", "micro_batch"])
    send_bytes = sends.drop_duplicates(["micro_batch", "branch"]).set_index(["micro_batch", "branch"])["bytes"]
    n = int(records["micro_batch"].max()) + 1
    images = records[records["branch"] == 0].groupby("micro_batch")["images"].first()
    device_free: dict[str, float] = {}
    uplink_free: dict[str, float] = {}
    out_arrival = np.zeros(n)
    rows = []
    for m in range(n):
        gate = out_arrival[m - max_in_flight] if m >= max_in_flight else 0.0
        arrivals = []
        for b, chain in enumerate(branches):
            size = float(send_bytes.loc[(m, b)])
            # The incoming transfer of the next device: when its first byte leaves, when its last is sent.
            sent_from = max(gate, uplink_free.get(MASTER, 0.0))
            sent_until = sent_from + size / rate
            uplink_free[MASTER] = sent_until
            for i, (stage, device) in enumerate(chain):
                row = cost.loc[(b, stage, m)]
                take_in, hand_on = messages.byte_seconds(row, "bytes_in"), messages.byte_seconds(row, "bytes_out")
                arrive = sent_until + latency + messages.per_hop_s
                begin = max(arrive, max(sent_from, device_free.get(device, 0.0)) + take_in)
                compute = float(row[cpu_column]) * speed_factor + messages.per_message_s
                end = begin + compute
                device_free[device] = end + hand_on
                sent = float(row["bytes_out"])
                sent_from = max(end, uplink_free.get(device, 0.0))
                sent_until = max(sent_from + sent / rate, end + hand_on)
                uplink_free[device] = sent_until
                rows.append(
                    {
                        "branch": b,
                        "stage": stage,
                        "position": i,
                        "device": device,
                        "micro_batch": m,
                        "arrive": arrive,
                        "start": begin,
                        "end": end,
                        "compute_s": compute + take_in + hand_on,  # the device's busy time for the micro-batch
                        "queue_s": begin - arrive,
                        "transfer_s": sent / rate + latency,
                    }
                )
            arrivals.append(sent_until + latency + messages.per_hop_s)
        out_arrival[m] = max(arrivals)
    timeline = pd.DataFrame(rows)
    total_images = int(images.sum())
    processing = float(out_arrival.max())
    first = float(out_arrival.min())
    steady = (total_images - int(images.iloc[0])) / (processing - first) if n > 1 and processing > first else np.nan
    resources = _resources(timeline, sends, rate)
    bottleneck = str(resources["median_s"].idxmax())
    mb_images = float(images.median())
    return EmulatedStream(
        timeline=timeline,
        processing_s=processing,
        images=total_images,
        throughput=total_images / processing,
        steady_throughput=float(steady),
        bound_throughput=mb_images / float(resources["median_s"].max()),
        bottleneck=bottleneck,
        resources=resources,
    )


def _resources(timeline: pd.DataFrame, sends: pd.DataFrame, rate: float) -> pd.DataFrame:
    """Median busy seconds per micro-batch of each device's compute and each uplink."""
    compute = timeline.groupby("device")["compute_s"].median().rename(lambda d: f"{d} compute")
    links = (timeline.assign(busy=timeline["transfer_s"]).groupby("device")["busy"].median()).rename(
        lambda d: f"{d} uplink"
    )
    master = sends.groupby("micro_batch")["bytes"].sum().median() / rate
    frame = pd.concat([compute, links, pd.Series({f"{MASTER} uplink": master})]).rename("median_s").to_frame()
    return frame


def speedup_bound(stage_seconds: list[float]) -> float:
    """The most a pipeline of these stage times can gain over one device running them all: sum / max."""
    if not stage_seconds or max(stage_seconds) <= 0:
        return float("nan")
    return float(sum(stage_seconds) / max(stage_seconds))

"""Placing a chain of operators on an end / edge / cloud hierarchy: exhaustive search against a greedy rule.

The survey (qiao, section 1.3) frames resource management on the IoT-fog-cloud
continuum as deciding where each piece of processing runs, and notes that
scheduling linear chains of operators onto heterogeneous resources is NP-hard.
Here a chain is a network cut into stages (``edgelab.pipeline.partition``);
one task's images start at an end device, go through the stages in order,
each on some host of the hierarchy, and the answer goes back to the end
device. A placement gives each stage a host; its latency is

* each stage's time on its host's tier: the network's time per image on that
  tier (the hierarchy's calibration, ``edgelab.emulation.tier_clock``) times the task's
  images times the stage's share of the network's multiply-accumulates;
* each move between two different hosts: half the round-trip latency of the
  higher tier's link (the report's latencies count sending and receiving
  together) plus the bytes at its bandwidth; the images cross as uint8, the
  activations as float32;
* the answer's way back to the end device, the same way.

``exhaustive`` tries every host for every stage (hosts^n placements) and keeps
the fastest; ``greedy`` walks the chain once, putting each stage on the host
that finishes it first from where the previous one ended (ties to the host
closest to the edge), blind to the moves it makes later stages pay. The
exhaustive search's time grows as hosts^n; that shows the cost of searching,
it does not prove hardness.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

from edgelab.common.errors import ConfigError
from edgelab.emulation.tier_clock import TierCalibration
from edgelab.emulation.tiers import TIERS, HierarchySpec

#: Images cross as uint8 pixels; activations as float32.
PIXEL_BYTES, ACTIVATION_BYTES = 1, 4


@dataclass(frozen=True)
class Chain:
    """One task through a cut network: each stage's seconds per tier, and the bytes each stage receives.

    ``stage_s[tier][i]`` is stage i's time on a device of ``tier``;
    ``bytes_in[i]`` what stage i receives (the images for stage 0);
    ``result_bytes`` what the last stage sends back.
    """

    stage_s: dict[str, tuple[float, ...]]
    bytes_in: tuple[int, ...]
    result_bytes: int

    def __post_init__(self) -> None:
        n = len(self.bytes_in)
        if n < 1 or any(len(times) != n for times in self.stage_s.values()):
            raise ConfigError("chain", f"{n} stages", "the same number (>= 1) of times on every tier and of inputs")

    @property
    def n_stages(self) -> int:
        """Stages in the chain."""
        return len(self.bytes_in)

    @classmethod
    def from_partition(
        cls, partition: object, calibration: TierCalibration, network: str, images: int, tiers: tuple[str, ...]
    ) -> Chain:
        """The chain of ``partition`` (of ``network``) for a task of ``images`` CIFAR images, on ``tiers``."""
        stages = partition.stages  # type: ignore[attr-defined]
        total = sum(s.macs for s in stages)
        stage_s = {
            tier: tuple(calibration.stage_s(tier, network, images) * s.macs / total for s in stages) for tier in tiers
        }
        first = images * math.prod(stages[0].input_shape) * PIXEL_BYTES
        later = [images * s.output_bytes for s in stages[:-1]]  # output_bytes: float32 per image
        return cls(stage_s, (first, *later), images * stages[-1].output_bytes)


@dataclass(frozen=True)
class Placed:
    """A placement: the host of each stage, its latency, how many placements were tried, and how long it took."""

    hosts: tuple[str, ...]
    latency_s: float
    evaluated: int
    search_s: float


def hosts_of(spec: HierarchySpec, source: str | None = None) -> tuple[list[str], str, dict[str, str]]:
    """The hosts a stage may run on (every device of ``spec``), the source end device, and each host's tier."""
    tiers = spec.devices()
    source = source or next(d for d, t in tiers.items() if t == "end")
    if tiers.get(source) != "end":
        raise ConfigError("source", source, f"an end device of the hierarchy ({', '.join(tiers)})")
    # The other end devices are the source's peers, reached over nothing the hierarchy describes: not hosts.
    hosts = [source] + [d for d, t in tiers.items() if t != "end"]
    return hosts, source, {h: tiers[h] for h in hosts}


def hop_s(spec: HierarchySpec, a_tier: str, b_tier: str, nbytes: int) -> float:
    """Seconds for ``nbytes`` to go from a host of ``a_tier`` to another of ``b_tier``: the higher tier's link."""
    tier = spec.tier(max(a_tier, b_tier, key=TIERS.index))
    assert tier is not None
    return tier.latency_s / 2 + tier.transfer_s(nbytes)


def latency(chain: Chain, spec: HierarchySpec, hosts: tuple[str, ...], tier_of: dict[str, str], source: str) -> float:
    """Seconds from the images at ``source`` to the answer back there, with stage i on ``hosts[i]``."""
    if len(hosts) != chain.n_stages:
        raise ConfigError("hosts", hosts, f"one host per stage ({chain.n_stages})")
    total, at = 0.0, source
    for i, host in enumerate(hosts):
        if host != at:
            total += hop_s(spec, tier_of[at], tier_of[host], chain.bytes_in[i])
        total += chain.stage_s[tier_of[host]][i]
        at = host
    if at != source:
        total += hop_s(spec, tier_of[at], tier_of[source], chain.result_bytes)
    return total


def exhaustive(chain: Chain, spec: HierarchySpec, source: str | None = None) -> Placed:
    """The fastest placement, found by trying every host for every stage (ties: the first tried)."""
    hosts, source, tier_of = hosts_of(spec, source)
    start = time.perf_counter()
    best, best_s, tried = (), math.inf, 0
    for candidate in itertools.product(hosts, repeat=chain.n_stages):
        tried += 1
        seconds = latency(chain, spec, candidate, tier_of, source)
        if seconds < best_s:
            best, best_s = candidate, seconds
    return Placed(best, best_s, tried, time.perf_counter() - start)


def greedy(chain: Chain, spec: HierarchySpec, source: str | None = None) -> Placed:
    """Each stage on the host that finishes it first from where the last one ended (ties: closest to the edge)."""
    hosts, source, tier_of = hosts_of(spec, source)
    start = time.perf_counter()
    at, chosen, tried = source, [], 0
    for i in range(chain.n_stages):

        def finish(host: str, i: int = i, at: str = at) -> tuple[float, int]:
            move = hop_s(spec, tier_of[at], tier_of[host], chain.bytes_in[i]) if host != at else 0.0
            return move + chain.stage_s[tier_of[host]][i], TIERS.index(tier_of[host])

        tried += len(hosts)
        at = min(hosts, key=finish)
        chosen.append(at)
    placed = tuple(chosen)
    return Placed(placed, latency(chain, spec, placed, tier_of, source), tried, time.perf_counter() - start)

"""Zhang 2018, the networks of the three tiers: Figure 2, drawn from the models edgelab builds.

The notebook renders the item with ``edgelab.papers.zhang2018.networks_figures``: it
builds MobileNet, ResNet-34 and WRN-28-10, counts their layers and parameters
and checks them against the report's. Nothing is trained, timed or read from a
dataset, so the item is the same at every size: the full profile only labels
its run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Paper-sized parameters: the same networks as the smoke run (they do not depend on any size).
FULL_PROFILE: dict[str, Any] = {"profile": "full"}
#: The networks built, by name, with the tier that runs each (``edgelab.papers.zhang2018.networks_figures`` draws them).
TIER_OF = {"mobilenet": "end", "resnet34": "edge", "wrn-28-10": "cloud", "wrn-28-10-flatten": "cloud"}


@dataclass(frozen=True)
class NetworksParams:
    """Nothing to choose: the networks are the report's at every size."""


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names: none).
PARAMS = NetworksParams


@dataclass(frozen=True)
class NetworksPlan:
    """The networks to build and draw."""

    params: NetworksParams

    def describe(self) -> str:
        """What is built."""
        return f"networks built for 32x32x3 images: {', '.join(TIER_OF)}"


def prepare() -> NetworksPlan:
    """Nothing to load or check: the networks are built when counted and drawn."""
    return NetworksPlan(NetworksParams())


def plan_facts(plan: NetworksPlan) -> str:
    """What nbval checks: each network's parameters, all and trainable, counted on the built model."""
    from edgelab.models.tiers import build_tier_network, sizes

    lines = []
    for name, tier in TIER_OF.items():
        counted = sizes(build_tier_network(name))
        total, trainable = counted["parameters"], counted["trainable_parameters"]
        lines.append(f"{tier:5s} {name:18s} {total:>10,d} parameters, {trainable:>10,d} trainable")
    return "\n".join(lines)


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: never, it reads no dataset (built networks only)."""
    return None

"""Zhang 2018, the networks of the three tiers: Figure 2, drawn from the models edgelab builds.

The notebook renders the item with ``edgelab.papers.zhang2018.networks_figures``: it
builds MobileNet, ResNet-34 and WRN-28-10, counts their layers and parameters
and checks them against the report's. Nothing is trained, timed or read from a
dataset, so the item is the same at every size: the full profile only labels
its run.
"""

from __future__ import annotations

from typing import Any

#: Paper-sized parameters: the same networks as the smoke run (they do not depend on any size).
FULL_PROFILE: dict[str, Any] = {"profile": "full"}


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: never, it reads no dataset (built networks only)."""
    return None

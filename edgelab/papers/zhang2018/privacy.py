"""Zhang 2018, privacy: Tables 3 and 4, eq7 and eq8 — what the tiers' partial networks let an observer rebuild.

The notebook renders the items with ``edgelab.papers.zhang2018.privacy_figures`` on a
few CIFAR-100 test images (or their stand-in); it trains nothing and runs no
cluster. This module checks the notebook's parameters and loads those images
(``prepare``), says whether they can be had here, so that ``edgelab
reproduce`` skips the notebook, saying why, rather than failing it, and what
the full profile runs. Tables 3 and 4 and eq7, eq8 are the same at
every size (the modules' shapes and counts, the clock for a task of 50
images); only the inversion attack, beyond the report, takes images: the full
profile gives it a task of the report's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgelab.common import checks
from edgelab.data import Dataset, load_dataset
from edgelab.papers import harness

#: The dataset the notebook reads its test images from.
DATASET = "cifar100"
#: A task of the report's job (Table 4 times one): the images the full profile's attack rebuilds.
REPORT_TASK_IMAGES = 50

FULL_PROFILE: dict[str, Any] = {"profile": "full", "images": REPORT_TASK_IMAGES}


def missing_data(data_dir: str | None = None) -> str | None:
    """Why the notebook cannot run here: no source supplies CIFAR-100 or its stand-in; None if one does."""
    return harness.missing_dataset(DATASET, data_dir)


@dataclass(frozen=True)
class PrivacyParams:
    """The attack's images and where they come from; the tables are the same at every size."""

    images: int = 8  # test images the attack reconstructs
    data_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        checks.integer("images", self.images, at_least=1)
        checks.integer("seed", self.seed, at_least=0)


#: What the notebook's parameters are (``edgelab.papers.notebook.prepare`` takes these names).
PARAMS = PrivacyParams


@dataclass(frozen=True)
class PrivacyPlan:
    """The checked parameters and the test images the attack rebuilds."""

    params: PrivacyParams
    dataset: Dataset

    def describe(self) -> str:
        """The images and their source."""
        return f"{len(self.dataset.x_test)} images from {self.dataset.source}"


def prepare(**kwargs: Any) -> PrivacyPlan:
    """The test images the attack rebuilds, its parameters checked under the notebook's names first."""
    params = harness.parse_params(PrivacyParams, kwargs)
    return PrivacyPlan(
        params, load_dataset(DATASET, data_dir=params.data_dir, test_limit=params.images, seed=params.seed)
    )

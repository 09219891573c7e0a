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


def prepare(*, images: int, data_dir: str | None = None, seed: int = 0) -> Dataset:
    """The test images the attack rebuilds, its parameters checked under the notebook's names first."""
    checks.integer("images", images, at_least=1)
    checks.integer("seed", seed, at_least=0)
    return load_dataset(DATASET, data_dir=data_dir, test_limit=images, seed=seed)

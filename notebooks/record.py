"""Re-record notebooks' outputs in the environment nbval checks them in.

    .venv/bin/python notebooks/record.py park2020_async [park2020_resnet ...]

Each notebook runs in place (``jupyter nbconvert --execute --inplace``) with
what ``./run.sh test`` gives its kernel: the scratch results store and reports
folder, the data directory the notebook is checked on (an empty one, or the
offline samples it needs; ``conftest.py`` beside this file) and the suite's
cap on oneDNN's instruction set (``conftest.py`` at the repository's root).
Recorded another way, a value that depends on float rounding is checked
against the rounding of other kernels: the smoke asynchronous LeNet-CNN's
accuracy read 0.130 with AVX-512 kernels and 0.092 with AVX2 ones.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# This folder's conftest under a name of its own (in pytest, ``conftest`` is the root's): what nbval gives a kernel.
nbval_env = _load(HERE / "conftest.py", "edgelab_nbval_env")


def suite_settings() -> dict[str, str]:
    """What the suite's root ``conftest.py`` puts in the environment before any test (oneDNN's cap on x86-64)."""
    saved = dict(os.environ)
    try:
        runpy.run_path(str(HERE.parent / "conftest.py"))
        return {key: value for key, value in os.environ.items() if saved.get(key) != value}
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _checked(name: str) -> tuple[Path, Path | None]:
    """The notebook and the data directory it is checked on; SystemExit if either is missing."""
    notebook = HERE / f"{name}.ipynb"
    if not notebook.is_file():
        raise SystemExit(f"record.py: notebook {name!r}: no {notebook}")
    data_dir = None
    if (needs := nbval_env.NEEDS_DATA.get(name)) is not None:
        data_dir = nbval_env.data_dir_with(needs)
        if data_dir is None:
            wanted = ", ".join(map(str, needs))
            raise SystemExit(f"record.py: {name} needs {wanted} in EDGELAB_DATA_DIR (or ../shared/data)")
    return notebook, data_dir


def environment(name: str) -> tuple[Path, dict[str, str]]:
    """The notebook and the environment its kernel gets under nbval (its scratch folder made)."""
    notebook, data_dir = _checked(name)
    return notebook, os.environ | suite_settings() | nbval_env.notebook_env(notebook, data_dir)


def record(name: str) -> None:
    """Execute ``notebooks/<name>.ipynb`` in place, in the environment nbval checks it in."""
    notebook, env = environment(name)
    try:
        command = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace"]
        subprocess.run([*command, str(notebook)], env=env, check=True)
    finally:
        shutil.rmtree(nbval_env.scratch_of(notebook), ignore_errors=True)


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", help="notebook names, without .ipynb")
    args = parser.parse_args()
    for name in args.names:
        _checked(name)  # every name checked before the first notebook runs
    for name in args.names:
        record(name)


if __name__ == "__main__":
    main()

"""The package's shape: its layers, no import circle, a few modules at its top, one public API.

The layers and the circles are import-linter's contracts (pyproject.toml).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from edgelab.common.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "edgelab"


def test_the_layers_hold_and_no_modules_import_each_other_in_a_circle() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    done = subprocess.run([lint, "--no-cache"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 kept, 0 broken" in done.stdout


def test_the_package_top_holds_packages_and_a_few_modules() -> None:
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert modules == ["__init__.py", "cli.py"]
    assert len(packages) >= 10


def test_every_package_says_what_it_owns() -> None:
    for init in PACKAGE.rglob("__init__.py"):
        doc = init.read_text().split('"""')
        assert len(doc) >= 3 and len(doc[1].strip()) > 40, f"{init} has no docstring that says what it owns"


def test_the_public_api_is_one_import() -> None:
    import edgelab

    for name in ("connect", "train", "TrainConfig", "Dataset", "load_dataset", "run_pipeline", "RunResult"):
        assert hasattr(edgelab, name), name
    assert set(edgelab.__all__) <= set(dir(edgelab))


def test_no_public_name_hides_a_subpackage() -> None:
    # A name exported at the top that equals a subpackage's would replace the attribute, and
    # ``import edgelab.<package>.<module> as m`` (which reads attributes) would fail.
    import importlib

    import edgelab

    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert not packages & set(edgelab.__all__)
    for name in packages:
        assert getattr(edgelab, name, importlib.import_module(f"edgelab.{name}")).__name__ == f"edgelab.{name}"

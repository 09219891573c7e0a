"""The code passes the project's lint and format rules (pyproject.toml, [tool.ruff])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE = ["edgelab", "tests", "benchmarks", "conftest.py", "notebooks/conftest.py", "notebooks/record.py"]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_passes(command: list[str]) -> None:
    # Execute
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command, *CODE], cwd=ROOT, capture_output=True, text=True, check=False
    )

    # Assert: on failure, ruff's own report says what and where
    assert done.returncode == 0, done.stdout + done.stderr

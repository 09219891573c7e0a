"""./run.sh's own set-up: bad input is refused before a virtualenv is made."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from edgelab.paths import REPO_ROOT


def _run_sh(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO_ROOT / "run.sh"), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_unknown_installer_is_refused_naming_it_before_any_virtualenv_is_made(tmp_path: Path) -> None:
    venv = tmp_path / "venv"

    done = _run_sh("reproduce", env={"EDGELAB_INSTALLER": "conda", "EDGELAB_VENV": str(venv)})

    assert done.returncode == 1
    assert "EDGELAB_INSTALLER=conda: allowed are uv (the default) and pip" in done.stderr
    assert not venv.exists()


def test_the_help_names_the_installer_choice(tmp_path: Path) -> None:
    done = _run_sh("--help", env={"EDGELAB_VENV": str(tmp_path / "venv")})

    assert done.returncode == 0
    assert "EDGELAB_INSTALLER  uv (default) or pip" in done.stdout
    assert not (tmp_path / "venv").exists()

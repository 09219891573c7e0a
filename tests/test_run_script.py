"""./run.sh's own set-up: bad input is refused before a virtualenv is made; a half-made one is made again."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from edgelab.common.paths import REPO_ROOT


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


# The install fails at once (no package index), right after the virtualenv is made.
_NO_INSTALL = {"EDGELAB_INSTALLER": "pip", "PIP_NO_INDEX": "1"}


def test_a_virtualenv_left_half_made_by_an_interrupted_run_is_made_again(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # What a run stopped in ensurepip leaves: an interpreter that does not work, and the mark of an unfinished venv.
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    (venv / "bin" / "python").chmod(0o755)
    (venv / ".edgelab-unfinished").touch()

    done = _run_sh("reproduce", env={"EDGELAB_VENV": str(venv), **_NO_INSTALL})

    assert done.returncode != 0  # the install itself failed, as asked
    assert f"run.sh: {venv} was left half made by an earlier run; making it again" in done.stderr
    made = subprocess.run([str(venv / "bin" / "python"), "-c", "import pip"], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    assert (venv / ".edgelab-unfinished").exists()  # edgelab is not installed in it yet


def test_a_virtualenv_another_run_is_still_making_is_left_to_it(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "half").write_text("")
    # A run.sh still at work: its command line names run.sh, as a running one's does.
    maker = subprocess.Popen(["bash", "-c", "sleep 60; true", "run.sh"])
    try:
        (venv / ".edgelab-unfinished").write_text(f"{maker.pid}\n")

        done = _run_sh("reproduce", env={"EDGELAB_VENV": str(venv), **_NO_INSTALL})
    finally:
        maker.kill()
        maker.wait()

    assert done.returncode == 1
    assert f"another run.sh (pid {maker.pid}) is still setting up {venv}; run this again once it has finished" in (
        done.stderr
    )
    assert (venv / "half").exists()


def test_a_folder_that_was_there_before_the_virtualenv_is_never_removed_as_half_made(tmp_path: Path) -> None:
    venv = tmp_path / "mine"
    venv.mkdir()
    (venv / "notes.txt").write_text("the user's")

    for _ in range(2):  # the second run finds the venv made but edgelab not installed
        done = _run_sh("reproduce", env={"EDGELAB_VENV": str(venv), **_NO_INSTALL})
        assert done.returncode != 0
        assert "half made" not in done.stderr

    assert (venv / "notes.txt").read_text() == "the user's"
    assert not (venv / ".edgelab-unfinished").exists()
    assert (venv / "bin" / "python").exists()


def test_the_cluster_command_as_root_never_makes_or_installs_into_a_virtualenv(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        import pytest

        pytest.skip("run.sh's cluster command installs nothing only as root; this runs as a user")
    venv = tmp_path / "venv"

    done = _run_sh("cluster", "status", env={"EDGELAB_VENV": str(venv)})

    assert done.returncode == 1
    assert "never installs packages as root" in done.stderr
    assert not venv.exists()

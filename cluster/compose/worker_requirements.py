"""Print the pip requirements of an edgelab worker, one a line, read from pyproject.toml.

A worker (a container of docker-compose.yml, a Kubernetes pod, a Raspberry Pi)
needs edgelab's run-time dependencies, not the notebook and test tools. PyPI
has no ``tensorflow-cpu`` wheel for aarch64; there the ``tensorflow`` wheel is
the CPU build, so it is named instead, with the same bounds.

Usage: ``python3 worker_requirements.py pyproject.toml > requirements.txt``
(Python 3.11 or later, for tomllib). Used by the Dockerfile beside this file and
by ``cluster/pi/install-worker.sh``.
"""

from __future__ import annotations

import platform
import re
import sys
import tomllib
from pathlib import Path

# Client-side tools: notebooks, tests, lint, the report's browser, manifest validators.
CLIENT_ONLY = frozenset(
    {
        "check-jsonschema",
        "dask-labextension",
        "ipykernel",
        "jsonschema",
        "jupyterlab",
        "kubernetes-validate",
        "nbformat",
        "nbval",
        "papermill",
        "pytest",
        "ruff",
        "selenium",
    }
)

ARM64 = frozenset({"aarch64", "arm64"})

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def worker_requirements(pyproject: Path, *, machine: str) -> list[str]:
    """The requirements of ``pyproject``'s dependencies a worker on ``machine`` (``uname -m``) installs."""
    with pyproject.open("rb") as f:
        dependencies: list[str] = tomllib.load(f)["project"]["dependencies"]
    wanted = []
    for line in dependencies:
        match = _NAME.match(line)
        if match is None:
            raise ValueError(f"cannot read the package name of dependency {line!r} in {pyproject}")
        name = match.group(1).lower().replace("_", "-")
        if name in CLIENT_ONLY:
            continue
        if name == "tensorflow-cpu" and machine in ARM64:
            line = "tensorflow" + line[match.end() :]
        wanted.append(line)
    return wanted


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} path/to/pyproject.toml")
    print("\n".join(worker_requirements(Path(sys.argv[1]), machine=platform.machine())))

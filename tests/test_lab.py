"""./run.sh lab: JupyterLab on notebooks/, on loopback, with the Dask dashboard's extension served."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from edgelab.common.paths import REPO_ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> dict | list:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


@pytest.mark.integration
def test_lab_serves_the_notebooks_and_the_dask_extension_on_loopback(tmp_path: Path) -> None:
    # Prepare: the same options run.sh passes, on a free port with a known token
    port, token = _free_port(), "edgelab-test"
    cmd = [
        str(Path(sys.executable).parent / "jupyter"),
        "lab",
        "--no-browser",
        f"--notebook-dir={REPO_ROOT / 'notebooks'}",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.runtime_dir={tmp_path}",
        *(["--allow-root"] if os.geteuid() == 0 else []),  # as run.sh does
    ]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        # Execute: wait for the server, then list the notebooks and the Dask extension's clusters
        deadline = time.monotonic() + 60
        while True:
            try:
                contents = _get(f"{base}/api/contents?token={token}")
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.5)
        clusters = _get(f"{base}/dask/clusters?token={token}")
        with socket.socket() as s:  # not reachable on another address of this host
            other = s.connect_ex((socket.gethostbyname(socket.gethostname()), port))
    finally:
        server.terminate()
        server.wait(timeout=30)

    # Assert
    names = {c["name"] for c in contents["content"]}  # type: ignore[index]
    assert {"park2020_lenet.ipynb", "jeon_pipeline.ipynb"} <= names
    assert isinstance(clusters, list)
    assert other != 0 or socket.gethostbyname(socket.gethostname()).startswith("127.")

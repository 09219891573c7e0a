"""The reproduce command: which parameters each profile hands a notebook, and where reports go."""

from pathlib import Path

import pytest

from edgelab import cli
from edgelab.experiments import park2020_lenet

NOTEBOOK = cli.NOTEBOOKS_DIR / "park2020_lenet.ipynb"


def test_smoke_keeps_the_notebooks_own_parameters_and_writes_reports_root(tmp_path: Path) -> None:
    reports = cli.profile_reports_dir("smoke", tmp_path)
    assert reports == tmp_path
    assert cli.notebook_parameters("smoke", NOTEBOOK, reports) == {}


def test_full_profile_writes_beside_smoke_reports_never_over_them(tmp_path: Path) -> None:
    reports = cli.profile_reports_dir("full", tmp_path)
    assert reports == tmp_path / "full-profile"
    params = cli.notebook_parameters("full", NOTEBOOK, reports)
    assert params["reports_dir"] == str(tmp_path / "full-profile")
    assert {k: params[k] for k in park2020_lenet.FULL_PROFILE} == park2020_lenet.FULL_PROFILE


def test_every_notebook_declares_the_parameters_the_cli_injects() -> None:
    papermill = pytest.importorskip("papermill")
    for notebook in sorted(cli.NOTEBOOKS_DIR.glob("*.ipynb")):
        declared = set(papermill.inspect_notebook(str(notebook)))
        injected = set(cli.notebook_parameters("full", notebook, Path("reports")))
        assert injected <= declared, f"{notebook.name} lacks parameters {sorted(injected - declared)}"


def test_unknown_notebook_is_refused_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["reproduce", "--notebook", "no_such_notebook"])
    assert "'no_such_notebook'" in capsys.readouterr().err


def test_a_notebook_whose_data_no_source_supplies_is_skipped_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: an empty data directory and no network
    from edgelab import cli

    monkeypatch.setenv("EDGELAB_DATA_DIR", str(tmp_path / "no-data"))
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")
    notebook = cli.NOTEBOOKS_DIR / "jeon_pipeline.ipynb"
    # Execute
    failures = cli.reproduce("smoke", [notebook], reports=tmp_path / "reports")
    # Assert: nothing ran, nothing failed, and the reason names the dataset
    out = capsys.readouterr().out
    assert failures == 0
    assert "skipping jeon_pipeline.ipynb" in out and "PlantVillage" in out
    assert not (tmp_path / "reports" / "notebooks" / "jeon_pipeline.ipynb").exists()

"""The reproduce command: which parameters each profile hands a notebook, and where reports go."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from edgelab import cli
from edgelab.papers.park2020 import lenet as park2020_lenet

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
        injected = set(cli.notebook_parameters("full", notebook, Path("reports"), "tcp://127.0.0.1:8786"))
        assert injected <= declared, f"{notebook.name} lacks parameters {sorted(injected - declared)}"


def test_a_scheduler_address_goes_to_the_notebooks_that_use_a_cluster() -> None:
    # Execute
    lenet = cli.notebook_parameters("smoke", NOTEBOOK, Path("reports"), "tls://pi-master:8786")
    survey = cli.notebook_parameters("smoke", cli.NOTEBOOKS_DIR / "qiao_survey.ipynb", Path("reports"), "tls://x:1")

    # Assert: the notebook records it with its results; a notebook without a cluster gets nothing
    assert lenet == {"scheduler_address": "tls://pi-master:8786"}
    assert survey == {}


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
    monkeypatch.setenv("EDGELAB_CACHE_DIR", str(tmp_path / "cache"))
    failures = cli.reproduce("smoke", [notebook], reports=tmp_path / "reports", quiet=False)
    # Assert: nothing ran, nothing failed, and the reason names the dataset
    out = capsys.readouterr().out
    assert failures == 0
    assert "skipping jeon_pipeline.ipynb" in out and "PlantVillage" in out
    assert not (tmp_path / "reports" / "notebooks" / "jeon_pipeline.ipynb").exists()


def test_a_notebook_that_loads_a_dataset_itself_is_checked_for_it_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A fresh clone without a data directory ran zhang2018_privacy and failed it (exit 1): the notebook
    # loads CIFAR-100 in its own cell, and no experiment module said what it needs.
    monkeypatch.setenv("EDGELAB_DATA_DIR", str(tmp_path / "no-data"))
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")
    monkeypatch.setenv("EDGELAB_CACHE_DIR", str(tmp_path / "cache"))
    loaders = [cli.NOTEBOOKS_DIR / "zhang2018_privacy.ipynb"]

    # Execute
    failures = cli.reproduce("smoke", loaders, reports=tmp_path / "reports", quiet=False)

    # Assert: the notebook has a data check, and without the data it is skipped saying why, not failed
    out = capsys.readouterr().out
    assert failures == 0
    assert "skipping zhang2018_privacy.ipynb: no CIFAR-100 source worked" in out
    assert not (tmp_path / "reports" / "notebooks" / "zhang2018_privacy.ipynb").exists()


# ---------------------------------------------------------------- --only, resume, quiet log


def test_only_picks_the_notebooks_rendering_the_named_documents_and_ids() -> None:
    # a checkout without the notebook of qiao/fig3-4: its id is named as rendered by none
    notebooks = sorted(nb for nb in cli.NOTEBOOKS_DIR.glob("*.ipynb") if "qiao/fig3-4" not in cli.NOTEBOOK_IDS[nb.stem])

    # Execute
    chosen, unrendered = cli.notebooks_for(["park2020/fig3a", "jeon", "qiao/fig3-3", "qiao/fig3-4"], notebooks)

    # Assert
    assert [nb.stem for nb in chosen] == ["jeon_pipeline", "park2020_async", "qiao_pipeline_training"]
    assert unrendered == ["qiao/fig3-4"]


def test_only_with_an_unknown_name_is_refused_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    # Execute / Assert
    with pytest.raises(SystemExit):
        cli.main(["reproduce", "--only", "park2021"])
    err = capsys.readouterr().err
    assert "only='park2021'" in err and "park2020, zhang2018, qiao, jeon" in err


def test_unknown_profile_is_refused_naming_the_allowed_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["reproduce", "--profile", "huge"])
    err = capsys.readouterr().err
    assert "'huge'" in err and "smoke" in err and "full" in err


def test_notebook_ids_are_catalog_ids_and_each_rendered_once() -> None:
    from edgelab.report import catalog

    ids = [i for nb_ids in cli.NOTEBOOK_IDS.values() for i in nb_ids]
    assert len(ids) == len(set(ids))
    assert set(ids) <= set(catalog.IDS)
    assert set(cli.NOTEBOOK_IDS) == {nb.stem for nb in cli.NOTEBOOKS_DIR.glob("*.ipynb")}


def test_the_committed_manifest_says_which_notebook_rendered_each_id() -> None:
    import json

    items = json.loads((cli.REPO_ROOT / "reports" / "manifest.json").read_text())["items"]
    for stem, ids in cli.NOTEBOOK_IDS.items():
        for item_id in ids:
            assert items[item_id].get("notebook") == f"notebooks/{stem}.ipynb", item_id


def test_inputs_digest_changes_with_the_parameters_and_the_data_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    # Execute
    monkeypatch.setenv("EDGELAB_DATA_DIR", "/a")
    base = cli.inputs_digest("smoke", NOTEBOOK, {})
    same = cli.inputs_digest("smoke", NOTEBOOK, {})
    other_params = cli.inputs_digest("smoke", NOTEBOOK, {"repeats": 1})
    other_profile = cli.inputs_digest("full", NOTEBOOK, {})
    monkeypatch.setenv("EDGELAB_DATA_DIR", "/b")
    other_data = cli.inputs_digest("smoke", NOTEBOOK, {})

    # Assert
    assert base == same
    assert len({base, other_params, other_profile, other_data}) == 4


def test_a_notebook_is_up_to_date_only_after_it_ran_to_the_end_here_with_the_same_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    monkeypatch.setenv("EDGELAB_CACHE_DIR", str(tmp_path / "cache"))
    reports = tmp_path / "reports"
    target = reports / "notebooks" / NOTEBOOK.name
    target.parent.mkdir(parents=True)
    target.write_text("{}")
    status = cli.Status(reports)

    # Execute
    status.record(NOTEBOOK, "done", inputs="d1")
    status.record(NOTEBOOK, "started")  # run again and interrupted: no longer done
    after_start = cli.Status(reports).up_to_date(NOTEBOOK, "d1", target)
    status.record(NOTEBOOK, "failed", error="boom")
    after_failure = cli.Status(reports).up_to_date(NOTEBOOK, "d1", target)
    status.record(NOTEBOOK, "done", inputs="d1")
    reread = cli.Status(reports)
    # A fresh clone: the committed reports say done, but this machine's cache has no stamp
    monkeypatch.setenv("EDGELAB_CACHE_DIR", str(tmp_path / "fresh-clone-cache"))
    fresh = cli.Status(reports)

    # Assert
    assert after_start is False
    assert after_failure is False
    assert reread.up_to_date(NOTEBOOK, "d1", target) is True
    assert reread.up_to_date(NOTEBOOK, "d2", target) is False
    assert fresh.entries[NOTEBOOK.stem]["status"] == "done"
    assert fresh.up_to_date(NOTEBOOK, "d1", target) is False
    assert "inputs" not in json.loads((reports / cli.STATUS_NAME).read_text())[NOTEBOOK.stem]
    target.unlink()
    assert reread.up_to_date(NOTEBOOK, "d1", target) is False


def test_library_output_of_children_goes_to_the_log_not_the_console(tmp_path: Path) -> None:
    import subprocess
    import sys

    log = tmp_path / "reproduce.log"

    # Execute: a child process writes to its stdout and stderr, as a kernel or a worker would
    with cli._output_to(log) as console:
        subprocess.run([sys.executable, "-c", "import sys; print('child out'); print('child err', file=sys.stderr)"])
        os.write(2, b"library noise\n")  # what a library writing to file descriptor 2 does
        console_fd = console.fileno()
        assert console_fd not in (1, 2)

    # Assert
    text = log.read_text()
    assert "child out" in text and "child err" in text and "library noise" in text


def _notebook(path: Path, *sources: str) -> Path:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, path)
    return path


@pytest.mark.notebook
def test_reproduce_logs_library_output_reports_progress_resumes_and_survives_a_failure(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGELAB_CACHE_DIR", str(tmp_path / "cache"))
    # Prepare: one notebook that reports runs and prints library-like noise, one that fails
    good = _notebook(
        tmp_path / "tiny_runs.ipynb",
        "import os\nos.write(2, b'I0000 library start-up noise\\n')",
        "from edgelab.common import progress\nfor done in range(3):\n    progress.report(done, 2, f'run {done}')",
    )
    bad = _notebook(tmp_path / "tiny_fails.ipynb", "raise RuntimeError('the device caught fire')")
    reports = tmp_path / "reports"

    # Execute: all, then again (as after an interruption)
    first = cli.reproduce("smoke", [good, bad], reports=reports)
    console_first = capfd.readouterr()
    executed = reports / "notebooks" / good.name
    stamp = executed.stat().st_mtime_ns
    second = cli.reproduce("smoke", [good, bad], reports=reports)
    console_second = capfd.readouterr()

    # Assert: the failure is counted and named, and the other notebook still ran
    assert (first, second) == (1, 1)
    assert "tiny_fails.ipynb FAILED" in console_first.err and "the device caught fire" in console_first.err
    assert "tiny_runs.ipynb done" in console_first.err
    # Library output went to the log, not the console; no traceback on the console
    assert "library start-up noise" not in console_first.out + console_first.err
    assert "library start-up noise" in (reports / cli.LOG_NAME).read_text()
    assert "Traceback" not in console_first.out + console_first.err
    # The finished notebook is not run again; the failed one is
    assert "tiny_runs.ipynb is up to date" in console_second.err
    assert executed.stat().st_mtime_ns == stamp
    assert "tiny_fails.ipynb FAILED" in console_second.err
    status = cli.Status(reports).entries
    assert status["tiny_runs"]["status"] == "done" and status["tiny_fails"]["status"] == "failed"
    assert "RuntimeError: the device caught fire" in status["tiny_fails"]["error"]
    assert not list(reports.glob(".*.progress"))


IGNORES_SIGINT = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)"


@pytest.mark.notebook
def test_reproduce_ends_each_kernel_with_every_process_it_started(tmp_path: Path) -> None:
    # Prepare: a notebook that leaves a child running, as a cluster left open would its devices
    pid_file = tmp_path / "child.pid"
    nb = _notebook(
        tmp_path / "tiny_leaves_a_child.ipynb",
        # A child that outlives the interrupt the kernel's process group gets first
        f"import subprocess, sys\nchild = subprocess.Popen([sys.executable, '-c', {IGNORES_SIGINT!r}])",
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))",
        "print('last cell ran')",
    )

    # Execute
    failed = cli.reproduce("smoke", [nb], reports=tmp_path / "reports")

    # Assert: every output is in, and the child ended with its kernel
    assert failed == 0
    assert "last cell ran" in (tmp_path / "reports" / "notebooks" / nb.name).read_text()
    child = psutil.Process(int(pid_file.read_text()))
    deadline = time.monotonic() + 10
    while not _ended(child):
        assert time.monotonic() < deadline, f"the kernel's child {child.pid} outlived it"
        time.sleep(0.1)


@pytest.mark.notebook
def test_reproduce_removes_what_a_kernel_left_in_its_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: a notebook that leaves a file in its temporary folder, as TensorFlow's traced functions are left
    # by a killed kernel, and says where
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this process read TMPDIR already
    where = tmp_path / "where.txt"
    nb = _notebook(
        tmp_path / "tiny_leaves_a_file.ipynb",
        "import tempfile\nleft = tempfile.NamedTemporaryFile(suffix='.py', delete=False)",
        f"open({str(where)!r}, 'w').write(left.name)",
    )

    # Execute
    failed = cli.reproduce("smoke", [nb], reports=tmp_path / "reports")

    # Assert: the file went to a folder of the notebook's own, which is gone; this process's TMPDIR is as it was
    assert failed == 0
    left = Path(where.read_text())
    assert left.parent.parent == tmp_path and left.parent.name.startswith("edgelab-tiny_leaves_a_file-")
    assert not left.parent.exists()
    assert os.environ["TMPDIR"] == str(tmp_path)


def _ended(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE  # dead, not yet reaped by its new parent
    except psutil.NoSuchProcess:
        return True


@pytest.mark.notebook
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_says_so_and_leaves_no_process_and_no_temporary_folder(
    tmp_path: Path, signum: signal.Signals
) -> None:
    # Prepare: a notebook whose cell starts a child (as a cluster starts its devices) and then trains on and on
    notebooks, scratch = tmp_path / "notebooks", tmp_path / "tmp"
    notebooks.mkdir()
    scratch.mkdir()
    pid_file = tmp_path / "child.pid"
    _notebook(
        notebooks / "tiny_long.ipynb",
        f"import subprocess, sys, time\nchild = subprocess.Popen([sys.executable, '-c', {IGNORES_SIGINT!r}])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\ntime.sleep(600)",
    )
    command = "import sys; from pathlib import Path; from edgelab import cli; cli.NOTEBOOKS_DIR = Path(sys.argv[1]); "
    command += "cli.entry(['reproduce'])"  # what `python -m edgelab.cli` and the `edgelab` command run
    # As from a terminal: a test run started in the background (`cmd &`, nohup) passes SIGINT down ignored,
    # and the command rightly keeps an ignored signal ignored (tested below), so Ctrl-C would never arrive.
    command = "import signal; signal.signal(signal.SIGINT, signal.SIG_DFL); " + command
    env = {
        **os.environ,
        "TMPDIR": str(scratch),
        "EDGELAB_REPORTS_DIR": str(tmp_path / "reports"),
        "EDGELAB_CACHE_DIR": str(tmp_path / "cache"),
    }
    run = subprocess.Popen(
        [sys.executable, "-c", command, str(notebooks)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        restore_signals=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "the notebook's cell never started"
            time.sleep(0.2)
        child = psutil.Process(int(pid_file.read_text()))

        # Execute
        run.send_signal(signum)
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()

    # Assert: said so without a traceback, the kernel's child ended, and its temporary folder is gone
    assert run.returncode == 130, err
    assert "edgelab: interrupted; run the same command again to go on where it stopped" in err
    assert "Traceback" not in err and "never retrieved" not in err, err
    assert _ended(child)
    assert not list(scratch.glob("edgelab-tiny_long-*"))


@pytest.mark.parametrize("inherited", [signal.SIG_IGN, signal.SIG_DFL], ids=["ignored", "default"])
def test_a_run_keeps_an_ignored_sigint_ignored_and_catches_it_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inherited: object
) -> None:
    # Prepare: SIGINT as the caller left it (nohup and `cmd &` leave it ignored); a run that reads it
    monkeypatch.setenv("EDGELAB_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setattr(cli, "NOTEBOOKS_DIR", tmp_path)
    seen = []
    monkeypatch.setattr(cli, "reproduce", lambda *args, **kwargs: seen.append(signal.getsignal(signal.SIGINT)) or 0)
    before = signal.signal(signal.SIGINT, inherited)
    try:
        # Execute
        assert cli.main(["reproduce"]) == 0

        # Assert: ignored stays ignored during the run; otherwise the run's handler ends it; either way restored
        assert seen == [signal.SIG_IGN if inherited is signal.SIG_IGN else cli._interrupt]
        assert signal.getsignal(signal.SIGINT) is inherited
    finally:
        signal.signal(signal.SIGINT, before)

"""Every notebook is its parameters cell and a few calls through its paper's module (``edgelab.papers.notebook``).

Read from the committed notebooks, nothing executed: each passes every parameter to its experiment (none is
dropped on the way), and its code outside the parameters cell is short and has no logic of its own.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from edgelab import papers
from edgelab.common.paths import REPO_ROOT

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))
#: Parameters the notebook helpers use themselves (the size label, the store, the reports, the dashboard).
NOTEBOOK_ONLY = {"profile", "results_dir", "reports_dir", "dashboard_address"}
#: Statements that would be logic in a notebook: it belongs in the paper's module.
LOGIC = (ast.For, ast.While, ast.If, ast.Try, ast.With, ast.FunctionDef, ast.Lambda, ast.ListComp, ast.DictComp)
MAX_LINES = 40


def _code(notebook: Path) -> tuple[str, list[str]]:
    """The parameters cell's source, and every other code cell's."""
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    params = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1, notebook.name
    others = ["".join(c["source"]) for c in cells if c is not params[0]]
    return "".join(params[0]["source"]), others


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_parameter_reaches_the_experiment_or_a_notebook_helper(notebook: Path) -> None:
    # Prepare
    source, _ = _code(notebook)
    declared = {n.targets[0].id for n in ast.parse(source).body if isinstance(n, ast.Assign)}
    module = papers.experiment(notebook.stem)
    assert module is not None

    # Assert: edgelab.papers.notebook.prepare takes the PARAMS fields from the notebook's globals; the rest are its own
    assert declared - NOTEBOOK_ONLY <= set(module.PARAMS.__dataclass_fields__), notebook.stem


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_notebook_is_a_few_calls_with_no_logic(notebook: Path) -> None:
    # Prepare
    _, cells = _code(notebook)
    lines = [line for cell in cells for line in cell.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    tree = ast.parse("\n".join(cells))

    # Assert
    assert len(lines) <= MAX_LINES, notebook.stem
    assert not [type(n).__name__ for n in ast.walk(tree) if isinstance(n, LOGIC)], notebook.stem
    calls = [n.func for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert not [c.attr for c in calls if c.attr in ("close", "open_cluster")], "the harness owns the cluster"
    assert "notebook.prepare(" in "\n".join(cells) and "notebook.report(" in "\n".join(cells), notebook.stem


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_checked_cell_prints_through_the_papers_module(notebook: Path) -> None:
    # Prepare
    _, cells = _code(notebook)
    checked = [c for c in cells if c.startswith("# NBVAL_CHECK_OUTPUT")]

    # Assert: one print of one call each, and the cells that start a cluster start the device launcher first
    assert checked, notebook.stem
    for cell in checked:
        [statement] = ast.parse(cell).body
        assert isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call), cell
        assert getattr(statement.value.func, "id", "") == "print", cell
    if any("notebook.run(" in c for c in cells):
        assert "start_device_launcher(scheduler_address)" in cells[0], notebook.stem

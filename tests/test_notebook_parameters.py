"""Bad input to any notebook is refused before cluster work, naming the notebook's own parameter.

Every parameter of a notebook's ``parameters`` cell that names a choice (a
string, a list of strings, a flag) is given a value nothing allows, and every
number one below any sensible range (-1), one at a time, the rest as the
notebook sets them; the experiment's ``prepare`` must raise ``ConfigError``
for that very name.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from edgelab import papers
from edgelab.common.errors import ConfigError
from edgelab.common.paths import REPO_ROOT

NOTEBOOKS = REPO_ROOT / "notebooks"
#: Parameters that name a place, not a choice: any string is a path or an address.
PLACES = {"profile", "data_dir", "results_dir", "reports_dir", "scheduler_address", "dashboard_address", "papers_dir"}
#: Parameters the notebook uses itself (where its reports go, its dashboard), not its experiment's ``prepare``.
NOTEBOOK_ONLY = {"profile", "reports_dir", "results_dir", "dashboard_address"}
#: Numbers for which -1 is allowed, and why.
NEGATIVE_ALLOWED: dict[str, str] = {}


def _parameters(notebook: Path) -> dict[str, Any]:
    cells = json.loads(notebook.read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
    return {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse(source).body if isinstance(n, ast.Assign)}


def _bad(value: Any) -> Any:
    """A value of the parameter's kind that nothing allows, or None when the kind has no such value here."""
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, str):
        return "no-such-choice"
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return ["no-such-choice"]
    if isinstance(value, int | float):
        return -1
    return None


def _cases() -> list[Any]:
    cases = []
    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):
        module = papers.experiment(notebook.stem)
        if module is None or not hasattr(module, "prepare"):
            continue
        for name, value in _parameters(notebook).items():
            if name in PLACES or name in NEGATIVE_ALLOWED or _bad(value) is None:
                continue
            cases.append(pytest.param(notebook, name, id=f"{notebook.stem}.{name}"))
    return cases


@pytest.mark.parametrize(("notebook", "name"), _cases())
def test_a_value_nothing_allows_is_refused_naming_the_notebooks_parameter(notebook: Path, name: str) -> None:
    # Prepare: the notebook's own values, one of them replaced
    values = {k: v for k, v in _parameters(notebook).items() if k not in NOTEBOOK_ONLY}
    values[name] = _bad(values[name])
    module = papers.experiment(notebook.stem)

    # Execute / Assert
    with pytest.raises(ConfigError) as refused:
        module.prepare(**values)
    assert refused.value.parameter.split("[")[0] == name, str(refused.value)


def test_every_notebook_with_parameters_to_check_is_covered() -> None:
    covered = {case.values[0].stem for case in _cases()}
    # The survey's and the networks' notebooks take only places and a size label.
    assert covered | {"qiao_survey", "zhang2018_networks"} == {nb.stem for nb in NOTEBOOKS.glob("*.ipynb")}

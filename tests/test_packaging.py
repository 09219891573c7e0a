"""pyproject.toml and environment.yml must list the same dependencies with the same bounds."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]

# PyPI name -> conda-forge name, for the packages whose names differ.
PYPI_TO_CONDA = {"tensorflow-cpu": "tensorflow"}

# Dependencies conda-forge does not build: environment.yml installs them in its pip: section.
PIP_ONLY = {"ai-edge-litert"}

# Conda entries that are tooling, not project dependencies.
CONDA_ONLY = {"python", "pip"}

_CONDA_SPEC = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*?)\s*$")


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def _environment() -> dict[str, Any]:
    with (ROOT / "environment.yml").open(encoding="utf-8") as f:
        data: dict[str, Any] = yaml.safe_load(f)
    return data


def _conda_specs() -> dict[str, SpecifierSet]:
    """Map each conda dependency name to its version bounds (pip: sections skipped)."""
    specs: dict[str, SpecifierSet] = {}
    for entry in _environment()["dependencies"]:
        if not isinstance(entry, str):
            continue
        match = _CONDA_SPEC.match(entry)
        assert match, f"cannot parse conda dependency {entry!r}"
        name, spec = match.groups()
        specs[canonicalize_name(name)] = SpecifierSet(spec.replace(" ", ""))
    return specs


def _pip_section_specs() -> dict[str, SpecifierSet]:
    """Map each requirement of environment.yml's pip: section (not the project itself) to its bounds."""
    specs: dict[str, SpecifierSet] = {}
    for entry in _environment()["dependencies"]:
        if isinstance(entry, dict):
            for line in entry.get("pip", []):
                if not line.startswith("-"):
                    req = Requirement(line)
                    specs[canonicalize_name(req.name)] = req.specifier
    return specs


def _pypi_specs_as_conda() -> dict[str, SpecifierSet]:
    """Map each pyproject dependency, renamed to its conda-forge name, to its bounds."""
    specs: dict[str, SpecifierSet] = {}
    for line in _pyproject()["project"]["dependencies"]:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        specs[PYPI_TO_CONDA.get(name, name)] = req.specifier
    return specs


def test_dependency_names_and_bounds_agree() -> None:
    """Every dependency appears in both files with the same version bounds."""
    # Prepare
    pypi = _pypi_specs_as_conda()
    conda = {k: v for k, v in _conda_specs().items() if k not in CONDA_ONLY}
    conda |= {k: v for k, v in _pip_section_specs().items() if k in PIP_ONLY}

    # Execute
    only_pypi = sorted(set(pypi) - set(conda))
    only_conda = sorted(set(conda) - set(pypi))
    bounds = {
        name: (str(pypi[name]), str(conda[name]))
        for name in sorted(set(pypi) & set(conda))
        if pypi[name] != conda[name]
    }

    # Assert
    assert not (only_pypi or only_conda or bounds), (
        f"only in pyproject.toml: {only_pypi}; only in environment.yml: {only_conda}; "
        f"bounds differ (pyproject, conda): {bounds}"
    )


def test_python_pin_agrees() -> None:
    """requires-python equals the python pin of environment.yml."""
    requires = SpecifierSet(_pyproject()["project"]["requires-python"])
    pin = _conda_specs().get("python")
    assert pin == requires, f"requires-python={requires!s} but environment.yml python{pin!s}"


def test_environment_installs_project_editable() -> None:
    """The conda environment installs edgelab itself with pip, editable."""
    pip_sections = [e["pip"] for e in _environment()["dependencies"] if isinstance(e, dict)]
    assert any("-e ." in section for section in pip_sections)
    # and nothing but the project and what conda-forge does not build
    assert set(_pip_section_specs()) <= PIP_ONLY

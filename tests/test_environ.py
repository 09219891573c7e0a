"""edgelab.common.environ.environment: variables set for a block, each put back as it was, even after an error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from edgelab.common.environ import environment


def test_a_process_started_inside_sees_the_values_and_each_variable_is_put_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Prepare: one variable set before, one absent
    monkeypatch.setenv("EDGELAB_TEST_SET", "before")
    monkeypatch.delenv("EDGELAB_TEST_ABSENT", raising=False)
    values = {"EDGELAB_TEST_SET": "inside", "EDGELAB_TEST_ABSENT": "inside too"}
    read = "import os; print(os.environ['EDGELAB_TEST_SET'], os.environ['EDGELAB_TEST_ABSENT'], sep='|')"

    # Execute: a child started inside the block, then an error raised inside it
    with environment(values):
        child = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True, check=True)
    with pytest.raises(RuntimeError), environment(values):
        raise RuntimeError("a kernel failed to start")

    # Assert
    assert child.stdout.strip() == "inside|inside too"
    assert os.environ["EDGELAB_TEST_SET"] == "before"
    assert "EDGELAB_TEST_ABSENT" not in os.environ

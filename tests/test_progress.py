"""The run progress a notebook's kernel reports, followed by the command that started it."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgelab.common import progress


def test_reports_are_followed_in_order_and_nothing_is_written_without_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    path = tmp_path / "nb.progress"
    seen: list[tuple[int, int, str]] = []
    monkeypatch.delenv(progress.ENV, raising=False)
    progress.report(1, 2, "ignored")  # unset: a notebook run by hand writes nothing

    # Execute
    with progress.Follower(path, lambda d, t, label: seen.append((d, t, label)), interval_s=0.01):
        monkeypatch.setenv(progress.ENV, str(path))
        progress.report(0, 2)
        progress.report(1, 2, ("mlp", 1))
        progress.report(2, 2, "last")

    # Assert
    assert seen == [(0, 2, ""), (1, 2, "('mlp', 1)"), (2, 2, "last")]


def test_a_partial_or_foreign_line_is_skipped_not_fatal(tmp_path: Path) -> None:
    # Prepare
    path = tmp_path / "nb.progress"
    seen: list[tuple[int, int, str]] = []
    follower = progress.Follower(path, lambda d, t, label: seen.append((d, t, label)))
    path.write_text('not json\n{"done": 1, "total": 3, "label": "a"}\n{"done": 2, "tot')

    # Execute
    follower.poll()
    with path.open("a") as f:
        f.write('al": 3}\n')
    follower.poll()

    # Assert
    assert seen == [(1, 3, "a"), (2, 3, "")]

"""The README is a page: short, its two commands, a quickstart that runs, and links that lead somewhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`[^`\n]*`")


def _blocks(text: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == language]


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _relative_links(text: str) -> list[str]:
    prose = INLINE_CODE.sub("", FENCE.sub("", text))
    targets = [t for t in LINK.findall(prose) if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]
    return [t.split("#")[0].split("?")[0] for t in targets]


def test_the_readme_is_at_most_200_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()

    assert len(lines) <= 200, f"README.md has {len(lines)} lines"


def test_the_two_commands_are_reproduce_and_test() -> None:
    # Prepare
    section = _section(README.read_text(encoding="utf-8"), "Two commands")

    # Execute
    (block, *_) = _blocks(section, "bash")
    commands = [line.split("#")[0].strip() for line in block.splitlines()]

    # Assert
    assert [c for c in commands if c] == ["./run.sh reproduce", "./run.sh test"]


def test_every_relative_link_of_the_readme_and_docs_leads_to_a_file() -> None:
    # Prepare
    pages = [README, *sorted(DOCS.glob("*.md"))]
    assert len(pages) > 1, "docs/ holds no page"

    # Execute
    broken = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in pages
        for target in _relative_links(page.read_text(encoding="utf-8"))
        if not (page.parent / target).exists()
    ]

    # Assert
    assert broken == []
    assert "docs/report.png" in _relative_links(README.read_text(encoding="utf-8"))


def test_relative_links_are_found_outside_code_only() -> None:
    text = 'See [a](docs/a.md#x), ![b](b.png "t"), [c](https://x.org), [d](#e).\n```python\nf[0](1)\n```\n`[g](h)`'

    assert _relative_links(text) == ["docs/a.md", "b.png"]


@pytest.mark.integration
def test_the_quickstart_runs_and_prints_its_result(tmp_path: Path) -> None:
    # Prepare: the README's first Python block, as a user saves it; an emulated cluster, whatever the environment
    (quickstart, *_) = _blocks(README.read_text(encoding="utf-8"), "python")
    script = tmp_path / "quickstart.py"
    script.write_text(quickstart, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "EDGELAB_SCHEDULER"}

    # Execute
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )

    # Assert
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert any("accuracy" in line and "pi4b" in line for line in done.stdout.splitlines()), done.stdout[-3000:]

"""A shaped-host benchmark stopped by SIGTERM runs its clean-up (``bench_training.end_on_sigterm``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

# A benchmark's shape: set-up, work that SIGTERM cuts short, a finally block that takes the hosts down.
SCRIPT = """
import os, signal, time
from bench_training import end_on_sigterm
end_on_sigterm()
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
    print("work finished")
finally:
    print("hosts taken down")
"""


def test_sigterm_ends_the_work_through_its_finally_blocks() -> None:
    # Act
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=BENCHMARKS, capture_output=True, text=True, timeout=60, check=False
    )

    # Assert: the work stopped, the clean-up ran, and the run ended as interrupted (not 0)
    assert "hosts taken down" in done.stdout
    assert "work finished" not in done.stdout
    assert done.returncode != 0
    assert "KeyboardInterrupt" in done.stderr

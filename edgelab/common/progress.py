"""Progress of the runs inside a notebook, for whoever launched it (``edgelab reproduce``).

A notebook executed by papermill runs in its own kernel, and what it prints
lands in the executed notebook, not on the console of the command that started
it. So the harness also appends one JSON line per stored run to the file that
``EDGELAB_PROGRESS`` names (when it is set), and the command follows that file
to draw a progress bar within the notebook. Nothing is written when the
variable is unset (a notebook run by hand, a test).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV = "EDGELAB_PROGRESS"


def report(done: int, total: int, label: Any = "") -> None:
    """Record that ``done`` of ``total`` runs are stored (``done=0`` announces the total)."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = json.dumps({"done": done, "total": total, "label": str(label)[:120]})
    with open(path, "a", encoding="utf-8") as f:  # one short line per write: appends do not interleave
        f.write(line + "\n")


class Follower:
    """Calls ``on_update(done, total, label)`` for each line appended to ``path``, from a thread, until stopped."""

    def __init__(self, path: Path, on_update: Callable[[int, int, str], None], *, interval_s: float = 0.5) -> None:
        self.path = path
        self.on_update = on_update
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._offset = 0
        self._thread = threading.Thread(target=self._loop, name="edgelab-progress", daemon=True)

    def __enter__(self) -> Follower:
        self.path.write_text("")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()  # the lines written after the last poll

    def poll(self) -> None:
        """Read the lines appended since the last poll."""
        try:
            with open(self.path, encoding="utf-8") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        complete = chunk[: chunk.rfind("\n") + 1]  # a line still being written waits for the next poll
        self._offset += len(complete.encode("utf-8"))
        for line in complete.splitlines():
            try:
                event = json.loads(line)
                self.on_update(int(event["done"]), int(event["total"]), str(event.get("label", "")))
            except (ValueError, KeyError, TypeError):
                continue  # not ours; the bar is a convenience, never a reason to fail

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()

"""Environment variables set for what starts meanwhile (a kernel, a fork server), then put back."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in this process's environment, and restore each variable's old value (or absence) after.

    A process started inside the block inherits them; this process's own readers
    see them only while it lasts.
    """
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

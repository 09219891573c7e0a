"""Where datasets come from: the data directory, and how a file found there is verified.

Shared by every loader (``edgelab.data.mnist``, ``edgelab.data.plantvillage``)
and by anything else read from the data directory (pretrained weights).
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

from edgelab.common.errors import CorruptDataError

# Seconds before a download attempt gives up, so machines without network fail fast.
DOWNLOAD_TIMEOUT_S = 10.0
_HASH_CHUNK = 1 << 20
# sha256 memo keyed by (path, mtime_ns, size), so one process hashes a file only once.
_SHA256_MEMO: dict[tuple[str, int, int], str] = {}


def default_data_dir() -> Path:
    """Return the data directory used when none is given.

    Returns
    -------
    Path
        ``$EDGELAB_DATA_DIR`` if set, else ``<repo root>/data/cache``.
    """
    env = os.environ.get("EDGELAB_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[2] / "data" / "cache"


def keras_get_file(filename: str, origin: str, sha256: str, root: Path) -> Path:
    """Download ``origin`` into ``root`` as ``filename`` with Keras' ``get_file`` (its hash checked), under a timeout.

    Raises whatever the download raises: each loader records it and moves its chain on.
    """
    # Imported here: keras pulls in TensorFlow, which `import edgelab.data` must not.
    import keras

    # get_file falls back to /tmp/.keras when the directory is missing; create it instead.
    root.mkdir(parents=True, exist_ok=True)
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        return Path(keras.utils.get_file(filename, origin, file_hash=sha256, cache_dir=str(root), cache_subdir=""))
    finally:
        socket.setdefaulttimeout(previous)


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of a file, hashed in chunks and memoised per (path, mtime, size).

    Parameters
    ----------
    path : Path
        File to hash.

    Returns
    -------
    str
        Lower-case hex digest.
    """
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _SHA256_MEMO:
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(_HASH_CHUNK), b""):
                digest.update(chunk)
        _SHA256_MEMO[key] = digest.hexdigest()
    return _SHA256_MEMO[key]


def reference_sha256(path: Path, root: Path) -> tuple[str, str] | None:
    """Find the expected sha256 of `path` and where it came from: its sidecar, else the root's SHA256SUMS."""
    sidecar = path.with_name(path.name + ".sha256")
    if sidecar.is_file():
        text = sidecar.read_text(encoding="utf-8").split()
        return (text[0].lower() if text else "", f"sidecar {sidecar.name}")
    sums = root / "SHA256SUMS"
    if sums.is_file():
        # The path as found under the root (a symlinked file is listed under its own name, not its target's).
        try:
            rel = path.absolute().relative_to(root.absolute()).as_posix()
        except ValueError:
            try:
                rel = path.resolve().relative_to(root.resolve()).as_posix()
            except ValueError:
                rel = path.name
        for line in sums.read_text(encoding="utf-8").splitlines():
            parts = line.split(maxsplit=1)
            if len(parts) == 2 and parts[1].strip().lstrip("*").removeprefix("./") == rel:
                return parts[0].lower(), "SHA256SUMS"
    return None


def verify_checksum(path: Path, root: Path, *, fallback: tuple[str, str] | None = None) -> str:
    """Compare the file's sha256 with its reference; return the checksum status.

    ``fallback`` (sha256, origin) applies when neither a sidecar nor SHA256SUMS lists the file,
    e.g. the hash a publisher gives for its download.
    """
    reference = reference_sha256(path, root) or fallback
    if reference is None:
        return "unverified: no reference checksum"
    expected, origin = reference
    actual = sha256_file(path)
    if actual != expected:
        raise CorruptDataError(
            f"{path}: sha256 mismatch against {origin}: expected {expected}, found {actual}. "
            "Delete or replace the file (or fix its reference checksum)."
        )
    return f"sha256 verified against {origin}"

"""The resident memory (RSS) of the calling process and its peak since a reset, read from Linux's ``/proc``.

A device reads both around every round. Opened afresh and parsed by line,
``/proc/self/status`` and ``clear_refs`` cost a device 0.19 ms of CPU a round
(measured on a 2-device LeNet-MLP run), on the round's critical path, and
psutil's RSS another 17 µs. The files stay open here and are read in place
(``pread``): 1-8 µs each. They are opened again in a forked child, whose
``/proc/self`` is another process.

Even read in place, ``/proc/self/status`` cost a device 44 µs a round (the
kernel writes all of it for one line). ``getrusage``'s ``ru_maxrss`` is the
same high-water mark for 1 µs: the kernel's stored peak (which ``VmHWM`` reads
too) or the RSS now, taken from its per-CPU counters unsummed (within a few
hundred KiB of ``VmHWM``). A process that replaced a larger image (``exec``)
keeps that image's peak there, though, so the first reset compares the two,
and a process whose ``getrusage`` peak is above ``VmHWM`` by more than
``RUSAGE_SLACK_BYTES`` reads ``/proc`` from then on.

Where ``/proc`` lacks them (not Linux), :func:`reset_peak` returns False,
:func:`peak_bytes` None, and :func:`rss_bytes` asks psutil.
"""

from __future__ import annotations

import os
import threading

try:
    import resource
except ImportError:  # not a Unix
    resource = None  # type: ignore[assignment]

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_lock = threading.Lock()
_files: dict[str, int | None] = {}
_pid: int | None = None
_rusage_peak: bool | None = None  # whether getrusage's peak is this process's window, as its first reset showed
#: How far getrusage's peak may stand from VmHWM right after a reset (its unsummed per-CPU counters) and count.
RUSAGE_SLACK_BYTES = 2**20


def _fd(name: str, flags: int) -> int | None:
    """The kept descriptor of ``/proc/self/<name>`` in this process; None where it cannot be opened."""
    global _pid, _rusage_peak
    with _lock:
        if _pid != os.getpid():  # first use, or a forked child holding its parent's files
            for fd in _files.values():
                if fd is not None:
                    os.close(fd)
            _files.clear()
            _pid = os.getpid()
            _rusage_peak = None
        if name not in _files:
            try:
                _files[name] = os.open(f"/proc/self/{name}", flags)
            except OSError:
                _files[name] = None
        return _files[name]


def reset_peak() -> bool:
    """Start a new peak-RSS window for this process (``clear_refs``); False where unsupported."""
    fd = _fd("clear_refs", os.O_WRONLY)
    if fd is None:
        return False
    try:
        os.write(fd, b"5")
    except OSError:
        return False
    global _rusage_peak
    if _rusage_peak is None:
        status = _status_peak_bytes()
        _rusage_peak = (
            resource is not None and status is not None and abs(_rusage_bytes() - status) <= RUSAGE_SLACK_BYTES
        )
    return True


def peak_bytes() -> int | None:
    """The largest RSS of this process since the last reset (``VmHWM``), or None where unsupported."""
    if _rusage_peak and _pid == os.getpid():
        return _rusage_bytes()
    return _status_peak_bytes()


def _rusage_bytes() -> int:
    # The process's peak either way; RUSAGE_THREAD spares the kernel summing every thread's times.
    return int(resource.getrusage(_RUSAGE_WHO).ru_maxrss) * 1024  # KiB on Linux


_RUSAGE_WHO = getattr(resource, "RUSAGE_THREAD", getattr(resource, "RUSAGE_SELF", 0))


def _status_peak_bytes() -> int | None:
    fd = _fd("status", os.O_RDONLY)
    if fd is None:
        return None
    try:
        status = os.pread(fd, 16384, 0)
    except OSError:
        return None
    start = status.find(b"VmHWM:")
    if start < 0:
        return None
    return int(status[start + 6 : status.index(b"kB", start)]) * 1024


def rss_bytes() -> int:
    """The resident memory of the calling process now, in bytes."""
    fd = _fd("statm", os.O_RDONLY)
    if fd is not None:
        try:
            return int(os.pread(fd, 128, 0).split()[1]) * _PAGE_BYTES
        except (OSError, IndexError, ValueError):
            pass
    import psutil

    return int(psutil.Process().memory_info().rss)

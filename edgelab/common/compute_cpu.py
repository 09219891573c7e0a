"""CPU time of the threads that compute: all but the main thread, where a Dask worker runs its event loop.

``time.process_time`` counts every thread of the process. On a device worker
that includes what its event loop does while a stage computes (taking the
next micro-batch in, handing the last one on), work a stream's clock may
charge per message on its own (``edgelab.emulation.stream_clock``): counted
in both, it is paid twice. ``time.thread_time`` alone is no answer either:
TensorFlow runs a compiled call's kernels on threads of its own pools
(named ``tf_*``), not on the thread that called it.

Linux gives each thread's CPU time in nanoseconds in
``/proc/self/task/<tid>/schedstat``; where that is missing (not Linux, or a
kernel without schedstats) :func:`compute_cpu_ns` returns None and callers
keep the process's time.
"""

from __future__ import annotations

import os
import threading
import time

_TASKS = "/proc/self/task"


def compute_cpu_ns() -> int | None:
    """Nanoseconds of CPU the calling thread and every thread but the main one have used; None where Linux does not say.

    A Dask worker runs its event loop, and so its comms, on the process's
    main thread, and a task on a thread of its executor: measured from that
    thread, this counts the task's own thread and TensorFlow's pools, and
    leaves out the event loop. A device worker runs one task at a time, so no
    other task's thread is in it.
    """
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return None
    caller, main = threading.get_native_id(), os.getpid()
    total = time.thread_time_ns()
    for tid in tids:
        if int(tid) in (caller, main):
            continue
        try:
            with open(f"{_TASKS}/{tid}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except FileNotFoundError:
            continue  # a thread that ended since the listing
        except (OSError, ValueError, IndexError):
            return None  # no schedstat in this kernel
    return total

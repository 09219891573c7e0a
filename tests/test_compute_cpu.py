"""The computing threads' CPU: TensorFlow's kernels on its own threads counted, the main thread's work not."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from edgelab.common.compute_cpu import compute_cpu_ns

pytestmark = pytest.mark.skipif(compute_cpu_ns() is None, reason="no per-thread CPU times here (not Linux)")


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_the_main_thread_s_work_meanwhile_is_not_counted() -> None:
    # Prepare: the computation measured on another thread (a Dask worker's executor), the main thread (its event
    # loop: the comms) busy for 0.3 s of CPU meanwhile
    measured: dict[str, float] = {}
    started, finished = threading.Event(), threading.Event()

    def measure() -> None:
        process0, compute0 = time.process_time(), compute_cpu_ns()
        started.set()
        finished.wait()
        measured["process"] = time.process_time() - process0
        measured["compute"] = (compute_cpu_ns() - compute0) / 1e9

    task = threading.Thread(target=measure)
    task.start()
    started.wait()
    # Execute
    _spin(0.3)
    finished.set()
    task.join()
    # Assert: the process paid for it, the computation did not
    assert measured["process"] >= 0.25
    assert measured["compute"] < 0.05


def test_tensorflow_kernels_on_its_own_threads_are_counted() -> None:
    import tensorflow as tf

    # Prepare: a compiled product TensorFlow runs on its pools' threads, not on the calling thread
    a = tf.constant(np.random.default_rng(0).standard_normal((600, 600), dtype=np.float32))
    product = tf.function(lambda m: tf.reduce_sum(tf.linalg.matmul(m, m)))
    product(a).numpy()
    process0, thread0, compute0 = time.process_time(), time.thread_time(), compute_cpu_ns()
    # Execute
    for _ in range(40):
        product(a).numpy()
    process_s, thread_s = time.process_time() - process0, time.thread_time() - thread0
    compute_s = (compute_cpu_ns() - compute0) / 1e9
    # Assert: nearly all the process's CPU is the computation's, more than the calling thread alone saw
    assert process_s > 0.05
    assert compute_s == pytest.approx(process_s, rel=0.25)
    assert compute_s > thread_s

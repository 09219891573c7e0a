"""Weights travel packed: one buffer per dtype, unpickled as the very list of arrays that was packed."""

from __future__ import annotations

import pickle

import numpy as np
from distributed.protocol import deserialize, serialize, to_serialize

from edgelab.common.wire import Packed


def _mixed() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [
        rng.standard_normal((3, 4)).astype(np.float32),
        np.arange(5, dtype=np.int64),
        rng.standard_normal(7).astype(np.float32),
        np.float16(1.5) * np.ones((2, 1, 2), np.float16),
        np.array(2.5, np.float32),  # a 0-d weight (a scalar variable)
        np.empty((0, 3), np.float32),
    ]


def test_packed_arrays_unpickle_as_the_same_list_with_one_buffer_per_dtype() -> None:
    arrays = _mixed()
    buffers: list[pickle.PickleBuffer] = []

    data = pickle.dumps(Packed(arrays), protocol=5, buffer_callback=buffers.append)
    out = pickle.loads(data, buffers=buffers)

    assert isinstance(out, list)
    assert len(buffers) == 3  # float32, int64, float16: not one per array
    assert [(a.dtype, a.shape) for a in out] == [(a.dtype, a.shape) for a in arrays]
    for got, want in zip(out, arrays, strict=True):
        np.testing.assert_array_equal(got, want)


def test_packed_arrays_cross_dasks_serialization_as_the_list() -> None:
    arrays = _mixed()[:3]

    header, frames = serialize(to_serialize(("task", Packed(arrays))))
    task, out = deserialize(header, frames)

    assert task == "task"
    for got, want in zip(out, arrays, strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_packed_list_is_concatenated_once_however_often_it_is_sent() -> None:
    packed = Packed(_mixed())

    first = packed.__reduce__()
    again = packed.__reduce__()

    assert first[1][1][0] is again[1][1][0]


def test_an_empty_list_packs_and_unpacks() -> None:
    assert pickle.loads(pickle.dumps(Packed([]), protocol=5)) == []


def test_a_flat_list_pickles_its_buffers_once_and_packs_without_a_copy() -> None:
    from edgelab.common.wire import Flat, pack

    arrays = _mixed()
    flat = Flat(*pack(arrays))
    buffers: list[pickle.PickleBuffer] = []

    out = pickle.loads(pickle.dumps(flat, protocol=5, buffer_callback=buffers.append), buffers=buffers)

    assert isinstance(out, Flat)
    assert len(buffers) == 3  # the three buffers, not the arrays as well
    assert pack(flat)[1][0] is flat.flats[0]  # sent again as it is
    assert Packed(flat).__reduce__()[1][1][0] is flat.flats[0]
    for got, want in zip(out, arrays, strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_bundle_is_one_small_pickle_in_the_message_and_a_frame_per_buffer() -> None:
    from distributed.protocol import dumps, loads

    from edgelab.common.wire import Bundle

    # Prepare: a round's call, a task and the weights of three dtypes
    arrays = _mixed()[:3]
    call = ("task", {"round": 3}, Packed(arrays))

    # Execute: Dask's message framing, as a comm writes and reads it
    bundled = dumps({"op": "x", "args": to_serialize(Bundle(call))})
    plain = dumps({"op": "x", "args": to_serialize(call)})
    task, meta, out = loads(bundled)["args"]

    # Assert: the message and one frame per buffer (and a prelude), fewer than the tuple sent as it is
    assert len(bundled) == 2 + 2
    assert len(plain) > len(bundled)
    assert (task, meta) == ("task", {"round": 3})
    for got, want in zip(out, arrays, strict=True):
        np.testing.assert_array_equal(got, want)

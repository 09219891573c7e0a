"""Weights on the wire: a model's arrays travel as one buffer per dtype, not one frame per array.

Pickle (protocol 5, as Dask uses it) sends every numpy array as a buffer of
its own, and Dask's comms then handle each as a frame: work per array on both
sides that, for a LeNet-MLP's six arrays, cost more than moving its 437 KB
(a direct call echoing the weights: 3.2 ms as six arrays, 2.4 ms as one, on
this 2-core host). ``Packed`` concatenates the arrays once, however many
devices it is sent to, and unpickles as the list of arrays it was made from
(a ``Flat``: views of the one buffer), so receivers need not know it was
packed. Arrays that are a ``Flat`` already travel without being copied, and
element-wise maths on them (``edgelab.sync.aggregate``) runs once on each
buffer rather than once per array.
"""

from __future__ import annotations

import math
import pickle
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from distributed.protocol import dask_deserialize, dask_serialize


class Packed:
    """A list of arrays that pickles as one flat array per dtype and unpickles as the list.

    Examples
    --------
    >>> import pickle
    >>> out = pickle.loads(pickle.dumps(Packed([np.ones((2, 2), np.float32), np.zeros(3, np.float32)])))
    >>> [a.shape for a in out], isinstance(out, list)
    ([(2, 2), (3,)], True)
    """

    __slots__ = ("arrays", "_packed")

    def __init__(self, arrays: Sequence[np.ndarray]) -> None:
        self.arrays = [np.asarray(a) for a in arrays]
        self._packed: tuple[Layout, tuple[np.ndarray, ...]] | None = None
        if isinstance(arrays, Flat):
            self._packed = pack(arrays)

    @classmethod
    def of(cls, layout: Layout, flats: tuple[np.ndarray, ...]) -> Packed:
        """Arrays that are packed already (a compiled step's flat output): they travel as they are, uncopied."""
        return cls(Flat(layout, flats))

    def __len__(self) -> int:
        return len(self.arrays)

    def flat(self) -> tuple[Layout, tuple[np.ndarray, ...]]:
        """The layout and the flat buffers these arrays travel as, packed on first use."""
        if self._packed is None:
            self._packed = pack(self.arrays)  # once: a round sends the same weights to every device
        return self._packed

    def __reduce__(self) -> tuple[Any, ...]:
        return (unpack, self.flat())


Layout = list[tuple[str, tuple[int, ...], int]]


def pack(arrays: Sequence[np.ndarray]) -> tuple[Layout, tuple[np.ndarray, ...]]:
    """Each array's dtype, shape and buffer, and one flat array per dtype holding them all in order.

    A ``Flat`` gives its own buffers, uncopied.
    """
    if isinstance(arrays, Flat):
        return arrays.layout, arrays.flats
    dtypes = list(dict.fromkeys(a.dtype.str for a in arrays))
    layout = [(a.dtype.str, a.shape, dtypes.index(a.dtype.str)) for a in arrays]
    return layout, tuple(np.concatenate([a.ravel() for a in arrays if a.dtype.str == dt]) for dt in dtypes)


class Flat(list):  # type: ignore[type-arg]
    """A list of arrays that are views of flat buffers, one per dtype (``layout`` says which part is which).

    It pickles as ``Packed`` does: the buffers once, not the arrays and the buffers.
    """

    __slots__ = ("layout", "flats")

    def __init__(self, layout: Layout, flats: tuple[np.ndarray, ...]) -> None:
        super().__init__([flats[group][start:stop].reshape(shape) for group, start, stop, shape in _cut(layout)[0]])
        self.layout, self.flats = layout, tuple(flats)

    @classmethod
    def of_bytes(cls, layout: Layout, buffers: Sequence[np.ndarray]) -> Flat:
        """The arrays of ``layout`` over raw byte buffers (uint8), one per dtype in the layout's order, uncopied."""
        return cls(layout, tuple(b.view(dtype) for b, dtype in zip(buffers, _cut(layout)[1], strict=True)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (unpack, (self.layout, self.flats))


Cut = tuple[list[tuple[int, int, int, tuple[int, ...]]], list[str]]
# Recent layouts' cuts (each array's buffer, start, stop and shape) and their buffers' dtypes. A round's
# messages rebuild views of the same few layouts again and again: working the cuts out every time cost a
# LeNet-MLP's views 16 µs instead of 12. Keyed by identity (a layout is a list); each entry keeps its layout
# alive, so its id is not reused while it is here.
_cuts: dict[int, tuple[Layout, Cut]] = {}
_cuts_lock = threading.Lock()
_CUTS_KEPT = 64


def _cut(layout: Layout) -> Cut:
    entry = _cuts.get(id(layout))
    if entry is not None and entry[0] is layout:
        return entry[1]
    offsets: dict[int, int] = {}
    cuts = []
    for _, shape, group in layout:
        start = offsets.get(group, 0)
        offsets[group] = stop = start + math.prod(shape)  # np.prod costs microseconds a call
        cuts.append((group, start, stop, shape))
    cut = (cuts, list(dict.fromkeys(dtype for dtype, _, _ in layout)))
    with _cuts_lock:
        while len(_cuts) >= _CUTS_KEPT:
            del _cuts[next(iter(_cuts))]  # the oldest
        _cuts[id(layout)] = (layout, cut)
    return cut


#: The boundary TensorFlow aligns its own CPU buffers on: numpy memory aligned so it takes as it is, uncopied.
TENSOR_ALIGNMENT = 64


def aligned_empty(shape: int | tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised array whose data starts on a ``TENSOR_ALIGNMENT``-byte boundary.

    >>> aligned_empty((3, 5), np.float32).ctypes.data % TENSOR_ALIGNMENT
    0
    """
    dtype = np.dtype(dtype)
    nbytes = math.prod((shape,) if isinstance(shape, int) else shape) * dtype.itemsize
    raw = np.empty(nbytes + TENSOR_ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % TENSOR_ALIGNMENT
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def unpack(layout: Layout, flats: tuple[np.ndarray, ...]) -> Flat:
    """The arrays ``Packed`` was made from, as views of the flat buffers it travelled in."""
    return Flat(layout, flats)


def flat_form(lists: Sequence[Sequence[np.ndarray]]) -> tuple[Layout, list[tuple[np.ndarray, ...]]] | None:
    """The common layout and each list's flat buffers, when every list is a ``Flat`` of the same layout; else None."""
    if not lists or not all(isinstance(arrays, Flat) for arrays in lists):
        return None
    layout = lists[0].layout  # type: ignore[attr-defined]
    if any(arrays.layout != layout for arrays in lists[1:]):  # type: ignore[attr-defined]
        return None
    return layout, [arrays.flats for arrays in lists]  # type: ignore[attr-defined]


class Bundle:
    """Values that travel as one part of a Dask message: their pickle in its header, large buffers as frames.

    Dask sends each element of a tuple it is given as a part of its own, and
    each part's pickle as a frame of its own; every frame costs a send and a
    wake-up on each side (a LeNet-MLP's weights echoed as six arrays took
    2.2 ms, as one 1.1 ms, on this 2-core host). A ``Bundle`` of a round's
    task and its weights is one small pickle inside the message and one frame
    per buffer (``Packed`` has one per dtype). It arrives as the value it holds.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


@dask_serialize.register(Bundle)
def _bundle_dumps(bundle: Bundle) -> tuple[dict[str, Any], list[memoryview]]:
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(bundle.value, protocol=5, buffer_callback=buffers.append)
    return {"pickled": data}, [b.raw() for b in buffers]


@dask_deserialize.register(Bundle)
def _bundle_loads(header: dict[str, Any], frames: list[Any]) -> Any:
    return pickle.loads(header["pickled"], buffers=frames)

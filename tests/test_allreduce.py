"""All-reduce's arithmetic without a cluster: who owns which slice, which weights it can carry.

Its runs, bit for bit the parameter server's, are in tests/test_transport.py;
its recoveries from killed devices in tests/test_recovery.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgelab.common.errors import ConfigError
from edgelab.peer.allreduce import check_weights
from edgelab.sync.topology import slice_bounds


@pytest.mark.parametrize(("length", "n"), [(10, 3), (109_386, 10), (3, 5), (0, 2), (7, 1)])
def test_the_slices_cover_the_vector_once_in_near_equal_parts(length: int, n: int) -> None:
    bounds = slice_bounds(length, n)

    sizes = np.diff(bounds)
    assert bounds[0] == 0 and bounds[-1] == length and len(bounds) == n + 1
    assert (sizes >= 0).all() and sizes.max() - sizes.min() <= 1


def test_weights_of_mixed_dtypes_are_refused_naming_the_transport() -> None:
    with pytest.raises(ConfigError, match=r"transport='allreduce' is not allowed: models whose weights share one"):
        check_weights([np.zeros(3, np.float32), np.zeros(2, np.float16)])
    with pytest.raises(ConfigError, match="int64"):
        check_weights([np.zeros(3, np.int64)])
    check_weights([np.zeros(3, np.float32), np.ones((2, 2), np.float32)])

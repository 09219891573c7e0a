"""Communication patterns of data-parallel training as explicit schedules, run between workers.

Communication patterns of data-parallel training as explicit schedules (parameter server, P2P, ring, tree,
gossip), run between Dask workers over their own comms, compressed or not.
"""

from __future__ import annotations

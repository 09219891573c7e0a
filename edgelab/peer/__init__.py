"""Rounds the devices run among themselves: all-reduce, gossip, their pieces and state.

Rounds the devices run among themselves: all-reduce (ring, tree), gossip averaging, the pieces they send
each other, and each device's state of such a run.
"""

from __future__ import annotations

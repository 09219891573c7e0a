"""End / edge / cloud hierarchies at work: tiers, privacy, fault tolerance, placement, early exits.

End / edge / cloud hierarchies at work: the tiered workflow, the privacy module, fault tolerance, placement of
a chain of operators, early exits and their routing, and training a tier's network.
"""

from __future__ import annotations

"""Qiao et al.: a survey of distributed intelligence at the edge.

Qiao et al., a survey of distributed intelligence at the edge: parallelism, pipelined training, communication
architectures, gradient compression, FedAvg, convolution costs, fused tiles, early exits, placement,
compression, and the survey's qualitative items, each experiment beside its figures.
"""

from __future__ import annotations

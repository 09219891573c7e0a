"""Jeon et al.: an AIoT edge cluster running MobileNetV2 as a five-stage pipeline.

Jeon et al., an AIoT edge cluster running MobileNetV2 as a five-stage pipeline (KCS) against an ensemble and
a single board: the data, the cluster's listings, the pipeline and its time, each beside its figures.
"""

from __future__ import annotations

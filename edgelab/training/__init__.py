"""Data-parallel training on the devices: its config, its loop, and what a run answers.

Data-parallel training on the devices: what a run is (``TrainConfig``, checked before any cluster work), the
loop (synchronous or asynchronous, any strategy, recovering lost devices), and what a run answers
(``TrainRun.result``).
"""

from __future__ import annotations

from edgelab.training.config import TrainConfig
from edgelab.training.data_parallel import TrainRun, train
from edgelab.training.result import RunResult

__all__ = ["RunResult", "TrainConfig", "TrainRun", "train"]

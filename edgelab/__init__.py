"""edgelab: distributed deep learning on emulated (or real) edge devices, and the four papers it reproduces.

What a user's own experiment needs, in one import:

- ``connect(n_devices, profile=...)``: a cluster of devices of a named board
  (``PROFILES``: ``pi3b``, ``pi4b`` ...), emulated here, or a running Dask
  cluster's by ``scheduler_address``; every device runs edgelab's device runtime.
- ``load_dataset(name)`` a built-in dataset (``DATASETS``), or
  ``Dataset.from_arrays(x, y)`` one's own arrays (uint8 images or float features).
- ``TrainConfig`` and ``train``: data-parallel training of a built-in model or
  a Keras model (or a function that builds one) under any strategy
  (``STRATEGIES``: the parameter server, sync or async; the end average;
  gossip; with ``sync_every="epoch"`` and ``client_fraction`` FedAvg, with
  ``sync_period`` local SGD; compressors, deadlines: ``TrainConfig``),
  its result in one call (``TrainRun.result``: accuracy, time on the board and
  its clock, host wall time).
- ``run_pipeline``: a model cut into stages, one per device, and data streamed through.

Example: a small Keras model of one's own, on one's own arrays, on four emulated Pi 4Bs.

>>> import keras, numpy as np
>>> import edgelab
>>> rng = np.random.default_rng(0)
>>> x = rng.random((800, 16), dtype=np.float32)
>>> y = (x[:, 0] > 0.5).astype(int)
>>> data = edgelab.Dataset.from_arrays(x, y, name="threshold")
>>> def build():
...     inputs = keras.Input((16,))
...     hidden = keras.layers.Dense(16, activation="relu")(inputs)
...     return keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(hidden))
>>> # FedAvg: every device trains an epoch of its shard, then the server averages
>>> config = edgelab.TrainConfig(
...     model=build, n_devices=4, sync_every="epoch", epochs=5, batch_size=16, learning_rate=0.2
... )
>>> with edgelab.connect(4, profile="pi4b", dashboard_address="127.0.0.1:0") as cluster:
...     run = edgelab.train(cluster, data, config, log=lambda line: None)
>>> result = run.result()
>>> result.board, result.devices, result.accuracy > 0.8
('pi4b', 4, True)
"""

from edgelab.data import DATASETS, Dataset, load_dataset
from edgelab.emulation.profiles import PROFILES, get_profile
from edgelab.pipeline.stream import StreamResult, run_pipeline
from edgelab.runtime.devices import connect, start_hierarchy
from edgelab.sync import STRATEGIES
from edgelab.training.config import TrainConfig
from edgelab.training.data_parallel import TrainRun, train
from edgelab.training.result import RunResult

__all__ = [
    "DATASETS",
    "PROFILES",
    "STRATEGIES",
    "Dataset",
    "RunResult",
    "StreamResult",
    "TrainConfig",
    "TrainRun",
    "connect",
    "get_profile",
    "load_dataset",
    "run_pipeline",
    "start_hierarchy",
    "train",
]

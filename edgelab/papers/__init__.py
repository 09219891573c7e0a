"""The four documents' experiments, each beside the figures and tables it renders.

One folder per paper (``park2020``, ``zhang2018``, ``qiao``, ``jeon``): an
experiment module (its parameters, plan, runs and summary, what its notebook
calls) beside its ``*_figures`` module (the items it renders, each with its
verdict). No paper imports another; what they share lives in the packages
below (``edgelab.report``, ``edgelab.emulation`` ...). ``harness`` is the one
path every experiment takes; ``notebook`` holds the few calls a notebook makes
(its parameters to the experiment's ``PARAMS`` and ``prepare``, the runs, the
items with ``render_report`` of the figures module, what is shown).

``EXPERIMENTS`` names the experiment module behind each notebook, so that
``edgelab reproduce`` finds a notebook's full profile and data check by
reading, not by a naming rule.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: Notebook (``notebooks/<name>.ipynb``) -> the experiment module it calls.
EXPERIMENTS = {
    "park2020_lenet": "edgelab.papers.park2020.lenet",
    "park2020_resnet": "edgelab.papers.park2020.resnet",
    "park2020_async": "edgelab.papers.park2020.sync_async",
    "zhang2018_tiers": "edgelab.papers.zhang2018.tiers",
    "zhang2018_schemes": "edgelab.papers.zhang2018.schemes",
    "zhang2018_faults": "edgelab.papers.zhang2018.faults",
    "zhang2018_privacy": "edgelab.papers.zhang2018.privacy",
    "zhang2018_networks": "edgelab.papers.zhang2018.networks",
    "jeon_pipeline": "edgelab.papers.jeon.pipeline",
    "qiao_comm_architectures": "edgelab.papers.qiao.comm_architectures",
    "qiao_compression": "edgelab.papers.qiao.compression",
    "qiao_conv_costs": "edgelab.papers.qiao.conv_costs",
    "qiao_early_exits": "edgelab.papers.qiao.early_exits",
    "qiao_fedavg": "edgelab.papers.qiao.fedavg",
    "qiao_grad_compression": "edgelab.papers.qiao.grad_compression",
    "qiao_parallelism": "edgelab.papers.qiao.parallelism",
    "qiao_pipeline_training": "edgelab.papers.qiao.pipeline_training",
    "qiao_placement": "edgelab.papers.qiao.placement",
    "qiao_tiles": "edgelab.papers.qiao.tiles",
    "qiao_survey": "edgelab.papers.qiao.survey",
}


def experiment(notebook: str) -> ModuleType | None:
    """The experiment module behind notebook ``notebook`` (its stem), or None for one that has none."""
    name = EXPERIMENTS.get(notebook)
    return importlib.import_module(name) if name else None

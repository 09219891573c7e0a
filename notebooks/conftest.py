"""nbval runs the committed notebooks; keep what they write out of the working tree.

The kernel inherits this environment, so the notebooks' results store and
reports go to a fresh temporary folder: every nbval run really trains, and the
committed reports/ are not overwritten by a test.
"""

from __future__ import annotations

import os
import tempfile

_scratch = tempfile.mkdtemp(prefix="edgelab-nbval-")
os.environ.setdefault("EDGELAB_RESULTS_DIR", os.path.join(_scratch, "results"))
os.environ.setdefault("EDGELAB_REPORTS_DIR", os.path.join(_scratch, "reports"))
os.environ.setdefault("MPLBACKEND", "Agg")

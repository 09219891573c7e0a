"""The report: verdict policy, manifest, page, catalog, reference values, figure and table files.

The report: the verdict policy every item is judged by, the manifest each item is written to, the page drawn
from the manifests, the papers' catalog and reference values, how figures and tables are saved, and the
fidelity table (every timed or memory cell, paper against emulated).
"""

from __future__ import annotations

from edgelab.report.manifest import ReportItem, WrongResultError, update_manifest
from edgelab.report.verdict import Basis, Check, Noise, Verdict, decide

__all__ = ["Basis", "Check", "Noise", "ReportItem", "Verdict", "WrongResultError", "decide", "update_manifest"]

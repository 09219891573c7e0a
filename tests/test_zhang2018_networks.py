"""Zhang 2018's Figure 2 is drawn from the built networks, with their totals checked against Tables 1 and 3."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from edgelab.papers.zhang2018 import networks_figures as zhang2018_networks
from edgelab.report.manifest import update_manifest


def test_the_figure_its_totals_and_every_layer_table_are_written(tmp_path: Path) -> None:
    # Execute
    items = zhang2018_networks.render(tmp_path, notebook="notebooks/zhang2018_networks.ipynb", parameters={})
    update_manifest(items, root=tmp_path)

    # Assert: the item, consistent (its checks are counts and shapes of what was built); its files exist
    [item] = items
    assert (item.id, item.status) == ("zhang2018/fig2", "consistent")
    assert {c.name: (c.passed, c.kind) for c in item.verdict.checks} == {
        "parameters": (True, "structural"),  # the canonical WRN-28-10 10% under the report's total, within tolerance
        "first layers": (True, "structural"),
        "inputs and outputs": (True, "structural"),
    }
    assert item.reduction == "" and any("P-WRN" in c for c in item.verdict.choices)
    assert all(Path(f).is_file() for f in item.files)
    totals = pd.read_csv(tmp_path / "zhang2018" / "fig2.csv").set_index("network")
    # Parameters beside Table 1's, and the first layers beside Table 3's (the source's own values)
    assert totals.loc["resnet34", ["parameters (M)", "paper (M)"]].tolist() == [21.35, 21.4]
    assert totals.loc["wrn-28-10-flatten", ["parameters (M)", "paper (M)"]].tolist() == [40.59, 40.6]
    assert totals.loc["wrn-28-10", "parameters (M)"] == 36.55
    assert totals.loc["resnet34", ["first layer parameters", "paper"]].astype(int).tolist() == [9472, 9472]
    assert totals.loc["wrn-28-10", ["first layer output", "paper output"]].tolist() == ["32x32x16", "32x32x16"]
    # Every layer's parameters add up to the network's total
    layers = pd.read_csv(tmp_path / "zhang2018" / "fig2-layers-mobilenet.csv")
    assert layers["parameters"].sum() == 839_796
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["items"]["zhang2018/fig2"]["status"] == "consistent"

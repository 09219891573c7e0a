"""Jeon et al. Figures 1, 7, 8, 9 and the augmentation arithmetic (edgelab.papers.jeon.data_figures).

Hand-made frames and arrays stand in for the loaded data, the augmentation table and the Keras history; the paper's
training values are passed as a frame in the tidy reference form, so the tests do not depend on their transcription.
fig1 builds one 224x224 MobileNetV2 for the whole module.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import f1_score

from edgelab.common.errors import ConfigError
from edgelab.papers.jeon import data_figures as jd
from edgelab.report.manifest import ReportItem
from edgelab.report.verdict import Basis

COMMON = {"notebook": "test", "parameters": {"profile": "test"}, "data_source": {"name": "hand-made"}}
NAMES = [f"class{i}" for i in range(10)]
PROSE_TRAIN = pd.read_csv(
    io.StringIO(
        """id,row,column,value,unit
jeon/prose-train,batch size,value,32,images
jeon/prose-train,phase 1 result,val_loss,0.2864,
jeon/prose-train,phase 1 result,val_accuracy,0.9053,
jeon/prose-train,phase 2 result,val_loss,0.1465,
jeon/prose-train,phase 2 result,val_accuracy,0.9505,
jeon/prose-train,phase 2 result,F1,0.93,
"""
    )
)


def _checks(item: ReportItem) -> dict[str, bool | None]:
    return {c.name: c.passed for c in item.verdict.checks}


def _bases(item: ReportItem) -> dict[str, Basis]:
    return {c.name: c.basis for c in item.verdict.checks}


def _written(item: ReportItem) -> set[str]:
    assert all(Path(f).is_file() for f in item.files)
    return {Path(f).suffix for f in item.files}


def _per_class(raw: list[int], augmented: list[int]) -> pd.DataFrame:
    made = [a - r for r, a in zip(raw, augmented, strict=True)]
    return pd.DataFrame(
        {
            "class": range(len(raw)),
            "class_name": NAMES[: len(raw)],
            "device": [f"pi4-{i % 2}" for i in range(len(raw))],
            "raw": raw,
            "augmented": augmented,
            "factor": [a / r for r, a in zip(raw, augmented, strict=True)],
            "made": made,
            "wall_s": [0.5] * len(raw),
            "images_per_s": [m / 0.5 for m in made],
        }
    )


@pytest.fixture(scope="module")
def fig1(tmp_path_factory: pytest.TempPathFactory) -> tuple[ReportItem, Path]:
    root = tmp_path_factory.mktemp("reports")
    return jd.render_fig1(root=root, **COMMON), root


def test_fig1_reads_block_2_bytes_from_the_model(fig1: tuple[ReportItem, Path]) -> None:
    # Prepare
    item, root = fig1

    # Execute
    table = pd.read_csv(root / "jeon" / "fig1.csv")
    real = table[table["block"].str.startswith("MobileNetV2")].set_index("layer")
    wide = table[table["block"].str.startswith("ResNet")]

    # Assert
    assert real.loc["block_1_project_BN", "shape"] == "56x56x24"
    assert real.loc["block_1_project_BN", "bytes_fp32"] == 56 * 56 * 24 * 4 == 301_056
    assert real.loc["block_2_expand", "bytes_fp32"] == 56 * 56 * 144 * 4 == 1_806_336
    assert real.loc["block_2_add", "shape"] == "56x56x24"
    assert wide.iloc[0]["bytes_fp32"] == 1_806_336
    assert item.status == "consistent"  # shapes and bytes read from the model: structure, not a prediction
    assert _checks(item) == {"C19 structure": True, "C19 memory": True}
    assert set(_bases(item).values()) == {Basis.STRUCTURE}
    assert _written(item) == {".png", ".csv", ".md"}


def test_class_counts_lists_every_class() -> None:
    # Prepare
    y = np.array([0, 2, 2, 2])

    # Execute
    counts = jd.class_counts(y, ["a", "b", "c"])

    # Assert
    assert counts["count"].tolist() == [1, 0, 3]
    with pytest.raises(ConfigError):
        jd.class_counts(np.array([3]), ["a", "b", "c"])


def test_fig7_sample_is_not_judged(tmp_path: Path) -> None:
    # Prepare
    counts = jd.class_counts(np.repeat(np.arange(10), 160), NAMES)

    # Execute
    item = jd.render_fig7(counts, full_set=False, root=tmp_path, **COMMON)

    # Assert
    assert (item.status, item.verdict.reason_class) == ("not judged", "data missing")
    assert "1,600-image balanced sample, not Kaggle's 16,023" in item.why
    assert set(_checks(item).values()) == {None}
    assert "stand-in sample" in (tmp_path / "jeon" / "fig7.md").read_text()


def test_fig7_full_set_judges_imbalance(tmp_path: Path) -> None:
    # Prepare: made-up counts of a full set, 16,023 in all, largest 3,220 / smallest 373
    counts = pd.DataFrame(
        {"class": range(10), "class_name": NAMES, "count": [2127, 1000, 1909, 952, 1771, 1676, 1404, 3220, 373, 1591]}
    )

    # Execute
    item = jd.render_fig7(counts, full_set=True, root=tmp_path, **COMMON)

    # Assert
    assert counts["count"].sum() == 16023
    assert item.status == "reproduced"
    assert _checks(item) == {"C5 imbalance": True, "total": True}
    assert set(_bases(item).values()) == {Basis.COUNTED}
    assert "largest/smallest 8.63" in item.why


@pytest.mark.parametrize(
    ("augmented", "status", "counts_ok"),
    [([10_000] * 10, "consistent", True), ([10_000] * 9 + [9_999], "differs", False)],
)
def test_fig8_counts(tmp_path: Path, augmented: list[int], status: str, counts_ok: bool) -> None:
    # Prepare
    per_class = _per_class([1000, 2000, 500, 800, 1200, 1600, 900, 3000, 400, 1500], augmented)

    # Execute
    item = jd.render_fig8(per_class, target=10_000, settings={"rotation": 0.1}, root=tmp_path, **COMMON)

    # Assert
    assert item.status == status
    assert _checks(item) == {"C6 counts": counts_ok, "C6 target": True}
    md = (tmp_path / "jeon" / "fig8.md").read_text()
    assert "training split only" in md and "rotation" in md


def test_fig8_smaller_target_is_not_judged(tmp_path: Path) -> None:
    # Prepare
    per_class = _per_class([128] * 10, [400] * 10)

    # Execute
    item = jd.render_fig8(per_class, target=400, settings={}, root=tmp_path, **COMMON)

    # Assert
    # Assert: the counts hold (structural) and the paper's target cannot be judged at 400
    assert item.status == "consistent"
    assert _checks(item) == {"C6 counts": True, "C6 target": None}
    assert item.verdict.checks[1].undecided == "too small"
    assert "profile augments to 400 per class" in item.why
    assert "Mostly synthetic" in (tmp_path / "jeon" / "fig8.md").read_text()


def test_eq_augmentation_arithmetic(tmp_path: Path) -> None:
    # Prepare: a sample of 1,600 images, 128 per class in the training split, augmented to 400
    per_class = _per_class([128] * 10, [400] * 10)

    # Execute
    item = jd.render_eq_augmentation(per_class, target=400, n_raw_total=1600, full_set=False, root=tmp_path, **COMMON)
    table = pd.read_csv(tmp_path / "jeon" / "eq-augmentation.csv")
    sums = table[table["table"] == "arithmetic"].set_index("quantity")

    # Assert
    assert float(sums.loc["total = classes x per class", "run"]) == 4000
    assert float(sums.loc["overall factor = total / raw", "run"]) == 2.5
    assert float(sums.loc["total = classes x per class", "paper"]) == 100_000
    assert float(sums.loc["overall factor = total / raw", "paper"]) == 6.24
    assert _checks(item) == {"counts add up": True, "paper's numbers": None}
    assert item.verdict.checks[1].undecided == "data missing"
    assert item.status == "consistent"  # arithmetic on counts: structural


def test_eq_augmentation_full_run_matches_paper(tmp_path: Path) -> None:
    # Prepare: the paper's 16,023 images, all 10,000 per class
    raw = [2127, 1000, 1909, 952, 1771, 1676, 1404, 3220, 373, 1591]
    per_class = _per_class(raw, [10_000] * 10)

    # Execute
    item = jd.render_eq_augmentation(
        per_class, target=10_000, n_raw_total=16_023, full_set=True, root=tmp_path, **COMMON
    )

    # Assert
    assert item.status == "consistent"
    assert _checks(item) == {"counts add up": True, "paper's numbers": True}
    assert _bases(item) == {"counts add up": Basis.SAME_FORMULA, "paper's numbers": Basis.CONFIGURED}


def _history() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "epoch": [1, 2, 3, 4],
            "phase": [1, 1, 2, 2],
            "loss": [2.0, 1.5, 1.2, 1.0],
            "accuracy": [0.3, 0.5, 0.6, 0.62],
            "val_loss": [2.1, 1.7, 1.4, 1.2],
            "val_accuracy": [0.25, 0.45, 0.55, 0.6],
        }
    )


def test_fig9_from_scratch(tmp_path: Path) -> None:
    # Prepare
    y_true = np.array([0, 0, 1, 1, 2, 2, 2, 3, 4, 5, 6, 7, 8, 9])
    y_pred = np.array([0, 1, 1, 1, 2, 0, 2, 3, 4, 5, 6, 9, 8, 9])

    # Execute
    item = jd.render_fig9(
        _history(),
        y_true,
        y_pred,
        NAMES,
        weights_source="none (random)",
        full_data=False,
        reference=PROSE_TRAIN,
        root=tmp_path,
        **COMMON,
    )
    table = pd.read_csv(tmp_path / "jeon" / "fig9.csv")
    metric = table[table["source"] == "measured"].set_index("metric")["value"]

    # Assert
    assert metric["f1_macro"] == pytest.approx(f1_score(y_true, y_pred, average="macro"))
    assert metric["f1_weighted"] == pytest.approx(f1_score(y_true, y_pred, average="weighted"))
    assert metric["acc_gap"] == pytest.approx(0.02) and metric["loss_gap"] == pytest.approx(-0.2)
    checks = _checks(item)
    assert checks == {"C7 phase 1": None, "C8 phase 2": None, "C9 F1": None, "C10 overfitting": None}
    assert "would hold on 1 run(s)" in item.verdict.checks[3].note  # one training run: not judged, its outcome said
    assert (item.status, item.verdict.reason_class) == ("not judged", "data missing")
    assert "not ImageNet" in item.why
    assert _written(item) == {".png", ".csv", ".md"}


def test_fig9_judged_with_imagenet_on_full_data(tmp_path: Path) -> None:
    # Prepare: a history ending at the paper's values, and perfect predictions (F1 1.0, off the paper's 0.93)
    history = _history().assign(val_accuracy=[0.8, 0.9053, 0.93, 0.9505], val_loss=[0.5, 0.2864, 0.2, 0.1465])
    history = history.assign(accuracy=history["val_accuracy"] + 0.01)
    y = np.arange(10)

    # Execute
    item = jd.render_fig9(
        history, y, y, NAMES, weights_source="imagenet", full_data=True, reference=PROSE_TRAIN, root=tmp_path, **COMMON
    )

    # Assert: trained values of one training run are not judged; each says what it would be
    assert _checks(item) == dict.fromkeys(("C7 phase 1", "C8 phase 2", "C9 F1", "C10 overfitting"))
    notes = {c.name: c.note for c in item.verdict.checks}
    assert "would fail" in notes["C9 F1"] and "would hold" in notes["C7 phase 1"]
    assert set(_bases(item).values()) == {Basis.TRAINED}
    assert (item.status, item.verdict.reason_class) == ("not judged", "noisy")

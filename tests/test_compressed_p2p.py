"""Peer-to-peer with compressed gradients (qiao/fig3-4b's rerun): bytes, averages, and the dense runs untouched."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from edgelab.collectives import compressed_p2p
from edgelab.common.errors import ConfigError
from edgelab.papers import harness
from edgelab.papers.qiao import comm_architectures as exp
from edgelab.papers.qiao.comm_compressed import CompressedRun

#: Two layers of 600 and 400 elements: the per-layer counts below follow from them.
SIZES = [600, 400]


def _gradients(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.normal(size=sum(SIZES)).astype(np.float32) for _ in range(n)]


@pytest.mark.parametrize("spec", ["topk:0.01", "qsgd:127", "sign_ef"])
@pytest.mark.parametrize("n", [2, 3, 5])
def test_every_worker_averages_the_decoded_gradients(spec: str, n: int) -> None:
    # Prepare
    vectors = _gradients(n)

    # Execute
    exchange = compressed_p2p.simulate(spec, vectors, SIZES, seed=0)

    # Assert: the mean of what was decoded, not of the fp32 gradients
    decoded_mean = np.mean(np.stack(exchange.decoded), axis=0)
    np.testing.assert_allclose(exchange.average, decoded_mean, rtol=0, atol=1e-6 * np.abs(decoded_mean).max())
    assert exchange.average.dtype == np.float32
    assert not np.allclose(exchange.average, np.mean(np.stack(vectors), axis=0), atol=1e-3)


def test_payloads_are_one_percent_of_each_layer_or_eight_bits_an_element() -> None:
    # Prepare
    vector = _gradients(1)[0]

    # Execute
    topk = compressed_p2p.simulate("topk:0.01", [vector, vector], SIZES, seed=0).encoded[0]
    qsgd = compressed_p2p.simulate("qsgd:127", [vector, vector], SIZES, seed=0).encoded[0]

    # Assert: top-k keeps 6 + 4 elements (int32 index, float32 value); QSGD 7 level bits, a sign bit, a norm a layer
    assert topk.payload_bytes == (6 + 4) * (4 + 4)
    assert qsgd.payload_bytes == math.ceil(1000 * 7 / 8) + math.ceil(1000 / 8) + 2 * 4 == 1008
    assert compressed_p2p.wire_bytes(topk) > topk.payload_bytes  # the pickled header rides on top


def test_repeated_exchanges_send_the_same_encoding() -> None:
    vectors = _gradients(3)

    first = compressed_p2p.simulate("qsgd:127", vectors, SIZES, seed=3)
    again = compressed_p2p.simulate("qsgd:127", vectors, SIZES, seed=3)

    assert np.array_equal(first.average, again.average)
    assert not np.array_equal(first.decoded[0], compressed_p2p.simulate("qsgd:127", vectors, SIZES, seed=4).decoded[0])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: compressed_p2p.check_compressors(["none"]), r"compressors=\('none',\) is not allowed: a list of"),
        (lambda: exp.CommParams(compressors=("topk:2",)), r"compressors=\('topk:2',\) is not allowed"),
        (lambda: exp.CommParams(compressors=("qsgd:8", "qsgd:8")), r"compressors=\('qsgd:8', 'qsgd:8'\)"),
        (lambda: compressed_p2p.layers(np.zeros(5), [2, 2]), r"sizes=\[2, 2\] is not allowed: layer sizes summing"),
    ],
)
def test_bad_input_is_refused_before_any_cluster_work(call: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        call()  # type: ignore[operator]


@pytest.mark.integration
def test_compressed_rerun_counts_serialized_bytes_and_leaves_dense_runs_valid(
    shared_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgelab.common.results import ResultsStore

    # Prepare: the dense runs stored first, by a plan that asks for no compressed rerun
    monkeypatch.delenv("EDGELAB_SCHEDULER", raising=False)
    store = ResultsStore(tmp_path)
    options = {"worker_counts": [3], "servers": 1, "iterations": 2, "gossip_steps": 2, "batch_size": 8,
               "data_dir": str(shared_data_dir)}  # fmt: skip
    dense_plan = exp.prepare(**options, compressors=[])
    exp.run(dense_plan, store=store)
    plan = exp.prepare(**options)

    # Execute: only the reruns are pending; the dense run is read back
    pending = harness.pending(plan, store)
    runs = exp.run(plan, store=store)

    # Assert
    assert pending == [CompressedRun(3, "topk:0.01"), CompressedRun(3, "qsgd:127")]
    assert plan.run_params(3) == dense_plan.run_params(3) and "compressor" not in plan.run_params(3)
    table = exp.traffic(plan, runs)
    g = int(runs[0].summary["vector_bytes"])
    assert table.set_index("pattern").at["p2p", "total_bytes"] == 3 * 2 * g  # dense P2P unchanged: N(N-1)|g|
    compressed = exp.compression(plan, runs).set_index("compressor")
    assert compressed["sends"].tolist() == [6, 6]
    assert compressed["bytes_equal_encodings"].all()
    assert compressed["equals_simulation"].all() and compressed["same_on_every_worker"].all()
    assert (compressed["mean_error"] <= 1e-5).all()
    # top-k 1% of each layer: 8 bytes a kept element, all layers of the LeNet-MLP
    sizes = runs[-1].summary["layer_sizes"]
    assert compressed.at["topk:0.01", "total_bytes"] == 6 * 8 * sum(math.ceil(0.01 * s) for s in sizes)
    assert compressed.at["qsgd:127", "payload_ratio"] == pytest.approx(4.0, rel=0.01)
    assert (compressed["wire_ratio"] > 1).all()
    links = exp.link_matrix(plan, runs, 3, "p2p", compressor="qsgd:127")
    assert (links[~np.eye(3, dtype=bool)] > 0).all() and links.trace() == 0
    checks = {c.name: c for c in exp.c11(table, exp.compression(plan, runs))}
    # fewer bytes is a prediction of the counted bytes; the exchange being exact is the implementation's correctness
    fewer, exact = checks["compression lowers the P2P traffic"], checks["compressed exchange exact"]
    assert (fewer.passed, fewer.kind, exact.passed, exact.kind) == (True, "predicted", True, "correctness")

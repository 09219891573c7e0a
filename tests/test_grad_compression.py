"""The gradient-compression experiment: its checks, its summaries of stored runs, its verdicts, one real sweep."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common.errors import ConfigError
from edgelab.common.results import ResultsStore, StoredRun
from edgelab.data import Dataset
from edgelab.emulation.profiles import get_profile
from edgelab.models.costs import weight_count
from edgelab.papers.qiao import grad_compression as exp
from edgelab.papers.qiao import grad_compression_figures as fig


def _plan(dataset: Dataset, **params: object) -> exp.Plan:
    p = exp.GradCompressionParams(**{"schemes": ("none", "sign_ef"), "n_devices": 2, "batch_size": 8, **params})
    runs = [exp.RunKey(s) for s in p.schemes] + [exp.RunKey(exp.GRADIENTS)]
    return exp.Plan(p, dataset, get_profile("pi3b"), runs)


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"schemes": ("sign", "sign_ef")}, "schemes"),  # no fp32 to compare with
        ({"schemes": ("none", "qsgd:0")}, "compressor"),
        ({"link_mbps": 0}, "link_mbps"),
        ({"randomk_density": 1.0}, "randomk_density"),
        ({"draws": 0}, "draws"),
        ({"steps": 0}, "steps"),
    ],
)
def test_bad_parameters_are_refused_before_any_cluster_work(params: dict[str, object], parameter: str) -> None:
    with pytest.raises(ConfigError) as caught:
        exp.GradCompressionParams(**params)  # type: ignore[arg-type]

    assert caught.value.parameter == parameter


def _records(bytes_sent: int, *, rounds: int = 4, devices: int = 2) -> pd.DataFrame:
    """Every device pulls 1 MB and computes 10 ms (host CPU) per round."""
    return pd.DataFrame(
        [
            {"round": r, "epoch": 0, "device": f"d{i}", "device_index": i, "cpu_s": 0.01,
             "bytes_received": 1_000_000, "bytes_sent": bytes_sent, "bytes_sent_dense": 1000}
            for r in range(rounds) for i in range(devices)
        ]
    )  # fmt: skip


def _store(tmp_path: Path, plan: exp.Plan, delta: list[np.ndarray]) -> list[StoredRun]:
    """Runs stored as the experiment stores them: fp32 sends 1000 B per device per round, sign_ef 100 B."""
    store = ResultsStore(tmp_path)
    summary = {"calibration": {"speed_factor": 2.0}}
    for scheme, sent, accuracies in (("none", 1000, (0.5, 0.7)), ("sign_ef", 100, (0.4, 0.6))):
        progress = pd.DataFrame({"updates": [2, 4], "samples_seen": [32, 64], "accuracy": accuracies, "loss": 1.0})
        tables = {"records": _records(sent), "progress": progress, "evaluations": progress.tail(1)}
        store.put(plan.run_params(exp.RunKey(scheme)), summary, tables)
    arrays = {f"b0_l{i}": a for i, a in enumerate(delta)}
    store.put(plan.run_params(exp.RunKey(exp.GRADIENTS)), {"batches": 1, "layers": len(delta)}, {}, arrays)
    return exp.run(plan, store=store)  # every run is stored: nothing starts


def test_summaries_of_stored_runs_count_bytes_budget_and_time_per_step(dataset: Dataset, tmp_path: Path) -> None:
    # Prepare: 8 Mbit/s = 1 MB/s, so a pull of 1 MB takes 1 s (plus 0.5 ms latency)
    plan = _plan(dataset, budget_rounds=2, link_mbps=8.0)
    stored = _store(tmp_path, plan, [np.array([0.0, 0.0, 3.0, 4.0])])

    curves, summary = exp.curves(plan, stored), exp.summarize(plan, stored).set_index("scheme")

    # Assert: bytes uploaded by both devices so far, at each evaluation
    assert curves["uploaded_bytes"].tolist() == [4000, 8000, 400, 800]
    assert exp.byte_budget(plan, stored) == 4000
    assert summary["accuracy_at_budget"].tolist() == [0.5, 0.6]  # fp32 at round 2, sign_ef within it at round 4
    assert summary["smaller"].tolist() == [1.0, 10.0]
    # The server's shared link sends both pulls in turn, then takes the pushes: 2 pulls + 20 ms compute + 1 push
    pull, compute = 0.0005 + 1.0, 0.01 * 2.0
    for scheme, sent in (("none", 1000), ("sign_ef", 100)):
        assert summary.loc[scheme, "step_s"] == pytest.approx(2 * pull + compute + 0.0005 + sent / 1e6)


def test_density_of_a_stored_delta_is_counted_exactly(dataset: Dataset, tmp_path: Path) -> None:
    stored = _store(tmp_path, plan := _plan(dataset), [np.array([0.0, 0.0, 3.0, 4.0])])

    row = exp.density(plan, stored).iloc[0]

    # half the coordinates are 0; 16 + 9: the two largest hold 99% of the squared norm, the largest 64%
    assert (row["zero"], row["for_99"], row["top_0.1"]) == (0.5, 0.5, pytest.approx(0.64))


def test_randomk_mean_over_draws_has_the_variance_error_and_without_rescale_the_bias(
    dataset: Dataset, tmp_path: Path
) -> None:
    delta = [np.random.default_rng(0).standard_normal(20_000)]
    plan = _plan(dataset, draws=50, randomk_density=0.2)
    stored = _store(tmp_path, plan, delta)

    check = exp.randomk_check(plan, stored)

    assert check["expected"].tolist() == pytest.approx([math.sqrt(0.8 / (0.2 * 50)), 0.8])
    np.testing.assert_allclose(check["relative_error"], check["expected"], rtol=0.05)


def test_payload_of_one_lenet_mlp_delta_matches_the_bits_per_value(dataset: Dataset) -> None:
    plan = _plan(dataset, schemes=("none", "sign", "terngrad", "qsgd:4", "topk:0.01"))
    n = sum(math.prod(s) for s in exp.LENET_MLP)

    ratios = exp.payload_ratios(plan).set_index("scheme")

    assert n == weight_count("mlp") == 109_386
    assert ratios.loc["sign", "payload_bytes"] == math.ceil(n / 8) + 24  # a bit each, six float32 scales
    assert ratios.loc["terngrad", "payload_bytes"] == math.ceil(n / 4) + 24  # 2 bits each
    assert ratios.loc["qsgd:4", "payload_bytes"] == math.ceil(3 * n / 8) + math.ceil(n / 8) + 24  # 3-bit levels, signs
    assert ratios.loc["topk:0.01", "payload_bytes"] == 8 * sum(math.ceil(0.01 * math.prod(s)) for s in exp.LENET_MLP)


def _summary(rounds: int, accuracy: dict[str, float]) -> pd.DataFrame:
    dense = 437_544
    sizes = {"qsgd:1": 27_881, "qsgd:16": 82_577, "topk:0.01": 9_258, "sign_ef": 14_179}
    return pd.DataFrame(
        [
            {"scheme": s, "rounds": rounds, "accuracy": a, "bytes_per_step": sizes.get(s, dense)}
            for s, a in accuracy.items()
        ]
    )


def _runs(rounds: int, accuracy: dict[str, float], repeats: int = 3) -> pd.DataFrame:
    """Every scheme trained ``repeats`` times, each run 0.01 off the median (0.01 below, on it, above)."""
    return pd.DataFrame(
        [
            {"scheme": s, "repeat": r, "rounds": rounds, "accuracy": a + 0.01 * (r - 1 if repeats > 1 else 0)}
            for s, a in accuracy.items()
            for r in range(repeats)
        ]
    )


GOOD = {"none": 0.95, "sign": 0.80, "sign_ef": 0.94, "terngrad": 0.93, "terngrad_noclip": 0.90, "qsgd:1": 0.85,
        "qsgd:16": 0.94, "topk:0.01": 0.94}  # fmt: skip


def test_quant_verdict_judges_accuracy_only_on_long_runs_of_three_seeds(dataset: Dataset) -> None:
    ratios = exp.payload_ratios(_plan(dataset, schemes=("none", "sign", "terngrad")))

    def verdict(rounds: int, accuracy: dict[str, float], repeats: int = 3) -> fig.Verdict:
        return fig.quant_verdict(_summary(rounds, accuracy), ratios, _runs(rounds, accuracy, repeats))

    short, long, once = verdict(6, GOOD), verdict(200, GOOD), verdict(200, GOOD, repeats=1)
    worse = verdict(200, {**GOOD, "sign_ef": 0.80})

    assert (short.status, short.reason_class) == ("not judged", "too small") and "too short" in short.why
    # the payload sizes are the encoders as built: structural, decided at once
    assert all(c.passed and c.kind == "structural" for c in short.checks if "bit" in c.name)
    assert long.status == "reproduced" and {c.runs for c in long.checks if c.kind == "predicted"} >= {3}
    # one run per scheme: every accuracy claim stays undecided, whatever it would read
    assert (once.status, once.reason_class) == ("not judged", "noisy")
    assert worse.status == "differs" and worse.why.startswith("C23")


def test_sparsify_verdict_needs_sparse_deltas_and_an_unbiased_random_k() -> None:
    density = pd.DataFrame([{"layer": "all", "for_99": 0.3, "zero": 0.47, "top_0.01": 0.3}])
    sparsity = pd.DataFrame({"repeat": [0, 1, 2], "for_99": [0.3, 0.29, 0.31]})
    check = pd.DataFrame({"draws": [100, 100], "relative_error": [0.297, 0.9], "expected": [0.3, 0.9]})
    biased = check.assign(relative_error=[0.5, 0.9])

    def verdict(rounds: int, check: pd.DataFrame, sparsity: pd.DataFrame = sparsity) -> fig.Verdict:
        return fig.sparsify_verdict(_summary(rounds, GOOD), density, check, _runs(rounds, GOOD), sparsity)

    assert verdict(200, check).status == "reproduced"
    assert verdict(6, check).status == "not judged"
    wrong = verdict(200, biased)
    assert wrong.status == "differs" and [c.name for c in wrong.wrong] == ["C26 rescaled random-k is unbiased"]
    assert verdict(200, check, sparsity.assign(for_99=0.9)).status == "differs"


@pytest.mark.integration
def test_a_small_sweep_on_real_devices_sends_what_each_compressor_encodes(
    cluster: DeviceCluster, dataset: Dataset, tmp_path: Path
) -> None:
    # Prepare: two devices, three batches each, fp32 against sign with error feedback and top-k 1%
    plan = _plan(dataset, schemes=("none", "sign_ef", "topk:0.01"), steps=3, eval_every=3, gradient_batches=2)
    plan = replace(plan, runs=[exp.RunKey(s) for s in plan.params.schemes] + [exp.RunKey(exp.GRADIENTS)])

    stored = exp.run(plan, store=ResultsStore(tmp_path), cluster=cluster)
    summary = exp.summarize(plan, stored).set_index("scheme")

    # Assert: every round of every device; the bytes a pickle of each payload takes (Dask's framing beside it)
    assert summary["rounds"].tolist() == [3, 3, 3]
    assert summary.loc["none", "bytes_per_step"] == 4 * weight_count("mlp")
    assert 30 < summary.loc["sign_ef", "smaller"] < 32
    assert 40 < summary.loc["topk:0.01", "smaller"] < 50
    assert summary["accuracy"].between(0, 1).all()
    density = exp.density(plan, stored)
    assert density["layer"].tolist() == [*exp.LAYERS, "all"]
    assert 0 < density.iloc[-1]["for_99"] < 1


def test_the_full_profile_runs_every_scheme_three_times_from_its_own_seed() -> None:
    # Execute
    p = exp.GradCompressionParams(repeats=3, seed=5)

    # Assert: the claims' accuracies and density rest on three runs; a repeat is another seed, not the same run
    assert exp.FULL_PROFILE["repeats"] >= 3
    assert [p.config("sign_ef", r).seed for r in range(3)] == [5, 6, 7]
    assert exp.GradCompressionParams().config("none").to_dict() == p.config("none", 0).to_dict() | {"seed": 0}

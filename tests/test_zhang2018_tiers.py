"""Zhang 2018's Tables 1 and 2: the plan's checks, the clock's Table 2, and the weights files Keras writes."""

from __future__ import annotations

import pandas as pd
import pytest

from edgelab.common.errors import ConfigError
from edgelab.models.tiers import saved_bytes
from edgelab.papers.zhang2018 import tiers as exp
from edgelab.report import verdict


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"networks": ["mobilenet", "vgg16"]}, r"networks='vgg16' is not allowed: names among mobilenet"),
        ({"tasks": 0}, r"tasks=0 is not allowed: an integer >= 1"),
        ({"task_size": 2.5}, r"task_size=2.5 is not allowed"),
        ({"tier": "fog"}, r"tier='fog' is not allowed: a parameter among"),
        ({"accuracy_networks": ["lenet"]}, r"accuracy_networks='lenet' is not allowed: names among mobilenet"),
        ({"epochs": 0}, r"epochs=0 is not allowed: an integer >= 1"),
        ({"train_images": -5}, r"train_images=-5 is not allowed"),
        ({"train_eagerly": "yes"}, r"train_eagerly='yes' is not allowed: True or False"),
    ],
)
def test_bad_input_is_refused_before_any_data_or_cluster_work(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        exp.prepare(data_dir="/nonexistent/edgelab-data", **kwargs)


def test_table2_on_the_clock_is_table1_plus_the_latency_and_transfer_over_fifty_images() -> None:
    plan = exp.Plan(exp.TiersParams(), None, None, exp.get_profile("native"), [], exp.zhang2018_calibration(), None)  # type: ignore[arg-type]
    table = exp.table2(plan, pd.DataFrame(columns=["tier", "network", "host_ms"]))
    keys = zip(table["device, network"], table["latency (s)"], strict=True)
    clock = dict(zip(keys, table["clock (ms/image)"], strict=True))
    transfer_ms = 1e3 * 8 * 50 * 3072 / 1e9 / 50  # 1 Gbit/s links (the hierarchy's assumed bandwidth)
    assert clock["end, mobilenet", 0.0] == 5.2  # no link: the end device holds the images
    assert clock["edge, resnet34", 0.5] == pytest.approx(5.53 + 500 / 50 + transfer_ms, abs=0.005)
    assert clock["cloud, wrn-28-10", 1.0] == pytest.approx(6.99 + 1000 / 50 + transfer_ms, abs=0.005)
    assert table["report processing (ms/image)"].tolist() == [10.4, 8.4, 18.3, 10.8, 31.0]
    # Inference alone is Table 1's time per image on every row of its tier, whatever the latency
    assert table["clock inference (ms/image)"].tolist() == [5.2, 5.53, 5.53, 6.99, 6.99]
    assert table["report inference (ms/image)"].tolist() == [7.41, 5.99, 5.99, 7.36, 7.36]


def test_table2_differs_by_the_framework_the_clock_does_not_charge_and_the_latency_share_holds() -> None:
    from edgelab.papers.zhang2018.tiers_figures import table2_checks

    plan = exp.Plan(exp.TiersParams(), None, None, exp.get_profile("native"), [], exp.zhang2018_calibration(), None)  # type: ignore[arg-type]
    table = exp.table2(plan, pd.DataFrame(columns=["tier", "network", "host_ms"]))

    checks = {c.name: c for c in table2_checks(table)}
    result = verdict.decide(list(checks.values()), fitted=[], predicted=["x"], noise=verdict.Noise.none("clock"))

    assert checks["level"].passed is False and "HTTP serving" in checks["level"].note
    assert checks["C14 (edge, 0.5 s)"].passed and checks["C14 (cloud, 1 s)"].passed  # 10 vs 9.9, 20 vs 20.2 ms
    assert checks["C13"].passed and checks["C12"].undecided == "qualitative"
    # The in-system inference row, once per tier: 29.8%, 7.7%, 5.0% off, median 7.7% (within 25%)
    inference = checks["level (inference)"]
    assert inference.passed is True
    assert "median error 7.7%, worst 29.8% at device, network=end, mobilenet" in inference.measured
    assert {c.basis for c in checks.values()} == {verdict.Basis.MODELLED}
    assert result.status == "differs" and not result.wrong


def test_ratios_compare_each_network_across_tiers() -> None:
    times = pd.DataFrame(
        [
            {"network": n, "tier": t, "report_ms": r, "host_ms": h}
            for n, t, r, h in [
                ("mobilenet", "end", 5.2, 1.0),
                ("mobilenet", "edge", 2.03, 1.0),
                ("mobilenet", "cloud", 0.25, 0.5),
                ("wrn-28-10", "end", 1170.0, 100.0),
                ("wrn-28-10", "edge", 227.0, 50.0),
                ("wrn-28-10", "cloud", 6.99, 50.0),
            ]
        ]
    )
    r = exp.ratios(times).set_index(["times", "network"])
    assert r.loc[("report", "wrn-28-10"), "edge / cloud"] == pytest.approx(227 / 6.99)  # the report's "32x"
    assert r.loc[("report", "wrn-28-10"), "on the end, / MobileNet"] == pytest.approx(225.0)  # its "225x"
    assert r.loc[("this host", "wrn-28-10"), "end / edge"] == 2.0


def test_a_compiled_models_weights_file_holds_its_optimizers_slots(tmp_path: object) -> None:
    import keras

    model = keras.Sequential([keras.Input((100,)), keras.layers.Dense(1000)], name="wide")  # 101,000 weights
    files = saved_bytes(model, "adam", tmp_path)  # type: ignore[arg-type]
    # Adam keeps two slots per weight: the file grows by about 2 x 4 B per weight
    assert files["weights_file_bytes"] == pytest.approx(4 * 101_000, rel=0.05)
    assert files["with_optimizer_file_bytes"] - files["weights_file_bytes"] == pytest.approx(8 * 101_000, rel=0.05)
    with pytest.raises(ConfigError, match=r"optimizer='rmsprop' is not allowed"):
        saved_bytes(model, "rmsprop", tmp_path)  # type: ignore[arg-type]


def _accuracy_table(coarse: dict[str, float], fine: dict[str, float]) -> pd.DataFrame:
    report = {"mobilenet": (0.50, float("nan")), "resnet34": (0.73, 0.61), "wrn-28-10": (0.83, 0.73)}
    return pd.DataFrame(
        [
            {
                "network": n,
                "coarse accuracy": coarse[n],
                "fine accuracy": fine.get(n, float("nan")),
                "report coarse": report[n][0],
                "report fine": report[n][1],
            }
            for n in coarse
        ]
    )


def _plan(source: str, train_images: int, epochs: int) -> exp.Plan:
    from types import SimpleNamespace

    params = exp.TiersParams(
        accuracy_networks=("mobilenet", "resnet34", "wrn-28-10"), train_images=train_images, epochs=epochs
    )
    training = SimpleNamespace(source=source)
    return exp.Plan(params, None, None, exp.get_profile("native"), [], exp.zhang2018_calibration(), training)  # type: ignore[arg-type]


SIZES = pd.DataFrame(
    {
        "network": ["mobilenet", "resnet34", "wrn-28-10"],
        "parameters (M)": [0.84, 21.35, 36.55],
        "report (M)": [0.84, 21.4, 40.6],
    }
)


def test_accuracy_on_the_stand_in_or_a_brief_training_is_shown_but_never_judged() -> None:
    from edgelab.papers.zhang2018.tiers_figures import accuracy_checks

    table = _accuracy_table(
        {"mobilenet": 0.5, "resnet34": 0.73, "wrn-28-10": 0.83}, {"resnet34": 0.61, "wrn-28-10": 0.73}
    )
    for plan, reason in (
        (_plan("cifar10_standin", 50_000, 200), "data missing"),
        (_plan("data_dir", 2_000, 3), "too small"),
    ):
        checks = {c.name: c for c in accuracy_checks(plan, table, SIZES)}
        assert checks["parameters"].passed is True  # median error 0.2%, WRN's 10% the worst
        assert checks["parameters"].kind == "structural"
        assert [checks[c].passed for c in ("accuracy", "C6", "C7", "C8")] == [None] * 4
        assert {checks[c].undecided for c in ("accuracy", "C6", "C7", "C8")} == {reason}
        assert "resnet34 0.730 vs mobilenet 0.500 on coarse labels: +46%" in checks["C6"].measured


def test_accuracy_at_the_reports_setting_is_judged_claim_by_claim() -> None:
    from edgelab.papers.zhang2018.tiers_figures import accuracy_checks

    plan = _plan("data_dir", 50_000, 200)
    same = _accuracy_table(
        {"mobilenet": 0.5, "resnet34": 0.73, "wrn-28-10": 0.83}, {"resnet34": 0.61, "wrn-28-10": 0.73}
    )
    found = accuracy_checks(plan, same, SIZES)
    checks = {c.name: c.passed for c in found}
    assert checks == {"parameters": True, "accuracy": True, "C6": True, "C7": True, "C8": True}
    # One training run per network: the policy states what it shows and leaves it to three runs
    result = verdict.decide(found, fitted=[], predicted=["accuracy rows"], noise=verdict.Noise())
    assert (result.status, result.reason_class) == ("not judged", "noisy")
    assert all("would hold on 1 run(s)" in c.note for c in result.checks if c.kind == "predicted")
    # WRN no better than ResNet on fine labels: C7 and C8 fail, and so does the accuracy row
    flat = _accuracy_table(
        {"mobilenet": 0.5, "resnet34": 0.73, "wrn-28-10": 0.83}, {"resnet34": 0.61, "wrn-28-10": 0.60}
    )
    checks = {c.name: c.passed for c in accuracy_checks(plan, flat, SIZES)}
    assert checks == {"parameters": True, "accuracy": False, "C6": True, "C7": False, "C8": False}


def test_a_coarse_only_network_trained_alone_gives_a_numeric_table_and_its_text(cifar10_dir: object) -> None:
    # MobileNet answers only coarse labels: its fine accuracy is missing, and once was None in an object column
    from edgelab.common.results import StoredRun
    from edgelab.papers.harness import run_key
    from edgelab.papers.zhang2018.tiers_figures import accuracy_text

    plan = exp.prepare(data_dir=str(cifar10_dir), accuracy_networks=["mobilenet"], networks=["mobilenet"])
    [run] = [r for r in plan.runs if isinstance(r, exp.AccuracyRun)]
    summary = {
        "level": "coarse",
        "classes": 20,
        "train_images": 128,
        "epochs": 1,
        "coarse_accuracy": 0.21,
        "fine_accuracy": None,
        "train_wall_s": 3.0,
    }
    stored = StoredRun(run_key(plan.run_params(run)), {}, summary, {"loss": pd.DataFrame({"loss": [3.1, 2.9]})})

    table = exp.accuracy(plan, [stored])

    assert table["fine accuracy"].dtype == float and table["fine accuracy"].isna().all()
    assert table["coarse accuracy"].tolist() == [0.21]
    assert any("mobilenet" in line for line in accuracy_text(plan, table))

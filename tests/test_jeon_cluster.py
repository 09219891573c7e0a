"""Jeon et al. Figures 2, 4, 5, 6 and 10 read from a live Dask cluster (edgelab.papers.jeon.cluster_figures).

One module-scoped in-process cluster of two workers on loopback TCP serves every live test; the renderers are
tested on the view it gives and on bad views built from it by hand.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from distributed import Client, LocalCluster

from edgelab.common.errors import ConfigError
from edgelab.emulation.profiles import get_profile
from edgelab.papers.jeon import cluster_figures as jc
from edgelab.report.verdict import Basis

# A few of the paper's rows, in the reference files' tidy form, so the tests do not depend on their transcription.
PAPER = {
    "jeon/fig4": """id,row,column,value,unit
jeon/fig4,commendcenter,STATUS,Ready,
jeon/fig4,commendcenter,ROLES,"control-plane,master",
jeon/fig4,commendcenter,AGE,77,d
jeon/fig4,scv1,STATUS,Ready,
jeon/fig4,scv1,ROLES,<none>,
jeon/fig4,scv1,AGE,77,d
jeon/fig4,listing,prompt,pi@commendcenter:~$ kubectl get nodes,
""",
    "jeon/fig5": """id,row,column,value,unit
jeon/fig5,tensor-deployment,READY,1/1,
jeon/fig5,tensor-deployment,AGE,43,h
""",
    "jeon/fig6": """id,row,column,value,unit
jeon/fig6,tensor-svc1,TYPE,LoadBalancer,
jeon/fig6,tensor-svc1,EXTERNAL-IP,164.125.234.84,
jeon/fig6,tensor-svc1,PORT(S),"8888:30792/TCP, 2222:30237/TCP",
""",
}


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    """Two in-process workers on loopback TCP (in-process transport would hide the addresses)."""
    with (
        LocalCluster(
            n_workers=2,
            processes=False,
            threads_per_worker=1,
            protocol="tcp://",
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as started,
    ):
        yield started


@pytest.fixture(scope="module")
def names(client: Client) -> list[str]:
    return sorted(str(w["name"]) for w in client.scheduler_info(n_workers=-1)["workers"].values())


@pytest.fixture(scope="module")
def view(client: Client, names: list[str], tmp_path_factory: pytest.TempPathFactory) -> jc.ClusterView:
    roles = {"pipeline-stage-1": names[0], "pipeline-stage-2": names[1]}
    data_dir = tmp_path_factory.mktemp("shared") / "data"
    return jc.collect(client, roles=roles, data_dir=data_dir, profile=get_profile("pi3b"), emulated=True)


@pytest.fixture
def references() -> dict[str, pd.DataFrame]:
    return {item_id: pd.read_csv(io.StringIO(text)) for item_id, text in PAPER.items()}


def _render(view: jc.ClusterView, root: Path, references: dict[str, pd.DataFrame], expected: int = 2) -> dict:
    items = jc.render_cluster_items(
        view,
        root=root,
        notebook="notebooks/jeon_cluster.ipynb",
        parameters={"n_workers": 2},
        data_source={"kind": "live cluster"},
        expected_workers=expected,
        references=references,
    )
    return {item.id: item for item in items}


# ------------------------------------------------------------------ age


@pytest.mark.parametrize(
    ("seconds", "age"),
    [
        (-5, "<invalid>"),
        (-0.5, "0s"),
        (45, "45s"),
        (119, "119s"),
        (180, "3m"),
        (190, "3m10s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (2 * 3600 + 30, "120m"),  # kubectl keeps minutes up to 3 h
        (3 * 3600, "3h"),
        (7 * 3600 + 5 * 60, "7h5m"),
        (43 * 3600 + 59 * 60, "43h"),
        (3 * 86400 + 5 * 3600, "3d5h"),
        (49 * 86400, "49d"),
        (77 * 86400 + 3600, "77d"),
        (3 * 365 * 86400 + 10 * 86400, "3y10d"),
        (9 * 365 * 86400, "9y"),
        (math.nan, "<unknown>"),
    ],
)
def test_kubectl_age_matches_kubectl_human_duration(seconds: float, age: str) -> None:
    assert jc.kubectl_age(seconds) == age


# ------------------------------------------------------------------ live tables


def test_nodes_are_one_scheduler_and_every_worker_ready(view: jc.ClusterView, names: list[str]) -> None:
    nodes = view.nodes

    assert list(nodes.columns[:5]) == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert list(nodes["kind"]) == ["scheduler", "worker", "worker"]
    assert list(nodes["NAME"]) == ["scheduler", *names]
    assert (nodes["STATUS"] == "Ready").all()
    assert list(nodes["ROLES"]) == [jc.SCHEDULER_ROLE, "pipeline-stage-1", "pipeline-stage-2"]
    assert nodes["AGE"].str.fullmatch(r"\d+(s|m\d*s?)").all()
    assert nodes["VERSION"].str.startswith("distributed ").all()
    assert list(jc.node_mapping(nodes)["paper"]) == ["commendcenter", "scv1", "scv2"]


def test_every_node_reports_the_same_environment(view: jc.ClusterView) -> None:
    env = view.environment

    assert list(env["node"][:2]) == ["client", "scheduler"] and len(env) == 4
    assert env["all_equal"].all()
    assert env[list(jc.ENV_PACKAGES)].nunique().max() == 1


def test_every_service_answered_on_loopback(view: jc.ClusterView) -> None:
    services = view.services

    assert list(services["TYPE"]) == ["scheduler", "worker", "worker"]
    assert services["answered"].all() and (services["rtt_ms"] > 0).all()
    assert services["loopback"].all()
    assert services["host"].eq("127.0.0.1").all()
    assert services["dashboard_port"].notna().all()


def test_deployments_are_ready_and_up_to_date(view: jc.ClusterView) -> None:
    deploy = view.deployments

    assert list(deploy["NAME"][1:]) == ["pipeline-stage-1", "pipeline-stage-2"]
    assert (deploy["READY"] == "1/1").all() and (deploy["UP-TO-DATE"] == 1).all()
    assert (deploy["AVAILABLE"] == 1).all()


def test_a_role_without_its_worker_is_not_ready(client: Client) -> None:
    deploy = jc.deployments_table(client, {"pipeline-stage-9": "no-such-worker"}).set_index("NAME")

    assert deploy.loc["pipeline-stage-9", "READY"] == "0/1"
    assert deploy.loc["pipeline-stage-9", "UP-TO-DATE"] == 0
    with pytest.raises(ConfigError, match="roles"):
        jc.deployments_table(client, {})


def test_hardware_and_storage_are_read_from_every_worker(view: jc.ClusterView, names: list[str]) -> None:
    hardware = view.hardware

    assert list(hardware["name"]) == names
    assert (hardware["kind"] == "emulated").all()
    assert hardware["emulates"].iloc[0] == "pi3b: 4x 1.2 GHz, 1024 MB, 100 Mbit/s"
    assert (hardware["cpu_count"] >= 1).all() and hardware["machine"].astype(bool).all()
    assert view.storage[["reads_client", "client_reads"]].all(axis=None)
    assert not list(Path(view.data_dir).glob(".edgelab-shared-*"))


@pytest.mark.parametrize(
    ("protocol", "host", "scope"),
    [
        ("tcp", "127.0.0.1", "loopback"),
        ("tcp", "::1", "loopback"),
        ("tcp", "localhost", "loopback"),
        ("inproc", "192.0.2.2", "in-process"),
        ("tcp", "10.0.0.7", "private network"),
        ("tcp", "164.125.234.84", "public"),
    ],
)
def test_address_scope(protocol: str, host: str, scope: str) -> None:
    assert jc.address_scope(protocol, host, own=set()) == scope


# ------------------------------------------------------------------ rendering


def test_paper_listing_is_the_listing_as_printed(references: dict[str, pd.DataFrame]) -> None:
    listing = jc.paper_listing(references["jeon/fig4"])

    assert list(listing.columns) == ["NAME", "STATUS", "ROLES", "AGE"]
    assert list(listing["NAME"]) == ["commendcenter", "scv1"]
    assert list(listing["AGE"]) == ["77d", "77d"]


def test_a_good_cluster_renders_every_item(
    view: jc.ClusterView, references: dict[str, pd.DataFrame], tmp_path: Path
) -> None:
    # Execute
    items = _render(view, tmp_path, references)

    # Assert: files, statuses and the mapping caption; listings of the cluster the run configured are structural
    assert {i: it.status for i, it in items.items()} == {
        "jeon/fig2": "consistent",  # C1 holds; C3/C4 hold by construction on one host, so no run here decides them
        "jeon/fig4": "consistent",
        "jeon/fig5": "consistent",
        "jeon/fig6": "consistent",
        "jeon/fig10": "not judged",
    }
    for item_id in ("jeon/fig2", "jeon/fig4", "jeon/fig5", "jeon/fig6"):
        assert {c.basis for c in items[item_id].verdict.checks} == {Basis.CONFIGURED}
        assert items[item_id].verdict.evidence == [] and items[item_id].verdict.choices
    undecided = {c.name: c.undecided for c in items["jeon/fig2"].verdict.checks if c.passed is None}
    assert undecided == {"C4 environment": "qualitative", "C3 storage": "qualitative"}
    assert "by construction" in items["jeon/fig2"].why
    assert items["jeon/fig10"].verdict.reason_class == "qualitative"
    assert "photo cannot be regenerated" in items["jeon/fig10"].why
    for item in items.values():
        assert item.clock == jc.CLOCK and item.data_source == {"kind": "live cluster"}
        assert all(Path(f).is_file() and Path(f).parent == tmp_path / "jeon" for f in item.files)
    assert sorted(Path(f).suffix for f in items["jeon/fig2"].files) == [".md", ".png"]
    for item_id in ("jeon/fig4", "jeon/fig5", "jeon/fig6"):
        md = (tmp_path / f"{item_id}.md").read_text()
        assert jc.MAPPING in md and "Paper (Kubernetes" in md
        assert set(pd.read_csv(tmp_path / f"{item_id}.csv")["source"].str.split().str[0]) == {"edgelab", "paper"}
    assert "pi@commendcenter:~$ kubectl get nodes" in (tmp_path / "jeon/fig4.md").read_text()


def test_a_broken_cluster_differs(view: jc.ClusterView, references: dict[str, pd.DataFrame], tmp_path: Path) -> None:
    # Prepare: a worker stopped, its deployment down, an endpoint that did not answer on a public address
    nodes = view.nodes.copy()
    nodes.loc[2, ["STATUS", "status"]] = ["NotReady", "closing"]
    deploy = view.deployments.copy()
    deploy.loc[2, ["READY", "UP-TO-DATE", "AVAILABLE"]] = ["0/1", 0, 0]
    services = view.services.copy()
    services.loc[1, ["answered", "rtt_ms", "scope"]] = [False, math.nan, "public"]
    bad = replace(view, nodes=nodes, deployments=deploy, services=services)

    # Execute
    items = _render(bad, tmp_path, references)

    # Assert
    assert {i: items[i].status for i in ("jeon/fig4", "jeon/fig5", "jeon/fig6")} == dict.fromkeys(
        ("jeon/fig4", "jeon/fig5", "jeon/fig6"), "differs"
    )
    assert "ready [structural]: 2/3 Ready" in items["jeon/fig4"].why
    assert "silent: " in items["jeon/fig6"].why and "(public)" in items["jeon/fig6"].why
    assert "not: pipeline-stage-2" in items["jeon/fig5"].why


def test_too_few_workers_for_the_papers_five_differs(view: jc.ClusterView) -> None:
    verdict = jc.judge_nodes(view.nodes, expected_workers=5)

    assert verdict.status == "differs"
    assert "1 scheduler + 2 workers" in verdict.why


def test_environment_is_judged_across_separate_hosts(view: jc.ClusterView) -> None:
    # Prepare: the same view as if every node were its own machine, then one with another numpy
    env = view.environment.assign(hostname=[f"pi-{i}" for i in range(len(view.environment))])
    apart = replace(view, environment=env)
    stale = env.copy()
    stale.loc[3, "numpy"] = "1.19.5"
    stale["all_equal"] = False

    # Execute
    same, differ = (jc.judge_topology(v, expected_workers=2) for v in (apart, replace(view, environment=stale)))

    # Assert
    assert same.status == "consistent"
    assert [c.passed for c in same.checks] == [True, True, True]  # hostnames apart: C3 and C4 decided
    assert differ.status == "differs" and "numpy" in differ.why


def test_the_fault_run_judges_c2_on_fig5(view: jc.ClusterView) -> None:
    # Prepare: one stage's device killed mid-stream and back, as the fault run records it
    fault = {
        "kills": [{"device": "pi4b-3", "phase": "stream", "at": 3}],
        "recoveries": [{"device": "pi4b-3", "phase": "stream", "resumed": True, "back_s": 4.2}],
        "replayed_micro_batches": [3, 4],
        "host_wall_s": 10.0,
        "outputs_equal_undisturbed": True,
    }

    # Execute
    good = jc.judge_deployments(view.deployments, fault=fault)
    wrong = jc.judge_deployments(view.deployments, fault={**fault, "outputs_equal_undisturbed": False})
    lost = jc.judge_deployments(view.deployments, fault={**fault, "recoveries": []})

    # Assert: the restart is structural; the recovered outputs are correctness, and wrong when they differ
    bases = {c.name: c.basis for c in good.checks}
    assert good.status == "consistent" and bases["C2 restart"] is Basis.CONFIGURED
    assert bases["recovered outputs equal the undisturbed run's"] is Basis.CORRECTNESS
    assert "pi4b-3 back after 4.2 s; 2 micro-batch(es) streamed again" in good.why
    assert wrong.status == "differs" and [c.name for c in wrong.wrong] == [
        "recovered outputs equal the undisturbed run's"
    ]
    assert lost.status == "differs" and not lost.wrong

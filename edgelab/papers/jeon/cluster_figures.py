"""Jeon et al., Figures 2, 4, 5, 6 and 10: the cluster itself, read from a live Dask cluster.

The paper shows ``kubectl`` listings of a Kubernetes cluster of 6 Raspberry Pi
4B (1 master + 5 slaves). Here the same listings are read from a running Dask
cluster through its client, with Kubernetes mapped onto Dask (``MAPPING``, stated
under every rendered table). ``collect`` reads everything once into a
``ClusterView``; ``render_cluster_items`` writes the items from it, so rendering
needs no live cluster. Upper-case columns follow ``kubectl``; lower-case ones are
the raw Dask values behind them. Addresses are only read, and contacted only
through the client (``client.run``); the paper's public 164.125.234.x addresses
are shown as source text and never contacted.

Paper: Jeon, Lee, Lee, Kim and Kim, "Implementation of AIoT Edge Cluster System via
Distributed Deep Learning Pipeline" (catalog: papers/catalog/jeon.md).
"""

from __future__ import annotations

import ipaddress
import math
import textwrap
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from edgelab.cluster.device_cluster import scheduler_workers
from edgelab.common import checks
from edgelab.common.errors import ConfigError
from edgelab.common.results import atomic_write_text
from edgelab.emulation.profiles import PROFILES, DeviceProfile
from edgelab.report.manifest import ReportItem, item_path
from edgelab.report.reference import load_reference
from edgelab.report.style import markdown_table, save_figure, save_table
from edgelab.report.verdict import Basis, Check, Noise, Verdict, decide, holds

if TYPE_CHECKING:
    from distributed import Client
    from matplotlib.figure import Figure

MAPPING = (
    "Kubernetes → Dask: master node ≙ Dask scheduler; 5 slave nodes ≙ 5 device workers; pod RestartPolicy=Always "
    "≙ Dask Nanny auto-restart; SSH (2222) transfers ≙ Dask worker-to-worker transfers (worker comm port); "
    "Jupyter (8888) ≙ the notebook client (dashboard port)."
)
CLOCK = "none (a listing of the live cluster)"
PAPER_NODES = ("commendcenter", "scv1", "scv2", "scv3", "scv4", "scv5")
SCHEDULER_ROLE = "scheduler (≙ control-plane,master)"
# Every package C4 (the same environment on every node) compares.
ENV_PACKAGES = ("python", "tensorflow", "dask", "distributed", "numpy")
_TF_DISTS = ("tensorflow", "tensorflow-cpu", "tensorflow-aarch64", "tensorflow-macos", "tf-nightly")
_NOISE = Noise.none("a listing of the live cluster, read once: states and versions, not timed")
#: The modelling choice behind every cluster item: Kubernetes read as Dask (``MAPPING``).
_CHOICES = [
    "Kubernetes mapped onto Dask (scheduler for the master, device workers for the slaves, the nanny's "
    "restart for RestartPolicy=Always, worker transfers for SSH, the notebook client for Jupyter)"
]
_KUBECTL_NODES = ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
_OK_SCOPES = ("loopback", "in-process", "this host")


@dataclass(frozen=True)
class ClusterView:
    """Everything the cluster items show, read once from a live cluster (see ``collect``)."""

    nodes: pd.DataFrame
    deployments: pd.DataFrame
    services: pd.DataFrame
    hardware: pd.DataFrame
    environment: pd.DataFrame
    storage: pd.DataFrame
    data_dir: str
    collected: str


def kubectl_age(seconds: float) -> str:
    """An age as ``kubectl`` prints it (apimachinery ``HumanDuration``): ``45s``, ``3m10s``, ``120m``, ``3h``, ``77d``.

    Examples
    --------
    >>> kubectl_age(45), kubectl_age(190), kubectl_age(7200), kubectl_age(10800), kubectl_age(77 * 86400)
    ('45s', '3m10s', '120m', '3h', '77d')
    """
    if seconds is None or math.isnan(seconds):
        return "<unknown>"
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    s = max(s, 0)
    return next(form(s) for below, form in _AGES if below is None or s < below)


def _two(big: int, big_unit: str, small: int, small_unit: str) -> str:
    """``3m10s``, or ``3m`` when the smaller unit is zero."""
    return f"{big}{big_unit}{small}{small_unit}" if small else f"{big}{big_unit}"


_MINUTE, _HOUR, _DAY, _YEAR = 60, 3600, 86400, 365 * 86400
# kubectl's HumanDuration (apimachinery duration.go), bound by bound: below each, the format beside it.
_AGES = (
    (2 * _MINUTE, lambda s: f"{s}s"),
    (10 * _MINUTE, lambda s: _two(s // _MINUTE, "m", s % _MINUTE, "s")),
    (3 * _HOUR, lambda s: f"{s // _MINUTE}m"),
    (8 * _HOUR, lambda s: _two(s // _HOUR, "h", s // _MINUTE % 60, "m")),
    (2 * _DAY, lambda s: f"{s // _HOUR}h"),
    (8 * _DAY, lambda s: _two(s // _DAY, "d", s // _HOUR % 24, "h")),
    (2 * _YEAR, lambda s: f"{s // _DAY}d"),
    (8 * _YEAR, lambda s: _two(s // _YEAR, "y", s // _DAY % 365, "d")),
    (None, lambda s: f"{s // _YEAR}y"),
)


# ------------------------------------------------------------ on the nodes ----


def _probe() -> dict[str, Any]:
    """What a node reports about itself (run on workers and the scheduler; imports nothing heavy)."""
    import os
    import platform
    import socket
    import sys
    from importlib.metadata import PackageNotFoundError, version

    def installed(*names: str) -> str:
        for name in names:
            try:
                return version(name)
            except PackageNotFoundError:
                continue
        return "none"

    try:
        model = Path("/proc/device-tree/model").read_bytes().rstrip(b"\0").decode(errors="replace")
    except OSError:
        model = ""
    return {
        "python": platform.python_version(),
        "tensorflow": installed(*_TF_DISTS),
        **{pkg: installed(pkg) for pkg in ("dask", "distributed", "numpy")},
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "hostname": socket.gethostname(),
        "executable": sys.executable,
        "device_model": model,
    }


def _pong() -> float:
    return time.time()


def _scheduler_status(dask_scheduler: Any) -> str:
    return str(dask_scheduler.status.name)


def _read_text(path: str) -> str:
    return Path(path).read_text()


def _write_text(path: str, text: str) -> str:
    Path(path).write_text(text)
    return path


def _workers(client: Client) -> dict[str, dict[str, Any]]:
    """The scheduler's workers by address, in natural order of their names (``pi4b-2`` before ``pi4b-10``)."""
    import re

    workers = scheduler_workers(client)

    def natural(item: tuple[str, dict[str, Any]]) -> list[Any]:
        return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", str(item[1]["name"]))]

    return dict(sorted(workers.items(), key=natural))


def _probes(client: Client) -> dict[str, dict[str, Any]]:
    """``_probe`` of every worker by address (an empty dict for a worker that did not answer)."""
    answers = client.run(_probe, on_error="return")
    return {addr: (a if isinstance(a, dict) else {}) for addr, a in answers.items()}


def _joined(client: Client, address: str) -> float:
    """When the worker at ``address`` last joined the scheduler (its ``add-worker`` event); nan when unknown."""
    times = [t for t, msg in client.get_events(address) if isinstance(msg, dict) and msg.get("action") == "add-worker"]
    return times[-1] if times else math.nan


def _ping(client: Client, address: str | None, *, nanny: bool = False) -> float:
    """Round trip of a no-op through the client to one node, in ms; nan when it did not answer."""
    start = time.perf_counter()
    try:
        if address is None:
            client.run_on_scheduler(_pong)
        else:
            answer = client.run(_pong, workers=[address], nanny=nanny, on_error="return")
            if len(answer) != 1 or isinstance(next(iter(answer.values())), BaseException):
                return math.nan
    except Exception:  # a node that fails to answer is what the ping records
        return math.nan
    return (time.perf_counter() - start) * 1e3


# ------------------------------------------------------------------ tables ----


def nodes_table(client: Client, *, roles: dict[str, str] | None = None) -> pd.DataFrame:
    """``kubectl get nodes`` of the Dask cluster (jeon/fig4): the scheduler, then one row per worker.

    Parameters
    ----------
    client
        Client of the live cluster.
    roles
        Role name -> worker name (e.g. ``{"stage 1": "pi4b-0"}``); a worker's ROLES lists its roles, else ``<none>``.

    Returns
    -------
    pandas.DataFrame
        NAME, STATUS, ROLES, AGE, VERSION, then the raw values: kind, address, status, started (epoch s),
        nthreads, memory_limit, distributed, tensorflow.

    Notes
    -----
    A worker's AGE runs from when it last joined the scheduler (its ``add-worker`` event): a worker the nanny
    restarted joins again, as a re-created pod's age starts again.
    """
    if roles is not None and not isinstance(roles, dict):
        raise ConfigError("roles", roles, "None or a dict of role name -> worker name")
    now = time.time()
    info = client.sync(client.scheduler.identity, n_workers=-1)  # not the client's racy cached copy
    sched = client.run_on_scheduler(_probe)
    status = client.run_on_scheduler(_scheduler_status)
    rows = [_node_row("scheduler", str(info["address"]), status, info["started"], now, SCHEDULER_ROLE, sched)]
    rows[0].update(NAME="scheduler", nthreads=None, memory_limit=None)
    probes = _probes(client)
    for addr, w in _workers(client).items():
        name = str(w["name"])
        mine = sorted(r for r, n in (roles or {}).items() if n == name)
        row = _node_row("worker", addr, w["status"], _joined(client, addr), now, ",".join(mine), probes.get(addr, {}))
        rows.append(row | {"NAME": name, "nthreads": w["nthreads"], "memory_limit": w["memory_limit"]})
    return pd.DataFrame(rows)[[*_KUBECTL_NODES, *[c for c in rows[0] if c not in _KUBECTL_NODES]]]


def _node_row(
    kind: str, addr: str, status: str, started: float, now: float, role: str, probe: dict[str, Any]
) -> dict[str, Any]:
    dist, tf = probe.get("distributed", "?"), probe.get("tensorflow", "?")
    return {
        "STATUS": "Ready" if status == "running" else "NotReady",
        "ROLES": role or "<none>",
        "AGE": kubectl_age(now - started),
        "VERSION": f"distributed {dist}, tensorflow {tf}",
        "kind": kind,
        "address": addr,
        "status": status,
        "started": started,
        "distributed": dist,
        "tensorflow": tf,
    }


def node_mapping(nodes: pd.DataFrame) -> pd.DataFrame:
    """The paper's node names beside the Dask names, in order (devices are never renamed)."""
    names = list(nodes["NAME"])
    paper = list(PAPER_NODES) + ["—"] * max(0, len(names) - len(PAPER_NODES))
    kinds = ["master (control-plane)"] + ["slave"] * (len(PAPER_NODES) - 1)
    return pd.DataFrame(
        {
            "paper": paper[: len(names)],
            "kubernetes role": (kinds + ["—"] * len(names))[: len(names)],
            "dask": names,
            "dask role": list(nodes["kind"]),
        }
    )


def deployments_table(client: Client, roles: dict[str, str]) -> pd.DataFrame:
    """``kubectl get deployments`` of the Dask cluster (jeon/fig5): the coordinator, then one row per role.

    Parameters
    ----------
    client
        Client of the live cluster.
    roles
        Role name -> worker name, e.g. ``{"pipeline-stage-1": "pi4b-0"}``; each role wants one running worker.

    Returns
    -------
    pandas.DataFrame
        NAME, READY (running/desired), UP-TO-DATE (1 when the node's package versions equal the client's),
        AVAILABLE, AGE, then WORKER and ``differs`` (the packages that differ from the client's).
    """
    if not isinstance(roles, dict) or not roles:
        raise ConfigError("roles", roles, "a non-empty dict of role name -> worker name")
    nodes = nodes_table(client, roles=roles).set_index("NAME")
    versions = client.get_versions(packages=list(_TF_DISTS))
    mine = versions["client"]["packages"]
    by_name = {str(w["name"]): a for a, w in _workers(client).items()}

    def row(name: str, node: str, packages: dict[str, Any] | None) -> dict[str, Any]:
        running = int(node in nodes.index and nodes.loc[node, "status"] == "running")
        differs = _differs(mine, packages)
        return {
            "NAME": name,
            "READY": f"{running}/1",
            "UP-TO-DATE": int(running and not differs),
            "AVAILABLE": running,
            "AGE": nodes.loc[node, "AGE"] if node in nodes.index else "<unknown>",
            "WORKER": node,
            "differs": differs,
        }

    rows = [row("coordinator (client + scheduler)", "scheduler", versions["scheduler"]["packages"])]
    for role, worker in roles.items():
        packages = versions["workers"].get(by_name.get(worker, ""), {}).get("packages")
        rows.append(row(role, worker, packages))
    return pd.DataFrame(rows)


def _differs(mine: dict[str, Any], theirs: dict[str, Any] | None) -> str:
    if theirs is None:
        return "no versions reported"
    keys = sorted(set(mine) | set(theirs))
    return ", ".join(f"{k} {theirs.get(k)} vs {mine.get(k)}" for k in keys if theirs.get(k) != mine.get(k))


def services_table(client: Client) -> pd.DataFrame:
    """``kubectl get services`` of the Dask cluster (jeon/fig6), with a measured ping of every endpoint.

    Parameters
    ----------
    client
        Client of the live cluster; every endpoint is pinged through it (``client.run``), never directly.

    Returns
    -------
    pandas.DataFrame
        NAME, TYPE, ADDRESS, PORT(S), then host, protocol, comm_port (≙ SSH 2222), dashboard_port (≙ Jupyter
        8888), nanny, scope, loopback, answered, rtt_ms, nanny_answered, nanny_rtt_ms.
    """
    own = _own_addresses()
    info = client.sync(client.scheduler.identity, n_workers=-1)  # not the client's racy cached copy
    endpoints = [("scheduler", "scheduler", str(info["address"]), info.get("services", {}), None)]
    endpoints += [
        (str(w["name"]), "worker", a, w.get("services", {}), w.get("nanny")) for a, w in _workers(client).items()
    ]
    rows = []
    for name, kind, addr, services, nanny in endpoints:
        protocol, host, port = _split_address(addr)
        dashboard = services.get("dashboard")
        stands = "≙ master API" if kind == "scheduler" else "≙ SSH 2222"
        ports = [f"{port}/{protocol} (comm {stands})" if port else f"{protocol} (comm {stands})"]
        ports += [f"{dashboard}/http (dashboard ≙ Jupyter 8888)"] if dashboard else []
        rtt = _ping(client, None if kind == "scheduler" else addr)
        nanny_rtt = _ping(client, addr, nanny=True) if nanny else math.nan
        scope = address_scope(protocol, host, own)
        rows.append(
            {
                "NAME": name,
                "TYPE": kind,
                "ADDRESS": addr,
                "PORT(S)": ", ".join(ports),
                "host": host,
                "protocol": protocol,
                "comm_port": port,
                "dashboard_port": dashboard,
                "nanny": nanny or "",
                "scope": scope,
                "loopback": scope == "loopback",
                "answered": not math.isnan(rtt),
                "rtt_ms": rtt,
                "nanny_answered": (not math.isnan(nanny_rtt)) if nanny else None,
                "nanny_rtt_ms": nanny_rtt,
            }
        )
    return pd.DataFrame(rows)


def _split_address(address: str) -> tuple[str, str, int | None]:
    """``(protocol, host, port)`` of a Dask address; in-process addresses have no port."""
    from distributed.comm.addressing import parse_address, parse_host_port

    protocol, location = parse_address(address)
    if protocol == "inproc":
        return protocol, location.split("/")[0], None
    host, port = parse_host_port(location)
    return protocol, host, int(port)


def _own_addresses() -> set[str]:
    """Addresses of this host's own interfaces, and its name (the sandbox a local cluster runs in)."""
    import socket

    import psutil

    return {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs} | {socket.gethostname()}


def address_scope(protocol: str, host: str, own: set[str]) -> str:
    """``in-process``, ``loopback``, ``this host``, ``private network``, ``public`` or ``unresolved name``."""
    if protocol == "inproc":
        return "in-process"
    if host == "localhost":
        return "loopback"
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return "this host" if host in own else "unresolved name"
    if ip.is_loopback:
        return "loopback"
    if str(ip) in own:
        return "this host"
    return "private network" if ip.is_private else "public"


def hardware_table(
    client: Client,
    *,
    profile_name: str,
    emulated: bool,
    speed_factor: float | None,
    link_mbps: float,
    memory_mb: int,
) -> pd.DataFrame:
    """The hardware each worker reports (jeon/fig10, the stand-in for the paper's photo of its Pi cluster).

    Parameters
    ----------
    client
        Client of the live cluster.
    profile_name
        Device profile the workers emulate (``pi4b``), or the one an attached cluster runs (``native``).
    emulated
        Whether the workers emulate a device on this host (``False``: real devices).
    speed_factor
        Device seconds per host CPU second, when emulated and calibrated.
    link_mbps, memory_mb
        The emulated device's link and memory.

    Returns
    -------
    pandas.DataFrame
        One row per worker: name, kind (emulated/real), emulates, speed_factor, link_mbps, machine, cpu_count,
        nthreads, memory_limit, hostname, device_model (``/proc/device-tree/model``, "" when unreadable).
    """
    checks.number("link_mbps", link_mbps, above=0, unit="Mbit/s")
    checks.integer("memory_mb", memory_mb, at_least=1)
    checks.number("speed_factor", speed_factor, above=0, none="not emulated or not calibrated")
    profile = PROFILES.get(profile_name)
    cpu = f"{profile.cores}x {profile.clock_ghz:g} GHz, " if profile and profile.clock_ghz else ""
    emulates = f"{profile_name}: {cpu}{memory_mb} MB, {link_mbps:g} Mbit/s" if emulated else ""
    probes = _probes(client)
    rows = []
    for addr, w in _workers(client).items():
        probe = probes.get(addr, {})
        rows.append(
            {
                "name": str(w["name"]),
                "kind": "emulated" if emulated else "real",
                "emulates": emulates,
                "speed_factor": speed_factor,
                "link_mbps": link_mbps,
                **{k: probe.get(k) for k in ("machine", "cpu_count")},
                "nthreads": w["nthreads"],
                "memory_limit": w["memory_limit"],
                "hostname": probe.get("hostname"),
                "device_model": probe.get("device_model", ""),
            }
        )
    return pd.DataFrame(rows)


def environment_check(client: Client) -> pd.DataFrame:
    """Claim C4 (Docker gives every node the same environment): every node's versions, and whether all are equal.

    Parameters
    ----------
    client
        Client of the live cluster.

    Returns
    -------
    pandas.DataFrame
        One row for the client, the scheduler and each worker: node, python, tensorflow, dask, distributed, numpy,
        hostname, executable, and ``all_equal`` (the same in every row: whether every node reports the same
        versions of ``ENV_PACKAGES``).
    """
    rows = [{"node": "client", **_probe()}, {"node": "scheduler", **client.run_on_scheduler(_probe)}]
    probes = _probes(client)
    rows += [{"node": str(w["name"]), **probes.get(a, {})} for a, w in _workers(client).items()]
    frame = pd.DataFrame(rows).reindex(columns=["node", *ENV_PACKAGES, "hostname", "executable"])
    return frame.assign(all_equal=bool(len(frame.drop_duplicates(list(ENV_PACKAGES))) == 1))


def storage_check(client: Client, data_dir: str | Path) -> pd.DataFrame:
    """Claim C3 (node and pod share ``/mnt/data`` ↔ ``/home/data``): client and workers read each other's files.

    Parameters
    ----------
    client
        Client of the live cluster.
    data_dir
        The directory every worker should share with the client; two small files per worker are written and removed.

    Returns
    -------
    pandas.DataFrame
        One row per worker: name, ``reads_client`` (the worker read the client's file), ``client_reads`` (the
        client read the worker's file).
    """
    folder = Path(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    mine = folder / f".edgelab-shared-{token}"
    mine.write_text(token)
    rows = []
    try:
        for addr, w in _workers(client).items():
            theirs = folder / f".edgelab-shared-{token}-{len(rows)}"
            read = client.run(_read_text, str(mine), workers=[addr], on_error="return").get(addr)
            client.run(_write_text, str(theirs), token, workers=[addr], on_error="return")
            back = theirs.read_text() if theirs.is_file() else ""
            theirs.unlink(missing_ok=True)
            rows.append({"name": str(w["name"]), "reads_client": read == token, "client_reads": back == token})
    finally:
        mine.unlink(missing_ok=True)
    return pd.DataFrame(rows, columns=["name", "reads_client", "client_reads"])


def collect(
    client: Client,
    *,
    roles: dict[str, str],
    data_dir: str | Path,
    profile: DeviceProfile,
    emulated: bool,
    speed_factor: float | None = None,
) -> ClusterView:
    """Read every table of the cluster items once, so they can be rendered without the cluster.

    Parameters
    ----------
    client
        Client of the live cluster.
    roles
        Role name -> worker name (pipeline stages; see ``deployments_table``).
    data_dir
        The data directory shared by the client and every worker (≙ ``/mnt/data`` ↔ ``/home/data``).
    profile, emulated, speed_factor
        The device profile the workers emulate, whether they do, and the calibrated speed factor.

    Returns
    -------
    ClusterView
        The frames of every cluster item and when they were read.
    """
    return ClusterView(
        nodes=nodes_table(client, roles=roles),
        deployments=deployments_table(client, roles),
        services=services_table(client),
        hardware=hardware_table(
            client,
            profile_name=profile.name,
            emulated=emulated,
            speed_factor=speed_factor,
            link_mbps=profile.link_mbps,
            memory_mb=profile.memory_mb,
        ),
        environment=environment_check(client),
        storage=storage_check(client, data_dir),
        data_dir=str(data_dir),
        collected=datetime.now(UTC).isoformat(timespec="seconds"),
    )


# ---------------------------------------------------------------- verdicts ----


def judge_nodes(nodes: pd.DataFrame, *, expected_workers: int) -> Verdict:
    """jeon/fig4 on claim C1: one scheduler and ``expected_workers`` workers, every node Ready.

    Structural (``CONFIGURED``): the cluster listed is the one the run
    started, so its nodes being there and Ready confirms the build, no
    prediction.
    """
    return decide(_c1(nodes, expected_workers), fitted=[], predicted=[], noise=_NOISE, choices=_CHOICES)


def _c1(nodes: pd.DataFrame, expected_workers: int) -> list[Check]:
    n_sched, n_work = int((nodes["kind"] == "scheduler").sum()), int((nodes["kind"] == "worker").sum())
    ready = nodes["STATUS"] == "Ready"
    late = ", ".join(f"{n} ({s})" for n, s in zip(nodes["NAME"][~ready], nodes["status"][~ready], strict=True))
    return [
        holds(
            "nodes",
            n_sched == 1 and n_work == expected_workers,
            f"{n_sched} scheduler + {n_work} workers",
            f"C1: 1 scheduler (≙ master) + {expected_workers} workers (≙ slaves)",
            basis=Basis.CONFIGURED,
        ),
        holds(
            "ready",
            bool(ready.all()),
            f"{int(ready.sum())}/{len(nodes)} Ready" + (f"; not ready: {late}" if late else ""),
            "C1: every node Ready (status running)",
            basis=Basis.CONFIGURED,
        ),
    ]


def judge_deployments(deployments: pd.DataFrame, *, fault: Mapping[str, Any] | None = None) -> Verdict:
    """jeon/fig5: every role (and the coordinator) 1/1 ready and up to date; with a fault run, claim C2.

    Structural (``CONFIGURED``): the roles are the ones the run placed, on
    workers it started from one installation, and the restart that C2's
    ``RestartPolicy=Always`` stands for is the nanny's the run configured.
    That the stream recovered from the kill with the undisturbed run's
    outputs is correctness: a failure there is a wrong result.

    Parameters
    ----------
    deployments
        ``deployments_table`` of the cluster.
    fault
        The fault run (``JeonSummary.fault``: kills, recoveries, replayed micro-batches and whether the
        outputs equal the undisturbed run's); None or empty when none ran.
    """
    ready = deployments["READY"] == "1/1"
    current = deployments["UP-TO-DATE"] == 1
    stale = "; ".join(f"{n}: {d or 'not running'}" for n, d in deployments.loc[~current, ["NAME", "differs"]].values)
    checks = [
        holds(
            "ready",
            bool(ready.all()),
            f"{int(ready.sum())}/{len(ready)} ready"
            + (f"; not: {', '.join(deployments['NAME'][~ready])}" if not ready.all() else ""),
            "every deployment 1/1 (its worker running), as the paper's six",
            basis=Basis.CONFIGURED,
        ),
        holds(
            "up-to-date",
            bool(current.all()),
            f"{int(current.sum())}/{len(current)} up to date" + (f"; {stale}" if stale else ""),
            "every node's package versions equal the client's",
            basis=Basis.CONFIGURED,
        ),
        *(_restart_checks(fault) if fault else []),
    ]
    return decide(checks, fitted=[], predicted=[], noise=_NOISE, choices=_CHOICES)


def _replayed(fault: Mapping[str, Any]) -> int:
    """How many micro-batches the recovery streamed again (the run records their indices)."""
    return len(fault.get("replayed_micro_batches") or [])


def _fault_line(fault: Mapping[str, Any] | None) -> str:
    """The fault run in one sentence, for jeon/fig5's page (C2)."""
    if not fault:
        return " No fault run was asked for (C2 not tried)."
    kills = ", ".join(f"{k.get('device')} before micro-batch {k.get('at')}" for k in fault.get("kills", []))
    return (
        f" Fault run (C2, RestartPolicy=Always ≙ the nanny's restart): killed {kills or 'nothing'}; "
        f"{_replayed(fault)} micro-batch(es) streamed again; host wall "
        f"{fault.get('host_wall_s', float('nan')):.1f} s."
    )


def _restart_checks(fault: Mapping[str, Any]) -> list[Check]:
    """C2 on the fault run: the killed stage's device ran again, and the stream's outputs are the undisturbed ones."""
    kills, recoveries = list(fault.get("kills", [])), list(fault.get("recoveries", []))
    resumed = [r for r in recoveries if r.get("phase") == "stream" and r.get("resumed")]
    back = ", ".join(f"{r['device']} back after {r['back_s']:.1f} s" for r in resumed)
    return [
        holds(
            "C2 restart",
            bool(kills) and bool(resumed),
            f"{len(kills)} device(s) killed mid-stream; {back or 'none back'}; "
            f"{_replayed(fault)} micro-batch(es) streamed again",
            "RestartPolicy=Always (≙ the nanny's restart): a killed stage's device runs again and the stream ends",
            basis=Basis.CONFIGURED,
        ),
        holds(
            "recovered outputs equal the undisturbed run's",
            bool(fault.get("outputs_equal_undisturbed")),
            f"outputs after the recovery equal the undisturbed pipeline's: {fault.get('outputs_equal_undisturbed')}",
            "a recovered stream computes the same predictions, bit for bit",
            basis=Basis.CORRECTNESS,
        ),
    ]


def judge_services(services: pd.DataFrame) -> Verdict:
    """jeon/fig6: every endpoint (and nanny) answered a ping, and every address is loopback or this host's own.

    Structural (``CONFIGURED``): the endpoints are the ones the run opened;
    their round trips are shown, not judged (the paper gives none).
    """
    # A worker without a nanny has nothing more to answer.
    nanny = services["nanny_answered"].map(lambda v: True if v is None or pd.isna(v) else bool(v))
    answered = services["answered"].astype(bool) & nanny
    silent = ", ".join(services["NAME"][~answered])
    rtt = services["rtt_ms"].dropna()
    timing = f"; round trip median {rtt.median():.1f} ms, max {rtt.max():.1f} ms" if len(rtt) else ""
    scoped = services["scope"].isin(_OK_SCOPES)
    outside = ", ".join(f"{n} ({s})" for n, s in services.loc[~scoped, ["NAME", "scope"]].values)
    checks = [
        holds(
            "answered",
            bool(answered.all()),
            f"{int(answered.sum())}/{len(answered)} endpoints answered"
            + (f"; silent: {silent}" if silent else "")
            + timing,
            "every endpoint answers a client.run ping (the paper: every node's ports reachable)",
            basis=Basis.CONFIGURED,
        ),
        holds(
            "addresses",
            bool(scoped.all()),
            f"{int(scoped.sum())}/{len(scoped)} loopback, in-process or this host"
            + (f"; not: {outside}" if outside else ""),
            "every address loopback, in-process or this host's own (the paper's public ones are never contacted)",
            basis=Basis.CONFIGURED,
        ),
    ]
    return decide(checks, fitted=[], predicted=[], noise=_NOISE, choices=_CHOICES)


def judge_topology(view: ClusterView, *, expected_workers: int) -> Verdict:
    """jeon/fig2 on its claims: the layout (C1), shared storage (C3), the same environment on every node (C4).

    All structural (``CONFIGURED``). On one host running one interpreter, C3
    and C4 hold by construction and no run here can decide them
    ("qualitative"): only separate machines can show what Docker gave the
    paper. A difference found is a difference all the same.
    """
    env, store = view.environment, view.storage
    one_install = env["hostname"].nunique() == 1 and env["executable"].nunique() == 1
    one_host = env["hostname"].nunique() == 1
    equal = bool(env["all_equal"].all()) if len(env) else False
    differ = ", ".join(f"{p}: {sorted(map(str, env[p].unique()))}" for p in ENV_PACKAGES if env[p].nunique() > 1)
    both = store[["reads_client", "client_reads"]].all(axis=1)
    shared = bool(len(store) and both.all())
    by_construction = "holds by construction: every node runs the same interpreter on one host"
    env_undecided = equal and one_install
    store_undecided = shared and one_host
    checks = [
        # The layout is C1's node count; readiness is fig4's.
        *_c1(view.nodes, expected_workers)[:1],
        holds(
            "C4 environment",
            None if env_undecided else equal,
            f"{len(env)} nodes (client, scheduler, workers), " + (f"differ in {differ}" if differ else "same versions"),
            "Python, TensorFlow, dask, distributed, numpy equal on every node",
            basis=Basis.CONFIGURED,
            note=by_construction if env_undecided else "",
            undecided="qualitative" if env_undecided else "",
        ),
        holds(
            "C3 storage",
            None if store_undecided else shared,
            f"{int(both.sum())}/{len(store)} workers share {view.data_dir}",
            "a file written by the client is read by each worker, and back",
            basis=Basis.CONFIGURED,
            note="holds by construction: one host, one file system" if store_undecided else "",
            undecided="qualitative" if store_undecided else "",
        ),
    ]
    return decide(checks, fitted=[], predicted=[], noise=_NOISE, choices=_CHOICES)


def _not_judged(reason: str) -> Verdict:
    return decide([], fitted=[], predicted=[], noise=_NOISE, reason=reason, reason_class="qualitative")


# --------------------------------------------------------------- rendering ----

_TITLES = {
    "jeon/fig2": "The structure of the AIoT edge cluster, drawn from the live Dask cluster",
    "jeon/fig4": "Node connection status (`kubectl get nodes`)",
    "jeon/fig5": "Deployments (`kubectl get deployments`)",
    "jeon/fig6": "Services (`kubectl get services`)",
    "jeon/fig10": "The cluster's hardware (stand-in for the paper's photo of its Raspberry Pi cluster)",
}
# The paper's Figure 2 as its text describes it (l.65, 72); the image itself has no numbers.
_FIG2_PAPER = (
    "Paper (l.65, 72): 6 Raspberry Pi 4B, 1 master + 5 slaves, each running Docker containers (python3.7, "
    "tensorflow2.4) managed by Kubernetes; Jupyter Notebook (HTTP, 8888) and SSH (2222) served through an L4 load "
    "balancer, several ports per container; each container's /home/data mounted on the Pi's /mnt/data."
)


def paper_listing(reference: pd.DataFrame) -> pd.DataFrame:
    """The paper's listing as printed, from its tidy reference rows (``id,row,column,value,unit``).

    One row per ``row`` (in the paper's order) under NAME, one column per ``column``; each cell is its value
    followed by its unit (``77`` + ``d`` -> ``77d``). The ``listing`` row (the shell prompt) is left out.
    """
    ref = reference[reference["row"] != "listing"]
    cells = {
        (r, c): f"{_plain(v)}{'' if pd.isna(u) else u}" for r, c, v, u in ref[["row", "column", "value", "unit"]].values
    }
    rows, cols = list(dict.fromkeys(ref["row"])), list(dict.fromkeys(ref["column"]))
    return pd.DataFrame([{"NAME": r, **{c: cells.get((r, c), "") for c in cols}} for r in rows])


def _plain(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def topology_figure(nodes: pd.DataFrame, services: pd.DataFrame, *, title: str, data_dir: str) -> Figure:
    """jeon/fig2 drawn from the live cluster: notebook client, scheduler, workers and their shared data directory.

    Parameters
    ----------
    nodes
        ``nodes_table`` of the cluster (names, addresses, nthreads, memory limits).
    services
        ``services_table`` of the cluster (dashboard ports, round trips).
    title
        Title of the figure.
    data_dir
        The directory every worker shares (≙ ``/mnt/data`` ↔ ``/home/data``).

    Returns
    -------
    matplotlib.figure.Figure
        Boxes and lines, no graph layout library.
    """
    import matplotlib.pyplot as plt
    from dask.utils import format_bytes

    paper = dict(zip(node_mapping(nodes)["dask"], node_mapping(nodes)["paper"], strict=True))
    workers = nodes[nodes["kind"] == "worker"]
    sched = nodes[nodes["kind"] == "scheduler"].iloc[0]
    svc = services.set_index("NAME")
    width = 3.0 * max(len(workers), 3)
    fig, ax = plt.subplots(figsize=(max(8.0, 2.4 * len(workers)), 6.0))
    ax.set(xlim=(0, width), ylim=(0, 10))
    ax.axis("off")
    box = {"ha": "center", "va": "center", "fontsize": 8, "zorder": 3}

    def draw(x: float, y: float, text: str, color: str) -> None:
        ax.text(x, y, text, bbox={"boxstyle": "round,pad=0.5", "fc": color, "ec": "0.3"}, **box)

    mid = width / 2
    port = svc.loc["scheduler", "dashboard_port"] if "scheduler" in svc.index else None
    draw(mid, 9.2, f"notebook client (≙ Jupyter 8888)\ndashboard :{_plain(port)}", "#fde9c9")
    draw(
        mid,
        6.6,
        f"scheduler (≙ master {paper.get(sched['NAME'], '')})\n{sched['address']}\nup {sched['AGE']}",
        "#cfe2f3",
    )
    ax.plot([mid, mid], [9.2, 6.6], color="0.4", zorder=1)
    xs = [width * (i + 0.5) / len(workers) for i in range(len(workers))]
    for x, (_, w) in zip(xs, workers.iterrows(), strict=True):
        rtt = svc.loc[w["NAME"], "rtt_ms"] if w["NAME"] in svc.index else math.nan
        label = (
            f"{w['NAME']} (≙ slave {paper.get(w['NAME'], '—')})\n{w['address']}\n"
            f"{int(w['nthreads'])} thread(s), {format_bytes(int(w['memory_limit']))}\n{w['STATUS']}"
        )
        draw(x, 3.6, label, "#d9ead3" if w["STATUS"] == "Ready" else "#f4cccc")
        ax.plot([mid, x], [6.6, 3.6], color="0.4", zorder=1)
        ping = "no answer" if math.isnan(rtt) else f"ping {rtt:.1f} ms"
        ax.text((mid + x) / 2, 5.1, ping, fontsize=7, ha="center", bbox={"fc": "white", "ec": "none", "pad": 1})
        ax.plot([x, mid], [3.6, 0.8], color="0.5", linestyle=":", zorder=1)
    if len(xs) > 1:
        ax.plot(xs, [2.4] * len(xs), color="tab:blue", linestyle="--", zorder=1)
        label = {"fontsize": 7, "ha": "center", "color": "tab:blue", "bbox": {"fc": "white", "ec": "none", "pad": 1}}
        ax.text(mid, 2.6, "worker-to-worker transfers (≙ SSH 2222)", **label)
    draw(mid, 0.8, f"shared data directory (≙ /mnt/data ↔ /home/data)\n{data_dir}", "#eeeeee")
    ax.set_title(title, fontsize=10)
    fig.text(0.5, 0.0, textwrap.fill(MAPPING, 150), ha="center", va="top", fontsize=7, color="0.3")
    return fig


def render_cluster_items(
    view: ClusterView,
    *,
    root: Path | None,
    notebook: str,
    parameters: dict[str, Any],
    data_source: dict[str, Any],
    expected_workers: int = 5,
    references: Mapping[str, pd.DataFrame] | None = None,
    fault: Mapping[str, Any] | None = None,
) -> list[ReportItem]:
    """Write jeon/fig2, fig4, fig5, fig6 and fig10 from a collected view, each with its verdict.

    Parameters
    ----------
    view
        The cluster as ``collect`` read it.
    root
        Reports folder (``reports/`` when None); items go to ``<root>/jeon/<item>.<ext>``.
    notebook, parameters, data_source
        Recorded in every item as given.
    expected_workers
        Workers claim C1 wants (the paper's 5 slaves).
    references
        The paper's tidy rows by item id (``jeon/fig4`` ...); missing ones are read with ``load_reference``, and an
        item whose rows are not transcribed yet is rendered without them.
    fault
        The fault run (``JeonSummary.fault``), judged on jeon/fig5 (claim C2) and recorded as its recoveries.

    Returns
    -------
    list of ReportItem
        One per item, for ``edgelab.report.manifest.update_manifest``.
    """
    checks.integer("expected_workers", expected_workers, at_least=1)
    common = {"data_source": data_source, "clock": CLOCK, "notebook": notebook, "parameters": parameters}
    live = f"Live Dask cluster, read {view.collected}:"
    mapping = markdown_table(node_mapping(view.nodes))
    nodes = view.nodes[[*_KUBECTL_NODES, "address"]]
    deploy = view.deployments
    services = view.services[["NAME", "TYPE", "ADDRESS", "PORT(S)", "nanny", "scope", "answered"]].assign(
        rtt_ms=view.services["rtt_ms"].round(2)
    )
    tables = {
        "jeon/fig4": (
            judge_nodes(view.nodes, expected_workers=expected_workers),
            nodes,
            view.nodes,
            f"Names:\n\n{mapping}",
        ),
        "jeon/fig5": (
            judge_deployments(deploy, fault=fault),
            deploy,
            deploy,
            "The paper's unnumbered `tensor-deployment` is read as the coordinator (P9)." + _fault_line(fault),
        ),
        "jeon/fig6": (
            judge_services(view.services),
            services,
            view.services,
            "The paper's addresses are public (164.125.234.x): shown as source text only, never contacted (P10).",
        ),
    }
    items = [_render_topology(view, root, expected_workers, common)]
    for item_id, (verdict, shown, full, note) in tables.items():
        paper = _paper(item_id, references)
        md = [f"# {item_id} — {_TITLES[item_id]}", "", MAPPING, "", live, "", markdown_table(shown), note, ""]
        md += _paper_section(item_id, paper)
        md += [verdict.markdown()]
        rows = [full.assign(source="edgelab (live Dask)")]
        rows += [] if paper is None else [paper_listing(paper).assign(source="paper (Kubernetes, as printed)")]
        files = save_table(pd.concat(rows, ignore_index=True), "\n".join(md), item_id, root=root)
        recoveries = list((fault or {}).get("recoveries", [])) if item_id == "jeon/fig5" else []
        items.append(_item(item_id, files, verdict, paper is not None, {**common, "recoveries": recoveries}))
    hardware = _not_judged(
        "a photo cannot be regenerated: the hardware table read from the live workers stands in for it, and the "
        "photo has no values to compare"
    )
    md = [f"# jeon/fig10 — {_TITLES['jeon/fig10']}", "", MAPPING, "", live, "", markdown_table(view.hardware)]
    md += ["Paper: a photo of 6 Raspberry Pi 4B (l.170); no values.", "", hardware.markdown()]
    files = save_table(view.hardware, "\n".join(md), "jeon/fig10", root=root)
    items.append(_item("jeon/fig10", files, hardware, False, common))
    return items


def _render_topology(view: ClusterView, root: Path | None, expected_workers: int, common: dict[str, Any]) -> ReportItem:
    verdict = judge_topology(view, expected_workers=expected_workers)
    fig = topology_figure(view.nodes, view.services, title=f"jeon/fig2 ({verdict.status})", data_dir=view.data_dir)
    png = save_figure(fig, "jeon/fig2", root=root)
    md = [f"# jeon/fig2 — {_TITLES['jeon/fig2']}", "", MAPPING, "", f"![jeon/fig2]({png.name})", "", _FIG2_PAPER, ""]
    md += [f"Every node's environment (C4), read {view.collected}:", "", markdown_table(view.environment)]
    md += [f"Shared data directory (C3): {view.data_dir}", "", markdown_table(view.storage), verdict.markdown()]
    md_path = item_path("jeon/fig2", "md", root)
    atomic_write_text(md_path, "\n".join(md))
    return _item("jeon/fig2", [png, md_path], verdict, True, common)


def _paper(item_id: str, references: Mapping[str, pd.DataFrame] | None) -> pd.DataFrame | None:
    if references is not None and item_id in references:
        return references[item_id]
    try:
        return load_reference(item_id)
    except ConfigError:
        return None


def _paper_section(item_id: str, paper: pd.DataFrame | None) -> list[str]:
    if paper is None:
        return [f"Paper: its listing is not transcribed yet (data/reference/{item_id}.csv).", ""]
    prompt = paper.loc[paper["row"] == "listing", "value"]
    head = f"`{prompt.iloc[0]}`" if len(prompt) else "as printed"
    return [f"Paper (Kubernetes, {head}):", "", markdown_table(paper_listing(paper))]


def _item(item_id: str, files: list[Path], verdict: Verdict, shown: bool, common: dict[str, Any]) -> ReportItem:
    return ReportItem.from_verdict(item_id, files, verdict, paper_values_shown=shown, **common)

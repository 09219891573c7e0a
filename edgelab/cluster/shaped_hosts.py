"""Several hosts on one machine: a network namespace per device, its link shaped with ``tc``.

``up`` builds, as root, one Linux network namespace per device, each joined
to a bridge by a veth pair whose two ends are rate-limited with a token
bucket (``tc qdisc ... tbf``) at the device profile's link rate, so bytes
between devices cross a real, rate-limited link in both directions. The real
``dask scheduler`` runs on the bridge's address (reachable from this machine
only) and one real ``dask worker`` runs inside each namespace, named and given
resources as the embedded cluster's devices are, so every notebook runs on it
unchanged by passing the scheduler address. ``down`` stops the processes and
removes the namespaces and the bridge; a failed ``up`` does the same before it
raises. What ``up`` made is written to a state file, so ``down`` works from
another process (``edgelab cluster down``).

The scheduler and workers speak TLS only by default, with certificates from
a CA made for the cluster (``edgelab.cluster.tls``): a worker or client without one
of its certificates cannot join. ``ShapedHosts.security()`` is what a client
passes; ``edgelab cluster up`` prints the same as environment variables, so
notebooks connect unchanged. ``tls=False`` (``--no-tls``) opts out, for a
lab bench where every local user may run code on the cluster.

Root only where it is needed. Namespaces, links and queueing disciplines are
made as root; the scheduler, the workers and the relays then run as the
invoking user (``user``; by default whoever ran ``sudo``), and the relay opens
its packet sockets as root and drops to that user before it reads a frame.
Only when root runs ``up`` directly is root the invoking user (and TLS, on by
default, still keeps every other local user out). What ``up`` made is recorded in a state file where only root
can write (``/run/edgelab/shaped-hosts``), and ``down`` trusts a state file
only when root owns it and nobody else can write it, and signals only the
processes it started (their command lines are checked first).

Delay and loss (``delay_ms``, ``loss``: each direction of each device's link)
come from ``tc netem`` where the kernel has it, under the token bucket; where
it does not (this project's build machine), from a userspace relay
(``edgelab.cluster.link_relay``) that joins the device's veth to the bridge through a
second veth pair, holding each frame for the delay and dropping a seeded
fraction of them. ``delay_via`` chooses; ``"auto"`` takes netem when a probe
qdisc can be made.

CPU and memory (``cpus``, ``memory_mb``: each device's, as a board has them)
come from cgroup v1 groups per host (``edgelab.cluster.device_cgroups``): a CFS
quota of ``cpus`` cores and a memory ceiling, made as root before the host's
worker starts and entered by it before it runs, so its nanny, its worker and
all they start are inside. The scheduler and the relays are not devices and
stay outside: a relay's CPU is the link's, not the device's.
"""

from __future__ import annotations

import ipaddress
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edgelab.cluster import device_cgroups
from edgelab.cluster.device_cluster import device_resource, tier_resource, worker_config_environ
from edgelab.cluster.tls import Certificates, make_certificates
from edgelab.common import checks
from edgelab.common.errors import ClusterError, ConfigError
from edgelab.emulation.profiles import get_profile

SCHEDULER_PORT = 8786
STATE_FILE = "shaped-hosts.json"
#: Where the state lives: a folder only root can write (tmpfs, so gone after a reboot with the namespaces).
STATE_DIR = Path("/run/edgelab/shaped-hosts")
_PREFIX = re.compile(r"^[a-z][a-z0-9]{0,5}$")  # interface names are at most 15 bytes: prefix + "h" + index


@dataclass(frozen=True)
class HostsSpec:
    """What to build: ``devices`` hosts of ``profile`` on ``subnet``, links at ``rate_mbit`` (the profile's)."""

    devices: int = 3
    profile: str = "pi3b"
    tier: str = "edge"
    rate_mbit: float | None = None
    subnet: str = "10.213.0.0/24"
    prefix: str = "el"
    worker_memory: str = "2GiB"
    tls: bool = True  # False: plain TCP, for a lab bench where every local user may run code on the cluster
    user: str = ""  # who the processes run as ("": whoever ran sudo, else whoever runs up)
    # A device silent this long (its link cut) is dropped by the scheduler; Dask's default is 5 minutes.
    worker_ttl_s: float = 15.0
    delay_ms: float = 0.0  # one-way delay added to each direction of each device's link
    loss: float = 0.0  # fraction of frames lost in each direction
    delay_via: str = "auto"  # "netem", "relay" (userspace), or "auto": netem where the kernel has it
    seed: int = 0  # seeds the relay's loss draws
    cpus: float | None = None  # each device's CPU, in cores (0.2: a fifth of one); None: no quota
    memory_mb: int | None = None  # each device's memory ceiling in MiB; None: none
    cpu_shares: int | None = None  # each device's cgroup weight against the machine's other work; None: 1024

    def __post_init__(self) -> None:
        checks.integer("devices", self.devices, at_least=1, at_most=200)
        self.limits  # noqa: B018 - raises for limits out of range, before anything is built
        get_profile(self.profile)  # raises for an unknown profile
        if self.rate_mbit is not None and not (isinstance(self.rate_mbit, int | float) and self.rate_mbit > 0):
            raise ConfigError("rate_mbit", self.rate_mbit, "a link rate in Mbit/s > 0 (None: the profile's)")
        if not (isinstance(self.worker_ttl_s, int | float) and self.worker_ttl_s > 0):
            raise ConfigError("worker_ttl_s", self.worker_ttl_s, "seconds > 0")
        if isinstance(self.delay_ms, bool) or not (isinstance(self.delay_ms, int | float) and self.delay_ms >= 0):
            raise ConfigError("delay_ms", self.delay_ms, "a one-way delay in ms >= 0")
        if isinstance(self.loss, bool) or not (isinstance(self.loss, int | float) and 0 <= self.loss < 1):
            raise ConfigError("loss", self.loss, "a fraction of frames lost in [0, 1)")
        if self.delay_via not in ("auto", "netem", "relay"):
            raise ConfigError("delay_via", self.delay_via, "'auto', 'netem' or 'relay'")
        if not isinstance(self.tls, bool):
            raise ConfigError("tls", self.tls, "True or False")
        if not isinstance(self.user, str):
            raise ConfigError("user", self.user, "an account name ('' for whoever ran sudo)")
        if not _PREFIX.match(self.prefix):
            raise ConfigError("prefix", self.prefix, "1-6 lowercase letters and digits, starting with a letter")
        try:
            net = ipaddress.ip_network(self.subnet)
        except ValueError:
            raise ConfigError("subnet", self.subnet, "an IPv4 network such as 10.213.0.0/24") from None
        if not isinstance(net, ipaddress.IPv4Network) or net.num_addresses < self.devices + 3:
            raise ConfigError("subnet", self.subnet, f"an IPv4 network with room for {self.devices + 1} hosts")

    @property
    def rate(self) -> float:
        """Link rate in Mbit/s."""
        return float(self.rate_mbit if self.rate_mbit is not None else get_profile(self.profile).link_mbps)

    def address(self, index: int) -> str:
        """Host ``index``'s address: 0 is the scheduler (the bridge), 1.. the devices."""
        return str(ipaddress.ip_network(self.subnet)[index + 1])

    def device(self, i: int) -> str:
        """Device ``i``'s name, as the embedded cluster names it (``pi3b-0`` ...)."""
        return f"{self.profile}-{i}"

    @property
    def limits(self) -> device_cgroups.DeviceLimits:
        """Each device's CPU and memory limits (``limited`` is False when none is set)."""
        return device_cgroups.DeviceLimits(cpus=self.cpus, memory_mb=self.memory_mb, cpu_shares=self.cpu_shares)

    def host(self, i: int) -> str:
        """Device ``i``'s host: its namespace's name, and its cgroups' (``el-pi3b-0``)."""
        return f"{self.prefix}-{self.device(i)}"

    @property
    def impaired(self) -> bool:
        """Whether the links have delay or loss besides their rate."""
        return self.delay_ms > 0 or self.loss > 0


@dataclass
class ShapedHosts:
    """A running shaped cluster: where its scheduler listens and everything ``down`` must remove."""

    spec: HostsSpec
    scheduler_address: str
    bridge: str
    namespaces: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)
    logs: str = ""
    certificates: str = ""  # the folder of edgelab.cluster.tls's files, when the cluster speaks TLS only
    impairment: str = ""  # how delay and loss are made: "netem", "relay", or "" (none asked for)
    account: str = ""  # the user the processes run as
    work: str = ""  # their home and scratch folder, theirs
    cgroups: dict[str, list[str]] = field(default_factory=dict)  # each limited device's groups

    def security(self) -> Any:
        """What a client of this cluster needs: None for plain TCP, else a TLS ``distributed.Security``."""
        return Certificates(self.certificates).security() if self.certificates else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record (the state file)."""
        return {**asdict(self), "spec": asdict(self.spec)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShapedHosts:
        """The record ``to_dict`` wrote."""
        return cls(**{**data, "spec": HostsSpec(**data["spec"])})


def state_dir() -> Path:
    """Where the state file and the processes' logs go: ``STATE_DIR`` (or ``$EDGELAB_SHAPED_HOSTS_STATE``).

    Either way a folder only root writes: ``up`` and ``down`` refuse any other.
    """
    return Path(os.environ.get("EDGELAB_SHAPED_HOSTS_STATE") or STATE_DIR)


def account(spec: HostsSpec) -> pwd.struct_passwd:
    """The account the cluster's processes run as: ``spec.user``, else whoever ran sudo, else whoever runs this."""
    name = spec.user or os.environ.get("SUDO_USER", "") or pwd.getpwuid(os.geteuid()).pw_name
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise ConfigError("user", name, "an account of this machine") from None


def _check_runnable(user: pwd.struct_passwd) -> None:
    """Raise unless ``user`` can run this environment's Python with Dask and edgelab (a venv under /root cannot)."""
    if user.pw_uid == os.geteuid():
        return
    probe = [_setpriv(), f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]
    # The same interpreter, not just one that starts: a venv whose base Python lives under root's home starts,
    # for another account, with the system's libpython and standard library (seen here: 3.11.2 for 3.11.7).
    probe += [sys.executable, "-c", "import sys, distributed, edgelab; print(sys.version)"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=300, check=False, cwd="/")
    why = (done.stderr.strip().splitlines() or ["no output"])[-1] if done.returncode else ""
    if not why and done.stdout.strip() != sys.version:
        why = f"it starts Python {done.stdout.strip().split()[0]}, not this environment's {sys.version.split()[0]}"
    if why:
        raise ClusterError(
            f"user {user.pw_name!r} cannot run this environment's Python ({sys.executable}: {why}); "
            "pass --user with an account that can, or keep the virtualenv where that account can read it"
        )


def _private_folder(path: Path) -> Path:
    """``path`` made (with its parents) as a folder root owns and only root writes; raises if it is anything else."""
    path.mkdir(parents=True, exist_ok=True, mode=0o755)
    _check_trusted(path)
    return path


def _check_trusted(path: Path) -> None:
    """Raise unless ``path`` is root's, not a link, and nobody else can write it or swap it: what ``down`` believes.

    Its folders up to ``/`` must be root's too, and writable by others only
    with the sticky bit (``/tmp``), which keeps them from renaming it.
    """
    info = path.lstat()
    if path.is_symlink() or info.st_uid != 0 or info.st_mode & 0o022:
        raise ClusterError(
            f"{path} is not trusted: it must be root's own and writable by root only "
            f"(owner uid {info.st_uid}, mode {oct(info.st_mode & 0o777)})"
        )
    for folder in path.resolve().parents:
        above = folder.stat()
        if above.st_uid != 0 or (above.st_mode & 0o022 and not above.st_mode & 0o1000):
            raise ClusterError(f"{path} is not trusted: {folder} is not root's, or others may rename what it holds")


def check_machine() -> None:
    """Raise a ClusterError naming what this machine lacks: root, ``ip`` or ``tc``."""
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise ClusterError(f"shaped hosts need {' and '.join(missing)} (Debian: apt-get install iproute2)")
    if os.geteuid() != 0:
        raise ClusterError("shaped hosts need root: network namespaces, veth links and tc qdiscs are privileged")


def netem_available() -> bool:
    """Whether this kernel has ``tc netem``: a probe qdisc on a veth pair made for it, removed at once."""
    probe = f"elprobe{os.getpid() % 100000}"
    try:
        made = subprocess.run(
            ["ip", "link", "add", probe, "type", "veth", "peer", "name", f"{probe}p"], capture_output=True
        )
        if made.returncode:
            return False
        made = subprocess.run(
            ["tc", "qdisc", "add", "dev", probe, "root", "netem", "delay", "1ms"], capture_output=True
        )
        return made.returncode == 0
    finally:
        subprocess.run(["ip", "link", "del", probe], capture_output=True)


def _impairment(spec: HostsSpec) -> str:
    """How this machine will delay and drop frames for ``spec``; raises when the asked-for way is missing."""
    if not spec.impaired:
        return ""
    if spec.delay_via in ("auto", "netem") and netem_available():
        return "netem"
    if spec.delay_via == "netem":
        raise ClusterError("delay_via='netem' but this kernel has no tc netem (sch_netem); use 'relay' or 'auto'")
    if shutil.which("ethtool") is None:
        raise ClusterError(
            "link delay or loss without netem needs ethtool, to turn off the offloads the relay cannot copy "
            "(Debian: apt-get install ethtool)"
        )
    return "relay"


def up(spec: HostsSpec, *, folder: Path | None = None, timeout_s: float = 120.0) -> ShapedHosts:
    """Build the hosts, start the scheduler and a worker per device; return once every worker has joined."""
    check_machine()
    if spec.limits.limited:
        device_cgroups.check_machine(spec.limits)
    user = account(spec)
    _check_runnable(user)
    folder = _private_folder(folder or state_dir())
    state_path = folder / STATE_FILE
    if state_path.exists():
        raise ClusterError(f"a shaped cluster is already up (state in {state_path}); run `edgelab cluster down` first")
    net = ipaddress.ip_network(spec.subnet)
    protocol = "tls" if spec.tls else "tcp"
    hosts = ShapedHosts(
        spec,
        f"{protocol}://{spec.address(0)}:{SCHEDULER_PORT}",
        f"{spec.prefix}br0",
        logs=str(_private_folder(folder / "logs")),
        account=user.pw_name,
        work=str(_users_folder(folder / "work", user)),
    )
    hosts.impairment = _impairment(spec)
    if spec.tls:
        addresses = [spec.address(i) for i in range(spec.devices + 1)]
        # The user's: its processes read their keys, and so does its client.
        hosts.certificates = make_certificates(_users_folder(folder / "tls", user), addresses).folder
        for path in Path(hosts.certificates).iterdir():
            os.chown(path, user.pw_uid, user.pw_gid)
    try:
        _ip("link", "add", hosts.bridge, "type", "bridge")
        hosts.links.append(hosts.bridge)  # only what this call made is ever removed
        _ip("addr", "add", f"{spec.address(0)}/{net.prefixlen}", "dev", hosts.bridge)
        _ip("link", "set", hosts.bridge, "up")
        _write_state(state_path, hosts)  # from here on, `down` can undo whatever follows
        for i in range(spec.devices):
            _add_host(spec, hosts, i, net.prefixlen)
            if spec.limits.limited:
                hosts.cgroups[spec.device(i)] = device_cgroups.make(spec.host(i), spec.limits)
            _write_state(state_path, hosts)
        ttl = {"DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": f"{spec.worker_ttl_s}s"}
        hosts.pids["scheduler"] = _spawn(hosts, "scheduler", None, _scheduler_command(spec, hosts), ttl)
        for i in range(spec.devices):
            ns, name = hosts.namespaces[i], spec.device(i)
            groups = hosts.cgroups.get(name, [])
            hosts.pids[name] = _spawn(hosts, name, ns, _worker_command(spec, hosts, i), groups=groups)
        _write_state(state_path, hosts)
        _wait_for_workers(hosts, timeout_s)
    except BaseException:
        _teardown(hosts)
        state_path.unlink(missing_ok=True)
        raise
    return hosts


def down(*, folder: Path | None = None) -> ShapedHosts | None:
    """Stop the processes and remove the namespaces, links and bridge of the cluster ``up`` recorded."""
    check_machine()
    state_path = (folder or state_dir()) / STATE_FILE
    if not state_path.exists():
        return None
    _check_trusted(state_path.parent)
    _check_trusted(state_path)
    hosts = ShapedHosts.from_dict(json.loads(state_path.read_text()))
    _check_names(hosts)
    left = _teardown(hosts)
    if left:  # the state stays, so that `down` can try again
        raise ClusterError(f"the cgroups {', '.join(left)} would not go (processes still in them); run down again")
    state_path.unlink()
    return hosts


def _check_names(hosts: ShapedHosts) -> None:
    """Raise unless every namespace and link the state names is one ``up`` would have made for its prefix."""
    prefix = hosts.spec.prefix
    allowed = re.compile(rf"{re.escape(prefix)}(br0|[hrnb]\d+|-[a-z0-9]+-\d+)")
    strange = [n for n in [*hosts.namespaces, *hosts.links, hosts.bridge] if not allowed.fullmatch(n)]
    strange += device_cgroups.check_recorded([g for groups in hosts.cgroups.values() for g in groups], prefix)
    if strange:
        raise ClusterError(f"the state names {', '.join(strange)}, which `up` never makes for prefix {prefix!r}")


def status(*, folder: Path | None = None) -> ShapedHosts | None:
    """The running cluster's record, or None when none is up."""
    state_path = (folder or state_dir()) / STATE_FILE
    return ShapedHosts.from_dict(json.loads(state_path.read_text())) if state_path.exists() else None


def device_of(hosts: ShapedHosts, address: str) -> str:
    """The device whose host has the IP of worker ``address`` (``tcp://10.213.0.3:40000`` -> ``pi3b-1``)."""
    host = address.split("://")[-1].rsplit(":", 1)[0]
    for i in range(hosts.spec.devices):
        if hosts.spec.address(i + 1) == host:
            return hosts.spec.device(i)
    raise ConfigError("address", address, f"a worker address on {hosts.spec.subnet}")


def set_link(hosts: ShapedHosts, device: str, *, up: bool = True, rate_mbit: float | None = None) -> None:
    """Cut (``up=False``) or restore ``device``'s link, and set its rate (None: the spec's) in both directions."""
    names = [hosts.spec.device(i) for i in range(hosts.spec.devices)]
    if device not in names:
        raise ConfigError("device", device, f"one of {', '.join(names)}")
    if rate_mbit is not None and not rate_mbit > 0:
        raise ConfigError("rate_mbit", rate_mbit, "a link rate in Mbit/s > 0 (None: the spec's)")
    i = names.index(device)
    ns, outside, inside = hosts.namespaces[i], f"{hosts.spec.prefix}h{i}", f"{hosts.spec.prefix}n{i}"
    rate = rate_mbit if rate_mbit is not None else hosts.spec.rate
    where_tbf = ["parent", "1:1", "handle", "10:"] if hosts.impairment == "netem" else ["root"]
    for where, dev in (([], outside), (["-n", ns], inside)):
        _run(["tc", *where, "qdisc", "change", "dev", dev, *where_tbf, "tbf", *_tbf(rate)])
    _ip("link", "set", outside, "up" if up else "down")


def leftovers(prefix: str) -> list[str]:
    """Namespaces, links and cgroups of ``prefix`` that exist on this machine now (empty after a clean ``down``)."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout.split("\n")
    found = [n.split()[0] for n in names if n.startswith(f"{prefix}-")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    found += [m for m in re.findall(r"^\d+: ([^:@]+)", links, re.M) if re.fullmatch(rf"{prefix}(br0|h\d+|r\d+)", m)]
    return found + device_cgroups.leftovers(prefix)


# ------------------------------------------------------------- internals ----


def _add_host(spec: HostsSpec, hosts: ShapedHosts, i: int, prefixlen: int) -> None:
    """Namespace ``<prefix>-<device>`` with a veth pair to the bridge, both ends shaped to the link rate.

    With the relay, the outside end is joined to the bridge through the relay
    and a second veth pair (``<prefix>r<i>`` -> ``<prefix>b<i>``) instead.
    """
    ns, outside, inside = spec.host(i), f"{spec.prefix}h{i}", f"{spec.prefix}n{i}"
    _ip("netns", "add", ns)
    hosts.namespaces.append(ns)
    _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
    hosts.links.append(outside)
    _ip("link", "set", inside, "netns", ns)
    if hosts.impairment == "relay":
        relay_end, bridge_end = f"{spec.prefix}r{i}", f"{spec.prefix}b{i}"
        _ip("link", "add", relay_end, "type", "veth", "peer", "name", bridge_end)
        hosts.links.append(relay_end)
        _ip("link", "set", bridge_end, "master", hosts.bridge)
        for dev in (outside, relay_end, bridge_end):
            _ip("link", "set", dev, "up")
            _offloads_off([], dev)
        for dev in (outside, relay_end):
            _no_arp_replies(dev)
        _offloads_off(["ip", "netns", "exec", ns], inside)
    else:
        _ip("link", "set", outside, "master", hosts.bridge)
        _ip("link", "set", outside, "up")
    _ip("-n", ns, "addr", "add", f"{spec.address(i + 1)}/{prefixlen}", "dev", inside)
    _ip("-n", ns, "link", "set", inside, "up")
    _ip("-n", ns, "link", "set", "lo", "up")
    # Both directions: the outside end's egress is what enters the device, the inside end's what leaves it.
    for where, dev in (([], outside), (["-n", ns], inside)):
        if hosts.impairment == "netem":
            netem = ["delay", f"{spec.delay_ms}ms", "loss", f"{100 * spec.loss}%"]
            _run(["tc", *where, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", *netem])
            _run(["tc", *where, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "tbf", *_tbf(spec.rate)])
        else:
            _run(["tc", *where, "qdisc", "add", "dev", dev, "root", "tbf", *_tbf(spec.rate)])
    if hosts.impairment == "relay":
        relay = [sys.executable, "-m", "edgelab.cluster.link_relay", outside, f"{spec.prefix}r{i}"]
        relay += ["--delay-ms", str(spec.delay_ms), "--loss", str(spec.loss), "--seed", str(spec.seed + i)]
        user = pwd.getpwnam(hosts.account)
        if user.pw_uid != 0:  # its packet sockets need root; it drops to the user before the first frame
            relay += ["--user", f"{user.pw_uid}:{user.pw_gid}"]
        hosts.pids[f"relay-{spec.device(i)}"] = _spawn(hosts, f"relay-{spec.device(i)}", None, relay, as_root=True)


def _no_arp_replies(dev: str) -> None:
    """Stop the root namespace answering ARP on ``dev``, an end of the relay's wire that is no bridge port.

    By default Linux answers a request for any of its addresses on any
    interface: a device asking for the scheduler (the bridge's address) got
    the outside end's own MAC at once, before the bridge's answer came through
    the relay, and from then on sent straight to this namespace past the
    relay, half the delay and loss gone (measured: 42 ms round trips for 80).
    """
    Path(f"/proc/sys/net/ipv4/conf/{dev}/arp_ignore").write_text("8\n")  # 8: reply to no request


def _offloads_off(prefix: list[str], dev: str) -> None:
    """No segmentation or checksum offload on ``dev``: the relay copies frames as the wire would carry them."""
    _run([*prefix, "ethtool", "-K", dev, "tx", "off", "tso", "off", "gso", "off", "gro", "off"])


def _tbf(rate_mbit: float) -> list[str]:
    """Token-bucket arguments: the rate, a bucket of 1 ms of it (at least two full frames), 50 ms of queue.

    A small bucket keeps a short transfer from crossing at line speed: with
    10 ms of bucket, a LeNet-MLP round's 0.9 MB crossed 20% faster than the rate
    allows. tbf splits segmentation-offloaded packets larger than the bucket.
    """
    rate_bytes = rate_mbit * 1e6 / 8
    burst = max(3028, int(rate_bytes / 1000))
    return ["rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "50ms"]


def _scheduler_command(spec: HostsSpec, hosts: ShapedHosts) -> list[str]:
    return [
        _dask(),
        "scheduler",
        "--host",
        spec.address(0),
        "--port",
        str(SCHEDULER_PORT),
        "--dashboard-address",
        f"{spec.address(0)}:8787",
        *_tls_arguments(hosts, "scheduler"),
    ]


def _tls_arguments(hosts: ShapedHosts, role: str) -> list[str]:
    if not hosts.certificates:
        return []
    return ["--protocol", "tls", *Certificates(hosts.certificates).dask_arguments(role)]


def _worker_command(spec: HostsSpec, hosts: ShapedHosts, i: int) -> list[str]:
    name = spec.device(i)
    resources = f"{device_resource(name)}=1,{tier_resource(spec.tier)}=1"
    return [
        _dask(),
        "worker",
        hosts.scheduler_address,
        "--local-directory",
        str(Path(hosts.work) / name),
        "--name",
        name,
        "--host",
        spec.address(i + 1),
        "--nthreads",
        "1",
        "--memory-limit",
        spec.worker_memory,
        "--resources",
        resources,
        "--no-dashboard",
        *_tls_arguments(hosts, "worker"),
    ]


def _dask() -> str:
    """The ``dask`` program of this interpreter's environment."""
    beside = Path(sys.executable).parent / "dask"
    found = str(beside) if beside.exists() else shutil.which("dask")
    if not found:
        raise ClusterError("the `dask` program is not installed in this environment (pip install distributed)")
    return found


def _worker_environment(hosts: ShapedHosts) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "TF_ENABLE_ONEDNN_OPTS": "1"})
    # The nanny leaves MALLOC_TRIM_THRESHOLD_ unset, as the embedded cluster does (cluster/README.md).
    env["DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON"] = "{'MALLOC_TRIM_THRESHOLD_': None}"
    # And the embedded devices' Dask settings, which also keep an idle worker's own CPU low: with Dask's
    # defaults an idle worker and its nanny used 0.04 of a core here, a fifth of a 0.2-core limited host's.
    env.update(worker_config_environ())
    # The user's own home and scratch (Keras writes to its home; Dask and TensorFlow to the temporary folder).
    work = Path(hosts.work)
    env.update({"HOME": str(work), "KERAS_HOME": str(work / "keras"), "TMPDIR": str(work)})
    env.pop("SUDO_COMMAND", None)
    return env


def _spawn(
    hosts: ShapedHosts,
    name: str,
    namespace: str | None,
    command: list[str],
    extra_env: dict[str, str] | None = None,
    *,
    as_root: bool = False,
    groups: list[str] | None = None,
) -> int:
    """Start ``command`` (inside ``namespace``) as the cluster's user, in its own process group.

    Its output goes to ``<logs>/<name>.log``. ``ip netns exec`` needs root, so
    the drop to the user is ``setpriv``'s, inside the namespace; ``as_root``
    (the relay, which drops by itself) skips it. With ``groups`` (cgroup
    folders) the process enters them first, while still root, and everything
    it becomes and starts stays inside.
    """
    user = pwd.getpwnam(hosts.account)
    drop = [_setpriv(), f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]
    if as_root or user.pw_uid == os.geteuid():
        drop = []
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    with open(Path(hosts.logs) / f"{name}.log", "ab") as log:
        process = subprocess.Popen(
            device_cgroups.enter_command(groups or [], [*prefix, *drop, *command]),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**_worker_environment(hosts), **(extra_env or {})},
            cwd=hosts.work,
            start_new_session=True,
        )
    return process.pid


def _setpriv() -> str:
    """util-linux's ``setpriv``, which runs a command as another user."""
    found = shutil.which("setpriv")
    if not found:
        raise ClusterError("shaped hosts run their processes as a user with setpriv (apt-get install util-linux)")
    return found


def _users_folder(path: Path, user: pwd.struct_passwd) -> Path:
    """``path`` as a folder ``user`` owns and only it can open (made afresh: never one left by someone else)."""
    if path.is_symlink() or path.exists():
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    path.mkdir(mode=0o700)
    os.chown(path, user.pw_uid, user.pw_gid)
    return path


def _wait_for_workers(hosts: ShapedHosts, timeout_s: float) -> None:
    from distributed import Client

    deadline = time.monotonic() + timeout_s
    joined: set[str] = set()  # the devices' names the scheduler last listed
    while True:
        _check_alive(hosts)
        try:
            with Client(hosts.scheduler_address, timeout=5, security=hosts.security()) as client:
                while len(joined) < hosts.spec.devices:
                    _check_alive(hosts)
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{len(joined)} of {hosts.spec.devices} workers joined")
                    joined = {w["name"] for w in client.scheduler_info()["workers"].values()}
                    time.sleep(0.1)
                # A worker registers before its nanny has finished starting; killed in that gap, the
                # nanny takes it for a failed start and exits instead of restarting it.
                while not all(status == "running" for status in client.run(_nanny_status, nanny=True).values()):
                    if time.monotonic() > deadline:
                        raise TimeoutError("the workers' nannies did not finish starting")
                    time.sleep(0.05)
                return
        except (OSError, TimeoutError) as exc:
            if time.monotonic() > deadline:
                # The logs folder goes with the caller's state folder: what the missing devices said is kept here.
                missing = [
                    hosts.spec.device(i) for i in range(hosts.spec.devices) if hosts.spec.device(i) not in joined
                ]
                said = "; ".join(_log_tail(hosts, name) for name in [*missing, *(f"relay-{m}" for m in missing)])
                raise ClusterError(
                    f"the shaped cluster did not come up within {timeout_s:.0f} s ({exc}); "
                    f"not joined: {', '.join(missing) or 'none'}; {said}; logs in {hosts.logs}"
                ) from exc
            time.sleep(0.5)


def _check_alive(hosts: ShapedHosts) -> None:
    for name, pid in hosts.pids.items():
        if not _alive(pid):
            raise ClusterError(f"{name} exited while starting; {_log_tail(hosts, name)}")


def _log_tail(hosts: ShapedHosts, name: str, lines: int = 6) -> str:
    """The last ``lines`` lines of process ``name``'s log, joined on one line for an error message."""
    log = Path(hosts.logs) / f"{name}.log"
    if not log.exists():
        return f"{name} wrote no log"
    tail = log.read_text(errors="replace").strip().splitlines()[-lines:]
    return f"{name}'s log {log} ends: {' | '.join(tail)}"


def _nanny_status(dask_worker: Any) -> str:
    # Run on a nanny (client.run(..., nanny=True)), where ``dask_worker`` is the Nanny itself.
    return str(dask_worker.status.name)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs; our own child that has exited is reaped here (a zombie is not alive)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:  # not our child (``down`` from another process): ask the kernel
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _teardown(hosts: ShapedHosts) -> list[str]:
    """Stop every process group (TERM, then KILL), then remove cgroups, namespaces, links and the bridge.

    Workers go first, then the scheduler, then the relays, so each goodbye
    still has a link to cross. Returns the cgroups that would not go.
    """
    stages = [
        [pid for name, pid in hosts.pids.items() if name != "scheduler" and not name.startswith("relay-")],
        [pid for name, pid in hosts.pids.items() if name == "scheduler"],
        [pid for name, pid in hosts.pids.items() if name.startswith("relay-")],
    ]
    # Only processes this cluster started: a pid the state names but that now runs something else is left alone.
    stages = [[pid for pid in pids if _started_here(pid)] for pids in stages]
    for pids in stages:
        for pid in pids:
            _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in pids:
            _signal_group(pid, signal.SIGKILL)
    left = [g for groups in hosts.cgroups.values() for g in device_cgroups.remove(groups)]
    for ns in hosts.namespaces:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
    for link in hosts.links:
        subprocess.run(["ip", "link", "del", link], capture_output=True, check=False)
    for made in (hosts.certificates, hosts.work):  # keys and scratch of a cluster that is gone
        if made and not Path(made).is_symlink():
            shutil.rmtree(made, ignore_errors=True)
    return left


def _started_here(pid: int) -> bool:
    """Whether ``pid`` runs a program ``up`` starts (a Dask scheduler or worker, or the link relay)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(part.endswith(b"/dask") or part == b"edgelab.cluster.link_relay" for part in command)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _write_state(path: Path, hosts: ShapedHosts) -> None:
    from edgelab.common.results import atomic_write_text

    atomic_write_text(path, json.dumps(hosts.to_dict(), indent=1))


def _ip(*args: str) -> None:
    _run(["ip", *args])


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ClusterError(f"`{' '.join(command)}` failed: {done.stderr.strip() or done.stdout.strip()}")

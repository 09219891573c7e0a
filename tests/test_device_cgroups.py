"""Limited hosts: each shaped host's processes in cgroup v1 groups with a CPU quota and a memory ceiling.

The set-up and teardown logic runs against a temporary folder standing for
``/sys/fs/cgroup``; the tests marked ``integration`` make real groups and real
hosts, and need root with the v1 ``cpu`` and ``memory`` hierarchies.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgelab import cli
from edgelab.cluster import device_cgroups as dc
from edgelab.cluster import shaped_hosts as sh
from edgelab.common.errors import ClusterError, ConfigError

PREFIX = "elc"  # the names the unit tests below make in their own fake cgroup trees
# What the live tests make (real cgroups, shaped hosts): this run's own, neither the default "el" nor another test
# run's, so a user's cluster and a second test run at once on this machine are left alone.
_RUN = os.getpid() % 250
LIVE = f"ec{_RUN:02x}"
SUBNET = f"10.217.{_RUN}.0/24"
REAL = Path("/sys/fs/cgroup")

needs_cgroups = pytest.mark.skipif(
    os.geteuid() != 0 or not all((REAL / c / "cgroup.procs").exists() for c in dc.LIMITING),
    reason="limited hosts need root and the cgroup v1 cpu and memory hierarchies",
)
needs_hosts = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"),
    reason="shaped hosts need root and iproute2 (ip, tc)",
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A folder laid out as v1 hierarchies are mounted: one folder per controller, each with its ``cgroup.procs``."""
    for controller in ("cpu", "memory", "cpuacct"):
        (tmp_path / controller).mkdir()
        (tmp_path / controller / "cgroup.procs").write_text("")
    return tmp_path


@pytest.fixture
def proc(tmp_path: Path) -> str:
    """A ``/proc/self/cgroup`` of a process in the root cpu group and a nested memory group."""
    path = tmp_path / "self-cgroup"
    path.write_text("4:memory:/session/7\n2:cpuacct:/\n1:cpu:/\n0::/\n")
    return str(path)


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        (
            dc.DeviceLimits(cpus=0.2),
            {"cpu": {"cpu.cfs_period_us": "10000", "cpu.cfs_quota_us": "2000"}},
        ),
        (  # below a tenth of a core the period grows, so the quota stays at the kernel's least 1 ms
            dc.DeviceLimits(cpus=0.04),
            {"cpu": {"cpu.cfs_period_us": "25000", "cpu.cfs_quota_us": "1000"}},
        ),
        (
            dc.DeviceLimits(cpus=1.5, cpu_shares=8192),
            {"cpu": {"cpu.cfs_period_us": "10000", "cpu.cfs_quota_us": "15000", "cpu.shares": "8192"}},
        ),
        (
            dc.DeviceLimits(memory_mb=900),
            {"memory": {"memory.limit_in_bytes": "943718400", "memory.memsw.limit_in_bytes": "943718400"}},
        ),
        (dc.DeviceLimits(), {}),
    ],
)
def test_each_limit_is_written_to_its_controllers_file(limits: dc.DeviceLimits, expected: dict) -> None:
    assert limits.settings() == expected
    assert limits.limited == bool(expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cpus": 0}, r"cpus=0 is not allowed: a number of cores \(this host has \d+\) >= 0.01"),
        ({"cpus": -0.5}, r"cpus=-0.5 is not allowed"),
        ({"cpus": 1000.0}, r"cpus=1000.0 is not allowed: .* <= \d+"),
        ({"cpus": True}, r"cpus=True is not allowed"),
        ({"memory_mb": 0}, r"memory_mb=0 is not allowed: an integer from 16 to"),
        ({"memory_mb": 512.5}, r"memory_mb=512.5 is not allowed"),
        ({"memory_mb": 1 << 40}, r"memory_mb=\d+ is not allowed"),
        ({"cpu_shares": 1}, r"cpu_shares=1 is not allowed: an integer from 2 to 262144"),
    ],
)
def test_limits_out_of_range_are_refused_naming_the_parameter_before_anything_is_built(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        dc.DeviceLimits(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message):
        sh.HostsSpec(**kwargs)  # type: ignore[arg-type]


def test_the_cluster_command_refuses_a_quota_above_the_hosts_cores(capsys: pytest.CaptureFixture[str]) -> None:
    # Execute: no root needed, the spec is refused before `up` looks at the machine
    code = cli.main(["cluster", "up", "--devices", "2", "--cpus", str((os.cpu_count() or 1) + 1)])

    # Assert
    assert code == 1
    assert "edgelab cluster up: cpus=" in capsys.readouterr().err


def test_own_group_is_read_per_controller(proc: str) -> None:
    assert dc.own_group("memory", proc=proc) == "/session/7"
    assert dc.own_group("cpu", proc=proc) == "/"
    assert dc.own_group("pids", proc=proc) == "/"  # not listed: the root


def test_groups_are_made_under_the_makers_own_group_with_the_limits_written(root: Path, proc: str) -> None:
    # Prepare: this kernel accounts swap (the root group has the memory-plus-swap file)
    (root / "memory" / "memory.memsw.limit_in_bytes").write_text("9223372036854771712\n")
    memory_group = root / "memory" / "session" / "7" / "edgelab" / "elc-pi3b-0"

    # Execute
    made = dc.make("elc-pi3b-0", dc.DeviceLimits(cpus=0.2, memory_mb=900, cpu_shares=4096), root=root, proc=proc)

    # Assert: cpu in the root group's edgelab folder, memory under the nested one, cpuacct only counting
    cpu = root / "cpu" / "edgelab" / "elc-pi3b-0"
    assert made == [str(cpu), str(memory_group), str(root / "cpuacct" / "edgelab" / "elc-pi3b-0")]
    assert (cpu / "cpu.cfs_quota_us").read_text() == "2000\n"
    assert (cpu / "cpu.cfs_period_us").read_text() == "10000\n"
    assert (cpu / "cpu.shares").read_text() == "4096\n"
    assert (memory_group / "memory.limit_in_bytes").read_text() == f"{900 * 2**20}\n"
    assert (memory_group / "memory.memsw.limit_in_bytes").read_text() == f"{900 * 2**20}\n"
    assert sorted(p.name for p in (root / "cpuacct" / "edgelab" / "elc-pi3b-0").iterdir()) == []


def test_without_swap_accounting_the_memory_limit_alone_is_the_ceiling(root: Path, proc: str) -> None:
    made = dc.make("elc-pi3b-1", dc.DeviceLimits(memory_mb=64), root=root, proc=proc)
    memory = Path(made[0])
    assert sorted(p.name for p in memory.iterdir()) == ["memory.limit_in_bytes"]
    assert [Path(m).parts[len(root.parts)] for m in made] == ["memory", "cpuacct"]


def test_where_cpu_and_cpuacct_share_a_hierarchy_one_group_serves_both(tmp_path: Path, proc: str) -> None:
    # Prepare: the layout most distributions mount, cpu and cpuacct links to one "cpu,cpuacct" hierarchy
    shared = tmp_path / "cpu,cpuacct"
    shared.mkdir()
    (shared / "cgroup.procs").write_text("")
    (tmp_path / "cpu").symlink_to(shared)
    (tmp_path / "cpuacct").symlink_to(shared)

    # Execute
    made = dc.make("elc-pi3b-0", dc.DeviceLimits(cpus=0.5), root=tmp_path, proc=proc)

    # Assert
    assert made == [str(tmp_path / "cpu" / "edgelab" / "elc-pi3b-0")]
    assert (shared / "edgelab" / "elc-pi3b-0" / "cpu.cfs_quota_us").read_text() == "5000\n"


def test_a_group_still_holding_processes_is_refused_and_nothing_made_is_left(root: Path, proc: str) -> None:
    # Prepare: another cluster's memory group of the same name, with a process in it
    busy = root / "memory" / "session" / "7" / "edgelab" / "elc-pi3b-0"
    busy.mkdir(parents=True)
    (busy / "cgroup.procs").write_text("4242\n")

    # Execute
    with pytest.raises(ClusterError, match="holds processes of another cluster"):
        dc.make("elc-pi3b-0", dc.DeviceLimits(cpus=0.2, memory_mb=900), root=root, proc=proc)

    # Assert: the cpu group made before it is gone, the other cluster's kept
    assert not (root / "cpu" / "edgelab").exists()
    assert (busy / "cgroup.procs").read_text() == "4242\n"


def test_remove_takes_the_groups_and_the_edgelab_folder_once_empty(root: Path, proc: str) -> None:
    first = dc.make("elc-pi3b-0", dc.DeviceLimits(cpus=0.2), root=root, proc=proc)
    second = dc.make("elc-pi3b-1", dc.DeviceLimits(cpus=0.2), root=root, proc=proc)
    assert dc.leftovers(PREFIX, root=root, proc=proc) == sorted([first[0], second[0]]) + sorted([first[1], second[1]])

    assert dc.remove(first) == []
    assert all(not Path(g).exists() for g in first)
    assert (root / "cpu" / "edgelab").is_dir()  # the other host's group is still in it
    assert dc.remove(second) == []
    assert not (root / "cpu" / "edgelab").exists() and not (root / "cpuacct" / "edgelab").exists()
    assert dc.leftovers(PREFIX, root=root, proc=proc) == []
    assert dc.remove(second) == []  # twice: nothing to do


def test_the_edgelab_folder_weighs_what_its_groups_weigh_so_each_competes_as_if_alone(root: Path, proc: str) -> None:
    # Prepare: two hosts of weight 4096 and one of the kernel's default
    folder = root / "cpu" / "edgelab"
    first = dc.make("elc-pi3b-0", dc.DeviceLimits(cpus=0.2, cpu_shares=4096), root=root, proc=proc)
    dc.make("elc-pi3b-1", dc.DeviceLimits(cpus=0.2, cpu_shares=4096), root=root, proc=proc)
    dc.make("elc-pi3b-2", dc.DeviceLimits(cpus=0.2), root=root, proc=proc)

    # Assert: the folder's weight is theirs together, and follows them out
    assert (folder / "cpu.shares").read_text() == f"{4096 + 4096 + 1024}\n"
    dc.remove(first)
    assert (folder / "cpu.shares").read_text() == f"{4096 + 1024}\n"


@pytest.mark.parametrize(
    ("group", "strange"),
    [
        ("/sys/fs/cgroup/cpu/edgelab/elc-pi3b-0", False),
        ("/sys/fs/cgroup/memory/process_api/abc/edgelab/elc-pi3b-10", False),
        ("/sys/fs/cgroup/cpu/edgelab/el-pi3b-0", True),  # another prefix's
        ("/sys/fs/cgroup/cpu/elc-pi3b-0", True),  # not in an edgelab folder
        ("/sys/fs/cgroup/cpu/edgelab/../../elc-pi3b-0", True),
        ("/home/user/edgelab/elc-pi3b-0", True),  # not a cgroup
        ("cpu/edgelab/elc-pi3b-0", True),
    ],
)
def test_a_state_file_naming_groups_make_never_makes_is_not_trusted(group: str, strange: bool) -> None:
    assert dc.check_recorded([group], PREFIX) == ([group] if strange else [])


def test_down_refuses_a_state_whose_groups_are_not_the_clusters() -> None:
    spec = sh.HostsSpec(devices=1, prefix=PREFIX, cpus=0.2)
    hosts = sh.ShapedHosts(spec, "tls://10.213.0.1:8786", f"{PREFIX}br0", cgroups={"pi3b-0": ["/etc"]})
    with pytest.raises(ClusterError, match="the state names /etc"):
        sh._check_names(hosts)


def test_the_shell_wrapper_puts_the_process_it_becomes_into_every_group(tmp_path: Path) -> None:
    # Prepare: plain files stand for the groups' cgroup.procs
    groups = [tmp_path / "cpu", tmp_path / "memory"]
    for g in groups:
        g.mkdir()

    # Execute: the command prints its own pid
    command = dc.enter_command([str(g) for g in groups], [sys.executable, "-c", "import os; print(os.getpid())"])
    done = subprocess.run(command, capture_output=True, text=True, check=True)

    # Assert: the pid written is the command's own (exec, no child), and arguments pass through intact
    pid = done.stdout.strip()
    assert [(g / "cgroup.procs").read_text().strip() for g in groups] == [pid, pid]
    echoed = subprocess.run(dc.enter_command([str(groups[0])], ["echo", "--", "a b"]), capture_output=True, text=True)
    assert echoed.stdout == "-- a b\n"
    assert dc.enter_command([], ["dask", "worker"]) == ["dask", "worker"]


def test_a_group_that_cannot_be_entered_stops_the_command(tmp_path: Path) -> None:
    command = dc.enter_command([str(tmp_path / "missing")], ["touch", str(tmp_path / "ran")])
    assert subprocess.run(command, capture_output=True, check=False).returncode == 125
    assert not (tmp_path / "ran").exists()


def test_workers_enter_their_groups_and_the_scheduler_does_not(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Prepare: Popen records the command it would run
    started: list[list[str]] = []

    class _Popen:
        def __init__(self, command: list[str], **_: object) -> None:
            started.append(command)
            self.pid = 1

    monkeypatch.setattr(subprocess, "Popen", _Popen)
    me = pwd.getpwuid(os.geteuid()).pw_name  # the processes run as whoever runs this: no setpriv in the commands
    spec = sh.HostsSpec(devices=1, cpus=0.2)
    hosts = sh.ShapedHosts(spec, "tcp://x:1", "elbr0", logs=str(tmp_path), work="/", account=me)

    # Execute
    sh._spawn(hosts, "scheduler", None, ["dask", "scheduler"])
    sh._spawn(hosts, "pi3b-0", "el-pi3b-0", ["dask", "worker"], groups=["/sys/fs/cgroup/cpu/edgelab/el-pi3b-0"])

    # Assert
    assert started[0] == ["dask", "scheduler"]
    assert started[1][:2] == ["/bin/sh", "-c"]
    assert started[1][4:6] == ["/sys/fs/cgroup/cpu/edgelab/el-pi3b-0/cgroup.procs", "--"]
    assert started[1][6:] == ["ip", "netns", "exec", "el-pi3b-0", "dask", "worker"]


@needs_cgroups
@pytest.mark.integration
def test_a_process_over_its_memory_ceiling_is_killed_by_the_kernel() -> None:
    # Prepare: a 64 MiB host
    groups = dc.make(f"{LIVE}-memtest", dc.DeviceLimits(memory_mb=64))
    try:
        # Execute: 32 MiB fits, 256 MiB does not
        grow = "import sys; b = bytearray(int(sys.argv[1]) << 20); b[::4096] = b'x' * len(b[::4096]); print('ok')"
        small = subprocess.run(dc.enter_command(groups, [sys.executable, "-c", grow, "32"]), capture_output=True)
        large = subprocess.run(dc.enter_command(groups, [sys.executable, "-c", grow, "256"]), capture_output=True)
    finally:
        left = dc.remove(groups)

    # Assert
    assert small.returncode == 0 and small.stdout == b"ok\n"
    assert large.returncode == -9  # SIGKILL, the OOM killer's
    assert left == [] and not any(Path(g).exists() for g in groups)


@pytest.fixture
def state() -> Iterator[Path]:
    """A state folder as ``up`` wants it (root's, 0755), outside pytest's 0700 tree."""
    folder = Path(tempfile.mkdtemp(prefix="edgelab-limited-test-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _groups_of(text: str) -> dict[str, str]:
    """``/proc/<pid>/cgroup`` as controller -> group."""
    out = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        out.update({c: path for c in controllers.split(",") if c})
    return out


@needs_cgroups
@needs_hosts
@pytest.mark.integration
def test_limited_hosts_run_their_workers_inside_a_quota_and_down_removes_the_groups(state: Path) -> None:
    from distributed import Client

    # (Defined here: the hosts' workers cannot import this module, and cloudpickle sends a nested function whole.)
    def _spin(seconds: float) -> tuple[float, float, str]:
        """Busy for ``seconds`` of wall time: the CPU seconds this thread got, the wall, and the process's groups."""
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        while time.perf_counter() - wall0 < seconds:
            pass
        return time.thread_time() - cpu0, time.perf_counter() - wall0, Path("/proc/self/cgroup").read_text()

    def _pid(dask_worker: object = None) -> int:
        return os.getpid()

    # Prepare: two hosts of a fifth of a core and 1 GiB each, weighted so the busy machine lets them have it
    spec = sh.HostsSpec(devices=2, prefix=LIVE, subnet=SUBNET, cpus=0.2, memory_mb=1024, cpu_shares=8192)
    hosts = sh.up(spec, folder=state)
    try:
        recorded = sh.status(folder=state)
        [cpu_group] = [g for g in hosts.cgroups["pi3b-1"] if g.startswith("/sys/fs/cgroup/cpu/")]
        [memory_group] = [g for g in hosts.cgroups["pi3b-1"] if g.startswith("/sys/fs/cgroup/memory/")]
        written = [Path(cpu_group, "cpu.cfs_quota_us").read_text(), Path(memory_group, "memory.limit_in_bytes")]
        written[1] = written[1].read_text()
        with Client(hosts.scheduler_address, security=hosts.security()) as client:
            by_name = {w["name"]: a for a, w in client.scheduler_info()["workers"].items()}
            worker_pids = client.run(_pid)
            scheduler_pid = client.run_on_scheduler(_pid)

            # Execute: a busy loop on a device for 3 s of wall time
            spent, wall, seen = client.submit(_spin, 3.0, workers=[by_name["pi3b-1"]], pure=False).result()
        workers = {name: _groups_of(Path(f"/proc/{worker_pids[a]}/cgroup").read_text()) for name, a in by_name.items()}
        nannies = {name: _groups_of(Path(f"/proc/{hosts.pids[name]}/cgroup").read_text()) for name in by_name}
        scheduler = _groups_of(Path(f"/proc/{scheduler_pid}/cgroup").read_text())
    finally:
        sh.down(folder=state)

    # Assert: the limits are recorded and written, 2 ms of every 10 ms and 1 GiB
    assert recorded is not None and (recorded.spec.cpus, recorded.spec.memory_mb) == (0.2, 1024)
    assert sorted(recorded.cgroups) == ["pi3b-0", "pi3b-1"]
    assert written == ["2000\n", f"{1024 * 2**20}\n"]
    # each worker and its nanny are in their own host's groups, the scheduler in none
    for name in by_name:
        for groups in (workers[name], nannies[name]):
            assert groups["cpu"] == f"/edgelab/{LIVE}-{name}"
            assert groups["memory"].endswith(f"/edgelab/{LIVE}-{name}")
    assert "edgelab" not in scheduler["cpu"] + scheduler["memory"]
    assert _groups_of(seen)["cpu"] == f"/edgelab/{LIVE}-pi3b-1"
    # what the loop got of its quota: a behaviour, not a speed (the machine is shared)
    assert 0.10 <= spent / wall <= 0.35, (spent, wall)
    # down removed every group, and the edgelab folders with them
    assert sh.leftovers(LIVE) == []
    assert not any(Path(g).exists() for groups in hosts.cgroups.values() for g in groups)


def test_shaped_hosts_workers_run_with_the_embedded_devices_dask_settings(tmp_path: Path) -> None:
    import dask

    from edgelab.cluster import device_cluster

    # Prepare
    hosts = sh.ShapedHosts(sh.HostsSpec(devices=1, cpus=0.2), "tcp://x:1", "elbr0", work=str(tmp_path))

    # Execute: what Dask makes of the variables a host's processes start with
    seen = dask.config.collect_env(sh._worker_environment(hosts))

    # Assert: every setting of the embedded devices (an idle worker's own CPU counts against a host's quota)
    for key, value in device_cluster._DEVICE_WORKER_CONFIG.items():
        if key.startswith("distributed.nanny.pre-spawn-environ."):
            key, value = "distributed.nanny.pre-spawn-environ", {"MALLOC_TRIM_THRESHOLD_": None}
        assert dask.config.get(key, config=seen) == value, key

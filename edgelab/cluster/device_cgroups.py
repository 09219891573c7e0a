"""A device's CPU and memory as a real board has them: a cgroup v1 group per shaped host, with a quota and a ceiling.

A shaped host (``edgelab.cluster.shaped_hosts``) is a network namespace: its
processes see the machine's every core and all its memory. Given limits, each
host's processes go into groups of their own, as container-based emulators
such as Fogify give each emulated device a container's CPU and memory limits:

* ``cpu``: ``cpu.cfs_quota_us`` of ``cpus`` x ``cpu.cfs_period_us`` (0.2 of a
  core: 2 ms of every 10 ms), optionally a ``cpu.shares`` weight against
  the rest of the machine. The period is a tenth of the kernel's default
  100 ms: a quota lets a process run at the full core's speed until its
  period's allowance is spent, so a task shorter than the allowance (a
  pipeline stage's micro-batch, a message) ran at the host's speed, not the
  board's, when the allowance was 20 ms (measured: stage tasks took 2.5 times
  their CPU time at 0.2 cores, not 5). A quota is never below the kernel's
  1 ms: below 0.1 cores the period grows to keep it there;
* ``memory``: ``memory.limit_in_bytes`` (and the memory-plus-swap limit, where
  the kernel accounts swap, to the same value: swap does not widen the ceiling);
* ``cpuacct``, where mounted: no limit, the CPU time the host used.

The groups are made as root before a process is started, under the group the
process that makes them is in (``<mount>/<controller>/<own group>/edgelab/<prefix>-<device>``),
so limits already put on the caller (a container, a systemd slice) still hold.
A process enters its groups before it runs: ``enter_command`` wraps its command
in a shell that writes its own pid into each group's ``cgroup.procs`` and then
``exec``s the command (no fork in between, no extra program needed), so every
process it starts later (Dask's nanny and its worker) is born inside.

cgroup v2 (the unified hierarchy alone) is not handled here: its controllers
are delegated differently and a machine without the v1 ``cpu`` and ``memory``
hierarchies is told so before anything is made.
"""

from __future__ import annotations

import errno
import math
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from edgelab.common import checks
from edgelab.common.errors import ClusterError, ConfigError

#: Where cgroup v1 hierarchies are mounted, one folder per controller.
ROOT = Path("/sys/fs/cgroup")
#: The folder, under the maker's own group, that holds every host's groups.
FOLDER = "edgelab"
#: The quota's period: a tenth of CFS's default 100 ms, so that a fraction of a core is slow in every short task too.
PERIOD_US = 10_000
#: The least quota the kernel takes.
MIN_QUOTA_US = 1_000
#: Controllers that limit, and the one that only counts (made where it is mounted).
LIMITING = ("cpu", "memory")
COUNTING = "cpuacct"
_NAME = re.compile(r"^[a-z][a-z0-9]{0,5}-[a-z0-9][a-z0-9_-]{0,40}$")  # <prefix>-<device>, as the namespace
# $$ is the shell's pid, which `exec` hands to the command: each group gets the very process that runs it.
_ENTER = 'for group do [ "$group" = -- ] && break; echo $$ > "$group" || exit 125; shift; done; shift; exec "$@"'


@dataclass(frozen=True)
class DeviceLimits:
    """The CPU and memory one device may use.

    Parameters
    ----------
    cpus
        Cores' worth of CPU time per period (0.2: a fifth of one core); None: no quota.
    memory_mb
        Memory ceiling in MiB (resident memory, page cache included); None: no ceiling.
    cpu_shares
        The groups' weight against the machine's other work when cores are short
        (the kernel's default is 1024; a quota is a ceiling, the weight is what gets
        a group near it on a busy machine); None: the default.
    """

    cpus: float | None = None
    memory_mb: int | None = None
    cpu_shares: int | None = None

    def __post_init__(self) -> None:
        cores = os.cpu_count() or 1
        # The kernel takes quotas of 1 ms and more.
        unit = f"cores (this host has {cores})"
        checks.number("cpus", self.cpus, at_least=0.01, at_most=cores, unit=unit, none="no quota")
        checks.integer("memory_mb", self.memory_mb, at_least=16, at_most=_memory_total_mb(), none="no ceiling")
        checks.integer("cpu_shares", self.cpu_shares, at_least=2, at_most=262_144, none="the kernel's 1024")

    @property
    def limited(self) -> bool:
        """Whether any limit is set (else no group is made)."""
        return self.cpus is not None or self.memory_mb is not None or self.cpu_shares is not None

    def settings(self) -> dict[str, dict[str, str]]:
        """What is written where: controller -> file -> value, in the order written."""
        out: dict[str, dict[str, str]] = {"cpu": {}, "memory": {}}
        if self.cpus is not None:
            period = max(PERIOD_US, math.ceil(MIN_QUOTA_US / self.cpus))
            out["cpu"] = {"cpu.cfs_period_us": str(period), "cpu.cfs_quota_us": str(round(self.cpus * period))}
        if self.cpu_shares is not None:
            out["cpu"]["cpu.shares"] = str(self.cpu_shares)
        if self.memory_mb is not None:
            limit = str(self.memory_mb * 2**20)
            # memory first: the kernel refuses a memory-plus-swap limit below the memory limit
            out["memory"] = {"memory.limit_in_bytes": limit, "memory.memsw.limit_in_bytes": limit}
        return {controller: files for controller, files in out.items() if files}

    def describe(self) -> str:
        """One line: ``0.2 cores, 900 MB`` (or ``no limits``)."""
        parts = [
            f"{self.cpus:g} cores" if self.cpus is not None else "",
            f"{self.memory_mb} MB" if self.memory_mb is not None else "",
            f"cpu.shares {self.cpu_shares}" if self.cpu_shares is not None else "",
        ]
        return ", ".join(p for p in parts if p) or "no limits"


def check_machine(limits: DeviceLimits, *, root: Path = ROOT) -> None:
    """Raise a ClusterError unless this machine has the v1 hierarchies ``limits`` needs, writable here."""
    for controller in limits.settings():
        mount = root / controller
        if not (mount / "cgroup.procs").exists():
            raise ClusterError(
                f"limited hosts need the cgroup v1 {controller!r} hierarchy at {mount} (not found; a machine with "
                "only cgroup v2 is not supported)"
            )
        if not os.access(mount, os.W_OK):
            raise ClusterError(f"limited hosts need root to make groups in {mount}")


def own_group(controller: str, *, proc: str = "/proc/self/cgroup") -> str:
    """The group of this process in ``controller``'s v1 hierarchy (``/`` for the root), from ``/proc/self/cgroup``."""
    for line in Path(proc).read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path or "/"
    return "/"


def group_folders(name: str, limits: DeviceLimits, *, root: Path = ROOT, proc: str = "/proc/self/cgroup") -> list[Path]:
    """The groups ``make`` makes for host ``name``: one per controller ``limits`` sets, and the counting one."""
    return [folder for _, folder in _folders(name, limits, root, proc)]


def make(name: str, limits: DeviceLimits, *, root: Path = ROOT, proc: str = "/proc/self/cgroup") -> list[str]:
    """Make host ``name``'s groups with ``limits`` written in; their paths, in the order made.

    An empty group of the same name, left by a cluster that did not come down,
    is made afresh; one that still holds processes is refused.
    """
    made: list[str] = []
    settings = limits.settings()
    try:
        for controller, folder in _folders(name, limits, root, proc):
            if members(str(folder)):
                raise ClusterError(f"{folder} holds processes of another cluster: stop them, or `edgelab cluster down`")
            if folder.is_dir() and not _rmdir(folder):  # empty: made again with the kernel's defaults
                raise ClusterError(f"{folder} is left from another cluster and cannot be removed")
            folder.mkdir(parents=True)
            made.append(str(folder))
            for file, value in settings.get(controller, {}).items():
                # The memory-plus-swap file is there where the kernel accounts swap (its root group has it too).
                if not file.startswith("memory.memsw.") or (root / controller / file).exists():
                    _write(folder / file, value)
            if controller == "cpu":
                _weigh_folder(folder.parent)
    except BaseException:
        remove(made)  # only what this call made
        raise
    return made


def _write(target: Path, value: str) -> None:
    try:
        target.write_text(value + "\n")
    except OSError as exc:
        raise ClusterError(f"cannot set {target} to {value}: {exc.strerror or exc}") from exc


def _folders(name: str, limits: DeviceLimits, root: Path, proc: str) -> list[tuple[str, Path]]:
    if not _NAME.match(name):
        raise ConfigError("name", name, "<prefix>-<device>, as a shaped host's namespace is named")
    controllers = [*limits.settings()]
    if controllers and (root / COUNTING / "cgroup.procs").exists():
        controllers.append(COUNTING)
    out: list[tuple[str, Path]] = []
    for controller in controllers:
        folder = root / controller / own_group(controller, proc=proc).lstrip("/") / FOLDER / name
        # Where cpu and cpuacct share a hierarchy (mounted as "cpu,cpuacct"), one group serves both.
        if not any(_same(folder, seen) for _, seen in out):
            out.append((controller, folder))
    return out


def enter_command(groups: list[str], command: list[str]) -> list[str]:
    """``command`` run by a shell that first puts itself (and so everything it becomes) into ``groups``.

    Examples
    --------
    >>> enter_command(["/sys/fs/cgroup/cpu/edgelab/el-pi3b-0"], ["dask", "worker"])[-5:]
    ['edgelab-enter', '/sys/fs/cgroup/cpu/edgelab/el-pi3b-0/cgroup.procs', '--', 'dask', 'worker']
    """
    if not groups:
        return list(command)
    return ["/bin/sh", "-c", _ENTER, "edgelab-enter", *(str(Path(g) / "cgroup.procs") for g in groups), "--", *command]


def members(group: str) -> list[int]:
    """The pids in ``group`` now (empty when it is gone)."""
    try:
        return [int(p) for p in Path(group, "cgroup.procs").read_text().split()]
    except (FileNotFoundError, ValueError):
        return []


def remove(groups: list[str], *, timeout_s: float = 5.0) -> list[str]:
    """Remove ``groups`` (the host's processes are stopped first); the ones that would not go.

    A process still inside is one of the host's, past its stop: it is killed
    (SIGKILL) before its group is removed. The ``edgelab`` folder above goes
    too once no other cluster's group is in it.
    """
    left = []
    for group in groups:
        folder = Path(group)
        if not folder.is_dir():
            continue
        for pid in members(group):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout_s
        while not _rmdir(folder):  # busy: a killed process not yet reaped by its parent
            if time.monotonic() > deadline:
                left.append(group)
                break
            time.sleep(0.05)
        if not _groups_in(folder.parent):
            _rmdir(folder.parent)
        elif (folder.parent / "cpu.shares").exists():  # another cluster's groups are still in it
            _weigh_folder(folder.parent)
    return left


def leftovers(prefix: str, *, root: Path = ROOT, proc: str = "/proc/self/cgroup") -> list[str]:
    """Groups of ``prefix``'s hosts that exist now, under this process's own group (empty after a clean ``down``)."""
    found = []
    for controller in (*LIMITING, COUNTING):
        folder = root / controller / own_group(controller, proc=proc).lstrip("/") / FOLDER
        if folder.is_dir():
            found += sorted(str(g) for g in folder.iterdir() if g.is_dir() and g.name.startswith(f"{prefix}-"))
    return found


def check_recorded(groups: list[str], prefix: str, *, root: Path = ROOT) -> list[str]:
    """The paths among ``groups`` (read from a state file) that ``make`` never makes for ``prefix``."""
    strange = []
    for group in groups:
        path = Path(group)
        inside = path.is_absolute() and ".." not in path.parts and path.is_relative_to(root)
        named = path.parent.name == FOLDER and _NAME.match(path.name) and path.name.startswith(f"{prefix}-")
        if not (inside and named):
            strange.append(group)
    return strange


def usage(group: str) -> dict[str, int]:
    """What a group's files count now: throttling (cpu), CPU nanoseconds (cpuacct), peak bytes (memory)."""
    folder = Path(group)
    out: dict[str, int] = {}
    stat = folder / "cpu.stat"
    if stat.exists():
        for line in stat.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key in ("nr_periods", "nr_throttled", "throttled_time"):
                out[key] = int(value)
    for file, key in (("cpuacct.usage", "cpu_ns"), ("memory.max_usage_in_bytes", "memory_peak_bytes")):
        if (folder / file).exists():
            out[key] = int((folder / file).read_text())
    return out


def _weigh_folder(folder: Path) -> None:
    """Give the ``edgelab`` folder the weight of the groups in it, so that each competes as if it stood alone.

    The folder is itself a group, of the kernel's default weight (1024): left
    so, every host in it would share one process's claim on a busy machine
    (measured: five hosts of 0.2 cores, 1 core in all, got 0.15 each beside
    other jobs, whatever their own weight).
    """
    weights = [int((g / "cpu.shares").read_text()) if (g / "cpu.shares").exists() else 1024 for g in _groups_in(folder)]
    if weights:
        _write(folder / "cpu.shares", str(min(262_144, max(2, sum(weights)))))


def _groups_in(folder: Path) -> list[Path]:
    try:
        return [g for g in folder.iterdir() if g.is_dir()]
    except FileNotFoundError:
        return []


def _rmdir(folder: Path) -> bool:
    """Remove a group's folder; whether it is gone.

    On cgroupfs ``rmdir`` takes the control files with it. A plain folder
    standing for one (a test's) holds them as files, removed first.
    """
    try:
        folder.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError as exc:
        if exc.errno != errno.ENOTEMPTY:
            return False
    try:
        for file in folder.iterdir():
            if file.is_file():
                file.unlink()
        folder.rmdir()
    except OSError:
        return False
    return True


def _same(a: Path, b: Path) -> bool:
    try:
        return a.parent.resolve() == b.parent.resolve() and a.name == b.name
    except OSError:
        return False


def _memory_total_mb() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 1 << 30

"""Command line: ``edgelab reproduce`` runs every notebook through papermill, ``edgelab report`` draws the page.

``--profile smoke`` runs each notebook with the parameters it carries (sizes
that finish in minutes on a laptop); ``--profile full`` injects the paper's
sizes. Smoke results go to ``reports/`` and full ones to
``reports/full-profile/``, so a paper-sized run never overwrites the smoke
reproduction (or the other way round): each notebook writes its figures, tables
and manifest entries there, and the executed notebooks go to its ``notebooks/``.

The console shows progress only: a bar over the notebooks and one over the runs
inside the current notebook (``edgelab.common.progress``), and a line per notebook.
Everything the kernel, TensorFlow and Dask print goes to ``reproduce.log``
beside the reports. A notebook that ran to the end with the same inputs (its
source, its parameters, the edgelab code, the data directory) is not run again:
an interrupted command, run again, goes on where it stopped (``--force`` runs
everything). At the end ``index.html`` shows every catalog id.

``edgelab calibrate NAME`` measures the machine it runs on as a board of one's
own (``edgelab.runtime.board_calibration``) and writes ``NAME.json``, which any
notebook's ``device_profile`` takes.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from edgelab.common import progress
from edgelab.common.environ import environment
from edgelab.common.errors import ConfigError
from edgelab.common.paths import REPO_ROOT, cache_dir, reports_dir
from edgelab.common.results import atomic_write_text
from edgelab.report import catalog
from edgelab.report import page as report_page
from edgelab.report.manifest import update_manifest

if TYPE_CHECKING:
    from edgelab.cluster.shaped_hosts import ShapedHosts

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
PROFILES = ("smoke", "full")
FULL_PROFILE_DIR = "full-profile"
#: The exit status of a run stopped by Ctrl-C or SIGTERM.
INTERRUPTED = 130


def _experiment(notebook: Path) -> Any:
    """The experiment module behind a notebook (``edgelab.papers.EXPERIMENTS``), or None for one that has none."""
    from edgelab import papers

    return papers.experiment(notebook.stem)


def full_parameters(notebook: Path) -> dict[str, Any]:
    """Paper-sized parameters of a notebook (its experiment module's ``FULL_PROFILE``; none without one)."""
    return dict(getattr(_experiment(notebook), "FULL_PROFILE", {}))


def missing_data(notebook: Path) -> str | None:
    """Why a notebook cannot run here (data no source supplies), or None: its module's ``missing_data``."""
    check = getattr(_experiment(notebook), "missing_data", None)  # getattr(None, ...) is None too
    return check() if check is not None else None


def profile_reports_dir(profile: str, root: Path) -> Path:
    """Where a profile's reports go: ``root`` for smoke, ``root/full-profile`` for full."""
    return root if profile == "smoke" else root / FULL_PROFILE_DIR


def notebook_parameters(
    profile: str, notebook: Path, reports: Path, scheduler_address: str | None = None
) -> dict[str, Any]:
    """Papermill parameters of one notebook under a profile, writing into ``reports``.

    Smoke injects nothing: the notebook runs as committed, and its own default
    (``edgelab.common.paths.reports_dir``) is the smoke reproduction's. A scheduler
    address goes to every notebook that trains on a cluster (its ``scheduler_address``
    parameter, which its results record), instead of the embedded cluster.
    """
    params: dict[str, Any] = {} if profile == "smoke" else {**full_parameters(notebook), "reports_dir": str(reports)}
    if scheduler_address and "scheduler_address" in declared_parameters(notebook):
        params["scheduler_address"] = scheduler_address
    return params


def declared_parameters(notebook: Path) -> set[str]:
    """The names the notebook's ``parameters`` cell assigns (what papermill can inject)."""
    import ast

    cells = json.loads(notebook.read_text())["cells"]
    source = next(("".join(c["source"]) for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])), "")
    return {
        target.id
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }


#: The catalog ids each notebook renders.
NOTEBOOK_IDS = {
    "park2020_lenet": ["park2020/table1", "park2020/table2", *(f"park2020/fig4{p}" for p in "abcd")],
    "park2020_resnet": [
        "park2020/fig1",
        "park2020/fig2",
        "park2020/fig5a",
        "park2020/fig5b",
        *(f"park2020/fig{n}{p}" for n in (6, 7) for p in "abcd"),
        "park2020/table3",
        "park2020/table4",
    ],
    "park2020_async": ["park2020/fig3a", "park2020/fig3b"],
    "jeon_pipeline": [i for i in catalog.IDS if i.startswith("jeon/")],
    "qiao_survey": ["qiao/fig2-1", "qiao/table2-1", "qiao/table-abbrev"],
    "zhang2018_networks": ["zhang2018/fig2"],
    "zhang2018_schemes": [
        "zhang2018/fig1",
        "zhang2018/fig3",
        *(f"zhang2018/eq{n}" for n in range(1, 7)),
        "qiao/fig1-1",
    ],
    "zhang2018_tiers": ["zhang2018/table1", "zhang2018/table2"],
    "zhang2018_privacy": ["zhang2018/table3", "zhang2018/table4", "zhang2018/eq7", "zhang2018/eq8"],
    "zhang2018_faults": ["zhang2018/table5", "zhang2018/fig4", "zhang2018/eq9"],
    "qiao_placement": ["qiao/method-placement"],
    "qiao_pipeline_training": ["qiao/fig3-3", "qiao/fig3-3a", "qiao/fig3-3b", "qiao/eq-gpipe-bubble"],
    "qiao_tiles": ["qiao/fig3-6"],
    "qiao_parallelism": ["qiao/fig3-1", "qiao/fig3-2"],
    "qiao_fedavg": ["qiao/method-fedavg"],
    "qiao_grad_compression": ["qiao/method-grad-quant", "qiao/method-grad-sparsify"],
    "qiao_comm_architectures": ["qiao/fig3-4", "qiao/fig3-4a", "qiao/fig3-4b", "qiao/fig3-4c", "qiao/eq-comm-volume"],
    "qiao_compression": ["qiao/method-compression"],
    "qiao_conv_costs": [
        "qiao/fig3-5",
        "qiao/fig3-5a",
        "qiao/fig3-5b",
        "qiao/eq-conv-cost",
        "qiao/eq-dwconv-cost",
        "qiao/eq-dwconv-ratio",
        "qiao/eq-mobilenet-8to9x",
        "qiao/eq-group-conv",
        "qiao/eq-squeezenet-50x",
    ],
    "qiao_early_exits": ["qiao/fig3-7", "qiao/eq-normalized-entropy"],
}
LOG_NAME = "reproduce.log"
# The command and the page: code no notebook runs, so changing it does not make a notebook stale.
OUTSIDE_NOTEBOOKS = ("cli.py", "report/page.py")
STATUS_NAME = "reproduce.json"


def notebooks_for(only: Sequence[str], notebooks: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """The notebooks rendering the documents or ids in ``only``, and the chosen ids no notebook renders yet."""
    ids = catalog.select(list(only))
    chosen = [nb for nb in notebooks if set(NOTEBOOK_IDS.get(nb.stem, ())) & set(ids)]
    rendered = {i for nb in notebooks for i in NOTEBOOK_IDS.get(nb.stem, ())}
    return chosen, [i for i in ids if i not in rendered]


def inputs_digest(profile: str, notebook: Path, params: dict[str, Any]) -> str:
    """What a notebook's run depends on: its source, parameters, the edgelab code and the data directory."""
    h = hashlib.sha256()
    h.update(
        json.dumps(
            {"profile": profile, "params": params, "data": os.environ.get("EDGELAB_DATA_DIR")},
            sort_keys=True,
            default=str,
        ).encode()
    )
    h.update(notebook.read_bytes())
    package = Path(__file__).resolve().parent
    for source in sorted(package.rglob("*.py")):
        if source.relative_to(package).as_posix() in OUTSIDE_NOTEBOOKS:
            continue
        h.update(str(source.relative_to(package)).encode())
        h.update(source.read_bytes())
    return h.hexdigest()


class Status:
    """Each notebook's last outcome (done, failed, skipped), kept atomically in two places.

    ``reproduce.json`` beside the reports says what the report shows (the page
    lists it). What decides that a notebook need not run again is kept apart,
    in this machine's cache: the digest of the inputs its finished run had. A
    fresh clone has committed reports but none of the results behind them, so
    it runs every notebook.
    """

    def __init__(self, reports: Path) -> None:
        self.path = reports / STATUS_NAME
        where = hashlib.sha256(str(reports.resolve()).encode()).hexdigest()[:16]
        self.stamps_path = cache_dir() / "reproduce" / f"{where}.json"
        self.entries: dict[str, Any] = _read_json(self.path)
        self.stamps: dict[str, str] = _read_json(self.stamps_path)

    def up_to_date(self, notebook: Path, digest: str, target: Path) -> bool:
        """Whether ``notebook`` last ran to the end here with inputs ``digest`` and its executed copy is still there."""
        finished = self.entries.get(notebook.stem, {}).get("status") == "done"
        return finished and self.stamps.get(notebook.stem) == digest and target.is_file()

    def record(self, notebook: Path, status: str, *, inputs: str | None = None, **fields: Any) -> None:
        """Keep a notebook's outcome, written at once (an interrupted command keeps what finished)."""
        self.entries[notebook.stem] = {
            "status": status,
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            **fields,
        }
        atomic_write_text(self.path, json.dumps(self.entries, indent=1, sort_keys=True) + "\n")
        if inputs is None:
            self.stamps.pop(notebook.stem, None)
        else:
            self.stamps[notebook.stem] = inputs
        atomic_write_text(self.stamps_path, json.dumps(self.stamps, indent=1, sort_keys=True) + "\n")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: nothing is taken as done
    return data if isinstance(data, dict) else {}


@contextlib.contextmanager
def _output_to(log: Path) -> Iterator[TextIO]:
    """Send this process's and its children's stdout and stderr to ``log``; yield a stream to the console."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        f.write(f"\n==== edgelab reproduce, {datetime.now(UTC).isoformat(timespec='seconds')}\n".encode())
        f.flush()
        for fd in (1, 2):
            os.dup2(f.fileno(), fd)
    console = os.fdopen(os.dup(saved[2]), "w", buffering=1)
    try:
        yield console
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        console.close()


def reproduce(
    profile: str,
    notebooks: Sequence[Path],
    *,
    reports: Path,
    force: bool = False,
    quiet: bool = True,
    scheduler_address: str | None = None,
) -> int:
    """Execute notebooks with papermill into ``reports``; return the number that failed.

    ``quiet`` sends everything but the progress to ``reports/reproduce.log``;
    ``force`` runs notebooks that are up to date too.
    """
    import papermill
    from tqdm import tqdm

    (reports / "notebooks").mkdir(parents=True, exist_ok=True)
    status = Status(reports)
    log = reports / LOG_NAME
    with contextlib.ExitStack() as stack:
        console: TextIO = stack.enter_context(_output_to(log)) if quiet else sys.stdout
        if quiet:
            print(f"edgelab: library output goes to {log}", file=console, flush=True)
        # Bars on a terminal; a log or a pipe gets only the lines.
        bar = stack.enter_context(tqdm(total=len(notebooks), unit="notebook", file=console, disable=None, position=0))
        runs = stack.enter_context(tqdm(total=0, unit="run", file=console, disable=None, position=1, leave=False))
        runner = _Runner(profile, reports, scheduler_address, force, status, console, bar, runs)
        return sum(runner.run(nb, papermill.execute_notebook) for nb in notebooks)


@dataclass
class _Runner:
    """What every notebook of one ``reproduce`` shares: where it writes, what it prints to, its bars (tqdm)."""

    profile: str
    reports: Path
    scheduler_address: str | None
    force: bool
    status: Status
    console: TextIO
    bar: Any  # the notebooks done
    runs: Any  # the runs done inside the notebook that runs

    def say(self, line: str) -> None:
        """Print ``line`` above the bars."""
        from tqdm import tqdm

        tqdm.write(line, file=self.console)

    def on_runs(self, done: int, total: int, label: str) -> None:
        """The notebook that runs finished ``done`` of its ``total`` runs, the last ``label``."""
        if done == 0:
            self.runs.reset(total=total)
        else:
            self.runs.update(done - self.runs.n)
            self.runs.set_postfix_str(label[:60], refresh=True)

    def run(self, nb: Path, execute_notebook: Callable[..., Any]) -> bool:
        """Run ``nb`` with ``execute_notebook`` (papermill's) unless its data is missing or it is up to date.

        Returns whether it failed.
        """
        self.bar.set_description(nb.stem)
        reason = missing_data(nb)
        if reason:
            # Not a failure of the suite: the notebook's items stay "not run" in the manifest, and we say why.
            self.say(f"edgelab: skipping {nb.name}: {reason}")
            self.status.record(nb, "skipped", reason=reason)
            self.bar.update()
            return False
        params = notebook_parameters(self.profile, nb, self.reports, self.scheduler_address)
        target = self.reports / "notebooks" / nb.name
        digest = inputs_digest(self.profile, nb, params)
        if not self.force and self.status.up_to_date(nb, digest, target):
            self.say(f"edgelab: {nb.name} is up to date (same notebook, parameters, code and data); --force runs it")
            self.bar.update()
            return False
        start = time.perf_counter()
        name = nb.relative_to(REPO_ROOT) if nb.is_relative_to(REPO_ROOT) else nb
        self.say(f"edgelab: running {name} ({self.profile}) -> {target}")
        self.runs.reset(total=0)
        # Until it finishes, the report says it did not (an interruption leaves it so).
        self.status.record(nb, "started", profile=self.profile)
        progress_path = self.reports / f".{nb.stem}.progress"
        # The kernel and every process it starts keep their temporary files (TensorFlow's traced
        # functions, Dask's spill space) in a folder of the notebook's, removed when it ends: a killed
        # kernel removes nothing itself, and 19 notebooks left hundreds of files in /tmp a run.
        scratch = tempfile.TemporaryDirectory(prefix=f"edgelab-{nb.stem}-", ignore_cleanup_errors=True)
        try:
            with (
                progress.Follower(progress_path, self.on_runs),
                environment({progress.ENV: str(progress_path), "TMPDIR": scratch.name}),
            ):
                # Every cell's output is in when the last cell ends, so the kernel is killed, its process
                # group with it (fork server, any device left running), instead of asked to exit: a kernel
                # with TensorFlow loaded takes 2-3 s to exit gracefully, 19 times a run.
                execute_notebook(
                    str(nb),
                    str(target),
                    parameters=params,
                    cwd=str(nb.parent),
                    progress_bar=False,
                    shutdown_kernel="immediate",
                )
        except KeyboardInterrupt:
            # papermill leaves the kernel running when interrupted, and with it its devices, which would
            # go on writing into the scratch folder removed below and training on the cores.
            _end_children()
            raise
        except Exception as exc:  # report and go on with the other notebooks
            if _INTERRUPTED.is_set():  # the kernel died because we killed it
                raise KeyboardInterrupt from exc
            error = _one_line(exc)
            seconds = time.perf_counter() - start
            log = self.reports / LOG_NAME
            self.say(f"edgelab: {nb.name} FAILED after {seconds:.0f} s: {error} (details: {log}, {target})")
            self.status.record(nb, "failed", error=error, seconds=round(seconds, 1), profile=self.profile)
            return True
        finally:
            scratch.cleanup()
            progress_path.unlink(missing_ok=True)
            self.bar.update()
        seconds = time.perf_counter() - start
        self.say(f"edgelab: {nb.name} done in {seconds:.0f} s")
        self.status.record(nb, "done", inputs=digest, seconds=round(seconds, 1), profile=self.profile)
        return False


def _end_children() -> None:
    """Kill every process this one started, and theirs: an interrupted notebook's kernel and its devices."""
    import psutil

    children = psutil.Process().children(recursive=True)  # listed first: a device outliving its kernel is in it
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(children, timeout=10)


# Set by a Ctrl-C or SIGTERM during a run: an error that follows it is the interruption, not a failure.
_INTERRUPTED = threading.Event()


def _interrupt(signum: int, frame: Any) -> None:
    """Ctrl-C and SIGTERM (``timeout``, a cancelled job) end a run: what is done kept, nothing left running.

    The kernel and its devices are killed here, before the exception is raised: the notebook client
    runs an event loop whose tasks may catch the exception and wait on (a base run lost one Ctrl-C so
    in 1,700 tests), but none of them can go on waiting for a kernel that is gone.
    """
    _INTERRUPTED.set()
    _end_children()
    raise KeyboardInterrupt


def _one_line(exc: BaseException) -> str:
    """A failed notebook's error in one line: papermill's exception name and value when it has them."""
    name, value = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    text = f"{name}: {value}" if name else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:300]


def write_report(root: Path) -> Path:
    """List every catalog id in the manifests and draw ``index.html`` from them."""
    for manifest_root in (root, root / FULL_PROFILE_DIR):
        if (manifest_root / "manifest.json").is_file() or manifest_root == root:
            update_manifest([], root=manifest_root)
    return report_page.render(root)


def _print_summary(root: Path, page: Path) -> None:
    shown = report_page.collect(root)
    counts = Counter(s.column for s in shown)
    line = ", ".join(f"{n} {label}" for label, n in counts.most_common())
    print(f"\n{page}: {len(shown)} ids: {line}")


def cluster_command(args: argparse.Namespace) -> int:
    """``edgelab cluster up|down|status``: the shaped hosts of ``edgelab.cluster.shaped_hosts``."""
    from edgelab.cluster import shaped_hosts
    from edgelab.common.errors import ClusterError

    try:
        if args.action == "up":
            spec = shaped_hosts.HostsSpec(
                devices=args.devices,
                profile=args.profile,
                rate_mbit=args.rate_mbit,
                subnet=args.subnet,
                tls=args.tls,
                user=args.user,
                delay_ms=args.delay_ms,
                loss=args.loss,
                delay_via=args.delay_via,
                cpus=args.cpus,
                memory_mb=args.memory_mb,
                cpu_shares=args.cpu_shares,
            )
            hosts = shaped_hosts.up(spec)
            links = f"{spec.rate:g} Mbit/s"
            if hosts.impairment:
                links += f", {spec.delay_ms:g} ms and {spec.loss:.1%} loss each way (by {hosts.impairment})"
            print(
                f"edgelab: {spec.devices} hosts up, links {links}; scheduler {hosts.scheduler_address}, "
                f"its processes running as {hosts.account}"
            )
            if hosts.cgroups:
                print(f"  each host limited to {spec.limits.describe()} (cgroup v1; the scheduler is not limited)")
            if hosts.certificates:
                from edgelab.cluster.tls import Certificates

                exports = " ".join(f"{k}={v}" for k, v in Certificates(hosts.certificates).client_environment().items())
                print(f"  TLS only; a client needs its certificate, e.g.:\n  export {exports}")
            print(
                f"  run a notebook on it: ./run.sh reproduce --scheduler {hosts.scheduler_address} --notebook NAME\n"
                "  take it down: ./run.sh cluster down"
            )
        elif args.action == "down":
            hosts = shaped_hosts.down()
            print(
                "edgelab: no shaped cluster is up"
                if hosts is None
                else f"edgelab: {hosts.bridge} and {len(hosts.namespaces)} hosts removed"
            )
        else:
            hosts = shaped_hosts.status()
            print("edgelab: no shaped cluster is up" if hosts is None else json.dumps(_status(hosts), indent=1))
    except (ClusterError, ConfigError) as exc:
        print(f"edgelab cluster {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


def _status(hosts: ShapedHosts) -> dict[str, Any]:
    """The state ``up`` recorded, and what each limited host's cgroups count now (CPU, throttling, peak memory)."""
    from edgelab.cluster import device_cgroups

    usage = {
        device: {key: value for group in groups for key, value in device_cgroups.usage(group).items()}
        for device, groups in hosts.cgroups.items()
    }
    return {**hosts.to_dict(), **({"cgroup_usage": usage} if usage else {})}


def calibrate_command(args: argparse.Namespace) -> int:
    """``edgelab calibrate``: time training steps here, fit the device model, write the board's profile."""
    from edgelab.emulation.device_model import for_profile
    from edgelab.emulation.profiles import get_profile
    from edgelab.runtime.board_calibration import QUIET_SPREAD, QUIET_STEAL, write_board

    options = {"seconds": args.seconds, "repeats": args.repeats}
    options |= {"link_mbps": args.link_mbps, "latency_ms": args.latency_ms}
    print(f"edgelab calibrate: timing training steps as a device worker runs them ({4 * args.repeats} windows)")
    try:
        path = write_board(args.name, args.out, **options)
    except ConfigError as exc:
        print(f"edgelab calibrate: {exc}", file=sys.stderr)
        return 2
    profile = get_profile(str(path))
    print(for_profile(profile.name).describe())
    measurements = json.loads(Path(path).read_text())["measurements"]
    spread = measurements["largest_spread"]
    if spread > QUIET_SPREAD:
        print(
            f"edgelab calibrate: a cell's repeats differ by {spread:.0%} (more than {QUIET_SPREAD:.0%}): something "
            "else was running; calibrate again on a quiet board",
            file=sys.stderr,
        )
    steal = measurements.get("machine", {}).get("stolen_of_wanted", float("nan"))
    if steal > QUIET_STEAL:  # NaN (not Linux, or nothing wanted) compares False
        print(
            f"edgelab calibrate: the hypervisor kept {steal:.0%} of the CPU time this machine wanted while the steps "
            f"were timed (steal, more than {QUIET_STEAL:.0%}): this virtual machine is slower now than when it gets "
            "its cores; the profile is the board as it was in this hour",
            file=sys.stderr,
        )
    print(f"edgelab calibrate: wrote {path}; give it as any notebook's device_profile (e.g. -p device_profile {path})")
    return 0


def _parser() -> argparse.ArgumentParser:
    """The ``edgelab`` command's arguments."""
    parser = argparse.ArgumentParser(prog="edgelab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("reproduce", help="run every notebook with papermill and write reports/")
    rep.add_argument("--profile", choices=PROFILES, default="smoke")
    rep.add_argument(
        "--notebook", action="append", default=None, help="run only this notebook (name or path); may repeat"
    )
    rep.add_argument(
        "--only",
        action="append",
        default=None,
        help="run only the notebooks rendering these documents or ids (e.g. park2020, jeon/fig7); may repeat",
    )
    rep.add_argument("--force", action="store_true", help="run notebooks that are up to date too")
    rep.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="run on this Dask scheduler (e.g. tls://pi-master:8786) instead of the embedded emulated cluster",
    )
    rep.add_argument("--verbose", action="store_true", help="print library output instead of logging it")
    rep.add_argument(
        "--performance-reports",
        metavar="DIR",
        default=None,
        help="save Dask's performance report (HTML) of each experiment's runs as DIR/<experiment>.html",
    )
    sub.add_parser("report", help="draw reports/index.html from the manifests, running nothing")
    clu = sub.add_parser("cluster", help="bring shaped hosts up on this machine (root), or take them down")
    clu.add_argument("action", choices=("up", "down", "status"))
    clu.add_argument("--devices", type=int, default=3, help="hosts, one Dask worker each (default 3)")
    clu.add_argument("--profile", default="pi3b", help="device profile: names, and the link rate unless --rate-mbit")
    clu.add_argument("--rate-mbit", type=float, default=None, help="link rate of every host in Mbit/s")
    clu.add_argument("--subnet", default="10.213.0.0/24", help="IPv4 network of the hosts (default 10.213.0.0/24)")
    clu.add_argument(
        "--tls",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="TLS only, with certificates from a CA made for the cluster (the default); --no-tls for a lab bench "
        "where every local user may run code on the cluster",
    )
    clu.add_argument(
        "--user",
        default="",
        help="the account the scheduler, workers and relays run as (default: whoever ran sudo, else nobody)",
    )
    clu.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay added to each direction of each link")
    clu.add_argument("--loss", type=float, default=0.0, help="fraction of frames lost in each direction (0-1)")
    clu.add_argument(
        "--delay-via",
        choices=["auto", "netem", "relay"],
        default="auto",
        help="tc netem, or a userspace relay where the kernel lacks netem (auto: netem if present)",
    )
    clu.add_argument(
        "--cpus", type=float, default=None, help="CPU of each host in cores, e.g. 0.2 (a cgroup v1 CFS quota)"
    )
    clu.add_argument("--memory-mb", type=int, default=None, help="memory ceiling of each host in MiB (cgroup v1)")
    clu.add_argument(
        "--cpu-shares",
        type=int,
        default=None,
        help="cgroup weight of each host against the machine's other work (default: the kernel's 1024)",
    )
    cal = sub.add_parser(
        "calibrate",
        help="measure this machine as a board of your own and write its profile (device_profile takes the file)",
    )
    cal.add_argument("name", help="the board's name: a lowercase identifier, e.g. mypi5")
    cal.add_argument("--out", default=None, help="the profile's file (default: <name>.json here)")
    cal.add_argument("--seconds", type=float, default=5.0, help="length of each timed window (default 5)")
    cal.add_argument("--repeats", type=int, default=3, help="timed windows per cell, median kept (default 3)")
    cal.add_argument("--link-mbps", type=float, default=1000.0, help="the board's link rate, as given (default 1000)")
    cal.add_argument("--latency-ms", type=float, default=0.2, help="its one-way latency, as given (default 0.2)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``edgelab`` command."""
    parser = _parser()
    args = parser.parse_args(argv)

    if args.command == "cluster":
        return cluster_command(args)
    if args.command == "calibrate":
        return calibrate_command(args)
    root = reports_dir()
    if args.command == "report":
        page = write_report(root)
        _print_summary(root, page)
        return 0

    notebooks = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
    if args.notebook:
        wanted = {Path(n).stem for n in args.notebook}
        unknown = wanted - {nb.stem for nb in notebooks}
        if unknown:
            parser.error(f"--notebook {sorted(unknown)[0]!r} is not one of {[nb.stem for nb in notebooks]}")
        notebooks = [nb for nb in notebooks if nb.stem in wanted]
    if args.only:
        try:
            notebooks, unrendered = notebooks_for(args.only, notebooks)
        except ConfigError as exc:
            parser.error(f"--only: {exc}")
        for item_id in unrendered:
            print(f"edgelab: {item_id}: {catalog.not_yet(item_id)}")
    reports = profile_reports_dir(args.profile, root)
    if args.performance_reports:  # the notebooks' kernels inherit it (edgelab.papers.harness.run)
        os.environ["EDGELAB_PERFORMANCE_REPORTS"] = str(Path(args.performance_reports).resolve())
    # Only the main thread may set a handler (main() called from another one keeps the default).
    in_main = threading.current_thread() is threading.main_thread()
    _INTERRUPTED.clear()
    # A signal the caller ignores (``nohup``, a background job's SIGINT) stays ignored.
    wanted = [sig for sig in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(sig) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, _interrupt) for sig in wanted} if in_main else {}
    try:
        failures = reproduce(
            args.profile,
            notebooks,
            reports=reports,
            force=args.force,
            quiet=not args.verbose,
            scheduler_address=args.scheduler,
        )
    except KeyboardInterrupt:
        # The interrupted notebook's client tasks end with its kernel killed: asyncio would print
        # each one's error as never retrieved, at exit.
        logging.getLogger("asyncio").disabled = True
        # What finished is kept (results store, finished notebooks); the next run goes on from there.
        print("\nedgelab: interrupted; run the same command again to go on where it stopped", file=sys.stderr)
        write_report(root)
        return INTERRUPTED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    page = write_report(root)
    _print_summary(root, page)
    return 1 if failures else 0


def entry(argv: Sequence[str] | None = None) -> None:
    """The ``edgelab`` command: ``main``, and an interrupted run's end that nothing can hold up.

    An interrupted run has done its own clean-up before it returns (the
    notebook's kernel and devices killed, the report drawn). What is left are
    the notebook client's exit handlers, which shut down a kernel that is gone
    through its sockets and can wait on them for ever; nothing of theirs needs
    saving, so the process ends without them.
    """
    code = main(argv)
    if code == INTERRUPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    entry()

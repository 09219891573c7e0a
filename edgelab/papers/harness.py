"""The one path every paper experiment takes, written once.

params -> plan checked before any cluster work -> runs through the results
store -> summary -> rendered items -> manifest. An experiment module supplies
a frozen parameters dataclass, a ``Plan`` subclass (which runs there are, what
each run's result depends on, and how to execute one on a cluster) and its
summary and figures; this module parses the parameters, finds what the store
does not hold yet, starts (or attaches) a cluster only for that, stores each
run the moment it finishes, and closes what it started. An interrupted sweep
resumes from the runs it stored.
"""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from edgelab.cluster.device_cluster import DeviceCluster
from edgelab.common import progress as progress_file
from edgelab.common.errors import ConfigError
from edgelab.common.results import ResultsStore, StoredRun, run_key
from edgelab.emulation.profiles import DeviceProfile, calibrate
from edgelab.runtime.devices import connect

P = TypeVar("P")

#: What executing one run returns: its summary (JSON-ready), its tables and, optionally, its arrays.
Outcome = (
    tuple[dict[str, Any], dict[str, pd.DataFrame]]
    | tuple[dict[str, Any], dict[str, pd.DataFrame], dict[str, np.ndarray]]
)


def parse_params(cls: type[P], kwargs: dict[str, Any], *, sequences: Iterable[str] = ()) -> P:
    """Build an experiment's frozen parameters from notebook keyword arguments.

    Parameters
    ----------
    cls
        The experiment's parameters dataclass.
    kwargs
        Names and values as papermill injects them.
    sequences
        Fields held as tuples: papermill passes lists (or a bare value), both accepted.

    Returns
    -------
    P
        The validated parameters (the dataclass's own checks have run).

    Raises
    ------
    ConfigError
        If a name is not a parameter of ``cls`` (or a value is not allowed).
    """
    known = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ConfigError(unknown[0], kwargs[unknown[0]], f"a parameter among {', '.join(sorted(known))}")
    values = dict(kwargs)
    for name in sequences:
        if name not in values or values[name] is None:
            continue
        value = values[name]
        values[name] = tuple(value) if isinstance(value, list | tuple) else (value,)
    return cls(**values)


class Plan(ABC):
    """Validated work of one experiment: every run, and how to execute one.

    A run is any hashable value the experiment chooses (e.g. a config and a
    repeat number). Subclasses are dataclasses holding the parameters and
    whatever was loaded and checked while planning.
    """

    params: Any  # the experiment's parameters; ``scheduler_address`` among them
    profile: DeviceProfile
    runs: list[Any]

    @property
    def scheduler_address(self) -> str | None:
        """Address of a running scheduler to attach to, or ``None`` to emulate the devices."""
        return getattr(self.params, "scheduler_address", None)

    @abstractmethod
    def run_params(self, run: Hashable) -> dict[str, Any]:
        """What a run's result depends on: its results-store key."""

    @abstractmethod
    def devices_needed(self, runs: list[Any]) -> int:
        """Devices a cluster needs to execute ``runs``."""

    @abstractmethod
    def execute(self, cluster: DeviceCluster, run: Any, context: dict[str, Any]) -> Outcome:
        """Execute one run on ``cluster``; ``context`` is what ``setup`` measured once per cluster."""

    def start_cluster(self, runs: list[Any], dashboard_address: str) -> DeviceCluster:
        """Start (or attach) the cluster ``runs`` need: by default ``devices_needed`` devices of the profile."""
        return connect(
            self.devices_needed(runs),
            profile=self.profile.name,
            scheduler_address=self.scheduler_address,
            dashboard_address=dashboard_address,
        )

    def setup(self, cluster: DeviceCluster) -> dict[str, Any]:
        """Measure once per cluster what every run records: the host calibration and the cluster."""
        profile = cluster.profile if not cluster.emulated else self.profile
        return {"calibration": calibrate(profile).to_dict(), "cluster": cluster.info}

    def before_runs(self, cluster: DeviceCluster, runs: list[Any]) -> dict[str, Any]:
        """Measure once, after ``setup``, what the pending ``runs`` share (nothing by default); added to the context."""
        return {}

    def teardown(self, context: dict[str, Any]) -> None:
        """Free what ``setup`` placed on the cluster (nothing by default); runs even when a run fails."""
        return None

    def describe(self) -> str:
        """What the notebook prints of the plan: its runs (subclasses add what they loaded)."""
        return f"{len(self.runs)} runs"

    def label(self, run: Any) -> str:
        """A run in a few words, for progress lines."""
        return str(run)

    def report_parameters(self) -> dict[str, Any]:
        """The parameters every rendered item records: the experiment's own (JSON-ready in a subclass that needs it)."""
        return dict(vars(self.params))


# The datasets found loadable in this process, by name, data directory, offline flag and options:
# `edgelab reproduce` asks for each notebook, and loading one is seconds (PlantVillage decodes every JPEG).
_LOADABLE: set[tuple[Hashable, ...]] = set()


def missing_dataset(name: str, data_dir: str | None = None, **options: Any) -> str | None:
    """Why an experiment cannot run here: no source supplies dataset ``name`` (the attempts, indented); else None.

    A dataset found loadable is remembered for this process; a missing one is looked for again each time.
    """
    from edgelab.common.errors import DataError
    from edgelab.data import load_dataset
    from edgelab.data.sources import default_data_dir

    where = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    key = (name, str(where.resolve()), os.environ.get("EDGELAB_OFFLINE"), *sorted(options.items()))
    if key in _LOADABLE:
        return None
    try:
        load_dataset(name, data_dir=data_dir, sample_limit=10, test_limit=10, **options)
    except DataError as exc:
        # The attempts and the fix, each on its own line under the skip message.
        return str(exc).replace("\n", "\n    ")
    _LOADABLE.add(key)
    return None


def pending(plan: Plan, store: ResultsStore) -> list[Any]:
    """Runs of ``plan`` the store does not hold yet, in the plan's order."""
    return [r for r in plan.runs if store.get(plan.run_params(r)) is None]


def run(
    plan: Plan,
    *,
    store: ResultsStore | None = None,
    cluster: DeviceCluster | None = None,
    progress: Callable[[int, int, Any], None] | None = None,
    performance_report: str | os.PathLike[str] | None = None,
    dashboard_address: str = "127.0.0.1:0",
    started: Callable[[DeviceCluster], None] | None = None,
) -> list[StoredRun]:
    """Execute every pending run and store it; return all runs of the plan that are stored.

    A cluster is started (or attached) only when something is pending, with as
    many devices as the pending runs need, and closed again if we started it.
    Each run is stored as soon as it finishes, so an interrupted sweep resumes.

    Parameters
    ----------
    plan
        The experiment's validated plan.
    store
        Results store (default: ``data/results``).
    cluster
        A cluster to use; one is started when ``None`` and something is pending.
    progress
        Called as ``progress(done, total, run)`` after each stored run.
    performance_report
        Where to save Dask's performance report (HTML: task stream, worker
        profiles, bandwidth) of the runs executed now; default
        ``$EDGELAB_PERFORMANCE_REPORTS/<experiment>.html`` when that variable
        names a folder, else none.
    dashboard_address
        Where the Dask dashboard of a cluster started here listens (default: any free loopback port).
    started
        Called with the cluster once it is up (started here or given), before the first run.

    Returns
    -------
    list[StoredRun]
        The plan's runs in its order (runs that are still missing are left out).
    """
    store = store or ResultsStore()
    todo = pending(plan, store)
    if todo:
        own = cluster is None
        if cluster is None:
            cluster = plan.start_cluster(todo, dashboard_address)
        try:
            if started is not None:
                started(cluster)
            _execute(plan, store, cluster, todo, progress, performance_report)
        finally:
            if own:
                cluster.close()
    stored = [store.get(plan.run_params(r)) for r in plan.runs]
    return [r for r in stored if r is not None]


def _execute(
    plan: Plan,
    store: ResultsStore,
    cluster: DeviceCluster,
    todo: list[Any],
    progress: Callable[[int, int, Any], None] | None,
    performance_report: str | os.PathLike[str] | None,
) -> None:
    """Run and store each of ``todo`` on ``cluster``, in order; ``teardown`` runs even when a run fails."""
    # Later runs may build on earlier ones (a model trained, then streamed): they read them from the store.
    context = {**plan.setup(cluster), "store": store}
    context |= plan.before_runs(cluster, todo)
    report = performance_report or _default_performance_report(plan, todo)
    recording = _performance_report(report, cluster) if report else contextlib.nullcontext()
    try:
        with recording:
            progress_file.report(0, len(todo))
            for done, item in enumerate(todo, start=1):
                store.put(plan.run_params(item), *plan.execute(cluster, item, context))
                progress_file.report(done, len(todo), plan.label(item))
                if progress is not None:
                    progress(done, len(todo), item)
    finally:
        plan.teardown(context)


def _default_performance_report(plan: Plan, runs: list[Any]) -> Path | None:
    folder = os.environ.get("EDGELAB_PERFORMANCE_REPORTS")
    if not folder:
        return None
    experiment = plan.run_params(runs[0]).get("experiment", type(plan).__module__.rsplit(".", 1)[-1])
    return Path(folder) / f"{experiment}.html"


def _performance_report(path: str | os.PathLike[str], cluster: DeviceCluster) -> Any:
    """Dask's performance report of the block, written to ``path`` (its folder made first)."""
    from distributed import performance_report

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return _on_client(performance_report(filename=str(path)), cluster)


@contextlib.contextmanager
def _on_client(report: Any, cluster: DeviceCluster) -> Iterator[None]:
    # performance_report talks to the scheduler of the client made current: this cluster's.
    with cluster.client.as_current(), report:
        yield


def by_run(plan: Plan, runs: list[StoredRun]) -> dict[Any, StoredRun]:
    """The stored runs of ``plan`` keyed by the plan's own runs (those not stored are left out)."""
    keyed = {r.key: r for r in runs}
    return {run: keyed[key] for run in plan.runs if (key := run_key(plan.run_params(run))) in keyed}

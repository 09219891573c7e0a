"""What a paper's notebook calls: a few lines per step, the work in the experiment's module.

A notebook is its ``parameters`` cell (papermill injects into it) and then::

    start_device_launcher(scheduler_address)           # (a notebook with a cluster) TensorFlow loads meanwhile
    plan = notebook.prepare(experiment, globals())     # parameters checked, data loaded, plan printed
    print(experiment.plan_facts(plan))                  # what nbval checks before any run
    runs = notebook.run(plan, results_dir, dashboard_address)
    summary = experiment.summarize(plan, runs)
    print(experiment.run_facts(summary))                # the seeded, deterministic results nbval checks
    notebook.show(experiment.measurements(summary))     # timings and readings that vary from run to run
    items = notebook.report(figures, plan, summary, reports_dir, profile)
    notebook.show(items)

The experiment module declares its parameters dataclass as ``PARAMS`` and
builds its plan with ``prepare(**params)``; its figures module renders the
items with ``render_report(root, plan, results, *, notebook, parameters)``.
``results`` is what the notebook has after the runs: the experiment's summary
where it has one its items and checked lines read (park2020, jeon, the
compression and conv-cost timings), else the stored runs themselves, which
``run_facts(plan, runs)`` and ``measurements(plan, runs)`` read. The harness
owns the cluster: it is started only for runs the results store lacks and
closed when they are done.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from edgelab.common.errors import ConfigError
from edgelab.common.paths import reports_dir as default_reports_dir
from edgelab.common.results import ResultsStore, StoredRun
from edgelab.papers import EXPERIMENTS, harness
from edgelab.report.manifest import ReportItem, update_manifest


def prepare(module: ModuleType, namespace: dict[str, Any]) -> Any:
    """The experiment's plan from the notebook's own parameters, checked before any cluster work.

    Takes from ``namespace`` (the notebook's ``globals()``) every name the
    experiment's parameters dataclass (``module.PARAMS``) declares, builds the
    plan with ``module.prepare`` (which refuses a value it does not allow,
    naming the parameter) and prints what it holds. TensorFlow is imported
    first, so its start-up lines land in this cell and in no checked one.
    """
    import keras  # noqa: F401  (imported for its start-up lines, see above)

    values = {name: namespace[name] for name in module.PARAMS.__dataclass_fields__ if name in namespace}
    modules = sorted(name for name, value in values.items() if isinstance(value, ModuleType))
    if modules:  # an import that took a parameter's name: the notebook would pass a module as a value
        raise ConfigError(modules[0], values[modules[0]], "a parameter's value, not a module imported under its name")
    plan = module.prepare(**values)
    print(plan.describe())
    return plan


def run(
    plan: harness.Plan, results_dir: str | None = None, dashboard_address: str = "127.0.0.1:8787"
) -> list[StoredRun]:
    """Every run of ``plan``, from the results store or executed now on a cluster started for what it lacks.

    Prints one line per run stored, and the dashboard's link while a cluster
    runs; the cluster is closed when the runs are done (or one fails).
    """
    store = ResultsStore(results_dir)
    if not harness.pending(plan, store):
        print("every run is in the results store; no cluster started")

    def stored(done: int, total: int, item: Any) -> None:
        print(f"  run {done}/{total} stored: {plan.label(item)}", flush=True)

    return harness.run(plan, store=store, progress=stored, dashboard_address=dashboard_address, started=_dashboard)


def _dashboard(cluster: Any) -> None:
    from IPython.display import Markdown, display

    link, devices = cluster.dashboard_link, cluster.devices
    display(Markdown(f"Dask dashboard: [{link}]({link}) ({len(devices)} devices: {', '.join(devices)})"))


def notebook_of(plan: Any) -> str:
    """The notebook (``notebooks/<name>.ipynb``) whose experiment module made ``plan``."""
    module = type(plan).__module__
    name = next(nb for nb, experiment in EXPERIMENTS.items() if experiment == module)
    return f"notebooks/{name}.ipynb"


def report(
    figures: ModuleType, plan: Any, results: Any = None, reports_dir: str | None = None, profile: str = "smoke"
) -> list[ReportItem]:
    """Render the experiment's items, merge them into the manifest, print each one's verdict; return the items.

    ``figures.render_report(root, plan, results, notebook=..., parameters=...)``
    draws them; every item records the notebook and its parameters
    (``profile`` among them).
    """
    root = Path(reports_dir) if reports_dir else default_reports_dir()
    given = plan.report_parameters() if isinstance(plan, harness.Plan) else dict(vars(plan.params))
    items: list[ReportItem] = figures.render_report(
        root, plan, results, notebook=notebook_of(plan), parameters={"profile": profile, **given}
    )
    manifest = update_manifest(items, root=root)
    for item in items:
        print(f"{item.id}: {item.status} — {item.why}")
        for check in item.verdict.checks:
            print(f"    {check.name} [{check.kind}]: {check.measured} -> {check.outcome}")
    print(f"manifest: {manifest}")
    return items


def statuses(items: list[ReportItem]) -> str:
    """Each item's id and status, one a line."""
    return "\n".join(f"{item.id}: {item.status}" for item in items)


def show(shown: list[Any]) -> None:
    """Display each of ``shown``: an item's pages and figures, a table, a line of text."""
    from IPython.display import Image, Markdown, display

    for thing in shown:
        if isinstance(thing, ReportItem):
            for f in thing.files:
                if f.endswith(".md"):
                    display(Markdown(Path(f).read_text()))
                elif f.endswith(".png"):
                    display(Image(filename=f))
        elif isinstance(thing, str):
            print(thing)
        else:
            display(thing)

"""``reports/index.html``: every catalog id in order, each rendered beside the paper, with its status.

The page is built from the manifests alone (``reports/manifest.json`` and,
when a paper-sized run exists, ``reports/full-profile/manifest.json``) and the
files they list, so it is as true as they are. Each id shows its figure or
table (the tables carry the paper's values in their own rows), its status and
why, which of its checks are evidence, the data it ran on, its clock, the scale
it ran at — the paper-sized result where one exists, with a link to the smoke
one, and how that run is smaller than the paper's — and the executed notebook.
A summary at the top counts the ids of each paper by status: reproduced
(a prediction matched), consistent (only structural checks, counted apart),
differs, not judged by its reason class, not run; then how well the emulator
predicts every timed or memory cell (``edgelab.report.fidelity``, which writes
``fidelity.csv`` and its figure beside the page). The page is static and
self-contained: no script, nothing fetched from the network.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from edgelab.common.paths import reports_dir
from edgelab.common.results import atomic_write_text
from edgelab.report import catalog, fidelity, verdict

FULL_PROFILE_DIR = "full-profile"
#: How the page names each manifest status, in the summary's order.
LABELS = {
    "reproduced": "reproduced",
    "consistent": "consistent",
    "differs": "differs",
    "not judged": "not judged",
    "not run": "not yet",
}
#: The summary's columns: each status, and "not judged" split by its reason class.
COLUMNS = [
    ("reproduced", "reproduced (a prediction matched)"),
    ("consistent", "consistent (structural only)"),
    ("differs", "differs"),
    *((f"not judged: {r}", f"not judged: {r}") for r in verdict.REASONS),
    ("not yet", "not run"),
]


@dataclass
class Shown:
    """One id as the page shows it."""

    id: str
    status: str
    why: str
    scale: str  # "paper-sized" or "smoke"
    prefix: str  # the folder of the shown files, relative to the page ("" or "full-profile/")
    entry: dict[str, Any]
    other: str = ""  # the other scale's main file, relative to the page, when both exist
    failed: str = ""  # the error of its notebook's last run, when that run failed

    @property
    def images(self) -> list[str]:
        """The figures, relative to the page."""
        return [self.prefix + f for f in self.entry.get("files", []) if f.endswith(".png")]

    @property
    def tables(self) -> list[str]:
        """The Markdown tables (values beside the paper, verdict), relative to the page."""
        return [self.prefix + f for f in self.entry.get("files", []) if f.endswith(".md")]

    @property
    def column(self) -> str:
        """The summary column it counts in: its status, "not judged" by reason class."""
        label = LABELS.get(self.status, self.status)
        if self.status == "not judged":
            return f"not judged: {(self.entry.get('verdict') or {}).get('reason_class') or 'qualitative'}"
        return label

    @property
    def evidence(self) -> str:
        """Which of its checks are evidence: the predicted checks that hold, else what its checks are."""
        checks = (self.entry.get("verdict") or {}).get("checks") or []
        held = [c["name"] for c in checks if c.get("kind") == "predicted" and c.get("passed") is True]
        if held:
            return "predicted and holding: " + ", ".join(held)
        if not checks:
            return ""
        kinds = Counter(c.get("kind", "?") for c in checks)
        return ", ".join(f"{n} {k}" for k, n in kinds.items()) + " check(s); no prediction holds"

    @property
    def reduction(self) -> str:
        """How the shown run is smaller than the paper's ("" at the paper's size)."""
        return str(self.entry.get("reduction") or "")

    @property
    def notebook(self) -> str:
        """The executed notebook, relative to the page."""
        name = Path(self.entry.get("notebook") or "").name
        return f"{self.prefix}notebooks/{name}" if name else ""

    @property
    def data(self) -> str:
        """The data the item ran on, in a few words."""
        source = self.entry.get("data_source") or {}
        if not source:
            return ""
        parts = [str(source.get("name", "")), f"from {source['source']}" if source.get("source") else ""]
        return " ".join(p for p in parts if p)


def notebook_runs(root: Path) -> list[dict[str, Any]]:
    """Each notebook's last outcome under each profile (``reproduce.json``, written by ``edgelab reproduce``)."""
    rows = []
    for scale, folder in (("smoke", root), ("paper-sized", root / FULL_PROFILE_DIR)):
        path = folder / "reproduce.json"
        if path.is_file():
            for name, entry in sorted(json.loads(path.read_text()).items()):
                rows.append({"notebook": name, "scale": scale, **entry})
    return rows


def performance(root: Path) -> dict[str, Any]:
    """The benchmarks' history (``benchmarks/history.jsonl``, by ``benchmarks/track.py``), oldest run first.

    Returns the runs and, per headline, its values run by run (None where a run did not measure it), and
    the paths from ``root`` of the synchronization benchmark's scaling plot and of the scale benchmark's
    plot ("" where there is none).
    """
    path = root / "benchmarks" / "history.jsonl"
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    names = list(dict.fromkeys(h["name"] for r in runs for h in r.get("headlines", [])))
    by_run = [{h["name"]: h for h in r.get("headlines", [])} for r in runs]
    rows = []
    for name in names:
        latest = next(hs[name] for hs in reversed(by_run) if name in hs)
        rows.append({"name": name, "latest": latest, "history": [hs.get(name) for hs in by_run]})
    # The synchronization benchmark's scaling plot, where one was saved.
    scaling = "benchmarks/sync.png" if (root / "benchmarks" / "sync.png").is_file() else ""
    # A federated round from 10 to 10,000 devices beside Flower (benchmarks/bench_scale.py), where one was saved.
    scale = "benchmarks/scale.png" if (root / "benchmarks" / "scale.png").is_file() else ""
    return {"runs": runs, "rows": rows, "scaling": scaling, "scale": scale}


def _manifest(root: Path) -> dict[str, Any]:
    path = root / "manifest.json"
    return json.loads(path.read_text())["items"] if path.is_file() else {}


def collect(root: Path) -> list[Shown]:
    """Every catalog id as the page shows it, in catalog order."""
    smoke, full = _manifest(root), _manifest(root / FULL_PROFILE_DIR)
    shown = []
    for item_id in catalog.IDS:
        small, big = smoke.get(item_id), full.get(item_id)
        if big and big.get("files"):
            entry, scale, prefix = big, "paper-sized", f"{FULL_PROFILE_DIR}/"
            other = _main_file(small, "") if small else ""
        elif small and small.get("files"):
            entry, scale, prefix, other = small, "smoke", "", ""
        else:
            entry = small or big or {"status": "not run", "why": catalog.not_yet(item_id), "files": []}
            scale, prefix, other = "", "", ""
        shown.append(Shown(item_id, entry["status"], entry.get("why", ""), scale, prefix, entry, other))
    return shown


def _main_file(entry: dict[str, Any], prefix: str) -> str:
    files = entry.get("files") or []
    for ext in (".png", ".md"):
        for f in files:
            if f.endswith(ext):
                return prefix + f
    return ""


def _markdown(root: Path, relative: str) -> str:
    """A Markdown file as HTML for the page: its relative images and links re-pointed from its folder to the page's."""
    from markdown_it import MarkdownIt

    # No raw HTML from the files: the page shows their text, it does not run it.
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse((root / relative).read_text(encoding="utf-8"))
    folder = Path(relative).parent
    for token in tokens:
        for t in [token, *(token.children or [])]:
            for attr in ("src", "href"):
                target = t.attrGet(attr)
                if isinstance(target, str) and _is_relative(target):
                    t.attrSet(attr, (folder / target).as_posix())
    return str(md.renderer.render(tokens, md.options, {}))


def _is_relative(target: str) -> bool:
    """A path inside the reports (not a URL, an absolute path or an anchor)."""
    return bool(target) and ":" not in target.split("/")[0] and not target.startswith(("/", "#"))


def _percent(value: float) -> str:
    return "" if value != value else f"{value:.1%}"  # NaN: no predicted cell


def _fidelity(made: fidelity.Fidelity) -> dict[str, Any]:
    """The fidelity section's values as the page shows them (empty: no cell, no section)."""
    if not made.figure:
        return {}
    overall = made.overall()
    core = made.overall(fidelity.CORE)
    items = [
        {**r, "median_error": _percent(r["median_error"]), "worst_error": _percent(r["worst_error"])}
        for r in made.summary.to_dict("records")
    ]
    inconsistent = [
        {"id": r["id"], "cell": r["cell"], "paper": f"{r['paper']:.4g}", "emulated": f"{r['emulated']:.4g}",
         "reason": r["paper_inconsistent"]}
        for r in made.inconsistent.to_dict("records")
    ]  # fmt: skip
    return {
        "csv": fidelity.CSV_NAME,
        "summary_csv": fidelity.SUMMARY_NAME,
        "figure": made.figure,
        "cells": overall["cells"],
        "median": _percent(overall["median"]),
        "worst": _percent(overall["worst"]),
        "worst_at": overall["worst_at"],
        "core_items": ", ".join(f"{item} {metric}" for item, metric in fidelity.CORE),
        "core_cells": core["cells"],
        "core_median": _percent(core["median"]),
        "core_worst": _percent(core["worst"]),
        "core_worst_at": core["worst_at"],
        "per_item": items,
        "inconsistent": inconsistent,
    }


_TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>edgelab — reproduction report</title>
<link rel="icon" href="data:,">
<style>
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; padding: 0 1rem; color: #222; }
h3 { margin-bottom: .3rem; }
.item { border-top: 1px solid #ddd; padding: .6rem 0 1rem; }
.status { font-size: .8rem; padding: .1rem .5rem; border-radius: .6rem; margin-left: .5rem; color: #fff; }
.reproduced { background: #2a7d3b; } .differs { background: #b5561a; } .consistent { background: #4d7f8f; }
.not-judged { background: #6b6b9a; } .not-yet { background: #888; }
.why { color: #444; margin: .2rem 0; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .1rem .8rem; font-size: .9rem; margin: .4rem 0; }
dt { color: #666; } dd { margin: 0; }
img { max-width: 100%; height: auto; display: block; margin: .5rem 0; }
table { border-collapse: collapse; font-size: .85rem; margin: .5rem 0; }
td, th { border: 1px solid #ccc; padding: .15rem .4rem; text-align: right; }
.summary td, .summary th { text-align: left; }
details { margin: .4rem 0; } summary { cursor: pointer; color: #245; }
.rendered h1 { font-size: 1.05rem; }
</style>
</head>
<body>
<h1>edgelab — every figure and table of the four documents</h1>
<p>Generated {{ generated }} from <code>manifest.json</code>{% if has_full %} and
<code>full-profile/manifest.json</code>{% endif %}. Each id shows the paper-sized result where one exists,
else the smoke run; the tables carry the paper's values in their own rows.</p>
<p>Only a prediction (a value computed without the paper's cell, not true by construction: an emulated time, a
trained accuracy, bytes counted against the paper's formula) can make an id <em>reproduced</em>; an id whose checks
are all structural (counts, shapes, a formula against itself, the cluster the run configured) is
<em>consistent</em>, counted apart. A failed correctness check makes an id <em>differs</em> and fails its notebook.</p>
<table class="summary">
<tr><th>status</th><th>ids</th></tr>
{% for label, n in counts %}<tr><td>{{ label }}</td><td>{{ n }}</td></tr>
{% endfor %}<tr><th>all</th><th>{{ total }}</th></tr>
</table>
<table class="summary per-paper">
<tr><th>paper</th>{% for c in columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for doc, row in per_paper %}<tr><td>{{ doc }}</td>{% for n in row %}<td>{{ n }}</td>{% endfor %}</tr>
{% endfor %}<tr><th>all</th>{% for n in totals %}<th>{{ n }}</th>{% endfor %}</tr>
</table>
{% if fid %}<h2 id="fidelity">How well the emulator predicts</h2>
<p>Every timed or memory cell of the papers that has both a paper value and an emulated one, the paper's value (x)
against the emulated value (y): <a href="{{ fid.csv }}">{{ fid.csv }}</a>, per item
<a href="{{ fid.summary_csv }}">{{ fid.summary_csv }}</a>. Each item's values are its paper-sized run's where there is
one, else its smoke run's. A cell the clock was fitted on is drawn hollow: it is no prediction. A cell the paper
contradicts itself on is drawn as a cross. The error is |emulated &minus; paper| / paper, over the predicted cells
only (neither fitted nor paper-inconsistent); dotted lines: &plusmn;25%.</p>
<img src="{{ fid.figure }}" alt="paper value against emulated value for every timed or memory cell, log axes">
<p><strong>Over the {{ fid.cells }} predicted cells: median error {{ fid.median }}, worst {{ fid.worst }}
({{ fid.worst_at }}).</strong></p>
{% if fid.core_cells %}<p><strong>Over the {{ fid.core_cells }} predicted training, inference and pipeline times
the device models (one per board, one per Zhang tier) are held to ({{ fid.core_items }}): median error
{{ fid.core_median }}, worst {{ fid.core_worst }} ({{ fid.core_worst_at }}).</strong></p>
{% endif %}<table class="summary">
<tr><th>item</th><th>metric</th><th>board</th><th>run</th><th>cells</th><th>fitted</th><th>paper-inconsistent</th>
<th>predicted</th><th>median error</th><th>worst error</th><th>worst cell</th></tr>
{% for r in fid.per_item %}<tr><td>{{ r.id }}</td><td>{{ r.metric }}</td><td>{{ r.board }}</td><td>{{ r.profile }}</td>
<td>{{ r.cells }}</td><td>{{ r.fitted }}</td><td>{{ r.paper_inconsistent }}</td><td>{{ r.predicted }}</td>
<td>{{ r.median_error }}</td><td>{{ r.worst_error }}</td><td>{{ r.worst_cell }}</td></tr>
{% endfor %}</table>
{% if fid.inconsistent %}<p>Left apart, the cells the paper contradicts itself on:</p>
<ul>
{% for r in fid.inconsistent %}<li>{{ r.id }} {{ r.cell }} (paper {{ r.paper }}, emulated {{ r.emulated }}):
{{ r.reason }}</li>
{% endfor %}</ul>
{% endif %}
{% endif %}
{% if runs %}<h2>Notebooks</h2>
<table class="summary">
<tr><th>notebook</th><th>scale</th><th>last run</th><th>finished</th><th>seconds</th><th>why</th></tr>
{% for r in runs %}<tr><td>{{ r.notebook }}</td><td>{{ r.scale }}</td><td>{{ r.status }}</td><td>{{ r.finished }}</td>
<td>{{ r.get("seconds", "") }}</td><td>{{ r.get("error") or r.get("reason") or "" }}</td></tr>
{% endfor %}</table>
<p>A notebook whose last run failed or did not finish ("started": interrupted, or still running) keeps the items
of its earlier run, if any; they are marked below.</p>
{% endif %}
{% if perf.rows %}<h2 id="performance">Performance</h2>
<p>Headline ratios of the benchmarks (<code>benchmarks/track.py</code>), each measured side by side in one run;
the latest value first, then every run so far, oldest first (<a href="benchmarks/history.jsonl">history.jsonl</a>;
details in <code>benchmarks/*.md</code>).</p>
<table class="summary">
<tr><th>headline</th><th>target</th><th>latest</th><th>met</th>
{% for r in perf.runs %}<th>{{ r.date[:10] }} {{ r.commit }}{% if r.quick %} (quick){% endif %}</th>{% endfor %}</tr>
{% for row in perf.rows %}<tr><td>{{ row.name }}</td><td>{{ row.latest.target }}</td>
<td>{{ "%.3g" | format(row.latest.value) }}{{ row.latest.unit }}</td><td>{{ "yes" if row.latest.met else "no" }}</td>
{% for h in row.history %}<td>{{ "%.3g" | format(h.value) if h else "" }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% if perf.scaling %}<p>How a synchronous round scales with the devices, each transport (rounds per second and the
host's CPU per round; <code>benchmarks/sync.md</code>):</p>
<img src="{{ perf.scaling }}" alt="synchronous rounds per second and host CPU per round against devices">
{% endif %}
{% if perf.scale %}<p>A federated round as the devices grow from 10 to 10,000: edgelab's virtual devices beside
Flower's simulation engine (seconds per round, start-up, peak memory; <code>benchmarks/scale.md</code>):</p>
<img src="{{ perf.scale }}" alt="seconds per round, start-up and peak memory against devices, edgelab and Flower">
{% endif %}
{% endif %}
{% for doc, title, items in documents %}
<h2 id="{{ doc }}">{{ title }}</h2>
{% for it in items %}
<section class="item" id="{{ it.id | replace('/', '-') }}">
<h3>{{ it.id }}<span class="status {{ label_of(it.status) | replace(' ', '-') }}">{{ label_of(it.status) }}</span></h3>
{% if it.why %}<p class="why">{{ it.why }}</p>{% endif %}
{% if it.failed %}<p class="why"><strong>Its notebook's last run failed</strong> ({{ it.failed }}):
what is shown is from an earlier run.</p>{% endif %}
{% if it.scale %}<dl>
<dt>scale</dt><dd>{{ it.scale }}{% if it.other %} (<a href="{{ it.other }}">smoke result</a>){% endif %}</dd>
{% if it.data %}<dt>data</dt><dd>{{ it.data }}</dd>{% endif %}
{% if it.evidence %}<dt>evidence</dt><dd>{{ it.evidence }}</dd>{% endif %}
{% if it.reduction %}<dt>smaller than the paper</dt><dd>{{ it.reduction }}</dd>{% endif %}
{% if it.entry.clock %}<dt>clock</dt><dd>{{ it.entry.clock }}</dd>{% endif %}
{% if it.notebook %}<dt>notebook</dt><dd><a href="{{ it.notebook }}">{{ it.notebook }}</a></dd>{% endif %}
</dl>{% endif %}
{% for img in it.images %}<img src="{{ img }}" alt="{{ it.id }}">
{% endfor %}
{% for table in it.tables %}<details{% if not it.images %} open{% endif %}>
<summary>values beside the paper, and the verdict ({{ table }})</summary>
<div class="rendered">{{ rendered[table] | safe }}</div></details>
{% endfor %}
</section>
{% endfor %}
{% endfor %}
</body>
</html>
"""


def render(root: Path | None = None) -> Path:
    """Write ``index.html`` into ``root`` (default: ``reports/``) from its manifests; return its path."""
    import jinja2

    root = root or reports_dir()
    shown = collect(root)
    runs = notebook_runs(root)
    failed = {
        (r["scale"], r["notebook"]): r.get("error") or "started, did not finish"
        for r in runs
        if r["status"] in ("failed", "started")
    }
    for s in shown:
        s.failed = failed.get((s.scale, Path(s.entry.get("notebook") or "").stem), "")
    counts = Counter(s.column for s in shown)
    per_paper = [
        (doc, [sum(1 for s in shown if s.id.startswith(f"{doc}/") and s.column == key) for key, _ in COLUMNS])
        for doc in catalog.DOCUMENTS
    ]
    rendered = {t: _markdown(root, t) for s in shown for t in s.tables if (root / t).is_file()}
    for s in shown:  # a file the manifest lists but that is gone is not shown as if it were there
        s.entry = {**s.entry, "files": [f for f in s.entry.get("files", []) if (root / (s.prefix + f)).is_file()]}
    fid = _fidelity(fidelity.write(root))
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    page = env.from_string(_TEMPLATE).render(
        generated=datetime.now(UTC).isoformat(timespec="seconds"),
        has_full=(root / FULL_PROFILE_DIR / "manifest.json").is_file(),
        counts=[(label, counts[key]) for key, label in COLUMNS if counts[key]],
        columns=[label for _, label in COLUMNS],
        per_paper=per_paper,
        totals=[counts[key] for key, _ in COLUMNS],
        total=len(shown),
        documents=[
            (doc, title, [s for s in shown if s.id.startswith(f"{doc}/")]) for doc, title in catalog.DOCUMENTS.items()
        ],
        rendered=rendered,
        runs=runs,
        perf=performance(root),
        fid=fid,
        label_of=lambda status: LABELS.get(status, status),
    )
    path = root / "index.html"
    atomic_write_text(path, page)
    return path

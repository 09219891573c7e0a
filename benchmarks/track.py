"""Run the benchmarks with one command and keep their headline ratios with the history of earlier runs.

Each benchmark measures its ratios side by side in one run and writes its own
JSON under ``reports/benchmarks/`` (see benchmarks/README.md); this runs them one after the
other, each in a process of its own, reads the headline numbers back, and
appends one record to ``reports/benchmarks/history.jsonl``: the date, the
commit, the host and its load, and for each headline its value, its target
and whether it is met. ``edgelab report`` shows the latest record and the
history on the report page.

    python benchmarks/track.py                  # training, sync, pipeline, pipeline_training, scale: about 1 h here
    python benchmarks/track.py --quick          # smaller sizes, one repeat: about 15 min
    python benchmarks/track.py --only sync --only reproduce
    # reproduce: the smoke reproduction's wall time, on a fresh results store (about 10 min)
    python benchmarks/track.py --saved          # record the JSONs already there, running nothing

Run it on a quiet machine: the ratios are side by side, but the absolute
numbers (and the reproduction's wall time) move with the host's load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUDGET_MIN = 15.0  # the README's main command, every notebook's smoke profile


def _args(quick: bool) -> dict[str, list[str]]:
    """Each benchmark's command-line arguments, full or quick."""
    if quick:
        return {
            "training": ["--samples", "6400", "--repeats", "1"],
            "sync": ["--repeats", "1", "--rounds", "60", "--samples", "6400"],
            "pipeline": ["--repeats", "1"],
            "pipeline_training": ["--repeats", "1", "--steps", "3"],
            "scale": ["--devices", "10", "100", "1000", "--repeats", "1", "--rounds", "3"],
        }
    return {"training": [], "sync": [], "pipeline": [], "pipeline_training": [], "scale": []}


Headline = dict[str, Any]


def _headline(name: str, value: float, target: str, met: bool | None, unit: str = "") -> Headline:
    return {"name": name, "value": round(float(value), 4), "unit": unit, "target": target, "met": met}


def training_headlines(result: dict[str, Any]) -> list[Headline]:
    """Edgelab against plain Keras fit on one device, samples/s (target >= 0.9)."""
    rows = []
    for model, m in sorted(result["throughput"]["models"].items()):
        ratio = m.get("ratio_median", m.get("ratio"))
        if ratio is None:
            continue
        rows.append(_headline(f"training/{model}: edgelab / Keras fit", ratio, ">= 0.9", ratio >= 0.9))
    return rows


def sync_headlines(result: dict[str, Any]) -> list[Headline]:
    """Per-round overhead over its floor (<= 1.5), the least plumbing's beside it, and the peers (>= 1).

    The peers: MWMS steps/s, Flower rounds/s, start-up.
    """
    rows = []
    for cell in result.get("rounds", {}).get("summary", []):
        if cell["devices"] > 1 and cell["transport"] in ("direct", "allreduce"):
            value = cell["overhead_over_floor"]
            # The parameter server keeps its old name, so its history reads on.
            name = "" if cell["transport"] == "direct" else f" ({cell['transport']})"
            rows.append(
                _headline(f"sync/{cell['devices']} devices{name}: overhead / floor", value, "<= 1.5", value <= 1.5)
            )
    # The least plumbing a round can have on the same host, against the same target: what the host allows.
    for row in result.get("rounds", {}).get("bare_summary", []):
        if row["devices"] > 1:
            value = row["overhead_over_floor"]
            name = f"sync/{row['devices']} devices, the least plumbing (reference): overhead / floor"
            rows.append(_headline(name, value, "<= 1.5", value <= 1.5))
    mwms = result.get("mwms") or {}
    if "ratio" in mwms:
        rows.append(_headline("sync: edgelab / MWMS steps/s", mwms["ratio"], ">= 1.0", mwms["ratio"] >= 1.0))
    fedavg = result.get("fedavg") or {}
    for key, label in (("rounds_ratio", "edgelab / Flower rounds/s"), ("startup_ratio", "Flower / edgelab start-up")):
        if key in fedavg:
            rows.append(_headline(f"sync: {label}", fedavg[key], ">= 1.0", fedavg[key] >= 1.0))
    return rows


def pipeline_headlines(result: dict[str, Any]) -> list[Headline]:
    """Pipelined inference's steady throughput over its bound (target >= 0.9)."""
    value = result["A_steady_over_bound_median"]
    return [_headline("pipeline: steady throughput / bound", value, f">= {result['A_target']}", bool(result["A_met"]))]


def pipeline_training_headlines(result: dict[str, Any]) -> list[Headline]:
    """Pipelined training's device-clock throughput over its schedule's ideal, worst configuration (>= 0.8)."""
    value = result["A_over_ideal_worst_median"]
    return [
        _headline("pipelined training: throughput / ideal", value, f">= {result['A_target']}", bool(result["A_met"]))
    ]


def scale_headlines(result: dict[str, Any]) -> list[Headline]:
    """At each size both ran: Flower's compiled-loop client's s/round over edgelab's virtual devices'.

    Target: >= 2.0 from 100 devices on (issue 55: twice Flower's rounds per second at 100 and 1,000 clients),
    >= 1.0 below.
    """
    rows = []
    for row in result.get("summary", []):
        value = row.get("flower_compiled_over_edgelab")
        if row["side"] == "edgelab-virtual" and value is not None:
            target = 2.0 if row["devices"] >= 100 else 1.0
            name = f"scale/{row['devices']:,} devices: Flower / edgelab s/round"
            rows.append(_headline(name, value, f">= {target:.1f}", value >= target))
    return rows


HEADLINES: dict[str, Callable[[dict[str, Any]], list[Headline]]] = {
    "training": training_headlines,
    "sync": sync_headlines,
    "pipeline": pipeline_headlines,
    "pipeline_training": pipeline_training_headlines,
    "scale": scale_headlines,
}
BENCHES = (*HEADLINES, "reproduce")


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def run_bench(name: str, args: list[str], out_dir: Path) -> tuple[list[Headline], float, str]:
    """Run one benchmark in its own process; its headlines, wall seconds and outcome ("ok" or why not)."""
    start = time.perf_counter()
    cmd = [sys.executable, str(HERE / f"bench_{name}.py"), *args, "--out-dir", str(out_dir)]
    done = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return [], seconds, f"exit {done.returncode}: {tail[0][:200]}"
    result = json.loads((out_dir / f"{name}.json").read_text())
    return HEADLINES[name](result), seconds, "ok"


def run_reproduce() -> tuple[list[Headline], float, str]:
    """The smoke reproduction's wall time on a fresh results store (target: the README's 15 minutes)."""
    with tempfile.TemporaryDirectory(prefix="edgelab-track-") as scratch:
        env = {**os.environ, "EDGELAB_RESULTS_DIR": f"{scratch}/results", "EDGELAB_REPORTS_DIR": f"{scratch}/reports"}
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "edgelab.cli", "reproduce", "--force"], cwd=ROOT, env=env, capture_output=True
        )
        seconds = time.perf_counter() - start
    minutes = seconds / 60
    outcome = "ok" if done.returncode == 0 else f"exit {done.returncode}"
    return (
        [_headline("reproduce: smoke wall time", minutes, f"<= {BUDGET_MIN:g}", minutes <= BUDGET_MIN, "min")],
        seconds,
        outcome,
    )


def _date_of(result: dict[str, Any]) -> str:
    """When a saved result was measured, as it says."""
    host = result.get("host") or {}
    return str(result.get("date") or host.get("date_utc") or host.get("date") or "date unknown")


def append_history(out_dir: Path, record: dict[str, Any]) -> Path:
    """Append one record to ``history.jsonl`` (one JSON object per line, oldest first)."""
    path = out_dir / "history.jsonl"
    out_dir.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and one repeat")
    parser.add_argument("--only", action="append", choices=BENCHES, help="run only this one; may repeat")
    parser.add_argument("--out-dir", type=Path, default=None, help="default: reports/benchmarks")
    parser.add_argument(
        "--saved", action="store_true", help="record the results already in --out-dir (their own dates), run nothing"
    )
    args = parser.parse_args(argv)
    out_dir = args.out_dir or Path(os.environ.get("EDGELAB_REPORTS_DIR") or ROOT / "reports") / "benchmarks"
    chosen = args.only or list(HEADLINES)
    load_start = os.getloadavg()[0]
    record: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "host": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_start": round(load_start, 2)},
        "quick": args.quick,
        "saved": args.saved,
        "benchmarks": {},
        "headlines": [],
    }
    failed = 0
    for name in chosen:
        print(f"track: {name} ...", flush=True)
        if args.saved:
            saved = out_dir / f"{name}.json"
            if name == "reproduce" or not saved.is_file():
                continue
            result = json.loads(saved.read_text())
            headlines, seconds, outcome = HEADLINES[name](result), 0.0, f"saved, {_date_of(result)}"
        elif name == "reproduce":
            headlines, seconds, outcome = run_reproduce()
        else:
            headlines, seconds, outcome = run_bench(name, _args(args.quick)[name], out_dir)
        failed += not outcome.startswith(("ok", "saved"))
        record["benchmarks"][name] = {"seconds": round(seconds, 1), "outcome": outcome}
        record["headlines"] += headlines
        for h in headlines:
            print(
                f"  {h['name']}: {h['value']:.3g}{h['unit']} (target {h['target']}: {'met' if h['met'] else 'not met'})"
            )
        print(f"  {name}: {outcome} in {seconds:.0f} s", flush=True)
    record["host"]["load_end"] = round(os.getloadavg()[0], 2)
    path = append_history(out_dir, record)
    print(f"track: history in {path}; `edgelab report` draws it on reports/index.html")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

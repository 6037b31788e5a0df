"""``meshrun report``: what runs achieved, and how throughput scaled between them.

    meshrun report logs/run-8gpu logs/run-16gpu [--baseline logs/run-8gpu] [--json]

The seeds promise figures (seed 004: 1.7-1.9x from one node to two; seed 001: 6-7x
from 8 to 64 GPUs); this command checks such a promise from two runs' log folders.
Pure and torch-free: it reads what a run left in its log folder, for any run:

* ``plan.node<k>.json`` (the lowest ``k`` there): world size, nodes, processes per node,
  device, GPU names, the recipe and its effective batch;
* what meshrun itself saw (:mod:`meshrun.reports.run_info`): when the nodes started and
  ended, the time to the first workers, the outcome, restarts, the job's first cause and
  the diagnosis codes;
* ``metrics.jsonl`` when there is one (rank 0 of a recipe, :mod:`meshrun.recipes._loop`,
  or a script's own ``meshrun.log({...})``): one record per logged step. Without it the
  throughput columns are ``-`` and the run takes no part in a scaling comparison.

Per run: the medians over the records that are not a run's first step (start-up and
lazy initialisation are timed alone and marked ``first_step``) of ``samples_per_s``,
``step_time_s`` and ``mfu``; samples/s per process; the last loss (and PSNR). A resumed
run's records all count (each segment's first step left out).

Between runs, against the baseline (``--baseline``, default the run with the smallest
world size, the first given on a tie): ``speedup`` = samples/s over the baseline's,
``ideal`` = world size over the baseline's, ``efficiency`` = speedup / ideal (1.0 is
linear scaling). A seed's "1.7-1.9x from 1 to 2 nodes" is efficiency 0.85-0.95. Runs
with different effective batches are compared all the same (samples/s is throughput
either way), with a note, as are runs of different recipes or devices, with a warning:
such a ratio says little.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import UsageError
from .goodput import Goodput, record_time
from .goodput import compute as goodput
from .goodput import line as goodput_text

_PLAN = re.compile(r"^plan\.node(\d+)\.json$")


@dataclass
class RunSummary:
    """One run's figures, from its log folder."""

    path: str
    run_id: str
    world_size: int
    nnodes: int
    nproc_per_node: int
    device: str                 # "cuda" | "cpu"
    gpu_name: str               # "" on CPU
    recipe: str                 # "" for a user's script
    effective_batch: int | None
    records: int                # metrics records read (0: none, no metrics.jsonl)
    steps: tuple[int, int] | None   # first and last step logged
    samples_per_s: float | None
    step_time_s: float | None
    samples_per_s_per_process: float | None
    mfu: float | None
    loss: float | None          # of the last record
    psnr: float | None
    command: str = ""           # what ran (a script, a module, a recipe)
    outcome: str = "unknown"    # succeeded | failed | unfinished | unknown (run_info)
    wall_s: float | None = None
    startup_s: float | None = None
    restarts: int = 0
    cause: str = ""
    diagnosis: list[str] = field(default_factory=list)
    goodput: dict[str, Any] | None = None   # reports/goodput.py: where the wall time went
    goodput_why: str = ""                   # why there is none
    notes: list[str] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)  # node_steps.json's rows
    slow: list[str] = field(default_factory=list)  # the straggler notices (events.node0.jsonl)


@dataclass
class Scaling:
    """One run against the baseline."""

    path: str
    speedup: float
    ideal: float
    efficiency: float


@dataclass
class Report:
    runs: list[RunSummary]
    baseline: str | None        # path of the baseline run (None with one run)
    scaling: list[Scaling]
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _fail(path: str, message: str, hint: str) -> UsageError:
    return UsageError(f"{path}: {message}", subject="RUN_DIR", hint=hint, code="report-bad-run-dir")


def _plan(path: str) -> dict[str, Any]:
    try:
        names = os.listdir(path)
    except OSError as exc:
        raise _fail(path, f"cannot be read ({exc.strerror})", "check its permissions") from None
    found = sorted((int(m[1]), name) for name in names if (m := _PLAN.match(name)))
    if not found:
        raise _fail(path, "no plan.node<k>.json in this folder",
                    "name a run's log folder, <log-dir>/<run-id>, as meshrun run wrote it")
    name = os.path.join(path, found[0][1])
    try:
        with open(name, encoding="utf-8") as f:
            plan = json.load(f)
    except (OSError, ValueError) as exc:
        raise _fail(name, f"unreadable ({exc})", "the run's plan file is damaged; "
                    "leave this run out") from None
    if not isinstance(plan, dict) or not isinstance(plan.get("world_size"), int):
        raise _fail(name, "has no world_size", "the run's plan file is damaged; "
                    "leave this run out")
    return plan


def _records(path: str) -> list[dict[str, Any]]:
    """``metrics.jsonl``'s records; [] when the run has none (a script that logs nothing)."""
    name = os.path.join(path, "metrics.jsonl")
    try:
        if os.path.exists(name) and not os.path.isfile(name):
            raise _fail(name, "is not a regular file (a FIFO, a device or a folder)",
                        "leave this run out, or put the run's own metrics.jsonl back")
        with open(name, encoding="utf-8", errors="replace") as f:  # bytes: a bad line below
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise _fail(name, f"unreadable ({exc.strerror})", "check its permissions") from None
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):   # a diverged value ("nan", as meshrun.log writes
            for key in _NUMBERS:          # it; NaN) or a null: not there, never a broken run
                value = record.get(key, 0)
                if value is None or value in _NOT_FINITE or (
                        isinstance(value, float) and not math.isfinite(value)):
                    record.pop(key)
        if not (isinstance(record, dict) and isinstance(record.get("step"), int)
                and not isinstance(record.get("step"), bool)
                and all(_number(record[k]) for k in _NUMBERS if k in record)):
            raise _fail(f"{name}:{number}", "is not a metrics record (a JSON object with a "
                        "whole-number step; loss, step_time_s, samples_per_s, time numbers "
                        "where given)",
                        "remove or mend that line (a run killed while writing can leave "
                        "half a line at the end)")
        out.append(record)
    return out


_NUMBERS = ("loss", "step_time_s", "samples_per_s", "time", "mfu", "psnr")
_NOT_FINITE = ("nan", "inf", "-inf", "NaN", "Infinity", "-Infinity")


def _this_runs_records(path: str, info: Any) -> list[dict[str, Any]]:
    """The records of the run in ``path``. ``metrics.jsonl`` stays in the run folder across
    reruns under one run id (a resumed run continues its history), so records that carry
    their time (``meshrun.log``'s ``time``, the recipes' ``at``) count only inside this run's
    span, and an earlier run (``<run>/earlier/<n>``) takes its own from the run folder's file.
    Records without a time (written before the recipes recorded it) all count for the
    newest run."""
    parent = os.path.dirname(os.path.dirname(os.path.normpath(path)))
    earlier = os.path.basename(os.path.dirname(os.path.normpath(path))) == "earlier"
    records = _records(path)
    if not records and earlier:
        records = [r for r in _records(parent) if record_time(r) is not None]
    if info.started is not None and any(record_time(r) is not None for r in records):
        end = info.ended + 5 if info.ended is not None else float("inf")
        records = [r for r in records if (t := record_time(r)) is None
                   or info.started - 5 <= t <= end]
        if earlier:
            records = [r for r in records if record_time(r) is not None]
    return records


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _step_times(records: list[dict[str, Any]]) -> list[float]:
    """Seconds per step: the records' own ``step_time_s``, else from consecutive records'
    ``time`` (``meshrun.log`` writes it) over the steps between them."""
    own = [r["step_time_s"] for r in records if "step_time_s" in r and not r.get("first_step")]
    if own:
        return own
    timed = [r for r in records if "time" in r]
    out = []
    for a, b in zip(timed, timed[1:]):
        if b["step"] > a["step"] and b["time"] >= a["time"]:
            out.append((b["time"] - a["time"]) / (b["step"] - a["step"]))
    return out


def summarize(path: str) -> RunSummary:
    """The figures of the run whose log folder is ``path``."""
    from . import run_info

    if not os.path.isdir(path):
        raise _fail(path, "is not a folder", "name a run's log folder, <log-dir>/<run-id>")
    plan = _plan(path)
    info = run_info.read(path)
    records = _this_runs_records(path, info)
    notes: list[str] = []
    steady = [r for r in records if not r.get("first_step")]
    if records and not steady:
        steady = records
        notes.append("only first steps were logged: their times include start-up")
    if not records:
        notes.append("no metrics.jsonl: what meshrun saw only (a script can add its own "
                     "figures with meshrun.log({...}), docs/recipes.md)")
    job = plan.get("job") or {}
    gpus = plan.get("gpu_names") or []
    world = plan["world_size"]
    rates = [r["samples_per_s"] for r in steady if "samples_per_s" in r]
    rate = statistics.median(rates) if rates else None
    times = _step_times(records)
    mfus = [r["mfu"] for r in steady if _number(r.get("mfu"))]
    losses = [r for r in records if "loss" in r]
    last = losses[-1] if losses else (records[-1] if records else {})
    command = plan.get("command") or []
    spent, why_not = goodput(info.started, info.ended, records)
    return RunSummary(
        path=path, run_id=str(plan.get("run_id", os.path.basename(path))), world_size=world,
        nnodes=int(plan.get("nnodes", 1)), nproc_per_node=int(plan.get("nproc_per_node", world)),
        device=str(plan.get("device", "")), gpu_name=str(gpus[0]) if gpus else "",
        recipe=str(job.get("recipe") or ""), effective_batch=job.get("effective_batch"),
        records=len(records),
        steps=(records[0]["step"], records[-1]["step"]) if records else None,
        samples_per_s=rate, step_time_s=statistics.median(times) if times else None,
        samples_per_s_per_process=rate / world if rate is not None else None,
        mfu=statistics.median(mfus) if mfus else None,
        loss=last.get("loss"), psnr=last.get("psnr"), notes=notes, nodes=_node_steps(path),
        slow=_slow_lines(path),
        command=" ".join(str(w) for w in command) if isinstance(command, list) else "",
        outcome=info.outcome, wall_s=info.wall_s, startup_s=info.startup_s,
        restarts=info.restarts, cause=info.cause, diagnosis=info.diagnosis,
        goodput=spent.to_json() if spent is not None else None, goodput_why=why_not)


def _node_steps(path: str) -> list[dict[str, Any]]:
    """Each node's mean step and compute time and share of time working, as node 0's
    straggler check summed them up (``node_steps.json``; none when the check was off)."""
    try:
        with open(os.path.join(path, "node_steps.json"), encoding="utf-8") as f:
            rows = json.load(f).get("nodes", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [r for r in rows if isinstance(r, dict) and isinstance(r.get("node"), int)]


def _slow_lines(path: str) -> list[str]:
    """The straggler notices node 0 printed (``events.node0.jsonl``)."""
    try:
        with open(os.path.join(path, "events.node0.jsonl"), encoding="utf-8",
                  errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("line"), str) \
                and record.get("event") in ("node-slow", "node-recovered"):  # not the timeline
            out.append(record["line"])
    return out


def report(paths: list[str], baseline: str | None = None) -> Report:
    """Summaries of ``paths`` and, with two or more, their scaling against the baseline."""
    if not paths:
        raise UsageError("'meshrun report' needs one or more run log folders",
                         subject="RUN_DIR", hint="meshrun report logs/<run-id> [logs/<run-id> ...]",
                         code="no-run-dirs")
    paths = [os.path.normpath(p) for p in paths]
    if baseline is not None:
        baseline = os.path.normpath(baseline)
        if baseline not in paths:
            paths = [baseline, *paths]
    runs = [summarize(p) for p in paths]
    if len(runs) < 2:
        return Report(runs=runs, baseline=None, scaling=[])
    measured = [r for r in runs if r.samples_per_s is not None] or runs
    base = (runs[paths.index(baseline)] if baseline is not None
            else min(measured, key=lambda r: r.world_size))
    warnings = []
    for what, key in (("recipes", "recipe"), ("devices", "device"), ("GPU models", "gpu_name")):
        seen = sorted({getattr(r, key) or "-" for r in runs})
        if len(seen) > 1:
            warnings.append(f"the runs differ in {what} ({', '.join(seen)}): their ratio "
                            "says little about scaling")
    batches = sorted({r.effective_batch for r in runs if r.effective_batch})
    if len(batches) > 1:
        warnings.append("effective batches differ (" + ", ".join(map(str, batches)) + "): "
                        "samples/s is compared as throughput, not as time to a loss")
    unmeasured = [r for r in runs if r.samples_per_s is None]
    for run in unmeasured:
        warnings.append(f"{run.path} logged no samples/s: left out of the scaling")
    if base.samples_per_s is None or base.samples_per_s <= 0:
        if baseline is not None or len(runs) - len(unmeasured) >= 2:
            raise _fail(base.path, "has no throughput to compare with (no samples/s)",
                        "choose another --baseline")
        return Report(runs=runs, baseline=None, scaling=[], warnings=warnings)
    scaling = []
    for run in runs:
        if run is base or run.samples_per_s is None:
            continue
        speedup = run.samples_per_s / base.samples_per_s
        ideal = run.world_size / base.world_size
        scaling.append(Scaling(path=run.path, speedup=speedup, ideal=ideal,
                               efficiency=speedup / ideal))
    return Report(runs=runs, baseline=base.path, scaling=scaling, warnings=warnings)


def _ms(value: Any) -> str:
    return f"{value * 1000:.4g}" if isinstance(value, (int, float)) else "-"


def _g(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _duration(seconds: float | None) -> str:
    from ..runtime.status import duration

    return "-" if seconds is None else duration(seconds, below=120, digits=1)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def _node_table(run: RunSummary) -> list[str]:
    """Per node: mean step time, compute time (before the step's synchronisation), share of
    time working (the observer's), the ratio of the figure the check compared to the other
    nodes' median, and how often it was named slow; then the notices."""
    if not run.nodes:
        return []
    rows = [("node", "host", "step ms", "compute ms", "working", "x others", "named slow")]
    for n in run.nodes:
        ratio, share = n.get("ratio"), n.get("work_share")
        rows.append((str(n["node"]), str(n.get("host", "?")), _ms(n.get("step_time_s")),
                     _ms(n.get("compute_s")),
                     f"{share:.0%}" if isinstance(share, (int, float)) else "-",
                     f"{ratio:.2f}" if isinstance(ratio, (int, float)) else "-",
                     str(n.get("named_slow", 0))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = [f"per node ({run.path}):"]
    out += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return out + [f"  {line.removeprefix('meshrun: ')}" for line in run.slow]


def render_text(rep: Report) -> str:
    """The report as an aligned table, then one line per scaled run."""
    head = ("run", "world", "nodes x procs", "device", "samples/s", "per process",
            "step ms", "MFU", "steps", "last loss")
    rows = [head]
    for r in rep.runs:
        device = r.gpu_name or r.device or "?"
        loss = "-" if r.loss is None else (
            f"{r.loss:.6g}" + (f" (PSNR {r.psnr:.2f} dB)" if r.psnr is not None else ""))
        rows.append((r.path, str(r.world_size), f"{r.nnodes} x {r.nproc_per_node}", device,
                     _g(r.samples_per_s, ".6g"), _g(r.samples_per_s_per_process, ".4g"),
                     _ms(r.step_time_s),
                     f"{r.mfu:.1%}" if r.mfu is not None else "-",
                     f"{r.steps[0]}-{r.steps[1]}" if r.steps else "-", loss))
    lines = _table(rows)
    lines += _table([("run", "outcome", "wall", "to first workers", "restarts", "what ran")] + [
        (r.path, r.outcome, _duration(r.wall_s), _duration(r.startup_s), str(r.restarts),
         (r.recipe and f"--recipe {r.recipe}") or r.command or "-") for r in rep.runs])
    for r in rep.runs:
        if r.goodput is not None:
            g = {k: v for k, v in r.goodput.items() if k != "productive_share"}
            lines.append(f"{r.path}: goodput: {goodput_text(Goodput(**g))}")
        if r.cause:
            lines.append(f"{r.path}: the job failed because {r.cause}")
        if r.diagnosis:
            lines.append(f"{r.path}: diagnosis: {', '.join(r.diagnosis)} (meshrun diagnose "
                         f"{r.path})")
    for r in rep.runs:
        lines += [f"note: {r.path}: {n}" for n in r.notes]
    for r in rep.runs:
        lines += _node_table(r)
    if rep.scaling:
        base = next(r for r in rep.runs if r.path == rep.baseline)
        lines.append(f"scaling against {base.path} (world {base.world_size}):")
        for s in rep.scaling:
            run = next(r for r in rep.runs if r.path == s.path)
            lines.append(f"  {s.path}: world {run.world_size} = {s.ideal:g}x the processes, "
                         f"{s.speedup:.2f}x the samples/s: {s.efficiency:.0%} of linear")
    lines += [f"warning: {w}" for w in rep.warnings]
    return "\n".join(lines)

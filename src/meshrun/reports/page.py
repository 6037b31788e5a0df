"""One self-contained HTML page per run (``meshrun report --html RUN-DIR``): the run's
outcome and goodput, loss and throughput over the run, every node's figures, and a timeline
with one lane per node. Torch-free; reads only the run folder.

It works offline: the charting library, uPlot (MIT, 51 KB: canvas charts made for time
series, no dependencies; ``reports/assets``, from npm's ``uplot`` 1.6.32), its CSS and the
run's data are inlined; the page fetches nothing. A file of the run folder that is missing
or does not parse leaves its part of the page empty and is named at the top, never a
traceback.

For a script without a ``metrics.jsonl`` of samples/s, the throughput chart shows each
node's steps/s from the progress meshrun measures (``node_steps.json``'s series).

The timeline's events are each node's ``events.node<k>.jsonl`` records, written by the
node as it wrote the line (:mod:`meshrun.runtime.timeline`): the start, the join, the
preflight, the workers' starts (with the membership epoch), restarts and their reason, lost
nodes, hangs with the stuck ranks, slow-node notices, membership changes, the end and its
code; and from ``metrics.jsonl`` (rank 0, node 0's lane) the checkpoints saved and the
resumes (``kind`` checkpoint and resumed: the only events not in those files). Each node's
step time, compute time and share of time working over the run are node 0's straggler
check's figures (``node_steps.json``'s ``series``), with the slow-node notices marked.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
from importlib import resources
from typing import Any

from ..runtime import timeline
from . import run_info
from .goodput import record_time


def _events(path: str, problems: list[str]) -> dict[int, list[dict[str, Any]]]:
    """node -> its timeline: the records of ``events.node<k>.jsonl``
    (:mod:`meshrun.runtime.timeline`), as the node wrote them. A node with a log but no
    such records (a run of an older meshrun, a log folder that could not be written) gets
    its lane from its log's stamped lines, classified the same way, and the page says so."""
    lanes: dict[int, list[dict[str, Any]]] = {}
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        problems.append(f"{path}: {exc.strerror}")
        return lanes
    logs = {int(m.group(1)) for n in names if (m := re.match(r"^node(\d+)\.log$", n))}
    for name in names:
        m = re.match(r"^events\.node(\d+)\.jsonl$", name)
        if not m:
            continue
        try:
            with open(os.path.join(path, name), encoding="utf-8", errors="replace") as f:
                found, bad = timeline.read(f.read())
        except OSError as exc:
            problems.append(f"{name}: {exc.strerror}")
            continue
        if bad:
            problems.append(f"{name}: {bad} line(s) do not parse (left out)")
        if found:
            lanes[int(m.group(1))] = [{"t": r["time"], "kind": r["kind"],
                                       "text": str(r.get("line", ""))} for r in found]
    for node in sorted(logs - set(lanes)):
        lane = _from_log(os.path.join(path, f"node{node}.log"), problems)
        if lane:
            lanes[node] = lane
            problems.append(f"events.node{node}.jsonl holds no timeline: node {node}'s lane "
                            f"is read from node{node}.log")
    return lanes


def _from_log(full: str, problems: list[str]) -> list[dict[str, Any]]:
    """A lane from a node log's stamped lines (meshrun's own), for a run without events."""
    found: list[dict[str, Any]] = []
    last = None
    try:
        with open(full, encoding="utf-8", errors="replace") as f:
            for line in f:
                t = run_info.stamp_time(line)
                if t is None:
                    continue
                body = line.split(" ", 1)[1].strip() if " " in line else ""
                if not found:
                    found.append({"t": t, "kind": "start", "text": body[:timeline.LINE_MAX]})
                kind = timeline.kind_of(body)
                if kind is not None:
                    found.append({"t": t, "kind": kind, "text": body[:timeline.LINE_MAX]})
                last = (t, body, kind is not None)
    except OSError as exc:
        problems.append(f"{os.path.basename(full)}: {exc.strerror}")
    if last is not None and not last[2]:   # the node's last line, unless already an event
        found.append({"t": last[0], "kind": "end", "text": last[1][:timeline.LINE_MAX]})
    return found


def _json_file(path: str, name: str, problems: list[str]) -> Any:
    full = os.path.join(path, name)
    if not os.path.exists(full):
        return None
    try:
        with open(full, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        problems.append(f"{name} does not parse ({type(exc).__name__})")
        return None


def data(path: str) -> dict[str, Any]:
    """Everything the page shows, as JSON-able data (tests read it back from the page)."""
    from .report import summarize

    problems: list[str] = []
    summary = None
    try:
        summary = summarize(path)
    except Exception as exc:  # noqa: BLE001 - a page that says what it could not read
        problems.append(str(exc))
    records: list[dict[str, Any]] = []
    try:   # this run's records, as the report reads them (not an earlier run's, same run id)
        from .report import _this_runs_records

        records = _this_runs_records(path, run_info.read(path))
    except Exception as exc:  # noqa: BLE001 - named at the top of the page instead
        problems.append(str(exc))
    lanes = _events(path, problems)
    starts = [e["t"] for lane in lanes.values() for e in lane]
    t0 = min(starts) if starts else None
    for r in records:
        t = record_time(r)
        if t is None or t0 is None:
            continue
        if isinstance(r.get("checkpoint_s"), (int, float)) and r["checkpoint_s"] > 0:
            lanes.setdefault(0, []).append({"t": t, "kind": "checkpoint", "text":
                                            f"checkpoint saved by step {r['step']} "
                                            f"({r['checkpoint_s']:.2f} s saving)"})
        if r.get("first_step") and r is not records[0]:
            lanes.setdefault(0, []).append({"t": t, "kind": "resumed",
                                            "text": f"first step after a restart: {r['step']}"})
    for lane in lanes.values():
        lane.sort(key=lambda e: e["t"])
    steps = _json_file(path, "node_steps.json", problems)
    if not lanes:
        problems.append("no node<k>.log in the folder: no timeline")
    if not records:
        problems.append("no metrics.jsonl records: no loss or throughput chart")
    series = [{"step": r["step"], "t": (record_time(r) - t0)
               if record_time(r) is not None and t0 else None,
               "loss": r.get("loss"), "samples_per_s": r.get("samples_per_s")}
              for r in records]
    run = dataclasses.asdict(summary) if summary is not None else {}
    return {"path": path, "run": run, "t0": t0, "lanes": {str(k): v for k, v in lanes.items()},
            "series": series, "nodes": (steps or {}).get("nodes", []) if isinstance(steps, dict)
            else [], "problems": problems}


def _asset(name: str) -> str:
    return resources.files("meshrun.reports").joinpath("assets", name).read_text("utf-8")


def write(path: str, baseline: str | None = None) -> str:
    """Write the page of run folder ``path`` as ``path/report.html`` (whole or not at all:
    :func:`meshrun.outfile.write_output`); its path."""
    from ..outfile import write_output

    target = os.path.join(path, "report.html")
    write_output(target, render(path, baseline=baseline), force=True, flag="--html")
    return target


def render(path: str, baseline: str | None = None) -> str:
    """The page of run folder ``path`` (``baseline``: another run's series on its charts)."""
    page = data(path)
    if baseline is not None:
        page["baseline"] = data(baseline)
    payload = json.dumps(page).replace("</", "<\\/")
    title = html.escape(f"meshrun run {page['run'].get('run_id', os.path.basename(path))}")
    return _TEMPLATE.format(title=title, css=_asset("uPlot.min.css"),
                            lib=_asset("uPlot.iife.min.js"), payload=payload, script=_SCRIPT)


_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{css}</style>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 24px; color: #222; max-width: 1100px; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 16px; margin-top: 28px; }}
h3 {{ font-size: 14px; font-weight: normal; margin: 14px 0 4px; }}
.problems {{ background: #fff4e5; border: 1px solid #f0c080; padding: 8px 12px; }}
.bar {{ display: flex; height: 22px; border: 1px solid #999; }}
.bar div {{ height: 100%; }}
.legend span {{ display: inline-block; margin-right: 14px; }}
.legend i {{ display: inline-block; width: 10px; height: 10px; margin-right: 4px; }}
.lane {{ position: relative; height: 26px; border-bottom: 1px solid #ddd; margin-left: 70px; }}
.lane b {{ position: absolute; left: -70px; top: 4px; font-weight: normal; }}
.ev {{ position: absolute; top: 5px; width: 8px; height: 14px; margin-left: -4px;
       border-radius: 2px; cursor: default; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 3px 8px; }}
</style></head>
<body>
<h1>{title}</h1>
<div id="summary"></div>
<div id="problems"></div>
<h2>Where the time went</h2><div id="goodput"></div>
<h2>Loss</h2><div id="loss" class="chart"></div>
<h2>Throughput</h2><div id="rate" class="chart"></div>
<h2>Nodes</h2><div id="nodes"></div><div id="nodecharts"></div>
<h2>Timeline</h2><div id="timeline"></div><div id="events"></div>
<script id="data" type="application/json">{payload}</script>
<script>{lib}</script>
<script>{script}</script>
</body></html>
"""

_SCRIPT = r"""
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const COLORS = {start: "#888", joined: "#5b8", preflight: "#3a7", workers: "#27c",
  restart: "#e80", lost: "#d22", hang: "#a0a", slow: "#fa0", recovered: "#7b7",
  membership: "#c5c", done: "#2a2", failed: "#d00", end: "#444", checkpoint: "#59f",
  resumed: "#f60"};
const esc = s => String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
  '"': "&quot;", "'": "&#39;"})[c]);
function secs(x) { return x == null ? "-" : (x < 120 ? x.toFixed(1) + " s" :
  Math.floor(x / 60) + " min " + String(Math.round(x % 60)).padStart(2, "0") + " s"); }
const run = D.run || {};
document.getElementById("summary").innerHTML = "<p>" + esc(run.outcome || "unknown") +
  ", wall " + secs(run.wall_s) + ", " + (run.restarts || 0) + " restart(s), world " +
  esc(run.world_size || "?") + " (" + esc(run.nnodes || "?") + " x " +
  esc(run.nproc_per_node || "?") + ")" + (run.cause ? "<br>the job failed because " +
  esc(run.cause) : "") + "</p>";
if (D.problems.length) document.getElementById("problems").innerHTML =
  "<div class='problems'><b>Not shown:</b><ul>" + D.problems.map(p => "<li>" + esc(p) +
  "</li>").join("") + "</ul></div>";
const g = run.goodput, GP = [["startup_s", "start-up", "#bbb"], ["productive_s", "training",
  "#2a2"], ["checkpoint_s", "checkpoints", "#59f"], ["recovery_s", "recovery", "#e80"],
  ["lost_s", "lost work", "#d22"], ["end_s", "end", "#666"]];
document.getElementById("goodput").innerHTML = g ? "<p><b>" + (100 *
  g.productive_share).toFixed(1) + "% productive</b> of " + secs(g.wall_s) + "</p>" +
  "<div class='bar' data-drawn='goodput'>" + GP.map(([k, n, c]) => "<div title='" + n + " " +
  secs(g[k]) + "' style='width:" + (100 * g[k] / g.wall_s) + "%;background:" + c +
  "'></div>").join("") + "</div><p class='legend'>" + GP.map(([k, n, c]) => "<span><i " +
  "style='background:" + c + "'></i>" + n + " " + secs(g[k]) + "</span>").join("") + "</p>"
  : "<p>" + esc(run.goodput_why || "no goodput") + "</p>";
function chart(id, xs, series, xlabel) {
  const el = document.getElementById(id);
  if (!xs.length) { el.textContent = "nothing recorded"; return; }
  const opts = {width: Math.min(1050, window.innerWidth - 60), height: 260,
    scales: {x: {time: false}}, axes: [{label: xlabel}, {}],
    series: [{label: xlabel}].concat(series.map(s => ({label: s.label, stroke: s.color,
      width: 2, spanGaps: true})))};
  new uPlot(opts, [xs].concat(series.map(s => s.ys)), el);
  el.setAttribute("data-drawn", String(xs.length));
}
function seriesOf(d, key, x) { return d.series.filter(r => r[x] != null && r[key] != null); }
const base = D.baseline;
// after a restart steps come again: the last record of each step, in step order
const lossRows = Array.from(new Map(seriesOf(D, "loss", "step").map(r => [r.step, r]))
  .values()).sort((p, q) => p.step - q.step);
const lossSeries = [{label: "loss", color: "#c22", ys: lossRows.map(r => r.loss)}];
let lossX = lossRows.map(r => r.step);
if (base) {
  const b = seriesOf(base, "loss", "step"), m = new Map(b.map(r => [r.step, r.loss]));
  const steps = Array.from(new Set(lossX.concat(b.map(r => r.step)))).sort((p, q) => p - q);
  const own = new Map(lossRows.map(r => [r.step, r.loss]));
  lossX = steps; lossSeries[0].ys = steps.map(s => own.has(s) ? own.get(s) : null);
  lossSeries.push({label: "baseline loss", color: "#888",
                   ys: steps.map(s => m.has(s) ? m.get(s) : null)});
}
chart("loss", lossX, lossSeries, "step");
const nodes = D.nodes || [];
const NODE_COLORS = ["#27c", "#e80", "#2a2", "#c22", "#a0a", "#0aa", "#886", "#555"];
const rateRows = seriesOf(D, "samples_per_s", "t");
const stepRows = nodes.filter(n => (n.series || []).some(p => p[1]));
if (rateRows.length || !stepRows.length || D.t0 == null) {
  chart("rate", rateRows.map(r => r.t), [{label: "samples/s", color: "#27c",
    ys: rateRows.map(r => r.samples_per_s)}], "seconds since the start");
} else {   // any script: steps/s from the progress meshrun measures (each node's series)
  const xs = Array.from(new Set([].concat(...stepRows.map(n => n.series.filter(p => p[1])
    .map(p => p[0]))))).sort((p, q) => p - q);
  chart("rate", xs.map(x => x - D.t0), stepRows.map((n, i) => {
    const at = new Map(n.series.filter(p => p[1]).map(p => [p[0], 1 / p[1]]));
    return {label: "node " + n.node + " steps/s", color: NODE_COLORS[i % NODE_COLORS.length],
            ys: xs.map(x => at.has(x) ? at.get(x) : null)};
  }), "seconds since the start");
  document.getElementById("rate").insertAdjacentHTML("beforebegin", "<p>steps/s from the " +
    "progress meshrun measures (no metrics.jsonl with samples/s)</p>");
}
document.getElementById("nodes").innerHTML = nodes.length ? "<table data-drawn='nodes'>" +
  "<tr><th>node</th><th>host</th><th>step time</th><th>compute</th><th>share working</th>" +
  "<th>ratio</th><th>named slow</th></tr>" + nodes.map(n => "<tr><td>" + esc(n.node) +
  "</td><td>" + esc(n.host) + "</td><td>" + (n.step_time_s == null ? "-" :
  (1000 * n.step_time_s).toFixed(1) + " ms") + "</td><td>" + (n.compute_s == null ? "-" :
  (1000 * n.compute_s).toFixed(1) + " ms") + "</td><td>" + (n.work_share == null ? "-" :
  n.work_share.toFixed(3)) + "</td><td>" + (n.ratio == null ? "-" : n.ratio.toFixed(2) +
  "x") + "</td><td>" + esc(n.named_slow || 0) + "</td></tr>").join("") + "</table>" +
  "<p>(the run's means; over time below)</p>"
  : "<p>no node_steps.json (the slow-node check was off, or the run ended early)</p>";
// each node's figures over time (node 0's straggler check), the slow notices as lines
// every node prints node 0's notice: one mark each, at the first node's time
const marks = Array.from(new Map([].concat(...Object.values(D.lanes || {})).filter(e =>
  e.kind === "slow" || e.kind === "recovered").sort((p, q) => q.t - p.t)
  .map(e => [e.kind + e.text, e])).values());
function nodeChart(title, index, scale, unit) {
  const rows = nodes.filter(n => (n.series || []).some(p => p[index] != null));
  if (!rows.length || D.t0 == null) return 0;
  const xs = Array.from(new Set([].concat(...rows.map(n => n.series.map(p => p[0])))))
    .sort((p, q) => p - q);
  const div = document.createElement("div");
  div.className = "chart";
  div.innerHTML = "<h3>" + esc(title) + "</h3>";
  document.getElementById("nodecharts").appendChild(div);
  const series = rows.map((n, i) => {
    const at = new Map(n.series.map(p => [p[0], p[index]]));
    return {label: "node " + n.node, color: NODE_COLORS[i % NODE_COLORS.length],
            ys: xs.map(x => at.has(x) && at.get(x) != null ? at.get(x) * scale : null)};
  });
  const opts = {width: Math.min(1050, window.innerWidth - 60), height: 220,
    scales: {x: {time: false}}, axes: [{label: "seconds since the start"}, {label: unit}],
    series: [{label: "s"}].concat(series.map(s => ({label: s.label, stroke: s.color,
      width: 2, spanGaps: true}))),
    hooks: {draw: [u => { for (const e of marks) {
      const x = u.valToPos(e.t - D.t0, "x", true);
      u.ctx.save(); u.ctx.strokeStyle = COLORS[e.kind]; u.ctx.lineWidth = 2;
      u.ctx.setLineDash([6, 4]); u.ctx.beginPath(); u.ctx.moveTo(x, u.bbox.top);
      u.ctx.lineTo(x, u.bbox.top + u.bbox.height); u.ctx.stroke(); u.ctx.restore(); }}]}};
  new uPlot(opts, [xs.map(x => x - D.t0)].concat(series.map(s => s.ys)), div);
  div.setAttribute("data-drawn", String(xs.length));
  div.setAttribute("data-marks", String(marks.length));
  return xs.length;
}
const drawn = nodeChart("step time per node", 1, 1000, "ms") +
  nodeChart("compute time per node (before the step's synchronisation)", 2, 1000, "ms") +
  nodeChart("share of time working (not waiting for the others)", 3, 1, "share");
if (!drawn) document.getElementById("nodecharts").innerHTML = "<p>no figures over time " +
  "(node_steps.json has no series: the slow-node check was off, or no rank reported)</p>";
else document.getElementById("nodecharts").insertAdjacentHTML("beforeend",
  "<p class='legend'><span><i style='background:" + COLORS.slow + "'></i>named slow</span>" +
  "<span><i style='background:" + COLORS.recovered + "'></i>no longer slow</span></p>");
const lanes = D.lanes || {}, all = [].concat(...Object.values(lanes));
const tl = document.getElementById("timeline");
if (all.length && D.t0 != null) {
  const end = Math.max(...all.map(e => e.t)), span = Math.max(end - D.t0, 1e-3);
  tl.innerHTML = Object.keys(lanes).sort((a, b) => a - b).map(k => "<div class='lane' " +
    "data-node='" + k + "'><b>node " + esc(k) + "</b>" + lanes[k].map(e => "<span class='ev' " +
    "data-kind='" + e.kind + "' title='" + esc(secs(e.t - D.t0) + ": " + e.text) + "' " +
    "style='left:" + (100 * (e.t - D.t0) / span) + "%;background:" + (COLORS[e.kind] ||
    "#000") + "'></span>").join("") + "</div>").join("");
  tl.setAttribute("data-drawn", String(all.length));
  document.getElementById("events").innerHTML = "<p class='legend'>" + Object.entries(COLORS)
    .map(([k, c]) => "<span><i style='background:" + c + "'></i>" + k + "</span>").join("") +
    "</p><table><tr><th>time</th><th>node</th><th>event</th><th>line</th></tr>" +
    Object.keys(lanes).flatMap(k => lanes[k].map(e => [e, k])).sort((p, q) => p[0].t - q[0].t)
    .map(([e, k]) => "<tr><td>" + secs(e.t - D.t0) + "</td><td>" + esc(k) + "</td><td>" +
    esc(e.kind) + "</td><td>" + esc(e.text) + "</td></tr>").join("") + "</table>";
} else { tl.textContent = "no timeline (no node<k>.log)"; }
document.body.setAttribute("data-ready", "1");
"""

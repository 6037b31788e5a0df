"""The run page (meshrun report --html, reports/page.py) from a run folder: one offline file,
its data, its timeline, and what it says of missing or broken files. (A real browser loads
real runs' pages in tests/integration: test_failures.py, test_slow_nodes.py.)"""

from __future__ import annotations

import calendar
import json
import re
import time

from meshrun.cli import main
from meshrun.reports.page import data, render
from meshrun.runtime.logs import LogRouter

T0 = calendar.timegm(time.strptime("2026-11-27T10:15:00", "%Y-%m-%dT%H:%M:%S"))


def _run(root, name="r", *, metrics=True, steps_json='{"nodes": []}'):
    path = root / name
    path.mkdir()
    (path / "plan.node0.json").write_text(json.dumps(
        {"run_id": name, "world_size": 2, "nnodes": 2, "nproc_per_node": 1, "device": "cpu",
         "gpu_names": [], "job": {"recipe": "mlp-tp", "effective_batch": 64},
         "command": ["-m", "meshrun.recipes.mlp_tp"]}))
    for k in (0, 1):   # written as a node writes them: its log and its timeline together
        router = LogRouter(str(path), k, ())
        lines = [(0, "meshrun 0.1.0"), (2, "meshrun: all 2 nodes joined"),
                 (2.5, "meshrun: preflight: 2 nodes agree on code (0.1 s)"),
                 (3, f"meshrun: starting 1 worker: rank {k} of 2 (3.0 s after start)")]
        if k == 0:
            lines.append((40, "meshrun: node 1 (vm) is slow: 1.60x the median time working "
                              "(not waiting for the others) of the other nodes for 20 s; rank 1"))
        lines.append((60, f"meshrun: all 1 workers of node {k} finished successfully; logs "
                          "in logs/r"))
        for dt, line in lines:
            router.route(line, at=T0 + dt)
        router.close()
    if metrics:
        recs = [{"step": 1, "loss": 2.0, "step_time_s": 5.0, "samples_per_s": 12.8,
                 "first_step": True, "at": T0 + 8}]
        recs += [{"step": s, "loss": 2.0 / s, "step_time_s": 1.0, "samples_per_s": 64.0,
                  "at": T0 + 7 + s, **({"checkpoint_s": 0.4} if s == 20 else {})}
                 for s in range(2, 41)]
        (path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (path / "node_steps.json").write_text(steps_json)
    return path


def _payload(page: str) -> dict:
    found = re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


def test_the_page_holds_the_runs_data_and_fetches_nothing(tmp_path):
    page = render(str(_run(tmp_path)))
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page)   # offline
    assert "var uPlot=function()" in page and ".uplot" in page                    # inlined
    # log lines go into single-quoted attributes ("node 1's workers"): ' is escaped too
    assert '"\'": "&#39;"' in page
    d = _payload(page)
    assert d["problems"] == []
    assert [r["step"] for r in d["series"]] == list(range(1, 41))
    assert d["series"][0]["t"] == 8.0 and d["run"]["goodput"]["restarts"] == 0
    kinds = {k: [e["kind"] for e in v] for k, v in d["lanes"].items()}
    assert kinds["1"] == ["start", "joined", "preflight", "workers", "done"]
    assert kinds["0"] == ["start", "joined", "preflight", "workers", "checkpoint", "slow",
                          "done"]
    slow = next(e for e in d["lanes"]["0"] if e["kind"] == "slow")
    assert slow["t"] == T0 + 40 and "node 1 (vm) is slow: 1.60x" in slow["text"]


def test_missing_or_broken_files_are_named_on_the_page_never_a_traceback(tmp_path):
    path = _run(tmp_path, "bad", metrics=False, steps_json="{not json")
    (path / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\nhalf a li')
    d = data(str(path))
    assert any("metrics.jsonl:2: is not a metrics record" in p for p in d["problems"])
    assert "node_steps.json does not parse (JSONDecodeError)" in d["problems"]
    assert d["lanes"]["0"][0]["kind"] == "start"          # the timeline is still there
    empty = tmp_path / "empty"
    empty.mkdir()
    d = data(str(empty))
    assert "no node<k>.log in the folder: no timeline" in d["problems"]


def test_report_html_writes_the_page_into_the_run_folder(tmp_path, capsys):
    path = _run(tmp_path)
    assert main(["report", "--html", str(path)]) == 0
    assert f"meshrun: wrote {path / 'report.html'}" in capsys.readouterr().out
    page = (path / "report.html").read_text()
    assert _payload(page)["path"] == str(path)
    base = _run(tmp_path, "base")
    assert main(["report", "--html", "--baseline", str(base), str(path)]) == 0
    assert _payload((path / "report.html").read_text())["baseline"]["path"] == str(base)


def test_the_timeline_is_what_events_node_k_jsonl_holds(tmp_path):
    """Each lane is its node's timeline records, in order, at their times; the checkpoints
    (from metrics.jsonl) are the only events not in those files."""
    path = _run(tmp_path)
    d = data(str(path))
    for k in (0, 1):
        records = [json.loads(x) for x in (path / f"events.node{k}.jsonl").read_text()
                   .splitlines()]
        lane = [e for e in d["lanes"][str(k)] if e["kind"] not in ("checkpoint", "resumed")]
        assert [(e["t"], e["kind"], e["text"]) for e in lane] == \
            [(r["time"], r["kind"], r["line"]) for r in records]
        assert all(r["event"] == "timeline" and r["node"] == k for r in records)


def test_a_run_without_timeline_records_gets_its_lanes_from_the_logs_and_says_so(tmp_path):
    path = _run(tmp_path)
    expected = data(str(path))["lanes"]
    (path / "events.node1.jsonl").write_text('{"event": "node-slow", "node": 1}\nhalf a li')
    d = data(str(path))
    assert d["lanes"]["1"] == expected["1"]     # the same lane, read from node1.log
    assert "events.node1.jsonl: 1 line(s) do not parse (left out)" in d["problems"]
    assert ("events.node1.jsonl holds no timeline: node 1's lane is read from node1.log"
            in d["problems"])


def test_each_nodes_figures_over_time_reach_the_page(tmp_path):
    steps = {"nodes": [{"node": k, "host": "vm", "step_time_s": 0.1, "compute_s": 0.05,
                        "series": [[T0 + 15, 0.1, 0.05, None],
                                   [T0 + 25, 0.1 * (1 + k), 0.05 * (1 + k), None]]}
                       for k in (0, 1)]}
    d = data(str(_run(tmp_path, steps_json=json.dumps(steps))))
    assert d["problems"] == []
    assert [n["series"][1][1] for n in d["nodes"]] == [0.1, 0.2]
    page = render(str(tmp_path / "r"))
    assert 'nodeChart("step time per node", 1, 1000, "ms")' in page

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

T0 = calendar.timegm(time.strptime("2026-11-27T10:15:00", "%Y-%m-%dT%H:%M:%S"))


def _run(root, name="r", *, metrics=True, steps_json='{"nodes": []}'):
    path = root / name
    path.mkdir()
    (path / "plan.node0.json").write_text(json.dumps(
        {"run_id": name, "world_size": 2, "nnodes": 2, "nproc_per_node": 1, "device": "cpu",
         "gpu_names": [], "job": {"recipe": "mlp-tp", "effective_batch": 64},
         "command": ["-m", "meshrun.recipes.mlp_tp"]}))
    for k in (0, 1):
        (path / f"node{k}.log").write_text(
            "2026-11-27T10:15:00.000Z meshrun 0.1.0\n"
            "2026-11-27T10:15:02.000Z meshrun: all 2 nodes joined\n"
            "2026-11-27T10:15:02.500Z meshrun: preflight: 2 nodes agree on code (0.1 s)\n"
            f"2026-11-27T10:15:03.000Z meshrun: starting 1 worker: rank {k} of 2 (3.0 s after "
            "start)\n"
            + ("2026-11-27T10:15:40.000Z meshrun: node 1 (vm) is slow: 1.60x the median time "
               "working (not waiting for the others) of the other nodes for 20 s; rank 1\n"
               if k == 0 else "")
            + f"2026-11-27T10:16:00.000Z meshrun: all 1 workers of node {k} finished "
              "successfully; logs in logs/r\n")
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

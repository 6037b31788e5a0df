"""meshrun report: run summaries from log folders and scaling between runs (torch-free)."""

import json
import statistics
from pathlib import Path

import pytest

from meshrun.cli import main
from meshrun.errors import UsageError
from meshrun.reports.report import render_text, report, summarize


def run_dir(root, name, *, world, nnodes, rates, recipe="mlp-tp", batch=64, device="cuda",
            gpu="NVIDIA H100 80GB HBM3", mfu=True, psnr=False, node=0, extra_lines=()):
    """A log folder as meshrun run leaves it: plan.node<k>.json and metrics.jsonl.
    ``rates`` are samples/s of the records after the (marked) first step."""
    path = root / name
    path.mkdir()
    plan = {"run_id": name, "world_size": world, "nnodes": nnodes,
            "nproc_per_node": world // nnodes, "device": device,
            "gpu_names": [gpu] if device == "cuda" else [],
            "job": {"recipe": recipe, "effective_batch": batch}}
    (path / f"plan.node{node}.json").write_text(json.dumps(plan))
    records = [{"step": 1, "loss": 2.0, "step_time_s": 9.0, "samples_per_s": batch / 9.0,
                "first_step": True}]
    for i, rate in enumerate(rates, start=1):
        r = {"step": 1 + 5 * i, "loss": 2.0 / (i + 1),
             "step_time_s": batch / rate if rate else 1.0,
             "samples_per_s": rate}
        if mfu:
            r["mfu"] = 0.1 * i
        if psnr:
            r["psnr"] = 10.0 + i
        records.append(r)
    lines = [json.dumps(r) for r in records] + list(extra_lines)
    (path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return str(path)


def test_one_run_leaves_out_first_steps(tmp_path):
    path = run_dir(tmp_path, "a", world=8, nnodes=1, rates=[100.0, 300.0, 200.0])
    r = summarize(path)
    assert (r.world_size, r.nnodes, r.nproc_per_node) == (8, 1, 8)
    assert r.samples_per_s == 200.0                      # median of 100, 300, 200; not 64/9
    assert r.samples_per_s_per_process == 25.0
    assert r.step_time_s == statistics.median([64 / 100, 64 / 300, 64 / 200])
    assert r.mfu == pytest.approx(0.2)
    assert r.steps == (1, 16) and r.records == 4 and r.loss == 0.5
    assert r.gpu_name == "NVIDIA H100 80GB HBM3" and r.recipe == "mlp-tp" and r.psnr is None


def test_resumed_run_leaves_out_each_segments_first_step(tmp_path):
    resumed = json.dumps({"step": 17, "loss": 0.4, "step_time_s": 5.0, "samples_per_s": 1.0,
                          "first_step": True})
    later = json.dumps({"step": 20, "loss": 0.3, "step_time_s": 0.2, "samples_per_s": 320.0})
    path = run_dir(tmp_path, "a", world=8, nnodes=1, rates=[100.0, 300.0],
                   extra_lines=[resumed, later])
    r = summarize(path)
    assert r.samples_per_s == 300.0 and r.records == 5 and r.steps == (1, 20)
    assert r.loss == 0.3


def test_only_first_steps_are_used_with_a_note(tmp_path):
    r = summarize(run_dir(tmp_path, "a", world=2, nnodes=1, rates=[], mfu=False))
    assert r.samples_per_s == pytest.approx(64 / 9.0) and r.mfu is None
    assert r.notes == ["only first steps were logged: their times include start-up"]


def test_scaling_against_the_smallest_world(tmp_path):
    two = run_dir(tmp_path, "2n", world=16, nnodes=2, rates=[3400.0])
    one = run_dir(tmp_path, "1n", world=8, nnodes=1, rates=[2000.0])
    rep = report([two, one])
    assert rep.baseline == one and rep.warnings == []
    s, = rep.scaling
    assert (s.path, s.speedup, s.ideal) == (two, 1.7, 2.0)
    assert s.efficiency == pytest.approx(0.85)           # seed 004's "1.7x from 1 to 2 nodes"
    text = render_text(rep)
    assert f"scaling against {one} (world 8):" in text
    assert f"{two}: world 16 = 2x the processes, 1.70x the samples/s: 85% of linear" in text


def test_explicit_baseline_and_slash_spelling(tmp_path):
    a = run_dir(tmp_path, "a", world=8, nnodes=1, rates=[1000.0])
    b = run_dir(tmp_path, "b", world=64, nnodes=8, rates=[6500.0])
    rep = report([a + "/"], baseline=b)                 # the baseline joins the runs
    assert [r.path for r in rep.runs] == [b, a] and rep.baseline == b
    s, = rep.scaling
    assert s.ideal == 0.125 and s.speedup == pytest.approx(1000 / 6500)


def test_unlike_runs_are_compared_with_warnings(tmp_path):
    a = run_dir(tmp_path, "a", world=2, nnodes=1, rates=[10.0], recipe="autoencoder",
                batch=8, device="cpu", psnr=True, mfu=False)
    b = run_dir(tmp_path, "b", world=4, nnodes=2, rates=[40.0], batch=32, device="cpu")
    rep = report([a, b])
    assert rep.warnings == [
        "the runs differ in recipes (autoencoder, mlp-tp): their ratio says little about "
        "scaling",
        "effective batches differ (8, 32): samples/s is compared as throughput, not as time "
        "to a loss"]
    text = render_text(rep)
    assert "(PSNR 11.00 dB)" in text and "200% of linear" in text


def test_plan_of_another_node_is_enough(tmp_path):
    path = run_dir(tmp_path, "a", world=16, nnodes=2, rates=[1.0], node=1)
    assert summarize(path).nnodes == 2


@pytest.mark.parametrize("make, words", [
    (lambda root: str(root / "nope"), "is not a folder"),
    (lambda root: (root / "empty").mkdir() or str(root / "empty"), "no plan.node<k>.json"),
    (lambda root: run_dir(root, "a", world=2, nnodes=1, rates=[1.0], extra_lines=['{"step": 7']),
     "metrics.jsonl:3: is not a metrics record"),
    (lambda root: _write(run_dir(root, "a", world=2, nnodes=1, rates=[1.0]), "plan.node0.json",
                         "{"), "plan.node0.json: unreadable"),
])
def test_bad_run_folder_is_one_line_exit_2(tmp_path, capsys, make, words):
    path = make(tmp_path)
    with pytest.raises(UsageError) as caught:
        summarize(path)
    assert words in caught.value.line()
    assert main(["report", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("meshrun: error: ") and "fix: " in err[0]


def _without(path, name):
    (Path(path) / name).unlink()
    return path


def _write(path, name, text):
    (Path(path) / name).write_text(text)
    return path


def test_cli_json_with_options_among_the_paths(tmp_path, capsys):
    a = run_dir(tmp_path, "a", world=8, nnodes=1, rates=[2000.0])
    b = run_dir(tmp_path, "b", world=16, nnodes=2, rates=[3800.0])
    assert main(["report", a, "--json", b]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["path"] for r in out["runs"]] == [a, b]
    assert out["scaling"] == [{"path": b, "speedup": 1.9, "ideal": 2.0, "efficiency": 0.95}]
    assert main(["report"]) == 2
    assert "needs one or more run log folders" in capsys.readouterr().err


def test_a_baseline_without_throughput_is_one_line(tmp_path):
    a = run_dir(tmp_path, "a", world=2, nnodes=1, rates=[0.0])
    b = run_dir(tmp_path, "b", world=4, nnodes=2, rates=[10.0])
    with pytest.raises(UsageError, match="no throughput to compare with"):
        report([a, b])


def test_per_node_step_times_and_slow_notices(tmp_path):
    """node_steps.json (node 0's straggler check) and its notices become a per-node table."""
    from test_stragglers import _feed

    from meshrun.runtime.stragglers import Stragglers

    path = run_dir(tmp_path, "a", world=4, nnodes=2, rates=[100.0, 100.0])
    tracker = Stragglers(nnodes=2, nproc=2, hosts={0: "host-a", 1: "host-b"}, window=5)
    notices = _feed(tracker, 20, lambda r, t: 0.2 if r >= 2 else 0.1)
    Path(path, "node_steps.json").write_text(json.dumps(tracker.summary()))
    from meshrun.runtime import timeline

    Path(path, "events.node0.jsonl").write_text(   # the node's timeline and status lines too
        timeline.record("start", 0, 1.0, "meshrun 0.1.0") + "\n"
        + "".join(json.dumps(n.to_json()) + "\n" for _, n in notices)
        + json.dumps({"event": "status", "line": "meshrun: step 40, 2.0 steps/s"}) + "\n"
        + timeline.record("slow", 0, 9.0, notices[0][1].line) + "\n" + "half a line")
    r = summarize(path)
    assert r.slow == [n.line for _, n in notices]   # the notices, once each
    assert [(n["node"], n["host"], n["named_slow"]) for n in r.nodes] == \
        [(0, "host-a", 0), (1, "host-b", 1)]
    text = render_text(report([path]))
    table = text.split("per node")[1].splitlines()
    assert table[2].split()[:5] == ["0", "host-a", "150", "100", "-"]    # step, compute ms,
    assert table[3].split()[:5] == ["1", "host-b", "300", "200", "-"]    # no share observed
    assert "node 1 (host-b) is slow: 2.00x the median compute time" in text
    # the observer's shares, where it reported them
    summary = tracker.summary()
    for row, share in zip(summary["nodes"], (0.4, 0.8)):
        row["work_share"] = share
    Path(path, "node_steps.json").write_text(json.dumps(summary))
    table = render_text(report([path])).split("per node")[1].splitlines()
    assert table[1].split()[6] == "working" and table[3].split()[4] == "80%"
    # a run without the check has no table
    plain = run_dir(tmp_path, "b", world=4, nnodes=2, rates=[100.0])
    assert "per node" not in render_text(report([plain]))


# --- any run: what meshrun itself saw (issue 23, item 5) -------------------------------------

def _script_run(root, name="plain", *, ok=True, attempts=1):
    """A user's script's run folder as meshrun leaves it, with no metrics.jsonl."""
    path = root / name
    (path / "raw" / "node0-20261127-101500").mkdir(parents=True)
    for n in range(attempts):
        (path / "raw" / "node0-20261127-101500" / f"attempt{n}").mkdir()
    plan = {"run_id": name, "world_size": 4, "nnodes": 2, "nproc_per_node": 2,
            "device": "cpu", "gpu_names": [], "job": None, "command": ["train.py", "--lr", "1"]}
    (path / "plan.node0.json").write_text(json.dumps(plan))
    end = ("meshrun: all 2 workers of node {k} finished successfully; logs in logs/x" if ok
           else "meshrun: rank 1 on node {k} (vm) exited with code 1")
    for k, (first, last) in enumerate((("10:15:00.000", "10:17:05.500"),
                                       ("10:15:01.250", "10:17:05.000"))):
        (path / f"node{k}.log").write_text(
            f"2026-11-27T{first}Z meshrun 0.1.0\n"
            f"2026-11-27T10:15:03.000Z meshrun: starting 2 workers: ranks {2 * k}-{2 * k + 1} "
            f"of 4 (3.0 s after start)\n"
            "[rank0]: step 1\n"
            f"2026-11-27T{last}Z {end.format(k=k)}\n")
    if not ok:
        (path / "cause.node0.json").write_text(json.dumps(
            {"rank": 1, "node": 0, "host": "vm", "how": "exited with code 1",
             "line": "ValueError: bad batch", "time": 1.0}))
        (path / "diagnosis.node0.json").write_text(json.dumps(
            {"diagnoses": [{"code": "unknown"}, {"code": "gloo-connection-lost"}]}))
    return str(path)


def test_a_script_without_metrics_is_reported_from_what_meshrun_saw(tmp_path, capsys):
    r = summarize(_script_run(tmp_path))
    assert r.records == 0 and r.samples_per_s is None and r.loss is None and r.steps is None
    assert (r.outcome, r.restarts, r.startup_s) == ("succeeded", 0, 3.0)
    assert r.wall_s == pytest.approx(125.5)                   # first node's start to the end
    assert r.command == "train.py --lr 1"
    assert main(["report", str(tmp_path / "plain")]) == 0
    out = capsys.readouterr().out
    assert "succeeded  2 min 06 s" in out and "train.py --lr 1" in out
    assert "no metrics.jsonl: what meshrun saw only" in out


def test_a_failed_run_with_restarts_says_its_cause_and_diagnosis(tmp_path):
    r = summarize(_script_run(tmp_path, "bad", ok=False, attempts=3))
    assert r.outcome == "failed" and r.restarts == 2
    assert r.cause == "rank 1 on node 0 (vm) exited with code 1: ValueError: bad batch"
    assert r.diagnosis == ["unknown", "gloo-connection-lost"]
    text = render_text(report([r.path]))
    assert "the job failed because rank 1 on node 0 (vm)" in text


def test_a_run_without_samples_is_left_out_of_the_scaling_with_a_warning(tmp_path):
    a = run_dir(tmp_path, "a", world=8, nnodes=1, rates=[2000.0])
    b = run_dir(tmp_path, "b", world=16, nnodes=2, rates=[3800.0])
    plain = _script_run(tmp_path)
    rep = report([a, b, plain])
    assert [s.path for s in rep.scaling] == [b]
    assert any("plain logged no samples/s" in w for w in rep.warnings)


def test_records_of_meshrun_log_give_step_times_from_their_times(tmp_path):
    path = Path(_script_run(tmp_path))
    from meshrun.reports.run_info import stamp_time

    t0 = stamp_time("2026-11-27T10:15:10.000Z x")        # inside the run's span
    (path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in (
        {"step": 1, "time": t0, "loss": 3.0}, {"step": 2, "time": t0 + 0.5, "loss": 2.0},
        {"step": 4, "time": t0 + 1.5, "loss": 1.0, "note": "text is fine"})) + "\n")
    r = summarize(str(path))
    assert r.step_time_s == 0.5 and r.loss == 1.0 and r.steps == (1, 4)
    assert r.samples_per_s is None                   # not logged: not made up


def test_meshrun_log_writes_rank_0s_records_and_nothing_outside_meshrun(tmp_path, monkeypatch):
    import meshrun
    from meshrun.worker import metrics

    monkeypatch.setitem(metrics._state, "step", 0)
    monkeypatch.setitem(metrics._state, "tb_tried", True)       # no TensorBoard here
    monkeypatch.delenv("MESHRUN_LOG_DIR", raising=False)
    meshrun.log({"loss": 1.0})                                   # outside meshrun: nothing
    assert not (tmp_path / "metrics.jsonl").exists()
    monkeypatch.setenv("MESHRUN_LOG_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr("meshrun.worker.progress.progress", lambda step: None)
    meshrun.log({"loss": 0.5, "nan": float("nan"), "step": 99}, step=10)
    meshrun.log({"loss": 0.25})                                  # the step after the last
    monkeypatch.setenv("RANK", "1")
    meshrun.log({"loss": 7.0}, step=12)                          # other ranks: progress only
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in rows] == [(10, 0.5), (11, 0.25)]
    assert rows[0]["nan"] == "nan" and isinstance(rows[0]["time"], float)
    with pytest.raises(TypeError, match="dict of str keys"):
        meshrun.log({1: 2.0})
    with pytest.raises(TypeError, match="whole number"):
        meshrun.log({"loss": 1.0}, step="3")


def test_a_diverged_value_is_missing_not_a_broken_run_and_a_bad_stamp_is_no_time(tmp_path):
    path = Path(_script_run(tmp_path))
    (path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in (
        {"step": 1, "loss": 3.0}, {"step": 2, "loss": "nan"}, {"step": 3, "loss": None},
        {"step": 4, "loss": 1.5})) + '\n{"step": 5, "loss": NaN}\n')
    r = summarize(str(path))
    assert r.steps == (1, 5) and r.loss == 1.5          # the last finite loss
    with open(path / "node0.log", "a") as log:
        log.write("2026-13-45T99:99:99.000Z meshrun: a line of another shape\n")
    assert summarize(str(path)).outcome == "succeeded"    # read, never a traceback


def test_a_rerun_s_records_are_told_apart_by_their_time(tmp_path):
    """meshrun.log's records carry their time: the newest run counts its own, an earlier
    run (earlier/<n>) takes its own from the run folder's file."""
    from meshrun.reports.run_info import stamp_time

    path = Path(_script_run(tmp_path))
    started = stamp_time("2026-11-27T10:15:00.000Z x")
    early = path / "earlier" / "1"
    early.mkdir(parents=True)
    for name in ("plan.node0.json",):
        (early / name).write_text((path / name).read_text())
    (early / "node0.log").write_text(
        "2026-11-27T09:00:00.000Z meshrun 0.1.0\n"
        "2026-11-27T09:01:00.000Z meshrun: all 2 workers of node 0 finished successfully\n")
    before = stamp_time("2026-11-27T09:00:30.000Z x")      # inside the earlier run's span
    rows = [{"step": s, "time": before + s, "loss": 9.0} for s in (1, 2)] + \
           [{"step": s, "time": started + 10 + s, "loss": 1.0 / s} for s in (1, 2, 3)]
    (path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    newest, earlier = summarize(str(path)), summarize(str(early))
    assert (newest.records, newest.loss) == (3, 1.0 / 3)
    assert (earlier.records, earlier.loss) == (2, 9.0)


def test_a_recipes_run_reports_its_goodput_adding_up_to_the_wall_time(tmp_path, capsys):
    """The recipes' records carry their time (``at``) and the checkpoint saving before them;
    the report splits the run's wall time from its node logs (10:15:00 to 10:17:05.5)."""
    import calendar
    import time

    path = _script_run(tmp_path, "rec")
    t0 = calendar.timegm(time.strptime("2026-11-27T10:15:00", "%Y-%m-%dT%H:%M:%S"))
    records = [{"step": 1, "loss": 2.0, "step_time_s": 5.0, "samples_per_s": 1.0,
                "first_step": True, "at": t0 + 10}]
    records += [{"step": s, "loss": 1.0, "step_time_s": 1.0, "samples_per_s": 64.0,
                 "at": t0 + 9 + s, **({"checkpoint_s": 0.5} if s == 50 else {})}
                for s in range(2, 101)]
    (tmp_path / "rec" / "metrics.jsonl").write_text(
        "\n".join(json.dumps(r) for r in records) + "\n")
    r = summarize(path)
    g = r.goodput
    assert g is not None and r.goodput_why == ""
    assert g["wall_s"] == pytest.approx(125.5) and g["startup_s"] == pytest.approx(10.0)
    assert g["productive_s"] == pytest.approx(98.5) and g["checkpoint_s"] == pytest.approx(0.5)
    assert g["end_s"] == pytest.approx(125.5 - 109.0)
    assert sum(g[k] for k in ("startup_s", "productive_s", "checkpoint_s", "lost_s",
                              "recovery_s", "end_s")) == pytest.approx(g["wall_s"])
    assert main(["report", path]) == 0
    out = capsys.readouterr().out
    assert f"{path}: goodput: 78.5% productive of 126 s: start-up 10 s, training 98 s, " \
           "checkpoints 0.5 s, recovery 0.0 s, lost work 0.0 s, end 16 s" in out
    plain = summarize(_script_run(tmp_path, "plain"))
    assert plain.goodput is None and plain.goodput_why.startswith("no step records with a time")

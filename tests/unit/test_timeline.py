"""The run's timeline as a node writes it (meshrun.runtime.timeline, LogRouter): each event
line of meshrun's own becomes one record of events.node<k>.jsonl at the time its node-log
stamp gives, with the node's first line as its start and its last as its end."""

from __future__ import annotations

import json

import pytest

from meshrun.reports.run_info import stamp_time
from meshrun.runtime import timeline
from meshrun.runtime.logs import LogRouter

LINES = [
    ("meshrun 0.1.0 on vm-a", None),
    ("meshrun: all 3 nodes joined in 1.2 s", "joined"),
    ("meshrun: preflight: 3 nodes agree on code, torch and the environment (0.4 s)",
     "preflight"),
    ("meshrun: starting 2 workers: ranks 2-3 of 6 (epoch 0)", "workers"),
    ("[rank2]: step 10 loss 0.5", None),                       # a worker's: no event
    ("meshrun: node 2 (vm-c) is lost (no heartbeat for 15.0 s)", "lost"),
    ("meshrun: node 3 takes its seat: ranks 4-5 (epoch 1)", "membership"),
    ("meshrun: restarting node 1's workers after the hang (restart 1 of 1)", "restart"),
    ("meshrun: torch's agent restarts node 1's workers after rank 3 ended with exit code 1 "
     "(restart 1 of 3); they resume through the rendezvous", "restart"),
    ("meshrun: job hung: no rank progressed for 20 s; rank 3 is not in the collective",
     "hang"),
    ("meshrun: node 2 (vm-c) is slow: 1.60x the median step time per step", "slow"),
    ("meshrun: node 2 (vm-c) is no longer slow", "recovered"),
    ("meshrun: error: --nnodes: not a whole number or range", "failed"),
    ("meshrun: all 2 workers of node 1 finished successfully; logs in logs/r", "done"),
]


@pytest.mark.parametrize("line,kind", LINES)
def test_kind_of(line, kind):
    assert timeline.kind_of(line) == kind


def test_a_nodes_event_lines_are_recorded_at_their_stamps(tmp_path):
    router = LogRouter(str(tmp_path), 1, (2, 3))
    for i, (line, _) in enumerate(LINES):
        router.route(line, at=None if line.startswith("[rank") else 1_800_000_000 + i + 0.25)
    router.route("meshrun: the last words of node 1", at=1_800_000_100.5)
    router.close()
    records = [json.loads(x) for x in (tmp_path / "events.node1.jsonl").read_text()
               .splitlines()]
    kinds = [kind for _, kind in LINES if kind]
    assert [r["kind"] for r in records] == ["start", *kinds, "end"]
    assert all(r["event"] == "timeline" and r["node"] == 1 for r in records)
    stamped = {ln.split(" ", 1)[1]: stamp_time(ln)
               for ln in (tmp_path / "node1.log").read_text().splitlines() if stamp_time(ln)}
    for r in records:   # the record's time is its line's stamp in node1.log
        assert r["time"] == pytest.approx(stamped[r["line"]], abs=0.001)
    assert records[0]["line"] == "meshrun 0.1.0 on vm-a"
    assert records[-1]["line"] == "meshrun: the last words of node 1"


def test_a_last_line_that_is_an_event_is_not_repeated_as_the_end(tmp_path):
    router = LogRouter(str(tmp_path), 0, (0,))
    router.route("meshrun 0.1.0", at=1.0)
    router.route("meshrun: all 1 workers of node 0 finished successfully", at=2.0)
    router.close()
    kinds = [json.loads(x)["kind"] for x in (tmp_path / "events.node0.jsonl").read_text()
             .splitlines()]
    assert kinds == ["start", "done"]


def test_read_keeps_timeline_records_and_counts_what_does_not_parse():
    text = "\n".join([timeline.record("start", 0, 1.0, "meshrun 0.1.0"),
                      json.dumps({"event": "node-slow", "node": 1, "time": 3.0}),
                      '{"event": "timeline", "kind": 3}', "half a li",
                      timeline.record("done", 0, 9.0, "meshrun: all ... successfully")])
    found, bad = timeline.read(text)
    assert [(r["kind"], r["time"]) for r in found] == [("start", 1.0), ("done", 9.0)]
    assert bad == 1


def test_torchs_restart_is_said_with_the_rank_that_ended_and_how():
    from meshrun.runtime import agent_output as logs

    envs = {0: {"RANK": "2", "TORCHELASTIC_RESTART_COUNT": "1",
                "TORCHELASTIC_MAX_RESTARTS": "3"}, 1: {"RANK": "3"}}
    logs.last_failure[:] = []
    assert logs.restart_line(1, {0: {"RANK": "2", "TORCHELASTIC_RESTART_COUNT": "0"}}) is None
    assert logs.restart_line(1, envs) == (
        "meshrun: torch's agent restarts node 1's workers (restart 1 of 3); they resume "
        "through the rendezvous")
    logs.last_failure[:] = [-9, 1]
    assert "after rank 3 ended by signal 9 (restart 1 of 3)" in logs.restart_line(1, envs)
    logs.last_failure[:] = [1, 0]
    line = logs.restart_line(1, envs)
    assert "after rank 2 ended with exit code 1" in line
    assert timeline.kind_of(line) == "restart"
    # not a hang restart for the report's count, and no failure line for diagnose
    from meshrun.diagnose.causes import MESHRUN_FAILED
    from meshrun.reports import run_info

    assert not line.startswith(run_info._HANG_RESTART) and not MESHRUN_FAILED.search(line)
    logs.last_failure[:] = []


class _Terminal:
    """A console that says it is a terminal, keeping what was written."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_status_line_is_rewritten_in_place_below_the_others(tmp_path):
    """What a person at the terminal sees: each status line replaces the last one, the
    workers' and meshrun's other lines go above it, the last one stays at the end."""
    import sys

    console = _Terminal()
    router = LogRouter(str(tmp_path), 0, (0,))
    saved = sys.stderr
    sys.stderr = console
    try:
        router.install()
        print("meshrun: status: step 10, 2.00 steps/s", file=sys.stderr)
        sys.stderr.write("[rank0]: loss 0.5\n")   # a worker's line, as torch's tail writes it
        print("meshrun: status: step 20, 2.10 steps/s", file=sys.stderr)
        router.close()
    finally:
        sys.stderr = saved
    clear = "\r\x1b[K"
    assert console.text == ("meshrun: status: step 10, 2.00 steps/s" + clear + "[rank0]: loss 0.5\n"
                            + "meshrun: status: step 10, 2.00 steps/s" + clear
                            + "meshrun: status: step 20, 2.10 steps/s\n")
    # what the terminal finally shows, line by line: each \r\x1b[K erases the line so far
    screen = [line.split(clear)[-1] for line in console.text.split("\n")]
    assert screen == ["[rank0]: loss 0.5", "meshrun: status: step 20, 2.10 steps/s", ""]
    # the node log keeps every status line as a plain line
    logged = (tmp_path / "node0.log").read_text()
    assert logged.count("meshrun: status: ") == 2 and "\x1b" not in logged


def test_a_timeline_file_that_cannot_be_written_costs_the_records_not_the_node_log(tmp_path):
    router = LogRouter(str(tmp_path), 0, (0,))
    (tmp_path / "events.node0.jsonl").mkdir()          # not a file: every open fails
    router.route("meshrun 0.1.0", at=1.0)
    router.route("meshrun: all 2 nodes joined", at=2.0)
    router.close()
    assert router.lost is None and (tmp_path / "events.node0.jsonl").is_dir()
    assert (tmp_path / "node0.log").read_text().count("meshrun") == 2

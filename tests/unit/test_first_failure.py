"""The first cause among a node's failed ranks (runtime/failures.py, worker/failure.py).

torch's agent orders failures by whole seconds and gives ties to the lowest rank: rank 0,
failing in its barrier because rank 1 died, was reported as the first failure in a CI run.
Here the records are written by the real bootstrap in a real subprocess (a script that
raises), and the order comes from them."""

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from meshrun.runtime import failures
from meshrun.worker import failure

GLOO = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
        "Connection closed by peer [127.0.0.1]:42676. This is typically caused by a remote "
        "worker crashing.")


def _worker(tmp_path, rank: int, code: str) -> int:
    """Run ``code`` as a script through meshrun's worker bootstrap as rank ``rank``; its pid."""
    script = tmp_path / f"script{rank}.py"
    script.write_text(code)
    env = {**os.environ, "MESHRUN_LOG_DIR": str(tmp_path), "RANK": str(rank)}
    env.pop("MESHRUN_STORE", None)
    proc = subprocess.Popen([sys.executable, "-m", "meshrun.worker.bootstrap", "--",
                             str(script)], env=env, stderr=subprocess.DEVNULL)
    proc.wait(timeout=60)
    return proc.pid


def _seen(pid: int, timestamp: int, exitcode: int = 1, message: str = "") -> SimpleNamespace:
    """What torch's agent knows of a failed worker (ProcessFailure's fields)."""
    return SimpleNamespace(pid=pid, timestamp=timestamp, exitcode=exitcode, message=message)


def test_a_victim_that_exits_in_the_same_second_is_not_called_first(tmp_path):
    since = time.time()
    cause = _worker(tmp_path, 1, "raise ValueError('bad batch at step 10')\n")
    victim = _worker(tmp_path, 0, f"raise RuntimeError({GLOO.split(': ', 1)[1]!r})\n")
    second = int(time.time())
    order = failures.ordered({0: _seen(victim, second), 1: _seen(cause, second)},
                             str(tmp_path), since=since)
    assert [f.rank for f in order] == [1, 0]
    assert order[0].line == "ValueError: bad batch at step 10" and order[0].precise
    assert order[1].victim and not order[0].victim


def test_between_two_causes_the_earlier_record_wins_whatever_the_rank(tmp_path):
    since = time.time()
    early = _worker(tmp_path, 3, "raise KeyError('x')\n")
    late = _worker(tmp_path, 2, "import sys; sys.exit('meshrun: error: late')\n")
    order = failures.ordered({2: _seen(late, 5), 3: _seen(early, 5)}, str(tmp_path),
                             since=since, victim=lambda line: False)
    assert [f.rank for f in order] == [3, 2]
    assert order[1].line == "meshrun: error: late" and order[1].exit == 1


def test_a_number_exit_records_its_code_and_no_line(tmp_path):
    pid = _worker(tmp_path, 0, "raise SystemExit(7)\n")
    mine = failure.read(str(tmp_path), 0)
    assert mine is not None and mine["pid"] == pid and mine["exit"] == 7 and mine["line"] == ""
    order = failures.ordered({0: _seen(pid, 1)}, str(tmp_path), since=0,
                             fallback=lambda r, f: "about to fail")
    assert order[0].line == "about to fail" and order[0].exit == 1  # torch's exit code


def test_a_success_and_a_signal_write_no_record(tmp_path):
    _worker(tmp_path, 0, "print('fine')\n")
    _worker(tmp_path, 1, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n")
    assert failure.read(str(tmp_path), 0) is None and failure.read(str(tmp_path), 1) is None


def test_a_killed_rank_without_a_record_comes_before_a_victim_and_by_its_second(tmp_path):
    since = time.time()
    victim = _worker(tmp_path, 0, f"raise RuntimeError({GLOO.split(': ', 1)[1]!r})\n")
    order = failures.ordered({0: _seen(victim, int(time.time())),
                              1: _seen(12345, int(time.time()), exitcode=-9)},
                             str(tmp_path), since=since)
    assert [f.rank for f in order] == [1, 0] and order[0].exit == -9 and not order[0].precise


def test_records_of_another_attempt_or_process_are_not_used(tmp_path):
    pid = _worker(tmp_path, 1, "raise ValueError('old attempt')\n")
    later = time.time() + 1
    order = failures.ordered({1: _seen(pid, 7)}, str(tmp_path), since=later,
                             fallback=lambda r, f: "fallback line")
    assert order[0].line == "fallback line" and not order[0].precise   # written before since
    order = failures.ordered({1: _seen(pid + 1, 7)}, str(tmp_path), since=0,
                             fallback=lambda r, f: "fallback line")
    assert order[0].line == "fallback line"                             # another process
    # a new attempt's worker clears its rank's old record before the script runs
    _worker(tmp_path, 1, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n")
    assert failure.read(str(tmp_path), 1) is None


def test_a_rank_that_failed_on_its_own_before_the_agent_stopped_it_also_failed(tmp_path):
    since = time.time()
    first = _worker(tmp_path, 0, "raise SystemExit('meshrun: error: loss is nan at step 3')\n")
    _worker(tmp_path, 1, "raise SystemExit('meshrun: error: loss is nan at step 3')\n")
    stopping = time.time()
    _worker(tmp_path, 2, "raise KeyboardInterrupt\n")   # after the stop began: a stopped rank
    order = failures.ordered({0: _seen(first, 9)}, str(tmp_path), since=since,
                             ranks=(0, 1, 2), stopping=stopping, victim=lambda line: False)
    assert [(f.rank, f.seen) for f in order] == [(0, True), (1, False)]


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b'{"time": "x", "pid": 1}',
                                 b'{"time": 1e20, "pid": true, "line": 3}', b"\xff" * 10,
                                 b'{"time": 1e20, "pid": 5}',               # no rank
                                 b'{"time": 1e20, "pid": 5, "rank": "0"}'])
def test_a_malformed_record_is_ignored(tmp_path, raw):
    (tmp_path / "failures").mkdir()
    (tmp_path / "failures" / "rank0.json").write_bytes(raw)
    assert failure.read(str(tmp_path), 0) is None
    order = failures.ordered({0: _seen(1, 3)}, str(tmp_path), since=0,
                             fallback=lambda r, f: "")
    assert order[0].rank == 0 and not order[0].precise


def test_the_victim_rule_follows_the_diagnose_catalog():
    assert failures.is_victim(GLOO)
    assert not failures.is_victim("ValueError: bad batch")
    assert not failures.is_victim("")


def test_the_stop_time_is_the_latest_stop_burst(monkeypatch):
    """Each attempt of a job with restarts ends with a burst of "Sending process N closing
    signal" lines: the time kept is the last burst's, so a record of a later attempt is not
    taken for a stopped rank's."""
    now = [1000.0]
    monkeypatch.setattr(failures.time, "time", lambda: now[0])
    failures.Stopping.reset()
    failures.Stopping.saw()
    now[0] += 0.05
    failures.Stopping.saw()                       # the same burst: its first line counts
    assert failures.Stopping.since == 1000.0
    now[0] += 30                                  # the next attempt's stop
    failures.Stopping.saw()
    assert failures.Stopping.since == 1030.05
    failures.Stopping.reset()
    assert failures.Stopping.since is None


def test_a_missing_line_reads_as_none_and_the_tolerant_streams_copy():
    import copy
    import io

    from meshrun.worker.streams import Tolerant

    stream = Tolerant(io.StringIO())
    stream.write("x")
    assert copy.copy(stream) is not None and stream.getvalue() == "x"


def test_another_nodes_cause_is_diagnosed_in_diagnoses_own_sentence():
    """A node stopped for another node's failure leads its diagnosis with that cause: the
    catalog's sentence for its error line, with its rank and host; else how it ended."""
    from meshrun import protocol
    from meshrun.runtime.launch import _cause_diagnosis

    oom = protocol.Cause(1, 1, "gpu-b", "exited with code 1", "torch.OutOfMemoryError: CUDA "
                         "out of memory. Tried to allocate 2.00 GiB.")
    assert _cause_diagnosis(oom).startswith("first failure: rank 1 on gpu-b: CUDA out of "
                                            "memory — ")
    killed = protocol.Cause(3, 2, "gpu-c", "was killed by SIGKILL", "")
    assert _cause_diagnosis(killed) == "first failure: rank 3 on gpu-c: was killed by SIGKILL"

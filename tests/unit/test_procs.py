"""This agent's workers from /proc, signals that reach only them, and the SIGTERM the
watchdog sends torch's agent (runtime/procs.py, runtime/supervise.py). Real processes,
real signals, a real reused pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from meshrun.runtime import procs


def _worker(rank: int | None) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("RANK", None)
    if rank is not None:
        env["RANK"] = str(rank)
    return subprocess.Popen(["sleep", "60"], env=env)


@pytest.mark.parametrize("children_files", [True, False], ids=["children-files", "proc-scan"])
def test_workers_are_found_with_and_without_the_kernels_children_files(children_files):
    """Without CONFIG_PROC_CHILDREN there is no /proc/<pid>/task/<tid>/children: the scan of
    every /proc/<pid>/stat must find the same workers (and not a child without RANK)."""
    a, b, other = _worker(3), _worker(5), _worker(None)
    try:
        time.sleep(0.2)  # exec'd: /proc/<pid>/environ is sleep's, with RANK
        assert procs.worker_pids(children_files=children_files) == {3: a.pid, 5: b.pid}
        assert other.pid in procs.children(children_files=children_files)
    finally:
        for p in (a, b, other):
            p.kill()
            p.wait()


def test_a_listed_worker_is_signalled_but_a_process_that_took_its_pid_is_not():
    if not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.skip("needs a writable /proc/sys/kernel/ns_last_pid (root) to reuse a pid")
    first = _worker(2)
    time.sleep(0.2)
    assert procs.worker_pids() == {2: first.pid}
    pid = first.pid
    first.kill()
    first.wait()                                   # the worker is gone, its number free
    with open("/proc/sys/kernel/ns_last_pid", "w") as handle:
        handle.write(str(pid - 1))
    stranger = subprocess.Popen(["sleep", "60"])   # the kernel hands it the same number
    try:
        if stranger.pid != pid:
            pytest.skip(f"another process took pid {pid} first")
        assert procs.send(pid, signal.SIGKILL) is False
        time.sleep(0.2)
        assert stranger.poll() is None             # alive: meshrun did not kill it
    finally:
        stranger.kill()
        stranger.wait()
    live = _worker(4)
    try:
        time.sleep(0.2)
        procs.worker_pids()
        assert procs.send(live.pid, signal.SIGKILL) is True
        assert live.wait(5) == -signal.SIGKILL
    finally:
        live.kill()


RACE = textwrap.dedent("""
    import os, threading, time
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from meshrun.runtime import supervise
    from meshrun.runtime.launch import _raise_on_signals

    _raise_on_signals()
    real_kill = os.kill
    def slow_kill(pid, sig):   # the watchdog thread is descheduled between check and kill
        time.sleep(0.5)
        real_kill(pid, sig)
    os.kill = slow_kill

    def agent():               # torch's agent returns while the watchdog stops it
        threading.Thread(target=supervise.stop_agent).start()
        time.sleep(0.1)

    try:
        try:
            with supervise.agent_running():
                agent()
            print("agent returned", flush=True)
        except SignalException:
            print("stopped inside the agent", flush=True)
        time.sleep(1.0)        # what follows the agent: the event's report, the goodbye
        print("reported", flush=True)
    except SignalException:
        print("signal after the agent", flush=True)
""")


def test_the_watchdogs_sigterm_never_lands_after_the_agent_returned():
    """Checking that the agent runs and SIGTERM-ing this process were two steps: when the
    agent returned between them, the signal surfaced in the report (exit 143, not 4/5)."""
    done = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "signal after the agent" not in done.stdout
    assert done.stdout.strip().endswith("reported"), done.stdout

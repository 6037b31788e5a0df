"""The hang protocol's state on one node (runtime/hangs.py) over a store kept in a dict, and
the probe of this node's workers (runtime/hang_probe.py) against real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from test_seats import MemoryStore

from meshrun import protocol
from meshrun.runtime.events import EventKind
from meshrun.runtime.hang_probe import HangProbe, Workers
from meshrun.runtime.hangs import Hangs
from meshrun.runtime.judges import PROBE_WAIT_S
from meshrun.runtime.membership import Membership


def _at(step: int, coll: int) -> str:
    return protocol.Progress(step, time.time(), coll=coll, work=0.5).encode()


def _workers(left: int = 1) -> Workers:
    return Workers(pids=dict, restarts_left=lambda: left, send_signal=lambda pid, sig: None,
                   log_dir=".")


def _judge(hangs, store, now, values):
    return hangs.judge(store, now, values, timeout=5.0, members=Membership.initial(2),
                       nproc=1, hosts={0: "h0", 1: "h1"}, workers=_workers())


def test_node_0_finds_the_hang_probes_decides_once_answered_and_acts_once_it_was_read():
    store, hangs = MemoryStore(), Hangs(0, 2, threading.Event())
    values = {0: _at(4, 41), 1: _at(4, 40)}
    assert _judge(hangs, store, 100.0, values) is None and hangs.seen_once
    assert _judge(hangs, store, 104.0, values) is None and hangs.hang is None
    assert _judge(hangs, store, 105.0, values) is None and hangs.hang is not None
    hangs.probe.thread.join(5)                        # node 0's own answer (no workers)
    assert protocol.Probe.decode(store.get(protocol.stuck_key(0, 0))) == protocol.Probe((), 0)
    assert _judge(hangs, store, 106.0, values) is None    # node 1 has not answered
    store.set(protocol.stuck_key(0, 1), protocol.Probe((), 1).encode())
    verdict = _judge(hangs, store, 107.0, values)
    assert verdict is not None and verdict.stuck == ((1, 1, "h1"),)
    assert verdict.restart is False                   # node 0 runs no workers: none left
    assert _judge(hangs, store, 108.0, values) is None    # decided once
    assert hangs.verdict_read(store, 108.0, wait=3.0) is None    # node 1 has not read it
    store.add(protocol.hang_seen_key(0), 1)
    assert hangs.verdict_read(store, 108.0, wait=3.0) == verdict and hangs.hang is None
    event = hangs.act(verdict, dict, on_restart=lambda e: None)
    assert event.kind == EventKind.HANG and event.line == verdict.line and hangs.gen == 0


def test_without_answers_node_0_decides_after_the_probe_wait_and_acts_after_its_wait():
    store, hangs = MemoryStore(), Hangs(0, 2, threading.Event())
    values = {0: _at(1, 1), 1: _at(1, 1)}
    _judge(hangs, store, 0.0, values)
    _judge(hangs, store, 5.0, values)                 # the hang: probe
    hangs.probe.thread.join(5)
    assert _judge(hangs, store, 5.0 + PROBE_WAIT_S - 0.1, values) is None
    verdict = _judge(hangs, store, 5.0 + PROBE_WAIT_S, values)
    assert verdict is not None and verdict.restart is False    # node 1 never answered
    decided = 5.0 + PROBE_WAIT_S
    assert hangs.verdict_read(store, decided + 2.9, wait=3.0) is None
    assert hangs.verdict_read(store, decided + 3.0, wait=3.0) == verdict


def test_a_restart_starts_the_next_generation_and_the_old_progress_is_silence():
    hangs = Hangs(1, 2, threading.Event())
    restarted = []
    verdict = protocol.HangVerdict("hung", ((1, 1, "h1"),), restart=True)
    assert hangs.act(verdict, lambda: {1: 4242}, on_restart=restarted.append) is None
    assert hangs.gen == 1 and hangs.acted == 0
    assert [e.pids for e in restarted] == [(4242,)] and restarted[0].restart
    hangs.restarted()
    hangs.stale = {0: "left"}
    store = MemoryStore()
    assert hangs.judge(store, 1.0, {0: "left", 1: ""}, timeout=5.0,
                       members=Membership.initial(2), nproc=1, hosts={},
                       workers=_workers()) is None
    assert not hangs.seen_once                        # nothing counts as progress yet


def test_the_others_catch_up_probe_when_asked_and_act_on_a_verdict_once():
    store, hangs = MemoryStore(), Hangs(1, 2, threading.Event())
    assert hangs.follow(store, protocol.Watch(3, gen=2), _workers(left=2)) is None
    assert hangs.gen == 2                             # node 0 acted on hangs it missed
    assert hangs.follow(store, protocol.Watch(4, gen=2, probe=True), _workers(left=2)) is None
    hangs.probe.thread.join(5)
    assert protocol.Probe.decode(store.get(protocol.stuck_key(2, 1))).restarts_left == 0
    first = hangs.probe.thread
    hangs.follow(store, protocol.Watch(5, gen=2, probe=True), _workers())
    assert hangs.probe.thread is first                # one probe a generation
    verdict = protocol.HangVerdict("hung", (), restart=True)
    watch = protocol.Watch(6, gen=2, probe=True, verdict=verdict)
    assert hangs.restart_pending(watch)
    assert hangs.follow(store, watch, _workers()) == verdict
    assert store.add(protocol.hang_seen_key(2), 0) == 1    # counted as read
    assert hangs.follow(store, watch, _workers()) is None  # once
    assert not hangs.restart_pending(watch)


STACKS = """
import faulthandler, signal, sys, time
out = open(sys.argv[1], "a")
faulthandler.register(signal.SIGUSR1, file=out)
print("ready", flush=True)
time.sleep(60)
"""


def test_the_probe_names_a_stopped_worker_one_without_a_dump_and_one_outside_collectives(
        tmp_path):
    (tmp_path / "stacks").mkdir()
    dumping = subprocess.Popen([sys.executable, "-c", STACKS,
                                str(tmp_path / "stacks" / "rank0.txt")],
                               stdout=subprocess.PIPE, text=True)
    stopped = subprocess.Popen([sys.executable, "-c", STACKS,
                                str(tmp_path / "stacks" / "rank1.txt")],
                               stdout=subprocess.PIPE, text=True)
    mute = subprocess.Popen(["sleep", "60"])          # no handler: never signalled
    try:
        for proc in (dumping, stopped):
            assert proc.stdout.readline().strip() == "ready"
        stopped.send_signal(signal.SIGSTOP)
        sent: list = []
        workers = Workers(pids=dict, restarts_left=lambda: 3,
                          send_signal=lambda pid, sig: (sent.append(pid), os.kill(pid, sig)),
                          log_dir=str(tmp_path))
        pids = {0: dumping.pid, 1: stopped.pid, 2: mute.pid}
        found = HangProbe(threading.Event()).probe(pids, workers)
        assert found == protocol.Probe(((0, "not in a collective"), (1, "stopped"),
                                        (2, "no stack dump")), 3)
        assert mute.pid not in sent and dumping.pid in sent
        assert "in <module>" in (tmp_path / "stacks" / "rank0.txt").read_text()   # its dump
    finally:
        for proc in (dumping, stopped, mute):
            proc.kill()
            proc.wait()


def test_the_probe_answers_for_the_workers_it_probed_and_an_empty_node_has_no_restart():
    probe = HangProbe(threading.Event())
    store = MemoryStore()
    probe.start(store, 3, 1, Workers(pids=lambda: {5: 123456789}, restarts_left=lambda: 2,
                                     send_signal=lambda pid, sig: None, log_dir="/nonexistent"))
    probe.thread.join(5)
    answer = protocol.Probe.decode(store.get(protocol.stuck_key(3, 1)))
    assert answer == protocol.Probe(((5, "no stack dump"),), 2)
    assert probe.hung(3, dict) == {5: 123456789}        # the ones probed for generation 3
    assert probe.hung(4, lambda: {6: 7}) == {6: 7}      # a generation not probed: alive now
    assert probe.probe({}, Workers(dict, lambda: 5, lambda p, s: None, ".")).restarts_left == 0

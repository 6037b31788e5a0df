"""meshrun's job-store protocol at N nodes: join, preflight, supervision, and a frozen node.

    python bench/scale_protocol.py [--nodes 16,64,256,1024] [--procs 4] [--window 20]
        [--node-timeout 15] [--hang-timeout 300] [--interval 1] [--no-dns] [--json out.json]

No torch workers and no torch elastic agent: each simulated node runs only meshrun's own
store protocol, with meshrun's real code, over loopback:

1. ``open_store(plan)`` and ``join(job, plan)`` (a plan from ``make_plan`` for that node,
   as ``meshrun run --nnodes N --node-rank R --master-addr 127.0.0.1`` would make it);
2. the preflight ``exchange`` of a real ``fingerprint`` (computed once per process, for a
   script committed in a scratch git repository, and reused by every simulated node of that
   process with its own node rank, host name and clock), then ``node_hosts``;
3. ``job.close_calls()`` as the launcher does (torch's client stays open, as for the agent),
   and a real :class:`Watchdog` per node, built as ``supervise.start_watchdog`` builds it
   (``--interval``, ``--node-timeout``, ``--hang-timeout``, and the rendezvous' ``Rounds`` in
   round 0, as once the workers run), its ``on_event`` recording each event with its time.

Processes: node 0 alone (its CPU, which includes the store server's thread and the liveness
links' hub, is measured on its own), nodes 1..N-2 as threads spread over ``--procs`` member
processes (each node with its own store client, bounded-call thread and liveness link, as on
a real node), and node N-1, the victim, alone. Every process imports torch and builds its
plans and fingerprint first; then all start together ("go"). meshrun's console lines
(``say``) are silenced in these processes.

Once every watchdog runs: a settling pause (3 beats), the steady window (``--window`` s),
then SIGSTOP to the victim's process (its sockets stay open, as with a frozen host), and a
wait until node 0 names it and every member has read that in node 0's watch (at most
``--node-timeout`` + ``--cap`` s). Then every node stops (``Watchdog.stop``) and the victim
is killed.

Reported per N:

- join: from "go" to the last node's ``join`` returning; join + preflight: from "go" to the
  last node's ``exchange`` returning; node 0's exchange (from its call to publishing the
  verdict, and to its return once every node has read it) and the slowest node's exchange;
- node 0's process CPU in the window, as a fraction of one core (``getrusage``), the other
  processes' CPU, the machine's busy fraction (/proc/stat), the CPU other programs took
  and the load average;
- store operations on node 0's store in the window, per second and per beat: every call of
  every ``BoundedStore`` in every process (the benchmark wraps ``BoundedStore._call`` in its
  own processes only; every store call of the watchdogs goes through it, one TCPStore
  request each), against the protocol's 2 (N - 1) + c a beat, c being node 0's own calls
  (heartbeats, progress with ``--hang-timeout``, the next round's counter, the watch);
- the time from SIGSTOP until node 0's watchdog names the victim (its ``node-lost`` event),
  and until each member does (it reads the loss in node 0's watch);
- false alarms: every event but the victim's loss after its SIGSTOP, on any node, over the
  whole run.

``--no-dns`` (root): every process in a private mount namespace whose nsswitch.conf answers
host names from /etc/hosts only (see :func:`local_names_only`): torch's TCPStore looks up the
peer's name of each connection, and a resolver that drops bursts of queries stalls node 0's
store for seconds; that measures the resolver, not meshrun.

Every process shares this machine's cores: the member watchdogs, which on a real cluster run
on N - 1 other machines, compete with node 0 for the CPU here.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import queue as queue_module
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from meshrun.harness import free_port
from meshrun.runtime.supervision import Supervision

_MESHRUN = Supervision()   # the supervision flags' defaults, declared once

TRAIN = "print('training')\n"


@dataclass(frozen=True)
class Config:
    nodes: int
    port: int
    run_id: str
    workdir: str
    node_timeout: float
    hang_timeout: float
    interval: float
    join_timeout: int


@dataclass
class Control:
    """The orchestrator's signals to every process (multiprocessing events)."""

    go: Any
    window_start: Any
    window_end: Any
    stop_members: Any
    stop_host: Any


# --- inside each node process ------------------------------------------------------------

class OpCounter:
    """Counts every bounded store call of this process, by operation and by calling node
    (a watchdog thread carries its node rank); notes when the preflight verdict was set."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_name: Counter = Counter()
        self.by_node: Counter = Counter()
        self.beats: Counter = Counter()  # node -> its beats: heartbeats written (node 0: watches)
        self.failed = 0
        self.verdict_at: float | None = None

    def install(self) -> None:
        from meshrun import protocol
        from meshrun.runtime.store import BoundedStore

        real = BoundedStore._call
        counter = self

        def counted(store: Any, name: str, *args: Any, timeout: float | None = None) -> Any:
            node = getattr(threading.current_thread(), "node_rank", None)
            with counter.lock:
                counter.by_name[name] += 1
                if node is not None:
                    counter.by_node[node] += 1
                    if name == "set" and args[0] in (protocol.WATCH,
                                                     protocol.heartbeat_key(node)):
                        counter.beats[node] += 1
            try:
                value = real(store, name, *args, timeout=timeout)
            except Exception:
                with counter.lock:
                    counter.failed += 1
                raise
            if name == "set" and args and args[0] == protocol.PREFLIGHT_VERDICT:
                counter.verdict_at = time.monotonic()
            return value

        BoundedStore._call = counted

    def snapshot(self) -> dict:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        with self.lock:
            return {"t": time.monotonic(), "cpu_s": usage.ru_utime + usage.ru_stime,
                    "ops": sum(self.by_name.values()), "by_name": dict(self.by_name),
                    "by_node": dict(self.by_node), "beats": dict(self.beats),
                    "failed": self.failed, "threads": _os_threads(),
                    "rss_mib": usage.ru_maxrss / 1024}


def _os_threads() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def _prepare_process() -> None:
    """Die with the orchestrator, allow many sockets, keep meshrun's node lines quiet."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    from meshrun.runtime import store

    store.say = lambda message: None  # join()'s "waiting for nodes" lines, N of them


def _plan(conf: Config, rank: int, env: dict, facts: Any) -> Any:
    from dataclasses import replace

    from meshrun.plan import Command, make_plan
    from meshrun.topology import Flags

    flags = Flags(nnodes=str(conf.nodes), node_rank=str(rank), master_addr="127.0.0.1",
                  master_port=str(conf.port), run_id=conf.run_id,
                  log_dir=os.path.join(conf.workdir, "logs"),
                  join_timeout=str(conf.join_timeout))
    return make_plan(env, flags, replace(facts, hostname=f"sim{rank}"),
                     Command(os.path.join(conf.workdir, "train.py")))


def _watchdog(conf: Config, plan: Any, job: Any, hosts: dict, on_event: Callable) -> Any:
    """The watchdog as the launcher builds it (supervise.start_watchdog), minus the workers."""
    import inspect

    from meshrun.runtime.watchdog import Watchdog

    extra: dict[str, Any] = {}
    if "rounds" in inspect.signature(Watchdog).parameters:
        from meshrun.runtime.rendezvous import Rounds

        rounds = Rounds()
        rounds.current = 0  # the workers run in round 0: node 0 watches for round 1
        extra["rounds"] = rounds
    return Watchdog(host=plan.master_addr, port=job.port, node_rank=plan.node_rank,
                    nnodes=plan.nnodes, world_size=plan.world_size, hosts=hosts,
                    node_timeout=conf.node_timeout, hang_timeout=conf.hang_timeout,
                    interval=conf.interval, on_event=on_event, log_dir=plan.log_dir, **extra)


def _one_node(conf: Config, plan: Any, fingerprint: dict, record: dict,
              on_event: Callable) -> Any:
    """One node: open the store, join, preflight, host names, then its watchdog."""
    from meshrun.runtime.preflight import exchange
    from meshrun.runtime.store import join, open_store
    from meshrun.runtime.supervise import node_hosts

    job = None
    try:
        record["open"] = time.monotonic()
        job = open_store(plan)
        record["opened"] = time.monotonic()
        join(job, plan)
        record["joined"] = time.monotonic()
        mine = dict(fingerprint, node_rank=plan.node_rank, hostname=plan.hostname,
                    clock=time.time())
        record["preflight_start"] = time.monotonic()
        verdict = exchange(job.calls, plan, mine, timeout_s=min(plan.join_timeout, 120))
        record["preflight_end"] = time.monotonic()
        record["ok"] = verdict.ok
        hosts = node_hosts(job, plan)
    except Exception as exc:  # noqa: BLE001 - reported, the run is then aborted
        record["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return None
    finally:
        if job is not None:
            job.close_calls()
    dog = _watchdog(conf, plan, job, hosts, on_event)
    dog.start()
    record["watching"] = time.monotonic()
    record["job"] = job  # keep torch's client open, as the agent does (dropped before sending)
    return dog


def node_process(index: int, ranks: list[int], conf: Config, queue: Any, ctl: Control) -> None:
    """A process of ``ranks`` simulated nodes (threads)."""
    _prepare_process()
    counter = OpCounter()
    counter.install()
    from meshrun.facts import collect
    from meshrun.harness import clean_env
    from meshrun.runtime.events import Goodbye
    from meshrun.runtime.preflight import fingerprint

    env = clean_env()
    facts = collect(env)
    plans = [_plan(conf, rank, env, facts) for rank in ranks]
    started = time.perf_counter()
    mine = fingerprint(plans[0])
    queue.put(("ready", index, {"pid": os.getpid(), "ranks": len(ranks),
                                "fingerprint_s": time.perf_counter() - started}))
    events: list[dict] = []

    def recorder(rank: int) -> Callable:
        def on_event(event: Any) -> None:
            seen = {"t": time.monotonic(), "node": rank, "kind": str(event.kind),
                    "about": event.node, "line": event.line}
            events.append(seen)
            queue.put(("event", index, seen))
        return on_event

    ctl.go.wait()
    records: list[dict] = [{"rank": rank} for rank in ranks]
    dogs: list[Any] = [None] * len(ranks)

    def run(i: int) -> None:
        dogs[i] = _one_node(conf, plans[i], mine, records[i], recorder(ranks[i]))

    threads = [threading.Thread(target=run, args=(i,), name=f"node-{rank}")
               for i, rank in enumerate(ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    jobs = [record.pop("job", None) for record in records]
    if counter.verdict_at is not None:
        records[0]["verdict_published"] = counter.verdict_at
    queue.put(("setup", index, {"nodes": records, "threads": _os_threads()}))

    ctl.window_start.wait()
    first = counter.snapshot()
    hub = getattr(dogs[0], "_hub", None) if 0 in ranks else None  # node 0's liveness links
    first["links"] = len(hub.linked()) if hub else None
    ctl.window_end.wait()
    last = counter.snapshot()
    queue.put(("window", index, {"start": first, "end": last, "events": list(events)}))

    if conf.nodes - 1 in ranks:
        # The victim: SIGSTOPped now, SIGKILLed at the end. It must not wait on a shared
        # event: setting one waits for every sleeper to wake, and a stopped one never does.
        # Nor hold the queue's shared write lock when stopped (its feeder thread takes it
        # for every message; every other process's messages would then wait forever): flush
        # and end the feeder first, then say so in a file the parent waits for.
        queue.close()
        queue.join_thread()
        _victim_flag(os.getpid()).touch()
        while True:
            time.sleep(60)
    (ctl.stop_host if 0 in ranks else ctl.stop_members).wait()
    started = time.monotonic()
    stops = [threading.Thread(target=dog.stop, args=(Goodbye.STOPPED,), daemon=True)
             for dog in dogs if dog is not None]  # every node stops at once, as on a cluster
    for thread in stops:
        thread.start()
    for thread in stops:
        thread.join(max(0.0, started + 60 - time.monotonic()))
    final = counter.snapshot()
    queue.put(("final", index, {"failed_calls": final["failed"], "events": len(events),
                                "stop_s": time.monotonic() - started,
                                "not_stopped": sum(t.is_alive() for t in stops)}))
    del jobs
    queue.close()
    queue.join_thread()
    os._exit(0)  # no interpreter shutdown under live store threads


# --- the orchestrator --------------------------------------------------------------------

def _victim_flag(pid: int) -> Path:
    """The file the victim creates once its queue's feeder thread has ended."""
    return Path(tempfile.gettempdir()) / f"scale_protocol.victim.{pid}"


def local_names_only() -> None:
    """Put this process (and the processes it starts) in a private mount namespace where
    ``/etc/nsswitch.conf`` reads ``hosts: files``: a name lookup that /etc/hosts cannot answer
    fails at once instead of asking the network's resolver. torch's TCPStore looks up the
    peer's name of every connection it opens or accepts (the server in its one loop thread);
    a resolver that drops a burst of those queries (this sandbox's does) stalls node 0's
    whole store 5 s per dropped query. Needs root; the host's own file is left untouched."""
    import ctypes

    clone_newns, ms_rec, ms_private, ms_bind = 0x20000, 0x4000, 1 << 18, 4096
    path = Path(tempfile.gettempdir()) / "scale_protocol.nsswitch.conf"
    path.write_text("hosts: files\n")
    libc = ctypes.CDLL(None, use_errno=True)
    if (libc.unshare(clone_newns) != 0
            or libc.mount(b"none", b"/", None, ms_rec | ms_private, None) != 0
            or libc.mount(str(path).encode(), b"/etc/nsswitch.conf", None, ms_bind, None) != 0):
        raise SystemExit(f"--no-dns: no private mount namespace here "
                         f"({os.strerror(ctypes.get_errno())}); it needs root")


def groups(nodes: int, procs: int) -> list[list[int]]:
    """Node 0 alone, nodes 1..N-2 over ``procs`` member processes, node N-1 (victim) alone."""
    members = list(range(1, nodes - 1))
    procs = max(1, min(procs, len(members)))
    return [[0]] + [members[i::procs] for i in range(procs)] + [[nodes - 1]]


def _cpu_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def _scratch_repo(folder: str) -> None:
    """A script committed in a git repository: the fingerprint's code identity is real."""
    Path(folder, "train.py").write_text(TRAIN)
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "-C", folder]
    try:
        subprocess.run(["git", "init", "-q", folder], check=True, capture_output=True)
        subprocess.run(git + ["add", "train.py"], check=True, capture_output=True)
        subprocess.run(git + ["commit", "-qm", "bench"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pass  # no git: the script's hash is the identity


class Run:
    """One N: start the processes, drive the phases, gather the messages."""

    def __init__(self, conf: Config, procs: int, window: float, cap: float,
                 verbose: bool = False) -> None:
        self.conf, self.window, self.cap, self.verbose = conf, window, cap, verbose
        self.groups = groups(conf.nodes, procs)
        ctx = multiprocessing.get_context("spawn")
        self.queue = ctx.Queue()
        self.ctl = Control(*(ctx.Event() for _ in range(5)))
        self.procs = [ctx.Process(target=node_process, args=(i, ranks, conf, self.queue,
                                                             self.ctl), daemon=True)
                      for i, ranks in enumerate(self.groups)]
        self.load_before = os.getloadavg()  # before anything of this run started
        self.inbox: dict[str, dict[int, Any]] = {k: {} for k in
                                                  ("ready", "setup", "window", "final")}
        self.events: list[dict] = []
        self.stop_error: str | None = None

    def pump(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"N={self.conf.nodes}: timed out waiting for {what}")
            try:
                kind, index, payload = self.queue.get(timeout=min(left, 0.5))
            except queue_module.Empty:
                dead = [i for i, p in enumerate(self.procs)
                        if p.exitcode is not None and i not in self.inbox["final"]]
                if dead:
                    raise RuntimeError(f"N={self.conf.nodes}: process {dead[0]} exited "
                                       f"({self.procs[dead[0]].exitcode}) during {what}")
                continue
            if self.verbose:
                print(f"{time.monotonic():.2f} {kind} from process {index}: "
                      f"{str(payload)[:300]}", file=sys.stderr, flush=True)
            if kind == "event":
                self.events.append(dict(payload, process=index))
            else:
                self.inbox[kind][index] = payload

    def all_in(self, kind: str, indices: range | list[int] | None = None) -> Callable:
        wanted = list(indices if indices is not None else range(len(self.procs)))
        return lambda: all(i in self.inbox[kind] for i in wanted)

    def execute(self) -> dict:
        conf = self.conf
        victim_proc = len(self.procs) - 1
        for proc in self.procs:
            proc.start()
        try:
            self.pump(self.all_in("ready"), 300, "every process to start")
            go = time.monotonic()
            self.ctl.go.set()
            self.pump(self.all_in("setup"), conf.join_timeout + 180, "join and preflight")
            setups = self.inbox["setup"]
            nodes = [n for i in sorted(setups) for n in setups[i]["nodes"]]
            errors = [n for n in nodes if "error" in n]
            if errors:
                raise RuntimeError(f"N={conf.nodes}: {len(errors)} node(s) failed; first: "
                                   f"node {errors[0]['rank']}: {errors[0]['error']}")
            time.sleep(3 * conf.interval)
            busy0, total0 = _cpu_busy()
            self.ctl.window_start.set()
            time.sleep(self.window)
            self.ctl.window_end.set()
            busy1, total1 = _cpu_busy()
            load = os.getloadavg()
            self.pump(self.all_in("window"), 60, "the window's counts")
            victim = conf.nodes - 1
            flag = _victim_flag(self.procs[victim_proc].pid)
            self.pump(flag.exists, 60, "the victim to flush its messages")
            flag.unlink()
            stopped = time.monotonic()
            os.kill(self.procs[victim_proc].pid, signal.SIGSTOP)

            def seen() -> bool:
                named = {e["node"] for e in self.events
                         if e["kind"] == "node-lost" and e["about"] == victim}
                return named >= set(range(conf.nodes - 1))
            try:
                self.pump(seen, conf.node_timeout + self.cap, "the victim to be named")
            except RuntimeError:
                pass  # reported below: who did not name it
            self.ctl.stop_members.set()
            members = list(range(1, len(self.procs) - 1))
            try:
                self.pump(self.all_in("final", members), 90, "the members to stop")
                self.ctl.stop_host.set()
                self.pump(self.all_in("final", [0]), 90, "node 0 to stop")
            except RuntimeError as exc:  # the measurements are in: reported with the row
                self.stop_error = str(exc)
        finally:
            for proc in self.procs:
                if proc.is_alive():
                    os.kill(proc.pid, signal.SIGKILL)
                proc.join(10)
        return self.summary(go, nodes, stopped, (busy1 - busy0) / max(1, total1 - total0),
                            load)

    def summary(self, go: float, nodes: list[dict], stopped: float, busy: float,
                load: tuple[float, float, float]) -> dict:
        conf = self.conf
        victim = conf.nodes - 1
        windows = self.inbox["window"]
        spans = {i: w["end"]["t"] - w["start"]["t"] for i, w in windows.items()}
        cpu = {i: (w["end"]["cpu_s"] - w["start"]["cpu_s"]) / spans[i] for i, w in windows.items()}
        ops = {i: (w["end"]["ops"] - w["start"]["ops"]) / spans[i] for i, w in windows.items()}
        calls: dict[int, int] = {}   # node -> its watchdog's calls in the window
        beats: dict[int, int] = {}   # node -> its beats in the window
        rate: dict[int, float] = {}  # node -> beats per interval
        for i, w in windows.items():
            first, last = w["start"], w["end"]
            for node in last["by_node"]:
                calls[node] = last["by_node"][node] - first["by_node"].get(node, 0)
                beats[node] = last["beats"].get(node, 0) - first["beats"].get(node, 0)
                rate[node] = beats[node] / spans[i] * conf.interval
        per_beat = {node: calls[node] / beats[node] for node in calls if beats[node]}
        node0 = next(n for n in nodes if n["rank"] == 0)
        seen: dict[int, float] = {}
        for event in sorted(self.events, key=lambda e: e["t"]):
            if event["kind"] == "node-lost" and event["about"] == victim \
                    and event["t"] >= stopped:
                seen.setdefault(event["node"], event["t"] - stopped)
        # the victim's own events before its SIGSTOP, as it sent them with its window counts
        streamed = {(e["node"], e["t"]) for e in self.events}
        everything = self.events + [e for e in windows[len(self.procs) - 1]["events"]
                                    if (e["node"], e["t"]) not in streamed]
        false_alarms = [e for e in everything
                        if not (e["kind"] == "node-lost" and e["about"] == victim
                                and e["t"] >= stopped)]
        own = 2 + (conf.hang_timeout > 0) + ("rounds" in _watchdog_parameters())
        formula = 2 * (conf.nodes - 1) + own
        member_seen = [s for n, s in seen.items() if n != 0]
        return {
            "nodes": conf.nodes,
            "processes": [len(g) for g in self.groups],
            "threads_max": max(w["start"]["threads"] for w in windows.values()),
            "threads_node0": windows[0]["start"]["threads"],
            "rss_mib_max": max(w["end"]["rss_mib"] for w in windows.values()),
            "rss_mib_node0": windows[0]["end"]["rss_mib"],
            "links_at_node0": windows[0]["start"].get("links"),
            "fingerprint_s": max(r["fingerprint_s"] for r in self.inbox["ready"].values()),
            "join_s": max(n["joined"] for n in nodes) - go,
            "join_preflight_s": max(n["preflight_end"] for n in nodes) - go,
            "preflight_node0_verdict_s": node0.get("verdict_published", float("nan"))
            - node0["preflight_start"],
            "preflight_node0_s": node0["preflight_end"] - node0["preflight_start"],
            "preflight_slowest_s": max(n["preflight_end"] - n["preflight_start"] for n in nodes),
            "verdict_ok": sum(bool(n.get("ok")) for n in nodes),
            "window_s": statistics.mean(spans.values()),
            "node0_cpu_core": cpu[0],
            "members_cpu_cores": sum(v for i, v in cpu.items() if i != 0),
            "machine_busy": busy,
            "cores": os.cpu_count(),
            "others_cpu_cores": busy * (os.cpu_count() or 1) - sum(cpu.values()),
            "loadavg_before": list(self.load_before),
            "loadavg": list(load),
            "store_ops_per_s": sum(ops.values()),
            "store_ops_by_name": _ops_by_name(windows, spans),
            "formula_ops_per_beat": formula,
            "formula_ops_per_s": formula / conf.interval,
            "ops_per_beat": sum(per_beat.values()),
            "node0_calls_per_beat": per_beat.get(0),
            "member_calls_per_beat_max": max((v for n, v in per_beat.items() if n != 0),
                                             default=None),
            "node0_beats_per_interval": rate.get(0),
            "member_beats_per_interval_min": min(rate.get(n, 0.0) for n in range(1, conf.nodes)),
            "failed_calls_in_window": sum(w["end"]["failed"] - w["start"]["failed"]
                                          for w in windows.values()),
            "named_by_node0_s": seen.get(0),
            "members_saw_median_s": statistics.median(member_seen) if member_seen else None,
            "members_saw_max_s": max(member_seen) if member_seen else None,
            "members_saw": len(member_seen),
            "members": conf.nodes - 2,
            "false_alarms": len(false_alarms),
            "false_alarm_lines": [f"node {e['node']}: {e['line']}" for e in false_alarms][:10],
            "stop_s_max": max((f["stop_s"] for f in self.inbox["final"].values()), default=None),
            "not_stopped": sum(f["not_stopped"] for f in self.inbox["final"].values()),
            "stop_error": self.stop_error,
        }


def _watchdog_parameters() -> set[str]:
    import inspect

    from meshrun.runtime.watchdog import Watchdog

    return set(inspect.signature(Watchdog).parameters)


def _ops_by_name(windows: dict, spans: dict) -> dict[str, float]:
    out: Counter = Counter()
    for i, w in windows.items():
        for name, count in w["end"]["by_name"].items():
            out[name] += (count - w["start"]["by_name"].get(name, 0)) / spans[i]
    return {name: round(rate, 1) for name, rate in sorted(out.items())}


def measure(nodes: int, *, procs: int = 4, window: float = 20.0,
            node_timeout: float = _MESHRUN.node_timeout,
            hang_timeout: float = _MESHRUN.hang_timeout, interval: float = _MESHRUN.beat,
            join_timeout: int = 300,
            cap: float = 10.0, verbose: bool = False) -> dict:
    """Run the benchmark once for ``nodes`` nodes; the row of the report."""
    if nodes < 3:
        raise ValueError("at least 3 nodes: node 0, a member and the victim")
    with tempfile.TemporaryDirectory(prefix="scale-protocol-") as workdir:
        _scratch_repo(workdir)
        conf = Config(nodes=nodes, port=free_port(), run_id=f"scale-{nodes}-{os.getpid()}",
                      workdir=workdir, node_timeout=node_timeout, hang_timeout=hang_timeout,
                      interval=interval, join_timeout=join_timeout)
        row = Run(conf, procs, window, cap, verbose).execute()
    row["config"] = {k: v for k, v in asdict(conf).items() if k not in ("port", "workdir")}
    row["config"].update(procs=procs, window=window)
    return row


# --- the report --------------------------------------------------------------------------

HEADER = ("| N | processes: node 0 + members + victim | threads (largest process) | join s "
          "| join + preflight s | preflight node 0: to verdict / to return s "
          "| preflight, slowest node s | node 0 CPU (of one core) | other processes' CPU (cores) "
          "| machine in the window: busy; other programs' CPU (cores); load avg 1 min, "
          "before the run / at the window's end | store ops/s; a beat (formula) "
          "| slowest node's beats a second | named by node 0 s | members saw it: median / max s "
          "| false alarms |\n|" + "---|" * 15)


def _s(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table_row(row: dict) -> str:
    members = row["processes"][1:-1]
    spread = (f"{len(members)}x{members[0]}" if min(members) == max(members)
              else f"{len(members)}x{min(members)}-{max(members)}")
    return (f"| {row['nodes']} | 1 + {spread} + 1 | {row['threads_max']} | {_s(row['join_s'])} "
            f"| {_s(row['join_preflight_s'])} | {_s(row['preflight_node0_verdict_s'])} / "
            f"{_s(row['preflight_node0_s'])} | {_s(row['preflight_slowest_s'])} "
            f"| {row['node0_cpu_core']:.1%} | {row['members_cpu_cores']:.2f} "
            f"| {row['machine_busy']:.0%} of {row['cores']}; {row['others_cpu_cores']:.2f}; "
            f"{row['loadavg_before'][0]:.1f} / {row['loadavg'][0]:.1f} "
            f"| {row['store_ops_per_s']:.0f}; {row['ops_per_beat']:.1f} "
            f"({row['formula_ops_per_beat']}) | {row['member_beats_per_interval_min']:.2f} "
            f"| {_s(row['named_by_node0_s'])} | {_s(row['members_saw_median_s'])} / "
            f"{_s(row['members_saw_max_s'])} ({row['members_saw']}/{row['members']}) "
            f"| {row['false_alarms']} |")


def describe_setup() -> dict:
    """What was measured: meshrun's commit (and whether src/ had changes), torch, the host."""
    from importlib import metadata

    repo = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              check=False)
        return done.stdout.strip()

    return {"meshrun_commit": git("rev-parse", "--short", "HEAD"),
            "src_changed": bool(git("status", "--porcelain", "--", "src")),
            "torch": metadata.version("torch"), "python": sys.version.split()[0],
            "cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "loadavg": list(os.getloadavg())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="16,64,256,1024")
    parser.add_argument("--procs", type=int, default=4,
                        help="member processes for nodes 1..N-2 (default 4)")
    parser.add_argument("--window", type=float, default=20.0,
                        help="steady supervision window before the SIGSTOP, s (default 20)")
    parser.add_argument("--node-timeout", type=float, default=_MESHRUN.node_timeout,
                        help="meshrun's --node-timeout (default: meshrun's own, "
                             f"{_MESHRUN.node_timeout:g})")
    parser.add_argument("--hang-timeout", type=float, default=_MESHRUN.hang_timeout,
                        help="meshrun's --hang-timeout (default: meshrun's own, "
                             f"{_MESHRUN.hang_timeout:g}; 0: off)")
    parser.add_argument("--interval", type=float, default=_MESHRUN.beat,
                        help=f"heartbeat period, s (default: meshrun's beat, {_MESHRUN.beat:g})")
    parser.add_argument("--join-timeout", type=int, default=300)
    parser.add_argument("--cap", type=float, default=10.0,
                        help="wait at most node timeout + this for the victim to be named")
    parser.add_argument("--json", default="")
    parser.add_argument("--no-dns", action="store_true",
                        help="name lookups from /etc/hosts only, in a private mount namespace "
                             "(root): see local_names_only()")
    parser.add_argument("--verbose", action="store_true",
                        help="print every message of the node processes (stderr)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # the processes inherit it
    if args.no_dns:
        local_names_only()
    setup = describe_setup()
    rows: list[dict] = []
    for nodes in [int(n) for n in args.nodes.split(",")]:
        try:
            row = measure(nodes, procs=args.procs, window=args.window,
                          node_timeout=args.node_timeout, hang_timeout=args.hang_timeout,
                          interval=args.interval, join_timeout=args.join_timeout,
                          cap=args.cap, verbose=args.verbose)
        except RuntimeError as exc:  # a phase that never ended: reported, the next N runs
            row = {"nodes": nodes, "error": str(exc)}
            print(f"nodes {nodes:>5}: {exc}", flush=True)
        else:
            print(f"nodes {nodes:>5}: join {row['join_s']:.2f} s, + preflight "
                  f"{row['join_preflight_s']:.2f} s; node 0 CPU {row['node0_cpu_core']:.1%} "
                  f"of a core; {row['store_ops_per_s']:.0f} store ops/s, "
                  f"{row['ops_per_beat']:.1f} a beat (formula {row['formula_ops_per_beat']}); "
                  f"named in {_s(row['named_by_node0_s'])} s; false alarms "
                  f"{row['false_alarms']}", flush=True)
            for line in row["false_alarm_lines"]:
                print(f"  false alarm: {line}", flush=True)
        rows.append(row)
        if args.json:  # after every N: a later one that fails leaves the earlier ones
            Path(args.json).write_text(json.dumps({"argv": sys.argv[1:], "setup": setup,
                                                   "rows": rows}, indent=2) + "\n")
    print("\n" + HEADER)
    for row in rows:
        print(table_row(row) if "error" not in row else f"| {row['nodes']} | {row['error']} |")
    return 1 if any("error" in row for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

"""Several meshrun nodes on one machine, for meshrun's own tests and benchmarks (and anyone
who wants to start a multi-node job on loopback from Python): one clean environment, free
ports, N `meshrun run` agents of one job, waiting for a line, stopping a node's whole
process tree.

    from meshrun.harness import Nodes, clean_env

    with Nodes(folder, ["--", "train.py"], nnodes=2, nproc=1) as nodes:
        nodes.wait_for("first step done", node=0, timeout=90)
        nodes.signal(1, signal.SIGKILL)          # node 1's agent and its workers
        codes = nodes.wait(timeout=60)

The environment a node gets is this process's without any variable through which a
platform tells a node its place (the topology detectors' own declarations, so a new
platform is left out without touching this file), without ``MESHRUN_*`` and without the
devices and threads a host sets; every node adds its flags itself.

Ports: :func:`free_port` asks the kernel for one, except under pytest-xdist, where each
worker takes ports from a range of its own below the kernel's ephemeral range (``gw0``
20000-21999, ``gw1`` 22000-23999, ...): two workers never pick the same port, and no
connection's ephemeral port takes one between the pick and the bind.

A slow node for real: :class:`CpuQuota` puts a process tree in a cgroup v1 ``cpu`` group
(``/sys/fs/cgroup/cpu``, writable as root) with a quota (``cpu.cfs_quota_us``: the kernel
throttles every thread in it, children forked later included) or a low weight
(``cpu.shares``: it gets what the rest of the machine leaves).

Nothing here imports torch; it starts processes, so it belongs with the effects.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import signal as signals
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

CGROUP_CPU = "/sys/fs/cgroup/cpu"
FIRST_PORT = 20000      # the per-worker ranges start here (the kernel's begin at 32768)
PORTS_PER_WORKER = 2000
_NEXT: dict[int, itertools.count] = {}


# --- the environment ----------------------------------------------------------------------

def neutral(name: str) -> bool:
    """Whether a neutral machine lacks ``name``: a platform's variable (as the topology's
    detectors declare them), a launcher's (torchrun's ``TORCHELASTIC_*``, ``GROUP_RANK``...),
    meshrun's own, or the devices and threads a host sets."""
    from .topology import platform_variable

    return (platform_variable(name) or name.startswith(("MESHRUN_", "TORCHELASTIC_"))
            or name in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "GROUP_RANK",
                        "LOCAL_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE"))


def clean_env(base: Mapping[str, str] | None = None, keep: Iterable[str] = (),
              **extra: str) -> dict[str, str]:
    """``base`` (default ``os.environ``) without the variables :func:`neutral` names (but
    those in ``keep``: a GPU benchmark keeps ``CUDA_VISIBLE_DEVICES``), unbuffered Python,
    plus ``extra``: the environment of a node on a neutral machine."""
    kept = set(keep)
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if k in kept or not neutral(k)}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


# --- ports ----------------------------------------------------------------------------------

def worker_index(env: Mapping[str, str] | None = None) -> int | None:
    """This pytest-xdist worker's number (``gw3`` -> 3), None outside xdist."""
    name = (os.environ if env is None else env).get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else None


def port_range(index: int) -> range:
    first = FIRST_PORT + index * PORTS_PER_WORKER
    return range(first, first + PORTS_PER_WORKER)


def _free(port: int, host: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "") -> int:
    """A TCP port nothing listens on (on every address when ``host`` is empty, as a store
    binds it). Under pytest-xdist from this worker's own range, in turn; else the kernel's."""
    index = worker_index()
    if index is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return sock.getsockname()[1]
    ports = port_range(index)
    turn = _NEXT.setdefault(index, itertools.count())
    for _ in range(len(ports)):
        port = ports[next(turn) % len(ports)]
        if _free(port, host):
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1} (xdist worker {index})")


# --- processes ------------------------------------------------------------------------------

def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants alive now (torch's agent starts workers in sessions of
    their own: a process group or session does not reach them). From the kernel's
    ``children`` files, or a scan of every ``/proc/<pid>/stat`` where the kernel has none."""
    children = None if os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children") \
        else _children_by_scan()
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        if children is not None:
            todo += children.get(current, [])
            continue
        try:
            with open(f"/proc/{current}/task/{current}/children") as handle:
                todo += [int(p) for p in handle.read().split()]
        except OSError:
            pass
    return out


def proc_stats() -> dict[int, list[str]]:
    """pid -> the fields of ``/proc/<pid>/stat`` after the command name (state, ppid, pgrp,
    session, ...: index k is the stat field k + 3) of every process alive now."""
    out: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                    out[int(entry)] = handle.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
    return out


def _children_by_scan() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for pid, fields in proc_stats().items():
        try:
            children.setdefault(int(fields[1]), []).append(pid)
        except (ValueError, IndexError):
            continue
    return children


def workers_of(pid: int) -> list[int]:
    """The worker processes (meshrun's worker shim) among ``pid``'s descendants alive now."""
    out = []
    for each in tree(pid):
        try:
            if b"meshrun.worker.bootstrap" in open(f"/proc/{each}/cmdline", "rb").read():
                out.append(each)
        except OSError:
            continue
    return out


def signal_tree(pid: int, sig: int) -> None:
    """``sig`` to ``pid`` and every descendant at once (a whole simulated node)."""
    for each in tree(pid):
        try:
            os.kill(each, sig)
        except OSError:
            pass


def wait_for_text(path: Path, text: str, timeout: float,
                  procs: Iterable[subprocess.Popen] = (), poll: float = 0.1,
                  times: int = 1) -> float | None:
    """Seconds until ``text`` appears in the file ``path`` (``times`` times: a node started
    again appends to its file); None when it did not within ``timeout``, or when one of
    ``procs`` ended first (the text checked once more then)."""
    started = time.monotonic()
    procs = list(procs)

    def seen() -> bool:
        try:
            return path.read_text(errors="replace").count(text) >= times
        except FileNotFoundError:
            return False

    while True:
        if seen():
            return time.monotonic() - started
        if time.monotonic() - started >= timeout or any(p.poll() is not None for p in procs):
            return time.monotonic() - started if seen() else None
        time.sleep(poll)


_NODE_PREFIX = re.compile(r"^\[node \d+\] ", re.M)


def own_lines(text: str) -> list[str]:
    """``text``'s lines without the ``[node k] `` that a node of a job of several puts before
    meshrun's own console lines (runtime/logs.py): what a test or a benchmark matches on."""
    return _NODE_PREFIX.sub("", text).splitlines()


def browser() -> str | None:
    """The distribution's headless Chromium (scripts/test.sh installs it as root on Debian)."""
    import shutil

    return shutil.which("chromium-headless-shell") or shutil.which("chromium")


def load_page(chrome: str, page: Path, png: Path, height: int = 2000) -> tuple[str, str]:
    """``page`` (a file) loaded in headless Chromium as a person opens it (offline, its
    scripts run): the DOM after them and what the page logged to the console (its lines
    ``:CONSOLE``; a page that works logs nothing); a screenshot ``height`` pixels tall to
    ``png``. Raises CalledProcessError when Chromium fails."""
    common = [chrome, "--headless", "--no-sandbox", "--disable-gpu",
              "--allow-file-access-from-files", "--enable-logging=stderr", "--v=0",
              "--virtual-time-budget=5000", f"--window-size=1200,{height}"]
    done = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True,
                          text=True, timeout=120, check=True)
    png.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([*common, f"--screenshot={png}", page.as_uri()], capture_output=True,
                   text=True, timeout=120, check=True)
    said = "\n".join(ln for ln in done.stderr.splitlines() if ":CONSOLE" in ln)
    return done.stdout, said


def meshrun_argv(*args: str) -> list[str]:
    """``meshrun ARGS`` as this interpreter runs it."""
    return [sys.executable, "-m", "meshrun", *args]


class Nodes:
    """``nnodes`` `meshrun run` agents of one job on 127.0.0.1, started at once; node k's
    output (stdout and stderr) in ``folder/node<k>.out``.

    ``command``: what follows the node flags (``["--", "script.py", ...]``, or ``["--recipe",
    "mlp-tp"]``); ``extra``: more `meshrun run` flags for every node. ``env``: the nodes'
    environment (default :func:`clean_env`). ``before_start(node, proc)`` is called as each
    node starts (e.g. to move it into a cgroup). ``nice``: a CPU priority for every node
    (19: use what the machine leaves idle)."""

    def __init__(self, folder: Path, command: Sequence[str], *, nnodes: int = 2, nproc: int = 1,
                 extra: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 run_id: str = "t", log_dir: Path | None = None, preflight: bool = False,
                 cwd: Path | None = None, port: int | None = None, nice: int = 0,
                 before_start=None, verb: str = "run") -> None:
        self.folder, self.nnodes, self.nproc = Path(folder), nnodes, nproc
        self.port = port or free_port()
        self.env = dict(env) if env is not None else clean_env()
        # every node on this one host: meshrun simulate's own rule (the host's usable cores
        # over every node's workers), not each node's worker taking a thread per core of a
        # host its neighbours share (their OpenMP threads then spin against each other: 24 %
        # more CPU for a 2-node recipe job, measured); a value the caller set is kept
        from .facts.host import usable_cpus  # lazily, as the module's other meshrun imports
        from .plan.planner import threads_for

        threads = threads_for(self.env, nproc, usable_cpus(), nnodes * nproc, nnodes)
        if threads is not None:
            self.env[threads.name] = threads.value
        self.cwd = cwd or self.folder
        self.procs: list[subprocess.Popen] = []
        self._nice, self._before = nice, before_start
        flags = ["--nnodes", str(nnodes), "--master-addr", "127.0.0.1", "--master-port",
                 str(self.port), "--run-id", run_id, "--nproc-per-node", str(nproc)]
        if log_dir is not None:
            flags += ["--log-dir", str(log_dir)]
        if not preflight and verb == "run":
            flags.append("--no-preflight")
        self.argv = [meshrun_argv(verb, *flags, "--node-rank", str(rank), *extra, *command)
                     for rank in range(nnodes)]

    def start(self) -> Nodes:
        for rank in range(len(self.argv)):
            self.procs.append(self._popen(rank, "w"))
        return self

    def _popen(self, rank: int, mode: str) -> subprocess.Popen:
        nice = self._nice
        with open(self.out(rank), mode) as out:
            proc = subprocess.Popen(
                self.argv[rank], cwd=self.cwd, env=self.env, stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=(lambda: os.nice(nice)) if nice else None)
        if self._before is not None:
            self._before(rank, proc)
        return proc

    def crash(self, rank: int) -> None:
        """SIGKILL node ``rank``'s agent and every process under it at once (a machine that
        died), and reap the agent."""
        signal_tree(self.procs[rank].pid, signals.SIGKILL)
        self.procs[rank].wait()

    def restart(self, rank: int) -> None:
        """Start node ``rank`` again with the same command (as a platform restarts a failed
        node); its output is appended to ``node<rank>.out``. The old one must be over."""
        assert self.procs[rank].poll() is not None, f"node {rank} is still running"
        self.procs[rank] = self._popen(rank, "a")

    def __enter__(self) -> Nodes:
        return self.start() if not self.procs else self

    def __exit__(self, *exc) -> None:
        self.kill()

    def out(self, rank: int) -> Path:
        return self.folder / f"node{rank}.out"

    def output(self, rank: int) -> str:
        try:
            return self.out(rank).read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def outputs(self) -> str:
        return "".join(self.output(r) for r in range(self.nnodes))

    def wait_for(self, text: str, node: int = 0, timeout: float = 60,
                 alive: Sequence[int] | None = None, times: int = 1) -> float | None:
        """Seconds until node ``node`` printed ``text`` (``times`` times in its file, which a
        restart appends to; None: not within ``timeout``, or a node ended first without
        printing it; ``alive``: only these nodes' end counts, e.g. after one was crashed on
        purpose)."""
        procs = self.procs if alive is None else [self.procs[k] for k in alive]
        return wait_for_text(self.out(node), text, timeout, procs, times=times)

    def wait(self, timeout: float = 120) -> list[int | None]:
        """Every node's exit code (None: still running after ``timeout`` seconds in all; it
        is then killed with its workers)."""
        deadline = time.monotonic() + timeout
        codes: list[int | None] = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout=max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                signal_tree(proc.pid, signals.SIGKILL)
                proc.wait()
                codes.append(None)
        return codes

    def signal(self, rank: int, sig: int, workers: bool = True) -> None:
        """``sig`` to node ``rank``'s agent, and with ``workers`` to its workers too."""
        if workers:
            signal_tree(self.procs[rank].pid, sig)
        else:
            self.procs[rank].send_signal(sig)

    def kill(self) -> None:
        """SIGKILL every node still running and everything it started (stopped ones are
        continued first so they can die)."""
        for proc in self.procs:
            kill_tree(proc)


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc`` (if still running) and everything under it, continuing stopped ones
    so they can die; reap it (10 s at most)."""
    pids = tree(proc.pid) if proc.poll() is None else []
    for pid in pids:
        for sig in (signals.SIGKILL, signals.SIGCONT):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    if proc.poll() is None or pids:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


# --- CPU quotas and weights (cgroup v1) -----------------------------------------------------

def quota_available() -> str | None:
    """None when a CPU quota can be set here, else the reason."""
    if not os.path.isfile(os.path.join(CGROUP_CPU, "cpu.cfs_quota_us")):
        return f"no cgroup v1 cpu controller at {CGROUP_CPU}"
    if not os.access(CGROUP_CPU, os.W_OK):
        return f"{CGROUP_CPU} is not writable (needs root)"
    return None


class CpuQuota:
    """A cgroup of its own under the ``cpu`` controller, removed on exit (its processes go
    back to the root group)::

        with CpuQuota("node1", cpus=0.25) as quota:
            proc = subprocess.Popen(...)
            quota.add(proc.pid)          # its workers, forked later, inherit the group
            quota.set(0.1)               # slower from now on

    ``cpus``: the quota in CPUs (<= 0: none); ``shares``: the group's weight against its
    siblings (the kernel's default is 1024, which is also what one busy session weighs at
    the top; 2 means it runs on what the rest leaves idle); ``parent``: a group to nest in
    (a job reserved a large weight, one node of it held to a quota).

    ``period_us``: the quota's period; by default (None) the shortest the kernel allows for
    the quota (5 ms, longer only where ``cpus`` of it would be under the kernel's 1 ms
    minimum). A long period makes the quota bursty, unlike a slower machine: a node that
    waits in a collective keeps its unused quota for the rest of the period and then catches
    up at full speed, while the node the others wait for is held to the quota exactly, so two
    nodes at equal quotas measured 1.35-1.6x apart in time working under load with a 100 ms
    period (the kernel's default) and 0.553 against 0.557 with 5 ms (docs/testing.md)."""

    FINE_PERIOD_US = 5_000

    def __init__(self, name: str, cpus: float = 0, period_us: int | None = None,
                 shares: int | None = None, parent: CpuQuota | None = None) -> None:
        self.path = (os.path.join(parent.path, name) if parent is not None
                     else os.path.join(CGROUP_CPU, f"meshrun-test-{os.getpid()}-{name}"))
        self.cpus, self.period_us, self.shares, self.parent = cpus, period_us, shares, parent

    def __enter__(self) -> CpuQuota:
        os.makedirs(self.path, exist_ok=True)
        self.set(self.cpus)
        if self.shares is not None:
            self._write("cpu.shares", self.shares)
        return self

    def set(self, cpus: float) -> None:
        """Change the quota (``cpus`` <= 0: none) while the group's processes run."""
        period = self.period_us or max(self.FINE_PERIOD_US,
                                       math.ceil(1000 / cpus) if cpus > 0 else 0)
        self._write("cpu.cfs_quota_us", -1)   # a new period is checked against the quota
        self._write("cpu.cfs_period_us", period)
        if cpus > 0:
            self._write("cpu.cfs_quota_us", max(1000, int(cpus * period)))

    def weigh(self, shares: int) -> None:
        """Change the group's weight (``cpu.shares``) while its processes run."""
        self._write("cpu.shares", shares)

    def add(self, pid: int) -> list[int]:
        """Move ``pid`` (all its threads) and its descendants alive now into the group;
        the pids moved (one that exited meanwhile is left out)."""
        moved = []
        for each in tree(pid):
            try:
                self._write("cgroup.procs", each)
            except ProcessLookupError:
                continue  # it exited meanwhile
            moved.append(each)
        if pid not in self.pids() and alive(pid):
            raise RuntimeError(f"process {pid} is not in {self.path} after it was moved there")
        return moved

    def release(self, pid: int) -> None:
        """Move ``pid`` alone (not its children) out of the group, into its parent group
        (the root group without one): a node's `meshrun run` agent once its workers run, so
        that the quota is the workers' machine (node 0's agent serves the job's store: inside
        a small quota it would make node 0 the slowest node)."""
        parent = self.parent.path if self.parent is not None else CGROUP_CPU
        try:
            with open(os.path.join(parent, "cgroup.procs"), "w") as handle:
                handle.write(str(pid))
        except ProcessLookupError:
            pass

    def pids(self) -> list[int]:
        """The processes in the group now."""
        with open(os.path.join(self.path, "cgroup.procs")) as handle:
            return [int(p) for p in handle.read().split()]

    def throttled_s(self) -> float:
        """Seconds the kernel held the group's threads back so far (cpu.stat)."""
        with open(os.path.join(self.path, "cpu.stat")) as handle:
            for line in handle:
                name, _, value = line.partition(" ")
                if name == "throttled_time":
                    return int(value) / 1e9
        return 0.0

    def __exit__(self, *exc) -> None:
        # a process killed a moment ago (a node's workers) can still be in the group, or a
        # dying parent can still be forking into it: empty it and remove it, a few times
        for _ in range(40):
            try:
                with open(os.path.join(self.path, "cgroup.procs")) as handle:
                    pids = handle.read().split()
            except OSError:
                pids = []
            for pid in pids:
                try:
                    with open(os.path.join(CGROUP_CPU, "cgroup.procs"), "w") as handle:
                        handle.write(pid)
                except OSError:
                    pass
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)

    def _write(self, name: str, value: int) -> None:
        with open(os.path.join(self.path, name), "w") as handle:
            handle.write(str(value))

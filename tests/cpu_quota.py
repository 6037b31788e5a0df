"""A real CPU quota on a process tree: a cgroup v1 ``cpu`` group (``/sys/fs/cgroup/cpu``,
writable as root) with ``cpu.cfs_quota_us``. The kernel throttles every thread of every
process in it, children forked later included: what a slow node looks like from inside.

    with CpuQuota("node1", cpus=0.25) as quota:
        proc = subprocess.Popen(...)
        quota.add(proc.pid)          # its workers, forked later, inherit the group

Used by the straggler tests and bench/stragglers.py. ``available()`` says why not where the
controller is missing or read-only."""

from __future__ import annotations

import os

ROOT = "/sys/fs/cgroup/cpu"


def available() -> str | None:
    """None when a quota can be set here, else the reason."""
    if not os.path.isfile(os.path.join(ROOT, "cpu.cfs_quota_us")):
        return f"no cgroup v1 cpu controller at {ROOT}"
    if not os.access(ROOT, os.W_OK):
        return f"{ROOT} is not writable (needs root)"
    return None


class CpuQuota:
    def __init__(self, name: str, cpus: float, period_us: int = 100_000) -> None:
        self.path = os.path.join(ROOT, f"meshrun-test-{os.getpid()}-{name}")
        self.cpus, self.period_us = cpus, period_us

    def __enter__(self) -> CpuQuota:
        os.makedirs(self.path, exist_ok=True)
        self._write("cpu.cfs_period_us", self.period_us)
        self.set(self.cpus)
        return self

    def set(self, cpus: float) -> None:
        """Change the quota (``cpus`` <= 0: none) while the group's processes run."""
        quota = -1 if cpus <= 0 else max(1000, int(cpus * self.period_us))
        self._write("cpu.cfs_quota_us", quota)

    def add(self, pid: int) -> None:
        """Move ``pid`` (all its threads) and its descendants alive now into the group."""
        for p in [pid, *_descendants(pid)]:
            try:
                self._write("cgroup.procs", p)
            except OSError:
                pass  # it exited meanwhile

    def throttled_s(self) -> float:
        """Seconds the kernel held the group's threads back so far (cpu.stat)."""
        with open(os.path.join(self.path, "cpu.stat")) as handle:
            for line in handle:
                name, _, value = line.partition(" ")
                if name == "throttled_time":
                    return int(value) / 1e9
        return 0.0

    def __exit__(self, *exc) -> None:
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as handle:
                pids = handle.read().split()
        except OSError:
            pids = []
        for p in pids:
            try:
                with open(os.path.join(ROOT, "cgroup.procs"), "w") as handle:
                    handle.write(p)
            except OSError:
                pass
        try:
            os.rmdir(self.path)
        except OSError:
            pass

    def _write(self, name: str, value: int) -> None:
        with open(os.path.join(self.path, name), "w") as handle:
            handle.write(str(value))


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out

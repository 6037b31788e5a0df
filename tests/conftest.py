"""The suite's scheduling under pytest-xdist (docs/testing.md).

- Exclusive host resources: a test declares what it cannot share with a marker, and each
  marker maps to one xdist group, so two tests of a group never run at once (they run on one
  worker, in turn): ``slurm`` (the local SLURM cluster), ``netns`` / ``mpi`` (the network
  namespaces mr-h1/mr-h2 and mrnet-a/b), ``cgroup`` (CPU quotas under /sys/fs/cgroup/cpu)
  and ``timing`` (a tight bound on wall-clock time). The two are groups of their own and run
  beside each other: a quota test's nodes are held to their quotas inside a group that
  outweighs the rest of the machine (``cpu.shares``), so a timing test beside it can neither
  slow them nor lose more than their quotas (at most 0.8 of a CPU) to them.
- Order: the minutes-long ``soak`` tests first (they run beside everything else, at low CPU
  priority), then every other unit of work longest first by earlier runs' wall times
  (tests/durations.json): the short unit tests fill the workers' last minutes. pytest-xdist
  takes this order as it is (``--no-loadscope-reorder`` in scripts/test.sh).
"""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

# marker -> xdist group. The quota tests (tests/integration/test_slow_nodes.py `reserved`)
# and the tests that time meshrun's reactions were one group, one serial chain of 725 s: the
# longest unit of a fresh-clone run (2026-11-27). Their quota jobs take 0.4-0.8 of a CPU, no
# more, whatever runs beside them; so the two are separate groups, each serial within.
EXCLUSIVE = {"slurm": "slurm", "mpi": "netns", "netns": "netns", "cgroup": "cgroup",
             "timing": "timing"}


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` uses a module- or class-scoped fixture of its own module."""
    info = getattr(item, "_fixtureinfo", None)
    module = getattr(item, "module", None)
    if info is None or module is None:
        return False
    return any(d.scope in ("module", "class") and d.func.__module__ == module.__name__
               for defs in info.name2fixturedefs.values() for d in defs)


def _rank(item: pytest.Item) -> int:
    if item.get_closest_marker("soak"):
        return 0
    if item.get_closest_marker("xdist_group"):
        return 1
    if item.get_closest_marker("slow"):
        return 2
    return 3


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    for item in items:
        groups = {EXCLUSIVE[m] for m in EXCLUSIVE if item.get_closest_marker(m)}
        if len(groups) > 1:
            raise pytest.UsageError(f"{item.nodeid} declares two exclusive resources "
                                    f"{sorted(groups)}: give it the one that covers both")
        if not groups and _shares_a_module_fixture(item):
            # a module- or class-scoped fixture runs once per worker that needs it: keep
            # its tests on one worker so it runs once (test_recipes' three simulated runs)
            groups = {f"fixture:{item.module.__name__}"}
        if groups:
            item.add_marker(pytest.mark.xdist_group(groups.pop()))
    _longest_first(items)
    _nothing_long_behind_the_soak(config, items)


_DURATIONS = Path(__file__).resolve().parent / "durations.json"
# a test the file does not list (new, or under a second): by its kind
_GUESS = {0: 300.0, 1: 10.0, 2: 10.0, 3: 0.3}


def _longest_first(items: list) -> None:
    """The soak first, then every other unit of work (a group, or a test) longest first, by
    the wall times of earlier runs (tests/durations.json, scripts/test_durations.py): the
    classic longest-processing-time order, so that no long unit starts late and ends the run
    alone. A unit's tests keep their collection order."""
    import json

    try:
        known = json.loads(_DURATIONS.read_text())
    except (OSError, ValueError):
        known = {}
    units: dict[str, list] = {}
    for item in items:
        units.setdefault(_scope(item), []).append(item)

    def weight(unit: list) -> tuple[int, float]:
        took = sum(known.get(i.nodeid.split("@")[0], _GUESS[_rank(i)]) for i in unit)
        return (0 if any(_rank(i) == 0 for i in unit) else 1, -took)

    items[:] = [item for unit in sorted(units.values(), key=weight) for item in unit]


def _scope(item: pytest.Item) -> str:
    """pytest-xdist's unit of work under ``--dist loadgroup``: a group, else the test."""
    marker = item.get_closest_marker("xdist_group")
    return f"@{marker.args[0]}" if marker is not None and marker.args else item.nodeid


def _nothing_long_behind_the_soak(config, items: list) -> None:
    """pytest-xdist gives each of its N workers one unit of work, then each worker with at
    most two tests pending one more: the worker that took the soak (five minutes and more)
    takes unit N+1 too, and runs it only after the soak. Unit N+1 was the 3-node spare
    tests' group (over 200 s) in one CI run: they started after the soak and ended last,
    with the machine half idle. So unit N+1 is the first unit test (well under a second)."""
    workers = getattr(config.option, "numprocesses", None)
    if not isinstance(workers, int) or workers < 2 or not items \
            or not items[0].get_closest_marker("soak"):
        return
    quick = next((i for i in items if _rank(i) == 3 and i.nodeid.startswith("tests/unit/")),
                 None)
    if quick is None:
        return
    items.remove(quick)
    seen: list[str] = []
    for at, item in enumerate(items):
        scope = _scope(item)
        if scope not in seen:
            seen.append(scope)
            if len(seen) == workers + 1:
                items.insert(at, quick)
                return
    items.append(quick)


# --- CI: start only once the other checks are over (.ci/fresh_machine.py) ----------------


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist starts its workers
def pytest_sessionstart(session):
    """``MESHRUN_TEST_START_AFTER=FILE``: wait (up to 30 min) until FILE exists. CI installs
    the suite's environment while the demo and the wheel check run, and starts the suite
    itself only after them, so that no timing test shares the CPUs with the demo's jobs."""
    gate = os.environ.get("MESHRUN_TEST_START_AFTER")
    if not gate or "PYTEST_XDIST_WORKER" in os.environ:
        return
    import time

    deadline = time.monotonic() + 1800
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            pytest.exit(f"MESHRUN_TEST_START_AFTER: {gate} did not appear in 30 min", 3)
        time.sleep(0.2)


# --- optional: each test's CPU time, its own and its children's (docs/testing.md) ----------

_CPU_LOG = os.environ.get("MESHRUN_TEST_CPU_LOG")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not _CPU_LOG:
        yield
        return
    import json
    import resource
    import time

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    started, wall = cpu(), time.monotonic()
    yield
    with open(_CPU_LOG, "a") as out:
        out.write(json.dumps({"test": item.nodeid, "cpu_s": round(cpu() - started, 2),
                              "wall_s": round(time.monotonic() - wall, 2)}) + "\n")


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own hook has written the groups
def pytest_collection_finish(session):
    """Under ``--dist loadgroup`` every grouped test's id must carry its group (``...@slurm``):
    that is how pytest-xdist keeps a group on one worker. When it does not (pytest 9.2's
    structured node ids, pytest-dev/pytest-xdist#1386), two SLURM or quota tests would run at
    once: stop the run with one line instead of letting them flake."""
    if not getattr(session.config.option, "loadgroup", False) or "PYTEST_XDIST_WORKER" not in os.environ:
        return
    lost = [i.nodeid for i in session.items
            if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if lost:
        pytest.exit(f"pytest-xdist's --dist loadgroup does not group tests here ({lost[0]} "
                    "has no @group): pytest >= 9.2 breaks it (pytest-dev/pytest-xdist#1386); "
                    "install pytest < 9.2 (pyproject's test extras pin it)", returncode=3)

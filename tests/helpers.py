"""Shared helpers for the tests (imported as ``helpers``; tests/conftest.py puts this folder on sys.path)."""

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# one harness for the tests and the benchmarks (clean environment, ports, nodes)
from meshrun.harness import (  # noqa: F401
    Nodes,
    alive,
    browser,
    clean_env,
    free_port,
    load_page,
    neutral,
    own_lines,
    signal_tree,
    tree,
    wait_for_text,
)

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "integration" / "scripts"


def meshrun(*args: str, env: dict | None = None, cwd=None, timeout: float = 120,
            check_rc: int | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "meshrun", *args], env=env or clean_env(),
                          cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check_rc is not None:
        assert done.returncode == check_rc, (done.returncode, done.stdout[-3000:],
                                             done.stderr[-3000:])
    return done



def wait_for_files(nodes, folder: Path, pattern: str, count: int,
                   timeout: float = 120) -> list[Path]:
    """The files matching ``pattern`` in ``folder`` once there are ``count`` of them (the
    test scripts' workers write ``pid.<rank>`` when they train), while every node of
    ``nodes`` (a harness ``Nodes``) runs; fails with their output otherwise."""
    import time

    deadline = time.monotonic() + timeout
    while len(found := sorted(folder.glob(pattern))) < count:
        assert time.monotonic() < deadline and all(p.poll() is None for p in nodes.procs), \
            nodes.outputs()[-3000:]
        time.sleep(0.2)
    return found


def reports(text: str) -> list[dict]:
    """The JSON objects printed by scripts/report.py, in rank order."""
    found = [json.loads(m.group(1)) for m in re.finditer(r"REPORT (\{.*\})", text)]
    return sorted(found, key=lambda r: r["rank"])



def require(*tools: str, hint: str = "") -> None:
    """Skip (or under CI=true fail) unless root with ``tools`` on PATH."""
    missing = [t for t in tools if shutil.which(t) is None]
    why = ("needs root" if os.geteuid() != 0
           else f"missing {', '.join(missing)}{hint}" if missing else None)
    if why:
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(why)


def sh(*args, check: bool = True, timeout: float = 120, env=None) -> subprocess.CompletedProcess:
    """Run a command; with ``check`` a failure fails the test with its output."""
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=timeout)
    if check and done.returncode:
        pytest.fail(f"{args[0]} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def goodput(run_dir, cwd=None) -> dict:
    """``meshrun report --json RUN_DIR``'s goodput, checked to add up to the run's wall time."""
    done = meshrun("report", "--json", str(run_dir), cwd=cwd, check_rc=0)
    run, = json.loads(done.stdout)["runs"]
    g = run["goodput"]
    assert g is not None, run["goodput_why"]
    parts = ("startup_s", "productive_s", "checkpoint_s", "lost_s", "recovery_s", "end_s")
    assert abs(sum(g[p] for p in parts) - g["wall_s"]) < 0.01, g
    assert all(g[p] >= 0 for p in parts), g
    return g


def lanes_as_drawn(dom: str) -> dict[int, list[tuple[str, str]]]:
    """node -> the (kind, line) of each event its lane shows in a page's DOM (after its
    scripts ran), in the lane's order."""
    lanes = {}
    for m in re.finditer(r'<div class="lane" data-node="(\d+)">(.*?)</div>', dom, re.S):
        lanes[int(m.group(1))] = [
            (kind, html.unescape(title).split(": ", 1)[1])
            for kind, title in re.findall(r'<span class="ev" data-kind="([a-z]+)" '
                                          r'title="([^"]*)"', m.group(2))]
    return lanes


def timeline_records(run_dir) -> dict[int, list[tuple[str, str]]]:
    """node -> the (kind, line) of each timeline record in its events.node<k>.jsonl."""
    out = {}
    for path in sorted(Path(run_dir).glob("events.node*.jsonl")):
        node = int(path.name[len("events.node"):-len(".jsonl")])
        out[node] = [(r["kind"], r["line"]) for r in map(json.loads, path.read_text()
                                                          .splitlines())
                     if r.get("event") == "timeline"]
    return out


def assert_timeline_drawn_as_recorded(dom: str, run_dir) -> None:
    """Every node's lane on the page shows exactly its events.node<k>.jsonl timeline (the
    checkpoints and resumes from metrics.jsonl aside)."""
    drawn = {k: [e for e in v if e[0] not in ("checkpoint", "resumed")]
             for k, v in lanes_as_drawn(dom).items()}
    recorded = timeline_records(run_dir)
    assert recorded and all(recorded.values()), recorded
    assert drawn == recorded, (drawn, recorded)


def page_in_a_browser(run_dir, artefact: str) -> str:
    """``meshrun report --html RUN_DIR``, then the page loaded in headless Chromium as a
    person would open it (a file, offline): the DOM after its scripts ran, with no console
    output; a screenshot kept (``$MESHRUN_TEST_ARTEFACTS/<artefact>.png`` when set, else
    beside the page)."""
    chrome = browser()
    if chrome is None:
        require("chromium-headless-shell", hint="scripts/test.sh installs it as root")
    meshrun("report", "--html", str(run_dir), check_rc=0)
    page = Path(run_dir) / "report.html"
    folder = Path(os.environ.get("MESHRUN_TEST_ARTEFACTS") or page.parent)
    shot = folder / (artefact + ".png")
    dom, said = load_page(chrome, page, shot, height=2600)
    assert not said, said                      # the page logs nothing: any line is an error
    assert shot.stat().st_size > 10_000
    return dom

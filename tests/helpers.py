"""Shared helpers for the tests (imported as ``helpers``; tests/conftest.py puts this folder on sys.path)."""

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
    clean_env,
    free_port,
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


def browser() -> str | None:
    """The distribution's headless Chromium (scripts/test.sh installs it as root on Debian)."""
    return shutil.which("chromium-headless-shell") or shutil.which("chromium")


def page_in_a_browser(run_dir, artefact: str) -> str:
    """``meshrun report --html RUN_DIR``, then the page loaded in headless Chromium as a
    person would open it (a file, offline): the DOM after its scripts ran, with no console
    error; a screenshot kept (``$MESHRUN_TEST_ARTEFACTS/<artefact>.png`` when set, else
    beside the page)."""
    import os
    from pathlib import Path

    chrome = browser()
    if chrome is None:
        require("chromium-headless-shell", hint="scripts/test.sh installs it as root")
    meshrun("report", "--html", str(run_dir), check_rc=0)
    page = Path(run_dir) / "report.html"
    common = [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
              "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
              "--window-size=1200,2000"]
    done = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    said = [ln for ln in done.stderr.splitlines() if ":CONSOLE" in ln]   # the page logs
    assert not said, said                                                # nothing: any is an error
    folder = Path(os.environ.get("MESHRUN_TEST_ARTEFACTS") or page.parent)
    folder.mkdir(parents=True, exist_ok=True)
    shot = subprocess.run([*common, f"--screenshot={folder / (artefact + '.png')}",
                           page.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0 and (folder / (artefact + ".png")).stat().st_size > 10_000, \
        shot.stderr[-2000:]
    return done.stdout

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

"""Shared helpers for the tests (imported as ``helpers``; tests/conftest.py puts this folder on sys.path)."""

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "integration" / "scripts"


def neutral(name: str) -> bool:
    """Whether a neutral machine lacks ``name``: a platform's variable (as the topology's
    detectors declare them), meshrun's own, or the devices and threads a host sets."""
    from meshrun.topology import platform_variable

    return (platform_variable(name) or name.startswith("MESHRUN_")
            or name in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"))


def clean_env(**extra: str) -> dict:
    """os.environ without platform variables, plus ``extra``: a neutral machine."""
    env = {k: v for k, v in os.environ.items() if not neutral(k)}
    env.update(extra)
    return env


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


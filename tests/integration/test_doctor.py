"""`meshrun doctor`: local checks, the lint, and the cross-node preflight with --all-nodes."""

import json
import socket
import subprocess
import sys

import pytest
from helpers import clean_env, free_port, meshrun

pytestmark = pytest.mark.slow

SEED_004 = {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "mlx5", "NCCL_NET_GDR_LEVEL": "5",
            "NCCL_IB_GID_INDEX": "3", "NCCL_IB_TIMEOUT": "22", "NCCL_IB_RETRY_CNT": "7",
            "NCCL_NTHREADS": "640", "NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_TIMEOUT": "10800"}


def test_doctor_json_reports_the_seed_004_block(tmp_path):
    done = meshrun("doctor", "--json", env=clean_env(**SEED_004), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    findings = json.loads(done.stdout)["findings"]
    assert all(set(f) == {"code", "severity", "subject", "message", "fix"} for f in findings)
    by_subject = {(f["subject"], f["code"]) for f in findings}
    assert ("NCCL_NTHREADS", "env-bad-value") in by_subject
    assert ("NCCL_ASYNC_ERROR_HANDLING", "env-deprecated") in by_subject
    assert ("NCCL_TIMEOUT", "env-unread") in by_subject
    assert any(f["code"] == "torch" and "torch 2." in f["message"] for f in findings)
    assert findings[0]["severity"] == "error"            # errors first


def test_doctor_clean_environment_passes(tmp_path):
    done = meshrun("doctor", cwd=tmp_path, check_rc=0)
    assert "0 error(s)" in done.stdout


def test_doctor_on_node_0_finds_its_port_taken(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = meshrun("doctor", "--json", "--nnodes", "2", "--node-rank", "0",
                       "--master-addr", "127.0.0.1", "--master-port", str(port), cwd=tmp_path)
    assert done.returncode == 3
    (taken,) = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "master-port"]
    assert taken["severity"] == "error" and str(port) in taken["message"]


def test_doctor_all_nodes_runs_the_preflight(tmp_path):
    port = str(free_port())
    procs = [subprocess.Popen(
        [sys.executable, "-m", "meshrun", "doctor", "--json", "--all-nodes", "--nnodes", "2",
         "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", port,
         "--require-path", f"only-on-{rank}"],
        cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in (0, 1)]
    (tmp_path / "only-on-0").mkdir()
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [3, 3], outs
    findings = json.loads(outs[0][0])["findings"]
    mismatch = [f for f in findings if f["code"] == "preflight-mismatch"]
    assert mismatch and all("path only-on-" in f["message"] for f in mismatch), findings
    assert any(f["subject"] == "node 1" for f in mismatch)

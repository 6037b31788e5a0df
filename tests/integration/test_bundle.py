"""A failed run explains itself (automatic diagnosis) and leaves a bundle without secrets."""

import json

import pytest
from helpers import SCRIPTS, clean_env, meshrun

pytestmark = pytest.mark.slow

SECRETS = {"HF_TOKEN": "hf_QwErTyUiOpAsDfGhJkLzXcVbNm123456",
           "WANDB_API_KEY": "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c",
           "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}
ARG_SECRET = "sk-live-9a8b7c6d5e4f3a2b1c0d"


def test_failed_run_diagnoses_itself_and_its_bundle_has_no_secrets(tmp_path):
    done = meshrun("simulate", "--nodes", "2", "--nproc-per-node", "1", "--run-id", "oom",
                   "--set", "train.per_device_batch=8", "--set", "train.grad_accum=1",
                   "--", str(SCRIPTS / "oom.py"), "--api-key", ARG_SECRET,
                   env=clean_env(**SECRETS), cwd=tmp_path)
    assert done.returncode != 0
    # the run (rank 1, on node 1) is diagnosed once, with the job's numbers
    lines = [l for l in (done.stdout + done.stderr).splitlines() if "meshrun: diagnosis:" in l]
    assert len([l for l in lines if "out of memory" in l.lower()]) == 1, lines
    oom = [l for l in lines if "out of memory" in l.lower()]
    assert oom and "(8 -> 4)" in oom[0] and "(1 -> 2)" in oom[0], lines
    run = tmp_path / "logs" / "oom"
    names = {p.name for p in run.iterdir()}
    assert {"plan.node0.json", "plan.node1.json", "env.node0.json", "env.node1.json",
            "node0.log", "node1.log", "rank0.log", "rank1.log", "diagnosis.node1.json"} <= names
    diagnosis = json.loads((run / "diagnosis.node1.json").read_text())["diagnoses"]
    assert diagnosis[0]["code"] == "cuda-oom" and diagnosis[0]["rank"] == 1
    env = json.loads((run / "env.node0.json").read_text())
    assert env["HF_TOKEN"] == "<redacted>" and "PATH" in env
    # no secret anywhere in the bundle (the script echoes its args; meshrun redacts worker
    # output in its logs and torch's raw files too) nor on the console
    assert "args: --api-key <redacted>" in (run / "rank0.log").read_text()
    assert ARG_SECRET not in done.stdout
    for path in [p for p in run.rglob("*") if p.is_file()]:
        text = path.read_text(errors="replace")
        for secret in [*SECRETS.values(), ARG_SECRET]:
            assert secret not in text, (path, secret)
    banner = [l for l in done.stdout.splitlines() if "command" in l and "oom.py" in l]
    assert banner and ARG_SECRET not in banner[0]

"""scripts/gpu_check.sh (bench/gpu_check.py) on a machine without a GPU: it says so at once,
runs its dry run on the CPU (meshrun from src/, plan and the too-many-processes refusal,
doctor, torch's real failure messages diagnosed, a tiny mlp-tp in bf16 with its MFU against
a stand-in peak, the forced plan of 2 processes on 1 GPU) and exits 0; its JSON, summary,
logs archive and table rows hold what each step found."""

import json
import os
import subprocess
import sys
import tarfile

import pytest
from helpers import ROOT, clean_env

pytestmark = pytest.mark.slow

GPU_ONLY = ("mlp-ceiling", "node-check", "compute-events", "bench", "mlp-tp-torchrun",
            "autoencoder", "simulate-shared-gpu", "simulate-hostid", "simulate-bench-hostid")


@pytest.mark.timeout(480)  # its own bound is 400 s
def test_without_a_gpu_the_dry_run_checks_what_it_can_and_exits_0(tmp_path):
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if not os.path.exists(os.path.join(d, "nvidia-smi")))
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--work", str(tmp_path / "work")],
        cwd=tmp_path, env=clean_env(PATH=path, OUT=str(out), PYTHON=sys.executable),
        capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert done.stdout.startswith("no GPU: nvidia-smi is not on PATH; dry run on the CPU\n")

    result = json.loads((out / "gpu_check.json").read_text())
    assert result["mode"] == "dry-run" and result["finished"]
    steps = {s["name"]: s for s in result["steps"]}
    ran = [n for n, s in steps.items() if s["status"] != "skipped"]
    assert ran == ["install", "device", "plan", "doctor", "diagnose-canned", "mlp-tp",
                   "invalid-device-ordinal"]
    assert all(steps[n]["status"] == "ok" for n in ran), {n: steps[n]["checks"] for n in ran}

    assert steps["install"]["figures"]["meshrun_from"] == str(
        ROOT / "src" / "meshrun" / "__init__.py")
    assert steps["device"]["figures"]["cuda"] is False
    plan = steps["plan"]["figures"]
    assert (plan["device"], plan["backend"], plan["nproc_per_node"]) == ("cpu", "gloo", 1)
    assert plan["refused"]["rc"] == 2 and plan["refused"]["code"] == "too-many-processes"
    assert "'invalid device ordinal'" in plan["refused"]["line"]
    assert steps["doctor"]["figures"]["torch_line"].startswith("torch ")
    for code, check in steps["diagnose-canned"]["figures"]["diagnoses"].items():
        assert check["codes"][0] == code
    assert set(steps["diagnose-canned"]["figures"]["diagnoses"]) == {
        "invalid-device-ordinal", "cuda-oom", "duplicate-gpu"}

    mlp = steps["mlp-tp"]["figures"]
    assert "parallel.mixed_precision=bf16" in mlp["sets"]
    assert mlp["last_loss"] < mlp["first_loss"]
    assert mlp["samples_per_step"] == 16 and mlp["step_ms"] > 0
    assert mlp["samples_per_s"] == pytest.approx(16 / mlp["step_ms"] * 1000)
    assert mlp["mfu"] > 0 and mlp["peak_source"] == "MESHRUN_PEAK_FLOPS=1e12"
    assert "peak_memory_gib" not in mlp                   # a GPU-only figure
    forced = steps["invalid-device-ordinal"]["figures"]["forced_plan"]
    assert forced == {"nproc_per_node": 2, "visible_devices": ["0", "1"], "device": "cuda",
                      "backend": "nccl"}

    for name in GPU_ONLY:
        assert steps[name]["status"] == "skipped" and "--rehearse" in steps[name]["why"]
    assert steps["cuda-oom"]["why"].startswith("needs a GPU")

    summary = (out / "gpu_check.txt").read_text().splitlines()
    assert summary[0].startswith("meshrun GPU check (dry-run): no GPU;")
    assert any(line.split()[:2] == ["mlp-tp", "ok"] and "ms/step" in line for line in summary)
    with tarfile.open(out / "gpu_check_logs.tar.gz") as tar:
        names = tar.getnames()
    assert "logs/gc-mlp-tp/metrics.jsonl" in names and "logs/gc-mlp-tp/node0.log" in names
    assert any(n.startswith("console/plan-") for n in names)

    rows = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--markdown",
                           str(out / "gpu_check.json")], capture_output=True, text=True,
                          check=True).stdout.splitlines()
    assert any(r.startswith("| mlp-tp, `meshrun run`, bf16: step time | ") and " ms (" in r
               for r in rows)
    assert "| a batch far too large | skipped: needs a GPU" in "\n".join(rows)

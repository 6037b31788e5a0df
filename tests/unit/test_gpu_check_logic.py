"""bench/gpu_check.py's pure parts (nvidia-smi's banner, the stand-in nvidia-smi and the plans
it forces, the step budget, a recipe's steady state, the text summary and the table rows),
the recipes' peak-memory field, and torch 2.11's own messages for an invalid device ordinal
and a CUDA OOM diagnosed with the right code."""

import sys

import pytest
import torch
from helpers import ROOT

from meshrun.diagnose import diagnose_text
from meshrun.errors import UsageError
from meshrun.facts.host import HostFacts, parse_gpu_csv
from meshrun.plan import make_plan
from meshrun.recipes import _loop
from meshrun.topology import Flags

sys.path.insert(0, str(ROOT / "bench"))
import gpu_check  # noqa: E402

BANNER = """Thu Nov 26 07:01:12 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:19:00.0 Off |                    0 |
"""
REAL_CSV = "0, GPU-5f1e2c3a-9b7d-4e21-8a6f-0c1d2e3f4a5b, NVIDIA H200, 143771\n"


def test_banner_gives_driver_and_its_cuda_version():
    assert gpu_check.parse_smi_banner(BANNER) == {"driver": "580.95.05", "cuda": "13.0"}
    assert gpu_check.parse_smi_banner("No devices were found") == {"driver": None,
                                                                   "cuda": None}


def test_smi_query_csv():
    rows = gpu_check.parse_smi_csv("NVIDIA H100 80GB HBM3, 580.95.05, 81559, Default\n",
                                   ("name", "driver_version", "memory.total", "compute_mode"))
    assert rows == [{"name": "NVIDIA H100 80GB HBM3", "driver_version": "580.95.05",
                     "memory.total": "81559", "compute_mode": "Default"}]


def test_standin_repeats_the_real_gpu_under_new_uuids():
    gpus = parse_gpu_csv(gpu_check.standin_smi(REAL_CSV, 2))
    assert [g.index for g in gpus] == [0, 1]
    assert [g.name for g in gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert gpus[0].uuid == "GPU-5f1e2c3a-9b7d-4e21-8a6f-0c1d2e3f4a5b"
    assert gpus[1].uuid != gpus[0].uuid and gpus[0].memory_mib == 143771
    canned = parse_gpu_csv(gpu_check.standin_smi("", 1))   # no real GPU: a canned one
    assert [(g.index, g.name) for g in canned] == [(0, gpu_check.STANDIN_GPU)]


def test_the_plans_the_gpu_check_relies_on():
    """One GPU: 2 processes are refused at plan time; a stand-in listing two GPUs makes the
    plan of 2 processes on GPUs 0,1 that the invalid-device-ordinal step launches."""
    env = {"PATH": "/usr/bin"}
    one = HostFacts(hostname="gpu-box", gpus=parse_gpu_csv(gpu_check.standin_smi(REAL_CSV, 1)),
                    cpus=16)
    with pytest.raises(UsageError) as refused:
        make_plan(env, Flags(nproc_per_node="2"), one)
    assert refused.value.code == "too-many-processes"
    assert "'invalid device ordinal'" in refused.value.line()
    plan = make_plan(env, Flags(), one)
    assert (plan.nproc_per_node, plan.device, plan.backend) == (1, "cuda", "nccl")
    two = HostFacts(hostname="gpu-box", gpus=parse_gpu_csv(gpu_check.standin_smi(REAL_CSV, 2)),
                    cpus=16)
    forced = make_plan(env, Flags(), two)
    assert forced.nproc_per_node == 2 and forced.visible_devices == ("0", "1")


@pytest.mark.parametrize("now, timeout, minimum, expected", [
    (0, 60, 10, 60),          # plenty of time: the step's own timeout
    (400, 120, 30, 65),       # 480 - 400 - 15 left: cut to that
    (430, 120, 30, 35),       # 480 - 430 - 15 = 35 left: enough for its 30
    (450, 120, 30, None),     # 15 left < 30: skipped
    (440, 10, 5, 10),
])
def test_budget(now, timeout, minimum, expected):
    assert gpu_check.budget(now, 480, timeout, minimum, 15) == expected


def _records(step_times, batch=2048, flops_per_step=13.2e12, peak=989e12):
    """metrics.jsonl records as the loop writes them: the first step alone, then every 10."""
    out = []
    for step, seconds in step_times:
        record = {"step": step, "loss": 1.0 / step, "lr": 1e-3, "step_time_s": seconds,
                  "samples_per_s": batch / seconds, "mfu": flops_per_step / seconds / peak,
                  "peak_memory_gib": 30.0 + step / 100}
        if step == 1:
            record["first_step"] = True
        out.append(record)
    return out


def test_steady_state_leaves_out_the_first_step_and_the_first_window():
    records = _records([(1, 6.0), (10, 0.10), (20, 0.08), (30, 0.07), (40, 0.09)])
    fig = gpu_check.metrics_figures(records)
    assert (fig["from_step"], fig["to_step"], fig["steps_timed"]) == (11, 40, 30)
    assert fig["step_ms"] == pytest.approx(80.0)        # (0.08 + 0.07 + 0.09) / 3
    assert fig["steps_per_s"] == pytest.approx(12.5)
    assert fig["samples_per_step"] == 2048
    assert fig["samples_per_s"] == pytest.approx(2048 / 0.08)
    assert fig["mfu"] == pytest.approx(13.2e12 / 0.08 / 989e12)
    assert fig["peak_memory_gib"] == pytest.approx(30.4)
    assert (fig["first_loss"], fig["last_loss"]) == (1.0, 1 / 40)


def test_steady_state_of_a_short_cpu_run_uses_what_there_is():
    fig = gpu_check.metrics_figures(_records([(1, 2.0), (2, 0.5)]))
    assert fig["steps_timed"] == 1 and fig["step_ms"] == pytest.approx(500.0)
    assert gpu_check.metrics_figures([]) == {}


def test_diagnosis_check_wants_the_code_first():
    found = [{"code": "cuda-oom"}, {"code": "worker-failed"}]
    assert gpu_check.diagnosis_check(found, "cuda-oom")["first"]
    second = gpu_check.diagnosis_check(found[::-1], "cuda-oom")
    assert second["named"] and not second["first"]
    assert not gpu_check.diagnosis_check([], "cuda-oom")["named"]


@pytest.mark.parametrize("code", sorted(gpu_check.CANNED))
def test_real_messages_are_diagnosed_with_the_right_code(code):
    """The exact text torch 2.11 prints (c10/cuda/CUDAMiscFunctions.cpp,
    CUDACachingAllocator.cpp) and NCCL's duplicate GPU as torch reports it, as they reach a
    rank log: root cause first, the rank read."""
    found = diagnose_text(gpu_check.CANNED[code], name="rank.log")
    assert found and found[0].code == code
    assert found[0].rank == (0 if code == "cuda-oom" else 1)


def test_peak_memory_field_only_on_a_gpu(monkeypatch):
    assert _loop.memory_fields(torch.device("cpu")) == {}
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3 << 30)
    assert _loop.memory_fields(torch.device("cuda", 0)) == {"peak_memory_gib": 3.0}


RESULT = {
    "mode": "gpu", "elapsed_s": 301.4, "deadline_s": 480, "finished": True,
    "why_mode": "GPU: GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)",
    "steps": [
        {"name": "device", "status": "ok", "seconds": 3.0, "checks": [], "figures": {
            "name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.2, "driver": "580.95.05",
            "driver_cuda": "13.0", "compute_mode": "Default", "torch": "2.11.0+cu130",
            "torch_cuda": "13.0", "nccl": "2.27.7", "peak_tflops": 989.0}},
        {"name": "mlp-tp", "status": "ok", "seconds": 31.0, "checks": [], "figures": {
            "step_ms": 80.0, "steps_per_s": 12.5, "samples_per_s": 25600.0, "mfu": 0.1668,
            "peak_memory_gib": 34.2, "smi_peak_gib": 36.0, "compute_ms": 41.0}},
        {"name": "cuda-oom", "status": "failed", "seconds": 20.0, "figures": {
            "outcome": "exit 1", "diagnoses": {"run": {"codes": ["worker-failed"]}}},
         "checks": [{"what": "meshrun diagnose: cuda-oom, first", "ok": False,
                     "detail": "['worker-failed']"}]},
        {"name": "bench", "status": "skipped", "seconds": 0.0, "checks": [], "figures": {},
         "why": "deadline: 20 s left, the step needs 25 s"},
    ]}


def test_summary_text():
    result = {**RESULT, "steps": [{**s, "headline": gpu_check.headline(s["name"], s["figures"])}
                                  for s in RESULT["steps"]]}
    text = gpu_check.summary_text(result)
    lines = text.splitlines()
    assert lines[0] == "meshrun GPU check (gpu): NVIDIA H100 80GB HBM3; 301 s of 480"
    mlp = next(line for line in lines if line.lstrip().startswith("mlp-tp"))
    assert "80.0 ms/step, 12.50 steps/s, 25,600 samples/s, MFU 16.7%" in mlp
    assert "34.2 GiB (allocator) / 36.0 GiB (nvidia-smi)" in mlp
    assert "check failed: meshrun diagnose: cuda-oom, first: ['worker-failed']" in text
    assert "deadline: 20 s left" in next(line for line in lines if "bench" in line)


def test_markdown_rows():
    rows = gpu_check.markdown_rows(RESULT).splitlines()
    assert rows[:2] == ["| figure | value | step |", "|---|---|---|"]
    assert ("| device | NVIDIA H100 80GB HBM3, 79 GiB, driver 580.95.05, CUDA (driver) 13.0, "
            "compute mode Default | `device` |") in rows
    assert "| mlp-tp, `meshrun run`, bf16: MFU | 16.7% | `mlp-tp` |" in rows
    assert "| dense bf16 peak (meshrun's table) | 989 TFLOP/s | `device` |" in rows
    assert ("| `meshrun bench`, 1 GPU | skipped: deadline: 20 s left, the step needs 25 s | "
            "`bench` |") in rows
    assert "| mlp-tp, plain `torchrun`, bf16: MFU | not run | `mlp-tp-torchrun` |" in rows
    assert ("| a batch far too large | exit 1; run: diagnose ['worker-failed'] (a check failed) "
            "| `cuda-oom` |") in rows
    assert all(row.count("|") == 4 for row in rows)   # no stray pipe in a value
    # the same rows whatever ran: filling docs/benchmarks.md's table is mechanical
    assert len(rows) == len(gpu_check.markdown_rows({}).splitlines()) == 2 + len(gpu_check.ROWS)


def test_the_docs_table_has_the_scripts_rows():
    """docs/benchmarks.md's GPU table lists the figures --markdown prints, in its order."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    table = text[text.index("| figure | value | step |"):].split("\n\n", 1)[0].splitlines()
    ours = gpu_check.markdown_rows({}).splitlines()
    assert [(r.split(" | ")[0], r.split(" | ")[-1]) for r in table] == \
        [(r.split(" | ")[0], r.split(" | ")[-1]) for r in ours]

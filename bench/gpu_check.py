"""One command that proves meshrun's GPU half on a machine with one GPU (issue 24).

    scripts/gpu_check.sh                        # repository root; results in $OUT, else ./gpu-check-out
    scripts/gpu_check.sh --out DIR --deadline 480
    python bench/gpu_check.py --dry-run         # the CPU path (what a machine without a GPU runs; a test does)
    python bench/gpu_check.py --rehearse        # every GPU step on this CPU, tiny sizes: figures mean nothing
    python bench/gpu_check.py --steps mlp-tp,cuda-oom    # some steps only (names: --list)
    python bench/gpu_check.py --markdown gpu_check.json  # docs/benchmarks.md's rows from a result

Where it runs. From the repository root of a fresh checkout on a machine with one GPU and a
torch with CUDA, with no network: meshrun is imported from ``src/`` (``PYTHONPATH``, which
every process below inherits: meshrun's agents, torch's workers, torchrun's); when it is not
importable otherwise, ``pip install --no-index --no-deps --no-build-isolation -e .`` is tried
first. Nothing is downloaded. A machine without a GPU says so at once (``no GPU: ...``), runs
the dry run and exits 0 when every check held.

What runs (``--list``; each step has its own timeout, the whole run a deadline, default 480
s; a step that would not fit before the deadline is skipped and recorded so, one that fails
or times out is recorded and the next one runs):

==========================  ================================================================
step                        what it runs and records
==========================  ================================================================
install                     where meshrun imports from (and the pip install, when needed)
device                      nvidia-smi (name, driver, the driver's CUDA version, compute
                            mode), torch's view (device, capability, memory, CUDA, NCCL), the
                            device's dense bf16 peak from meshrun's table
plan                        ``meshrun plan --json`` against the real nvidia-smi; ``meshrun plan
                            --nproc-per-node N+1`` refused (``too-many-processes``)
doctor                      ``meshrun doctor --json``: its findings
diagnose-canned             ``meshrun diagnose`` on the messages torch 2.11 prints for an
                            invalid device ordinal and a CUDA OOM (copied from torch's
                            source), and NCCL's duplicate GPU as torch reports it
mlp-tp                      ``meshrun run --recipe mlp-tp`` in bf16 with the recipe's GPU
                            defaults (bf16 parameters through FSDP2, fused AdamW, batches made
                            ahead on a thread), 1.07 G parameters: 512 -> 65536 -> 512 x 16
                            blocks, lr 3e-5 (why: below): ms/step, steps/s,
                            samples/s, MFU, peak memory (torch's allocator, and nvidia-smi's
                            memory.used sampled every second), the straggler check's compute
                            time per step (``node_steps.json``)
mlp-ceiling                 the same MLP, fused AdamW and clipping in bf16 in one plain
                            process, the batch made on the GPU: what the device does with these
                            shapes, and with the same FLOPs at 4x the dim and 1/4 the hidden;
                            and the CPU time the recipe spends making one step's batch
mlp-tp-variants             the mlp-tp job with one of the recipe's GPU defaults changed at a
                            time (batch made in the loop, bf16 by autocast, foreach AdamW,
                            parameters kept gathered), and with all three old ways at once:
                            50 steps each, ms/step and MFU against the default
node-check                  the node check's GPU path (bf16 8192x8192 matmuls): TFLOP/s
compute-events              meshrun.arrive()/progress() around GPU work of a known length
                            (``torch.cuda._sleep``): the straggler check's CUDA-event compute
                            time against the worker's own events and the host's clock
bench                       ``meshrun bench`` on one GPU (one rank: latency; busbw is 0 by
                            definition)
mlp-tp-torchrun             the recipe module under plain ``torchrun --standalone`` with the
                            same resolved config: meshrun's launcher against torchrun's
autoencoder                 ``meshrun run --recipe autoencoder`` in bf16: samples/s, MFU, memory
invalid-device-ordinal      a plan of 2 processes on 1 GPU, forced with a stand-in nvidia-smi
                            listing a second GPU (meshrun refuses the real plan); a script doing
                            ``torch.cuda.set_device(LOCAL_RANK)``; ``meshrun diagnose`` must say
                            ``invalid-device-ordinal``
cuda-oom                    ``meshrun run --recipe mlp-tp`` with a per-device batch far too
                            large; ``meshrun diagnose`` must say ``cuda-oom``
simulate-shared-gpu         ``meshrun simulate --nodes 2 --nproc-per-node 1``: both simulated
                            nodes on the one GPU under NCCL; what NCCL did, and the diagnosis
simulate-hostid             the same with ``NCCL_HOSTID`` set per simulated node (NCCL then
                            counts two hosts and connects them over its network transport);
                            the recipe's loss and NCCL's transport
simulate-bench-hostid       ``meshrun bench``'s workers across those two simulated nodes
==========================  ================================================================

The mlp-tp job (``GPU_MLP``): 1.07 G parameters as 16 blocks of 512 -> 65536 -> 512, 2048
samples a step (13.2 TFLOP, 13.3 ms at 989 TFLOP/s), bf16, lr 3e-5, 120 steps. The first
H200 run used 32 blocks of 512 -> 32768 -> 512 at the recipe's lr 3e-3 and its loss was nan
from step 10 (bench/results/gpu_check_h200_1.*). Adam moves every weight by about the lr
whatever its gradient, so one step can move a block's output by up to lr x hidden x (the
mean size of its hidden activations), and the stack by depth times that: lr x hidden x
depth, the same for every split of the same parameters at dim 512 (hidden x depth = 1 M
here), with no normalisation in this MLP to absorb it. On the CPU, at hidden 65536 x 16
blocks (the same hidden x depth; dim 64-256, 32-64 samples a step, bf16 autocast, clipping
at 1.0): lr 3e-4 diverges within 9 steps (dims 64 and 128: loss 5e5, later 1e15), 1e-4
trains with spikes (dim 64), 3e-5 falls smoothly (dim 64: 3.07 -> 0.49 in 30 steps; dim 256,
537 M parameters: 2.99 -> 0.56 in 25); at a quarter of that hidden x depth (hidden 16384 x
16, dim 512) 3e-4 falls smoothly (2.91 -> 0.59 in 30). So lr 3e-5, with the recipe's
clipping at 1.0. Half the blocks, each twice as wide as the first run's, keep the parameters
and FLOPs and halve the host's per-block work (FSDP2's hooks and copies, kernel launches).
dim stays 512 because the recipe makes its data on the CPU (~2 x dim^2 teacher FLOPs a
sample against the model's 12 x dim x hidden x depth): a wider dim would make the data
slower than a step even with the batch thread; what dim 512 costs on the GPU (GELU and bias
over 65,536-wide activations, memory-bound), mlp-ceiling measures at 4x the dim with the
same FLOPs. The recipe now stops at the first loss that is not finite (``loss-not-finite``),
so a diverging job fails in seconds, not after its last step.

``--dry-run`` (and a machine without a GPU) runs install, device, plan, doctor,
diagnose-canned, mlp-tp (tiny, on the CPU, ``MESHRUN_PEAK_FLOPS=1e12`` standing in for a
peak) and the plan half of invalid-device-ordinal: under a minute on two cores.
``--rehearse`` runs every step but cuda-oom on the CPU with tiny sizes (the invalid ordinal
launch then fails the CPU's way, and simulate-shared-gpu succeeds on gloo).

Output (``--out``, else ``$OUT``, else ``./gpu-check-out``): ``gpu_check.json`` (rewritten
after every step, so a killed run keeps what it measured), ``gpu_check.txt`` (one line per
step) and ``gpu_check_logs.tar.gz`` (each command's console output and the key files of its
run folder). ``--markdown`` turns a ``gpu_check.json`` into the rows of docs/benchmarks.md's
GPU table. Exit status: 0 when every step that ran passed its checks, 1 otherwise, 2 on a
bad option.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

THIS = Path(__file__).resolve()
ROOT = THIS.parent.parent
SRC = ROOT / "src"

GIB = 1 << 30

# --- sizes ---------------------------------------------------------------------------------
# GPU. mlp-tp: 1.07 G parameters (512 -> 65536 -> 512, 16 blocks; fp32 weights, grads and AdamW
# states ~17 GB, bf16 activations of 2048 samples ~9 GB, the bf16 copies FSDP2 gathers ~2 GB):
# fits an 80 GB card with room; why this shape and lr 3e-5: the module's docstring. 120 steps
# (~40-60 ms each): 110 timed, and enough progress reports (one a second, the first two left
# out) for the straggler check's figures.
GPU_MLP = ("model.dim=512", "model.hidden=65536", "model.depth=16",
           "train.per_device_batch=2048", "train.steps=120", "train.log_every=10",
           "train.lr=3e-5", "parallel.tp=1", "parallel.mixed_precision=bf16",
           "checkpoint.interval=0")
# mlp-tp-variants: the job above, one thing changed at a time, 50 steps (40 timed) each: what
# each of the recipe's GPU defaults (parallel.bf16_mode, train.prefetch, train.optimizer_impl)
# is worth, FSDP2's second all-gather, and everything as it was before them.
VARIANTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("prefetch-off", "batch made in the loop (`train.prefetch=off`)", ("train.prefetch=off",)),
    ("autocast", "bf16 by autocast (`parallel.bf16_mode=autocast`)",
     ("parallel.bf16_mode=autocast",)),
    ("foreach", "foreach AdamW (`train.optimizer_impl=foreach`)",
     ("train.optimizer_impl=foreach",)),
    ("no-reshard", "no second all-gather (`parallel.reshard_after_forward=false`)",
     ("parallel.reshard_after_forward=false",)),
    ("old-defaults", "the three old ways at once (loop, autocast, foreach)",
     ("train.prefetch=off", "parallel.bf16_mode=autocast", "train.optimizer_impl=foreach")),
)
VARIANT_STEPS = ("train.steps=50",)
GPU_AE = ("model.frames=16", "model.size=64", "model.channels=64", "train.per_device_batch=16",
          "train.steps=40", "train.log_every=10", "parallel.mixed_precision=bf16",
          "checkpoint.interval=0")
# cuda-oom: 65536 samples x hidden 65536 in bf16 is 8 GiB per activation, two kept per block
# for the backward: past 141 GB (an H200) by the 9th of 16 blocks; the batch itself is 128 MiB.
OOM_BATCH = 65536
# The two simulated nodes on one GPU: the recipe's own small model, in bf16.
SIM_MLP = ("parallel.tp=1", "train.steps=20", "train.log_every=5",
           "parallel.mixed_precision=bf16", "checkpoint.interval=0")
# CPU (dry run, rehearsal): the same jobs shrunk to seconds.
# The GPU's defaults (bf16 parameters through FSDP2, batches made ahead on a thread) forced
# on, so that the CPU runs the GPU's code path; and the recipe's own lr for the tiny model.
CPU_MLP = ("model.dim=64", "model.hidden=256", "model.depth=2", "train.per_device_batch=16",
           "train.steps=8", "train.log_every=2", "train.lr=3e-3",
           "parallel.bf16_mode=params", "train.prefetch=on")
CPU_VARIANT_STEPS = ("train.steps=6",)
CPU_AE = ("model.frames=4", "model.size=16", "model.channels=8", "train.per_device_batch=2",
          "train.steps=6", "train.log_every=2")
CPU_SIM = ("train.steps=6", "train.log_every=2")
CPU_PEAK = "1e12"   # MESHRUN_PEAK_FLOPS on the CPU: exercises the MFU arithmetic only
STANDIN_GPU = "NVIDIA H100 80GB HBM3"   # the stand-in nvidia-smi's GPU where no real one exists

# The messages torch 2.11 prints, from its source (c10/cuda/CUDAMiscFunctions.cpp adds the
# ordinal hint to C10_CUDA_CHECK's "CUDA error: ..."; c10/cuda/CUDACachingAllocator.cpp
# raises the OOM), as they reach a rank log through torch's worker output; and NCCL's
# refusal of two ranks on one GPU as torch reports it (NCCLUtils.cpp, NCCL 2.28.9, from a
# public issue thread: Intellindust-AI-Lab/DEIMv2#155).
CANNED = {
    "invalid-device-ordinal": (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/job/train.py", line 9, in <module>\n'
        "[rank1]:     torch.cuda.set_device(local_rank)\n"
        "[rank1]: torch.AcceleratorError: CUDA error: invalid device ordinal\n"
        "[rank1]: GPU device may be out of range, do you have enough GPUs?\n"
        "[rank1]: CUDA kernel errors might be asynchronously reported at some other API call, "
        "so the stacktrace below might be incorrect.\n"
        "[rank1]: For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "[rank1]: Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"),
    "cuda-oom": (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/job/train.py", line 31, in <module>\n'
        "[rank0]:     loss = model(x).float().square().mean()\n"
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 "
        "has a total capacity of 79.18 GiB of which 3.56 GiB is free. Including non-PyTorch "
        "memory, this process has 75.61 GiB memory in use. Of the allocated memory 74.02 GiB "
        "is allocated by PyTorch, and 1.06 GiB is reserved by PyTorch but unallocated. If "
        "reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://docs.pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"),
    "duplicate-gpu": (
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: "
        "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run with "
        "NCCL_DEBUG=WARN for details), NCCL version 2.28.9\n"
        "[rank1]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
        "[rank1]: Last error:\n"
        "[rank1]: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device ac000\n"),
}

DROP_PREFIXES = ("MESHRUN_", "PET_", "TORCHELASTIC_")
STATUSES = ("ok", "failed", "timeout", "skipped", "error")


# --- pure helpers (unit-tested in tests/unit/test_gpu_check.py) -------------------------------

def parse_smi_banner(text: str) -> dict[str, str | None]:
    """Driver version and the driver's CUDA version from ``nvidia-smi``'s banner
    (``| NVIDIA-SMI 570.86.15   Driver Version: 570.86.15   CUDA Version: 12.8 |``)."""
    driver = re.search(r"Driver Version:\s*([\w.]+)", text)
    cuda = re.search(r"CUDA Version:\s*([\w.]+)", text)
    return {"driver": driver.group(1) if driver else None,
            "cuda": cuda.group(1) if cuda else None}


def parse_smi_csv(text: str, keys: Iterable[str]) -> list[dict[str, str]]:
    """``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` lines as dicts."""
    keys = list(keys)
    rows = []
    for line in text.splitlines():
        if line.strip():
            rows.append(dict(zip(keys, (v.strip() for v in line.split(",")))))
    return rows


def standin_smi(real_csv: str, gpus: int) -> str:
    """The CSV a stand-in ``nvidia-smi`` prints: the real first GPU (a canned H100 where there
    is none), repeated as GPUs 0..gpus-1 with made-up UUIDs after the first."""
    first = next((ln for ln in real_csv.splitlines() if ln.strip()), "")
    parts = [p.strip() for p in first.split(",")] if first else []
    if len(parts) < 3:
        parts = ["0", "GPU-00000000-0000-0000-0000-000000000000", STANDIN_GPU, "81559"]
    lines = []
    for i in range(gpus):
        uuid = parts[1] if i == 0 else f"GPU-57a4d100-0000-4000-8000-{i:012d}"
        lines.append(", ".join([str(i), uuid, *parts[2:]]))
    return "\n".join(lines) + "\n"


def budget(now: float, deadline: float, timeout: float, minimum: float,
           reserve: float) -> float | None:
    """Seconds a step may take: its timeout, cut to what is left before the deadline less
    ``reserve``; None when less than its ``minimum`` is left (the step is skipped)."""
    left = deadline - now - reserve
    if left < minimum:
        return None
    return min(timeout, left)


def metrics_figures(records: list[dict[str, Any]], skip: int = 1) -> dict[str, Any]:
    """The steady state of a recipe run from its ``metrics.jsonl`` records.

    Leaves out the first-step record and the ``skip`` records after it (warm-up: allocator,
    autotuning); the step time is the mean over the steps the other records cover (each
    record's ``step_time_s`` is the mean of the steps since the previous one)."""
    if not records:
        return {}
    windows = []
    previous = None
    for record in records:
        start = previous if previous is not None else record["step"] - 1
        windows.append((record, record["step"] - start))
        previous = record["step"]
    regular = [(r, w) for r, w in windows if not r.get("first_step")]
    steady = regular[skip:] or regular[-1:]
    out: dict[str, Any] = {"first_loss": records[0]["loss"], "last_loss": records[-1]["loss"],
                           "records": len(records)}
    if not steady:
        return out
    steps = sum(w for _, w in steady)
    step_s = sum(r["step_time_s"] * w for r, w in steady) / steps
    ref, _ = steady[0]
    samples_per_step = ref["samples_per_s"] * ref["step_time_s"]
    out.update({"from_step": steady[0][0]["step"] - steady[0][1] + 1,
                "to_step": steady[-1][0]["step"], "steps_timed": steps,
                "step_ms": step_s * 1000, "steps_per_s": 1 / step_s,
                "samples_per_step": round(samples_per_step),
                "samples_per_s": samples_per_step / step_s})
    if "mfu" in ref:   # FLOPs per step are fixed: MFU scales with 1 / step time
        out["mfu"] = ref["mfu"] * ref["step_time_s"] / step_s
    memory = [r["peak_memory_gib"] for r in records if "peak_memory_gib" in r]
    if memory:
        out["peak_memory_gib"] = max(memory)
    if "psnr" in records[-1]:
        out["last_psnr"] = records[-1]["psnr"]
    return out


def diagnosis_check(diagnoses: list[dict[str, Any]], code: str) -> dict[str, Any]:
    """Whether ``meshrun diagnose`` named ``code``, and named it first (the root cause)."""
    codes = [d.get("code") for d in diagnoses]
    return {"expected": code, "codes": codes, "named": code in codes,
            "first": bool(codes) and codes[0] == code}


def fraction(value: float | None, of: float | None) -> float | None:
    return value / of if value is not None and of else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _num(x: float | None, fmt: str = ".1f", unit: str = "") -> str:
    return "-" if x is None else f"{x:{fmt}}{unit}"


def headline(name: str, fig: Mapping[str, Any]) -> str:
    """One line of figures for a step (the text summary and the console)."""
    if not fig:
        return ""
    if name == "install":
        return f"meshrun from {fig.get('meshrun_from')} ({fig.get('how')})"
    if name == "device":
        return (f"{fig.get('name') or 'no GPU'}; driver {fig.get('driver') or '-'}, CUDA "
                f"(driver) {fig.get('driver_cuda') or '-'}; torch {fig.get('torch')}, CUDA "
                f"{fig.get('torch_cuda') or '-'}, NCCL {fig.get('nccl') or '-'}; bf16 peak "
                f"{_num(fig.get('peak_tflops'), '.0f', ' TFLOP/s')}")
    if name == "plan":
        refused = fig.get("refused", {})
        return (f"{fig.get('nproc_per_node')} process(es) on {fig.get('device')} "
                f"{','.join(fig.get('visible_devices') or []) or '-'} "
                f"({', '.join(fig.get('gpu_names') or []) or 'no GPU'}), {fig.get('backend')}; "
                f"{refused.get('nproc')} processes refused: [{refused.get('code')}]")
    if name == "doctor":
        return (f"exit {fig.get('exit')}: {fig.get('errors')} error(s), {fig.get('warnings')} "
                f"warning(s); {fig.get('torch_line', '')}")
    if name in ("mlp-tp", "mlp-tp-torchrun", "autoencoder"):
        text = (f"{_num(fig.get('step_ms'), '.1f', ' ms/step')}, "
                f"{_num(fig.get('steps_per_s'), '.2f', ' steps/s')}, "
                f"{_num(fig.get('samples_per_s'), ',.0f', ' samples/s')}, MFU "
                f"{_pct(fig.get('mfu'))}, peak memory "
                f"{_num(fig.get('peak_memory_gib'), '.1f', ' GiB')} (allocator) / "
                f"{_num(fig.get('smi_peak_gib'), '.1f', ' GiB')} (nvidia-smi)")
        if "compute_ms" in fig:
            text += f"; straggler check's compute time {_num(fig['compute_ms'], '.1f', ' ms')}"
        if "vs_meshrun" in fig:
            text += f"; meshrun run / torchrun step time {_num(fig['vs_meshrun'], '.3f')}"
        return text
    if name == "mlp-ceiling":
        wide = fig.get("wide") or {}
        return (f"{_num(fig.get('step_ms'), '.1f', ' ms/step')} (fwd+bwd "
                f"{_num(fig.get('fwd_bwd_ms'), '.1f', ' ms')}), MFU {_pct(fig.get('mfu'))}; "
                f"dim {wide.get('dim', '-')} x hidden {wide.get('hidden', '-')}: "
                f"{_num(wide.get('step_ms'), '.1f', ' ms/step')} (fwd+bwd "
                f"{_num(wide.get('fwd_bwd_ms'), '.1f', ' ms')}), MFU {_pct(wide.get('mfu'))}; "
                f"the recipe's batch on the CPU {_num(fig.get('data_ms'), '.1f', ' ms')}/step")
    if name == "mlp-tp-variants":
        parts = [f"default {_num(fig.get('default_ms'), '.1f', ' ms')}"]
        for key, row in (fig.get("variants") or {}).items():
            parts.append(f"{key} " + (f"{_num(row.get('step_ms'), '.1f', ' ms')} "
                                      f"({_num(row.get('vs_default'), '.2f', 'x')})"
                                      if "left_out" not in row else "left out"))
        return ", ".join(parts)
    if name == "node-check":
        return (f"{_num(fig.get('tflops'), '.1f', ' TFLOP/s')} a rank "
                f"({_pct(fig.get('of_peak'))} of peak), check {_num(fig.get('seconds'))} s")
    if name == "compute-events":
        return (f"straggler check {_num(fig.get('compute_ms'), '.2f', ' ms')}, own events "
                f"{_num(fig.get('own_busy_ms'), '.2f', ' ms')}, host clock "
                f"{_num(fig.get('host_busy_ms'), '.2f', ' ms')} ({fig.get('clock')})")
    if name in ("bench", "simulate-bench-hostid"):
        return (f"{fig.get('world_size')} rank(s), {fig.get('backend')}, transport "
                f"{fig.get('transport', '-')}: all-reduce 1K {_num(fig.get('small_us'), '.1f')} "
                f"us, {fig.get('large_size', '-')} {_num(fig.get('large_us'), '.1f')} us, busbw "
                f"{_num(fig.get('large_busbw'), '.2f', ' GB/s')}")
    if name in ("invalid-device-ordinal", "cuda-oom", "simulate-shared-gpu", "diagnose-canned"):
        parts = []
        if "outcome" in fig:
            parts.append(fig["outcome"])
        for key, check in fig.get("diagnoses", {}).items():
            parts.append(f"{key}: diagnose {check['codes'][:3]}")
        return "; ".join(parts)
    if name == "simulate-hostid":
        return (f"{fig.get('outcome', '')}; loss {_num(fig.get('first_loss'), '.4f')} -> "
                f"{_num(fig.get('last_loss'), '.4f')}, transport {fig.get('transport', '-')}")
    return ""


def summary_text(result: Mapping[str, Any]) -> str:
    """The short text summary: a header and one line per step."""
    dev = next((s["figures"] for s in result.get("steps", []) if s["name"] == "device"), {})
    lines = [f"meshrun GPU check ({result.get('mode')}): {dev.get('name') or 'no GPU'}; "
             f"{result.get('elapsed_s', 0):.0f} s of {result.get('deadline_s', 0):.0f}"
             + ("" if result.get("finished") else " (not finished)")]
    if result.get("why_mode"):
        lines.append(f"  {result['why_mode']}")
    for step in result.get("steps", []):
        text = step.get("headline") or step.get("why") or ""
        lines.append(f"  {step['name']:<22} {step['status']:<8} {step.get('seconds', 0):6.1f} s  "
                     f"{text}")
        for check in step.get("checks", []):
            if not check["ok"]:
                lines.append(f"  {'':<22} check failed: {check['what']}: {check.get('detail', '')}")
    return "\n".join(lines) + "\n"


def _recipe_rows(label: str, step: str) -> list[tuple[str, str, Callable[[dict], str]]]:
    return [
        (f"{label}: step time", step, lambda f: (
            f"{_num(f.get('step_ms'), '.1f', ' ms')} ({_num(f.get('steps_per_s'), '.2f')} "
            f"steps/s, {_num(f.get('samples_per_s'), ',.0f')} samples/s)")),
        (f"{label}: MFU", step, lambda f: _pct(f.get("mfu"))),
        (f"{label}: peak memory", step, lambda f: (
            f"{_num(f.get('peak_memory_gib'), '.1f', ' GiB')} allocated, "
            f"{_num(f.get('smi_peak_gib'), '.1f', ' GiB')} nvidia-smi")),
    ]


def _variant_cell(fig: Mapping[str, Any], key: str) -> str:
    row = (fig.get("variants") or {}).get(key)
    if not row:
        return "not run"
    if "left_out" in row:
        return f"left out: {row['left_out']}"
    return (f"{_num(row.get('step_ms'), '.1f', ' ms')} ({_num(row.get('vs_default'), '.2f')}x "
            f"the default's), MFU {_pct(row.get('mfu'))}")


# The rows of docs/benchmarks.md's GPU table: (figure, step, value from the step's figures).
ROWS: list[tuple[str, str, Callable[[dict], str]]] = [
    ("device", "device", lambda f: (
        f"{f.get('name', '-')}, {_num(f.get('memory_gib'), '.0f', ' GiB')}, driver "
        f"{f.get('driver', '-')}, CUDA (driver) {f.get('driver_cuda', '-')}, compute mode "
        f"{f.get('compute_mode', '-')}")),
    ("torch / CUDA / NCCL", "device", lambda f: (
        f"{f.get('torch', '-')} / {f.get('torch_cuda', '-')} / {f.get('nccl', '-')}")),
    ("dense bf16 peak (meshrun's table)", "device",
     lambda f: _num(f.get("peak_tflops"), ".0f", " TFLOP/s")),
    ("`meshrun plan`", "plan", lambda f: headline("plan", f)),
    ("`meshrun doctor`", "doctor", lambda f: headline("doctor", f)),
    *_recipe_rows("mlp-tp, `meshrun run`, bf16", "mlp-tp"),
    ("mlp-tp: the straggler check's compute time per step", "mlp-tp", lambda f: (
        f"{_num(f.get('compute_ms'), '.1f', ' ms')} of "
        f"{_num(f.get('straggler_step_ms'), '.1f', ' ms')} a step")),
    *_recipe_rows("mlp-tp, plain `torchrun`, bf16", "mlp-tp-torchrun"),
    ("step time, `meshrun run` / `torchrun`", "mlp-tp-torchrun",
     lambda f: _num(f.get("vs_meshrun"), ".3f")),
    ("the same MLP in one process, batch made on the GPU", "mlp-ceiling", lambda f: (
        f"{_num(f.get('step_ms'), '.1f', ' ms')} a step (forward + backward "
        f"{_num(f.get('fwd_bwd_ms'), '.1f', ' ms')}), MFU {_pct(f.get('mfu'))}")),
    ("the same FLOPs at 4x the dim and 1/4 the hidden, batch made on the GPU", "mlp-ceiling",
     lambda f: (lambda w: (f"dim {w.get('dim', '-')} x hidden {w.get('hidden', '-')}: "
                           f"{_num(w.get('step_ms'), '.1f', ' ms')} a step (forward + backward "
                           f"{_num(w.get('fwd_bwd_ms'), '.1f', ' ms')}), MFU "
                           f"{_pct(w.get('mfu'))}"))(f.get("wide") or {})),
    ("the recipe's batch made on the CPU, per step", "mlp-ceiling",
     lambda f: _num(f.get("data_ms"), ".1f", " ms")),
    *[(f"mlp-tp variant, {what}: step time", "mlp-tp-variants",
       lambda f, key=key: _variant_cell(f, key)) for key, what, _ in VARIANTS],
    *_recipe_rows("autoencoder, `meshrun run`, bf16", "autoencoder"),
    ("node check: bf16 8192² matmuls", "node-check", lambda f: (
        f"{_num(f.get('tflops'), '.1f', ' TFLOP/s')} ({_pct(f.get('of_peak'))} of peak)")),
    ("straggler check's compute time against known GPU work", "compute-events",
     lambda f: headline("compute-events", f)),
    ("`meshrun bench`, 1 GPU", "bench", lambda f: headline("bench", f)),
    ("`meshrun bench`, 2 simulated nodes on 1 GPU (NCCL_HOSTID)", "simulate-bench-hostid",
     lambda f: headline("simulate-bench-hostid", f)),
    ("2 simulated nodes on 1 GPU, NCCL", "simulate-shared-gpu",
     lambda f: headline("simulate-shared-gpu", f)),
    ("2 simulated nodes on 1 GPU, NCCL_HOSTID per node", "simulate-hostid",
     lambda f: headline("simulate-hostid", f)),
    ("forced: 2 processes on 1 GPU", "invalid-device-ordinal",
     lambda f: headline("invalid-device-ordinal", f)),
    ("a batch far too large", "cuda-oom", lambda f: headline("cuda-oom", f)),
    ("torch 2.11's and NCCL's own messages", "diagnose-canned", lambda f: headline("diagnose-canned", f)),
]


def markdown_rows(result: Mapping[str, Any], missing: str = "not run") -> str:
    """The rows of docs/benchmarks.md's GPU table (| figure | value | step |) from a result;
    the same rows whatever ran (``missing`` where a step did not run)."""
    steps = {s["name"]: s for s in result.get("steps", [])}
    out = ["| figure | value | step |", "|---|---|---|"]
    for label, name, value in ROWS:
        step = steps.get(name)
        if step is None:
            text = missing
        elif step["status"] in ("ok", "failed") and step["figures"]:
            text = value(step["figures"]) + (" (a check failed)" if step["status"] == "failed"
                                             else "")
        else:
            text = f"{step['status']}: {step.get('why', '')}".rstrip(": ")
        out.append(f"| {label} | {text.replace('|', '/')} | `{name}` |")
    return "\n".join(out) + "\n"


# --- processes --------------------------------------------------------------------------------

def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every process (from /proc)."""
    from meshrun.harness import proc_stats

    return {pid: (int(fields[1]), fields[19]) for pid, fields in proc_stats().items()}


class Tree:
    """The processes a command started (seen every half second while it runs), so that
    everything it left behind — torchrun's workers, which start sessions of their own — can
    be ended by pid, and only those."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, str] = {}

    def sample(self) -> None:
        table = _proc_table()
        if self.root in table:
            self.seen.setdefault(self.root, table[self.root][1])
        frontier = [p for p in self.seen if p in table] or [self.root]
        while frontier:
            parent = frontier.pop()
            for pid, (ppid, start) in table.items():
                if ppid == parent and pid not in self.seen:
                    self.seen[pid] = start
                    frontier.append(pid)

    def alive(self) -> list[int]:
        table = _proc_table()
        return [pid for pid, start in self.seen.items()
                if pid in table and table[pid][1] == start and pid != os.getpid()]

    def signal(self, sig: int) -> None:
        for pid in self.alive():
            try:
                os.kill(pid, sig)
            except OSError:
                pass


@dataclass
class Done:
    argv: list[str]
    rc: int | None
    seconds: float
    timed_out: bool
    log: Path
    leftovers: int = 0
    stdout: Path | None = None   # kept apart from the log (a command printing JSON)

    @property
    def text(self) -> str:
        """Everything the command printed (with ``split``: its stderr only)."""
        try:
            return self.log.read_text(errors="replace").split("\n", 1)[-1]
        except OSError:
            return ""

    def json(self) -> Any:
        """The JSON the command printed on stdout (``split``), or None."""
        try:
            return json.loads(self.stdout.read_text()) if self.stdout else None
        except (OSError, ValueError):
            return None

    def tail(self, lines: int = 6) -> str:
        return " | ".join(self.text.strip().splitlines()[-lines:])


class SmiMemory:
    """nvidia-smi's memory.used of GPU 0, sampled every second while a command runs."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and shutil.which("nvidia-smi") is not None
        self.peak_mib: float | None = None
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SmiMemory:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        if self.enabled:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._halt.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                                      "--format=csv,noheader,nounits", "-i", "0"],
                                     capture_output=True, text=True, timeout=5, check=False).stdout
                value = float(out.strip().splitlines()[0])
                self.peak_mib = max(self.peak_mib or 0.0, value)
            except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
                pass
            self._halt.wait(1.0)

    @property
    def peak_gib(self) -> float | None:
        return None if self.peak_mib is None else self.peak_mib / 1024


# --- the run ------------------------------------------------------------------------------------

class Skip(Exception):
    """A step that cannot run here (the reason is recorded)."""


@dataclass
class StepResult:
    name: str
    status: str = "ok"
    seconds: float = 0.0
    why: str = ""
    commands: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)   # commands ended at their limit

    def check(self, what: str, ok: bool, detail: Any = "") -> bool:
        self.checks.append({"what": what, "ok": bool(ok), "detail": str(detail)[:400]})
        return ok

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 2),
                "why": self.why, "headline": headline(self.name, self.figures),
                "commands": self.commands, "figures": self.figures, "checks": self.checks,
                "logs": self.logs}


class Check:
    """Runs the steps in order, each within its budget, recording as it goes."""

    def __init__(self, mode: str, why_mode: str, out: Path, work: Path, deadline_s: float,
                 selected: list[str]) -> None:
        self.mode = mode                       # gpu, dry-run or rehearse
        self.gpu = mode == "gpu"
        self.out, self.work = out, work
        self.started = time.monotonic()
        self.deadline = self.started + deadline_s
        self.reserve = 15.0                    # for the logs' archive and the summary
        self.selected = selected
        self.result: dict[str, Any] = {
            "tool": "bench/gpu_check.py", "mode": mode, "why_mode": why_mode,
            "argv": sys.argv[1:], "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "deadline_s": deadline_s, "host": os.uname().nodename, "cpus": os.cpu_count(),
            "python": sys.version.split()[0], "work_dir": str(work), "steps": [],
            "finished": False}
        self.env = self._env()
        self.device: dict[str, Any] = {}
        self.current: StepResult | None = None
        self.step_end = self.deadline
        self.calls = 0
        self.active: tuple[subprocess.Popen, Tree] | None = None
        self.mlp_tp_ms: float | None = None
        self.mlp_tp_mfu: float | None = None

    # -- environment -----------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        """This process's environment without the variables that tell a process where it
        belongs (a platform's, torchrun's, meshrun's), meshrun importable from src/."""
        sys.path.insert(0, str(SRC))
        from meshrun.topology import platform_variable

        env = {k: v for k, v in os.environ.items()
               if not platform_variable(k) and not k.startswith(DROP_PREFIXES)}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", ""))
                                            if p)
        env["PYTHONUNBUFFERED"] = "1"
        if not self.gpu:
            env["MESHRUN_PEAK_FLOPS"] = CPU_PEAK
            if shutil.which("nvidia-smi", path=env.get("PATH")):
                env["CUDA_VISIBLE_DEVICES"] = ""   # a GPU host's CPU run: no GPU planned
        return env

    def sets(self, gpu: tuple[str, ...], cpu: tuple[str, ...]) -> tuple[str, ...]:
        return gpu if self.gpu else (*gpu, *cpu)

    # -- commands --------------------------------------------------------------------------

    def call(self, argv: list[str], *, timeout: float, env: Mapping[str, str] | None = None,
             cwd: Path | None = None, label: str = "", split: bool = False) -> Done:
        """Run one command (its own session), its output to a log (``split``: stdout to a
        file of its own); killed with everything it started at its timeout, or at the step's
        end."""
        assert self.current is not None
        self.calls += 1
        name = f"{self.current.name}-{self.calls:02d}{'-' + label if label else ''}.log"
        log = self.work / "console" / name
        log.parent.mkdir(parents=True, exist_ok=True)
        limit = max(1.0, min(timeout, self.step_end - time.monotonic()))
        shown = " ".join(a if " " not in a else repr(a) for a in argv)
        self.current.commands.append(shown.replace(str(self.work), "$WORK")
                                     .replace(str(ROOT) + "/", ""))
        self.current.logs.append(str(log.relative_to(self.work)))
        began = time.monotonic()
        stdout = log.with_suffix(".stdout") if split else None
        with open(log, "w", encoding="utf-8") as handle, \
                open(stdout or os.devnull, "w", encoding="utf-8") as out:
            handle.write(f"$ {shown}\n")
            handle.flush()
            proc = subprocess.Popen(argv, env=dict(env if env is not None else self.env),
                                    cwd=cwd or self.work, stdout=out if split else handle,
                                    stderr=handle if split else subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            tree = Tree(proc.pid)
            self.active = (proc, tree)
            timed_out = False
            while True:
                try:
                    rc: int | None = proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    tree.sample()
                    if time.monotonic() - began > limit:
                        timed_out = True
                        _end(proc, tree)
                        rc = None
                        break
            self.active = None
            leftovers = tree.alive()
            if leftovers:   # a worker that outlived its launcher: it holds the GPU
                tree.signal(signal.SIGKILL)
                handle.write(f"\n[gpu_check: killed {len(leftovers)} leftover process(es)]\n")
        if timed_out:
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(f"\n[gpu_check: no result after {limit:.0f} s: ended]\n")
            self.current.timed_out.append(f"{' '.join(argv[1:4])} ... ended after "
                                          f"{limit:.0f} s")
        return Done(argv, rc, time.monotonic() - began, timed_out, log, len(leftovers), stdout)

    def meshrun(self, *args: str, timeout: float, **kw: Any) -> Done:
        return self.call([sys.executable, "-m", "meshrun", *args], timeout=timeout, **kw)

    def run_dir(self, run_id: str) -> Path:
        return self.work / "logs" / run_id

    def diagnose(self, target: Path, code: str) -> dict[str, Any]:
        done = self.meshrun("diagnose", "--json", str(target), timeout=60, label="diagnose",
                            split=True)
        return diagnosis_check((done.json() or {}).get("diagnoses", []), code)

    def standin(self, gpus: int) -> dict[str, str]:
        """The environment with a stand-in nvidia-smi first on PATH listing ``gpus`` GPUs
        (the real first GPU repeated; a canned H100 where there is none)."""
        real = ""
        if self.gpu:
            from meshrun.facts.host import NVIDIA_SMI_QUERY

            real = subprocess.run(["nvidia-smi", *NVIDIA_SMI_QUERY], capture_output=True,
                                  text=True, timeout=30, check=False).stdout
        folder = self.work / f"standin-{gpus}"
        folder.mkdir(parents=True, exist_ok=True)
        exe = folder / "nvidia-smi"
        exe.write_text("#!/bin/sh\n# stand-in for meshrun's GPU query\ncat <<'EOF'\n"
                       + standin_smi(real, gpus) + "EOF\n")
        exe.chmod(0o755)
        env = dict(self.env)
        env["PATH"] = f"{folder}{os.pathsep}{env.get('PATH', '')}"
        env.pop("CUDA_VISIBLE_DEVICES", None)
        return env

    def fall_back(self, why: str) -> None:
        """A GPU nvidia-smi lists but torch cannot use: the CPU's dry run from here on."""
        print(f"no GPU usable by torch: {why}; dry run on the CPU", flush=True)
        self.mode, self.gpu = "dry-run", False
        self.result["mode"] = "dry-run"
        self.result["why_mode"] += f"; no GPU usable by torch ({why}): dry run on the CPU"
        self.env = self._env()

    def stop_active(self) -> None:
        if self.active is not None:
            _end(*self.active)

    # -- the loop --------------------------------------------------------------------------

    def run(self, steps: list[tuple[str, set[str], float, float, Callable[[StepResult], None]]]
            ) -> int:
        failed = 0
        for name, modes, timeout, minimum, body in steps:
            step = StepResult(name)
            began = time.monotonic()
            if self.selected and name not in self.selected:
                step.status, step.why = "skipped", "not selected (--steps / --skip)"
            elif self.mode not in modes:
                step.status, step.why = "skipped", _why_not(name, self.mode)
            else:
                allowed = budget(began, self.deadline, timeout, minimum, self.reserve)
                if allowed is None:
                    step.status = "skipped"
                    step.why = (f"deadline: {self.deadline - began:.0f} s left, the step "
                                f"needs {minimum:.0f} s")
                else:
                    print(f"gpu_check: {name} (up to {allowed:.0f} s) ...", flush=True)
                    self.current, self.step_end = step, began + allowed
                    try:
                        body(step)
                        if step.timed_out:
                            step.status, step.why = "timeout", "; ".join(step.timed_out)
                        elif any(not c["ok"] for c in step.checks):
                            step.status = "failed"
                    except Skip as why:
                        step.status, step.why = "skipped", str(why)
                    except TimeoutError as why:
                        step.status, step.why = "timeout", str(why)
                    except Exception as exc:  # noqa: BLE001 - one step must not end the run
                        step.status = "error"
                        step.why = f"{type(exc).__name__}: {exc}"
                    finally:
                        self.current = None
            step.seconds = time.monotonic() - began
            failed += step.status in ("failed", "timeout", "error")
            self.result["steps"].append(step.to_json())
            line = step.to_json()["headline"] or step.why
            print(f"gpu_check: {name}: {step.status} ({step.seconds:.1f} s) {line}", flush=True)
            self.save()
        self.result["finished"] = True
        self.save(final=True)
        return 1 if failed else 0

    def save(self, final: bool = False) -> None:
        self.result["elapsed_s"] = round(time.monotonic() - self.started, 1)
        self.out.mkdir(parents=True, exist_ok=True)
        if final or self.result["steps"]:
            self.archive()
        _write_atomic(self.out / "gpu_check.json", json.dumps(self.result, indent=2) + "\n")
        _write_atomic(self.out / "gpu_check.txt", summary_text(self.result))

    def archive(self) -> None:
        """gpu_check_logs.tar.gz: console logs and the small files of every run folder."""
        keep = (".log", ".json", ".jsonl", ".txt", ".stdout")
        left_out = []
        tmp = self.out / ".gpu_check_logs.tar.gz.tmp"
        with tarfile.open(tmp, "w:gz") as tar:
            for folder in ("console", "logs"):
                base = self.work / folder
                if not base.is_dir():
                    continue
                for path in sorted(base.rglob("*")):
                    if not path.is_file() or "raw" in path.relative_to(base).parts:
                        continue
                    if not path.name.endswith(keep) or "tensorboard" in str(path):
                        continue
                    if path.stat().st_size > 2 << 20:
                        left_out.append(str(path.relative_to(self.work)))
                        continue
                    tar.add(path, arcname=str(path.relative_to(self.work)))
        os.replace(tmp, self.out / "gpu_check_logs.tar.gz")
        self.result["logs_left_out"] = left_out


def _end(proc: subprocess.Popen, tree: Tree) -> None:
    """SIGTERM to the command's group and everything it started, SIGKILL 8 s later."""
    tree.sample()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass
        tree.signal(sig)
        try:
            proc.wait(timeout=8)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:
            time.sleep(1.0)   # the agent's own teardown of its workers
            if not tree.alive():
                return


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _why_not(name: str, mode: str) -> str:
    if name == "cuda-oom":
        return "needs a GPU (on the CPU it would fill the host's memory instead)"
    if mode == "dry-run":
        return "not in the dry run (--rehearse runs it on the CPU)"
    return f"not in mode {mode}"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _records(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


# --- the steps ------------------------------------------------------------------------------------

def step_install(c: Check, s: StepResult) -> None:
    probe = [sys.executable, "-c", "import meshrun, sys; print(meshrun.__file__)"]
    plain = {k: v for k, v in c.env.items() if k != "PYTHONPATH"}
    done = c.call(probe, timeout=60, env=plain, cwd=Path("/"), label="installed")
    s.figures["installed"] = done.rc == 0
    s.figures["how"] = "installed already" if done.rc == 0 else "not installed"
    if done.rc != 0 and c.gpu:
        pip = c.call([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                      "--no-build-isolation", "--disable-pip-version-check", "-q", "-e",
                      str(ROOT)], timeout=60, label="pip")
        s.figures["pip_rc"] = pip.rc
        s.figures["how"] = ("pip install -e (offline)" if pip.rc == 0 else
                            f"pip install failed ({pip.tail(2)}): PYTHONPATH only")
    done = c.call(probe, timeout=60, label="pythonpath")
    where = done.text.strip().splitlines()[-1] if done.rc == 0 else None
    s.figures["meshrun_from"] = where
    s.check("meshrun imports from this checkout (PYTHONPATH=src, inherited by every process)",
            where is not None and where.startswith(str(SRC)), where or done.tail())


def step_device(c: Check, s: StepResult) -> None:
    f = s.figures
    if shutil.which("nvidia-smi", path=c.env.get("PATH")):
        banner = c.call(["nvidia-smi"], timeout=30, label="banner")
        versions = parse_smi_banner(banner.text)
        f["driver"], f["driver_cuda"] = versions["driver"], versions["cuda"]
        keys = ("name", "driver_version", "memory.total", "compute_mode", "pci.bus_id",
                "power.limit", "clocks.max.sm", "temperature.gpu")
        query = c.call(["nvidia-smi", f"--query-gpu={','.join(keys)}",
                        "--format=csv,noheader,nounits"], timeout=30, label="query")
        rows = parse_smi_csv(query.text, keys) if query.rc == 0 else []
        f["nvidia_smi"] = rows
        if rows:
            f["smi_name"], f["compute_mode"] = rows[0]["name"], rows[0]["compute_mode"]
    out = c.work / "probe.json"
    done = c.call([sys.executable, str(THIS), "--worker", "probe", str(out)], timeout=90,
                  label="torch")
    probe = _read_json(out) or {}
    if not probe:
        raise RuntimeError(f"the torch probe failed: {done.tail()}")
    f.update(probe)
    c.device = f
    c.result["device"] = f.get("name") or "no GPU"
    if c.gpu and not probe.get("cuda"):
        s.check("torch sees the GPU", False, probe.get("why", ""))
        c.fall_back(probe.get("why", "torch.cuda.is_available() is False"))
        return
    if c.gpu:
        s.check("nvidia-smi and torch name the same GPU",
                f.get("smi_name") and f.get("name") == f.get("smi_name"),
                f"{f.get('smi_name')} / {f.get('name')}")
        s.check("the device is in meshrun's bf16 peak table", f.get("peak_tflops"),
                f.get("peak_source"))


def step_plan(c: Check, s: StepResult) -> None:
    done = c.meshrun("plan", "--json", timeout=60, split=True)
    plan = done.json() or {}
    s.check("meshrun plan --json", done.rc == 0, done.tail())
    for key in ("nproc_per_node", "device", "backend", "visible_devices", "gpu_names",
                "warnings", "notes"):
        s.figures[key] = plan.get(key)
    c.meshrun("plan", timeout=60, label="banner")
    env = dict(c.env)
    if c.gpu:
        s.check("one process per visible GPU, NCCL",
                plan.get("device") == "cuda" and plan.get("backend") == "nccl"
                and plan.get("nproc_per_node") == len(plan.get("visible_devices") or []),
                {k: plan.get(k) for k in ("device", "backend", "nproc_per_node")})
        s.check("meshrun's nvidia-smi reading names torch's GPU",
                (plan.get("gpu_names") or [""])[0] == c.device.get("name"),
                f"{plan.get('gpu_names')} / {c.device.get('name')}")
        gpus = len(plan.get("visible_devices") or [])
    else:   # the same refusal against a stand-in nvidia-smi listing one GPU
        env = c.standin(1)
        gpus = 1
        s.figures["standin_nvidia_smi"] = True
    refused = c.meshrun("plan", "--nproc-per-node", str(gpus + 1), timeout=60, env=env,
                        label="refused")
    code = re.search(r"\[([a-z0-9-]+)\]\s*$", refused.text.strip())
    s.figures["refused"] = {"nproc": gpus + 1, "rc": refused.rc,
                            "code": code.group(1) if code else None,
                            "line": refused.text.strip().splitlines()[-1][:300]}
    s.check(f"{gpus + 1} processes on {gpus} GPU(s) refused at plan time (exit 2, "
            "too-many-processes)", refused.rc == 2 and code and code.group(1) ==
            "too-many-processes", refused.tail(2))


def step_doctor(c: Check, s: StepResult) -> None:
    done = c.meshrun("doctor", "--json", timeout=120, split=True)
    findings = (done.json() or {}).get("findings", [])
    s.figures.update({"exit": done.rc, "findings": findings,
                      "errors": sum(f["severity"] == "error" for f in findings),
                      "warnings": sum(f["severity"] == "warning" for f in findings)})
    torch_line = next((f["message"] for f in findings if f["code"] == "torch"), "")
    gpus_line = next((f["message"] for f in findings if f["code"] == "gpus"), "")
    s.figures["torch_line"], s.figures["gpus_line"] = torch_line, gpus_line
    s.check("meshrun doctor --json answered", findings, done.tail())
    s.check("no errors (exit 0)", done.rc == 0,
            [f["message"] for f in findings if f["severity"] == "error"])
    if c.gpu:
        s.check("doctor sees CUDA and NCCL", "CUDA none" not in torch_line
                and "NCCL none" not in torch_line, torch_line)
        s.check("doctor counts the GPU", gpus_line.startswith("1 GPU") or "GPU(s) for" in
                gpus_line, gpus_line)


def step_diagnose_canned(c: Check, s: StepResult) -> None:
    s.figures["diagnoses"] = {}
    for code, text in CANNED.items():
        path = c.work / "canned" / f"{code}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        check = c.diagnose(path, code)
        s.figures["diagnoses"][code] = check
        s.check(f"torch 2.11's message diagnosed as {code}, first", check["first"],
                check["codes"])


def recipe_run(c: Check, s: StepResult, recipe: str, sets: tuple[str, ...], run_id: str,
               timeout: float) -> tuple[Done, Path]:
    args = ["run", "--run-id", run_id, "--log-dir", str(c.work / "logs"), "--nproc-per-node",
            "1", "--recipe", recipe]   # one GPU, whatever the machine has
    for item in sets:
        args += ["--set", item]
    with SmiMemory(c.gpu) as smi:
        done = c.meshrun(*args, timeout=timeout)
    if done.timed_out:
        raise TimeoutError(f"{recipe}: no result after {done.seconds:.0f} s ({done.tail(2)})")
    s.figures["smi_peak_gib"] = smi.peak_gib
    return done, c.run_dir(run_id)


def read_recipe(c: Check, s: StepResult, done: Done, folder: Path) -> None:
    records = _records(folder / "metrics.jsonl")
    s.figures.update(metrics_figures(records))
    s.figures["seconds"] = round(done.seconds, 1)
    s.check("the run succeeded", done.rc == 0, done.tail())
    s.check("metrics.jsonl has steady-state records", "step_ms" in s.figures,
            f"{len(records)} records")
    if records:
        s.check("the loss fell", records[-1]["loss"] < records[0]["loss"],
                f"{records[0]['loss']:.5f} -> {records[-1]['loss']:.5f}")
        s.check("an MFU in the records", s.figures.get("mfu", 0) > 0, records[-1])
    used = re.search(r"MFU against (.+)", done.text)
    s.figures["peak_source"] = used.group(1).strip() if used else None
    precision = re.search(r"FLOPs per \w+ \(fwd\+bwd\), (?:clips \S+, )?(.+)", done.text)
    s.figures["precision"] = precision.group(1).strip() if precision else None
    kernels = re.search(r"optimizer: (.+)", done.text)
    s.figures["kernels"] = kernels.group(1).strip() if kernels else None
    if c.gpu:
        s.check("ran on the GPU in bf16", (s.figures["precision"] or "").startswith("bf16")
                and used and "MESHRUN_PEAK_FLOPS" not in used.group(1),
                f"{s.figures['precision']}; {s.figures['peak_source']}")
        s.check("peak memory in the records", s.figures.get("peak_memory_gib"),
                "no peak_memory_gib")


def step_mlp_tp(c: Check, s: StepResult) -> None:
    sets = c.sets(GPU_MLP, CPU_MLP)
    s.figures["sets"] = list(sets)
    done, folder = recipe_run(c, s, "mlp-tp", sets, "gc-mlp-tp", timeout=240)
    read_recipe(c, s, done, folder)
    steps = _read_json(folder / "node_steps.json") or {}
    node = (steps.get("nodes") or [{}])[0]
    if node.get("compute_s") is not None:
        s.figures["compute_ms"] = node["compute_s"] * 1000
        s.figures["straggler_step_ms"] = (node.get("step_time_s") or 0) * 1000
    if c.gpu:   # a CPU run's few steps may end before the first report
        s.check("the straggler check recorded a compute time (node_steps.json)",
                node.get("compute_s") is not None, steps)
    c.mlp_tp_ms = s.figures.get("step_ms")
    c.mlp_tp_mfu = s.figures.get("mfu")


def step_torchrun(c: Check, s: StepResult) -> None:
    """The recipe module under plain torchrun, with the config meshrun resolved for the
    mlp-tp step (from ``meshrun plan --json``): the same job without meshrun's agent."""
    sets = c.sets(GPU_MLP, CPU_MLP)
    s.figures["sets"] = list(sets)
    args = ["plan", "--json", "--nproc-per-node", "1", "--recipe", "mlp-tp"]
    for item in sets:
        args += ["--set", item]
    plan = c.meshrun(*args, timeout=60, label="config", split=True)
    config = ((plan.json() or {}).get("env") or {}).get("MESHRUN_JOB_CONFIG")
    if not s.check("meshrun plan resolved the config", config, plan.tail()):
        return
    folder = c.work / "logs" / "gc-torchrun"
    folder.mkdir(parents=True, exist_ok=True)
    env = {**c.env, "MESHRUN_JOB_CONFIG": config, "MESHRUN_LOG_DIR": str(folder)}
    with SmiMemory(c.gpu) as smi:
        done = c.call([sys.executable, "-m", "torch.distributed.run", "--standalone",
                       "--nproc-per-node", "1", "-m", "meshrun.recipes.mlp_tp"], timeout=240,
                      env=env, label="torchrun")
    if done.timed_out:
        raise TimeoutError(f"torchrun: no result after {done.seconds:.0f} s")
    s.figures["smi_peak_gib"] = smi.peak_gib
    read_recipe(c, s, done, folder)
    ours = c.mlp_tp_ms
    if ours and s.figures.get("step_ms"):
        s.figures["vs_meshrun"] = ours / s.figures["step_ms"]


def variant_figures(fig: Mapping[str, Any], default_ms: float | None) -> dict[str, Any]:
    """A variant's figures kept in the step's JSON, and its step time against the default's."""
    keep = {k: fig.get(k) for k in ("step_ms", "mfu", "first_loss", "last_loss", "steps_timed",
                                    "peak_memory_gib")}
    if default_ms and fig.get("step_ms"):
        keep["vs_default"] = fig["step_ms"] / default_ms
    return keep


def step_variants(c: Check, s: StepResult) -> None:
    """The mlp-tp job again with one of the recipe's GPU defaults changed at a time (and with
    all of them as they were before), 50 steps each: what each is worth. The default is the
    mlp-tp step's figure; a variant that would not fit before the step's end is left out."""
    base = (*c.sets(GPU_MLP, CPU_MLP), *(VARIANT_STEPS if c.gpu else CPU_VARIANT_STEPS))
    s.figures["default_ms"] = c.mlp_tp_ms
    s.figures["default_mfu"] = c.mlp_tp_mfu
    s.figures["variants"] = {}
    for key, what, sets in VARIANTS:
        if c.step_end - time.monotonic() < 25:
            s.figures["variants"][key] = {"what": what, "left_out": "no time left in the step"}
            continue
        args = ["run", "--run-id", f"gc-var-{key}", "--log-dir", str(c.work / "logs"),
                "--nproc-per-node", "1", "--recipe", "mlp-tp"]
        for item in (*base, *sets):
            args += ["--set", item]
        done = c.meshrun(*args, timeout=90, label=key)
        fig = metrics_figures(_records(c.run_dir(f"gc-var-{key}") / "metrics.jsonl"))
        s.figures["variants"][key] = {"what": what, "sets": list(sets), "rc": done.rc,
                                      **variant_figures(fig, c.mlp_tp_ms)}
        s.check(f"{key}: the run succeeded", done.rc == 0 and "step_ms" in fig, done.tail(2))
        if done.timed_out:
            break


def step_ceiling(c: Check, s: StepResult) -> None:
    values = dict(item.split("=", 1) for item in c.sets(GPU_MLP, CPU_MLP))
    out = c.work / "ceiling.json"
    argv = [sys.executable, str(THIS), "--worker", "ceiling", str(out),
            values["model.dim"], values["model.hidden"], values["model.depth"],
            values["train.per_device_batch"]]
    done = c.call(argv, timeout=180, label="ceiling")
    data = _read_json(out)
    s.check("the measurement ran", done.rc == 0 and data, done.tail())
    s.figures.update(data or {})
    if data and c.mlp_tp_ms:
        s.figures["recipe_step_ms"] = c.mlp_tp_ms


def step_node_check(c: Check, s: StepResult) -> None:
    run_id = "gc-nodecheck"
    done = c.meshrun("run", "--run-id", run_id, "--log-dir", str(c.work / "logs"),
                     "--no-preflight", "--hang-timeout", "0", "--slow-window", "0", "-m",
                     "meshrun.worker.nodecheck", timeout=120)
    verdict = _read_json(c.run_dir(run_id) / "nodecheck.node0.json") or {}
    s.check("the node check ran", done.rc == 0 and verdict, done.tail())
    node = (verdict.get("nodes") or [{}])[0]
    gflops = node.get("gflops_per_rank")
    peak = c.device.get("peak_tflops")
    s.figures.update({"tflops": gflops / 1000 if gflops else None, "seconds":
                      verdict.get("seconds"), "summary": verdict.get("summary"),
                      "allreduce_busbw_GBps": verdict.get("allreduce_busbw_GBps"),
                      "matmul": "bf16 8192x8192" if c.gpu else "fp32 384x384, one thread"})
    s.figures["of_peak"] = fraction(s.figures["tflops"], peak) if c.gpu else None
    if c.gpu:
        s.check("bf16 matmuls above 40 % of the peak", (s.figures["of_peak"] or 0) > 0.4,
                _pct(s.figures["of_peak"]))


def step_compute_events(c: Check, s: StepResult) -> None:
    run_id = "gc-events"
    done = c.meshrun("run", "--run-id", run_id, "--log-dir", str(c.work / "logs"), "--",
                     str(THIS), "--worker", "events", timeout=120)
    own = _read_json(c.run_dir(run_id) / "events_check.json") or {}
    steps = _read_json(c.run_dir(run_id) / "node_steps.json") or {}
    node = (steps.get("nodes") or [{}])[0]
    s.check("the run succeeded", done.rc == 0 and own, done.tail())
    compute = node.get("compute_s")
    s.figures.update({"compute_ms": compute * 1000 if compute is not None else None,
                      "straggler_step_ms": (node.get("step_time_s") or 0) * 1000,
                      "reports": node.get("steps_reported"), **own})
    s.check("the straggler check has a compute time", compute is not None, steps)
    if compute is None or not own:
        return
    ratio = compute * 1000 / own["own_busy_ms"]
    s.figures["ratio_to_own"] = ratio
    s.check("the compute time is the worker's own measurement within 15 %",
            0.85 <= ratio <= 1.15, f"{compute * 1000:.2f} / {own['own_busy_ms']:.2f} ms")
    if c.gpu:
        s.check("on the GPU it is the device's time, not the host's (which only queued the "
                "work)", compute * 1000 > 5 * own["host_busy_ms"],
                f"{compute * 1000:.2f} ms vs host {own['host_busy_ms']:.3f} ms")


def step_bench(c: Check, s: StepResult) -> None:
    run_id = "gc-bench"
    sizes = "1K:256M" if c.gpu else "1K:1M"
    done = c.meshrun("bench", "--run-id", run_id, "--log-dir", str(c.work / "logs"),
                     "--sizes", sizes, "--iters", "10" if c.gpu else "3", timeout=150)
    report = _read_json(c.run_dir(run_id) / "bench.json") or {}
    s.check("meshrun bench ran", done.rc == 0 and report, done.tail())
    s.figures.update(bench_figures(report))
    if c.gpu:
        s.check("NCCL on the GPU", report.get("backend") == "nccl", report.get("backend"))


def bench_figures(report: Mapping[str, Any]) -> dict[str, Any]:
    rows = [r for r in report.get("results", []) if r["collective"] == "all_reduce"]
    if not rows:
        return {}
    small, large = rows[0], rows[-1]
    from meshrun.worker.collbench import human

    return {"world_size": report.get("world_size"), "backend": report.get("backend"),
            "transport": report.get("transport", "-"), "small_us": small["time_us"],
            "large_size": human(large["size_bytes"]), "large_us": large["time_us"],
            "large_busbw": large["busbw_GBps"], "large_algbw": large["algbw_GBps"],
            "results": report.get("results")}


def step_autoencoder(c: Check, s: StepResult) -> None:
    sets = c.sets(GPU_AE, CPU_AE)
    s.figures["sets"] = list(sets)
    done, folder = recipe_run(c, s, "autoencoder", sets, "gc-autoencoder", timeout=240)
    read_recipe(c, s, done, folder)


def step_ordinal(c: Check, s: StepResult) -> None:
    """One process more than GPUs: refused by the plan against the real nvidia-smi (the plan
    step), so forced here with a stand-in nvidia-smi that lists one GPU more; the script does
    what most scripts do first, ``torch.cuda.set_device(LOCAL_RANK)``."""
    gpus = c.device.get("devices") or 1
    env = c.standin(gpus + 1)
    plan = c.meshrun("plan", "--json", timeout=60, env=env, label="forced-plan", split=True)
    data = plan.json() or {}
    s.figures["forced_plan"] = {k: data.get(k) for k in ("nproc_per_node", "visible_devices",
                                                         "device", "backend")}
    s.check(f"the stand-in nvidia-smi makes a plan of {gpus + 1} processes on GPUs "
            f"0-{gpus}", data.get("nproc_per_node") == gpus + 1
            and data.get("visible_devices") == [str(i) for i in range(gpus + 1)],
            s.figures["forced_plan"])
    if c.mode == "dry-run":
        s.figures["outcome"] = "forced plan checked; the launch needs a GPU (--rehearse runs it)"
        return
    run_id = "gc-ordinal"
    done = c.meshrun("run", "--run-id", run_id, "--log-dir", str(c.work / "logs"), "--",
                     str(THIS), "--worker", "set-device", timeout=120, env=env)
    said = [ln for ln in done.text.splitlines() if "invalid device ordinal" in ln]
    s.figures["outcome"] = (f"exit {done.rc}" + (f": {said[0].strip()[:160]}" if said else ""))
    check = c.diagnose(c.run_dir(run_id), "invalid-device-ordinal")
    s.figures["diagnoses"] = {"run": check}
    s.check("the run failed", done.rc not in (0, None), done.tail())
    if c.gpu:
        s.check("torch said 'invalid device ordinal'", said, done.tail())
        s.check("meshrun diagnose: invalid-device-ordinal, first", check["first"],
                check["codes"])


def step_oom(c: Check, s: StepResult) -> None:
    sets = (*GPU_MLP, f"train.per_device_batch={OOM_BATCH}", "train.steps=2")
    s.figures["sets"] = list(sets)
    done, folder = recipe_run(c, s, "mlp-tp", sets, "gc-oom", timeout=180)
    said = [ln for ln in done.text.splitlines() if "CUDA out of memory" in ln]
    s.figures["outcome"] = f"exit {done.rc}" + (f": {said[0].strip()[:200]}" if said else "")
    check = c.diagnose(folder, "cuda-oom")
    s.figures["diagnoses"] = {"run": check}
    s.check("the run failed with CUDA's out of memory", done.rc != 0 and said, done.tail())
    s.check("meshrun diagnose: cuda-oom, first", check["first"], check["codes"])


def simulate_args(c: Check, run_id: str, sets: tuple[str, ...]) -> list[str]:
    args = ["simulate", "--nodes", "2", "--nproc-per-node", "1", "--run-id", run_id,
            "--log-dir", str(c.work / "logs")]
    for item in sets:
        args += ["--set", item]
    return args


def nccl_env(c: Check, run_id: str) -> dict[str, str]:
    """NCCL's INFO log to files in the run folder (the transport, NCCL_HOSTID, its errors),
    and a process-group timeout of 60 s: a collective that hangs fails within the step."""
    folder = c.run_dir(run_id)
    folder.mkdir(parents=True, exist_ok=True)
    return {**c.env, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,NET",
            "NCCL_DEBUG_FILE": str(folder / "nccl.%h.%p.log"), "MESHRUN_PG_TIMEOUT": "60"}


def nccl_log(folder: Path) -> str:
    text = ""
    for path in sorted(folder.glob("nccl.*.log")):
        text += path.read_text(errors="replace")
    return text


def step_simulate_shared(c: Check, s: StepResult) -> None:
    """Both simulated nodes on the one GPU, as meshrun plans them (each node: its GPU 0)."""
    run_id = "gc-sim-shared"
    sets = c.sets(SIM_MLP, CPU_SIM)
    done = c.meshrun(*simulate_args(c, run_id, sets), "--recipe", "mlp-tp", timeout=150,
                     env=nccl_env(c, run_id))
    if done.timed_out:
        raise TimeoutError(f"no result after {done.seconds:.0f} s")
    text = done.text + nccl_log(c.run_dir(run_id))
    dup = re.search(r"Duplicate GPU detected : rank \d+ and rank \d+ both on CUDA device \w+",
                    text)
    s.figures["outcome"] = (f"exit {done.rc}" + (f": NCCL: {dup.group(0)}" if dup else
                                                 (": trained" if done.rc == 0 else "")))
    s.figures["nccl_said"] = dup.group(0) if dup else None
    if done.rc != 0:
        check = c.diagnose(c.run_dir(run_id), "duplicate-gpu")
        s.figures["diagnoses"] = {"run": check}
        s.check("meshrun diagnose names NCCL's duplicate GPU first", check["first"],
                check["codes"])
    elif c.gpu:
        s.figures["note"] = "NCCL accepted two ranks on one GPU (not what NCCL's source says)"
    if not c.gpu:
        s.check("gloo on the CPU trains", done.rc == 0, done.tail())


def step_simulate_hostid(c: Check, s: StepResult) -> None:
    """The two simulated nodes on one GPU with NCCL_HOSTID set per node by a shim in the
    worker: NCCL then counts two hosts and connects the ranks through its network transport."""
    run_id = "gc-sim-hostid"
    sets = ("recipe=mlp-tp", *c.sets(SIM_MLP, CPU_SIM))
    done = c.meshrun(*simulate_args(c, run_id, sets), "--", str(THIS), "--worker", "hostid",
                     "meshrun.recipes.mlp_tp", timeout=180, env=nccl_env(c, run_id))
    if done.timed_out:
        raise TimeoutError(f"no result after {done.seconds:.0f} s")
    records = _records(c.run_dir(run_id) / "metrics.jsonl")
    s.figures.update(metrics_figures(records))
    log = nccl_log(c.run_dir(run_id))
    from meshrun.worker.collbench import transport_from_nccl_log

    s.figures["transport"] = transport_from_nccl_log(log) if log else "-"
    s.figures["hostid_seen"] = "NCCL_HOSTID set by environment" in log
    s.figures["outcome"] = f"exit {done.rc}"
    s.check("the recipe trained on both simulated nodes", done.rc == 0 and records,
            done.tail())
    if records:
        s.check("the loss fell", records[-1]["loss"] < records[0]["loss"],
                f"{records[0]['loss']} -> {records[-1]['loss']}")
    if c.gpu:
        s.check("NCCL read NCCL_HOSTID", s.figures["hostid_seen"], "not in NCCL's log")
    if done.rc != 0:
        s.figures["diagnoses"] = {"run": c.diagnose(c.run_dir(run_id), "-")}


def step_simulate_bench(c: Check, s: StepResult) -> None:
    run_id = "gc-sim-bench"
    sizes = "1K:64M" if c.gpu else "1K:64K"
    done = c.meshrun(*simulate_args(c, run_id, ()), "--", str(THIS), "--worker", "hostid",
                     "meshrun.worker.collbench", "--sizes", sizes, "--iters", "5",
                     timeout=150, env=nccl_env(c, run_id))
    report = _read_json(c.run_dir(run_id) / "bench.json") or {}
    s.check("the benchmark ran on both simulated nodes", done.rc == 0 and report, done.tail())
    s.figures.update(bench_figures(report))


STEPS: list[tuple[str, set[str], float, float, Callable[[Check, StepResult], None]]] = [
    # name, modes, timeout s, minimum s left to start, body
    ("install", {"gpu", "dry-run", "rehearse"}, 90, 5, step_install),
    ("device", {"gpu", "dry-run", "rehearse"}, 120, 10, step_device),
    ("plan", {"gpu", "dry-run", "rehearse"}, 60, 5, step_plan),
    ("doctor", {"gpu", "dry-run", "rehearse"}, 90, 10, step_doctor),
    ("diagnose-canned", {"gpu", "dry-run", "rehearse"}, 60, 5, step_diagnose_canned),
    ("mlp-tp", {"gpu", "dry-run", "rehearse"}, 180, 45, step_mlp_tp),
    ("mlp-ceiling", {"gpu", "rehearse"}, 120, 20, step_ceiling),
    ("mlp-tp-variants", {"gpu", "rehearse"}, 200, 40, step_variants),
    ("node-check", {"gpu", "rehearse"}, 90, 25, step_node_check),
    ("compute-events", {"gpu", "rehearse"}, 90, 25, step_compute_events),
    ("bench", {"gpu", "rehearse"}, 120, 25, step_bench),
    ("mlp-tp-torchrun", {"gpu", "rehearse"}, 180, 45, step_torchrun),
    ("autoencoder", {"gpu", "rehearse"}, 150, 40, step_autoencoder),
    ("invalid-device-ordinal", {"gpu", "dry-run", "rehearse"}, 120, 25, step_ordinal),
    ("cuda-oom", {"gpu"}, 150, 30, step_oom),
    ("simulate-shared-gpu", {"gpu", "rehearse"}, 100, 30, step_simulate_shared),
    ("simulate-hostid", {"gpu", "rehearse"}, 120, 40, step_simulate_hostid),
    ("simulate-bench-hostid", {"gpu", "rehearse"}, 100, 30, step_simulate_bench),
]
STEP_NAMES = [name for name, *_ in STEPS]


# --- workers (run by the steps above, in processes of their own) -----------------------------------

def worker_probe(argv: list[str]) -> None:
    """torch's view of the device, and its dense bf16 peak from meshrun's table."""
    out: dict[str, Any] = {"cuda": False}
    try:
        import torch

        from meshrun.recipes._loop import peak_flops

        out.update({"torch": torch.__version__, "torch_cuda": torch.version.cuda})
        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            props = torch.cuda.get_device_properties(0)
            nccl = torch.cuda.nccl.version()
            peak = peak_flops(props.name)
            out.update({"cuda": True, "devices": torch.cuda.device_count(), "name": props.name,
                        "capability": f"{props.major}.{props.minor}",
                        "memory_gib": props.total_memory / GIB,
                        "sms": props.multi_processor_count,
                        "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else
                        str(nccl), "bf16": torch.cuda.is_bf16_supported(),
                        "peak_tflops": peak / 1e12 if peak else None,
                        "peak_source": "meshrun.recipes._loop.PEAK_BF16_FLOPS" if peak else
                        "not in the table (set MESHRUN_PEAK_FLOPS)"})
        else:
            out["why"] = "torch.cuda.is_available() is False"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        out["why"] = f"{type(exc).__name__}: {exc}"
    Path(argv[0]).write_text(json.dumps(out, indent=2))


def worker_ceiling(argv: list[str]) -> None:
    """The recipe's MLP, AdamW and clipping in bf16 in one process without FSDP, the batch
    made on the device (fused AdamW on a GPU, as the recipe; bf16 by autocast): at the job's
    shape and at one 4x wider in dim and 4x narrower in hidden (the same parameters and
    FLOPs: how much the shape costs); and the CPU time the recipe's data takes per step."""
    out_path, dim, hidden, depth, batch = argv[0], *map(int, argv[1:5])
    import torch
    from torch import nn

    from meshrun.recipes._loop import count_flops, device_peak
    from meshrun.recipes.mlp_tp import MLP, Teacher, inputs

    cuda = torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES") != ""
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    # the recipe's data: one step's batch made on the CPU, sample by sample, and its teacher
    teacher, took, made = Teacher(0, dim), [], []
    for step in (1, 2, 3):
        began = time.perf_counter()
        x = inputs(0, step, range(batch), dim)
        made.append(time.perf_counter() - began)
        teacher(x)
        took.append(time.perf_counter() - began)
    data_ms = statistics.median(took) * 1000
    inputs_ms = statistics.median(made) * 1000
    torch.zeros(1, device=device)   # CUDA's start-up, outside the copy's time
    sync()
    began = time.perf_counter()
    x.to(device)
    sync()
    h2d_ms = (time.perf_counter() - began) * 1000
    peak, source = device_peak(device, os.environ)

    def measure(dim: int, hidden: int) -> dict[str, Any]:
        torch.manual_seed(0)
        with torch.device(device):
            model = MLP(dim, hidden, depth)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-5, **({"fused": True} if cuda else {}))
        x = torch.randn(batch, dim, device=device)
        y = torch.randn(batch, dim, device=device)
        flops = count_flops(lambda: MLP(dim, hidden, depth), lambda: torch.randn(1, dim),
                            lambda net, v: net(v).float().square().mean())

        def forward_backward() -> None:
            with torch.autocast(device.type, torch.bfloat16):
                loss = nn.functional.mse_loss(model(x).float(), y)
            loss.backward()

        def step() -> None:
            forward_backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

        def fwd_bwd_only() -> None:
            forward_backward()
            opt.zero_grad(set_to_none=True)

        def timed(body: Callable[[], None], n: int) -> float:
            for _ in range(2):
                body()
            sync()
            began = time.perf_counter()
            for _ in range(n):
                body()
            sync()
            return (time.perf_counter() - began) / n

        n = 15 if cuda else 3
        step_s = timed(step, n)
        fwd_bwd_s = timed(fwd_bwd_only, n)
        per_step = flops * batch
        out = {"dim": dim, "hidden": hidden, "depth": depth, "batch": batch,
               "params": sum(p.numel() for p in model.parameters()),
               "flops_per_step": per_step, "step_ms": step_s * 1000,
               "fwd_bwd_ms": fwd_bwd_s * 1000, "optimizer_ms": (step_s - fwd_bwd_s) * 1000,
               "tflops": per_step / step_s / 1e12,
               "mfu": per_step / step_s / peak if peak else None,
               "mfu_fwd_bwd": per_step / fwd_bwd_s / peak if peak else None}
        if cuda:
            out["peak_memory_gib"] = torch.cuda.max_memory_allocated() / GIB
        return out  # the model, optimizer and batch go with this frame

    def release() -> None:
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    out = {"device": str(device), "optimizer": "AdamW fused" if cuda else "AdamW",
           "data_ms": data_ms, "inputs_ms": inputs_ms, "h2d_ms": h2d_ms, "peak_source": source,
           **measure(dim, hidden)}
    release()
    if hidden % 4 == 0:
        out["wide"] = measure(dim * 4, hidden // 4)
        release()
    Path(out_path).write_text(json.dumps(out, indent=2))


def worker_events(argv: list[str]) -> None:
    """Steps of known device work: ``busy`` ms before ``meshrun.arrive()``, ``idle`` ms after
    it, then ``meshrun.progress(step)``, for ``seconds``. Rank 0 writes its own figures to
    ``events_check.json`` in the run's folder."""
    busy_ms, idle_ms, seconds = 20.0, 10.0, 6.0   # 6 s: 6 reports, the first 2 left out
    import torch

    import meshrun

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(10_000_000)
        stop.record()
        stop.synchronize()   # CUDA is initialised from here on: progress() times the device
        cycles_per_ms = 10_000_000 / start.elapsed_time(stop)

        def work(ms: float) -> None:
            torch.cuda._sleep(int(ms * cycles_per_ms))
    else:
        def work(ms: float) -> None:
            end = time.perf_counter() + ms / 1000
            while time.perf_counter() < end:
                pass

    own, host, steps = [], [], []
    finish = time.perf_counter() + seconds
    step = 0
    while time.perf_counter() < finish:
        step += 1
        began = time.perf_counter()
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
        work(busy_ms)
        if cuda:
            b.record()
        meshrun.arrive()
        queued = time.perf_counter()
        work(idle_ms)
        if cuda:
            torch.cuda.synchronize()
            own.append(a.elapsed_time(b))
        else:
            own.append((queued - began) * 1000)
        host.append((queued - began) * 1000)
        steps.append((time.perf_counter() - began) * 1000)
        meshrun.progress(step)
    if os.environ.get("RANK", "0") == "0":
        folder = Path(os.environ.get("MESHRUN_LOG_DIR", "."))
        (folder / "events_check.json").write_text(json.dumps({
            "clock": "CUDA events" if cuda else "host clock (CPU)", "steps": step,
            "busy_ms_asked": busy_ms, "own_busy_ms": statistics.fmean(own[1:]),
            "host_busy_ms": statistics.fmean(host[1:]),
            "own_step_ms": statistics.fmean(steps[1:])}, indent=2))


def worker_set_device(argv: list[str]) -> None:
    """What most training scripts do first: the GPU of LOCAL_RANK, then NCCL."""
    import torch
    import torch.distributed as dist

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    dist.barrier()
    dist.destroy_process_group()


def worker_hostid(argv: list[str]) -> None:
    """``NCCL_HOSTID`` per simulated node (NCCL reads it when its first communicator is made),
    then the module ``argv[0]`` as ``__main__`` with the rest as its arguments."""
    import runpy

    node = os.environ.get("MESHRUN_NODE_RANK") or os.environ.get("GROUP_RANK") or "0"
    os.environ["NCCL_HOSTID"] = f"meshrun-gpu-check-node{node}"
    sys.argv = [argv[0], *argv[1:]]
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


WORKERS: dict[str, Callable[[list[str]], None]] = {
    "probe": worker_probe, "ceiling": worker_ceiling, "events": worker_events,
    "set-device": worker_set_device, "hostid": worker_hostid}


# --- main -----------------------------------------------------------------------------------------

def choose_mode(args: argparse.Namespace) -> tuple[str, str]:
    """(mode, why), quickly and without torch: nvidia-smi says whether a GPU is there."""
    if args.rehearse:
        return "rehearse", "--rehearse: every GPU step on the CPU, tiny sizes; figures mean nothing"
    if args.dry_run:
        return "dry-run", "--dry-run: the CPU path only"
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "dry-run", "no GPU: nvidia-smi is not on PATH; dry run on the CPU"
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30,
                                check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "dry-run", f"no GPU: nvidia-smi -L failed ({exc}); dry run on the CPU"
    gpus = [ln for ln in listed.stdout.splitlines() if ln.startswith("GPU ")]
    if listed.returncode != 0 or not gpus:
        first = (listed.stdout + listed.stderr).strip().splitlines()[:1]
        return "dry-run", (f"no GPU: nvidia-smi -L lists none (exit {listed.returncode}"
                           f"{': ' + first[0] if first else ''}); dry run on the CPU")
    return "gpu", f"GPU: {gpus[0]}" + (f" (+{len(gpus) - 1} more)" if len(gpus) > 1 else "")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        WORKERS[argv[1]](argv[2:])
        return 0
    parser = argparse.ArgumentParser(
        prog="gpu_check", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="", metavar="DIR",
                        help="where gpu_check.json, gpu_check.txt and gpu_check_logs.tar.gz go "
                             "(default: $OUT, else ./gpu-check-out)")
    parser.add_argument("--deadline", type=float, default=480.0, metavar="SECONDS",
                        help="the whole run ends within this (default 480)")
    parser.add_argument("--dry-run", action="store_true",
                        help="the CPU path only, even on a GPU machine")
    parser.add_argument("--rehearse", action="store_true",
                        help="every GPU step on the CPU with tiny sizes (checks the script)")
    parser.add_argument("--steps", default="", metavar="A,B",
                        help="run only these steps (install, device and plan always run)")
    parser.add_argument("--skip", default="", metavar="A,B", help="leave these steps out")
    parser.add_argument("--work", default="", metavar="DIR",
                        help="scratch folder for the runs (default: a new temporary one)")
    parser.add_argument("--list", action="store_true", help="list the steps and exit")
    parser.add_argument("--markdown", default="", metavar="JSON",
                        help="print docs/benchmarks.md's GPU rows from a gpu_check.json, run "
                             "nothing")
    args = parser.parse_args(argv)
    if args.list:
        for name, modes, timeout, _, _ in STEPS:
            print(f"{name:<24} {','.join(sorted(modes)):<24} up to {timeout:.0f} s")
        return 0
    if args.markdown:
        print(markdown_rows(json.loads(Path(args.markdown).read_text())), end="")
        return 0
    chosen = [s for s in args.steps.split(",") if s]
    skipped = [s for s in args.skip.split(",") if s]
    unknown = [s for s in chosen + skipped if s not in STEP_NAMES]
    if unknown:
        parser.error(f"unknown step(s) {', '.join(unknown)}; steps: {', '.join(STEP_NAMES)}")
    selected = []
    if chosen or skipped:
        selected = [n for n in STEP_NAMES if (not chosen or n in chosen or
                                               n in ("install", "device", "plan"))
                    and n not in skipped]
    mode, why = choose_mode(args)
    print(why, flush=True)
    out = Path(args.out or os.environ.get("OUT") or "gpu-check-out").resolve()
    work = Path(args.work).resolve() if args.work else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    check = Check(mode, why, out, work, args.deadline, selected)

    def stop(signum: int, _frame: Any) -> None:
        check.stop_active()
        check.result["interrupted"] = signal.Signals(signum).name
        check.save()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    print(f"gpu_check: results in {out}, scratch in {work}, deadline {args.deadline:.0f} s",
          flush=True)
    steps = [(name, modes, timeout, minimum, (lambda s, b=body: b(check, s)))
             for name, modes, timeout, minimum, body in STEPS]
    code = check.run(steps)
    print(summary_text(check.result), end="", flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())

"""``meshrun render deepspeed``: a DeepSpeed ZeRO-3 JSON consistent with the plan and the job.

    meshrun render deepspeed --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 -o ds_zero3.json

What goes in
------------
- ``zero_optimization``: seed 004's ZeRO-3 block as it stands (stage 3, overlap_comm,
  contiguous_gradients, 5e8 buckets, 1e6 persistence threshold, 1e9 live parameters and
  reuse distance), written as integers.
- the batch fields, by DeepSpeed's rule ``train_batch_size = train_micro_batch_size_per_gpu
  x gradient_accumulation_steps x world size``, where DeepSpeed's world size is the
  data-parallel size ``dp = world_size / parallel.tp``. From the job config
  (``train.per_device_batch``, ``train.grad_accum``, ``effective_batch``), else seed 004's
  ``1 x 8 GPUs x 2 nodes x 8 = 128`` shape: per-device batch 1, accumulation 8.
- ``gradient_clipping``: ``train.grad_clip``, 0 (off) included, since DeepSpeed's own
  default is 1.0; without a job config 1.0, HF Trainer's ``max_grad_norm`` default.
- ``bf16.enabled``: ``parallel.mixed_precision`` (auto: bf16 on GPUs, fp32 on CPU).

No optimizer or scheduler section: HF Trainer and accelerate then use the script's own
(DeepSpeed's ZeRO-3 accepts a client optimizer), so the learning rate lives in one place.

JSON has no comments, so the file's header is a top-level ``"_meshrun"`` object
(``generated_by``, ``regenerate``, ``batch`` with the arithmetic); DeepSpeed, accelerate
and HF Trainer read only the keys they know.

The file is the same on every node (nothing in it depends on the node rank).
:func:`check_deepspeed_config` checks a file the user brings (``meshrun run --deepspeed
FILE``) against the plan: a config written for 8 GPUs used on 16 stops with the arithmetic
before anything starts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import UsageError
from ..plan import LaunchPlan
from . import TrainNumbers, count, generated_by, regenerate_command, train_numbers

# Seed 004 ("scripts/zero3.json 已优化"), its values as given.
ZERO3_SEED_004: Mapping[str, Any] = {
    "stage": 3,
    "overlap_comm": True,                          # overlap compute and communication
    "contiguous_gradients": True,
    "reduce_bucket_size": 500_000_000,             # 5e8: 500 MB, suits IB
    "stage3_prefetch_bucket_size": 500_000_000,    # 5e8
    "stage3_param_persistence_threshold": 1_000_000,   # 1e6
    "stage3_max_live_parameters": 1_000_000_000,   # 1e9
    "stage3_max_reuse_distance": 1_000_000_000,    # 1e9
}


def deepspeed_config(plan: LaunchPlan, job: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The DeepSpeed config as a dict, without the ``_meshrun`` header."""
    nums = train_numbers(plan, job)
    config: dict[str, Any] = {
        "train_batch_size": nums.effective_batch,
        "train_micro_batch_size_per_gpu": nums.per_device_batch,
        "gradient_accumulation_steps": nums.grad_accum,
    }
    config["gradient_clipping"] = nums.grad_clip  # written even when 0: DeepSpeed's default is 1.0
    config["bf16"] = {"enabled": nums.precision == "bf16"}
    config["zero_optimization"] = dict(ZERO3_SEED_004)
    return config


def render_deepspeed(plan: LaunchPlan, job: Mapping[str, Any] | None = None, *,
                     command: str | None = None) -> str:
    """The DeepSpeed ZeRO-3 JSON for ``plan`` (and ``job``), headed by ``"_meshrun"``.

    ``command`` is the line that regenerates the file (default: :func:`regenerate_command`).
    """
    nums = train_numbers(plan, job)
    header = {
        "generated_by": generated_by(plan),
        "regenerate": command or regenerate_command("deepspeed", plan),
        "batch": (f"train_batch_size {nums.effective_batch} = train_micro_batch_size_per_gpu "
                  f"{nums.per_device_batch} x gradient_accumulation_steps {nums.grad_accum} x "
                  f"data-parallel size {nums.dp} ({_world(plan)} / tp {nums.tp}); values from the "
                  f"{nums.origin}"),
        "precision": nums.precision_reason,
    }
    return json.dumps({"_meshrun": header, **deepspeed_config(plan, job)}, indent=2) + "\n"


def check_deepspeed_config(config: Mapping[str, Any], plan: LaunchPlan,
                           job: Mapping[str, Any] | None = None, *,
                           source: str = "the DeepSpeed config") -> TrainNumbers:
    """Check a DeepSpeed config against the plan (and the job); return the job's numbers.

    Values written ``"auto"`` (HF Trainer / accelerate fill them in) are not checked.
    Raises :class:`UsageError` naming ``source`` with the arithmetic when DeepSpeed's
    batch rule cannot hold on this world size, or when the file's batch fields or precision
    differ from the job config's.
    """
    nums = train_numbers(plan, job)
    dp_text = f"data-parallel size {nums.dp} ({_world(plan)} / tp {nums.tp})"
    fields = {}
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu",
                "gradient_accumulation_steps"):
        value = config.get(key)
        if value is None or value == "auto":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{source}: {key} is {value!r}", subject=source,
                             hint=f"make {key} a positive integer or \"auto\"",
                             code="deepspeed-config-bad")
        fields[key] = value
    tb, mb, ga = (fields.get("train_batch_size"), fields.get("train_micro_batch_size_per_gpu"),
                  fields.get("gradient_accumulation_steps"))
    fix = f"regenerate it for this plan: {regenerate_command('deepspeed', plan)}"
    if tb is not None and mb is not None and ga is not None and tb != mb * ga * nums.dp:
        raise UsageError(
            f"{source}: train_batch_size {tb} is not train_micro_batch_size_per_gpu {mb} x "
            f"gradient_accumulation_steps {ga} x {dp_text} = {mb * ga * nums.dp}",
            subject=source, hint=fix, code="deepspeed-config-mismatch")
    if tb is not None and tb % nums.dp:
        raise UsageError(f"{source}: train_batch_size {tb} is not divisible by the {dp_text}",
                         subject=source, hint=fix, code="deepspeed-config-mismatch")
    if job is not None:
        wanted = {"train_micro_batch_size_per_gpu": ("train.per_device_batch",
                                                     nums.per_device_batch),
                  "gradient_accumulation_steps": ("train.grad_accum", nums.grad_accum),
                  "train_batch_size": ("effective_batch", nums.effective_batch)}
        for key, (job_key, value) in wanted.items():
            if key in fields and fields[key] != value:
                raise UsageError(f"{source}: {key} is {fields[key]} but the job config's "
                                 f"{job_key} is {value} ({nums.arithmetic()})",
                                 subject=source, hint=fix + ' (or write "auto" there)',
                                 code="deepspeed-config-mismatch")
        bf16 = config.get("bf16", {})
        enabled = bf16.get("enabled") if isinstance(bf16, Mapping) else None
        if isinstance(enabled, bool) and enabled != (nums.precision == "bf16"):
            raise UsageError(f"{source}: bf16.enabled is {str(enabled).lower()} but the job "
                             f"config resolves to {nums.precision} ({nums.precision_reason})",
                             subject=source, hint=fix, code="deepspeed-config-mismatch")
    return nums


def _world(plan: LaunchPlan) -> str:
    return f"{count(plan.nnodes, 'node')} x {count(plan.nproc_per_node, 'process')}"

"""The training loop both recipes share: schedule, accumulation, clipping, metrics, checkpoints.

A recipe builds its sharded model and hands the loop a :class:`Workload`;
:func:`train` then runs steps ``start+1 .. steps`` (or ``stop_after``):

1. resume from the newest complete checkpoint under ``checkpoint.dir``
   (when ``checkpoint.interval > 0``), printing ``resumed from step N (path)``;
2. each step: set the LR from the schedule (a pure function of the step, so
   nothing but the step needs saving), run ``grad_accum`` micro-batches
   (FSDP2 gradient sync only on the last one; each made on the host by the
   recipe and moved to the device, on a GPU made ahead on a thread of its own:
   :class:`Feed`), clip, step the optimizer, all-reduce the loss;
3. check the all-reduced loss (and gradient norm): the first that is not
   finite stops every rank at that step with one line, ``meshrun: error: the
   loss is nan at step 10 (lr 0.00299) ...; fix: lower train.lr ...
   [loss-not-finite]``, and exit 1 (the value is the same on every rank, so no
   rank is left waiting in a collective). On a GPU step s's values are read
   back after step s+1 is queued (the device never waits for the host), except
   at the steps below, which read their own;
4. every ``log_every`` steps (and the first and last): rank 0 prints the
   recipe's line and appends one JSON object to ``<log dir>/metrics.jsonl``
   (and TensorBoard scalars under ``<log dir>/tensorboard`` when the
   ``tensorboard`` package is installed);
5. every ``checkpoint.interval`` steps, and at the last step run: save
   ``step-N`` (see :mod:`meshrun.worker.checkpoint`).

Metrics (one JSON object per logged step)::

    {"step": 20, "loss": 0.0123, "lr": 0.0029, "step_time_s": 0.081,
     "samples_per_s": 790.1, "psnr": 24.1, "peak_memory_gib": 12.5, "mfu": 0.31}

``loss`` is that step's loss averaged over all ranks (full precision, so two
runs can be compared exactly); ``step_time_s`` the mean over the steps since
the previous record, leaving out the run's first step (start-up, lazy init)
unless it is the only one, in which case the record has ``"first_step": true``;
``samples_per_s`` = samples per step (all ranks) / ``step_time_s``; on a GPU,
``peak_memory_gib``: the most memory rank 0's tensors held on its GPU so far
(``torch.cuda.max_memory_allocated``, GiB); ``mfu``
= model FLOPs per step / step time / (world size x the device's dense bf16
peak), with the FLOPs counted once by ``torch.utils.flop_counter`` on the
meta device. The peak comes from ``MESHRUN_PEAK_FLOPS`` (FLOP/s per device,
e.g. ``989e12``) when set — for a GPU missing from :data:`PEAK_BF16_FLOPS`, or
to report MFU on a CPU — else from the table by the CUDA device name; with
neither, records carry no ``mfu``. A resumed run appends to the same file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from ..errors import MeshrunError, UsageError
from ..job import ENV_VAR, JobConfig, run_id_of
from ..worker import checkpoint as ckpt
from ..worker.dist import RankInfo
from ..worker.progress import arrive, progress
from . import parse_peak_flops
from ._step import Feed, Readback, clip_grad_norm, not_finite

# Dense bf16 tensor-core peak per GPU, FLOP/s, matched against the CUDA device name
# (first match wins, so the specific names come first).
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("GB200", 2.5e15), ("B200", 2.25e15), ("H100 PCIe", 756e12), ("H100 NVL", 835e12),
    ("H200", 989e12), ("H100", 989e12), ("H800", 989e12), ("H20", 148e12),
    ("A100", 312e12), ("A800", 312e12), ("L40S", 362e12), ("L40", 181e12), ("L4", 121e12),
    ("A10G", 70e12), ("A10", 125e12),
)


def peak_flops(device_name: str) -> float | None:
    """The dense bf16 peak of a GPU from its name, or None when it is not in the table."""
    for key, flops in PEAK_BF16_FLOPS:
        if key.lower() in device_name.lower():
            return flops
    return None


def device_peak(device: torch.device, env: Mapping[str, str]) -> tuple[float | None, str]:
    """The dense bf16 peak FLOP/s of one device for the MFU, and where it came from.

    ``MESHRUN_PEAK_FLOPS`` wins (a positive number, else a :class:`UsageError`
    naming it); then the table by CUDA device name; a CPU, or a GPU not in the
    table, gives ``(None, why)``.
    """
    raw = env.get("MESHRUN_PEAK_FLOPS", "").strip()
    value = parse_peak_flops(raw)
    if value is not None:
        return value, f"MESHRUN_PEAK_FLOPS={raw}"
    if device.type != "cuda":
        return None, "no MFU on a CPU unless MESHRUN_PEAK_FLOPS is set"
    name = torch.cuda.get_device_name(device)
    peak = peak_flops(name)
    if peak is None:
        return None, (f"no bf16 peak known for {name!r}: MFU left out of the metrics "
                      "(set MESHRUN_PEAK_FLOPS to the peak in FLOP/s to have it)")
    return peak, f"{name}, {peak / 1e12:g} TFLOP/s bf16 dense"


def mfu(flops_per_sample: float, samples_per_step: int, step_time_s: float, peak: float,
        devices: int) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over ``devices`` x ``peak``."""
    return flops_per_sample * samples_per_step / step_time_s / (peak * devices)


def memory_fields(device: torch.device) -> dict[str, float]:
    """``{"peak_memory_gib": ...}`` on a GPU: the most memory this process's tensors have
    held on ``device`` so far (``torch.cuda.max_memory_allocated``); nothing on a CPU."""
    if device.type != "cuda":
        return {}
    return {"peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2 ** 30}


def count_flops(build: Callable[[], torch.nn.Module], sample: Callable[[], Any],
                loss: Callable[[torch.nn.Module, Any], torch.Tensor]) -> float:
    """FLOPs of one forward + backward over ``sample()``, counted on the meta device."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = build()
        batch = sample()
    counter = FlopCounterMode(display=False)
    with counter:
        loss(model, batch).backward()
    return float(counter.get_total_flops())


@dataclass
class Workload:
    """What a recipe hands the loop.

    ``batch(step, micro)`` returns this rank's micro-batch of 1-based ``step``, made on
    the host (CPU tensors, or tuples/lists of them: the loop moves them to the device, and
    on a GPU calls it ahead of time on a thread of its own, :class:`Feed`, so it must
    depend on its arguments only); ``loss(model, batch)`` runs the forward pass and
    returns the scalar loss; ``extra(mean_loss)`` adds recipe metrics to a
    record (PSNR); ``line(record)`` formats rank 0's log line;
    ``flops_per_sample`` feeds the MFU; ``model_config`` is saved with each
    checkpoint and must match on resume.
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    batch: Callable[[int, int], Any]
    loss: Callable[[torch.nn.Module, Any], torch.Tensor]
    line: Callable[[dict[str, Any]], str]
    model_config: dict[str, Any]
    extra: Callable[[float], dict[str, float]] = field(default=lambda loss: {})
    flops_per_sample: float | None = None


def say(info: RankInfo, text: str) -> None:
    """Print ``text`` on rank 0."""
    if info.is_main:
        print(text, flush=True)


def guard(main: Callable[[], None]) -> None:
    """Run a recipe's ``main``; a :class:`MeshrunError` ends it with its one line and code.

    Every rank fails the same way on bad config, so only local rank 0 of each
    node prints the line.
    """
    try:
        main()
    except MeshrunError as err:
        from ..worker import failure

        failure.record(err.line(), err.exit_code)  # os._exit below skips the bootstrap's
        if os.environ.get("LOCAL_RANK", "0") == "0":
            print(err.line(), file=sys.stderr, flush=True)
        sys.stdout.flush()
        # Every rank stops on the same error at about the same time: tearing the process
        # group down now races the peers' teardown (gloo's threads end in std::terminate,
        # SIGABRT, now and then). Nothing is left to save: leave without destructors.
        os._exit(err.exit_code)


def describe_run(job: JobConfig) -> str:
    """One line for the start of a run."""
    t, p = job.train, job.parallel
    origin = ENV_VAR if job.config_path == ENV_VAR or ENV_VAR in os.environ else "defaults"
    return (f"{job.recipe}: world {job.world_size} = dp {job.dp} x tp {p.tp}, "
            f"{t.steps} steps x {job.effective_batch} samples "
            f"({t.per_device_batch}/device x {t.grad_accum} accum x {job.dp} dp), "
            f"lr {t.lr:g} {t.schedule}, {t.optimizer}, config from {origin}")


def load_job(recipe: str) -> JobConfig:
    """This worker's job config (:func:`meshrun.job.for_worker`), after the variables the
    recipe reads are checked (a bad MESHRUN_PEAK_FLOPS is one line before anything else)."""
    from ..job import for_worker
    from ..worker.dist import read_env

    parse_peak_flops(os.environ.get("MESHRUN_PEAK_FLOPS", ""))
    ranks = read_env(os.environ)
    return for_worker(recipe, os.environ, ranks.world_size,
                      nproc_per_node=ranks.local_world_size, nnodes=ranks.nnodes)


def optimizer(params: Any, job: JobConfig,
              device: torch.device | None = None) -> torch.optim.Optimizer:
    """The configured optimizer (the LR is set per step by the schedule), with the kernels
    ``train.optimizer_impl`` resolves to on ``device``: on a GPU by default ``fused`` (one
    kernel for every parameter's update: AdamW over ~1 G parameters is memory-bound, and
    the per-operation passes of ``foreach`` cost several times more), on a CPU torch's own
    choice (unchanged numerics)."""
    t = job.train
    kernels = t.optimizer_kernels(device.type if device is not None else "cpu")
    options: dict[str, bool] = {}
    if kernels == "fused":
        options["fused"] = True
    elif kernels != "default":
        options["foreach"] = kernels == "foreach"
    if t.optimizer == "sgd":
        return torch.optim.SGD(params, lr=t.lr, momentum=t.momentum,
                               weight_decay=t.weight_decay, **options)
    return torch.optim.AdamW(params, lr=t.lr, betas=t.betas, weight_decay=t.weight_decay,
                             **options)


def mixed_precision_policy(job: JobConfig, device: torch.device) -> Any:
    """FSDP2's ``MixedPrecisionPolicy`` for ``fully_shard(..., mp_policy=...)`` when bf16 is
    applied through the parameters (``parallel.bf16_mode`` params; auto on a GPU): each
    all-gather casts the fp32 shards to bf16 once, compute runs on those copies, gradients are
    reduced in fp32 into the fp32 shards the optimizer updates (fp32 master weights). None
    otherwise (fp32, or bf16 by autocast)."""
    if job.parallel.bf16_how(device.type) != "params":
        return None
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def autocast(job: JobConfig, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast when bf16 is applied by autocast (``parallel.bf16_mode`` autocast; auto
    on a CPU); else nothing (fp32, or bf16 parameters: :func:`mixed_precision_policy`)."""
    if job.parallel.bf16_how(device.type) == "autocast":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def precision_name(job: JobConfig, device: torch.device) -> str:
    how = job.parallel.bf16_how(device.type)
    if how == "autocast":
        return "bf16 autocast"
    if how == "params":
        return "bf16 parameters (FSDP2 mixed precision, fp32 master weights)"
    return "fp32"


def kernels_line(job: JobConfig, device: torch.device) -> str:
    """What runs each step, for the start of a run: the optimizer's kernels and where the
    batches are made."""
    t = job.train
    kernels = t.optimizer_kernels(device.type)
    made = ("ahead, on a thread (train.prefetch)" if t.prefetching(device.type)
            else "in the loop")
    return (f"optimizer: {t.optimizer}"
            + ("" if kernels == "default" else f" ({kernels})") + f"; batches made {made}")


class MetricsLog:
    """metrics.jsonl (+ TensorBoard when installed), written on rank 0 only."""

    def __init__(self, log_dir: str, enabled: bool) -> None:
        self.path = os.path.join(log_dir, "metrics.jsonl")
        self._file = None
        self._tb = None
        if not enabled:
            return
        os.makedirs(log_dir, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # the tensorboard package is optional
            return
        self._tb = SummaryWriter(os.path.join(log_dir, "tensorboard"))

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) \
                        and not isinstance(value, bool):
                    self._tb.add_scalar(key, value, record["step"])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._tb is not None:
            self._tb.close()


def train(job: JobConfig, info: RankInfo, work: Workload) -> list[dict[str, Any]]:
    """Run the job's steps on ``work``; returns rank 0's records (empty elsewhere)."""
    t, c = job.train, job.checkpoint
    last = min(t.steps, t.stop_after) if t.stop_after else t.steps
    model, opt = work.model, work.optimizer
    peak, source = device_peak(info.device, os.environ)
    for note in job.warnings:
        say(info, f"note: {note}")
    say(info, describe_run(job))
    say(info, kernels_line(job, info.device))
    if peak is not None and work.flops_per_sample:
        say(info, f"MFU against {source}")
    elif info.device.type == "cuda":
        say(info, f"note: {source}")

    # --- resume -------------------------------------------------------------------------
    start = 0
    template = {"step": 0, "samples_seen": 0, "effective_batch": 0, "recipe": "",
                "model_config": "", "optimizer": ""}
    seen = 0                      # samples trained on before this run's first step
    this_config = json.dumps(work.model_config, sort_keys=True)

    def same_model(saved: dict[str, Any], path: str) -> None:
        was = (saved["recipe"], saved["model_config"], saved["optimizer"])
        now = (job.recipe, this_config, t.optimizer)
        if was != now:
            raise UsageError(
                f"checkpoint {path} is of recipe {was[0]!r}, model {was[1]}, optimizer "
                f"{was[2]}; this run is {now[0]!r}, model {now[1]}, optimizer {now[2]}",
                subject="checkpoint.dir", code="checkpoint-mismatch",
                hint="resume with the settings it was saved with; for a new run with "
                     "these settings, give it its own --run-id (or --checkpoint-dir)")

    if c.interval:
        if info.nnodes > 1:
            ckpt.check_shared(c.dir)
        found = ckpt.resume(c.dir, model, opt, template, check=same_model,
                            say=lambda s: say(info, s))
        if found is not None:
            start, saved = found
            seen = saved["samples_seen"]
            if saved["effective_batch"] != job.effective_batch:
                say(info, f"note: the checkpoint was trained on {saved['effective_batch']} "
                          f"samples per step, this run uses {job.effective_batch}; the LR "
                          "schedule continues by step")
    else:
        say(info, "checkpoints off (checkpoint.interval = 0): not resuming, not saving")
    if start >= last:
        say(info, f"nothing to train: step {start} reached, the run ends at step {last}")
        return []

    # --- steps --------------------------------------------------------------------------
    metrics = MetricsLog(os.environ.get("MESHRUN_LOG_DIR") or f"logs/{run_id_of(os.environ)}",
                         info.is_main)
    records: list[dict[str, Any]] = []
    window: list[float] = []          # step times since the last record
    first_step = start + 1
    run_started = time.perf_counter()
    # On a GPU a step's loss is read one step late (queued work keeps the device busy while
    # the host waits for it); on a CPU the values are there when the step ends.
    lagging = info.device.type == "cuda"
    pending: Readback | None = None
    last_good: tuple[int, float] | None = None
    saving_s = 0.0                    # checkpoint saving not yet in a record

    def settle(readback: Readback) -> float:
        """The step's mean loss over the ranks; a loss or norm that is not finite stops
        every rank here, at the same step (the values are the same on every rank)."""
        nonlocal last_good
        loss_sum, norm = readback.read()
        mean = loss_sum / info.world_size
        if not math.isfinite(mean) or (norm is not None and not math.isfinite(norm)):
            raise not_finite(job, readback.step, readback.lr, mean, norm, last_good,
                             bf16=job.parallel.bf16_how(info.device.type) is not None)
        last_good = (readback.step, mean)
        return mean

    feed = Feed(work.batch, first_step, last, t.grad_accum, info.device,
                t.prefetching(info.device.type))
    try:
        for step in range(start + 1, last + 1):
            began = time.perf_counter()
            lr = t.lr_at(step)
            for group in opt.param_groups:
                group["lr"] = lr
            total = torch.zeros((), device=info.device)
            for micro in range(t.grad_accum):
                if hasattr(model, "set_requires_gradient_sync"):  # FSDP2: sync on the last
                    model.set_requires_gradient_sync(micro == t.grad_accum - 1)
                batch = feed.get(step, micro)
                with autocast(job, info.device):
                    loss = work.loss(model, batch) / t.grad_accum
                if micro == 0:
                    arrive()  # own work done; DDP's backward waits for every rank (stragglers)
                loss.backward()
                total += loss.detach().float()
            norm = clip_grad_norm(model, t.grad_clip) if t.grad_clip > 0 else None
            opt.step()
            opt.zero_grad(set_to_none=True)
            dist.all_reduce(total)
            readback = Readback.start(step, lr, total, norm)
            if pending is not None:
                settle(pending)            # the previous step's, read while this one runs
                pending = None
            marked = step == first_step      # start-up and lazy init: reported alone, marked
            logged = marked or step == last or step % t.log_every == 0
            saving = bool(c.interval) and (step % c.interval == 0 or step == last)
            mean_loss = None
            if lagging and not (logged or saving):
                pending = readback
            else:
                mean_loss = settle(readback)     # waits for the device: this step's own
            elapsed = time.perf_counter() - began
            if not marked:
                window.append(elapsed)
            progress(step)  # the watchdog's hang detection (meshrun.runtime.watchdog)

            record: dict[str, Any] | None = None
            if logged:
                step_time = elapsed if marked else sum(window) / len(window)
                record = {
                    "step": step, "loss": mean_loss, "lr": lr, "step_time_s": step_time,
                    "samples_per_s": job.effective_batch / step_time,
                }
                record.update(work.extra(mean_loss))
                record.update(memory_fields(info.device))
                if peak and work.flops_per_sample:
                    record["mfu"] = mfu(work.flops_per_sample, job.effective_batch,
                                        step_time, peak, info.world_size)
                if marked:
                    record["first_step"] = True
                window = []
                if info.is_main:
                    print(work.line({**record, "steps": t.steps}), flush=True)

            if saving:
                saving_at = time.perf_counter()
                path = ckpt.save(c.dir, step, model, opt,
                                 {"step": step,
                                  "samples_seen": seen + (step - start) * job.effective_batch,
                                  "effective_batch": job.effective_batch,
                                  "recipe": job.recipe, "model_config": this_config,
                                  "optimizer": t.optimizer},
                                 keep=c.keep, say=lambda s: say(info, s))
                say(info, f"saved checkpoint {path}")
                saving_s += time.perf_counter() - saving_at
            if record is not None and info.is_main:
                # its end on the wall clock, and the checkpoint saving since the last record
                # (meshrun report's goodput: reports/goodput.py)
                record["at"] = round(time.time(), 3)
                if saving_s:
                    record["checkpoint_s"] = round(saving_s, 4)
                saving_s = 0.0
                records.append(record)
                metrics.write(record)
    finally:
        feed.close()
        metrics.close()
    if t.stop_after and last < t.steps:
        say(info, f"stopped after step {last} of {t.steps} (stop_after / "
                  "MESHRUN_STOP_AFTER_STEP); run the same command without it to resume")
    wall = time.perf_counter() - run_started
    say(info, f"done: steps {first_step}-{last} in {wall:.1f} s")
    return records

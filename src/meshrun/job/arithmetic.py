"""The arithmetic of a job at one world size: data-parallel size, gradient accumulation,
effective batch, learning-rate scaling; each result with the line that derives it. Pure.

    dp              = world_size / parallel.tp         (tensor-parallel ranks share a batch)
    effective batch = per_device_batch x nproc_per_node x nnodes / tp x grad_accum
    lr (linear)     = lr x effective batch / lr_tuned_for_batch
    lr (sqrt)       = lr x sqrt(effective batch / lr_tuned_for_batch)

With ``train.keep_effective_batch = true`` the accumulation is derived instead:
``grad_accum = effective_batch / (per_device_batch x dp)``, which must divide exactly.
Seed 001: 4 x 8 per node x 8 nodes x 1 = 256 at lr 2e-4; at 16 GPUs with grad_accum 2,
128 and (linear) 2e-4 x 128/256 = 1e-4.
"""

from __future__ import annotations

import math

from ..errors import UsageError
from .schema import TrainConfig, num, round_float


def data_parallel(tp: int, world_size: int, nproc: int, nnodes: int, source: dict,
                   warnings: list[str]) -> int:
    if world_size % tp:
        good = [d for d in range(1, world_size + 1) if world_size % d == 0]
        within = [d for d in good if nproc % d == 0]
        raise UsageError(
            f"parallel.tp {tp} ({source.get('parallel.tp')}) does not divide world size "
            f"{world_size} ({nnodes} node{'s' if nnodes != 1 else ''} x {nproc} per node): "
            f"{world_size} / {tp} = "
            f"{world_size / tp:.3g}", subject="parallel.tp",
            hint=f"use a tp that divides {world_size}: "
                 f"{', '.join(map(str, within))} (within a node)"
                 + (f" or {', '.join(map(str, [d for d in good if d not in within]))}"
                    if len(good) > len(within) else ""), code="tp-does-not-divide")
    if tp > 1 and nproc % tp:
        warnings.append(f"parallel.tp {tp} does not divide the {nproc} processes per node: "
                        f"tensor-parallel groups cross nodes and their traffic goes over the "
                        f"network; prefer a tp dividing {nproc}")
    return world_size // tp


def batch(train: TrainConfig, dp: int, tp: int, nproc: int, nnodes: int, source: dict,
           warnings: list[str]) -> tuple[int, int, list[str]]:
    """(grad_accum, effective batch, [grad_accum line, effective batch line])."""
    pdb = train.per_device_batch
    micro = pdb * dp

    def formula(accum: int) -> str:
        return (f"per_device_batch {pdb} x {nproc} per node x {nnodes} nodes / tp {tp} "
                f"x grad_accum {accum} = {micro * accum}")

    if not train.keep_effective_batch:
        effective = micro * train.grad_accum
        if train.effective_batch is not None and train.effective_batch != effective:
            raise UsageError(
                f"train.effective_batch {train.effective_batch} ({source['train.effective_batch']})"
                f" but {formula(train.grad_accum)}", subject="train.effective_batch",
                hint="set train.keep_effective_batch = true to derive grad_accum from it, "
                     "or remove train.effective_batch", code="effective-batch-mismatch")
        return train.grad_accum, effective, [
            f"grad_accum {train.grad_accum} ({source['train.grad_accum']})",
            formula(train.grad_accum)]

    target = train.effective_batch or train.lr_tuned_for_batch
    if target is None:
        raise UsageError("train.keep_effective_batch = true but neither train.effective_batch "
                         "nor train.lr_tuned_for_batch is set", subject="train.effective_batch",
                         hint="set train.effective_batch = N (the batch to keep), e.g. 256",
                         code="keep-batch-without-target")
    what = "effective_batch" if train.effective_batch else "lr_tuned_for_batch"
    if target % micro:
        relation = "is smaller than" if target < micro else "is not a multiple of"
        raise UsageError(
            f"train.{what} {target} {relation} per_device_batch {pdb} x {nproc} per node x "
            f"{nnodes} nodes / tp {tp} = {micro}, so keep_effective_batch cannot derive "
            f"grad_accum = {target} / {micro} = {target / micro:.3g}",
            subject=f"train.{what}", hint=_keep_hint(target, pdb, dp, tp, nproc),
            code="batch-not-divisible")
    accum = target // micro
    if not source["train.grad_accum"].startswith(("default", "recipe")) \
            and train.grad_accum != accum:
        warnings.append(f"train.grad_accum {train.grad_accum} ({source['train.grad_accum']}) "
                        f"ignored: keep_effective_batch derives {accum}")
    source["train.grad_accum"] = "derived (keep_effective_batch)"
    return accum, target, [f"{what} {target} / (per_device_batch {pdb} x dp {dp}) = {accum} "
                           "(keep_effective_batch)", formula(accum)]


def _keep_hint(target: int, pdb: int, dp: int, tp: int, nproc: int) -> str:
    options = []
    if target % dp == 0:
        divisors = [d for d in range(1, target // dp + 1) if (target // dp) % d == 0]
        below = max(d for d in divisors if d <= pdb)
        above = min((d for d in divisors if d >= pdb), default=below)
        near = sorted({below, above})
        options.append(f"train.per_device_batch {' or '.join(map(str, near))} at this size")
    nodes = [n for n in range(1, 257) if (n * nproc) % tp == 0
             and target % (pdb * n * nproc // tp) == 0]
    if nodes:
        options.append(f"{' or '.join(map(str, nodes[:6]))} node{'s' * (nodes[:6] != [1])} "
                       f"of {nproc} (per_device_batch {pdb})")
    if not options:
        return (f"choose train.effective_batch as a multiple of per_device_batch x dp = "
                f"{pdb * dp}, e.g. {pdb * dp * max(1, round(target / (pdb * dp)))}")
    return "use " + "; or ".join(options) + f"; or an effective_batch that is a multiple of " \
                                            f"{pdb * dp}"


def scaled_lr(train: TrainConfig, effective: int) -> tuple[float, str]:
    base, tuned = train.lr, train.lr_tuned_for_batch
    if tuned is None:
        return base, f"lr {num(base)} (not scaled: no lr_tuned_for_batch)"
    if train.lr_scaling == "none":
        return base, f"lr {num(base)} (not scaled: lr_scaling none)"
    if effective == tuned:
        return base, f"lr {num(base)} (not scaled: effective batch {effective} = " \
                     f"lr_tuned_for_batch)"
    if train.lr_scaling == "linear":
        lr = round_float(base * effective / tuned)
        return lr, f"lr {num(base)} x {effective}/{tuned} (linear) = {num(lr)}"
    lr = round_float(base * math.sqrt(effective / tuned))
    return lr, f"lr {num(base)} x sqrt({effective}/{tuned}) (sqrt) = {num(lr)}"



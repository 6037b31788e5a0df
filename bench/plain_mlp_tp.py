"""The mlp-tp job as a plain hand-written loop: the baseline of bench/recipe_overhead.py.

    meshrun simulate --nodes 2 --nproc-per-node 2 --set recipe=mlp-tp \\
        --set checkpoint.interval=0 --set train.grad_clip=0 -- bench/plain_mlp_tp.py
    torchrun --nproc-per-node 4 bench/plain_mlp_tp.py      # the recipe's defaults

What is the same as the recipe ``meshrun.recipes.mlp_tp``: the job config (read from
``MESHRUN_JOB_CONFIG`` through the recipe's own reader, so ``--set`` means the same
thing to both), the model (``mlp_tp.MLP``, seeded alike), the 2-D ``("dp", "tp")``
DeviceMesh, the ``parallelize_module`` plan (``ColwiseParallel`` up,
``RowwiseParallel`` down) and ``fully_shard`` per block and at the root, the
synthetic data (``mlp_tp.inputs`` and ``mlp_tp.Teacher``, the same samples per dp
rank), AdamW/SGD with the same hyper-parameters, the same kernels
(``train.optimizer_impl``: fused on a GPU by default) and the same per-step LR
(``train.lr_at``), bf16 under the same rule (``parallel.bf16_mode``: FSDP2's bf16
parameters on a GPU, autocast on a CPU; the recipe's own helpers decide both).

What it leaves out, i.e. what the benchmark charges to the recipe: the per-step loss
all-reduce, its read-back and the check that it is finite,
``set_requires_gradient_sync`` (called only when ``grad_accum > 1``), the per-step
``perf_counter`` bookkeeping, ``meshrun.progress``,
the metrics records and log lines, checkpoints (none here, whatever the config says)
and the recipe's one-collective gradient clipping: with ``train.grad_clip > 0`` this
loop clips the ordinary way, ``torch.nn.utils.clip_grad_norm_``. Its batches are made in
the loop, whatever ``train.prefetch`` says (the recipe makes them ahead on a GPU).

Timing (rank 0, no barriers): ``perf_counter`` at the end of every step (after
``optimizer.zero_grad``), steps ``1..N``; on a GPU the clock waits for the device
(``torch.cuda.synchronize``) only at the end of step ``--warmup`` and of the last
step, so the total of steps ``warmup+1..N`` is exact and nothing in between is
serialised. After the timed steps the last step's loss is averaged over all ranks
(to compare with the recipe's last metrics record).

Output: rank 0 writes ``{"kind": "plain", "step_end_s": [...], "final_loss": x,
"device": ...}`` to ``--out`` (default ``$MESHRUN_LOG_DIR/bench_steps.json``) and
prints one summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn

from meshrun.job import for_worker
from meshrun.recipes import _loop
from meshrun.recipes.mlp_tp import MLP, Teacher, inputs, model_config


def parallelize(model: MLP, mesh, tp: int, reshard: bool, policy=None) -> MLP:
    """Tensor parallel over mesh["tp"], then FSDP2 over mesh["dp"] (the recipe's plan)."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    if tp > 1:
        plan = {}
        for i in range(len(model.blocks)):
            plan[f"blocks.{i}.up"] = ColwiseParallel()
            plan[f"blocks.{i}.down"] = RowwiseParallel()
        parallelize_module(model, mesh["tp"], plan)
    options = {"reshard_after_forward": reshard}
    if policy is not None:
        options["mp_policy"] = policy
    for block in model.blocks:
        fully_shard(block, mesh=mesh["dp"], **options)
    fully_shard(model, mesh=mesh["dp"], **options)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="", help="where rank 0 writes its step times "
                        "(default: $MESHRUN_LOG_DIR/bench_steps.json)")
    parser.add_argument("--warmup", type=int, default=10,
                        help="on a GPU: synchronise after this step (the timed span's start)")
    args = parser.parse_args()

    # --- setup: config, process group, mesh, model, data, optimizer ---------------------
    world = int(os.environ.get("WORLD_SIZE", "1"))
    job = for_worker("mlp-tp", os.environ, world,
                     nproc_per_node=int(os.environ.get("LOCAL_WORLD_SIZE", str(world))))
    cfg = model_config(job)
    t, tp = job.train, job.parallel.tp
    backend = os.environ.get("MESHRUN_BACKEND") or ("nccl" if torch.cuda.is_available()
                                                    else "gloo")
    if backend != "gloo" and torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend=backend)
    rank = dist.get_rank()

    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (job.dp, tp), mesh_dim_names=("dp", "tp"))
    dp_rank = mesh["dp"].get_local_rank()
    torch.manual_seed(t.seed)
    with torch.device(device):
        model = MLP(cfg["dim"], cfg["hidden"], cfg["depth"])
    model = parallelize(model, mesh, tp, job.parallel.reshard_after_forward,
                        _loop.mixed_precision_policy(job, device))
    teacher = Teacher(t.seed, cfg["dim"])
    opt = _loop.optimizer(model.parameters(), job, device)   # AdamW/SGD, the same kernels
    last = min(t.steps, t.stop_after) if t.stop_after else t.steps

    # --- the loop -----------------------------------------------------------------------
    ends: list[float] = []
    last_losses: list[torch.Tensor] = []
    start = time.perf_counter()
    for step in range(1, last + 1):
        for group in opt.param_groups:
            group["lr"] = t.lr_at(step)
        for micro in range(t.grad_accum):
            if t.grad_accum > 1:
                model.set_requires_gradient_sync(micro == t.grad_accum - 1)
            first = (micro * job.dp + dp_rank) * t.per_device_batch
            x = inputs(t.seed, step, range(first, first + t.per_device_batch), cfg["dim"])
            x, y = x.to(device), teacher(x).to(device)
            with _loop.autocast(job, device):   # bf16 autocast, where bf16 is done so
                loss = nn.functional.mse_loss(model(x).float(), y) / t.grad_accum
            loss.backward()
            if step == last:
                last_losses.append(loss.detach().float())
        if t.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda" and step in (args.warmup, last):
            torch.cuda.synchronize(device)
        ends.append(time.perf_counter() - start)

    # --- after the timed steps: the last loss, averaged like the recipe's record ------------
    total = torch.stack(last_losses).sum()
    dist.all_reduce(total)
    final = total.item() / world
    if rank == 0:
        out = args.out or os.path.join(os.environ.get("MESHRUN_LOG_DIR", "."),
                                       "bench_steps.json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"kind": "plain", "step_end_s": ends, "final_loss": final,
                       "device": str(device), "world_size": world, "tp": tp, "dp": job.dp},
                      f)
        steady = ends[-1] - ends[min(args.warmup, len(ends)) - 1] if len(ends) > args.warmup \
            else ends[-1]
        count = max(1, len(ends) - args.warmup)
        print(f"plain loop: {last} steps, steps {args.warmup + 1}-{last}: "
              f"{steady / count * 1000:.2f} ms/step, last loss {final}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""A small HF accelerate training script that meshrun starts like any torchrun script.

    meshrun simulate --nodes 2 --nproc-per-node 1 --accelerate -- examples/accelerate_train.py
    meshrun run --accelerate -- examples/accelerate_train.py --steps 40   # each node of a job
    accelerate launch --config_file acc.yaml examples/accelerate_train.py
                                  # acc.yaml from `meshrun render accelerate -o acc.yaml`
    python examples/accelerate_train.py                                   # one process

Nothing here knows about meshrun: ``Accelerator()`` reads the torchrun variables meshrun's
workers get (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and the
``ACCELERATE_*`` ones (mixed precision, gradient accumulation, DeepSpeed) that
``accelerate launch`` or ``meshrun run --accelerate`` set; see docs/hf.md. On CPU workers
``ACCELERATE_USE_CPU=true`` is what makes the processes train together: without it
``Accelerator()`` on a host without GPUs says ``num_processes == 1`` in every process.

The job: fit a small MLP to a fixed random linear teacher (y = x @ w + noise). The
dataset is the same on every process; ``accelerator.prepare`` gives each process its own
shard of every global batch, and gradients are averaged over all processes. The main
process prints the loss averaged over processes; every process prints one ``REPORT``
JSON line at the end (tests read it).
"""

import argparse
import json
import os

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps")
    parser.add_argument("--batch", type=int, default=16, help="samples per process per step")
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    # --- set-up: everything distributed comes from the environment
    accelerator = Accelerator()
    world, accum = accelerator.num_processes, accelerator.gradient_accumulation_steps
    say = print if accelerator.is_main_process else (lambda *a, **k: None)  # once per job
    say(f"accelerate: {world} processes ({accelerator.distributed_type.value}), "
        f"device {accelerator.device}, mixed precision {accelerator.mixed_precision}, "
        f"gradient accumulation {accum}", flush=True)

    # --- data: one fixed problem; the dataloader is sharded across processes by prepare()
    gen = torch.Generator().manual_seed(0)
    w_true = torch.randn(16, 1, generator=gen)
    samples = args.steps * accum * args.batch * world   # exactly `steps` optimizer steps
    x = torch.randn(samples, 16, generator=gen)
    y = x @ w_true + 0.01 * torch.randn(samples, 1, generator=gen)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch, shuffle=False)

    torch.manual_seed(0)  # same initial weights everywhere (prepare() also syncs them)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    # --- training: accumulate() skips the gradient sync until the last micro-batch
    losses = []
    model.train()
    for micro, (xb, yb) in enumerate(loader, start=1):
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        if micro % accum == 0:
            step = micro // accum
            mean = accelerator.reduce(loss.detach(), reduction="mean").item()
            losses.append(mean)
            if step == 1 or step % 5 == 0:
                say(f"step {step:3d}/{args.steps} | loss {mean:.4f} "
                    f"| {world} processes x {args.batch} samples x {accum}", flush=True)

    print("REPORT " + json.dumps({
        "rank": accelerator.process_index, "num_processes": world,
        "local_rank": accelerator.local_process_index, "main": accelerator.is_main_process,
        "node_rank": int(os.environ.get("GROUP_RANK", "0")),
        "distributed_type": accelerator.distributed_type.value,
        "mixed_precision": accelerator.mixed_precision, "grad_accum": accum,
        "steps": len(losses), "first_loss": losses[0], "last_loss": losses[-1],
    }), flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()

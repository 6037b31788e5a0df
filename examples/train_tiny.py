"""A tiny data-parallel training job: the demo meshrun runs on two simulated nodes.

    meshrun simulate --nodes 2 --nproc-per-node 2 -- examples/train_tiny.py --steps 30
    torchrun --nproc-per-node 2 examples/train_tiny.py          # works the same under torchrun

Each rank draws its own slice of a fixed synthetic regression problem
(y = x @ w_true + noise), trains a small MLP under DistributedDataParallel
(gloo on CPU, NCCL on GPU) and rank 0 prints the loss averaged over all ranks.
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    # --- distributed set-up: the launcher exported RANK, WORLD_SIZE, MASTER_ADDR, ...
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    print(f"rank {rank}/{world} (local {local_rank}, node {os.environ.get('GROUP_RANK', '?')}) "
          f"on {socket.gethostname()} using {device}", flush=True)

    # --- data: the same problem everywhere, a different slice per rank
    torch.manual_seed(0)
    w_true = torch.randn(16, 1)
    gen = torch.Generator().manual_seed(1000 + rank)

    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(),
                                    torch.nn.Linear(64, 1)).to(device),
                device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)

    # --- training: DDP averages gradients over all ranks every step
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch, 16, generator=gen)
        y = x @ w_true + 0.01 * torch.randn(args.batch, 1, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if rank == 0 and (step == 1 or step % 5 == 0):
            print(f"step {step:3d}/{args.steps} | loss {mean.item() / world:.4f} "
                  f"| {world} ranks x {args.batch} samples", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

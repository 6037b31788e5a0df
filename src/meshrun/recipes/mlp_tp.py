"""Recipe ``mlp-tp``: an MLP, tensor parallel inside FSDP2 data-parallel groups (seed 003).

    meshrun simulate --nodes 2 --nproc-per-node 2 --recipe mlp-tp   # 4 CPU ranks: dp 2 x tp 2
    meshrun run --recipe mlp-tp --set parallel.tp=4    # this node, one rank per GPU
    torchrun --nproc-per-node 4 -m meshrun.recipes.mlp_tp    # the defaults, no meshrun launcher
    python -m meshrun.recipes.mlp_tp                   # one process (tp falls back to 1)

Config: ``MESHRUN_JOB_CONFIG`` or ``meshrun.recipes.MLP_TP_DEFAULTS`` (see
docs/recipes.md); ``model`` = ``{"dim", "hidden", "depth"}``.

Layout. The world is a 2-D DeviceMesh ``("dp", "tp")`` of ``dp x tp`` ranks,
tp varying fastest: rank r is dp rank ``r // tp`` and tp rank ``r % tp``, so a
tp group is ``tp`` consecutive ranks, i.e. on one node whenever tp divides the
processes per node (tensor parallelism talks every layer; keep it on NVLink).

Model. ``depth`` blocks of ``Linear(dim, hidden) -> GELU -> Linear(hidden, dim)``
with a residual around each. Tensor parallel (``parallelize_module``): the first
Linear of each pair is ``ColwiseParallel`` (each tp rank holds hidden/tp output
features), the second ``RowwiseParallel`` (hidden/tp input features; its output
is all-reduced over tp), so one all-reduce per block per pass. Data parallel:
``fully_shard`` over the dp mesh per block and at the root (FSDP2; with
``reshard_after_forward`` the parameters are all-gathered per block and freed
again: ZeRO-3). Every parameter ends up a DTensor on the 2-D mesh.

Data. A fixed random teacher ``y = 1.6 * tanh(x A / sqrt(dim)) B / sqrt(2 dim)``
(A, B drawn from ``seed``) and inputs ``x ~ N(0, I)``: sample i of step s comes
from a generator seeded by (seed, s, i) alone. A step's global batch is samples
``0 .. effective_batch - 1``; micro-batch m of dp rank d takes samples
``(m * dp + d) * per_device_batch ...``; the tp ranks of one dp group see the
same samples. Nothing else is random, so step s is the whole data position.

Output: ``[Rank r] DP rank: d, TP rank: t`` from every rank at start, then on
rank 0 ``Step s/S | Loss: x | LR: ... | ms/step | samples/s`` (``| MFU`` on GPU).
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

from ..job import JobConfig
from ..worker.dist import init_distributed
from . import _loop, _models

RECIPE = "mlp-tp"


# --- data -------------------------------------------------------------------------------

def sample_seed(seed: int, step: int, index: int) -> int:
    """The generator seed of sample ``index`` of ``step``: depends on nothing else."""
    digest = hashlib.blake2b(f"{seed}/{step}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def inputs(seed: int, step: int, indices: range, dim: int) -> torch.Tensor:
    """Samples ``indices`` of ``step``, one row each: row i is ``torch.randn(dim)`` from a
    generator seeded by ``sample_seed(seed, step, i)``, drawn straight into its row of the
    result (``normal_`` is what ``randn`` runs: the same numbers, without a tensor per
    sample and a stack)."""
    out = torch.empty(len(indices), dim)
    gen = torch.Generator()
    for row, i in zip(out.unbind(0), indices):
        gen.manual_seed(sample_seed(seed, step, i))
        row.normal_(generator=gen)
    return out


class Teacher:
    """The fixed random function the MLP learns (same on every rank, from ``seed``)."""

    def __init__(self, seed: int, dim: int) -> None:
        gen = torch.Generator().manual_seed(seed + 7919)
        self.a = torch.randn(dim, 2 * dim, generator=gen)
        self.b = torch.randn(2 * dim, dim, generator=gen)
        self.dim = dim

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(x @ self.a / self.dim ** 0.5)
        return 1.6 * hidden @ self.b / (2 * self.dim) ** 0.5


# --- model ------------------------------------------------------------------------------

class Block(nn.Module):
    """``x + down(gelu(up(x)))``: the pair tensor parallelism splits."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(x)))


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, hidden) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def model_config(job: JobConfig) -> dict[str, int]:
    """``job.model`` checked: positive dims, hidden divisible by tp (:mod:`._models`)."""
    return _models.mlp_tp(job.model, job.parallel.tp)


def parallelize(model: MLP, mesh, job: JobConfig) -> MLP:
    """Tensor parallel over mesh["tp"] (when tp > 1), then FSDP2 over mesh["dp"], with bf16
    parameters for compute when ``parallel.bf16_mode`` resolves to params (on a GPU by
    default: :func:`._loop.mixed_precision_policy`)."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard

    if job.parallel.tp > 1:
        plan = {}
        for i in range(len(model.blocks)):
            plan[f"blocks.{i}.up"] = ColwiseParallel()     # dim -> hidden/tp on each tp rank
            plan[f"blocks.{i}.down"] = RowwiseParallel()   # hidden/tp -> dim, all-reduced
        parallelize_module(model, mesh["tp"], plan)
    options = {"reshard_after_forward": job.parallel.reshard_after_forward}
    policy = _loop.mixed_precision_policy(job, torch.device(mesh.device_type))
    if policy is not None:   # bf16 parameters for compute, fp32 ones in the optimizer
        options["mp_policy"] = policy
    for block in model.blocks:
        fully_shard(block, mesh=mesh["dp"], **options)
    fully_shard(model, mesh=mesh["dp"], **options)
    return model


# --- run --------------------------------------------------------------------------------

def main() -> None:
    from torch.distributed.device_mesh import init_device_mesh

    # Config first: a bad one stops every rank before any process group exists.
    job = _loop.load_job(RECIPE)
    cfg = model_config(job)
    info = init_distributed()
    t, tp = job.train, job.parallel.tp

    mesh = init_device_mesh(info.device.type, (job.dp, tp), mesh_dim_names=("dp", "tp"))
    dp_rank, tp_rank = mesh["dp"].get_local_rank(), mesh["tp"].get_local_rank()
    print(f"[Rank {info.rank}] DP rank: {dp_rank}, TP rank: {tp_rank}", flush=True)

    torch.manual_seed(t.seed)                      # identical initial weights on every rank
    with torch.device(info.device):
        model = MLP(cfg["dim"], cfg["hidden"], cfg["depth"])
    model = parallelize(model, mesh, job)
    teacher = Teacher(t.seed, cfg["dim"])

    def batch(step: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
        """On the CPU; the loop moves it to the device (on a GPU made ahead, on a thread)."""
        first = (micro * job.dp + dp_rank) * t.per_device_batch
        x = inputs(t.seed, step, range(first, first + t.per_device_batch), cfg["dim"])
        return x, teacher(x)

    def loss(net: nn.Module, xy: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = xy
        return nn.functional.mse_loss(net(x).float(), y)

    def line(r: dict) -> str:
        text = (f"Step {r['step']}/{r['steps']} | Loss: {r['loss']:.6f} | LR: {r['lr']:.2e} | "
                f"{r['step_time_s'] * 1000:.1f} ms/step | {r['samples_per_s']:.0f} samples/s")
        return text + (f" | MFU: {r['mfu']:.1%}" if "mfu" in r else "")

    flops = _loop.count_flops(
        lambda: MLP(cfg["dim"], cfg["hidden"], cfg["depth"]),
        lambda: torch.randn(1, cfg["dim"]), lambda net, x: net(x).float().square().mean())
    _loop.say(info, f"model: {sum(p.numel() for p in model.parameters()):,} "
                    f"parameters, {flops:,.0f} FLOPs per sample (fwd+bwd), "
                    f"{_loop.precision_name(job, info.device)}")
    work = _loop.Workload(model=model,
                          optimizer=_loop.optimizer(model.parameters(), job, info.device),
                          batch=batch, loss=loss, line=line, model_config=cfg,
                          flops_per_sample=flops)
    _loop.train(job, info, work)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    _loop.guard(main)

"""Recipe ``autoencoder``: a tiny 3-D conv video autoencoder, FSDP2 (ZeRO-3), PSNR (seeds 000-002).

    meshrun simulate --nodes 2 --nproc-per-node 2 --recipe autoencoder   # 4 CPU ranks
    meshrun run --recipe autoencoder --set train.steps=2000   # this node, one rank per GPU
    torchrun --nproc-per-node 8 -m meshrun.recipes.autoencoder   # the defaults, no meshrun
    python -m meshrun.recipes.autoencoder               # one process

The seeds train TAEHV, a tiny autoencoder for video latents, under DeepSpeed
ZeRO-3 and watch its PSNR; this is the same job in miniature with torch's own
tools. Config: ``MESHRUN_JOB_CONFIG`` or ``meshrun.recipes.AUTOENCODER_DEFAULTS``;
``model`` = ``{"frames", "size", "channels", "latent"}``; ``parallel.tp`` must be 1.

Data. Clips of ``frames`` RGB frames of ``size x size`` pixels in [0, 1]: a dim
background of random tint with one or two bright squares of random colour and
size moving in straight lines, bouncing off the edges. Sample i of step s is
drawn from a generator seeded by (seed, s, i) alone; dp rank d's micro-batch m
takes samples ``(m * world + d) * per_device_batch ...`` of the step.

Model. Encoder: Conv3d 3->C, stride (1,2,2); Conv3d C->C, stride (2,2,2); Conv3d
C->latent 1x1x1, i.e. a latent of ``latent x frames/2 x size/4 x size/4``
(24x fewer numbers than the clip with the defaults). Decoder: the mirror image
with nearest-neighbour upsampling, ending in a sigmoid. Loss: mean squared
error; PSNR = 10 log10(1 / MSE) dB over the whole step's batch.

Sharding. ``fully_shard`` on the encoder, the decoder and the root over all
ranks (FSDP2): each rank stores 1/world of every parameter, gradient and
optimizer state, as ZeRO-3 does; ``parallel.reshard_after_forward = false``
keeps the gathered parameters from forward to backward (ZeRO-2-like, less
communication). ``mixed_precision = auto``: bf16 on GPU (bf16 parameters for compute
through FSDP2's mixed precision, ``parallel.bf16_mode``), fp32 on CPU.

Output: rank 0 prints ``Step s/S | Loss: x | PSNR: y dB | ms/step | samples/s``
(``| MFU`` on GPU); metrics.jsonl records carry ``psnr``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..job import JobConfig
from ..worker.dist import init_distributed
from . import _loop, _models
from .mlp_tp import sample_seed

RECIPE = "autoencoder"


# --- data -------------------------------------------------------------------------------

def _bounce(start: torch.Tensor, velocity: torch.Tensor, t: torch.Tensor,
            span: torch.Tensor) -> torch.Tensor:
    """Positions along a line reflected into [0, span] (a triangle wave)."""
    x = torch.remainder(start + velocity * t, 2 * span)
    return torch.where(x > span, 2 * span - x, x)


def clip(seed: int, step: int, index: int, frames: int, size: int) -> torch.Tensor:
    """One clip, ``[3, frames, size, size]`` in [0, 1], from (seed, step, index) alone."""
    gen = torch.Generator().manual_seed(sample_seed(seed, step, index))

    def uniform(n: int, low: float, high: float) -> torch.Tensor:
        return low + (high - low) * torch.rand(n, generator=gen)

    video = uniform(3, 0.0, 0.2).view(3, 1, 1, 1).expand(3, frames, size, size).clone()
    t = torch.arange(frames, dtype=torch.float32).view(frames, 1, 1)
    grid = torch.arange(size, dtype=torch.float32)
    for _ in range(1 + int(torch.randint(2, (1,), generator=gen))):
        side = float(uniform(1, size / 8, size / 3))
        span = torch.tensor(size - side)
        x0, y0 = uniform(1, 0, float(span)), uniform(1, 0, float(span))
        vx, vy = uniform(1, -size / 10, size / 10), uniform(1, -size / 10, size / 10)
        x, y = _bounce(x0, vx, t, span), _bounce(y0, vy, t, span)     # [frames, 1, 1]
        inside = ((grid.view(1, 1, size) >= x) & (grid.view(1, 1, size) < x + side)
                  & (grid.view(1, size, 1) >= y) & (grid.view(1, size, 1) < y + side))
        colour = uniform(3, 0.5, 1.0).view(3, 1, 1, 1)
        video = torch.where(inside.unsqueeze(0), colour, video)
    return video


# --- model ------------------------------------------------------------------------------

class VideoAutoencoder(nn.Module):
    def __init__(self, channels: int, latent: int) -> None:
        super().__init__()
        c = channels
        self.encoder = nn.Sequential(
            nn.Conv3d(3, c, 3, stride=(1, 2, 2), padding=1), nn.SiLU(),
            nn.Conv3d(c, c, 3, stride=(2, 2, 2), padding=1), nn.SiLU(),
            nn.Conv3d(c, latent, 1))
        self.decoder = nn.Sequential(
            nn.Conv3d(latent, c, 1), nn.SiLU(),
            nn.Upsample(scale_factor=(2, 2, 2)), nn.Conv3d(c, c, 3, padding=1), nn.SiLU(),
            nn.Upsample(scale_factor=(1, 2, 2)), nn.Conv3d(c, 3, 3, padding=1))

    def forward(self, video: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.decoder(self.encoder(video)))


def model_config(job: JobConfig) -> dict[str, int]:
    """``job.model`` checked: frames even, size a multiple of 4, tp 1 (:mod:`._models`)."""
    return _models.autoencoder(job.model, job.parallel.tp)


def shard(model: VideoAutoencoder, mesh, job: JobConfig) -> VideoAutoencoder:
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard

    options = {"reshard_after_forward": job.parallel.reshard_after_forward}
    policy = _loop.mixed_precision_policy(job, torch.device(mesh.device_type))
    if policy is not None:   # bf16 parameters for compute, fp32 ones in the optimizer
        options["mp_policy"] = policy
    fully_shard(model.encoder, mesh=mesh, **options)
    fully_shard(model.decoder, mesh=mesh, **options)
    fully_shard(model, mesh=mesh, **options)
    return model


def psnr(mse: float) -> float:
    """Peak signal-to-noise ratio in dB of pixels in [0, 1]."""
    return 10.0 * math.log10(1.0 / mse) if mse > 0 else float("inf")


# --- run --------------------------------------------------------------------------------

def main() -> None:
    from torch.distributed.device_mesh import init_device_mesh

    job = _loop.load_job(RECIPE)
    cfg = model_config(job)
    info = init_distributed()
    t = job.train

    mesh = init_device_mesh(info.device.type, (job.dp,), mesh_dim_names=("dp",))
    torch.manual_seed(t.seed)
    with torch.device(info.device):
        model = VideoAutoencoder(cfg["channels"], cfg["latent"])
    model = shard(model, mesh, job)
    frames, size = cfg["frames"], cfg["size"]

    def batch(step: int, micro: int) -> torch.Tensor:
        """On the CPU; the loop moves it to the device (on a GPU made ahead, on a thread)."""
        first = (micro * job.dp + info.rank) * t.per_device_batch
        clips = [clip(t.seed, step, i, frames, size)
                 for i in range(first, first + t.per_device_batch)]
        return torch.stack(clips)

    def loss(net: nn.Module, video: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(net(video).float(), video)

    def line(r: dict) -> str:
        text = (f"Step {r['step']}/{r['steps']} | Loss: {r['loss']:.6f} | "
                f"PSNR: {r['psnr']:.2f} dB | {r['step_time_s'] * 1000:.0f} ms/step | "
                f"{r['samples_per_s']:.1f} samples/s")
        return text + (f" | MFU: {r['mfu']:.1%}" if "mfu" in r else "")

    flops = _loop.count_flops(lambda: VideoAutoencoder(cfg["channels"], cfg["latent"]),
                              lambda: torch.rand(1, 3, frames, size, size), loss)
    params = sum(p.numel() for p in model.parameters())  # DTensor: the global size
    _loop.say(info, f"model: {params:,} parameters, {flops:,.0f} FLOPs per clip (fwd+bwd), "
                    f"clips {frames}x{size}x{size}, {_loop.precision_name(job, info.device)}")
    work = _loop.Workload(model=model,
                          optimizer=_loop.optimizer(model.parameters(), job, info.device),
                          batch=batch, loss=loss, line=line, model_config=cfg,
                          extra=lambda mse: {"psnr": psnr(mse)}, flops_per_sample=flops)
    _loop.train(job, info, work)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    _loop.guard(main)

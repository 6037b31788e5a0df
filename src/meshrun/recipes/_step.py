"""What one step of the shared loop (:mod:`._loop`) needs beyond the model: its batches
(:class:`Feed`: made in the loop, or ahead on a thread of its own), the global gradient norm
and its clipping (:func:`clip_grad_norm`: one collective, foreach kernels), and the step's
loss read back from the device (:class:`Readback`: on a GPU one step late, so the device is
never idle while the host waits) with the check that stops a run whose loss is not finite
(:func:`not_finite`: one line, code ``loss-not-finite``, exit 1 on every rank).
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..errors import TrainingError
from ..job import JobConfig


def clip_grad_norm(model: torch.nn.Module, max_norm: float) -> torch.Tensor:
    """Clip the global gradient norm to ``max_norm``; returns the norm before clipping, a
    0-d tensor on the device (nothing here waits for the device).

    With every gradient a DTensor (FSDP2, TP), the squared norm is summed over each
    rank's local shards, divided by how many ranks hold a replica of that shard, and
    all-reduced once over the world: exact and one collective, where DTensor's own
    norm would reduce once per mesh dimension. The local shards' norms and the scaling
    are ``foreach`` kernels over all of them (a handful of launches, not a few per
    parameter, and no squared copy of every gradient).
    """
    try:
        from torch.distributed.tensor import DTensor, Replicate
    except ImportError:  # torch < 2.5
        from torch.distributed._tensor import DTensor, Replicate

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    world = dist.get_world_size()
    if not grads or not all(isinstance(g, DTensor) and g.device_mesh.size() == world
                            for g in grads):
        return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    by_copies: dict[int, list[torch.Tensor]] = {}
    for g in grads:
        copies = 1
        for size, placement in zip(g.device_mesh.shape, g.placements):
            if isinstance(placement, Replicate):
                copies *= size
        by_copies.setdefault(copies, []).append(g.to_local())
    squares = torch.zeros((), device=grads[0].to_local().device, dtype=torch.float32)
    for copies, local in sorted(by_copies.items()):
        norms = torch._foreach_norm(local, 2.0)
        squares = squares + torch.stack(norms).float().square().sum() / copies
    dist.all_reduce(squares)
    norm = squares.sqrt()
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for local in by_copies.values():
        for g in local:
            by_dtype.setdefault(g.dtype, []).append(g)
    for dtype, local in by_dtype.items():
        torch._foreach_mul_(local, scale.to(dtype))
    return norm


def _to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """``batch`` (a tensor, or a tuple/list of them) on ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to_device(b, device, non_blocking) for b in batch)
    return batch


def _pinned(batch: Any) -> Any:
    """``batch``'s tensors in page-locked memory (an asynchronous copy to the GPU)."""
    if isinstance(batch, torch.Tensor):
        return batch.pin_memory()
    if isinstance(batch, (tuple, list)):
        return type(batch)(_pinned(b) for b in batch)
    return batch


class Feed:
    """The micro-batches of the steps ``first..last``, in order, on the device.

    Without ``prefetch`` each is made when asked for (``make(step, micro)``, then moved to
    the device). With it a thread of its own makes them in order up to ``depth``
    micro-batches ahead (while the device works through the queued step) and, on a GPU, in
    page-locked memory, so that the copy to the device is asynchronous. ``make`` is the same
    function either way, so the tensors are the same; it must depend on its arguments only.
    An error in the thread is raised by :meth:`get`.
    """

    def __init__(self, make: Callable[[int, int], Any], first: int, last: int, accum: int,
                 device: torch.device, prefetch: bool, depth: int = 2) -> None:
        self.make, self.device, self.prefetch = make, device, prefetch
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        if prefetch:
            keys = [(step, micro) for step in range(first, last + 1) for micro in range(accum)]
            self._thread = threading.Thread(target=self._produce, args=(keys,),
                                            name="meshrun-feed", daemon=True)
            self._thread.start()

    def _put(self, item: tuple) -> bool:
        while not self._halt.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self, keys: list[tuple[int, int]]) -> None:
        try:
            cuda = self.device.type == "cuda"
            if cuda:
                torch.cuda.set_device(self.device)
            for key in keys:
                batch = self.make(*key)
                if not self._put((key, _pinned(batch) if cuda else batch, None)):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the loop, raised there
            self._put((None, None, exc))

    def get(self, step: int, micro: int) -> Any:
        """Micro-batch ``micro`` of ``step`` on the device."""
        if not self.prefetch:
            return _to_device(self.make(step, micro), self.device)
        while True:
            try:
                key, batch, error = self._queue.get(timeout=1.0)
                break
            except queue.Empty:
                if self._thread is None or not self._thread.is_alive():
                    raise RuntimeError("the batch thread ended without a batch") from None
        if error is not None:
            raise error
        if key != (step, micro):
            raise RuntimeError(f"the batch thread made step {key[0]} micro-batch {key[1]}, "
                               f"the loop wanted step {step} micro-batch {micro}")
        return _to_device(batch, self.device, non_blocking=self.device.type == "cuda")

    def close(self) -> None:
        self._halt.set()
        if self._thread is not None:
            while True:   # unblock a put() in progress
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
            self._thread.join(timeout=5)


@dataclass
class Readback:
    """One step's all-reduced loss sum and gradient norm, copied to the host (on a GPU
    asynchronously, an event marking when they are there)."""

    step: int
    lr: float
    values: torch.Tensor
    event: Any = None

    @classmethod
    def start(cls, step: int, lr: float, total: torch.Tensor,
              norm: torch.Tensor | None) -> Readback:
        values = total.reshape(1) if norm is None else torch.stack((total, norm.float()))
        if values.device.type != "cuda":
            return cls(step, lr, values)
        host = values.to("cpu", non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return cls(step, lr, host, event)

    def read(self) -> tuple[float, float | None]:
        """(loss sum, gradient norm or None), waiting for the device if need be."""
        if self.event is not None:
            self.event.synchronize()
        out = self.values.tolist()
        return out[0], (out[1] if len(out) > 1 else None)


def not_finite(job: JobConfig, step: int, lr: float, loss: float, norm: float | None,
               last_good: tuple[int, float] | None, bf16: bool) -> TrainingError:
    """The error for step ``step``'s loss (mean over ranks) or gradient norm that is not
    finite: one line naming the step, the lr and what to change (``bf16``: the run trains
    in bf16, so an fp32 run tells whether bf16 is the cause)."""
    t = job.train
    if math.isfinite(loss):
        what = f"the gradient norm is {norm} at step {step} (loss {loss:.6g}, lr {lr:.3g})"
    else:
        what = f"the loss is {loss} at step {step} (lr {lr:.3g})"
    before = (f"; the last finite loss was {last_good[1]:.6g} at step {last_good[0]}"
              if last_good else "")
    clip = ("turn gradient clipping on (--set train.grad_clip=1.0)" if t.grad_clip == 0
            else f"clip harder (train.grad_clip is {t.grad_clip:g})")
    lower = job.base_lr / 10
    fp32 = (", and run once with --set parallel.mixed_precision=fp32 to see whether bf16 "
            "is the cause" if bf16 else "")
    return TrainingError(
        f"{what}: training diverged{before}",
        hint=f"lower train.lr (now {job.base_lr:g}: try --set train.lr={lower:g}), "
             f"{clip}{fp32}",
        subject="train.lr", code="loss-not-finite")

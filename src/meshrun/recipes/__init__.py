"""Reference recipes: complete training jobs meshrun can run by name (torch-free registry).

* ``mlp-tp`` (worker module ``meshrun.recipes.mlp_tp``): an MLP regressing a fixed
  random teacher, tensor parallel (``tp``) inside FSDP2 data-parallel groups
  (``dp = world / tp``); seed 003's job.
* ``autoencoder`` (``meshrun.recipes.autoencoder``): a small 3-D conv video
  autoencoder on synthetic moving squares, parameters sharded ZeRO-3 style by
  FSDP2, reporting PSNR; seeds 000-002's job in miniature.

Each recipe runs as a worker module::

    meshrun simulate --nodes 2 --nproc-per-node 2 --recipe mlp-tp    # = -m meshrun.recipes.mlp_tp
    meshrun run --recipe autoencoder --set train.steps=200     # one process per GPU
    torchrun --nproc-per-node 4 -m meshrun.recipes.mlp_tp      # the defaults, no meshrun

A worker reads its resolved job config as JSON from ``MESHRUN_JOB_CONFIG``
(:func:`meshrun.job.for_worker`; the schema is :mod:`meshrun.job.schema`); without it,
the recipe's ``DEFAULTS`` below, resolved the same way, sized to finish in about a minute
on a 2-core CPU with 4 processes. This module never imports torch: the planner reads
:data:`RECIPES` to resolve configs and show them.

Full manual: ``docs/recipes.md``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from . import _models

# The schema every recipe's config follows (see docs/recipes.md for each key).
# "world_size", "dp" and "effective_batch" are derived at run time and absent here.
MLP_TP_DEFAULTS: dict[str, Any] = {
    "recipe": "mlp-tp",
    "train": {
        "steps": 60, "per_device_batch": 32, "grad_accum": 1, "lr": 3e-3,
        "optimizer": "adamw", "weight_decay": 0.0, "warmup_steps": 5, "schedule": "cosine",
        "min_lr_ratio": 0.1, "grad_clip": 1.0, "seed": 0, "log_every": 5,
    },
    "parallel": {"tp": 2, "reshard_after_forward": True, "mixed_precision": "auto"},
    "checkpoint": {"interval": 20, "keep": 2, "dir": ""},
    # dim -> hidden -> dim pairs (column- then row-parallel), `depth` of them.
    "model": {"dim": 64, "hidden": 256, "depth": 2},
}

AUTOENCODER_DEFAULTS: dict[str, Any] = {
    "recipe": "autoencoder",
    "train": {
        "steps": 60, "per_device_batch": 4, "grad_accum": 1, "lr": 3e-3,
        "optimizer": "adamw", "weight_decay": 0.0, "warmup_steps": 4, "schedule": "cosine",
        "min_lr_ratio": 0.1, "grad_clip": 1.0, "seed": 0, "log_every": 5,
    },
    "parallel": {"tp": 1, "reshard_after_forward": True, "mixed_precision": "auto"},
    "checkpoint": {"interval": 20, "keep": 2, "dir": ""},
    # clips of `frames` x `size` x `size` RGB; 4x spatial and 2x temporal compression.
    "model": {"frames": 8, "size": 32, "channels": 16, "latent": 4},
}


@dataclass(frozen=True)
class Recipe:
    """One registered recipe: its name, the module workers run, its defaults, and the
    pure check of its ``model`` settings against a tp size (:mod:`._models`)."""

    name: str
    module: str
    summary: str
    defaults: Mapping[str, Any] = field(repr=False)
    check_model: Callable[[Mapping[str, Any], int], dict[str, int]] = field(
        repr=False, default=lambda model, tp: dict(model))

    def config(self) -> dict[str, Any]:
        """A fresh, mutable copy of the defaults."""
        return copy.deepcopy(dict(self.defaults))


RECIPES: dict[str, Recipe] = {
    "mlp-tp": Recipe("mlp-tp", "meshrun.recipes.mlp_tp",
                     "MLP, tensor parallel within FSDP2 data-parallel groups", MLP_TP_DEFAULTS,
                     _models.mlp_tp),
    "autoencoder": Recipe("autoencoder", "meshrun.recipes.autoencoder",
                          "3-D conv video autoencoder, FSDP2 (ZeRO-3), PSNR",
                          AUTOENCODER_DEFAULTS, _models.autoencoder),
}


def parse_peak_flops(raw: str) -> float | None:
    """``MESHRUN_PEAK_FLOPS``: None when unset or blank, else a positive number of FLOP/s
    (a :class:`UsageError` naming the variable otherwise). Pure: the launcher checks it
    before any worker starts, the training loop uses it."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"MESHRUN_PEAK_FLOPS={raw!r} is not a positive number",
                         subject="MESHRUN_PEAK_FLOPS",
                         hint="give the device's dense bf16 peak in FLOP/s, e.g. "
                              "MESHRUN_PEAK_FLOPS=989e12 for an H100 SXM, or unset it",
                              code="bad-peak-flops")
    return value


def get(name: str) -> Recipe:
    """The recipe called ``name``; a :class:`UsageError` naming the known ones otherwise."""
    try:
        return RECIPES[name]
    except KeyError:
        raise UsageError(f"unknown recipe {name!r}", subject="--recipe",
                         hint=f"use one of: {', '.join(sorted(RECIPES))}",
                         code="unknown-recipe") from None


__all__ = ["AUTOENCODER_DEFAULTS", "MLP_TP_DEFAULTS", "RECIPES", "Recipe", "get",
           "parse_peak_flops"]

"""The recipes' model settings, checked: pure and torch-free, so that ``meshrun plan`` and
``meshrun run`` refuse a bad ``model.*`` (or a tp the model cannot take) with one line and
exit 2 before any worker starts; the workers check the same again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import UsageError


def mlp_tp(model: Mapping[str, Any], tp: int) -> dict[str, int]:
    """``job.model`` checked: positive dims, hidden divisible by tp."""
    m = dict(model)
    unknown = sorted(set(m) - {"dim", "hidden", "depth"})
    if unknown:
        raise UsageError(f"job config model: unknown key(s) {', '.join(unknown)} for mlp-tp",
                         subject="model", hint="mlp-tp takes model.dim, model.hidden, "
                                               "model.depth", code="recipe-model-refused")
    out = {}
    for key in ("dim", "hidden", "depth"):
        value = m.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"job config model.{key}: {value!r} is not a positive integer",
                             subject=f"model.{key}", hint=f"set model.{key} to an integer >= 1",
                             code="recipe-model-refused")
        out[key] = value
    if out["hidden"] % tp:
        raise UsageError(f"job config model.hidden: {out['hidden']} is not divisible by tp "
                         f"{tp}", subject="model.hidden",
                         hint=f"pick a hidden size that is a multiple of {tp}",
                         code="recipe-model-refused")
    return out


def autoencoder(model: Mapping[str, Any], tp: int) -> dict[str, int]:
    """``job.model`` checked: frames even, size a multiple of 4, tp 1."""
    if tp != 1:
        raise UsageError(f"job config parallel.tp: the autoencoder has no tensor parallel "
                         f"layers (tp {tp})", subject="parallel.tp",
                         hint="set parallel.tp = 1 for the autoencoder",
                         code="recipe-model-refused")
    m = dict(model)
    unknown = sorted(set(m) - {"frames", "size", "channels", "latent"})
    if unknown:
        raise UsageError(f"job config model: unknown key(s) {', '.join(unknown)} for "
                         "autoencoder", subject="model",
                         hint="the autoencoder takes model.frames, size, channels, latent",
                         code="recipe-model-refused")
    out = {}
    for key in ("frames", "size", "channels", "latent"):
        value = m.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"job config model.{key}: {value!r} is not a positive integer",
                             subject=f"model.{key}", hint=f"set model.{key} to an integer >= 1",
                             code="recipe-model-refused")
        out[key] = value
    if out["frames"] % 2:
        raise UsageError(f"job config model.frames: {out['frames']} is odd; the encoder "
                         "halves time", subject="model.frames", hint="use an even frame count",
                         code="recipe-model-refused")
    if out["size"] % 4:
        raise UsageError(f"job config model.size: {out['size']} is not a multiple of 4; the "
                         "encoder divides it by 4", subject="model.size",
                         hint=f"use {out['size'] // 4 * 4 or 4} or {out['size'] // 4 * 4 + 4}",
                         code="recipe-model-refused")
    return out

"""A recipe's resolved job config: read, checked, derived. Pure and torch-free.

Source, in order:

1. ``MESHRUN_JOB_CONFIG`` (JSON, written by meshrun's config resolution): its
   sections are laid over the recipe's ``DEFAULTS`` key by key, so a partial
   config works; ``world_size``, ``dp`` and ``effective_batch`` in it are
   checked against this run's world, not trusted;
2. else the recipe's ``DEFAULTS`` with ``dp = world_size / tp`` and no LR
   scaling. Only here, a ``tp`` that does not divide the world (one process
   trying ``tp = 2``) falls back to the largest divisor, with a note.

Overrides from the environment (both also work under a config):

* ``MESHRUN_CHECKPOINT_DIR`` replaces ``checkpoint.dir``;
* ``MESHRUN_STOP_AFTER_STEP=k`` (or ``train.stop_after``) stops cleanly after
  step k, saving a checkpoint there when checkpoints are on, while the LR
  schedule still spans ``train.steps``: a stopped run resumed with the same
  command reaches exactly the losses of an uninterrupted one.

Every problem is a :class:`meshrun.errors.UsageError` naming the key
(``train.lr``) and the fix.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from . import get

OPTIMIZERS = ("adamw", "sgd")
SCHEDULES = ("constant", "cosine", "linear")
PRECISIONS = ("auto", "bf16", "fp32")


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
                              "MESHRUN_PEAK_FLOPS=989e12 for an H100 SXM, or unset it")
    return value


def _fail(key: str, message: str, hint: str) -> UsageError:
    return UsageError(f"job config {key}: {message}", subject=key, hint=hint)


def _int(section: Mapping[str, Any], prefix: str, key: str, minimum: int) -> int:
    value = section[key]
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise _fail(f"{prefix}.{key}", f"{value!r} is not a whole number",
                        f"set {prefix}.{key} to an integer >= {minimum}")
    if value < minimum:
        raise _fail(f"{prefix}.{key}", f"{value} is below {minimum}",
                    f"set {prefix}.{key} to an integer >= {minimum}")
    return value


def _float(section: Mapping[str, Any], prefix: str, key: str, minimum: float,
           maximum: float = math.inf) -> float:
    value = section[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            minimum <= value <= maximum):
        want = (f">= {minimum:g}" if maximum == math.inf
                else f"between {minimum:g} and {maximum:g}")
        raise _fail(f"{prefix}.{key}", f"{value!r} is not a number {want}",
                    f"set {prefix}.{key} to a number {want}")
    return float(value)


def _choice(section: Mapping[str, Any], prefix: str, key: str, options: tuple[str, ...]) -> str:
    value = section[key]
    if value not in options:
        raise _fail(f"{prefix}.{key}", f"{value!r} is not one of {', '.join(options)}",
                    f"set {prefix}.{key} to one of {', '.join(options)}")
    return value


def _betas(value: Any) -> tuple[float, float]:
    if (isinstance(value, (list, tuple)) and len(value) == 2
            and all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1
                    for b in value)):
        return (float(value[0]), float(value[1]))
    raise _fail("train.betas", f"{value!r} is not two numbers in [0, 1)",
                "set train.betas to e.g. [0.9, 0.999]")


@dataclass(frozen=True)
class Train:
    steps: int
    per_device_batch: int
    grad_accum: int
    lr: float
    optimizer: str
    weight_decay: float
    warmup_steps: int
    schedule: str
    min_lr_ratio: float
    grad_clip: float
    seed: int
    log_every: int
    stop_after: int = 0          # 0: run all `steps`
    betas: tuple[float, float] = (0.9, 0.999)   # AdamW
    momentum: float = 0.9                      # SGD

    @classmethod
    def parse(cls, s: Mapping[str, Any]) -> Train:
        p = "train"
        return cls(steps=_int(s, p, "steps", 1),
                   per_device_batch=_int(s, p, "per_device_batch", 1),
                   grad_accum=_int(s, p, "grad_accum", 1), lr=_float(s, p, "lr", 0.0),
                   optimizer=_choice(s, p, "optimizer", OPTIMIZERS),
                   weight_decay=_float(s, p, "weight_decay", 0.0),
                   warmup_steps=_int(s, p, "warmup_steps", 0),
                   schedule=_choice(s, p, "schedule", SCHEDULES),
                   min_lr_ratio=_float(s, p, "min_lr_ratio", 0.0, 1.0),
                   grad_clip=_float(s, p, "grad_clip", 0.0), seed=_int(s, p, "seed", 0),
                   log_every=_int(s, p, "log_every", 1),
                   stop_after=_int(s, p, "stop_after", 0) if "stop_after" in s else 0,
                   betas=_betas(s["betas"]) if "betas" in s else (0.9, 0.999),
                   momentum=_float(s, p, "momentum", 0.0, 1.0) if "momentum" in s else 0.9)

    def lr_at(self, step: int) -> float:
        """The learning rate of 1-based ``step``: linear warmup, then the schedule to
        ``lr * min_lr_ratio`` at ``steps`` (always the full run, never ``stop_after``)."""
        if self.warmup_steps and step <= self.warmup_steps:
            return self.lr * step / self.warmup_steps
        span = max(1, self.steps - self.warmup_steps)
        done = min(1.0, max(0.0, (step - self.warmup_steps) / span))
        floor = self.min_lr_ratio
        if self.schedule == "constant":
            return self.lr
        if self.schedule == "linear":
            return self.lr * (1.0 - (1.0 - floor) * done)
        return self.lr * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * done)))


@dataclass(frozen=True)
class Parallel:
    tp: int
    reshard_after_forward: bool
    mixed_precision: str

    @classmethod
    def parse(cls, s: Mapping[str, Any]) -> Parallel:
        raf = s["reshard_after_forward"]
        if not isinstance(raf, bool):
            raise _fail("parallel.reshard_after_forward", f"{raf!r} is not true or false",
                        "set parallel.reshard_after_forward to true (ZeRO-3) or false (ZeRO-2)")
        return cls(tp=_int(s, "parallel", "tp", 1), reshard_after_forward=raf,
                   mixed_precision=_choice(s, "parallel", "mixed_precision", PRECISIONS))


@dataclass(frozen=True)
class Checkpoint:
    interval: int                # save every N steps (and at the last step); 0: off
    keep: int                    # newest complete checkpoints kept (>= 2)
    dir: str                     # resolved: never empty

    @classmethod
    def parse(cls, s: Mapping[str, Any], env: Mapping[str, str]) -> Checkpoint:
        directory = env.get("MESHRUN_CHECKPOINT_DIR") or s["dir"]
        if not isinstance(directory, str):
            raise _fail("checkpoint.dir", f"{directory!r} is not a path",
                        "set checkpoint.dir to a folder (\"\" = checkpoints/<run-id>)")
        return cls(interval=_int(s, "checkpoint", "interval", 0),
                   keep=_int(s, "checkpoint", "keep", 2),
                   dir=directory or f"checkpoints/{run_id(env)}")


@dataclass(frozen=True)
class Job:
    """Everything a recipe run needs to know, checked. ``model`` is recipe-specific."""

    recipe: str
    world_size: int
    dp: int
    effective_batch: int          # per_device_batch x grad_accum x dp (samples per step)
    train: Train
    parallel: Parallel
    checkpoint: Checkpoint
    model: Mapping[str, Any]
    source: str                   # "MESHRUN_JOB_CONFIG" or "defaults"
    log_dir: str
    notes: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        """One line for the start of a run."""
        t, p = self.train, self.parallel
        return (f"{self.recipe}: world {self.world_size} = dp {self.dp} x tp {p.tp}, "
                f"{t.steps} steps x {self.effective_batch} samples "
                f"({t.per_device_batch}/device x {t.grad_accum} accum x {self.dp} dp), "
                f"lr {t.lr:g} {t.schedule}, {t.optimizer}, config from {self.source}")


def run_id(env: Mapping[str, str]) -> str:
    """The run's id: ``MESHRUN_RUN_ID``, else torchrun's ``TORCHELASTIC_RUN_ID``, else local."""
    rid = env.get("MESHRUN_RUN_ID") or env.get("TORCHELASTIC_RUN_ID") or ""
    return rid if rid and rid != "none" else "local"


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def load(recipe: str, env: Mapping[str, str], world_size: int) -> Job:
    """Resolve ``recipe``'s job for a world of ``world_size`` processes from ``env``."""
    defaults = get(recipe).config()
    raw = env.get("MESHRUN_JOB_CONFIG", "").strip()
    notes: list[str] = []
    if raw:
        try:
            given = json.loads(raw)
        except ValueError as err:
            raise UsageError(f"MESHRUN_JOB_CONFIG is not valid JSON ({err})",
                             subject="MESHRUN_JOB_CONFIG",
                             hint="let meshrun write it (meshrun run --recipe ...), or unset it "
                                  "to use the recipe's defaults") from None
        if not isinstance(given, Mapping):
            raise UsageError("MESHRUN_JOB_CONFIG is not a JSON object",
                             subject="MESHRUN_JOB_CONFIG", hint="unset it to use the defaults")
        if given.get("recipe", recipe) != recipe:
            raise UsageError(f"MESHRUN_JOB_CONFIG is for recipe {given['recipe']!r}, "
                             f"this worker runs {recipe!r}", subject="MESHRUN_JOB_CONFIG",
                             hint="run the recipe the config names, or unset "
                                  "MESHRUN_JOB_CONFIG")
        cfg = _merge(defaults, given)
        source = "MESHRUN_JOB_CONFIG"
    else:
        cfg, source = defaults, "defaults"
    for section in ("train", "parallel", "checkpoint", "model"):
        if not isinstance(cfg.get(section), Mapping):
            raise _fail(section, "is missing or not a table", f"give a [{section}] table")
    train = Train.parse(cfg["train"])
    stop_raw = env.get("MESHRUN_STOP_AFTER_STEP", "").strip()
    if stop_raw:
        if not stop_raw.isdigit() or int(stop_raw) < 1:
            raise UsageError(f"MESHRUN_STOP_AFTER_STEP={stop_raw!r} is not a step number >= 1",
                             subject="MESHRUN_STOP_AFTER_STEP",
                             hint="set it to the last step to run, or unset it")
        train = dataclasses.replace(train, stop_after=int(stop_raw))
    parallel = Parallel.parse(cfg["parallel"])

    if world_size % parallel.tp:
        if source == "defaults":
            tp = math.gcd(world_size, parallel.tp)
            notes.append(f"tp {parallel.tp} does not divide world size {world_size}; "
                         f"using tp {tp} (set parallel.tp in a job config to choose)")
            parallel = dataclasses.replace(parallel, tp=tp)
        else:
            raise _fail("parallel.tp", f"world size {world_size} is not divisible by tp "
                        f"{parallel.tp}", f"pick a tp that divides {world_size}, or change "
                        "the process count")
    dp = world_size // parallel.tp
    effective = train.per_device_batch * train.grad_accum * dp
    for key, want in (("world_size", world_size), ("dp", dp), ("effective_batch", effective)):
        if key in cfg and cfg[key] != want:
            raise _fail(key, f"the config says {cfg[key]} but this run has {want} "
                        f"(world {world_size}, tp {parallel.tp}, "
                        f"{train.per_device_batch}/device x {train.grad_accum} accum)",
                        "resolve the config for this world size (meshrun run does), or unset "
                        "MESHRUN_JOB_CONFIG")
    # What meshrun.config writes besides the sections: facts and explanations, not settings.
    known = {"recipe", "world_size", "dp", "effective_batch", "train", "parallel",
             "checkpoint", "model", "version", "nnodes", "nproc_per_node", "grad_accum", "lr",
             "base_lr", "run_id", "config_path", "profile", "profiles", "arithmetic",
             "warnings", "source"}
    extra = sorted(set(cfg) - known)
    if extra:
        notes.append(f"ignored config keys: {', '.join(extra)}")
    log_dir = env.get("MESHRUN_LOG_DIR") or f"logs/{run_id(env)}"
    return Job(recipe=recipe, world_size=world_size, dp=dp, effective_batch=effective,
               train=train, parallel=parallel,
               checkpoint=Checkpoint.parse(cfg["checkpoint"], env), model=dict(cfg["model"]),
               source=source, log_dir=log_dir, notes=tuple(notes))

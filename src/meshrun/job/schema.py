"""The job config's schema: the dataclasses below ARE the schema.

Each field of :class:`TrainConfig`, :class:`ParallelConfig` and :class:`CheckpointConfig`
carries its default, its meaning and its range (:func:`knob`); everything else derives from
them: :data:`SCHEMA` (the keys by section, for the layering in :mod:`.layers` and the docs
table in docs/config.md), :data:`ALL_KEYS`, :func:`builtin_defaults`, the choices
(:data:`PRECISIONS`, :data:`OPTIMIZERS`, :data:`SCHEDULES`) and the check every value passes
(:func:`check_value`), whether it comes from a TOML file, ``--set``, a recipe's defaults or
the JSON a worker reads back. As torchtitan's config dataclasses do, a field documents itself
where it is declared. Pure: no file, no environment, no torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import UsageError

Scalar = int | float | bool | str


@dataclass(frozen=True)
class Knob:
    """One config key: its kind, default (``None``: unset unless given), range and meaning."""

    kind: str  # "int" | "float" | "bool" | "str" | "choice" | "betas"
    default: Any
    doc: str
    low: float | None = None  # inclusive minimum
    high: float | None = None  # inclusive maximum
    choices: tuple[str, ...] = ()

    def expect(self) -> str:
        """What a valid value looks like, for messages."""
        if self.kind == "choice":
            return "one of " + ", ".join(f'"{c}"' for c in self.choices)
        if self.kind == "betas":
            return "two numbers in [0, 1)"
        what = {"int": "a whole number", "float": "a number", "bool": "true or false",
                "str": "a string"}[self.kind]
        if self.low is not None and self.high is not None:
            return f"{what} in {num(self.low)}..{num(self.high)}"
        if self.low is not None:
            return f"{what} >= {num(self.low)}"
        return what


def knob(kind: str, default: Any, doc: str, *, low: float | None = None,
         high: float | None = None, choices: tuple[str, ...] = ()) -> Any:
    """A dataclass field that is a config key (its :class:`Knob` in the field's metadata)."""
    spec = Knob(kind, default, doc, low=low, high=high, choices=choices)
    return field(default=default, metadata={"knob": spec})


class _Checked:
    """Checks every field against its :class:`Knob` after construction (values normalized:
    an int for a float key becomes a float, a list of betas a tuple)."""

    section = ""

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            value = check_value(f"{self.section}.{f.name}", getattr(self, f.name),
                                f.metadata["knob"], type(self).__name__, allow_none=True)
            object.__setattr__(self, f.name, value)


@dataclass(frozen=True)
class TrainConfig(_Checked):
    """``[train]``. In a resolved :class:`~meshrun.job.JobConfig`, ``lr`` is the scaled
    learning rate and ``grad_accum`` the derived accumulation: the values to train with; the
    lr as written is ``JobConfig.base_lr``."""

    section = "train"
    steps: int = knob("int", 100, "optimizer steps to run", low=1)
    per_device_batch: int = knob("int", 8, "samples per data-parallel rank per micro-step",
                                 low=1)
    grad_accum: int = knob("int", 1, "micro-steps accumulated per optimizer step (derived "
                           "when keep_effective_batch is true)", low=1)
    lr: float = knob("float", 1e-3, "peak learning rate, as tuned at lr_tuned_for_batch", low=0)
    lr_tuned_for_batch: int | None = knob("int", None, "effective batch `lr` was tuned at; "
                                          "unset: lr is used as written", low=1)
    lr_scaling: str = knob("choice", "linear", "how lr follows the effective batch",
                           choices=("linear", "sqrt", "none"))
    keep_effective_batch: bool = knob("bool", False, "derive grad_accum so the effective "
                                      "batch stays `effective_batch` at every world size")
    effective_batch: int | None = knob("int", None, "target effective batch for "
                                       "keep_effective_batch; unset: lr_tuned_for_batch", low=1)
    optimizer: str = knob("choice", "adamw", "optimizer", choices=("adamw", "sgd"))
    optimizer_impl: str = knob("choice", "auto", "the optimizer's kernels: fused (one kernel "
                               "for every parameter), foreach (one per operation over all "
                               "parameters) or for-loop (per parameter); auto: fused on a "
                               "GPU, torch's default on a CPU",
                               choices=("auto", "fused", "foreach", "for-loop"))
    weight_decay: float = knob("float", 0.0, "decoupled weight decay", low=0)
    betas: tuple[float, float] = knob("betas", (0.9, 0.999), "AdamW betas")
    momentum: float = knob("float", 0.9, "SGD momentum", low=0, high=1)
    warmup_steps: int = knob("int", 10, "steps of linear warm-up from 0 to lr", low=0)
    schedule: str = knob("choice", "cosine", "lr after warm-up",
                         choices=("constant", "cosine", "linear"))
    min_lr_ratio: float = knob("float", 0.1, "final lr of the cosine/linear decay, as a "
                               "fraction of lr", low=0, high=1)
    grad_clip: float = knob("float", 1.0, "max global gradient norm; 0: off", low=0)
    stop_after: int = knob("int", 0, "stop cleanly after this step (the lr schedule still "
                           "spans `steps`); 0: run all steps", low=0)
    seed: int = knob("int", 0, "random seed (each rank derives its own from it)", low=0)
    log_every: int = knob("int", 10, "print a metrics line every N steps", low=1)
    prefetch: str = knob("choice", "auto", "make the next micro-batches on a background "
                         "thread while the device works on this one (the same tensors); "
                         "auto: on a GPU only", choices=("auto", "on", "off"))

    def prefetching(self, device: str) -> bool:
        """Whether batches are made ahead on a thread, on ``device`` ("cuda" or "cpu")."""
        return self.prefetch == "on" or (self.prefetch == "auto" and device == "cuda")

    def optimizer_kernels(self, device: str) -> str:
        """``"fused"``, ``"foreach"``, ``"for-loop"`` or ``"default"`` (torch's choice) on
        ``device``; resolves ``auto``: fused on a GPU, torch's default elsewhere."""
        if self.optimizer_impl != "auto":
            return self.optimizer_impl
        return "fused" if device == "cuda" else "default"

    def lr_at(self, step: int) -> float:
        """The learning rate of 1-based ``step``: linear warm-up, then the schedule to
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
class ParallelConfig(_Checked):
    """``[parallel]``: tensor-parallel size and FSDP2 sharding options."""

    section = "parallel"
    tp: int = knob("int", 1, "tensor-parallel size; must divide the world size", low=1)
    reshard_after_forward: bool = knob("bool", True, "FSDP2: free gathered parameters after "
                                       "forward (ZeRO-3 style); false keeps them (ZeRO-2 "
                                       "style, more memory, less traffic)")
    mixed_precision: str = knob("choice", "auto", "parameter/compute dtype; auto: bf16 on GPU, "
                                "fp32 on CPU", choices=("auto", "bf16", "fp32"))
    bf16_mode: str = knob("choice", "auto", "how bf16 is applied: params (FSDP2's "
                          "MixedPrecisionPolicy: bf16 copies of the fp32 parameters for "
                          "compute, gradients reduced in fp32, fp32 master weights in the "
                          "optimizer) or autocast (torch.autocast over the fp32 parameters); "
                          "auto: params on a GPU, autocast on a CPU",
                          choices=("auto", "params", "autocast"))

    def precision(self, device: str) -> str:
        """``"bf16"`` or ``"fp32"`` on ``device`` ("cuda" or "cpu"); resolves ``auto``."""
        if self.mixed_precision != "auto":
            return self.mixed_precision
        return "bf16" if device == "cuda" else "fp32"

    def bf16_how(self, device: str) -> str | None:
        """``"params"``, ``"autocast"``, or None when ``device`` trains in fp32; resolves
        both ``auto`` values."""
        if self.precision(device) != "bf16":
            return None
        if self.bf16_mode != "auto":
            return self.bf16_mode
        return "params" if device == "cuda" else "autocast"


@dataclass(frozen=True)
class CheckpointConfig(_Checked):
    """``[checkpoint]``; ``dir`` is resolved (``checkpoints/<run id>`` when left empty)."""

    section = "checkpoint"
    interval: int = knob("int", 0, "save every N steps; 0: off", low=0)
    keep: int = knob("int", 3, "checkpoints kept (older ones deleted)", low=2)
    dir: str = knob("str", "", 'where checkpoints go; "": checkpoints/<run id>')


# --- derived from the dataclasses --------------------------------------------------------------

SECTION_TYPES: dict[str, type] = {"train": TrainConfig, "parallel": ParallelConfig,
                                  "checkpoint": CheckpointConfig}
SECTIONS = tuple(SECTION_TYPES)
SCHEMA: dict[str, dict[str, Knob]] = {
    section: {f.name: f.metadata["knob"] for f in fields(kind)}
    for section, kind in SECTION_TYPES.items()}
ALL_KEYS = tuple(f"{s}.{k}" for s, keys in SCHEMA.items() for k in keys)
PRECISIONS = SCHEMA["parallel"]["mixed_precision"].choices
OPTIMIZERS = SCHEMA["train"]["optimizer"].choices
SCHEDULES = SCHEMA["train"]["schedule"].choices


def builtin_defaults() -> dict:
    """The built-in defaults as a nested dict (unset optional keys left out)."""
    return {section: {k: (list(key.default) if isinstance(key.default, tuple) else key.default)
                      for k, key in keys.items() if key.default is not None}
            for section, keys in SCHEMA.items()}


# --- checking one value --------------------------------------------------------------------------

def check_value(key: str, value: Any, spec: Knob, where: str, *,
                allow_none: bool = False) -> Any:
    """``value`` normalized (int -> float for float keys, list -> tuple for betas) or raise."""
    if value is None and allow_none and spec.default is None:
        return None
    bad = None
    if spec.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            bad = "is not a whole number"
    elif spec.kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value):
            bad = "is not a number"
        else:
            value = float(value)
    elif spec.kind == "bool":
        if not isinstance(value, bool):
            bad = "is not true or false"
    elif spec.kind == "str":
        if not isinstance(value, str):
            bad = "is not a string"
    elif spec.kind == "choice":
        if value not in spec.choices:
            bad = "is not a known choice"
    elif spec.kind == "betas":
        if (isinstance(value, (list, tuple)) and len(value) == 2
                and all(isinstance(b, (int, float)) and not isinstance(b, bool)
                        and 0 <= b < 1 for b in value)):
            value = (float(value[0]), float(value[1]))
        else:
            bad = "is not two numbers in [0, 1)"
    if bad is None and spec.kind in ("int", "float"):
        if spec.low is not None and value < spec.low:
            bad = f"is below {num(spec.low)}"
        elif spec.high is not None and value > spec.high:
            bad = f"is above {num(spec.high)}"
    if bad:
        example = spec.default if spec.default is not None else (spec.low or 1)
        leaf = key.split(".")[-1]
        extra = ""
        if spec.kind in ("str", "choice") and where == "--set" and not isinstance(value, str):
            extra = f" (quote it: --set '{key}=\"...\"')"
        raise UsageError(f"{key} = {show(value)} in {where} {bad}", subject=key,
                         hint=f"write {spec.expect()}, e.g. {leaf} = "
                              f"{show(_as_example(example, spec))}{extra}", code="config-bad-value")
    return value


def _as_example(value: Any, spec: Knob) -> Any:
    if spec.kind == "int" and spec.low is not None and value < spec.low:
        return int(spec.low)
    return value




# --- how values are shown -----------------------------------------------------------------------

def round_float(x: float) -> float:
    """Drop float noise (2e-4 * 128 / 256 -> 1e-4 exactly as written)."""
    return float(f"{x:.12g}")


def num(x: float) -> str:
    """Short number: ``2e-4``, ``0.001``, ``256``, ``1.41421e-4``."""
    if isinstance(x, int) and not isinstance(x, bool):
        return str(x)
    if not math.isfinite(x):  # inf, -inf, nan (1e999 in TOML is inf): shown as written
        return str(x)
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e6):
        mantissa, exponent = f"{x:.6e}".split("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exponent)}"
    return f"{x:.6g}"


def show(value: Any, unset: str = "(absent)") -> str:
    """A value as TOML would write it."""
    if value is None:
        return unset
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float):
        text = num(value)
        return text + ".0" if text.lstrip("-").isdigit() else text
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {show(v)}" for k, v in value.items()) + "}"
    return str(value)

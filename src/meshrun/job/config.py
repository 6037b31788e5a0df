"""The job config: one TOML file, ``--set`` overrides, per-world-size profiles. Pure.

A job's training values (batch, accumulation, learning rate, schedule, steps,
checkpoints, sharding, model) live in one TOML file given with ``--config
FILE``; ``--set key=value`` (repeatable, dotted keys, the value read as TOML)
overrides single values. The same file serves every cluster size: meshrun
derives what changes with the GPU count and shows the arithmetic, so there is
no config copy per GPU count.

Precedence, lowest first::

    built-in defaults < recipe defaults < config file < [profiles.<world size>] < --set

A ``[profiles.N]`` table belongs to the layer that holds it and beats that
layer's plain values: the file's ``[profiles.16]`` beats the file's ``[train]``
when the world size is 16, and ``--set`` beats both.

Effective batch and learning rate::

    dp              = world_size / parallel.tp         (tensor-parallel ranks share a batch)
    effective batch = per_device_batch x nproc_per_node x nnodes / tp x grad_accum
    lr (linear)     = lr x effective batch / lr_tuned_for_batch
    lr (sqrt)       = lr x sqrt(effective batch / lr_tuned_for_batch)

With ``train.keep_effective_batch = true`` the accumulation is derived instead:
``grad_accum = effective_batch / (per_device_batch x dp)``, which must divide
exactly. Seed 001: 4 x 8 per node x 8 nodes x 1 = 256 at lr 2e-4; at 16 GPUs
with grad_accum 2, 128 and (linear) 2e-4 x 128/256 = 1e-4.

API: :func:`load_file` (the only function that reads anything), :func:`parse_sets`,
:func:`recipe_name`, :func:`resolve` -> :class:`JobConfig`; workers get the
resolved config as JSON in ``MESHRUN_JOB_CONFIG`` (:meth:`JobConfig.to_env`,
:func:`from_env`). Every bad value raises :class:`~meshrun.errors.UsageError`
naming the dotted key and where it came from, with a fix. This module never
imports torch. The key reference is docs/config.md.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import UsageError

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ENV_VAR = "MESHRUN_JOB_CONFIG"
FORMAT_VERSION = 1
SECTIONS = ("train", "parallel", "checkpoint")
TOP_LEVEL = ("recipe", "train", "parallel", "checkpoint", "model", "profiles")

Scalar = int | float | bool | str


# --- the keys ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Key:
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
            return f"{what} in {_num(self.low)}..{_num(self.high)}"
        if self.low is not None:
            return f"{what} >= {_num(self.low)}"
        return what


SCHEMA: dict[str, dict[str, Key]] = {
    "train": {
        "steps": Key("int", 100, "optimizer steps to run", low=1),
        "per_device_batch": Key("int", 8, "samples per data-parallel rank per micro-step",
                                low=1),
        "grad_accum": Key("int", 1, "micro-steps accumulated per optimizer step (derived "
                          "when keep_effective_batch is true)", low=1),
        "lr": Key("float", 1e-3, "peak learning rate, as tuned at lr_tuned_for_batch",
                  low=0),
        "lr_tuned_for_batch": Key("int", None, "effective batch `lr` was tuned at; unset: "
                                  "lr is used as written", low=1),
        "lr_scaling": Key("choice", "linear", "how lr follows the effective batch",
                          choices=("linear", "sqrt", "none")),
        "keep_effective_batch": Key("bool", False, "derive grad_accum so the effective "
                                    "batch stays `effective_batch` at every world size"),
        "effective_batch": Key("int", None, "target effective batch for "
                               "keep_effective_batch; unset: lr_tuned_for_batch", low=1),
        "optimizer": Key("choice", "adamw", "optimizer", choices=("adamw", "sgd")),
        "weight_decay": Key("float", 0.0, "decoupled weight decay", low=0),
        "betas": Key("betas", (0.9, 0.999), "AdamW betas"),
        "momentum": Key("float", 0.9, "SGD momentum", low=0, high=1),
        "warmup_steps": Key("int", 10, "steps of linear warm-up from 0 to lr", low=0),
        "schedule": Key("choice", "cosine", "lr after warm-up",
                        choices=("constant", "cosine", "linear")),
        "min_lr_ratio": Key("float", 0.1, "final lr of the cosine/linear decay, as a "
                            "fraction of lr", low=0, high=1),
        "grad_clip": Key("float", 1.0, "max global gradient norm; 0: off", low=0),
        "stop_after": Key("int", 0, "stop cleanly after this step (the lr schedule still "
                          "spans `steps`); 0: run all steps", low=0),
        "seed": Key("int", 0, "random seed (each rank derives its own from it)", low=0),
        "log_every": Key("int", 10, "print a metrics line every N steps", low=1),
    },
    "parallel": {
        "tp": Key("int", 1, "tensor-parallel size; must divide the world size", low=1),
        "reshard_after_forward": Key("bool", True, "FSDP2: free gathered parameters after "
                                     "forward (ZeRO-3 style); false keeps them (ZeRO-2 "
                                     "style, more memory, less traffic)"),
        "mixed_precision": Key("choice", "auto", "parameter/compute dtype; auto: bf16 on "
                               "GPU, fp32 on CPU", choices=("auto", "bf16", "fp32")),
    },
    "checkpoint": {
        "interval": Key("int", 0, "save every N steps; 0: off", low=0),
        "keep": Key("int", 3, "checkpoints kept (older ones deleted)", low=2),
        "dir": Key("str", "", 'where checkpoints go; "": checkpoints/<run id>'),
    },
}

ALL_KEYS = tuple(f"{s}.{k}" for s, keys in SCHEMA.items() for k in keys)


def builtin_defaults() -> dict:
    """The built-in defaults as a nested dict (unset optional keys left out)."""
    return {section: {k: (list(key.default) if isinstance(key.default, tuple) else key.default)
                      for k, key in keys.items() if key.default is not None}
            for section, keys in SCHEMA.items()}


# --- reading --------------------------------------------------------------------------------

def load_file(path: str) -> dict:
    """Read a TOML config file. Missing file or bad TOML: a UsageError naming ``--config``."""
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise UsageError(f"--config {path}: no such file", subject="--config",
                         hint="check the path; it is read relative to the directory "
                              "meshrun was started in") from None
    except IsADirectoryError:
        raise UsageError(f"--config {path} is a directory, not a TOML file",
                         subject="--config", hint="name the .toml file itself") from None
    except PermissionError:
        raise UsageError(f"--config {path}: permission denied", subject="--config",
                         hint="make the file readable for this user") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"--config {path} is not UTF-8 text ({exc.reason})",
                         subject="--config", hint="save the file as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--config {path} is not valid TOML: {exc}", subject="--config",
                         hint="fix the TOML at that line (strings need quotes, tables "
                              "look like [train], keys like steps = 100)") from None
    return data


_DOTTED = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
_BARE_WORD = re.compile(r"^[^\s\"'\[\]{}=,#]+$")


def parse_sets(items: Sequence[str]) -> dict:
    """``["train.steps=20", "train.lr=1e-4"]`` -> ``{"train": {"steps": 20, "lr": 1e-4}}``.

    Each value is read as a TOML value (``20``, ``1e-4``, ``true``, ``"cosine"``,
    ``[0.9, 0.95]``); a bare word that is not TOML (``cosine``, ``mlp-tp``) is a string
    and an empty value is ``""``. A later ``--set`` of the same key wins.
    """
    out: dict = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep:
            raise UsageError(f"--set {item!r} has no '='", subject="--set",
                             hint="write --set KEY=VALUE, e.g. --set train.steps=20")
        if not _DOTTED.match(key):
            raise UsageError(f"--set {item!r}: {key!r} is not a dotted key",
                             subject="--set",
                             hint="write --set SECTION.KEY=VALUE, e.g. --set parallel.tp=2")
        value = _parse_value(key, raw)
        node = out
        parts = key.split(".")
        for depth, part in enumerate(parts[:-1]):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                above = ".".join(parts[:depth + 1])
                raise UsageError(f"--set {key}: {above} was already set to a value, not a "
                                 f"table", subject=f"--set {key}",
                                 hint=f"drop --set {above}=... or set keys under it")
        if isinstance(node.get(parts[-1]), dict) and not isinstance(value, dict):
            raise UsageError(f"--set {key}={raw}: {key} is a table of keys set elsewhere",
                             subject=f"--set {key}",
                             hint=f"set single keys, e.g. --set {key}.KEY=VALUE")
        node[parts[-1]] = value
    return out


def _parse_value(key: str, raw: str) -> Any:
    if raw == "":
        return ""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError as exc:
        if _BARE_WORD.match(raw):
            return raw
        reason = str(exc).split(" (at ")[0]
        raise UsageError(f"--set {key}={raw}: the value is not valid TOML ({reason})",
                         subject=f"--set {key}",
                         hint="write a TOML value: 1e-4, 20, true, [0.9, 0.95], or a string "
                              f"in quotes inside shell quotes (--set '{key}=\"a b\"')"
                         ) from None


def recipe_name(file_data: Mapping | None, sets: Mapping | None) -> str | None:
    """The recipe the job asks for (``--set recipe=`` beats the file), to pick its defaults."""
    name = None
    for where, data in (("config file", file_data), ("--set", sets)):
        if data and "recipe" in data:
            value = data["recipe"]
            if not isinstance(value, str) or not value:
                raise UsageError(f"recipe = {_show(value)} in {where} is not a recipe name",
                                 subject="recipe", hint='write recipe = "NAME", e.g. '
                                                        'recipe = "mlp-tp"')
            name = value
    return name


# --- the resolved config ----------------------------------------------------------------------

class _Checked:
    """Validates every field against :data:`SCHEMA` after construction."""

    _section = ""

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            key = f"{self._section}.{f.name}"
            value = _check(key, getattr(self, f.name), SCHEMA[self._section][f.name],
                           f"{type(self).__name__}", allow_none=True)
            object.__setattr__(self, f.name, value)


@dataclass(frozen=True)
class TrainConfig(_Checked):
    """``[train]`` for this world size. In a resolved :class:`JobConfig`, ``lr`` is the
    scaled learning rate and ``grad_accum`` the derived accumulation — the values to train
    with; the lr as written is :attr:`JobConfig.base_lr`."""

    _section = "train"
    steps: int
    per_device_batch: int
    grad_accum: int
    lr: float
    lr_tuned_for_batch: int | None
    lr_scaling: str
    keep_effective_batch: bool
    effective_batch: int | None
    optimizer: str
    weight_decay: float
    betas: tuple[float, float]
    momentum: float
    warmup_steps: int
    schedule: str
    min_lr_ratio: float
    grad_clip: float
    stop_after: int
    seed: int
    log_every: int


@dataclass(frozen=True)
class ParallelConfig(_Checked):
    """``[parallel]``: tensor-parallel size and FSDP2 sharding options."""

    _section = "parallel"
    tp: int
    reshard_after_forward: bool
    mixed_precision: str

    def precision(self, device: str) -> str:
        """``"bf16"`` or ``"fp32"`` on ``device`` ("cuda" or "cpu"); resolves ``auto``."""
        if self.mixed_precision != "auto":
            return self.mixed_precision
        return "bf16" if device == "cuda" else "fp32"


@dataclass(frozen=True)
class CheckpointConfig(_Checked):
    """``[checkpoint]``; ``dir`` is resolved (``checkpoints/<run id>`` when left empty)."""

    _section = "checkpoint"
    interval: int
    keep: int
    dir: str


_SECTION_TYPES = {"train": TrainConfig, "parallel": ParallelConfig,
                  "checkpoint": CheckpointConfig}


@dataclass(frozen=True)
class JobConfig:
    """The job's resolved config for one world size.

    ``train``/``parallel``/``checkpoint``/``model`` hold what training uses at this world
    size: ``train.lr`` is scaled and ``train.grad_accum`` derived (also reachable as
    :attr:`lr` and :attr:`grad_accum`); ``base_lr`` is ``train.lr`` as written.
    ``arithmetic`` holds the human lines that derive ``dp``, ``grad_accum``,
    ``effective_batch`` and ``lr``; ``source`` the layer each dotted key came from
    ("default", "recipe NAME", "config FILE", "profiles.N", "--set", "derived ...").
    """

    recipe: str | None
    train: TrainConfig
    parallel: ParallelConfig
    checkpoint: CheckpointConfig
    model: dict[str, Scalar]
    world_size: int
    nnodes: int
    nproc_per_node: int
    dp: int
    effective_batch: int
    base_lr: float
    run_id: str
    config_path: str | None = None
    profile: int | None = None  # the [profiles.N] applied, if any
    profiles: tuple[int, ...] = ()  # every world size some layer has a profile for
    arithmetic: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    source: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = "JobConfig"
        for name in ("world_size", "nnodes", "nproc_per_node", "dp", "effective_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{name} = {_show(value)} in {where} is not a whole "
                                 f"number >= 1", subject=name,
                                 hint="let meshrun resolve the config (meshrun.config."
                                      "resolve) instead of building it by hand")
        if self.world_size != self.nnodes * self.nproc_per_node:
            raise UsageError(f"world_size {self.world_size} != nnodes {self.nnodes} x "
                             f"nproc_per_node {self.nproc_per_node} in {where}",
                             subject="world_size", hint="use meshrun.config.resolve")
        if self.dp * self.parallel.tp != self.world_size:
            raise UsageError(f"dp {self.dp} x tp {self.parallel.tp} != world size "
                             f"{self.world_size} in {where}", subject="dp",
                             hint="use meshrun.config.resolve")
        micro = self.train.per_device_batch * self.dp
        if micro * self.grad_accum != self.effective_batch:
            raise UsageError(f"effective_batch {self.effective_batch} != per_device_batch "
                             f"{self.train.per_device_batch} x dp {self.dp} x grad_accum "
                             f"{self.grad_accum} = {micro * self.grad_accum} in {where}",
                             subject="effective_batch", hint="use meshrun.config.resolve")
        base = self.base_lr
        if not isinstance(base, (int, float)) or isinstance(base, bool) or base < 0:
            raise UsageError(f"base_lr = {_show(base)} in {where} is not a number >= 0",
                             subject="base_lr", hint="use meshrun.config.resolve")
        object.__setattr__(self, "base_lr", float(base))
        for key, value in self.model.items():
            if not isinstance(value, (int, float, bool, str)):
                raise UsageError(f"model.{key} = {_show(value)} in {where} is not a number, "
                                 f"boolean or string", subject=f"model.{key}",
                                 hint="model values are scalars")

    @property
    def lr(self) -> float:
        """The learning rate to train with: ``train.lr``, scaled for this effective batch."""
        return self.train.lr

    @property
    def grad_accum(self) -> int:
        """Micro-steps per optimizer step: ``train.grad_accum``, derived when kept."""
        return self.train.grad_accum

    # -- for workers

    def to_dict(self) -> dict:
        """JSON-able: what workers receive. :meth:`from_dict` rebuilds an equal config."""
        return {
            "version": FORMAT_VERSION,
            "recipe": self.recipe,
            "train": {f.name: (list(v) if isinstance(v := getattr(self.train, f.name), tuple)
                               else v) for f in fields(self.train)},
            "parallel": {f.name: getattr(self.parallel, f.name) for f in fields(self.parallel)},
            "checkpoint": {f.name: getattr(self.checkpoint, f.name)
                           for f in fields(self.checkpoint)},
            "model": dict(self.model),
            "world_size": self.world_size,
            "nnodes": self.nnodes,
            "nproc_per_node": self.nproc_per_node,
            "dp": self.dp,
            "effective_batch": self.effective_batch,
            "grad_accum": self.grad_accum,  # = train.grad_accum
            "lr": self.lr,  # = train.lr
            "base_lr": self.base_lr,
            "run_id": self.run_id,
            "config_path": self.config_path,
            "profile": self.profile,
            "profiles": list(self.profiles),
            "arithmetic": list(self.arithmetic),
            "warnings": list(self.warnings),
            "source": dict(self.source),
        }

    @classmethod
    def from_dict(cls, data: Mapping, *, where: str = "job config dict") -> JobConfig:
        """Rebuild a config from :meth:`to_dict`'s output (validated again)."""
        hint = "launch the workers with meshrun run, which writes it"
        if not isinstance(data, Mapping):
            raise UsageError(f"{where} is not a JSON object", subject=where, hint=hint)
        if data.get("version") != FORMAT_VERSION:
            raise UsageError(f"{where} has version {_show(data.get('version'))}, this meshrun "
                             f"reads version {FORMAT_VERSION}", subject=where,
                             hint="run the workers with the same meshrun as the launcher")
        try:
            sections = {}
            for name, kind in _SECTION_TYPES.items():
                values = dict(data[name])
                if name == "train" and isinstance(values.get("betas"), list):
                    values["betas"] = tuple(values["betas"])
                sections[name] = kind(**values)
            cfg = cls(recipe=data["recipe"], model=dict(data["model"]), **sections,
                      world_size=data["world_size"], nnodes=data["nnodes"],
                      nproc_per_node=data["nproc_per_node"], dp=data["dp"],
                      effective_batch=data["effective_batch"], base_lr=data["base_lr"],
                      run_id=data["run_id"], config_path=data["config_path"],
                      profile=data["profile"], profiles=tuple(data["profiles"]),
                      arithmetic=tuple(data["arithmetic"]), warnings=tuple(data["warnings"]),
                      source=dict(data["source"]))
        except (KeyError, TypeError) as exc:
            raise UsageError(f"{where} is incomplete or malformed ({type(exc).__name__}: "
                             f"{exc})", subject=where, hint=hint) from None
        for key in ("lr", "grad_accum"):  # top-level copies of train.lr / train.grad_accum
            if key in data and data[key] != getattr(cfg, key):
                raise UsageError(f"{where}: {key} {_show(data[key])} != train.{key} "
                                 f"{_show(getattr(cfg, key))}", subject=f"{where} {key}",
                                 hint=hint)
        return cfg

    def to_env(self) -> dict[str, str]:
        """``{"MESHRUN_JOB_CONFIG": json}`` for the workers' environment."""
        return {ENV_VAR: json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))}

    # -- for people

    def describe_lines(self, width: int | None = None) -> list[str]:
        """Aligned ``key : value  (source)`` lines, to append to ``meshrun plan``'s block.

        ``width`` is the key column's width (to line up with the plan's own rows).
        """
        rows: list[tuple[str, str, str]] = [
            ("config", self.config_path or "(none)",
             "" if self.config_path else "built-in and recipe defaults"),
            ("recipe", self.recipe or "(none)", self.source.get("recipe", "")),
        ]
        if self.profile is not None:
            rows.append(("profile", f"profiles.{self.profile}",
                         f"world size {self.world_size}"))
        elif self.profiles:
            rows.append(("profile", "(none)", f"none for world size {self.world_size}; have "
                         + ", ".join(str(p) for p in self.profiles)))
        for section in ("train", "parallel", "checkpoint"):
            obj = getattr(self, section)
            for f in fields(obj):
                key = f"{section}.{f.name}"
                rows.append((key, _show(getattr(obj, f.name), unset="(unset)"),
                             self.source.get(key, "")))
        for name, value in self.model.items():
            rows.append((f"model.{name}", _show(value), self.source.get(f"model.{name}", "")))
        width = max([width or 0] + [len(k) for k, _, _ in rows] + [len("effective batch")])
        vwidth = min(24, max(len(v) for _, v, _ in rows))
        lines = []
        for key, value, why in rows:
            line = f"  {key.ljust(width)} : {value.ljust(vwidth)}"
            lines.append((line + f"  ({why})" if why else line).rstrip())
        labels = ("dp", "grad_accum", "effective batch", "lr")
        for label, text in zip(labels, self.arithmetic):
            lines.append(f"  {label.ljust(width)} : {text}")
        for warning in self.warnings:
            lines.append(f"  {'warning'.ljust(width)} : {warning}")
        return lines


def from_env(env: Mapping[str, str]) -> JobConfig | None:
    """The config meshrun handed this worker (``MESHRUN_JOB_CONFIG``), or None without one."""
    text = env.get(ENV_VAR)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{ENV_VAR} is not valid JSON ({exc})", subject=ENV_VAR,
                         hint="launch the workers with meshrun run, which writes it; "
                              "unset it otherwise") from None
    return JobConfig.from_dict(data, where=ENV_VAR)


# --- resolving ------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Layer:
    label: str  # source label for plan ("config job.toml")
    flat: dict[str, Any]
    profiles: dict[int, dict[str, Any]]
    profile_label: str  # prefix of its profiles' source labels ("recipe X profiles.16")


def resolve(*, recipe_defaults: Mapping | None, file_data: Mapping | None,
            sets: Mapping | None, world_size: int, nproc_per_node: int, nnodes: int,
            run_id: str, config_path: str | None = None,
            flags: Mapping[str, str] | None = None) -> JobConfig:
    """Merge the layers, apply this world size's profile, derive and check. Pure.

    ``recipe_defaults`` overlays the built-in defaults (a nested dict like a config
    file; when it has a ``model`` table, the job's model keys must be among its keys and
    of the same types). ``file_data`` is :func:`load_file`'s result, ``sets``
    :func:`parse_sets`'. ``flags`` names the CLI flag that put a dotted key into ``sets``
    (``{"recipe": "--recipe"}``): its source reads that flag, not ``--set``. Raises
    UsageError for any unknown key, wrong type or impossible combination, with the
    arithmetic.
    """
    if min(world_size, nproc_per_node, nnodes) < 1 or world_size != nproc_per_node * nnodes:
        raise ValueError(f"world_size {world_size} != nproc_per_node {nproc_per_node} x "
                         f"nnodes {nnodes}")
    name = next((d["recipe"] for d in (sets, file_data, recipe_defaults)
                 if isinstance(d, Mapping) and isinstance(d.get("recipe"), str)), None)
    recipe_label = f"recipe {name}" if name else "recipe"
    file_label = f"config {config_path}" if config_path else "config file"

    builtin = _layer(builtin_defaults(), "default", "built-in defaults", None, "")
    recipe = _layer(recipe_defaults or {}, recipe_label, f"{recipe_label} defaults", None,
                    f"{recipe_label} ")
    model_schema = None
    if recipe_defaults and "model" in recipe_defaults:
        model_schema = {k[len("model."):]: v for k, v in recipe.flat.items()
                        if k.startswith("model.")}
    layers = [builtin, recipe,
              _layer(file_data or {}, file_label, file_label, model_schema, ""),
              _layer(sets or {}, "--set", "--set", model_schema, "--set ")]

    merged: dict[str, Any] = {}
    source: dict[str, str] = {}
    for layer in layers:
        for flat, label in ((layer.flat, layer.label),
                            (layer.profiles.get(world_size, {}),
                             f"{layer.profile_label}profiles.{world_size}")):
            for key, value in flat.items():
                merged[key] = value
                source[key] = label
    applied = any(world_size in layer.profiles for layer in layers)
    profiles = tuple(sorted({n for layer in layers for n in layer.profiles}))

    sections = {}
    for section, keys in SCHEMA.items():
        values = {k: merged.get(f"{section}.{k}") for k in keys}
        if section == "train":
            values["betas"] = tuple(values["betas"])
        if section == "checkpoint" and not values["dir"]:
            values["dir"] = f"checkpoints/{run_id}"
            source["checkpoint.dir"] += ': "" means checkpoints/<run id>'
        for k in keys:
            if values[k] is None:
                source[f"{section}.{k}"] = "default"
        sections[section] = _SECTION_TYPES[section](**values)
    train: TrainConfig = sections["train"]  # as configured; lr/grad_accum replaced below
    parallel: ParallelConfig = sections["parallel"]
    model = {k[len("model."):]: v for k, v in merged.items() if k.startswith("model.")}

    warnings: list[str] = []
    dp = _data_parallel(parallel.tp, world_size, nproc_per_node, nnodes, source, warnings)
    grad_accum, effective, batch_lines = _batch(train, dp, parallel.tp, nproc_per_node,
                                                nnodes, source, warnings)
    lr, lr_line = _scaled_lr(train, effective)
    if lr != train.lr:
        source["train.lr"] = f"scaled from {_num(train.lr)}, {source['train.lr']}"
    base_lr = train.lr
    sections["train"] = replace(train, lr=lr, grad_accum=grad_accum)
    name = merged.get("recipe")
    if name:
        from ..recipes import RECIPES  # torch-free registry

        if name in RECIPES:  # the model settings, as the workers will check them (laid
            recipe = RECIPES[name]  # over the recipe's own defaults, as the workers do)
            recipe.check_model({**recipe.defaults.get("model", {}), **model}, parallel.tp)
    if train.warmup_steps >= train.steps:
        warnings.append(f"train.warmup_steps {train.warmup_steps} >= train.steps "
                        f"{train.steps}: the run ends before lr reaches {_num(lr)}")
    for key, flag in (flags or {}).items():
        if source.get(key) == "--set":
            source[key] = flag
    return JobConfig(
        recipe=merged.get("recipe"), model=model, **sections,
        world_size=world_size, nnodes=nnodes, nproc_per_node=nproc_per_node, dp=dp,
        effective_batch=effective, base_lr=base_lr, run_id=run_id,
        config_path=config_path, profile=world_size if applied else None, profiles=profiles,
        arithmetic=(f"world size {world_size} / tp {parallel.tp} = {dp}", *batch_lines,
                    lr_line),
        warnings=tuple(warnings), source=source)


def _layer(data: Mapping, label: str, where: str, model_schema: dict | None,
           profile_label: str) -> _Layer:
    if not isinstance(data, Mapping):
        raise UsageError(f"{where} is not a table of keys", subject=where,
                         hint="a config is a TOML document with [train], [parallel], ... "
                              "tables")
    data = _expand(data)
    flat = _flatten(data, where, model_schema, top=True)
    profiles: dict[int, dict[str, Any]] = {}
    raw = data.get("profiles", {})
    if not isinstance(raw, Mapping):
        raise UsageError(f"profiles = {_show(raw)} in {where} is not a table",
                         subject="profiles", hint="write [profiles.64] tables with the "
                                                  "overrides for world size 64")
    for size, table in raw.items():
        if not re.fullmatch(r"[1-9][0-9]*", str(size)):
            raise UsageError(f"profiles.{size} in {where}: profile names are world sizes "
                             f"(total processes), not {size!r}", subject=f"profiles.{size}",
                             hint="name it after the world size it applies to, e.g. "
                                  "[profiles.64] for 8 nodes x 8 GPUs")
        if not isinstance(table, Mapping):
            raise UsageError(f"profiles.{size} = {_show(table)} in {where} is not a table",
                             subject=f"profiles.{size}",
                             hint=f"write [profiles.{size}] followed by lines like "
                                  "train.grad_accum = 2")
        profiles[int(size)] = _flatten(_expand(table), f"profiles.{size} in {where}",
                                       model_schema,
                                       top=False, prefix=f"profiles.{size}.")
    return _Layer(label, flat, profiles, profile_label)


def _expand(data: Mapping) -> dict:
    """Dotted keys as nested tables (``{"train.steps": 3}`` -> ``{"train": {"steps": 3}}``),
    so recipe defaults written as Python dicts may use either form, like TOML."""
    out: dict = {}
    for key, value in data.items():
        node, parts = out, str(key).split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UsageError(f"{key}: {part} is both a value and a table",
                                 subject=str(key), hint=f"set {part} one way only")
        if isinstance(value, Mapping) and isinstance(node.get(parts[-1]), dict):
            node[parts[-1]].update(_expand(value))
        elif isinstance(value, Mapping):
            node[parts[-1]] = _expand(value)
        else:
            node[parts[-1]] = value
    return out


def _flatten(data: Mapping, where: str, model_schema: dict | None, *, top: bool,
             prefix: str = "") -> dict[str, Any]:
    """One layer's values as ``{"train.steps": 20, ...}``, each checked against SCHEMA."""
    allowed = TOP_LEVEL if top else TOP_LEVEL[1:5]
    flat: dict[str, Any] = {}
    for name, value in data.items():
        if name not in allowed:
            if name in TOP_LEVEL:
                raise UsageError(f"{prefix}{name} in {where}: not allowed inside a profile",
                                 subject=f"{prefix}{name}",
                                 hint=f"move {name} out of the [profiles...] table")
            _unknown(f"{prefix}{name}", name, where)
        if name == "profiles":
            continue
        if name == "recipe":
            if not isinstance(value, str) or not value:
                raise UsageError(f"recipe = {_show(value)} in {where} is not a recipe name",
                                 subject="recipe", hint='write recipe = "NAME", e.g. '
                                                        'recipe = "mlp-tp"')
            flat["recipe"] = value
            continue
        if not isinstance(value, Mapping):
            raise UsageError(f"{prefix}{name} = {_show(value)} in {where} is a value, but "
                             f"{name} is a table", subject=f"{prefix}{name}",
                             hint=f"write [{name}] and its keys under it, or dotted keys "
                                  f"like {name}.KEY = VALUE")
        for key, item in value.items():
            dotted = f"{name}.{key}"
            if name == "model":
                flat[dotted] = _check_model(dotted, item, where, model_schema, prefix)
            elif key not in SCHEMA[name]:
                _unknown(f"{prefix}{dotted}", dotted, where)
            else:
                flat[dotted] = _check(f"{prefix}{dotted}", item, SCHEMA[name][key], where)
    return flat


def _unknown(shown: str, dotted: str, where: str) -> None:
    leaf = dotted.split(".")[-1]
    known = list(ALL_KEYS) + (list(TOP_LEVEL) if "." not in dotted else [])
    same_leaf = [k for k in ALL_KEYS if k.split(".")[-1] == leaf and k != dotted]
    close = same_leaf + [k for k in difflib.get_close_matches(dotted, known, n=3, cutoff=0.6)
                         if k not in same_leaf]
    if not close:
        close = [k for k in ALL_KEYS
                 if difflib.get_close_matches(leaf, [k.split(".")[-1]], n=1, cutoff=0.75)]
    hint = (f"did you mean {' or '.join(close[:3])}?" if close
            else "see docs/config.md for the keys")
    raise UsageError(f"unknown key {shown} in {where}", subject=shown,
                     hint=hint + " (unknown keys are errors so typos cannot pass silently)")


def _check(key: str, value: Any, spec: Key, where: str, *, allow_none: bool = False) -> Any:
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
            bad = f"is below {_num(spec.low)}"
        elif spec.high is not None and value > spec.high:
            bad = f"is above {_num(spec.high)}"
    if bad:
        example = spec.default if spec.default is not None else (spec.low or 1)
        leaf = key.split(".")[-1]
        extra = ""
        if spec.kind in ("str", "choice") and where == "--set" and not isinstance(value, str):
            extra = f" (quote it: --set '{key}=\"...\"')"
        raise UsageError(f"{key} = {_show(value)} in {where} {bad}", subject=key,
                         hint=f"write {spec.expect()}, e.g. {leaf} = "
                              f"{_show(_as_example(example, spec))}{extra}")
    return value


def _as_example(value: Any, spec: Key) -> Any:
    if spec.kind == "int" and spec.low is not None and value < spec.low:
        return int(spec.low)
    return value


def _check_model(dotted: str, value: Any, where: str, schema: dict | None,
                 prefix: str) -> Scalar:
    shown = f"{prefix}{dotted}"
    leaf = dotted[len("model."):]
    if not isinstance(value, (int, float, bool, str)):
        raise UsageError(f"{shown} = {_show(value)} in {where} is not a number, boolean or "
                         f"string", subject=shown, hint="model values are scalars, e.g. "
                                                        f"{leaf} = 64")
    if schema is None:
        return value
    if leaf not in schema:
        close = difflib.get_close_matches(leaf, list(schema), n=3, cutoff=0.6)
        known = ", ".join(sorted(schema)) or "none"
        hint = (f"did you mean {' or '.join('model.' + c for c in close)}?" if close
                else f"the recipe's model keys are: {known}")
        raise UsageError(f"unknown key {shown} in {where}", subject=shown, hint=hint)
    expected = schema[leaf]
    kind = ("bool" if isinstance(expected, bool) else "int" if isinstance(expected, int)
            else "float" if isinstance(expected, float) else "str")
    return _check(shown, value, Key(kind, expected, ""), where)


def _data_parallel(tp: int, world_size: int, nproc: int, nnodes: int, source: dict,
                   warnings: list[str]) -> int:
    if world_size % tp:
        good = [d for d in range(1, world_size + 1) if world_size % d == 0]
        within = [d for d in good if nproc % d == 0]
        raise UsageError(
            f"parallel.tp {tp} ({source.get('parallel.tp')}) does not divide world size "
            f"{world_size} ({nnodes} nodes x {nproc} per node): {world_size} / {tp} = "
            f"{world_size / tp:.3g}", subject="parallel.tp",
            hint=f"use a tp that divides {world_size}: "
                 f"{', '.join(map(str, within))} (within a node)"
                 + (f" or {', '.join(map(str, [d for d in good if d not in within]))}"
                    if len(good) > len(within) else ""))
    if tp > 1 and nproc % tp:
        warnings.append(f"parallel.tp {tp} does not divide the {nproc} processes per node: "
                        f"tensor-parallel groups cross nodes and their traffic goes over the "
                        f"network; prefer a tp dividing {nproc}")
    return world_size // tp


def _batch(train: TrainConfig, dp: int, tp: int, nproc: int, nnodes: int, source: dict,
           warnings: list[str]) -> tuple[int, int, list[str]]:
    """(grad_accum, effective batch, [grad_accum line, effective batch line])."""
    pdb = train.per_device_batch
    micro = pdb * dp

    def formula(accum: int) -> str:
        return (f"per_device_batch {pdb} x {nproc} per node x {nnodes} nodes / tp {tp} "
                f"x grad_accum {accum} = {micro * accum}")

    if not train.keep_effective_batch:
        effective = micro * train.grad_accum
        if train.effective_batch is not None and train.effective_batch != effective:
            raise UsageError(
                f"train.effective_batch {train.effective_batch} ({source['train.effective_batch']})"
                f" but {formula(train.grad_accum)}", subject="train.effective_batch",
                hint="set train.keep_effective_batch = true to derive grad_accum from it, "
                     "or remove train.effective_batch")
        return train.grad_accum, effective, [
            f"grad_accum {train.grad_accum} ({source['train.grad_accum']})",
            formula(train.grad_accum)]

    target = train.effective_batch or train.lr_tuned_for_batch
    if target is None:
        raise UsageError("train.keep_effective_batch = true but neither train.effective_batch "
                         "nor train.lr_tuned_for_batch is set", subject="train.effective_batch",
                         hint="set train.effective_batch = N (the batch to keep), e.g. 256")
    what = "effective_batch" if train.effective_batch else "lr_tuned_for_batch"
    if target % micro:
        relation = "is smaller than" if target < micro else "is not a multiple of"
        raise UsageError(
            f"train.{what} {target} {relation} per_device_batch {pdb} x {nproc} per node x "
            f"{nnodes} nodes / tp {tp} = {micro}, so keep_effective_batch cannot derive "
            f"grad_accum = {target} / {micro} = {target / micro:.3g}",
            subject=f"train.{what}", hint=_keep_hint(target, pdb, dp, tp, nproc))
    accum = target // micro
    if not source["train.grad_accum"].startswith(("default", "recipe")) \
            and train.grad_accum != accum:
        warnings.append(f"train.grad_accum {train.grad_accum} ({source['train.grad_accum']}) "
                        f"ignored: keep_effective_batch derives {accum}")
    source["train.grad_accum"] = "derived (keep_effective_batch)"
    return accum, target, [f"{what} {target} / (per_device_batch {pdb} x dp {dp}) = {accum} "
                           "(keep_effective_batch)", formula(accum)]


def _keep_hint(target: int, pdb: int, dp: int, tp: int, nproc: int) -> str:
    options = []
    if target % dp == 0:
        divisors = [d for d in range(1, target // dp + 1) if (target // dp) % d == 0]
        below = max(d for d in divisors if d <= pdb)
        above = min((d for d in divisors if d >= pdb), default=below)
        near = sorted({below, above})
        options.append(f"train.per_device_batch {' or '.join(map(str, near))} at this size")
    nodes = [n for n in range(1, 257) if (n * nproc) % tp == 0
             and target % (pdb * n * nproc // tp) == 0]
    if nodes:
        options.append(f"{' or '.join(map(str, nodes[:6]))} node{'s' * (nodes[:6] != [1])} "
                       f"of {nproc} (per_device_batch {pdb})")
    if not options:
        return (f"choose train.effective_batch as a multiple of per_device_batch x dp = "
                f"{pdb * dp}, e.g. {pdb * dp * max(1, round(target / (pdb * dp)))}")
    return "use " + "; or ".join(options) + f"; or an effective_batch that is a multiple of " \
                                            f"{pdb * dp}"


def _scaled_lr(train: TrainConfig, effective: int) -> tuple[float, str]:
    base, tuned = train.lr, train.lr_tuned_for_batch
    if tuned is None:
        return base, f"lr {_num(base)} (not scaled: no lr_tuned_for_batch)"
    if train.lr_scaling == "none":
        return base, f"lr {_num(base)} (not scaled: lr_scaling none)"
    if effective == tuned:
        return base, f"lr {_num(base)} (not scaled: effective batch {effective} = " \
                     f"lr_tuned_for_batch)"
    if train.lr_scaling == "linear":
        lr = _round(base * effective / tuned)
        return lr, f"lr {_num(base)} x {effective}/{tuned} (linear) = {_num(lr)}"
    lr = _round(base * math.sqrt(effective / tuned))
    return lr, f"lr {_num(base)} x sqrt({effective}/{tuned}) (sqrt) = {_num(lr)}"


# --- formatting -------------------------------------------------------------------------------

def _round(x: float) -> float:
    """Drop float noise (2e-4 * 128 / 256 -> 1e-4 exactly as written)."""
    return float(f"{x:.12g}")


def _num(x: float) -> str:
    """Short number: ``2e-4``, ``0.001``, ``256``, ``1.41421e-4``."""
    if isinstance(x, int) and not isinstance(x, bool):
        return str(x)
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e6):
        mantissa, exponent = f"{x:.6e}".split("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exponent)}"
    return f"{x:.6g}"


def _show(value: Any, unset: str = "(absent)") -> str:
    """A value as TOML would write it."""
    if value is None:
        return unset
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float):
        text = _num(value)
        return text + ".0" if text.lstrip("-").isdigit() else text
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {_show(v)}" for k, v in value.items()) + "}"
    return str(value)

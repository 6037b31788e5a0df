"""The resolved job config: :func:`resolve` merges the layers (:mod:`.layers`) for one world
size, derives the batch and learning rate (:mod:`.arithmetic`) and returns a
:class:`JobConfig`, the one model the planner, the renderers and the recipes all use.

Workers receive it as JSON in ``MESHRUN_JOB_CONFIG``: :meth:`JobConfig.to_env` writes it,
:func:`from_env` reads it back, and :func:`for_worker` is what a recipe calls (the config
meshrun resolved, or, started without meshrun, the recipe's defaults resolved the same way
for the world it runs in). Every bad value raises :class:`~meshrun.errors.UsageError`
naming the dotted key and where it came from, with a fix. Never imports torch; the key
reference is docs/config.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import UsageError
from .arithmetic import batch, data_parallel, scaled_lr
from .layers import read_layer
from .schema import (
    SCHEMA,
    SECTION_TYPES,
    CheckpointConfig,
    ParallelConfig,
    Scalar,
    TrainConfig,
    builtin_defaults,
    num,
    show,
)

ENV_VAR = "MESHRUN_JOB_CONFIG"
FORMAT_VERSION = 1


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
    # ``--nnodes MIN:MAX``: the job may shrink to this many nodes; :meth:`at_world` gives
    # the config of each smaller world (the effective batch and the learning rate kept)
    min_nnodes: int | None = None

    def __post_init__(self) -> None:
        where = "JobConfig"
        for name in ("world_size", "nnodes", "nproc_per_node", "dp", "effective_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{name} = {show(value)} in {where} is not a whole "
                                 f"number >= 1", subject=name,
                                 hint="let meshrun resolve the config (meshrun.job."
                                      "resolve) instead of building it by hand",
                                      code="job-config-inconsistent")
        if self.world_size != self.nnodes * self.nproc_per_node:
            raise UsageError(f"world_size {self.world_size} != nnodes {self.nnodes} x "
                             f"nproc_per_node {self.nproc_per_node} in {where}",
                             subject="world_size", hint="use meshrun.job.resolve",
                             code="job-config-inconsistent")
        if self.dp * self.parallel.tp != self.world_size:
            raise UsageError(f"dp {self.dp} x tp {self.parallel.tp} != world size "
                             f"{self.world_size} in {where}", subject="dp",
                             hint="use meshrun.job.resolve", code="job-config-inconsistent")
        micro = self.train.per_device_batch * self.dp
        if micro * self.grad_accum != self.effective_batch:
            raise UsageError(f"effective_batch {self.effective_batch} != per_device_batch "
                             f"{self.train.per_device_batch} x dp {self.dp} x grad_accum "
                             f"{self.grad_accum} = {micro * self.grad_accum} in {where}",
                             subject="effective_batch", hint="use meshrun.job.resolve",
                             code="job-config-inconsistent")
        base = self.base_lr
        if not isinstance(base, (int, float)) or isinstance(base, bool) or base < 0:
            raise UsageError(f"base_lr = {show(base)} in {where} is not a number >= 0",
                             subject="base_lr", hint="use meshrun.job.resolve",
                             code="job-config-inconsistent")
        object.__setattr__(self, "base_lr", float(base))
        for key, value in self.model.items():
            if not isinstance(value, (int, float, bool, str)):
                raise UsageError(f"model.{key} = {show(value)} in {where} is not a number, "
                                 f"boolean or string", subject=f"model.{key}",
                                 hint="model values are scalars", code="job-config-inconsistent")

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
            "min_nnodes": self.min_nnodes,
        }

    @classmethod
    def from_dict(cls, data: Mapping, *, where: str = "job config dict") -> JobConfig:
        """Rebuild a config from :meth:`to_dict`'s output (validated again)."""
        hint = "launch the workers with meshrun run, which writes it"
        if not isinstance(data, Mapping):
            raise UsageError(f"{where} is not a JSON object", subject=where, hint=hint,
                             code="job-config-json-bad")
        if data.get("version") != FORMAT_VERSION:
            raise UsageError(f"{where} has version {show(data.get('version'))}, this meshrun "
                             f"reads version {FORMAT_VERSION}", subject=where,
                             hint="run the workers with the same meshrun as the launcher",
                             code="job-config-json-bad")
        try:
            sections = {}
            for name, kind in SECTION_TYPES.items():
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
                      source=dict(data["source"]), min_nnodes=data.get("min_nnodes"))
        except (KeyError, TypeError) as exc:
            raise UsageError(f"{where} is incomplete or malformed ({type(exc).__name__}: "
                             f"{exc})", subject=where, hint=hint,
                             code="job-config-json-bad") from None
        for key in ("lr", "grad_accum"):  # top-level copies of train.lr / train.grad_accum
            if key in data and data[key] != getattr(cfg, key):
                raise UsageError(f"{where}: {key} {show(data[key])} != train.{key} "
                                 f"{show(getattr(cfg, key))}", subject=f"{where} {key}",
                                 hint=hint, code="job-config-json-bad")
        return cfg

    def at_world(self, nnodes: int) -> JobConfig:
        """This config on ``nnodes`` nodes of ``nproc_per_node`` (a job that shrank or grew
        back): the same effective batch and learning rate, gradient accumulation derived
        for the new data-parallel size. Pure. Raises :class:`UsageError` (``elastic-batch``)
        where that size cannot keep the batch (tp does not divide the world, or the batch
        is no whole number of micro-batches). Profiles (``[profiles.N]``) are those of the
        start: they are not applied again for the new size."""
        if nnodes == self.nnodes:
            return self
        world = nnodes * self.nproc_per_node
        tp, pdb = self.parallel.tp, self.train.per_device_batch
        why = None
        if world % tp:
            why = f"tp {tp} does not divide world size {world}"
        elif self.effective_batch % (pdb * (world // tp)):
            micro = pdb * (world // tp)
            why = (f"effective batch {self.effective_batch} / (per_device_batch {pdb} x dp "
                   f"{world // tp}) = {self.effective_batch / micro:.3g} is not whole")
        if why:
            raise UsageError(f"at {nnodes} node{'s' if nnodes != 1 else ''} the job cannot keep "
                             f"its batch: {why}", subject="--nnodes", code="elastic-batch",
                             hint="choose a MIN:MAX whose sizes all divide the batch")
        dp = world // tp
        accum = self.effective_batch // (pdb * dp)
        line = (f"at {nnodes} nodes: effective_batch {self.effective_batch} / (per_device_batch "
                f"{pdb} x dp {dp}) = grad_accum {accum} (the batch and lr of {self.nnodes} "
                "nodes kept)")
        return replace(self, world_size=world, nnodes=nnodes, dp=dp,
                       train=replace(self.train, grad_accum=accum),
                       arithmetic=(*self.arithmetic, line))

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
                rows.append((key, show(getattr(obj, f.name), unset="(unset)"),
                             self.source.get(key, "")))
        for name, value in self.model.items():
            rows.append((f"model.{name}", show(value), self.source.get(f"model.{name}", "")))
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


def elastic(config: JobConfig, min_nnodes: int) -> JobConfig:
    """``config`` (resolved for the job's full size) for a job that may shrink to
    ``min_nnodes`` nodes (``--nnodes MIN:MAX``): every size from MIN up must keep the
    effective batch (:meth:`JobConfig.at_world`), or one line names the sizes that do. Pure."""
    failed = None
    for n in range(min_nnodes, config.nnodes):
        try:
            config.at_world(n)
        except UsageError as exc:
            failed = exc
            break
    if failed is None:
        return replace(config, min_nnodes=min_nnodes)
    fits = [k for k in range(1, config.nnodes + 1) if _keeps(config, k)]
    raise UsageError(f"--nnodes {min_nnodes}:{config.nnodes}: {failed.message}",
                     subject="--nnodes", code="elastic-batch",
                     hint=(f"sizes that keep effective batch {config.effective_batch}: "
                           f"{', '.join(map(str, fits))} nodes; give a MIN from which every "
                           "size up to MAX is one of them, or change train.effective_batch"))


def _keeps(config: JobConfig, nnodes: int) -> bool:
    try:
        config.at_world(nnodes)
        return True
    except UsageError:
        return False


def from_env(env: Mapping[str, str]) -> JobConfig | None:
    """The config meshrun handed this worker (``MESHRUN_JOB_CONFIG``), or None without one;
    in a job that shrank (``WORLD_SIZE`` below the config's, within ``--nnodes MIN:MAX``) the
    config of the world it runs in (:meth:`JobConfig.at_world`)."""
    data = _read_env(env)
    if data is None:
        return None
    job = JobConfig.from_dict(data, where=ENV_VAR)
    world = env.get("WORLD_SIZE", "")
    return _in_world(job, int(world)) if world.isdigit() else job


def _in_world(job: JobConfig, world_size: int) -> JobConfig:
    """``job`` in a world of ``world_size`` it may shrink to or grow back from (``--nnodes
    MIN:MAX``: :meth:`JobConfig.at_world`); unchanged for any other world."""
    nodes, rest = divmod(world_size, job.nproc_per_node)
    if job.min_nnodes is None or world_size == job.world_size or rest or \
            not job.min_nnodes <= nodes <= job.nnodes:
        return job
    return job.at_world(nodes)


def _read_env(env: Mapping[str, str]) -> Mapping | None:
    """``MESHRUN_JOB_CONFIG`` as a JSON object (None when unset or blank): the one reader of
    what :meth:`JobConfig.to_env` wrote."""
    raw = env.get(ENV_VAR, "").strip()
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{ENV_VAR} is not valid JSON ({exc})", subject=ENV_VAR,
                         hint="let meshrun write it (meshrun run ...), or unset it",
                         code="job-config-json-bad") from None
    if not isinstance(data, Mapping):
        raise UsageError(f"{ENV_VAR} is not a JSON object", subject=ENV_VAR,
                         hint="let meshrun write it (meshrun run ...), or unset it",
                         code="job-config-json-bad")
    return data


# --- resolving --------------------------------------------------------------------------------

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

    builtin = read_layer(builtin_defaults(), "default", "built-in defaults", None, "")
    recipe = read_layer(recipe_defaults or {}, recipe_label, f"{recipe_label} defaults", None,
                    f"{recipe_label} ")
    model_schema = None
    if recipe_defaults and "model" in recipe_defaults:
        model_schema = {k[len("model."):]: v for k, v in recipe.flat.items()
                        if k.startswith("model.")}
    layers = [builtin, recipe,
              read_layer(file_data or {}, file_label, file_label, model_schema, ""),
              read_layer(sets or {}, "--set", "--set", model_schema, "--set ")]

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
        sections[section] = SECTION_TYPES[section](**values)
    train: TrainConfig = sections["train"]  # as configured; lr/grad_accum replaced below
    parallel: ParallelConfig = sections["parallel"]
    model = {k[len("model."):]: v for k, v in merged.items() if k.startswith("model.")}

    warnings: list[str] = []
    dp = data_parallel(parallel.tp, world_size, nproc_per_node, nnodes, source, warnings)
    grad_accum, effective, batch_lines = batch(train, dp, parallel.tp, nproc_per_node,
                                                nnodes, source, warnings)
    lr, lr_line = scaled_lr(train, effective)
    if lr != train.lr:
        source["train.lr"] = f"scaled from {num(train.lr)}, {source['train.lr']}"
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
                        f"{train.steps}: the run ends before lr reaches {num(lr)}")
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



# --- in the workers -----------------------------------------------------------------------------

def run_id_of(env: Mapping[str, str]) -> str:
    """The run's id in a worker: ``MESHRUN_RUN_ID``, else torchrun's ``TORCHELASTIC_RUN_ID``,
    else ``local``."""
    rid = env.get("MESHRUN_RUN_ID") or env.get("TORCHELASTIC_RUN_ID") or ""
    return rid if rid and rid != "none" else "local"


def for_worker(recipe_name: str, env: Mapping[str, str], world_size: int, *,
               nproc_per_node: int | None = None, nnodes: int | None = None) -> JobConfig:
    """The job config a recipe's worker trains with, for a world of ``world_size``.

    ``MESHRUN_JOB_CONFIG`` from meshrun (a whole resolved config) is read back and checked
    against this world; a partial one written by hand is a layer over the recipe's
    defaults; without it, the recipe's defaults. The last two are resolved by :func:`resolve`,
    exactly as the planner resolves them: the same keys, checks and arithmetic (a tp that does
    not divide the world is refused here too). ``MESHRUN_CHECKPOINT_DIR`` replaces
    ``checkpoint.dir``; ``MESHRUN_STOP_AFTER_STEP=k`` sets ``train.stop_after``."""
    from ..recipes import get

    recipe = get(recipe_name)
    nproc = nproc_per_node or world_size
    nodes = nnodes or max(1, world_size // nproc)
    if nodes * nproc != world_size:
        nproc, nodes = world_size, 1
    given = _read_env(env)
    if given is not None:
        if given.get("recipe", recipe_name) != recipe_name:
            raise UsageError(f"{ENV_VAR} is for recipe {given['recipe']!r}, this worker runs "
                             f"{recipe_name!r}", subject=ENV_VAR,
                             hint="run the recipe the config names, or unset " + ENV_VAR,
                             code="job-config-other-recipe")
    if given is not None and "version" in given:  # written by meshrun: read it back, as is
        job = _in_world(JobConfig.from_dict(given, where=ENV_VAR), world_size)
        if job.world_size != world_size:
            raise UsageError(f"{ENV_VAR} was resolved for world size {job.world_size}, this "
                             f"run has {world_size} processes", subject=ENV_VAR,
                             hint="start the workers with meshrun run, which resolves it for "
                                  "the job's world size, or unset it",
                                  code="job-config-other-world")
    else:
        job = resolve(recipe_defaults={**recipe.defaults, "recipe": recipe_name},
                      file_data=given, sets=None, world_size=world_size,
                      nproc_per_node=nproc, nnodes=nodes, run_id=run_id_of(env),
                      config_path=ENV_VAR if given is not None else None)
    directory = env.get("MESHRUN_CHECKPOINT_DIR")
    if directory:
        job = replace(job, checkpoint=replace(job.checkpoint, dir=directory))
    stop = env.get("MESHRUN_STOP_AFTER_STEP", "").strip()
    if stop:
        if not stop.isdigit() or int(stop) < 1:
            raise UsageError(f"MESHRUN_STOP_AFTER_STEP={stop!r} is not a step number >= 1",
                             subject="MESHRUN_STOP_AFTER_STEP",
                             hint="set it to the last step to run, or unset it",
                             code="bad-stop-after-step")
        job = replace(job, train=replace(job.train, stop_after=int(stop)))
    return job

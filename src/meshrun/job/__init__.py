"""The job config: one TOML file, ``--set`` overrides and per-world-size profiles, resolved for
one world size with the batch and learning-rate arithmetic shown (docs/config.md). Pure.

* :mod:`.schema` — the dataclasses that are the schema (each field's default, meaning, range)
* :mod:`.layers` — reading a TOML file, ``--set`` and recipe defaults into checked layers
* :mod:`.arithmetic` — dp, gradient accumulation, effective batch, lr scaling
* :mod:`.config` — :func:`resolve` -> :class:`JobConfig`; the workers' copy
  (:meth:`JobConfig.to_env` / :func:`from_env` / :func:`for_worker`)
"""

from .config import ENV_VAR, JobConfig, for_worker, from_env, resolve, run_id_of
from .layers import TOP_LEVEL, load_file, parse_sets, recipe_name
from .schema import (
    ALL_KEYS,
    OPTIMIZERS,
    PRECISIONS,
    SCHEDULES,
    SCHEMA,
    CheckpointConfig,
    Knob,
    ParallelConfig,
    TrainConfig,
    builtin_defaults,
)

__all__ = ["ALL_KEYS", "ENV_VAR", "OPTIMIZERS", "PRECISIONS", "SCHEDULES", "SCHEMA", "TOP_LEVEL",
           "CheckpointConfig", "JobConfig", "Knob", "ParallelConfig", "TrainConfig",
           "builtin_defaults", "for_worker", "from_env", "load_file", "parse_sets",
           "recipe_name", "resolve", "run_id_of"]

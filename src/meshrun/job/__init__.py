"""The job config: one TOML file, ``--set`` overrides and per-world-size profiles, resolved for
one world size with the batch and learning-rate arithmetic shown. Pure (docs/config.md).
"""

from .config import (
    ALL_KEYS,
    ENV_VAR,
    SCHEMA,
    CheckpointConfig,
    JobConfig,
    Key,
    ParallelConfig,
    TrainConfig,
    builtin_defaults,
    from_env,
    load_file,
    parse_sets,
    recipe_name,
    resolve,
)

__all__ = ["ALL_KEYS", "ENV_VAR", "SCHEMA", "CheckpointConfig", "JobConfig", "Key",
           "ParallelConfig", "TrainConfig", "builtin_defaults", "from_env", "load_file",
           "parse_sets", "recipe_name", "resolve"]

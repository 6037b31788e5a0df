"""The plan's records: :class:`LaunchPlan` (what one node will run, and why), the worker
:class:`Command`, one worker variable (:class:`EnvVar`) and the job input the CLI read
(:class:`JobInput`). Pure data; the planner (:mod:`.planner`) builds them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from .. import __version__

DEFAULT_LOG_DIR = "logs"
DEFAULT_MASTER_PORT = 29500
DEFAULT_JOIN_TIMEOUT = 600
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class Command:
    """What each worker runs: ``python -u SCRIPT ARGS`` or ``python -u -m MODULE ARGS``."""

    target: str
    args: tuple[str, ...] = ()
    module: bool = False

    def argv(self) -> list[str]:
        return (["-m", self.target] if self.module else [self.target]) + list(self.args)

    def display(self) -> str:
        return " ".join(self.argv())


@dataclass(frozen=True)
class EnvVar:
    """One variable meshrun sets for the workers, and why."""

    name: str
    value: str
    reason: str


@dataclass(frozen=True)
class JobInput:
    """What the job config is made of, as the CLI read it: the recipe's defaults, the
    ``--config`` file's data, the ``--set`` overrides (see :mod:`meshrun.job`)."""

    recipe_defaults: Mapping | None = None
    file_data: Mapping | None = None
    sets: Mapping | None = None
    config_path: str | None = None
    # dotted keys the CLI put into ``sets`` from a flag of their own, and that flag
    # ({"recipe": "--recipe", "checkpoint.dir": "--checkpoint-dir"}): the source shown
    flags: Mapping[str, str] | None = None


@dataclass(frozen=True)
class LaunchPlan:
    nnodes: int
    node_rank: int
    nproc_per_node: int
    world_size: int
    global_ranks: tuple[int, ...]
    master_addr: str
    master_port: int  # 0: single node, a free port is chosen at launch
    run_id: str
    backend: str
    device: str  # "cuda" or "cpu"
    visible_devices: tuple[str, ...]
    gpu_names: tuple[str, ...]
    log_dir: str  # <log-dir>/<run-id>
    join_timeout: int
    env: tuple[EnvVar, ...]
    source: Mapping[str, str]
    platform: str
    platforms: tuple[str, ...]
    world_size_reading: str
    hostname: str
    command: Command | None = None
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    version: str = __version__
    job: Any = None  # meshrun.job.JobConfig when a recipe, --config or --set is given
    # `meshrun simulate`: the workers of every simulated node on this host (0: a real node)
    simulated_workers: int = 0
    # `--spares K`: the K highest node ranks start as hot spares (runtime/membership.py)
    spares: int = 0
    # `--nnodes MIN:MAX`: with no spare left the job shrinks to no fewer than this many
    # training nodes (None: a lost node with no spare left ends the job; docs/elastic.md)
    min_nodes: int | None = None

    @property
    def is_master(self) -> bool:
        return self.node_rank == 0

    @property
    def seated_nodes(self) -> int:
        """The nodes that train at the start (the others wait as spares)."""
        return self.nnodes - self.spares

    @property
    def is_spare(self) -> bool:
        return self.node_rank >= self.seated_nodes

    def env_dict(self) -> dict[str, str]:
        return {var.name: var.value for var in self.env}

    def to_json(self) -> dict:
        data = asdict(replace(self, job=None))
        data["job"] = self.job.to_dict() if self.job is not None else None
        data["global_ranks"] = list(self.global_ranks)
        data["visible_devices"] = list(self.visible_devices)
        data["env"] = self.env_dict()
        data["env_reasons"] = {var.name: var.reason for var in self.env}
        data["source"] = dict(self.source)
        data["command"] = self.command.argv() if self.command else None
        return data

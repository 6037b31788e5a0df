"""The plan: host facts + topology + flags + job config -> :class:`LaunchPlan`. Pure.

* :mod:`.model` — the records (:class:`LaunchPlan`, :class:`Command`, :class:`EnvVar`,
  :class:`JobInput`) and the plan's constants (default port, run-id pattern)
* :mod:`.planner` — :func:`make_plan`, which reads nothing but its arguments (a 64-node plan
  is a unit test) and validates everything
* :mod:`.describe` — the banner: every value with where it came from

``import meshrun.plan`` never imports torch.
"""

from .describe import brief, describe, rank_span, ranks_phrase
from .model import (
    DEFAULT_JOIN_TIMEOUT,
    DEFAULT_LOG_DIR,
    DEFAULT_MASTER_PORT,
    RUN_ID,
    Command,
    EnvVar,
    JobInput,
    LaunchPlan,
)
from .planner import make_plan, read_world_size, threads_for

__all__ = ["DEFAULT_JOIN_TIMEOUT", "DEFAULT_LOG_DIR", "DEFAULT_MASTER_PORT", "RUN_ID", "Command",
           "EnvVar", "JobInput", "LaunchPlan", "brief", "describe", "make_plan", "rank_span",
           "ranks_phrase", "read_world_size", "threads_for"]

"""The plan: host facts + topology + flags + job config -> :class:`LaunchPlan`. Pure.

``import meshrun.plan`` never imports torch, and ``make_plan`` reads nothing but its
arguments (a 64-node plan is a unit test).
"""

from .planner import (
    DEFAULT_JOIN_TIMEOUT,
    DEFAULT_LOG_DIR,
    DEFAULT_MASTER_PORT,
    Command,
    EnvVar,
    JobInput,
    LaunchPlan,
    describe,
    make_plan,
    rank_span,
    ranks_phrase,
    read_world_size,
    threads_for,
)

__all__ = ["DEFAULT_JOIN_TIMEOUT", "DEFAULT_LOG_DIR", "DEFAULT_MASTER_PORT", "Command", "EnvVar",
           "JobInput", "LaunchPlan", "describe", "make_plan", "rank_span", "ranks_phrase",
           "read_world_size", "threads_for"]

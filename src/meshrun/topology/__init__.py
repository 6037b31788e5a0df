"""Where am I: node count, node rank, master address and port, from flags and variables.

Pure: :func:`detect` is handed the environment as a mapping, the CLI flags and
the few host facts detection needs; it reads nothing else. Precedence:

1. command-line flags (``--nnodes`` ...),
2. ``MESHRUN_<NAME>`` variables (``MESHRUN_NNODES`` ...),
3. platform conventions, one module each in this package. Explicit values from
   two platforms must agree (else one clear error naming both variables);
   derived values (a port made from a job id, the first host of a node list,
   a documented default) yield to explicit ones.

Every resolved value is a :class:`~meshrun.topology.base.Sourced` that records
where it came from, so the plan can say it. A master address is kept bare:
``[fd00::1]`` from any flag or variable becomes ``fd00::1`` (what getaddrinfo and
torch's TCPStore take; see :mod:`meshrun.topology.address`), so two sources that
write the same IPv6 address with and without brackets agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import UsageError
from . import (
    awsbatch,
    azureml,
    env_style,
    kubernetes,
    lsf,
    mpi,
    nnodes_style,
    sagemaker,
    skypilot,
    slurm,
    torchrun_style,
    volcano,
)
from .address import unbracket
from .base import FIELDS, Claims, HostInfo, Sourced, parse_int, parse_nnodes

# Most specific first: the first detected one names the platform in the plan.
DETECTORS = (
    slurm, lsf, sagemaker, awsbatch, skypilot, volcano, torchrun_style, azureml, kubernetes,
    mpi, env_style, nnodes_style,
)

WORLD_SIZE_MEANS = ("nodes", "processes")

# What detect() reads itself: plain MASTER_ADDR/MASTER_PORT beside any platform, and the two
# variables torch's elastic agent sets in every worker (meshrun refuses to start inside one).
WORKER_READS = ("TORCHELASTIC_RUN_ID", "LOCAL_RANK")
READS = ("MASTER_ADDR", "MASTER_PORT", *WORKER_READS)

# Every list of platform variables is derived from the detectors' own declarations (READS,
# FAMILIES, CONTEXT beside each detect()): a simulated node's environment, the variables a
# submission file may not set with --env, the tests' neutral environment.
PLATFORM_VARIABLES = frozenset((*READS, *(name for d in DETECTORS for name in d.READS)))
PLATFORM_FAMILIES = tuple(dict.fromkeys(p for d in DETECTORS for p in getattr(d, "FAMILIES", ())))
CONTEXT_VARIABLES = frozenset(name for d in DETECTORS for name in getattr(d, "CONTEXT", ()))


def platform_variable(name: str) -> bool:
    """Whether ``name`` is a variable through which a platform (or a launcher above meshrun)
    tells this node its place: one a detector reads as the platform's own."""
    return name in PLATFORM_VARIABLES or name.startswith(PLATFORM_FAMILIES)


def _flag(help_text: str, render: str) -> Any:
    """A node flag: its ``--help`` text, and what a submission file (``meshrun render``) does
    with it: ``"file"`` writes it from render's own flag, ``"platform"`` leaves it to the
    platform (each node learns its rank there), ``"run"`` passes it to every node's
    ``meshrun run``."""
    return field(default=None, metadata={"help": help_text, "render": render})


@dataclass(frozen=True)
class Flags:
    """The node flags of ``run``/``plan``/``simulate``/``render``, as typed (strings or None).

    Each has a ``MESHRUN_<NAME>`` variable; a flag beats its variable. The CLI's flags, their
    help and what a submission file does with each are read off these fields.
    """

    nnodes: str | None = _flag("number of nodes (machines) in the job", "file")
    node_rank: str | None = _flag("this node's index, 0 on the master", "platform")
    nproc_per_node: str | None = _flag("worker processes on this node (default: one per "
                                       "visible GPU, or 1 without GPUs)", "file")
    master_addr: str | None = _flag("address of node 0, which hosts the rendezvous store", "file")
    master_port: str | None = _flag("port of the rendezvous store on node 0", "file")
    run_id: str | None = _flag("job id shared by all nodes (default: the platform's job id)",
                               "file")
    log_dir: str | None = _flag("folder for logs; a run writes <log-dir>/<run-id>/ "
                                "(default ./logs)", "file")
    world_size_means: str | None = _flag("force the reading of WORLD_SIZE: nodes or processes",
                                         "run")
    join_timeout: str | None = _flag("seconds to wait for every node to join (default 600)",
                                     "run")
    spares: str | None = _flag("of the nodes, keep this many (the highest ranks) as hot "
                               "spares: they join and wait, and take a lost node's place "
                               "(default 0)", "run")

    @staticmethod
    def flag_name(name: str) -> str:
        return "--" + name.replace("_", "-")

    @staticmethod
    def env_name(name: str) -> str:
        return "MESHRUN_" + name.upper()


# MESHRUN_NNODES ... : the variables of the node flags.
FLAG_VARIABLES = frozenset(Flags.env_name(f.name) for f in fields(Flags))


@dataclass(frozen=True)
class Topology:
    """Detected values, each with its source; None where nothing said anything."""

    nnodes: Sourced | None = None
    node_rank: Sourced | None = None
    nproc_per_node: Sourced | None = None
    master_addr: Sourced | None = None
    master_port: Sourced | None = None
    run_id: Sourced | None = None
    world_size: Sourced | None = None
    world_size_means: Sourced | None = None
    local_agents: Sourced | None = None
    log_dir: Sourced | None = None
    join_timeout: Sourced | None = None
    spares: Sourced | None = None
    platform: str = "single-node"
    platforms: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


# name -> (minimum, maximum): beyond the maxima no job runs (a typo, or a stranger's input),
# and planning such a job would build tuples of that size
MAX_NODES = 100_000
MAX_PROCS_PER_NODE = 4096
_INT_FIELDS = {"nnodes": (1, MAX_NODES), "node_rank": (0, MAX_NODES - 1),
               "nproc_per_node": (1, MAX_PROCS_PER_NODE), "master_port": (1, 65535),
               "join_timeout": (1, 10**7), "spares": (0, MAX_NODES - 1)}


def detect(env: Mapping[str, str], flags: Flags = Flags(), host: HostInfo = HostInfo()) -> Topology:
    """Resolve this node's place in the job from ``env`` and ``flags`` (see module doc)."""
    _refuse_inside_worker(env)
    chosen: dict[str, Sourced] = {}
    for f in fields(Flags):
        name = f.name
        raw = getattr(flags, name)
        label = Flags.flag_name(name)
        if raw is None or str(raw).strip() == "":
            raw, label = env.get(Flags.env_name(name)), Flags.env_name(name)
        if raw is None or str(raw).strip() == "":
            continue
        chosen[name] = Sourced(_parse(name, str(raw), label), label)

    detected: list[Claims] = [c for c in (d.detect(env, host) for d in DETECTORS) if c]
    master = _master_env(env)
    if master is not None:
        detected.append(master)
    for claims in detected:  # [fd00::1] -> fd00::1, in one place for every platform
        if claims.master_addr is not None and isinstance(claims.master_addr.value, str):
            claims.master_addr = replace(claims.master_addr,
                                         value=unbracket(claims.master_addr.value))
    for name in (*FIELDS, "world_size", "local_agents"):
        if name in chosen:
            continue
        value = _merge(name, detected)
        if value is not None:
            chosen[name] = value

    labels = tuple(dict.fromkeys(c.platform for c in detected if c.platform))
    notes = tuple(note for c in detected for note in c.notes)
    if not labels:
        # No platform convention: the node values (if any) came from flags / MESHRUN_*.
        manual = any(name in chosen for name in ("nnodes", "node_rank", "master_addr"))
        labels_0 = "manual (flags / MESHRUN_*)" if manual else "single-node"
    else:
        labels_0 = labels[0]
    return Topology(platform=labels_0, platforms=labels,
                    notes=notes, **chosen)


def _parse(name: str, raw: str, label: str):
    if name == "master_port":
        return parse_int(raw, label, minimum=1, maximum=65535)
    if name == "nnodes":
        return parse_nnodes(raw, label, limit=_INT_FIELDS[name][1])
    if name in _INT_FIELDS:
        low, high = _INT_FIELDS[name]
        return parse_int(raw, label, minimum=low, limit=high)
    if name == "world_size_means":
        value = raw.strip().lower()
        if value not in WORLD_SIZE_MEANS:
            raise UsageError(f"{label} {raw!r} is neither 'nodes' nor 'processes'", subject=label,
                             hint=f"use {label} nodes (WORLD_SIZE counts machines) or "
                                  f"{label} processes (WORLD_SIZE counts GPUs/processes)",
                                  code="bad-world-size-means")
        return value
    if name == "master_addr":
        return unbracket(raw)
    return raw.strip()


def _merge(name: str, detected: list[Claims]) -> Sourced | None:
    candidates = [(c.platform, getattr(c, name)) for c in detected if getattr(c, name) is not None]
    explicit = [(p, s) for p, s in candidates if s.explicit]
    for (p1, s1), (p2, s2) in zip(explicit, explicit[1:]):
        if s1.value != s2.value:
            what = name.replace("_", " ")
            raise UsageError(
                f"{_show(s1)} and {_show(s2)} disagree on the {what}", subject=s1.source,
                hint=f"unset the wrong one, or choose with {Flags.flag_name(name)} "
                     f"(or {Flags.env_name(name)})" if name in FIELDS else "unset the wrong one",
                     code="platform-conflict")
    if explicit:
        return explicit[0][1]
    return candidates[0][1] if candidates else None


def _show(value: Sourced) -> str:
    source = value.source
    if source.isupper() or source.replace("_", "").isalnum():
        return f"{source}={value.value}"
    return f"{value.value} ({source})"


def _master_env(env: Mapping[str, str]) -> Claims | None:
    """Plain MASTER_ADDR/MASTER_PORT, whatever else is set (e.g. exported in an sbatch script)."""
    addr = env.get("MASTER_ADDR", "").strip()
    port = env.get("MASTER_PORT", "").strip()
    if not (addr or port):
        return None
    claims = Claims(platform="")
    if addr:
        claims.master_addr = Sourced(addr, "MASTER_ADDR")
    if port:
        claims.master_port = Sourced(parse_int(port, "MASTER_PORT", minimum=1, maximum=65535),
                                     "MASTER_PORT")
    return claims


def _refuse_inside_worker(env: Mapping[str, str]) -> None:
    for name in WORKER_READS:
        if env.get(name, "").strip():
            raise UsageError(
                f"{name}={env[name]} is set: this is already a worker started by a launcher "
                "(torchrun, meshrun, accelerate), and meshrun here would start workers of its own",
                subject=name, hint="call your script directly inside workers; if this is not a "
                                   f"worker, unset {name}", code="nested-launch")


__all__ = [
    "CONTEXT_VARIABLES",
    "FLAG_VARIABLES",
    "PLATFORM_FAMILIES",
    "PLATFORM_VARIABLES",
    "Flags",
    "HostInfo",
    "Sourced",
    "Topology",
    "detect",
    "platform_variable",
]

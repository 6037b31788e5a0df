"""Shared pieces of topology detection: provenance-carrying values and claims.

Every platform module exposes ``detect(env, host) -> Claims | None``: what
that platform's variables say about this node, each value tagged with the
variable it came from. Detectors are pure: they read only the mapping they
are handed (and the :class:`HostInfo` that facts collected), never
``os.environ``, files, subprocesses or the network.

A value is *explicit* when a variable states it directly (``SLURM_NNODES``)
and *derived* when meshrun computed it (the first host of a SLURM node list,
a port made from a job id, a documented default). Explicit values from two
platforms that disagree are a contradiction and stop the plan; a derived
value yields to any explicit one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError


@dataclass(frozen=True)
class Sourced:
    """A value and where it came from (a flag, a variable, a derivation)."""

    value: Any
    source: str
    explicit: bool = True

    def describe(self) -> str:
        return self.source


@dataclass(frozen=True)
class HostInfo:
    """The few host facts detection may use (collected by :mod:`meshrun.facts`)."""

    hostname: str = ""
    # Text of files a platform points to by a variable (LSF's LSB_DJOB_RANKFILE),
    # keyed by the path; read once by facts so that detection stays pure.
    files: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Claims:
    """What one platform convention says about this node."""

    platform: str
    nnodes: Sourced | None = None
    node_rank: Sourced | None = None
    nproc_per_node: Sourced | None = None
    master_addr: Sourced | None = None
    master_port: Sourced | None = None
    run_id: Sourced | None = None
    # WORLD_SIZE as a platform exported it: nodes or processes, decided by the planner.
    world_size: Sourced | None = None
    # How many copies of meshrun the platform started on this node (srun tasks, MPI ranks).
    local_agents: Sourced | None = None
    notes: list[str] = field(default_factory=list)


FIELDS = ("nnodes", "node_rank", "nproc_per_node", "master_addr", "master_port", "run_id")


def read_int(env: Mapping[str, str], name: str, *, minimum: int = 0) -> Sourced | None:
    """``env[name]`` as an int >= minimum, or None when unset or empty."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    return Sourced(parse_int(raw, name, minimum=minimum), name)


MAX_INT = 10**7


def parse_int(raw: str, name: str, *, minimum: int = 0, maximum: int | None = None,
              what: str = "", limit: int = MAX_INT) -> int:
    """Parse a whole number named ``name`` (a flag or a variable), or raise one clear line.
    ``maximum``: the largest the value may be (said in every message); ``limit``: a sanity
    bound said only when passed (no count meshrun reads is larger than :data:`MAX_INT`)."""
    text = str(raw).strip()
    label = _label(name, raw)
    what = what or "a whole number"
    top = maximum if maximum is not None else limit
    try:
        if len(text) > 40 and text.lstrip("+-").isdigit():
            value = (top + 1) if not text.startswith("-") else minimum - 1  # not parsed
        else:
            value = int(text, 10) if len(text) <= 40 else int("x")
    except ValueError:
        raise UsageError(f"{label} is not {what}", subject=name,
                         hint=f"set {name} to {_example(name, minimum)}",
                         code="bad-number") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise UsageError(f"{label} is out of range (must be {bound})", subject=name,
                         hint=f"set {name} to {_example(name, minimum)}", code="bad-number")
    if value > limit:
        raise UsageError(f"{label} is out of range (must be {minimum}..{limit})", subject=name,
                         hint=f"set {name} to a whole number in {minimum}..{limit}",
                         code="bad-number")
    return value


def parse_ranks(raw: str, name: str) -> tuple[tuple[int, int], ...]:
    """Global ranks as a person writes them: ``0``, ``0,8``, ``0-7,16``, as (first, last)
    spans; one clear line for anything else."""
    spans = []
    for part in str(raw).split(","):
        low, dash, high = part.strip().partition("-")
        try:
            first = int(low, 10) if len(low) <= 12 else -1
            last = (int(high, 10) if len(high) <= 12 else -1) if dash else first
        except ValueError:
            first, last = -1, -2
        if first < 0 or last < first or last > MAX_INT:
            raise UsageError(f"{_label(name, raw)} is not a list of ranks", subject=name,
                             hint=f"give global ranks like {name} 0 or {name} 0,8 or "
                                  f"{name} 0-7", code="bad-ranks")
        spans.append((first, last))
    return tuple(spans)


def in_spans(rank: int, spans: tuple[tuple[int, int], ...]) -> bool:
    return any(first <= rank <= last for first, last in spans)


class NodeRange(int):
    """``--nnodes MIN:MAX``: the node count MAX (an int everywhere), with ``low`` = MIN, the
    fewest training nodes the job shrinks to when it loses nodes (docs/elastic.md)."""

    low: int

    def __new__(cls, high: int, low: int) -> NodeRange:
        value = super().__new__(cls, high)
        value.low = low
        return value


def parse_nnodes(raw: str, name: str, *, limit: int = MAX_INT) -> int:
    """A node count, from a flag or a variable: a whole number, or torchrun's ``MIN:MAX``.
    ``MIN:MAX`` with MIN < MAX (``--nnodes``, ``MESHRUN_NNODES``) is a :class:`NodeRange`: the
    platform starts MAX nodes and the job shrinks to no fewer than MIN. From a platform's
    variable (``PET_NNODES``) a real range is refused: there the platform decides how many
    nodes start, and meshrun's join waits for every one of them."""
    text = str(raw).strip()
    if ":" not in text:
        return parse_int(text, name, minimum=1, limit=limit)
    low, _, high = text.partition(":")
    lo = parse_int(low, name, minimum=1, limit=limit)
    hi = parse_int(high, name, minimum=1, limit=limit)
    if lo == hi:
        return hi
    if lo > hi:
        raise UsageError(f"{_label(name, raw)} has MIN {lo} above MAX {hi}", subject=name,
                         hint=f"write MIN:MAX, e.g. {_label(name, f'{hi}:{lo}', quote=False)}",
                         code="elastic-range")
    if name.startswith("--") or name.startswith("MESHRUN_"):
        return NodeRange(hi, lo)
    raise UsageError(f"{_label(name, raw)} is an elastic range from the platform; meshrun "
                     "starts with every node the platform starts, then shrinks on a loss "
                     "when told how far", subject=name,
                     hint=f"set {_label(name, str(hi), quote=False)} and pass --nnodes "
                          f"{lo}:{hi} (the job goes on with down to {lo} nodes; --spares K "
                          "keeps K waiting: docs/elastic.md)", code="elastic-range")


def _label(name: str, raw: str, quote: bool = True) -> str:
    """``--flag 'value'`` for a flag, ``NAME='value'`` for a variable, as the user writes it."""
    value = repr(raw) if quote else raw
    return f"{name} {value}" if name.startswith("--") else f"{name}={value}"


def _example(name: str, minimum: int) -> str:
    lowered = name.lower()
    if "port" in lowered:
        return "a port in 1..65535, e.g. 29500"
    if "rank" in lowered or "index" in lowered or "nodeid" in lowered:
        return "this node's index, counted from 0"
    return f"a whole number >= {minimum}, e.g. {max(minimum, 1) if minimum <= 1 else minimum}"


def first_of(env: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    """The first of ``names`` that is set and non-empty, as (name, value)."""
    for name in names:
        value = env.get(name)
        if value is not None and value.strip() != "":
            return name, value.strip()
    return None


def derived_port(job_id: str, source: str) -> Sourced:
    """A master port made from a numeric job id, the same on every node (Lightning's rule).

    15000 + the last four digits: 15000..24999, clear of torchrun's 29400/29500
    and of Linux's default ephemeral range (32768..60999).
    """
    digits = "".join(ch for ch in job_id if ch.isdigit())[-4:] or "0"
    port = 15000 + int(digits)
    return Sourced(port, f"derived from {source}={job_id} (15000 + last 4 digits)", explicit=False)


def expand_hostlist(text: str) -> list[str]:
    """Expand a SLURM compressed host list: ``gpu[01-03,07],cpu1`` -> gpu01 gpu02 gpu03 gpu07 cpu1.

    Several bracket groups in one name multiply (``r[1-2]n[1-2]`` -> r1n1 r1n2 r2n1 r2n2),
    and zero padding is kept (``[08-10]`` -> 08 09 10).
    """
    hosts: list[str] = []
    for item in _split_top_level(text.strip()):
        if item:
            hosts.extend(_expand_one(item))
    return hosts


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in host list {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise ValueError(f"unbalanced '[' in host list {text!r}")
    parts.append("".join(current))
    return parts


def _expand_one(item: str) -> list[str]:
    start = item.find("[")
    if start < 0:
        return [item]
    end = item.index("]", start)
    prefix, body, rest = item[:start], item[start + 1:end], item[end + 1:]
    tails = _expand_one(rest) if rest else [""]
    out = []
    for piece in body.split(","):
        if "-" in piece:
            lo, hi = piece.split("-", 1)
            width = len(lo)
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ValueError(f"bad range {piece!r} in host list")
            values = [str(n).zfill(width) for n in range(int(lo), int(hi) + 1)]
        else:
            values = [piece]
        for value in values:
            out.extend(prefix + value + tail for tail in tails)
    return out


def expand_tasks_per_node(text: str) -> list[int]:
    """SLURM's ``SLURM_TASKS_PER_NODE`` form: ``2(x3),1`` -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "(x" in part:
            count, times = part.split("(x", 1)
            counts.extend([int(count)] * int(times.rstrip(")")))
        else:
            counts.append(int(part))
    return counts

"""The per-node network policy (the lint is :mod:`.lint`). Pure: facts + env in, records out.

:func:`network_env` turns this node's :class:`~meshrun.facts.net.NetFacts`, the node
count, the device kind and the user's environment into the variables this node's
workers get, each with a one-line reason (``meshrun plan`` prints them):

======================  ===========================================================
``GLOO_SOCKET_IFNAME``  the interface routing to the master (several nodes only)
``NCCL_SOCKET_IFNAME``  the same interface, exact match (``=eth0``); GPU jobs only
``NCCL_IB_HCA``         the active RDMA ports, exact (``=mlx5_0:1,mlx5_3:1``)
``NCCL_IB_GID_INDEX``   RoCE ports: the RoCE v2 entry of the GID table (IPv4-mapped)
``NCCL_IB_DISABLE=1``   no active InfiniBand/RoCE port: TCP sockets it is
``NCCL_NET_GDR_LEVEL``  ``PHB`` when nvidia_peermem is loaded (GPUDirect RDMA)
``NCCL_BUFFSIZE``       by node count: 16 MiB up to 7 nodes, 32 MiB from 8
``MESHRUN_PG_TIMEOUT``  by node count: 3600 s (1 node), 7200 s (2-7), 14400 s (8+)
======================  ===========================================================

Interface names may differ per node (``eth0`` here, ``ens1f0`` there): each node
picks its own. Loopback, Docker bridges (``docker*``, ``br-<hex>``) and the host
ends of veth pairs (``veth*``) are never picked; a container's own ``eth0``, itself
one end of a veth pair, is. CPU jobs (gloo) get only ``GLOO_SOCKET_IFNAME`` and
``MESHRUN_PG_TIMEOUT``: the NCCL variables would be read by nothing.

A variable already in the user's environment is never changed: it is left out of
the result (the workers inherit it), and when meshrun would have chosen otherwise
a warning says so. ``NCCL_TIMEOUT`` is never set -- neither NCCL nor torch reads it;
the process-group timeout is ``MESHRUN_PG_TIMEOUT``, which
:func:`meshrun.init_distributed` passes to ``init_process_group(timeout=...)``.
``TORCH_NCCL_ASYNC_ERROR_HANDLING`` / ``TORCH_NCCL_BLOCKING_WAIT`` are left at
torch's defaults (async error handling 3, "tear down without cleanup", since 2.2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..facts.net import Interface, NetFacts
from ..plan.model import EnvVar
from .syntax import hca_selection, parse_float, parse_int, selects, split_names

MiB = 1 << 20
DEVICES = ("cuda", "cpu")
GDR_LEVEL = "PHB"

# (first node count, process-group timeout in s, NCCL_BUFFSIZE in bytes, label) -- seed 001
SCALE_TABLE = (
    (1, 3600, 16 * MiB, "1 node"),
    (2, 7200, 16 * MiB, "2-7 nodes"),
    (8, 14400, 32 * MiB, "8+ nodes"),
)


@dataclass(frozen=True)
class NetPolicy:
    """What :func:`network_env` decided for this node."""

    env: tuple[EnvVar, ...] = ()
    warnings: tuple[str, ...] = ()   # the user's value differs from meshrun's choice
    notes: tuple[str, ...] = ()      # what meshrun chose not to set, and why

    def env_dict(self) -> dict[str, str]:
        return {var.name: var.value for var in self.env}


@dataclass(frozen=True)
class IfaceChoice:
    """The interface for socket traffic to other nodes, or None, and why."""

    name: str | None
    reason: str


@dataclass(frozen=True)
class Scale:
    """The node-count row of :data:`SCALE_TABLE` for one job."""

    pg_timeout_s: int
    buffsize: int
    label: str


def scale_for(nnodes: int) -> Scale:
    """Process-group timeout and NCCL buffer size for ``nnodes`` nodes (seed 001's table)."""
    if nnodes < 1:
        raise ValueError(f"nnodes must be >= 1, not {nnodes}")
    row = [r for r in SCALE_TABLE if nnodes >= r[0]][-1]
    return Scale(pg_timeout_s=row[1], buffsize=row[2], label=row[3])


# --- the interface --------------------------------------------------------------------------

def never_chosen(iface: Interface) -> str | None:
    """Why ``iface`` must not carry traffic between nodes, or None when it may."""
    if iface.kind == "loopback":
        return f"{iface.name} is loopback: its traffic never leaves this host"
    if iface.kind == "docker":
        return f"{iface.name} is a Docker bridge: other nodes cannot reach it"
    if iface.name.startswith("veth"):
        return f"{iface.name} is the host end of a container's veth pair"
    if iface.state == "down":
        return f"{iface.name} is down"
    return None


def choose_socket_iface(facts: NetFacts) -> IfaceChoice:
    """The interface holding this host's source address towards the master, if usable."""
    master = facts.master_addr or "the master"
    if facts.route_source_addr is None:
        why = next((e for e in facts.errors if e.startswith("route to master")),
                   f"route to master {master}: not looked up")
        return IfaceChoice(None, why)
    if facts.route_iface is None:
        return IfaceChoice(None, f"no interface of this host holds {facts.route_source_addr}, "
                                 f"the source address towards master {master}")
    iface = facts.iface(facts.route_iface)
    if iface is None:
        return IfaceChoice(None, f"{facts.route_iface} is not under "
                                 f"{facts.sysfs_root}/class/net")
    refused = never_chosen(iface)
    if refused:
        return IfaceChoice(None, f"master {master} is reached from {facts.route_source_addr}, "
                                 f"but {refused}")
    return IfaceChoice(iface.name, f"routes to master {master} (source address "
                                   f"{facts.route_source_addr})")


# --- RDMA -----------------------------------------------------------------------------------

def roce_v2_gid_index(port, prefer_addr: str | None = None) -> int | None:
    """The GID index NCCL should use on a RoCE port: the first "RoCE v2" entry whose GID is
    an IPv4-mapped address, the one holding ``prefer_addr`` if any; else the first RoCE v2
    entry at all; None when the table has no RoCE v2 entry."""
    v2 = [g for g in port.gids if g.roce_v2]
    mapped = [g for g in v2 if g.ipv4]
    if prefer_addr:
        for gid in mapped:
            if gid.ipv4 == prefer_addr:
                return gid.index
    if mapped:
        return mapped[0].index
    return v2[0].index if v2 else None


def ports_text(pairs) -> str:
    return ", ".join(f"{d.name}:{p.number}" for d, p in pairs)


# --- the policy -----------------------------------------------------------------------------

def network_env(facts: NetFacts, *, nnodes: int, device: str,
                user_env: Mapping[str, str], simulated: bool = False) -> NetPolicy:
    """This node's network variables (see the module docstring). Pure.

    ``simulated``: every node runs on this host (``meshrun simulate``), over loopback."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")
    scale = scale_for(nnodes)
    out = _Builder(user_env)
    gpu = device == "cuda"

    # Socket interface: gloo always (torch uses gloo for CPU collectives too), NCCL on GPUs.
    if nnodes == 1:
        out.note("GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME not set: one node, no traffic "
                 "between nodes")
    elif simulated:
        out.note("GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME not set: the simulated nodes share "
                 "this host and talk over loopback")
    else:
        choice = choose_socket_iface(facts)
        if choice.name is None:
            out.note(f"GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME not set: {choice.reason}; "
                     "gloo and NCCL choose an interface themselves")
        else:
            out.offer("GLOO_SOCKET_IFNAME", choice.name, choice.reason,
                      same=lambda user: choice.name in split_names(user), shown=choice.name)
            if gpu:
                out.offer("NCCL_SOCKET_IFNAME", f"={choice.name}",
                          f"{choice.reason}; '=' matches this exact name",
                          same=lambda user: selects(user, choice.name), shown=choice.name,
                          why=choice.reason)

    if gpu:
        _rdma(facts, out)
        out.offer("NCCL_BUFFSIZE", str(scale.buffsize),
                  f"NCCL buffer size for {scale.label}: {scale.buffsize // MiB} MiB (NCCL's "
                  "default is 4 MiB)", same=lambda user: parse_int(user) == scale.buffsize)
    else:
        out.note("no NCCL variables: CPU workers use gloo")

    hours = scale.pg_timeout_s / 3600
    out.offer("MESHRUN_PG_TIMEOUT", str(scale.pg_timeout_s),
              f"process-group timeout for {scale.label} ({hours:g} h): a collective waiting "
              "longer fails; read by meshrun.init_distributed and the recipes only: a script "
              "calling init_process_group itself keeps torch's default (NCCL 10 min, gloo "
              "30 min) unless it passes timeout=",
              same=lambda user: parse_float(user) == scale.pg_timeout_s)
    return out.policy()


def _rdma(facts: NetFacts, out: _Builder) -> None:
    unreadable = [e for e in facts.errors if e.startswith("infiniband:")]
    if unreadable:
        out.note(f"InfiniBand/RoCE left to NCCL: {unreadable[0]}")
        return
    active = facts.active_ib_ports
    inactive = [(d, p) for d in facts.ib_devices for p in d.ports if not p.active]
    if not active:
        if facts.ib_devices:
            seen = "; ".join(f"{d.name} {p.describe()}" for d, p in inactive) or \
                   ", ".join(f"{d.name} (no ports)" for d in facts.ib_devices)
            why = f"no active InfiniBand/RoCE port ({seen})"
        else:
            why = f"no RDMA device under {facts.sysfs_root}/class/infiniband"
        out.offer("NCCL_IB_DISABLE", "1", f"{why}: NCCL uses TCP sockets",
                  same=lambda user: user.strip() == "1")
        if facts.peermem:
            out.note(f"NCCL_NET_GDR_LEVEL not set: {facts.peermem} is loaded but there is no "
                     "active RDMA port")
        return

    if out.user.get("NCCL_IB_DISABLE", "").strip() == "1":
        out.warn(f"NCCL_IB_DISABLE=1 set by you; this node has active RDMA ports "
                 f"({ports_text(active)}): meshrun would use them")
        out.note("NCCL_IB_HCA/NCCL_IB_GID_INDEX/NCCL_NET_GDR_LEVEL not set: you disabled "
                 "InfiniBand")
        return

    skipped = ""
    if inactive:
        skipped = "; skipped: " + ", ".join(f"{d.name} {p.describe()}" for d, p in inactive)
    kinds = sorted({"RoCE" if p.roce else "InfiniBand" for _, p in active})
    wanted = {(d.name, p.number) for d, p in active}
    out.offer("NCCL_IB_HCA", "=" + ",".join(f"{d.name}:{p.number}" for d, p in active),
              f"active {'/'.join(kinds)} ports{skipped}",
              same=lambda user: hca_selection(user, facts) == wanted,
              shown=ports_text(active))

    roce = [(d, p) for d, p in active if p.roce]
    if roce:
        found = {f"{d.name}:{p.number}": roce_v2_gid_index(p, facts.route_source_addr)
                 for d, p in roce}
        indices = set(found.values())
        if None in indices:
            missing = ", ".join(k for k, v in found.items() if v is None)
            out.note(f"NCCL_IB_GID_INDEX not set: no RoCE v2 GID on {missing}; NCCL >= 2.21 "
                     "selects one itself")
        elif len(indices) > 1:
            listed = ", ".join(f"{k}: {v}" for k, v in found.items())
            out.note(f"NCCL_IB_GID_INDEX not set: RoCE ports disagree ({listed}); "
                     "NCCL >= 2.21 selects one per device itself")
        else:
            index = indices.pop()
            d, p = roce[0]
            gid = next(g for g in p.gids if g.index == index)
            on = f" on {gid.ndev}" if gid.ndev else ""
            addr = gid.ipv4 or gid.gid
            out.offer("NCCL_IB_GID_INDEX", str(index),
                      f"RoCE v2 GID of {d.name}:{p.number} ({addr}{on}); NCCL >= 2.21 finds "
                      "it too, older NCCL needs it", same=lambda user: parse_int(user) == index)

    if facts.peermem:
        out.offer("NCCL_NET_GDR_LEVEL", GDR_LEVEL,
                  f"{facts.peermem} is loaded: GPUDirect RDMA when GPU and NIC share a NUMA "
                  "node (PHB; SYS would also cross the CPU interconnect)",
                  same=lambda user: user.strip().upper() == GDR_LEVEL)
    else:
        out.note("NCCL_NET_GDR_LEVEL not set: nvidia_peermem is not loaded (NCCL may still "
                 "use GPUDirect RDMA through dma-buf)")


class _Builder:
    def __init__(self, user: Mapping[str, str]) -> None:
        self.user = user
        self.env: list[EnvVar] = []
        self.warnings: list[str] = []
        self.notes: list[str] = []

    def offer(self, name: str, value: str, reason: str, *, same=None,
              shown: str | None = None, why: str | None = None) -> None:
        """Set ``name`` unless the user did; warn when the user's value differs.

        ``same(user_value)`` says whether the user's value amounts to meshrun's choice;
        ``shown``/``why`` word the warning when the raw value would read oddly there.
        """
        if name not in self.user:
            self.env.append(EnvVar(name, value, reason))
            return
        theirs = self.user[name]
        equal = same(theirs) if same else theirs.strip() == value
        if not equal:
            verb = "pick" if shown else "set"
            self.warnings.append(f"{name}={theirs} set by you; meshrun would {verb} "
                                 f"{shown or value} ({why or reason})")

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def policy(self) -> NetPolicy:
        return NetPolicy(tuple(self.env), tuple(self.warnings), tuple(self.notes))

"""The per-node network policy and the environment lint. Pure: facts + env in, records out.

:func:`network_env` turns this node's :class:`~meshrun.netfacts.NetFacts`, the node
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

:func:`lint_env` checks an environment for NCCL/torch variables that are misspelt,
read by nothing, deprecated, removed, or set to values that cannot work on this
host. The codes are in :data:`LINT_CODES` and docs/network.md.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from ..facts.net import Interface, NetFacts

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
class EnvVar:
    """One variable meshrun sets for the workers, and why (same fields as
    :class:`meshrun.plan.EnvVar`; kept here so the planner can import this module)."""

    name: str
    value: str
    reason: str


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


def _ports_text(pairs) -> str:
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
                      same=lambda user: choice.name in _names(user), shown=choice.name)
            if gpu:
                out.offer("NCCL_SOCKET_IFNAME", f"={choice.name}",
                          f"{choice.reason}; '=' matches this exact name",
                          same=lambda user: _selects(user, choice.name), shown=choice.name,
                          why=choice.reason)

    if gpu:
        _rdma(facts, out)
        out.offer("NCCL_BUFFSIZE", str(scale.buffsize),
                  f"NCCL buffer size for {scale.label}: {scale.buffsize // MiB} MiB (NCCL's "
                  "default is 4 MiB)", same=lambda user: _int(user) == scale.buffsize)
    else:
        out.note("no NCCL variables: CPU workers use gloo")

    hours = scale.pg_timeout_s / 3600
    out.offer("MESHRUN_PG_TIMEOUT", str(scale.pg_timeout_s),
              f"process-group timeout for {scale.label} ({hours:g} h): a collective waiting "
              "longer fails; read by meshrun.init_distributed and the recipes only: a script "
              "calling init_process_group itself keeps torch's default (NCCL 10 min, gloo "
              "30 min) unless it passes timeout=",
              same=lambda user: _float(user) == scale.pg_timeout_s)
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
                 f"({_ports_text(active)}): meshrun would use them")
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
              same=lambda user: _hca_selection(user, facts) == wanted,
              shown=_ports_text(active))

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
                      "it too, older NCCL needs it", same=lambda user: _int(user) == index)

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


def _int(text: str) -> int | None:
    """An integer as NCCL reads it (strtoll base 0: ``16777216``, ``0x1000000``), or None."""
    text = text.strip()
    for base in (0, 10):
        try:
            return int(text, base)
        except ValueError:
            continue
    return None


def _float(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


# --- NCCL's list syntax ---------------------------------------------------------------------

@dataclass(frozen=True)
class NcclList:
    """A parsed NCCL_SOCKET_IFNAME / NCCL_IB_HCA value: ``[^][=]name[:port],...``.

    ``^`` makes it an exclude list; ``=`` makes every token an exact name (otherwise
    each token is a prefix: ``mlx5_1`` also selects ``mlx5_10``).
    """

    exclude: bool
    exact: bool
    tokens: tuple[tuple[str, int | None], ...]

    def matches(self, name: str, port: int | None = None) -> bool:
        """True when some token names ``name`` (and ``port``, if the token has one)."""
        for token, token_port in self.tokens:
            hit = name == token if self.exact else name.startswith(token)
            if hit and (token_port is None or port is None or token_port == port):
                return True
        return False

    def selects(self, name: str, port: int | None = None) -> bool:
        """Whether NCCL would use ``name`` (``port``) under this list."""
        return self.matches(name, port) != self.exclude


def parse_nccl_list(text: str, *, ports: bool = False) -> NcclList:
    """Parse NCCL's interface/HCA list syntax; ValueError on a malformed port."""
    value = text.strip()
    exclude = value.startswith("^")
    value = value[1:] if exclude else value
    exact = value.startswith("=")
    value = value[1:] if exact else value
    tokens: list[tuple[str, int | None]] = []
    for raw in value.split(","):
        raw = raw.strip()
        if not raw:
            continue
        port = None
        if ports and ":" in raw:
            raw, _, port_text = raw.partition(":")
            if not port_text.isdigit():
                raise ValueError(f"port {port_text!r} of {raw} is not a number")
            port = int(port_text)
        tokens.append((raw, port))
    return NcclList(exclude, exact, tuple(tokens))


def _selects(text: str, name: str) -> bool:
    try:
        return parse_nccl_list(text).selects(name)
    except ValueError:
        return False


def _hca_selection(text: str, facts: NetFacts) -> set[tuple[str, int]]:
    """The active ports NCCL would use under an NCCL_IB_HCA value."""
    try:
        spec = parse_nccl_list(text, ports=True)
    except ValueError:
        return set()
    return {(d.name, p.number) for d, p in facts.active_ib_ports if spec.selects(d.name, p.number)}


# --- the lint -------------------------------------------------------------------------------

LINT_CODES = {
    "env-unknown": "an NCCL_* / TORCH_NCCL_* name nothing reads (likely a typo)",
    "env-unread": "a variable people set for a timeout that nothing reads",
    "env-deprecated": "an old name still read, with a deprecation warning",
    "env-removed": "a variable NCCL no longer reads",
    "env-bad-value": "a value NCCL/torch rejects or ignores",
    "env-legacy-value": "an accepted but discouraged value",
    "env-no-such-iface": "names a network interface this host lacks",
    "env-iface-unusable": "selects only interfaces that are down or have no address",
    "env-no-such-hca": "names an RDMA device or port this host lacks",
    "env-ib-disabled": "InfiniBand settings while NCCL_IB_DISABLE=1",
    "env-ib-unavailable": "InfiniBand settings on a host without an active RDMA port",
    "env-gid-index": "NCCL_IB_GID_INDEX does not fit this host's GID tables",
    "env-no-effect": "set, but without effect as combined",
}
SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    """One lint result: a kebab-case ``code``, the variable (``subject``), what is wrong
    and the fix."""

    code: str
    severity: str
    subject: str
    message: str
    hint: str = ""

    def __post_init__(self) -> None:
        if self.code not in LINT_CODES:
            raise ValueError(f"unknown lint code {self.code!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {', '.join(SEVERITIES)}")

    def line(self) -> str:
        text = f"meshrun: {self.severity}: {self.message}"
        return text + (f"; fix: {self.hint}" if self.hint else "")

    def to_json(self) -> dict:
        return asdict(self)


# NCCL 2.18-2.29 (the "Environment Variables" page, plus parameters in NCCL's source that
# people set). Names read by other tools (build systems, container images) are known too.
KNOWN_NCCL = frozenset("""
NCCL_SOCKET_IFNAME NCCL_SOCKET_FAMILY NCCL_SOCKET_RETRY_CNT NCCL_SOCKET_RETRY_SLEEP_MSEC
NCCL_SOCKET_POLL_TIMEOUT_MSEC NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD NCCL_CROSS_NIC
NCCL_IB_HCA NCCL_IB_TIMEOUT NCCL_IB_RETRY_CNT NCCL_IB_GID_INDEX NCCL_IB_ADDR_FAMILY
NCCL_IB_ADDR_RANGE NCCL_IB_ROCE_VERSION_NUM NCCL_IB_SL NCCL_IB_TC NCCL_IB_FIFO_TC
NCCL_IB_RETURN_ASYNC_EVENTS NCCL_OOB_NET_ENABLE NCCL_OOB_NET_IFNAME NCCL_UID_STAGGER_THRESHOLD
NCCL_UID_STAGGER_RATE NCCL_NET NCCL_NET_PLUGIN NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN
NCCL_ENV_PLUGIN NCCL_IGNORE_CPU_AFFINITY NCCL_CONF_FILE NCCL_DEBUG NCCL_DEBUG_FILE
NCCL_DEBUG_SUBSYS NCCL_DEBUG_TIMESTAMP_FORMAT NCCL_DEBUG_TIMESTAMP_LEVELS NCCL_COLLNET_ENABLE
NCCL_COLLNET_NODE_THRESHOLD NCCL_CTA_POLICY NCCL_NETDEVS_POLICY NCCL_TOPO_FILE
NCCL_TOPO_DUMP_FILE NCCL_SET_THREAD_NAME NCCL_P2P_DISABLE NCCL_P2P_LEVEL NCCL_P2P_DIRECT_DISABLE
NCCL_SHM_DISABLE NCCL_BUFFSIZE NCCL_NTHREADS NCCL_MAX_NCHANNELS NCCL_MIN_NCHANNELS
NCCL_CHECK_POINTERS NCCL_LAUNCH_MODE NCCL_IB_DISABLE NCCL_IB_AR_THRESHOLD
NCCL_IB_QPS_PER_CONNECTION NCCL_IB_SPLIT_DATA_ON_QPS NCCL_IB_PCI_RELAXED_ORDERING
NCCL_IB_ADAPTIVE_ROUTING NCCL_IB_ECE_ENABLE NCCL_MEM_SYNC_DOMAIN NCCL_CUMEM_ENABLE
NCCL_CUMEM_HOST_ENABLE NCCL_NET_GDR_LEVEL NCCL_NET_GDR_C2C NCCL_NET_GDR_READ
NCCL_NET_SHARED_BUFFERS NCCL_NET_SHARED_COMMS NCCL_ALGO NCCL_PROTO NCCL_NVB_DISABLE
NCCL_PXN_DISABLE NCCL_P2P_PXN_LEVEL NCCL_PXN_C2C NCCL_RUNTIME_CONNECT NCCL_GRAPH_REGISTER
NCCL_LOCAL_REGISTER NCCL_LEGACY_CUDA_REGISTER NCCL_WIN_ENABLE NCCL_SET_STACK_SIZE
NCCL_GRAPH_MIXING_SUPPORT NCCL_DMABUF_ENABLE NCCL_P2P_NET_CHUNKSIZE NCCL_P2P_LL_THRESHOLD
NCCL_ALLOC_P2P_NET_LL_BUFFERS NCCL_COMM_BLOCKING NCCL_CGA_CLUSTER_SIZE NCCL_MAX_CTAS
NCCL_MIN_CTAS NCCL_NVLS_ENABLE NCCL_IB_MERGE_NICS NCCL_MNNVL_ENABLE NCCL_MNNVL_UUID
NCCL_MNNVL_CLIQUE_ID NCCL_RAS_ENABLE NCCL_RAS_ADDR NCCL_RAS_TIMEOUT_FACTOR
NCCL_LAUNCH_ORDER_IMPLICIT NCCL_LAUNCH_RACE_FATAL NCCL_IPC_USE_ABSTRACT_SOCKET
NCCL_P2P_NVL_CHUNKSIZE NCCL_P2P_PCI_CHUNKSIZE NCCL_NVLS_CHUNKSIZE NCCL_NVLS_NCHANNELS
NCCL_NVLSTREE_MAX_CHUNKSIZE NCCL_IB_MERGE_VFS NCCL_IB_PKEY NCCL_IB_USE_INLINE
NCCL_IB_ROUTABLE_FLID_GID_INDEX NCCL_IB_WARN_RAIL_LOCAL NCCL_HOSTID NCCL_COMM_ID
NCCL_WORK_FIFO_DEPTH NCCL_WORK_FIFO_BYTES NCCL_NCHANNELS_PER_NET_PEER NCCL_MAX_P2P_NCHANNELS
NCCL_MIN_P2P_NCHANNELS NCCL_SHM_USE_CUDA_MEMCPY NCCL_SHM_MEMCPY_MODE NCCL_SHM_LOCALITY
NCCL_P2P_READ_ENABLE NCCL_P2P_USE_CUDA_MEMCPY NCCL_GDRCOPY_ENABLE NCCL_GDRCOPY_FLUSH_ENABLE
NCCL_GDRCOPY_SYNC_ENABLE NCCL_NET_FORCE_FLUSH NCCL_NET_MERGE_LEVEL NCCL_NET_FORCE_MERGE
NCCL_NET_DISABLE_INTRA NCCL_IGNORE_DISABLED_P2P NCCL_NVB_PRECONNECT NCCL_GRAPH_DUMP_FILE
NCCL_GRAPH_FILE NCCL_PROXY_APPEND_BATCH_SIZE NCCL_PROGRESS_APPENDOP_FREQ
NCCL_CREATE_THREAD_CONTEXT NCCL_LL_BUFFSIZE NCCL_LL128_BUFFSIZE NCCL_LL128_NTHREADS
NCCL_PROFILE_EVENT_MASK NCCL_NVTX_DISABLE NCCL_WARN_ENABLE_DEBUG_INFO NCCL_TUNER_CONFIG_FILE
NCCL_VERSION NCCL_HOME NCCL_ROOT NCCL_ROOT_DIR NCCL_INCLUDE_DIR NCCL_LIB_DIR NCCL_LIBRARY
""".split())
# Prefixes of variable families that NCCL network plugins and nccl-tests define.
PLUGIN_PREFIXES = ("NCCL_GPUDIRECTTCPX_", "NCCL_FASTRAK_", "NCCL_TESTS_")

# torch 2.4-2.13, torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp and friends.
KNOWN_TORCH_NCCL = frozenset("""
TORCH_NCCL_ASYNC_ERROR_HANDLING TORCH_NCCL_AVOID_RECORD_STREAMS TORCH_NCCL_BCAST_UNIQUEID
TORCH_NCCL_BLOCKING_WAIT TORCH_NCCL_COORD_CHECK_MILSEC TORCH_NCCL_CUDA_EVENT_CACHE
TORCH_NCCL_DEBUG_INFO_PIPE_FILE TORCH_NCCL_DEBUG_INFO_TEMP_FILE TORCH_NCCL_DESYNC_DEBUG
TORCH_NCCL_DUMP_ON_TIMEOUT TORCH_NCCL_ENABLE_MONITORING TORCH_NCCL_ENABLE_TIMING
TORCH_NCCL_EXTRA_DUMP_ON_EXEC TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC TORCH_NCCL_HIGH_PRIORITY
TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN TORCH_NCCL_NAN_CHECK TORCH_NCCL_NONBLOCKING_TIMEOUT
TORCH_NCCL_PROPAGATE_ERROR TORCH_NCCL_RANKS_PER_ROOT TORCH_NCCL_RETHROW_CUDA_ERRORS
TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING TORCH_NCCL_TRACE_BUFFER_SIZE
TORCH_NCCL_TRACE_CPP_STACK TORCH_NCCL_USE_COMM_NONBLOCKING
TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC
""".split())

# Old name -> the name to use; both are still read (torch warns "... is deprecated; use ...").
DEPRECATED = {
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
    "NCCL_ENABLE_TIMING": "TORCH_NCCL_ENABLE_TIMING",
    "NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK",
    "NCCL_IB_GDR_LEVEL": "NCCL_NET_GDR_LEVEL",
    "NCCL_MAX_NRINGS": "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_NRINGS": "NCCL_MIN_NCHANNELS",
}
REMOVED = {
    "NCCL_SINGLE_RING_THRESHOLD": ("removed in NCCL 2.3", "remove it"),
    "NCCL_LL_THRESHOLD": ("removed in NCCL 2.5", "remove it; NCCL_PROTO selects protocols"),
    "NCCL_TREE_THRESHOLD": ("removed in NCCL 2.5", "remove it; NCCL_ALGO selects algorithms"),
    "NCCL_IB_CUDA_SUPPORT": ("removed in NCCL 2.4", "use NCCL_NET_GDR_LEVEL instead"),
    "NCCL_CHECKS_DISABLE": ("deprecated since NCCL 2.2.12, when argument checks became "
                            "optional", "remove it (NCCL_CHECK_POINTERS=1 turns checks on)"),
}
UNREAD = {
    "NCCL_TIMEOUT": "neither NCCL nor torch reads NCCL_TIMEOUT",
    "TORCH_DISTRIBUTED_TIMEOUT": "torch does not read TORCH_DISTRIBUTED_TIMEOUT",
}
_TIMEOUT_HINT = ("set MESHRUN_PG_TIMEOUT=<seconds> (meshrun.init_distributed passes it to "
                 "init_process_group) or pass init_process_group(timeout=timedelta(...)); "
                 "meshrun sets it by node count")


@dataclass(frozen=True)
class _Rule:
    kind: str                                  # "int", "float", "choice", "level", "tokens"
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    severity: str = "error"                    # when a number is out of range / not a choice
    note: str = ""
    example: str = ""


def _bool(note: str = "") -> _Rule:
    return _Rule("int", ("0", "1"), severity="warning", note=note)


_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
RULES: dict[str, _Rule] = {
    "NCCL_NTHREADS": _Rule("int", ("64", "128", "256", "512"),
                           note="NCCL ignores other values and uses its default"),
    "NCCL_BUFFSIZE": _Rule("int", low=1, note="bytes", example="16777216"),
    "NCCL_IB_TIMEOUT": _Rule("int", low=1, high=31, severity="warning",
                             note="0 or >= 32 means an infinite timeout"),
    "NCCL_IB_RETRY_CNT": _Rule("int", low=0, high=7),
    "NCCL_IB_GID_INDEX": _Rule("int", low=-1),
    "NCCL_IB_SL": _Rule("int", low=0, high=15),
    "NCCL_IB_TC": _Rule("int", low=0, high=255),
    "NCCL_IB_FIFO_TC": _Rule("int", low=0, high=255),
    "NCCL_IB_QPS_PER_CONNECTION": _Rule("int", low=1, high=128),
    "NCCL_IB_ROCE_VERSION_NUM": _Rule("int", ("1", "2")),
    "NCCL_IB_AR_THRESHOLD": _Rule("int", low=0),
    "NCCL_IB_PCI_RELAXED_ORDERING": _Rule("int", ("0", "1", "2")),
    "NCCL_IB_ADDR_FAMILY": _Rule("choice", ("AF_INET", "AF_INET6")),
    "NCCL_SOCKET_FAMILY": _Rule("choice", ("AF_INET", "AF_INET6")),
    "NCCL_SOCKET_NTHREADS": _Rule("int", low=1, high=16),
    "NCCL_NSOCKS_PERTHREAD": _Rule("int", low=1, high=64),
    "NCCL_SOCKET_RETRY_CNT": _Rule("int", low=0),
    "NCCL_SOCKET_RETRY_SLEEP_MSEC": _Rule("int", low=0),
    "NCCL_SOCKET_POLL_TIMEOUT_MSEC": _Rule("int", low=0),
    "NCCL_CROSS_NIC": _Rule("int", ("0", "1", "2")),
    "NCCL_MAX_NCHANNELS": _Rule("int", low=1),
    "NCCL_MIN_NCHANNELS": _Rule("int", low=1),
    "NCCL_MAX_CTAS": _Rule("int", low=1, high=64),
    "NCCL_MIN_CTAS": _Rule("int", low=1, high=64),
    "NCCL_CGA_CLUSTER_SIZE": _Rule("int", low=0, high=8),
    "NCCL_NVLS_ENABLE": _Rule("int", ("0", "1", "2")),
    "NCCL_MNNVL_ENABLE": _Rule("int", ("0", "1", "2")),
    "NCCL_P2P_PXN_LEVEL": _Rule("int", ("0", "1", "2")),
    "NCCL_MEM_SYNC_DOMAIN": _Rule("int", ("0", "1")),
    "NCCL_P2P_NET_CHUNKSIZE": _Rule("int", low=1),
    "NCCL_P2P_LL_THRESHOLD": _Rule("int", low=0),
    "NCCL_UID_STAGGER_THRESHOLD": _Rule("int", low=1),
    "NCCL_UID_STAGGER_RATE": _Rule("int", low=1),
    "NCCL_COLLNET_NODE_THRESHOLD": _Rule("int", low=1),
    "NCCL_RAS_TIMEOUT_FACTOR": _Rule("int", low=1),
    "NCCL_P2P_LEVEL": _Rule("level", _LEVELS),
    "NCCL_NET_GDR_LEVEL": _Rule("level", tuple(x for x in _LEVELS if x != "NVL")),
    "NCCL_DEBUG": _Rule("choice", ("VERSION", "WARN", "INFO", "ABORT", "TRACE"),
                        severity="warning", note="NCCL then prints nothing"),
    "NCCL_DEBUG_SUBSYS": _Rule("tokens", ("INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING",
                                          "ENV", "ALLOC", "CALL", "PROXY", "NVLS", "BOOTSTRAP",
                                          "REG", "PROFILE", "RAS", "ALL"), severity="warning"),
    "NCCL_LAUNCH_MODE": _Rule("choice", ("PARALLEL", "GROUP")),
    "NCCL_ALGO": _Rule("tokens", ("RING", "TREE", "COLLNET", "COLLNETCHAIN", "COLLNETDIRECT",
                                  "NVLS", "NVLSTREE", "PAT")),
    "NCCL_PROTO": _Rule("tokens", ("LL", "LL128", "SIMPLE")),
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": _Rule("int", ("0", "1", "2", "3")),
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": _Rule("int", low=1),
    "TORCH_NCCL_TRACE_BUFFER_SIZE": _Rule("int", low=0),
    "TORCH_DISTRIBUTED_DEBUG": _Rule("choice", ("OFF", "INFO", "DETAIL")),
    "MESHRUN_PG_TIMEOUT": _Rule("float", low=1e-9, note="seconds", example="7200"),
}
for _name in ("NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_P2P_DIRECT_DISABLE",
              "NCCL_NET_GDR_READ", "NCCL_NET_GDR_C2C", "NCCL_CUMEM_ENABLE",
              "NCCL_CUMEM_HOST_ENABLE", "NCCL_COLLNET_ENABLE", "NCCL_NVB_DISABLE",
              "NCCL_PXN_DISABLE", "NCCL_PXN_C2C", "NCCL_DMABUF_ENABLE",
              "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_SET_THREAD_NAME", "NCCL_IGNORE_CPU_AFFINITY",
              "NCCL_CHECK_POINTERS", "NCCL_RAS_ENABLE", "NCCL_COMM_BLOCKING",
              "NCCL_RUNTIME_CONNECT", "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_ADAPTIVE_ROUTING",
              "NCCL_IB_ECE_ENABLE", "NCCL_IB_MERGE_NICS", "NCCL_NET_SHARED_BUFFERS",
              "NCCL_NET_SHARED_COMMS", "NCCL_LOCAL_REGISTER", "NCCL_GRAPH_REGISTER",
              "NCCL_LEGACY_CUDA_REGISTER", "NCCL_WIN_ENABLE", "NCCL_SET_STACK_SIZE",
              "NCCL_ALLOC_P2P_NET_LL_BUFFERS", "NCCL_OOB_NET_ENABLE",
              "NCCL_IB_RETURN_ASYNC_EVENTS", "NCCL_LAUNCH_ORDER_IMPLICIT",
              "NCCL_LAUNCH_RACE_FATAL", "NCCL_IPC_USE_ABSTRACT_SOCKET",
              "TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_DESYNC_DEBUG", "TORCH_NCCL_ENABLE_TIMING",
              "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_ENABLE_MONITORING",
              "TORCH_NCCL_HIGH_PRIORITY", "TORCH_NCCL_NAN_CHECK", "TORCH_NCCL_AVOID_RECORD_STREAMS",
              "TORCH_NCCL_USE_COMM_NONBLOCKING", "TORCH_NCCL_PROPAGATE_ERROR"):
    RULES[_name] = _bool()

_LINTED_PREFIXES = ("NCCL_", "TORCH_NCCL_")
_KNOWN = KNOWN_NCCL | KNOWN_TORCH_NCCL


def lint_env(env: Mapping[str, str], facts: NetFacts | None = None) -> list[Finding]:
    """Check the NCCL/torch variables of ``env``; with ``facts``, also against this host.

    Returns findings in variable-name order, cross-variable findings last. Pure.
    """
    found: list[Finding] = []
    names = sorted(env)
    for name in names:
        value = env[name]
        if not name.startswith(_LINTED_PREFIXES) and name not in UNREAD and name not in RULES:
            continue
        found += _lint_name(name, value)
        rule = RULES.get(name) or RULES.get(DEPRECATED.get(name, ""))
        if rule and value.strip():
            found += _lint_value(name, value, rule)
    found += _lint_combinations(env)
    if facts is not None:
        found += _lint_host(env, facts)
    return found


def _lint_name(name: str, value: str) -> list[Finding]:
    shown = f"{name}={value}"
    if name in UNREAD:
        return [Finding("env-unread", "warning", name, f"{shown}: {UNREAD[name]}",
                        _TIMEOUT_HINT)]
    if name in DEPRECATED:
        new = DEPRECATED[name]
        return [Finding("env-deprecated", "warning", name,
                        f"{shown}: {name} is deprecated; {new} replaces it",
                        f"rename it to {new}={value}")]
    if name in REMOVED:
        what, hint = REMOVED[name]
        return [Finding("env-removed", "warning", name, f"{shown}: {name} was {what}; NCCL "
                        "ignores it", hint)]
    if name in _KNOWN or name in RULES or name.startswith(PLUGIN_PREFIXES):
        return []
    if not name.startswith(_LINTED_PREFIXES):
        return []
    pool = sorted(_KNOWN | set(DEPRECATED) | set(UNREAD))
    scored = sorted(((difflib.SequenceMatcher(None, name, known).ratio(), known)
                     for known in pool), reverse=True)
    close = [known for score, known in scored[:2] if score >= 0.8 and score >= scored[0][0] - 0.05]
    family = "torch's ProcessGroupNCCL" if name.startswith("TORCH_NCCL_") else "NCCL"
    hint = (f"did you mean {' or '.join(close)}?" if close
            else "check the name in NCCL's or torch's documentation, or remove it")
    return [Finding("env-unknown", "warning", name,
                    f"{name}: unknown; {family} reads no such variable", hint)]


def _lint_value(name: str, value: str, rule: _Rule) -> list[Finding]:
    raw = value.strip()
    shown = f"{name}={value}"
    extra = f" ({rule.note})" if rule.note else ""
    if rule.kind in ("int", "float"):
        number = _int(raw) if rule.kind == "int" else _float(raw)
        if number is None:
            what = "a whole number" if rule.kind == "int" else "a number"
            example = rule.example or (rule.choices[0] if rule.choices
                                       else _num(max(rule.low or 0, 1)))
            return [Finding("env-bad-value", "error", name, f"{shown} is not {what}{extra}",
                            f"set {name} to {what}, e.g. {name}={example}")]
        if rule.choices and str(number) not in rule.choices:
            return [Finding("env-bad-value", rule.severity, name,
                            f"{shown} is not one of {', '.join(rule.choices)}{extra}",
                            f"set {name} to one of {', '.join(rule.choices)}")]
        if (rule.low is not None and number < rule.low) or \
                (rule.high is not None and number > rule.high):
            if rule.high is not None:
                span = f"{_num(rule.low)}..{_num(rule.high)}"
            elif rule.kind == "float":
                span = "> 0"
            else:
                span = f">= {_num(rule.low)}"
            return [Finding("env-bad-value", rule.severity, name,
                            f"{shown} is outside {span}{extra}", f"set {name} within {span}")]
        return []
    if rule.kind == "choice":
        if raw.upper() not in rule.choices:
            return [Finding("env-bad-value", rule.severity, name,
                            f"{shown} is not one of {', '.join(rule.choices)}{extra}",
                            f"set {name} to one of {', '.join(rule.choices)}")]
        return []
    if rule.kind == "level":
        if raw.upper() in rule.choices:
            return []
        if raw.isdigit():
            word = _LEVELS_BY_INT[min(int(raw), 4)]
            return [Finding("env-legacy-value", "info", name,
                            f"{shown} is a legacy integer level, read as {word}",
                            f"write {name}={word}: integer levels changed meaning between "
                            "NCCL versions")]
        return [Finding("env-bad-value", "error", name,
                        f"{shown} is not one of {', '.join(rule.choices)}",
                        f"set {name} to one of {', '.join(rule.choices)}")]
    # tokens: NCCL_ALGO / NCCL_PROTO ("[func:][^]a,b;func:..."), NCCL_DEBUG_SUBSYS ("[^]A,B")
    bad = [t for t in _tokens(raw) if t.upper() not in rule.choices]
    if bad:
        return [Finding("env-bad-value", rule.severity, name,
                        f"{shown}: unknown {'value' if len(bad) == 1 else 'values'} "
                        f"{', '.join(bad)}", f"use {', '.join(rule.choices)}")]
    return []


_LEVELS_BY_INT = ("LOC", "PIX", "PXB", "PHB", "SYS")


def _tokens(raw: str) -> list[str]:
    out = []
    for part in raw.split(";"):
        part = part.split(":", 1)[1] if ":" in part else part
        part = part.strip().lstrip("^")
        out += [t.strip() for t in part.split(",") if t.strip()]
    return out


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:g}"


def _lint_combinations(env: Mapping[str, str]) -> list[Finding]:
    found = []
    if env.get("NCCL_IB_DISABLE", "").strip() == "1":
        ib = [n for n in sorted(env) if n.startswith("NCCL_IB_") and n != "NCCL_IB_DISABLE"]
        if ib:
            found.append(Finding("env-ib-disabled", "warning", ib[0],
                                 f"{', '.join(ib)} set with NCCL_IB_DISABLE=1: NCCL uses TCP "
                                 "sockets and ignores them",
                                 "remove the NCCL_IB_* settings, or NCCL_IB_DISABLE=1 to use "
                                 "InfiniBand"))
    threads, socks = _int(env.get("NCCL_SOCKET_NTHREADS", "1") or "1"), \
        _int(env.get("NCCL_NSOCKS_PERTHREAD", "1") or "1")
    if threads and socks and threads * socks > 64:
        found.append(Finding("env-bad-value", "error", "NCCL_NSOCKS_PERTHREAD",
                             f"NCCL_SOCKET_NTHREADS={threads} x NCCL_NSOCKS_PERTHREAD={socks} = "
                             f"{threads * socks}, above NCCL's limit of 64",
                             "lower one of them, e.g. 4 x 4"))
    subsys = env.get("NCCL_DEBUG_SUBSYS", "").strip()
    if subsys and env.get("NCCL_DEBUG", "").strip().upper() not in ("INFO", "TRACE"):
        found.append(Finding("env-no-effect", "info", "NCCL_DEBUG_SUBSYS",
                             f"NCCL_DEBUG_SUBSYS={subsys} filters INFO/TRACE output, but "
                             f"NCCL_DEBUG={env.get('NCCL_DEBUG', '(unset)')}",
                             "set NCCL_DEBUG=INFO, or remove NCCL_DEBUG_SUBSYS"))
    dump = env.get("TORCH_NCCL_DUMP_ON_TIMEOUT", "").strip()
    if dump == "1" and (_int(env.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0") or "0") or 0) <= 0:
        found.append(Finding("env-no-effect", "info", "TORCH_NCCL_DUMP_ON_TIMEOUT",
                             "TORCH_NCCL_DUMP_ON_TIMEOUT=1 dumps the flight recorder, which "
                             "records nothing while TORCH_NCCL_TRACE_BUFFER_SIZE is 0 or unset",
                             "also set TORCH_NCCL_TRACE_BUFFER_SIZE, e.g. 2000"))
    return found


def _lint_host(env: Mapping[str, str], facts: NetFacts) -> list[Finding]:
    found: list[Finding] = []
    names = [i.name for i in facts.interfaces]
    have = ", ".join(names) or "none"
    ifname = env.get("NCCL_SOCKET_IFNAME", "").strip()
    if ifname:
        found += _lint_socket_ifname(ifname, facts, have)
    gloo = env.get("GLOO_SOCKET_IFNAME", "").strip()
    for token in _names(gloo):
        if token not in names:
            found.append(Finding("env-no-such-iface", "error", "GLOO_SOCKET_IFNAME",
                                 f"GLOO_SOCKET_IFNAME={gloo} names {token}, but this host's "
                                 f"interfaces are: {have}",
                                 "name an interface of this host (ip addr), or unset it to "
                                 "let meshrun pick the one routing to the master"))
    ib_disabled = env.get("NCCL_IB_DISABLE", "").strip() == "1"
    active = facts.active_ib_ports
    hca = env.get("NCCL_IB_HCA", "").strip()
    if hca and not ib_disabled:
        found += _lint_hca(hca, facts)
    ib_set = [n for n in sorted(env) if n.startswith("NCCL_IB_") and n != "NCCL_IB_DISABLE"]
    if env.get("NCCL_IB_DISABLE", "").strip() == "0":
        ib_set.insert(0, "NCCL_IB_DISABLE=0")
    if not active and not ib_disabled and ib_set and \
            not any(e.startswith("infiniband:") for e in facts.errors):
        devices = ", ".join(d.name for d in facts.ib_devices) or "none"
        found.append(Finding("env-ib-unavailable", "warning", ib_set[0].split("=")[0],
                             f"{', '.join(ib_set)} set, but this host has no active "
                             f"InfiniBand/RoCE port (RDMA devices: {devices}): NCCL will use "
                             "TCP sockets", "check the HCAs with ibstat, or set "
                             "NCCL_IB_DISABLE=1 and drop the NCCL_IB_* settings"))
    gid = env.get("NCCL_IB_GID_INDEX", "").strip()
    if gid and not ib_disabled and active and _int(gid) is not None and _int(gid) >= 0:
        found += _lint_gid(gid, facts)
    return found


def _lint_socket_ifname(value: str, facts: NetFacts, have: str) -> list[Finding]:
    shown = f"NCCL_SOCKET_IFNAME={value}"
    spec = parse_nccl_list(value)
    found = []
    if not spec.exclude:
        how = "named" if spec.exact else "starting with"
        for token, _ in spec.tokens:
            if not any((i.name == token) if spec.exact else i.name.startswith(token)
                       for i in facts.interfaces):
                found.append(Finding("env-no-such-iface", "error", "NCCL_SOCKET_IFNAME",
                                     f"{shown}: no interface {how} {token} on this host "
                                     f"(interfaces: {have})",
                                     "name this host's interface (ip addr), or unset it to "
                                     "let meshrun pick the one routing to the master"))
    chosen = [i for i in facts.interfaces if spec.selects(i.name)]
    if not chosen:
        if spec.exclude:
            found.append(Finding("env-no-such-iface", "error", "NCCL_SOCKET_IFNAME",
                                 f"{shown} excludes every interface of this host ({have})",
                                 "exclude fewer interfaces, or unset it"))
        return found
    if all(i.state == "down" for i in chosen):
        found.append(Finding("env-iface-unusable", "warning", "NCCL_SOCKET_IFNAME",
                             f"{shown} selects only interfaces that are down "
                             f"({', '.join(i.name for i in chosen)})",
                             "select an interface that is up (ip link)"))
    elif facts.addresses_known and not any(i.addresses for i in chosen):
        found.append(Finding("env-iface-unusable", "warning", "NCCL_SOCKET_IFNAME",
                             f"{shown} selects only interfaces without an IP address "
                             f"({', '.join(i.name for i in chosen)})",
                             "select an interface with an address (ip addr)"))
    return found


def _lint_hca(value: str, facts: NetFacts) -> list[Finding]:
    shown = f"NCCL_IB_HCA={value}"
    try:
        spec = parse_nccl_list(value, ports=True)
    except ValueError as exc:
        return [Finding("env-bad-value", "error", "NCCL_IB_HCA", f"{shown}: {exc}",
                        "write devices as NAME or NAME:PORT, e.g. =mlx5_0:1")]
    ports = [(d, p) for d in facts.ib_devices for p in d.ports]
    listing = ", ".join(f"{d.name} {p.describe()}" for d, p in ports) or "none"
    fix = ("list this host's devices (ibv_devices, ibstat), or unset NCCL_IB_HCA to let "
           "meshrun list the active ports")
    if not spec.exclude:
        missing = [f"{token}:{port}" if port is not None else token
                   for token, port in spec.tokens
                   if not any(((d.name == token) if spec.exact else d.name.startswith(token))
                              and (port is None or p.number == port) for d, p in ports)]
        if missing:
            how = "named" if spec.exact else "starting with"
            return [Finding("env-no-such-hca", "error", "NCCL_IB_HCA",
                            f"{shown}: this host has no RDMA device {how} {', '.join(missing)} "
                            f"(RDMA ports: {listing})", fix)]
    if facts.active_ib_ports and not any(spec.selects(d.name, p.number)
                                         for d, p in facts.active_ib_ports):
        return [Finding("env-no-such-hca", "error", "NCCL_IB_HCA",
                        f"{shown} selects no active port (RDMA ports: {listing}): NCCL falls "
                        "back to TCP sockets", fix)]
    return []


def _lint_gid(value: str, facts: NetFacts) -> list[Finding]:
    index = int(value)
    roce = [(d, p) for d, p in facts.active_ib_ports if p.roce]
    if not roce:
        return [Finding("env-gid-index", "info", "NCCL_IB_GID_INDEX",
                        f"NCCL_IB_GID_INDEX={value} only matters on RoCE ports; this host's "
                        f"active ports are InfiniBand ({_ports_text(facts.active_ib_ports)})",
                        "remove it")]
    found = []
    for d, p in roce:
        gid = next((g for g in p.gids if g.index == index), None)
        best = roce_v2_gid_index(p, facts.route_source_addr)
        suggestion = f"set NCCL_IB_GID_INDEX={best}, " if best is not None else ""
        if gid is None:
            found.append(Finding("env-gid-index", "error", "NCCL_IB_GID_INDEX",
                                 f"NCCL_IB_GID_INDEX={value}: {d.name}:{p.number} has no GID "
                                 f"at index {index}", f"{suggestion}or unset it (NCCL >= "
                                                      "2.21 selects the GID itself)"))
        elif not gid.roce_v2 and gid.type:
            found.append(Finding("env-gid-index", "warning", "NCCL_IB_GID_INDEX",
                                 f"NCCL_IB_GID_INDEX={value}: GID {index} of {d.name}:"
                                 f"{p.number} is {gid.type}, not RoCE v2 (routable)",
                                 f"{suggestion}or unset it (NCCL >= 2.21 selects the GID "
                                 "itself)"))
    return found


def format_findings(findings: Iterable[Finding]) -> str:
    """One line per finding, errors first (for ``meshrun doctor`` / preflight output)."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return "\n".join(f.line() for f in sorted(findings, key=lambda f: order[f.severity]))


"""Network facts, collected once per node: interfaces, the route to the master, RDMA devices.

This is the only part of meshrun's network handling that looks at the machine. It
reads sysfs, runs ``ip`` (iproute2) and opens one UDP socket; everything that
decides (which interface, which HCAs, which GID index) is in :mod:`meshrun.nccl.policy`
and works on the :class:`NetFacts` record built here.

What is collected
-----------------
Interfaces
    every entry of ``<sysfs>/class/net``: name, ``operstate``, ``mtu`` and a *kind*
    (see :func:`interface_kind`), plus its IPv4/IPv6 addresses. sysfs holds no IP
    addresses: they come from ``ip -d -j addr show`` (parsed by
    :func:`parse_ip_json`), or, without iproute2, from the ``SIOCGIFADDR`` ioctl
    (IPv4) and ``/proc/net/if_inet6`` (IPv6).
The route to the master
    the master address is resolved, a UDP socket is ``connect()``-ed to it (that
    sends nothing; the kernel only picks a route) and ``getsockname()`` gives the
    *source address* this host would use. The interface holding that address is
    ``route_iface``. On node 0 the master address is the node's own address: the
    kernel routes it over ``lo`` but the source address is still the one on, say,
    ``eth0`` -- which is why the interface is found by address, not by route device.
InfiniBand / RoCE devices
    ``<sysfs>/class/infiniband/<dev>/ports/<n>/{state,phys_state,link_layer,rate}``
    and the non-zero entries of the GID table ``ports/<n>/gids/<i>`` with their
    ``gid_attrs/types/<i>`` ("RoCE v2", "IB/RoCE v1") and ``gid_attrs/ndevs/<i>``
    (the net device behind a RoCE GID) where the kernel provides them.
GPUDirect RDMA
    ``<sysfs>/module/nvidia_peermem`` (or the older ``nv_peer_mem``) exists: the
    module that lets the HCA read and write GPU memory is loaded.

``MESHRUN_SYSFS_ROOT`` relocates ``/sys`` (tests point it at fixture trees).
Anything that could not be read becomes one line in :attr:`NetFacts.errors`;
collection itself never raises.

Interface kinds
---------------
``loopback`` (ARPHRD 772 or ``lo``), ``docker`` (``docker*``, ``br-<hex>``: Docker's
bridges), ``bridge`` (has ``bridge/``), ``veth`` (``ip -d`` reports kind ``veth``, or
the name starts with ``veth``), ``ib`` (ARPHRD 32, IPoIB), ``physical`` (has a
``device`` link), ``virtual`` (anything else: bonds, VLANs, tunnels, ifb). A veth is
not judged by its kind alone: inside a container or a Kubernetes pod ``eth0`` *is*
one end of a veth pair and the right interface; see :mod:`meshrun.nccl.policy`.

No torch import here: ``meshrun plan`` must stay fast.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..sockets import lookup

SYSFS_ROOT_VAR = "MESHRUN_SYSFS_ROOT"
KINDS = ("loopback", "docker", "bridge", "veth", "ib", "physical", "virtual")
ARPHRD_INFINIBAND = 32
ARPHRD_LOOPBACK = 772
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
_DOCKER = re.compile(r"^(docker\d*|br-[0-9a-f]{12})$")
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


@dataclass(frozen=True)
class Interface:
    """One network interface of this host (an entry of ``/sys/class/net``)."""

    name: str
    kind: str = "virtual"
    state: str = "unknown"          # operstate, lower case: up, down, unknown, dormant, ...
    mtu: int = 0
    addresses: tuple[str, ...] = ()  # IPv4 and IPv6, without prefix length or scope

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("Interface.name is empty")
        if self.kind not in KINDS:
            raise ValueError(f"Interface.kind {self.kind!r} is not one of {', '.join(KINDS)}")

    @property
    def ipv4(self) -> tuple[str, ...]:
        return tuple(a for a in self.addresses if ":" not in a)


@dataclass(frozen=True)
class Gid:
    """One non-zero entry of a port's GID table."""

    index: int
    gid: str                 # as sysfs writes it: 8 groups of 4 hex digits
    type: str = ""           # "RoCE v2", "IB/RoCE v1", or "" when the kernel does not say
    ndev: str = ""           # the net device of a RoCE GID, "" when unknown

    @property
    def ipv4(self) -> str | None:
        """The IPv4 address of an IPv4-mapped GID (``::ffff:a.b.c.d``), else None."""
        try:
            mapped = ipaddress.IPv6Address(self.gid).ipv4_mapped
        except ValueError:
            return None
        return str(mapped) if mapped else None

    @property
    def roce_v2(self) -> bool:
        return self.type.strip().lower() == "roce v2"


@dataclass(frozen=True)
class IbPort:
    """One port of an RDMA device."""

    number: int
    state: str = ""          # e.g. "4: ACTIVE", "1: DOWN"
    link_layer: str = ""     # "InfiniBand" or "Ethernet" (RoCE)
    phys_state: str = ""     # e.g. "5: LinkUp"
    rate: str = ""           # e.g. "400 Gb/sec (4X NDR)"
    gids: tuple[Gid, ...] = ()

    @property
    def active(self) -> bool:
        return self.state.split(":")[-1].strip().upper() == "ACTIVE"

    @property
    def roce(self) -> bool:
        return self.link_layer.strip().lower() == "ethernet"

    def describe(self) -> str:
        state = self.state.split(":")[-1].strip() or "state unknown"
        return f"port {self.number} {state} ({self.link_layer or 'link layer unknown'})"


@dataclass(frozen=True)
class IbDevice:
    """One RDMA device (``/sys/class/infiniband/<name>``), e.g. ``mlx5_0``."""

    name: str
    ports: tuple[IbPort, ...] = ()

    @property
    def active_ports(self) -> tuple[IbPort, ...]:
        return tuple(p for p in self.ports if p.active)


@dataclass(frozen=True)
class NetFacts:
    """Everything meshrun knows about this node's network. Built by :func:`collect`."""

    interfaces: tuple[Interface, ...] = ()
    ib_devices: tuple[IbDevice, ...] = ()
    peermem: str = ""                    # the loaded GPUDirect RDMA module, "" when none
    master_addr: str = ""                # the address the route was looked up for
    route_source_addr: str | None = None  # this host's source address towards the master
    route_iface: str | None = None       # the interface holding route_source_addr
    errors: tuple[str, ...] = ()         # what could not be read, one line each
    sysfs_root: str = "/sys"
    addresses_known: bool = True         # False when neither ip nor the ioctl gave addresses

    def iface(self, name: str) -> Interface | None:
        return next((i for i in self.interfaces if i.name == name), None)

    def ib_device(self, name: str) -> IbDevice | None:
        return next((d for d in self.ib_devices if d.name == name), None)

    @property
    def active_ib_ports(self) -> tuple[tuple[IbDevice, IbPort], ...]:
        return tuple((d, p) for d in self.ib_devices for p in d.ports if p.active)

    def to_json(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


@dataclass(frozen=True)
class IpInfo:
    """What ``ip -d -j addr show`` says about one interface."""

    addresses: tuple[str, ...] = ()
    link_kind: str = ""      # linkinfo.info_kind: "veth", "bridge", "bond", "vlan", ...
    operstate: str = ""
    mtu: int = 0


@dataclass
class SysfsFacts:
    """What :func:`read_sysfs` found: interfaces still without addresses, RDMA devices."""

    interfaces: list[Interface] = field(default_factory=list)
    ib_devices: list[IbDevice] = field(default_factory=list)
    peermem: str = ""
    errors: list[str] = field(default_factory=list)


# --- the effect side --------------------------------------------------------------------------

def collect(master_addr: str, master_port: int = 0, *, env: Mapping[str, str] | None = None,
            timeout: float = 5.0) -> NetFacts:
    """Look at this host's network once, for a job whose master is ``master_addr``.

    ``env`` supplies ``MESHRUN_SYSFS_ROOT`` and the ``PATH`` on which ``ip`` is looked
    up (default: ``os.environ``). Never raises: what fails is listed in ``errors``.
    """
    env = os.environ if env is None else env
    root = env.get(SYSFS_ROOT_VAR, "").strip() or "/sys"
    part = read_sysfs(root)
    addrs, addr_error = read_addresses(env, timeout=timeout)
    errors = list(part.errors)
    if addr_error:
        errors.append(addr_error)
    source, route_error = route_source(master_addr, master_port, timeout=timeout)
    if route_error:
        errors.append(route_error)
    return build_facts(part, addrs, source, master_addr=master_addr, sysfs_root=root,
                       extra_errors=errors, addresses_known=addrs is not None)


def _names(folder: Path, what: str, errors: list[str]) -> list[str]:
    """The sorted entries of a sysfs folder; an unreadable one becomes a line in ``errors``."""
    try:
        return sorted(p.name for p in folder.iterdir())
    except OSError as exc:
        errors.append(f"{what}: cannot list {folder}: {exc.strerror or exc}")
        return []


def read_sysfs(root: str | os.PathLike[str]) -> SysfsFacts:
    """Interfaces (without addresses), RDMA devices and the peermem module under ``root``."""
    base = Path(root)
    part = SysfsFacts()
    net = base / "class" / "net"
    for name in _names(net, "network interfaces", part.errors):
        part.interfaces.append(_read_iface(net / name, name))
    ib = base / "class" / "infiniband"
    if ib.exists():
        for dev in _names(ib, "infiniband", part.errors):
            part.ib_devices.append(_read_ib_device(ib / dev, dev, part.errors))
    part.peermem = next((m for m in PEERMEM_MODULES if (base / "module" / m).exists()), "")
    return part


def read_addresses(env: Mapping[str, str], *, timeout: float = 5.0
                   ) -> tuple[dict[str, IpInfo] | None, str]:
    """Addresses per interface: from ``ip -d -j addr show``, else ioctl + /proc/net/if_inet6.

    Returns ``(None, why)`` when neither worked.
    """
    exe = shutil.which("ip", path=env.get("PATH"))
    why = "ip (iproute2) not found"
    if exe is not None:
        try:
            done = subprocess.run([exe, "-d", "-j", "addr", "show"], capture_output=True,
                                  text=True, timeout=timeout)
            if done.returncode == 0:
                return parse_ip_json(done.stdout), ""
            why = f"ip addr failed (exit {done.returncode}): {done.stderr.strip()[:200]}"
        except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
            why = f"ip addr failed: {exc}"
    found = _addresses_without_ip()
    if found:
        return found, ""
    return None, f"addresses: {why}, and no address could be read otherwise"


def route_source(master_addr: str, port: int = 0, *, timeout: float = 5.0
                 ) -> tuple[str | None, str]:
    """This host's source address towards ``master_addr``: ``(address, "")`` or ``(None, why)``.

    A UDP ``connect()`` makes the kernel choose the route and the source address;
    no packet is sent.
    """
    host = master_addr.strip().strip("[]")
    if not host:
        return None, "route to master: no master address"
    infos, error = lookup(host, port or 9, timeout, socket.SOCK_DGRAM)
    if error:
        return None, f"route to master {host}: {error}"
    last = "no address"
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect(sockaddr)
                return sock.getsockname()[0].split("%")[0], ""
        except OSError as exc:
            last = exc.strerror or str(exc)
    return None, f"route to master {host}: {last}"


def _addresses_without_ip() -> dict[str, IpInfo]:
    """IPv4 from the SIOCGIFADDR ioctl (primary address only), IPv6 from /proc/net/if_inet6."""
    found: dict[str, list[str]] = {}
    try:
        import fcntl
        import struct

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for _, name in socket.if_nameindex():
                try:
                    raw = fcntl.ioctl(sock.fileno(), 0x8915,  # SIOCGIFADDR
                                      struct.pack("256s", name.encode()[:15]))
                    found.setdefault(name, []).append(socket.inet_ntoa(raw[20:24]))
                except OSError:
                    found.setdefault(name, [])
    except (ImportError, OSError):
        pass
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as handle:
            for name, addr in parse_if_inet6(handle.read()):
                found.setdefault(name, []).append(addr)
    except OSError:
        pass
    return {name: IpInfo(addresses=tuple(addrs)) for name, addrs in found.items()}


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _read_iface(path: Path, name: str) -> Interface:
    kind = interface_kind(name, arphrd=_int_or_none(_read(path / "type")),
                          has_bridge=(path / "bridge").exists(),
                          has_device=(path / "device").exists())
    return Interface(name=name, kind=kind, state=(_read(path / "operstate") or "unknown").lower(),
                     mtu=_int_or_none(_read(path / "mtu")) or 0)


def _read_ib_device(path: Path, name: str, errors: list[str]) -> IbDevice:
    ports_dir = path / "ports"
    try:
        numbers = sorted(int(p.name) for p in ports_dir.iterdir() if p.name.isdigit())
    except OSError as exc:
        errors.append(f"infiniband: cannot list {ports_dir}: {exc.strerror or exc}")
        return IbDevice(name=name)
    ports = []
    for number in numbers:
        port = ports_dir / str(number)
        ports.append(IbPort(number=number, state=_read(port / "state") or "",
                            link_layer=_read(port / "link_layer") or "",
                            phys_state=_read(port / "phys_state") or "",
                            rate=_read(port / "rate") or "", gids=_read_gids(port)))
    return IbDevice(name=name, ports=tuple(ports))


def _read_gids(port: Path) -> tuple[Gid, ...]:
    gids_dir = port / "gids"
    try:
        indices = sorted(int(p.name) for p in gids_dir.iterdir() if p.name.isdigit())
    except OSError:
        return ()
    out = []
    for index in indices:
        value = _read(gids_dir / str(index))
        if not value or value == _ZERO_GID:
            continue
        # The kernel answers EINVAL for the type of an unused entry: _read gives None.
        out.append(Gid(index=index, gid=value,
                       type=_read(port / "gid_attrs" / "types" / str(index)) or "",
                       ndev=_read(port / "gid_attrs" / "ndevs" / str(index)) or ""))
    return tuple(out)


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


# --- pure parts -------------------------------------------------------------------------------

def interface_kind(name: str, *, arphrd: int | None = None, has_bridge: bool = False,
                   has_device: bool = False, link_kind: str = "") -> str:
    """The kind of an interface from its sysfs traits (see the module docstring)."""
    if name == "lo" or arphrd == ARPHRD_LOOPBACK:
        return "loopback"
    if _DOCKER.match(name):
        return "docker"
    if has_bridge or link_kind == "bridge":
        return "bridge"
    if link_kind == "veth" or name.startswith("veth"):
        return "veth"
    if arphrd == ARPHRD_INFINIBAND:
        return "ib"
    if has_device:
        return "physical"
    return "virtual"


def parse_ip_json(text: str) -> dict[str, IpInfo]:
    """Parse ``ip [-d] -j addr show``: ``{ifname: IpInfo}``. Raises ValueError on bad input."""
    try:
        data = json.loads(text) if text.strip() else []
    except json.JSONDecodeError as exc:
        raise ValueError(f"ip printed something that is not JSON: {exc}") from None
    if not isinstance(data, list):
        raise ValueError("ip printed JSON that is not a list of interfaces")
    out: dict[str, IpInfo] = {}
    for entry in data:
        if not isinstance(entry, dict) or not entry.get("ifname"):
            continue  # ip prints {} for interfaces filtered out
        addrs = tuple(str(a["local"]).split("%")[0] for a in entry.get("addr_info") or []
                      if isinstance(a, dict) and a.get("local")
                      and a.get("family") in ("inet", "inet6"))
        linkinfo = entry.get("linkinfo") or {}
        mtu = entry.get("mtu")
        out[str(entry["ifname"])] = IpInfo(
            addresses=addrs, link_kind=str(linkinfo.get("info_kind", "")),
            operstate=str(entry.get("operstate", "")).lower(),
            mtu=mtu if isinstance(mtu, int) else 0)
    return out


def parse_if_inet6(text: str) -> list[tuple[str, str]]:
    """``/proc/net/if_inet6`` lines -> ``[(ifname, address)]``."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 6 and len(fields[0]) == 32:
            try:
                addr = ipaddress.IPv6Address(bytes.fromhex(fields[0]))
            except ValueError:
                continue
            out.append((fields[5], str(addr)))
    return out


def build_facts(part: SysfsFacts, addrs: Mapping[str, IpInfo] | None,
                source_addr: str | None, *, master_addr: str = "", sysfs_root: str = "/sys",
                extra_errors: list[str] | None = None, addresses_known: bool = True
                ) -> NetFacts:
    """Merge sysfs interfaces with their addresses and find the interface holding
    ``source_addr`` (pure: the tests feed it fixture trees and captured ``ip`` output)."""
    addrs = addrs or {}
    interfaces = []
    for iface in part.interfaces:
        info = addrs.get(iface.name)
        if info is None:
            interfaces.append(iface)
            continue
        kind = iface.kind
        if info.link_kind and kind in ("virtual", "physical"):
            kind = interface_kind(iface.name, link_kind=info.link_kind,
                                  has_device=kind == "physical")
        interfaces.append(replace(iface, kind=kind, addresses=info.addresses,
                                  mtu=iface.mtu or info.mtu))
    route_iface = None
    if source_addr:
        wanted = _normal(source_addr)
        route_iface = next((i.name for i in interfaces
                            if any(_normal(a) == wanted for a in i.addresses)), None)
    errors = list(extra_errors if extra_errors is not None else part.errors)
    if source_addr and route_iface is None and addresses_known:
        errors.append(f"route to master {master_addr}: no interface holds the source address "
                      f"{source_addr}")
    return NetFacts(interfaces=tuple(interfaces), ib_devices=tuple(part.ib_devices),
                    peermem=part.peermem, master_addr=master_addr,
                    route_source_addr=source_addr, route_iface=route_iface,
                    errors=tuple(errors), sysfs_root=str(sysfs_root),
                    addresses_known=addresses_known)


def _normal(addr: str) -> str:
    try:
        return str(ipaddress.ip_address(addr.split("%")[0]))
    except ValueError:
        return addr

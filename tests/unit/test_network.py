"""Network facts from sysfs fixture trees, the per-node network policy, the environment lint.

The fixture hosts are built by :func:`make_sysfs` below as real directory trees laid out
like ``/sys`` (``class/net/<if>/{type,operstate,mtu,device,bridge}``,
``class/infiniband/<dev>/ports/<n>/{state,link_layer,gids/<i>,gid_attrs/types/<i>}``,
``module/nvidia_peermem``) and read by the same code that reads ``/sys``. Addresses come
from captured ``ip -d -j addr show`` output built by :func:`ip_json`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from meshrun.facts.net import (
    Gid,
    IbPort,
    Interface,
    NetFacts,
    build_facts,
    collect,
    interface_kind,
    parse_if_inet6,
    parse_ip_json,
    read_addresses,
    read_sysfs,
    route_source,
)
from meshrun.nccl import (
    LINT_CODES,
    Finding,
    choose_socket_iface,
    format_findings,
    lint_env,
    network_env,
    parse_nccl_list,
    roce_v2_gid_index,
    scale_for,
)

# --- fixture hosts -------------------------------------------------------------------------

GID_LINK_LOCAL = "fe80:0000:0000:0000:0202:c9ff:fe00:0001"


def mapped(ipv4: str) -> str:
    """The GID sysfs shows for an IPv4 address: ::ffff:a.b.c.d in 8 groups of 4 hex digits."""
    return ipaddress.IPv6Address("::ffff:" + ipv4).exploded


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def make_sysfs(root: Path, ifaces: dict, ib: dict | None = None, peermem: bool = False) -> Path:
    """A /sys-like tree. ``ifaces``: name -> dict(type, state, mtu, device, bridge);
    ``ib``: device -> {port: dict(state, link_layer, gids={index: (gid, type, ndev)})}."""
    for name, spec in ifaces.items():
        base = root / "class" / "net" / name
        write(base / "type", str(spec.get("type", 1)))
        write(base / "operstate", spec.get("state", "up"))
        write(base / "mtu", str(spec.get("mtu", 1500)))
        if spec.get("device"):
            (base / "device").mkdir(parents=True)
        if spec.get("bridge"):
            (base / "bridge").mkdir(parents=True)
    for dev, ports in (ib or {}).items():
        for number, port in ports.items():
            base = root / "class" / "infiniband" / dev / "ports" / str(number)
            write(base / "state", port["state"])
            write(base / "phys_state", "5: LinkUp" if "ACTIVE" in port["state"] else
                  "3: Disabled")
            write(base / "link_layer", port["link_layer"])
            write(base / "rate", "400 Gb/sec (4X NDR)")
            for index in range(8):  # a real table has 128-256 entries, most of them zero
                gid, kind, ndev = port.get("gids", {}).get(index, ("0000:" * 7 + "0000", "", ""))
                write(base / "gids" / str(index), gid)
                if kind:
                    write(base / "gid_attrs" / "types" / str(index), kind)
                if ndev:
                    write(base / "gid_attrs" / "ndevs" / str(index), ndev)
    if peermem:
        (root / "module" / "nvidia_peermem").mkdir(parents=True)
    return root


def ip_json(addrs: dict[str, list[str]], kinds: dict[str, str] | None = None) -> str:
    """What ``ip -d -j addr show`` prints for these interfaces (fields meshrun reads, plus
    some it ignores)."""
    out = []
    for index, (name, list_) in enumerate(addrs.items(), start=1):
        entry = {"ifindex": index, "ifname": name, "flags": ["UP"], "mtu": 1500,
                 "operstate": "UP", "link_type": "ether",
                 "addr_info": [{"family": "inet6" if ":" in a else "inet", "local": a,
                                "prefixlen": 64 if ":" in a else 24, "scope": "global"}
                               for a in list_]}
        if kinds and name in kinds:
            entry["linkinfo"] = {"info_kind": kinds[name]}
        out.append(entry)
    return json.dumps(out)


LO = {"lo": {"type": 772, "state": "unknown", "mtu": 65536}}

IB_HOST = dict(
    ifaces={**LO, "eno1": {"device": True}, "ib0": {"type": 32, "device": True, "mtu": 4092}},
    ib={"mlx5_0": {1: {"state": "4: ACTIVE", "link_layer": "InfiniBand",
                       "gids": {0: (GID_LINK_LOCAL, "IB/RoCE v1", "")}}},
        "mlx5_1": {1: {"state": "1: DOWN", "link_layer": "InfiniBand"}}},
    peermem=True,
    addrs={"lo": ["127.0.0.1", "::1"], "eno1": ["10.0.0.5"], "ib0": ["192.168.10.5"]})

ROCE_HOST = dict(
    ifaces={**LO, "ens1f0": {"device": True}},
    ib={"mlx5_0": {1: {"state": "4: ACTIVE", "link_layer": "Ethernet", "gids": {
        0: (GID_LINK_LOCAL, "IB/RoCE v1", "ens1f0"),
        1: (GID_LINK_LOCAL, "RoCE v2", "ens1f0"),
        2: (mapped("10.1.0.7"), "IB/RoCE v1", "ens1f0"),
        3: (mapped("10.1.0.7"), "RoCE v2", "ens1f0")}}}},
    addrs={"lo": ["127.0.0.1"], "ens1f0": ["10.1.0.7", "fe80::202:c9ff:fe00:1"]})

ETH_HOST = dict(
    ifaces={**LO, "eth0": {"device": True}},
    addrs={"lo": ["127.0.0.1"], "eth0": ["10.2.0.3"]})

DOCKER_HOST = dict(
    ifaces={**LO, "eth0": {"device": True}, "docker0": {"bridge": True},
            "br-0123456789ab": {"bridge": True}, "veth1a2b3c": {}},
    addrs={"lo": ["127.0.0.1"], "eth0": ["10.3.0.4"], "docker0": ["172.17.0.1"],
           "br-0123456789ab": ["172.18.0.1"], "veth1a2b3c": []},
    kinds={"veth1a2b3c": "veth", "docker0": "bridge", "br-0123456789ab": "bridge"})

HOSTS = {"ib": IB_HOST, "roce": ROCE_HOST, "eth": ETH_HOST, "docker": DOCKER_HOST}


def host_facts(tmp_path: Path, kind: str, source: str | None = None, master: str = "",
               **changes) -> NetFacts:
    host = {**HOSTS[kind], **changes}
    root = make_sysfs(tmp_path / f"sys-{kind}", host["ifaces"], host.get("ib"),
                      host.get("peermem", False))
    part = read_sysfs(root)
    return build_facts(part, parse_ip_json(ip_json(host["addrs"], host.get("kinds"))), source,
                       master_addr=master, sysfs_root=str(root))


# --- facts ---------------------------------------------------------------------------------

def test_infiniband_host_facts(tmp_path):
    facts = host_facts(tmp_path, "ib", source="192.168.10.5", master="192.168.10.1")
    assert [(i.name, i.kind, i.state, i.addresses) for i in facts.interfaces] == [
        ("eno1", "physical", "up", ("10.0.0.5",)),
        ("ib0", "ib", "up", ("192.168.10.5",)),
        ("lo", "loopback", "unknown", ("127.0.0.1", "::1"))]
    assert facts.iface("ib0").mtu == 4092
    assert facts.route_iface == "ib0"
    assert [d.name for d in facts.ib_devices] == ["mlx5_0", "mlx5_1"]
    port = facts.ib_device("mlx5_0").ports[0]
    assert (port.number, port.state, port.link_layer, port.active, port.roce) == (
        1, "4: ACTIVE", "InfiniBand", True, False)
    assert port.gids == (Gid(0, GID_LINK_LOCAL, "IB/RoCE v1", ""),)  # zero entries dropped
    assert not facts.ib_device("mlx5_1").ports[0].active
    assert [(d.name, p.number) for d, p in facts.active_ib_ports] == [("mlx5_0", 1)]
    assert facts.peermem == "nvidia_peermem"
    assert facts.errors == ()


def test_roce_host_facts_and_gid_index(tmp_path):
    facts = host_facts(tmp_path, "roce", source="10.1.0.7", master="10.1.0.1")
    port = facts.ib_device("mlx5_0").ports[0]
    assert port.roce and port.active
    assert [(g.index, g.type, g.ipv4, g.ndev) for g in port.gids] == [
        (0, "IB/RoCE v1", None, "ens1f0"), (1, "RoCE v2", None, "ens1f0"),
        (2, "IB/RoCE v1", "10.1.0.7", "ens1f0"), (3, "RoCE v2", "10.1.0.7", "ens1f0")]
    assert roce_v2_gid_index(port) == 3
    assert roce_v2_gid_index(port, "10.1.0.7") == 3
    assert facts.peermem == ""


def test_gid_index_prefers_the_route_address_then_ipv4_then_any_v2():
    two = IbPort(1, "4: ACTIVE", "Ethernet", gids=(
        Gid(1, GID_LINK_LOCAL, "RoCE v2"), Gid(3, mapped("10.9.0.1"), "RoCE v2"),
        Gid(5, mapped("10.1.0.7"), "RoCE v2")))
    assert roce_v2_gid_index(two, "10.1.0.7") == 5
    assert roce_v2_gid_index(two, "10.5.5.5") == 3
    only_v6 = IbPort(1, "4: ACTIVE", "Ethernet", gids=(Gid(0, GID_LINK_LOCAL, "IB/RoCE v1"),
                                                      Gid(1, GID_LINK_LOCAL, "RoCE v2")))
    assert roce_v2_gid_index(only_v6) == 1
    assert roce_v2_gid_index(IbPort(1, gids=(Gid(0, GID_LINK_LOCAL, "IB/RoCE v1"),))) is None


def test_ethernet_host_facts(tmp_path):
    facts = host_facts(tmp_path, "eth", source="10.2.0.3", master="10.2.0.1")
    assert facts.ib_devices == () and facts.peermem == "" and facts.errors == ()
    assert facts.route_iface == "eth0"


def test_docker_host_kinds(tmp_path):
    facts = host_facts(tmp_path, "docker")
    assert {i.name: i.kind for i in facts.interfaces} == {
        "lo": "loopback", "eth0": "physical", "docker0": "docker", "br-0123456789ab": "docker",
        "veth1a2b3c": "veth"}


@pytest.mark.parametrize("name, traits, kind", [
    ("lo", {}, "loopback"),
    ("anything", {"arphrd": 772}, "loopback"),
    ("docker0", {"has_bridge": True}, "docker"),
    ("br-0123456789ab", {}, "docker"),
    ("br0", {"has_bridge": True}, "bridge"),
    ("veth9", {}, "veth"),
    ("eth0", {"link_kind": "veth"}, "veth"),
    ("ib0", {"arphrd": 32, "has_device": True}, "ib"),
    ("ens1f0", {"has_device": True}, "physical"),
    ("bond0", {"link_kind": "bond"}, "virtual"),
])
def test_interface_kind(name, traits, kind):
    assert interface_kind(name, **traits) == kind


def test_parse_ip_json_real_shape():
    # Trimmed from `ip -d -j addr show` on a CI machine, plus a veth with linkinfo.
    text = ('[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,'
            '"operstate":"UNKNOWN","link_type":"loopback","addr_info":[{"family":"inet",'
            '"local":"127.0.0.1","prefixlen":8,"scope":"host","label":"lo"},{"family":"inet6",'
            '"local":"::1","prefixlen":128,"scope":"host"}]},{"ifindex":2,"ifname":"ifb0",'
            '"mtu":1500,"operstate":"DOWN","addr_info":[]},{},{"ifindex":4,"ifname":"eth0",'
            '"mtu":1400,"operstate":"UP","linkinfo":{"info_kind":"veth"},"addr_info":[{'
            '"family":"inet","local":"192.0.2.2","prefixlen":24},{"family":"inet6",'
            '"local":"fe80::fc:ff:fe00:1%eth0","prefixlen":64,"scope":"link"}]}]')
    parsed = parse_ip_json(text)
    assert list(parsed) == ["lo", "ifb0", "eth0"]
    assert parsed["lo"].addresses == ("127.0.0.1", "::1")
    assert parsed["ifb0"].addresses == () and parsed["ifb0"].operstate == "down"
    assert parsed["eth0"].addresses == ("192.0.2.2", "fe80::fc:ff:fe00:1")
    assert (parsed["eth0"].link_kind, parsed["eth0"].mtu) == ("veth", 1400)
    assert parse_ip_json("") == {}
    with pytest.raises(ValueError):
        parse_ip_json("Object \"addr\" is unknown")
    with pytest.raises(ValueError):
        parse_ip_json('{"ifname": "eth0"}')


def test_parse_if_inet6():
    text = ("00000000000000000000000000000001 01 80 10 80       lo\n"
            "fe8000000000000000fc00fffe000001 04 40 20 80     eth0\n"
            "garbage\n")
    assert parse_if_inet6(text) == [("lo", "::1"), ("eth0", "fe80::fc:ff:fe00:1")]


def test_unreadable_sysfs_is_an_error_line_not_an_exception(tmp_path):
    part = read_sysfs(tmp_path / "missing")
    assert part.interfaces == [] and part.ib_devices == []
    assert len(part.errors) == 1 and part.errors[0].startswith("network interfaces: cannot list")


def test_source_address_nobody_holds(tmp_path):
    facts = host_facts(tmp_path, "eth", source="10.99.0.1", master="10.99.0.254")
    assert facts.route_iface is None
    assert facts.errors == ("route to master 10.99.0.254: no interface holds the source "
                            "address 10.99.0.1",)
    assert "no interface of this host holds 10.99.0.1" in choose_socket_iface(facts).reason


def test_importing_the_network_modules_does_not_import_torch():
    code = ("import sys, meshrun.facts.net, meshrun.nccl; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_records_validate():
    with pytest.raises(ValueError):
        Interface("eth0", kind="ethernet")
    with pytest.raises(ValueError):
        Finding("no-such-code", "error", "X", "m")
    with pytest.raises(ValueError):
        Finding("env-unknown", "fatal", "X", "m")


# --- the real host (collection's effect side) -----------------------------------------------

def test_collect_on_this_host_loopback_master_picks_nothing():
    facts = collect("127.0.0.1", 29500)
    assert facts.route_source_addr == "127.0.0.1"
    assert facts.route_iface == "lo"
    assert "lo" in [i.name for i in facts.interfaces]
    choice = choose_socket_iface(facts)
    assert choice.name is None and "loopback" in choice.reason


def test_collect_on_this_host_own_address_picks_its_interface():
    facts = collect("127.0.0.1")
    candidates = [(i.name, a) for i in facts.interfaces if i.kind != "loopback"
                  and i.state != "down" for a in i.ipv4]
    if not candidates:
        pytest.skip("this host has no non-loopback IPv4 address")
    name, addr = candidates[0]
    # Node 0's case: the master address is its own; the kernel answers over lo, but the
    # source address is the one on `name`.
    facts = collect(addr)
    assert (facts.route_source_addr, facts.route_iface) == (addr, name)


def test_collect_relocated_sysfs_and_no_master(tmp_path):
    root = make_sysfs(tmp_path / "sys", IB_HOST["ifaces"], IB_HOST["ib"], peermem=True)
    facts = collect("", env={**os.environ, "MESHRUN_SYSFS_ROOT": str(root)})
    assert [i.name for i in facts.interfaces] == ["eno1", "ib0", "lo"]
    assert facts.peermem == "nvidia_peermem" and len(facts.ib_devices) == 2
    assert facts.route_source_addr is None
    assert "route to master: no master address" in facts.errors


def test_addresses_without_iproute2(tmp_path):
    """No ``ip`` on PATH: the SIOCGIFADDR ioctl and /proc/net/if_inet6 still give addresses."""
    addrs, error = read_addresses({"PATH": str(tmp_path)})
    assert error == ""
    assert "127.0.0.1" in addrs["lo"].addresses
    facts = collect("127.0.0.1", env={"PATH": str(tmp_path)})
    assert facts.route_iface == "lo" and facts.addresses_known


def test_route_source_reports_instead_of_raising():
    assert route_source("::1") == ("::1", "")
    assert route_source("[::1]", 80) == ("::1", "")


# --- the interface choice ------------------------------------------------------------------

@pytest.mark.parametrize("kind, source, picked, why", [
    ("ib", "192.168.10.5", "ib0", "routes to master 10.9.9.9 (source address 192.168.10.5)"),
    ("eth", "10.2.0.3", "eth0", "routes to master"),
    ("docker", "10.3.0.4", "eth0", "routes to master"),
    ("docker", "172.17.0.1", None, "docker0 is a Docker bridge"),
    ("docker", "172.18.0.1", None, "br-0123456789ab is a Docker bridge"),
    ("docker", "127.0.0.1", None, "lo is loopback"),
], ids=["ipoib", "ethernet", "docker-host-eth0", "docker0", "docker-network", "loopback"])
def test_choose_socket_iface(tmp_path, kind, source, picked, why):
    choice = choose_socket_iface(host_facts(tmp_path, kind, source=source, master="10.9.9.9"))
    assert choice.name == picked
    assert why in choice.reason


def test_host_end_of_veth_never_chosen_but_a_containers_eth0_is(tmp_path):
    veth_host = Interface("veth1a2b3c", kind="veth", state="up", addresses=("169.254.0.1",))
    facts = NetFacts(interfaces=(veth_host,), master_addr="169.254.0.9",
                     route_source_addr="169.254.0.1", route_iface="veth1a2b3c")
    assert choose_socket_iface(facts) == choose_socket_iface(facts).__class__(
        None, "master 169.254.0.9 is reached from 169.254.0.1, but veth1a2b3c is the host end "
              "of a container's veth pair")
    pod_eth0 = Interface("eth0", kind="veth", state="up", addresses=("10.244.1.7",))
    facts = NetFacts(interfaces=(pod_eth0,), master_addr="10.244.0.5",
                     route_source_addr="10.244.1.7", route_iface="eth0")
    assert choose_socket_iface(facts).name == "eth0"


# --- the policy ----------------------------------------------------------------------------

# host kind -> (this node's source address towards the master, the master address)
ROUTES = {"ib": ("192.168.10.5", "192.168.10.1"), "roce": ("10.1.0.7", "10.1.0.1"),
          "eth": ("10.2.0.3", "10.2.0.1"), "docker": ("10.3.0.4", "10.3.0.1")}


def policy(tmp_path, kind, *, nnodes=2, device="cuda", user=None, source=None, master=None,
           **changes):
    src, mst = ROUTES[kind]
    facts = host_facts(tmp_path, kind, source=source or src, master=master or mst, **changes)
    return network_env(facts, nnodes=nnodes, device=device, user_env=user or {})


def test_policy_infiniband_host(tmp_path):
    result = policy(tmp_path, "ib")
    env = result.env_dict()
    assert env == {"GLOO_SOCKET_IFNAME": "ib0", "NCCL_SOCKET_IFNAME": "=ib0",
                   "NCCL_IB_HCA": "=mlx5_0:1", "NCCL_NET_GDR_LEVEL": "PHB",
                   "NCCL_BUFFSIZE": "16777216", "MESHRUN_PG_TIMEOUT": "7200"}
    reasons = {v.name: v.reason for v in result.env}
    assert reasons["NCCL_IB_HCA"] == ("active InfiniBand ports; skipped: mlx5_1 port 1 DOWN "
                                      "(InfiniBand)")
    assert "nvidia_peermem is loaded" in reasons["NCCL_NET_GDR_LEVEL"]
    assert reasons["GLOO_SOCKET_IFNAME"] == ("routes to master 192.168.10.1 (source address "
                                             "192.168.10.5)")
    assert result.warnings == ()


def test_policy_roce_host_sets_the_v2_gid_index(tmp_path):
    result = policy(tmp_path, "roce")
    env = result.env_dict()
    assert env["NCCL_IB_GID_INDEX"] == "3"
    assert env["NCCL_IB_HCA"] == "=mlx5_0:1" and env["NCCL_SOCKET_IFNAME"] == "=ens1f0"
    assert "NCCL_NET_GDR_LEVEL" not in env
    assert any("nvidia_peermem is not loaded" in n for n in result.notes)
    reason = next(v.reason for v in result.env if v.name == "NCCL_IB_GID_INDEX")
    assert reason.startswith("RoCE v2 GID of mlx5_0:1 (10.1.0.7 on ens1f0)")


def test_policy_roce_ports_that_disagree_leave_the_gid_index_to_nccl(tmp_path):
    second = {1: {"state": "4: ACTIVE", "link_layer": "Ethernet",
                  "gids": {5: (mapped("10.1.1.7"), "RoCE v2", "ens1f1")}}}
    result = policy(tmp_path, "roce", ib={**ROCE_HOST["ib"], "mlx5_1": second})
    assert "NCCL_IB_GID_INDEX" not in result.env_dict()
    assert result.env_dict()["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert any("RoCE ports disagree (mlx5_0:1: 3, mlx5_1:1: 5)" in n for n in result.notes)


def test_policy_ethernet_host_disables_ib(tmp_path):
    result = policy(tmp_path, "eth")
    env = result.env_dict()
    assert env["NCCL_IB_DISABLE"] == "1"
    assert not {"NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_NET_GDR_LEVEL"} & set(env)
    reason = next(v.reason for v in result.env if v.name == "NCCL_IB_DISABLE")
    assert reason.startswith("no RDMA device under ") and reason.endswith(
        "class/infiniband: NCCL uses TCP sockets")


def test_policy_only_down_ports_disable_ib_and_say_which(tmp_path):
    down = {"mlx5_0": {1: {"state": "1: DOWN", "link_layer": "InfiniBand"}}}
    result = policy(tmp_path, "ib", ib=down)
    reason = next(v.reason for v in result.env if v.name == "NCCL_IB_DISABLE")
    assert reason == ("no active InfiniBand/RoCE port (mlx5_0 port 1 DOWN (InfiniBand)): NCCL "
                      "uses TCP sockets")
    assert "NCCL_NET_GDR_LEVEL" not in result.env_dict()


def test_policy_cpu_job_gets_gloo_and_the_timeout_only(tmp_path):
    result = policy(tmp_path, "ib", device="cpu")
    assert result.env_dict() == {"GLOO_SOCKET_IFNAME": "ib0", "MESHRUN_PG_TIMEOUT": "7200"}
    assert "no NCCL variables: CPU workers use gloo" in result.notes


def test_policy_docker_host_uses_eth0(tmp_path):
    assert policy(tmp_path, "docker").env_dict()["NCCL_SOCKET_IFNAME"] == "=eth0"


def test_policy_route_over_docker_bridge_sets_no_interface(tmp_path):
    result = policy(tmp_path, "docker", source="172.17.0.1", master="172.17.0.2")
    assert not {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"} & set(result.env_dict())
    assert any("docker0 is a Docker bridge" in n and "choose an interface themselves" in n
               for n in result.notes)


def test_policy_simulated_nodes_on_loopback(tmp_path):
    result = policy(tmp_path, "eth", source="127.0.0.1", master="127.0.0.1")
    assert "NCCL_SOCKET_IFNAME" not in result.env_dict()
    assert any("lo is loopback" in n for n in result.notes)


@pytest.mark.parametrize("nnodes, timeout, buffsize", [
    (1, "3600", "16777216"), (2, "7200", "16777216"), (7, "7200", "16777216"),
    (8, "14400", "33554432"), (64, "14400", "33554432")])
def test_policy_node_count_thresholds(tmp_path, nnodes, timeout, buffsize):
    env = policy(tmp_path, "ib", nnodes=nnodes).env_dict()
    assert (env["MESHRUN_PG_TIMEOUT"], env["NCCL_BUFFSIZE"]) == (timeout, buffsize)
    assert scale_for(nnodes).pg_timeout_s == int(timeout)


def test_policy_single_node_sets_no_interface(tmp_path):
    result = policy(tmp_path, "ib", nnodes=1)
    assert not {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"} & set(result.env_dict())
    assert "GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME not set: one node, no traffic between " \
           "nodes" in result.notes


def test_policy_keeps_user_values_and_warns_when_they_differ(tmp_path):
    user = {"NCCL_SOCKET_IFNAME": "eth0", "MESHRUN_PG_TIMEOUT": "1800",
            "NCCL_IB_HCA": "mlx5", "NCCL_BUFFSIZE": "0x1000000", "GLOO_SOCKET_IFNAME": "ib0"}
    result = policy(tmp_path, "ib", user=user)
    env = result.env_dict()
    assert not set(user) & set(env)  # never changed, never repeated
    assert result.warnings == (
        "NCCL_SOCKET_IFNAME=eth0 set by you; meshrun would pick ib0 (routes to master "
        "192.168.10.1 (source address 192.168.10.5))",
        "MESHRUN_PG_TIMEOUT=1800 set by you; meshrun would set 7200 (process-group timeout "
        "for 2-7 nodes (2 h): a collective waiting longer fails; read by "
        "meshrun.init_distributed and the recipes only: a script calling init_process_group "
        "itself keeps torch's default (NCCL 10 min, gloo 30 min) unless it passes timeout=)")
    # mlx5 selects mlx5_0 (active) and mlx5_1 (down): the same active ports -> no warning;
    # 0x1000000 is 16 MiB as NCCL reads it; GLOO_SOCKET_IFNAME=ib0 is meshrun's choice.


def test_policy_user_disabled_ib_on_an_ib_host(tmp_path):
    result = policy(tmp_path, "ib", user={"NCCL_IB_DISABLE": "1"})
    assert not {"NCCL_IB_HCA", "NCCL_NET_GDR_LEVEL", "NCCL_IB_DISABLE"} & set(result.env_dict())
    assert result.warnings == ("NCCL_IB_DISABLE=1 set by you; this node has active RDMA ports "
                               "(mlx5_0:1): meshrun would use them",)


def test_policy_user_enabled_ib_on_an_ethernet_host(tmp_path):
    result = policy(tmp_path, "eth", user={"NCCL_IB_DISABLE": "0"})
    assert "NCCL_IB_DISABLE" not in result.env_dict()
    assert result.warnings[0].startswith("NCCL_IB_DISABLE=0 set by you; meshrun would set 1 "
                                         "(no RDMA device under ")


def test_policy_unreadable_infiniband_is_left_to_nccl(tmp_path):
    facts = host_facts(tmp_path, "ib", source="192.168.10.5", master="192.168.10.1")
    facts = NetFacts(**{**facts.__dict__,
                        "errors": ("infiniband: cannot list /sys/class/infiniband: denied",)})
    result = network_env(facts, nnodes=2, device="cuda", user_env={})
    assert not {"NCCL_IB_HCA", "NCCL_IB_DISABLE"} & set(result.env_dict())
    assert any(n.startswith("InfiniBand/RoCE left to NCCL: infiniband: cannot list")
               for n in result.notes)


@pytest.mark.parametrize("kind", sorted(HOSTS))
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_every_variable_has_a_one_line_reason(tmp_path, kind, device):
    result = policy(tmp_path, kind, device=device)
    assert result.env
    for var in result.env:
        assert var.reason and "\n" not in var.reason, var
        assert var.name != "NCCL_TIMEOUT"  # read by nothing


@pytest.mark.parametrize("kind", sorted(HOSTS))
def test_policy_output_passes_the_lint(tmp_path, kind):
    """What meshrun sets must be what its own lint accepts on the same host."""
    source, master = ROUTES[kind]
    facts = host_facts(tmp_path, kind, source=source, master=master)
    env = network_env(facts, nnodes=8, device="cuda", user_env={}).env_dict()
    assert lint_env(env, facts) == []


def test_policy_rejects_bad_arguments(tmp_path):
    facts = NetFacts()
    with pytest.raises(ValueError):
        network_env(facts, nnodes=2, device="gpu", user_env={})
    with pytest.raises(ValueError):
        network_env(facts, nnodes=0, device="cpu", user_env={})


# --- NCCL's list syntax --------------------------------------------------------------------

@pytest.mark.parametrize("value, name, port, selected", [
    ("eth", "eth0", None, True),
    ("eth", "ens1", None, False),
    ("=eth0", "eth0", None, True),
    ("=eth0", "eth01", None, False),
    ("=eth0,eth1", "eth1", None, True),
    ("^docker", "docker0", None, False),
    ("^docker", "eth0", None, True),
    ("^=docker0", "docker01", None, True),
    ("mlx5_1", "mlx5_10", 1, True),           # a prefix: mlx5_1 also selects mlx5_10
    ("=mlx5_1", "mlx5_10", 1, False),
    ("=mlx5_0:1,mlx5_1:1", "mlx5_0", 1, True),
    ("=mlx5_0:1,mlx5_1:1", "mlx5_0", 2, False),
])
def test_nccl_list_syntax(value, name, port, selected):
    assert parse_nccl_list(value, ports=True).selects(name, port) is selected


def test_nccl_list_bad_port():
    with pytest.raises(ValueError):
        parse_nccl_list("mlx5_0:x", ports=True)


# --- the lint ------------------------------------------------------------------------------

def _codes(findings):
    return {(f.code, f.severity, f.subject) for f in findings}


LINT_TABLE = [
    # (id, env, host kind or None, expected {(code, severity, subject)})
    ("clean", {"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "=mlx5_0:1", "NCCL_SOCKET_IFNAME": "ib",
               "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}, "ib", set()),
    ("typo-hca", {"NCCL_IB_HCAS": "mlx5"}, None, {("env-unknown", "warning", "NCCL_IB_HCAS")}),
    ("typo-torch", {"TORCH_NCCL_BLOCKING_WAITS": "1"}, None,
     {("env-unknown", "warning", "TORCH_NCCL_BLOCKING_WAITS")}),
    ("unrelated-vars-ignored", {"PATH": "/bin", "NCCLX": "1", "CUDA_VISIBLE_DEVICES": "0"},
     None, set()),
    ("plugin-family", {"NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "eth1"}, None, set()),
    ("nccl-timeout", {"NCCL_TIMEOUT": "10800"}, None, {("env-unread", "warning", "NCCL_TIMEOUT")}),
    ("torch-timeout", {"TORCH_DISTRIBUTED_TIMEOUT": "10800"}, None,
     {("env-unread", "warning", "TORCH_DISTRIBUTED_TIMEOUT")}),
    ("deprecated-async", {"NCCL_ASYNC_ERROR_HANDLING": "1"}, None,
     {("env-deprecated", "warning", "NCCL_ASYNC_ERROR_HANDLING")}),
    ("deprecated-blocking-bad-value", {"NCCL_BLOCKING_WAIT": "yes"}, None,
     {("env-deprecated", "warning", "NCCL_BLOCKING_WAIT"),
      ("env-bad-value", "error", "NCCL_BLOCKING_WAIT")}),
    ("deprecated-gdr-level-name", {"NCCL_IB_GDR_LEVEL": "PHB"}, None,
     {("env-deprecated", "warning", "NCCL_IB_GDR_LEVEL")}),
    ("removed-ll-threshold", {"NCCL_LL_THRESHOLD": "0"}, None,
     {("env-removed", "warning", "NCCL_LL_THRESHOLD")}),
    ("nthreads-640", {"NCCL_NTHREADS": "640"}, None, {("env-bad-value", "error", "NCCL_NTHREADS")}),
    ("nthreads-256", {"NCCL_NTHREADS": "256"}, None, set()),
    ("buffsize-not-a-number", {"NCCL_BUFFSIZE": "16MB"}, None,
     {("env-bad-value", "error", "NCCL_BUFFSIZE")}),
    ("buffsize-hex", {"NCCL_BUFFSIZE": "0x1000000"}, None, set()),
    ("ib-timeout-infinite", {"NCCL_IB_TIMEOUT": "32"}, None,
     {("env-bad-value", "warning", "NCCL_IB_TIMEOUT")}),
    ("debug-level", {"NCCL_DEBUG": "verbose"}, None, {("env-bad-value", "warning", "NCCL_DEBUG")}),
    ("debug-info-lowercase", {"NCCL_DEBUG": "info", "NCCL_DEBUG_SUBSYS": "INIT,NET"}, None,
     set()),
    ("subsys-without-info", {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_SUBSYS": "ALL"}, None,
     {("env-no-effect", "info", "NCCL_DEBUG_SUBSYS")}),
    ("algo-typo", {"NCCL_ALGO": "allreduce:ring,treee"}, None,
     {("env-bad-value", "error", "NCCL_ALGO")}),
    ("algo-ok", {"NCCL_ALGO": "^tree;allreduce:ring,nvls", "NCCL_PROTO": "^LL128"}, None, set()),
    ("gdr-legacy-int", {"NCCL_NET_GDR_LEVEL": "5"}, None,
     {("env-legacy-value", "info", "NCCL_NET_GDR_LEVEL")}),
    ("p2p-level-bad", {"NCCL_P2P_LEVEL": "NVLINK"}, None,
     {("env-bad-value", "error", "NCCL_P2P_LEVEL")}),
    ("sockets-over-64", {"NCCL_SOCKET_NTHREADS": "8", "NCCL_NSOCKS_PERTHREAD": "16"}, None,
     {("env-bad-value", "error", "NCCL_NSOCKS_PERTHREAD")}),
    ("ib-settings-with-ib-disabled", {"NCCL_IB_DISABLE": "1", "NCCL_IB_HCA": "mlx5",
                                      "NCCL_IB_GID_INDEX": "3"}, None,
     {("env-ib-disabled", "warning", "NCCL_IB_GID_INDEX")}),
    ("pg-timeout-bad", {"MESHRUN_PG_TIMEOUT": "2h"}, None,
     {("env-bad-value", "error", "MESHRUN_PG_TIMEOUT")}),
    ("torch-debug-bad", {"TORCH_DISTRIBUTED_DEBUG": "ALL"}, None,
     {("env-bad-value", "error", "TORCH_DISTRIBUTED_DEBUG")}),
    ("dump-without-buffer", {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}, None,
     {("env-no-effect", "info", "TORCH_NCCL_DUMP_ON_TIMEOUT")}),
    ("hca-missing-on-ib-host", {"NCCL_IB_HCA": "=mlx5_2"}, "ib",
     {("env-no-such-hca", "error", "NCCL_IB_HCA")}),
    ("hca-prefix-mlx5_1-matches-down-port-only", {"NCCL_IB_HCA": "=mlx5_1"}, "ib",
     {("env-no-such-hca", "error", "NCCL_IB_HCA")}),
    ("hca-wrong-port", {"NCCL_IB_HCA": "mlx5_0:2"}, "ib",
     {("env-no-such-hca", "error", "NCCL_IB_HCA")}),
    ("hca-exclude-ok", {"NCCL_IB_HCA": "^=mlx5_1"}, "ib", set()),
    ("ifname-missing", {"NCCL_SOCKET_IFNAME": "ib0"}, "eth",
     {("env-no-such-iface", "error", "NCCL_SOCKET_IFNAME")}),
    ("ifname-excludes-all", {"NCCL_SOCKET_IFNAME": "^e,lo"}, "eth",
     {("env-no-such-iface", "error", "NCCL_SOCKET_IFNAME")}),
    ("ifname-no-address", {"NCCL_SOCKET_IFNAME": "=veth1a2b3c"}, "docker",
     {("env-iface-unusable", "warning", "NCCL_SOCKET_IFNAME")}),
    ("gloo-ifname-missing", {"GLOO_SOCKET_IFNAME": "eth0,eth1"}, "eth",
     {("env-no-such-iface", "error", "GLOO_SOCKET_IFNAME")}),
    ("ib-settings-without-hca", {"NCCL_IB_DISABLE": "0", "NCCL_IB_TIMEOUT": "22"}, "eth",
     {("env-ib-unavailable", "warning", "NCCL_IB_DISABLE")}),
    ("gid-index-on-infiniband", {"NCCL_IB_GID_INDEX": "3"}, "ib",
     {("env-gid-index", "info", "NCCL_IB_GID_INDEX")}),
    ("gid-index-v1-on-roce", {"NCCL_IB_GID_INDEX": "2"}, "roce",
     {("env-gid-index", "warning", "NCCL_IB_GID_INDEX")}),
    ("gid-index-empty-on-roce", {"NCCL_IB_GID_INDEX": "6"}, "roce",
     {("env-gid-index", "error", "NCCL_IB_GID_INDEX")}),
    ("gid-index-v2-on-roce", {"NCCL_IB_GID_INDEX": "3"}, "roce", set()),
]


@pytest.mark.parametrize("env, kind, expected", [row[1:] for row in LINT_TABLE],
                         ids=[row[0] for row in LINT_TABLE])
def test_lint_table(tmp_path, env, kind, expected):
    facts = host_facts(tmp_path, kind) if kind else None
    findings = lint_env(env, facts)
    assert _codes(findings) == expected, [f.line() for f in findings]
    for finding in findings:
        assert finding.code in LINT_CODES
        assert finding.message and "\n" not in finding.line()


def test_lint_unknown_name_suggests_the_right_one():
    (finding,) = lint_env({"NCCL_IB_HCAS": "mlx5"})
    assert finding.line() == ("meshrun: warning: NCCL_IB_HCAS: unknown; NCCL reads no such "
                              "variable; fix: did you mean NCCL_IB_HCA? [env-unknown]")
    (finding,) = lint_env({"NCCL_SOCKET_IFNAMES": "eth0"})
    assert finding.hint == "did you mean NCCL_SOCKET_IFNAME?"


def test_lint_deprecated_and_unread_say_what_to_do():
    findings = {f.subject: f for f in lint_env({"NCCL_ASYNC_ERROR_HANDLING": "1",
                                                "NCCL_TIMEOUT": "10800"})}
    assert findings["NCCL_ASYNC_ERROR_HANDLING"].hint == \
        "rename it to TORCH_NCCL_ASYNC_ERROR_HANDLING=1"
    assert "MESHRUN_PG_TIMEOUT" in findings["NCCL_TIMEOUT"].hint
    assert findings["NCCL_TIMEOUT"].to_json() == {
        "code": "env-unread", "severity": "warning", "subject": "NCCL_TIMEOUT",
        "message": "NCCL_TIMEOUT=10800: neither NCCL nor torch reads NCCL_TIMEOUT",
        "fix": findings["NCCL_TIMEOUT"].hint}


SEED_004 = """
export NCCL_IB_DISABLE=0              # IB on
export NCCL_IB_HCA=mlx5               # IB device
export NCCL_SOCKET_IFNAME=ib0         # network interface
export NCCL_NET_GDR_LEVEL=5           # GPU Direct RDMA
export NCCL_IB_GID_INDEX=3            # RoCE mode
export NCCL_IB_TIMEOUT=22
export NCCL_IB_RETRY_CNT=7
export NCCL_CROSS_NIC=0
export NCCL_P2P_LEVEL=SYS
export NCCL_BUFFSIZE=8388608
export NCCL_NTHREADS=640
export NCCL_ASYNC_ERROR_HANDLING=1
export NCCL_DEBUG=INFO
export NCCL_DEBUG_SUBSYS=ALL
export TORCH_DISTRIBUTED_DEBUG=DETAIL
"""


def exports(block: str) -> dict[str, str]:
    """``export NAME=VALUE  # comment`` lines -> {NAME: VALUE}."""
    out = {}
    for line in block.splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("export "):
            name, _, value = line[len("export "):].partition("=")
            out[name] = value
    return out


def test_lint_seed_004_on_an_ethernet_host(tmp_path):
    """Seed 004's "two-node IB" block, run on a host with eth0 only."""
    findings = lint_env(exports(SEED_004), host_facts(tmp_path, "eth"))
    assert _codes(findings) == {
        ("env-bad-value", "error", "NCCL_NTHREADS"),
        ("env-deprecated", "warning", "NCCL_ASYNC_ERROR_HANDLING"),
        ("env-legacy-value", "info", "NCCL_NET_GDR_LEVEL"),
        ("env-no-such-iface", "error", "NCCL_SOCKET_IFNAME"),
        ("env-no-such-hca", "error", "NCCL_IB_HCA"),
        ("env-ib-unavailable", "warning", "NCCL_IB_DISABLE"),
    }
    text = format_findings(findings)
    assert text.splitlines()[0].startswith("meshrun: error: ")
    assert ("meshrun: error: NCCL_NTHREADS=640 is not one of 64, 128, 256, 512 (NCCL ignores "
            "other values and uses its default); fix: set NCCL_NTHREADS to one of 64, 128, "
            "256, 512") in text
    assert ("NCCL_SOCKET_IFNAME=ib0: no interface starting with ib0 on this host (interfaces: "
            "eth0, lo)") in text
    assert "NCCL_IB_HCA=mlx5: this host has no RDMA device starting with mlx5 (RDMA ports: " \
           "none)" in text


def test_lint_seed_000_and_001_blocks_on_an_ib_host(tmp_path):
    env = {"NCCL_IB_HCA": ",".join(f"mlx5_{i}" for i in range(100, 108)),
           "NCCL_ALGO": "Ring", "NCCL_TIMEOUT": "28800", "TORCH_DISTRIBUTED_TIMEOUT": "10800"}
    findings = lint_env(env, host_facts(tmp_path, "ib"))
    assert _codes(findings) == {("env-no-such-hca", "error", "NCCL_IB_HCA"),
                                ("env-unread", "warning", "NCCL_TIMEOUT"),
                                ("env-unread", "warning", "TORCH_DISTRIBUTED_TIMEOUT")}
    hca = next(f for f in findings if f.subject == "NCCL_IB_HCA")
    assert "mlx5_100, mlx5_101" in hca.message and "mlx5_0 port 1 ACTIVE" in hca.message

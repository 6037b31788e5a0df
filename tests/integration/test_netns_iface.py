"""Two network namespaces whose interfaces are named differently: each node picks its own.

Namespace mrnet-a holds ``ethA`` = 10.78.0.1/24 (it plays node 0: the master address is
its own), mrnet-b holds ``ethB`` = 10.78.0.2/24; a veth pair joins them. In each, real
collection (``ip netns exec`` gives the namespace its own /sys/class/net, ``ip -d -j addr``
and the UDP route lookup) feeds the real policy. Needs root and iproute2: skipped without,
but a failure under CI=true. (tests/cluster/mpi_two_hosts.sh uses mr-h1/mr-h2 and
10.77.0.0/24; nothing here touches those.)
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.netns]

NODES = (("mrnet-a", "ethA", "10.78.0.1"), ("mrnet-b", "ethB", "10.78.0.2"))
MASTER = NODES[0][2]
PROBE = """
import json, sys
from meshrun.facts.net import collect
from meshrun.nccl import network_env
facts = collect(sys.argv[1], 29500)
policy = network_env(facts, nnodes=2, device="cuda", user_env={})
print(json.dumps({"route_iface": facts.route_iface, "source": facts.route_source_addr,
                  "interfaces": {i.name: i.kind for i in facts.interfaces},
                  "errors": list(facts.errors), "env": policy.env_dict()}))
"""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode:
        pytest.fail(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


def _cleanup() -> None:
    for ns, _, _ in NODES:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


@pytest.fixture
def two_namespaces():
    why = ("needs root" if os.geteuid() != 0
           else "needs iproute2 (ip)" if shutil.which("ip") is None else None)
    if why:
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(why)
    _cleanup()  # a run killed half-way may have left them
    try:
        for ns, _, _ in NODES:
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", "mrnet-va", "type", "veth", "peer", "name", "mrnet-vb")
        for (ns, ifname, addr), end in zip(NODES, ("mrnet-va", "mrnet-vb")):
            _ip("link", "set", end, "netns", ns)
            _ip("-n", ns, "link", "set", end, "name", ifname)
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", ifname)
            _ip("-n", ns, "link", "set", ifname, "up")
        yield
    finally:
        _cleanup()  # deleting a namespace deletes its end of the veth pair, and so the pair


def test_each_node_picks_its_own_interface(two_namespaces):
    seen = {}
    for ns, ifname, addr in NODES:
        done = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", PROBE, MASTER],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        seen[ifname] = result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["interfaces"] == {"lo": "loopback", ifname: "veth"}, result
        assert (result["route_iface"], result["source"]) == (ifname, addr), result
        # A veth inside its namespace is that node's real interface, like a pod's eth0.
        assert result["env"]["NCCL_SOCKET_IFNAME"] == f"={ifname}", result
        assert result["env"]["GLOO_SOCKET_IFNAME"] == ifname, result
        assert result["env"]["NCCL_IB_DISABLE"] == "1", result
        assert result["errors"] == [], result
    assert set(seen) == {"ethA", "ethB"}

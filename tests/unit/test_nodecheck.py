"""The node check's verdict (meshrun.worker.nodecheck.judge), from every rank's figures."""

from __future__ import annotations

import pytest

from meshrun.worker.nodecheck import judge


def _rows(gflops: dict[int, float], links: dict[int, float], nproc: int = 2,
          transport: dict[int, str] | None = None) -> list[dict]:
    rows = []
    for node, rate in gflops.items():
        for local in range(nproc):
            rows.append({"rank": node * nproc + local, "node": node, "gflops": rate,
                         "link_in": links.get(node, -1.0) if local == 0 else -1.0,
                         "transport": (transport or {}).get(node, "unknown")})
    return rows


HOSTS = {0: "a", 1: "b", 2: "c", 3: "d"}


def test_a_slow_compute_node_is_named_with_its_figures():
    v = judge(_rows({0: 100, 1: 100, 2: 50, 3: 100}, {0: 5, 1: 5, 2: 5, 3: 5}), HOSTS,
              seconds=2.0, busbw=3.0)
    assert [(f["node"], f["what"]) for f in v["findings"]] == [(2, "compute")]
    assert v["findings"][0]["ratio"] == pytest.approx(2.0)
    assert v["findings"][0]["line"] == (
        "meshrun: node check: node 2 (c) is slow: its compute runs at 50 GFLOP/s a rank, "
        "2.0x slower than the other nodes' median (100 GFLOP/s)")
    assert v["summary"].endswith("; slow: node 2 (c)")


def test_two_nodes_each_is_compared_with_the_other():
    """1.35x: the median of both (75) would hide it; the other node (100) does not."""
    v = judge(_rows({0: 100, 1: 74}, {0: 5, 1: 5}), HOSTS, seconds=1, busbw=1)
    assert [f["node"] for f in v["findings"]] == [1]
    v = judge(_rows({0: 100, 1: 80}, {0: 5, 1: 5}), HOSTS, seconds=1, busbw=1)
    assert v["findings"] == [] and v["summary"].endswith("; no slow node")


def test_a_slow_link_is_named_from_three_nodes_on():
    # node 3's NIC is slow: the ring hops 2->3 and 3->0 are slow (link_in of 3 and of 0)
    v = judge(_rows(dict.fromkeys(range(4), 100), {0: 1.0, 1: 10, 2: 10, 3: 1.0}), HOSTS,
              seconds=1, busbw=1)
    assert [(f["node"], f["what"]) for f in v["findings"]] == [(3, "link")]
    assert "has a slow link: 1 GB/s at best to its ring neighbours, 10.0x below" in \
        v["findings"][0]["line"]


def test_with_two_nodes_links_are_given_not_judged():
    v = judge(_rows({0: 100, 1: 100}, {0: 1.0, 1: 10}), HOSTS, seconds=1, busbw=1)
    assert v["findings"] == [] and "node links 1-10 GB/s" in v["summary"]


def test_a_node_on_sockets_while_others_use_infiniband():
    v = judge(_rows(dict.fromkeys(range(3), 100), dict.fromkeys(range(3), 10.0),
                    transport={0: "IB", 1: "Socket", 2: "IB"}), HOSTS, seconds=1, busbw=1)
    assert [(f["node"], f["what"]) for f in v["findings"]] == [(1, "transport")]
    # all on sockets: nothing to compare against
    v = judge(_rows(dict.fromkeys(range(3), 100), dict.fromkeys(range(3), 10.0),
                    transport=dict.fromkeys(range(3), "Socket")), HOSTS, seconds=1, busbw=1)
    assert v["findings"] == []


@pytest.mark.parametrize("nnodes", [2, 3, 4, 5, 8])
def test_ring_phases_never_make_a_node_send_and_receive_at_once(nnodes):
    from meshrun.worker.nodecheck import _phase_of, _phases

    edges = {}
    for sender in range(nnodes):
        phase = _phase_of(sender, nnodes)
        assert 0 <= phase < _phases(nnodes)
        edges.setdefault(phase, []).append((sender, (sender + 1) % nnodes))
    assert sum(len(e) for e in edges.values()) == nnodes       # every edge, once
    for phase, pairs in edges.items():
        senders = {a for a, _ in pairs}
        receivers = {b for _, b in pairs}
        assert not senders & receivers, (phase, pairs)

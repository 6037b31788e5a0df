"""meshrun.worker.collbench's arithmetic: sizes, nccl-tests' bus bandwidth factors, transport parsing."""

import pytest

from meshrun.worker.collbench import (
    bus_factor,
    human,
    parse_size,
    sizes_between,
    transport_from_nccl_log,
)


def test_sizes():
    assert parse_size("4096") == 4096 and parse_size("1k") == 1024 and parse_size("1GB") == 1 << 30
    assert sizes_between("1K:8K") == [1024, 2048, 4096, 8192]
    assert sizes_between("1M") == [1 << 20]
    assert len(sizes_between("1K:1G")) == 21
    assert human(1 << 30) == "1G" and human(3000) == "3000B"


@pytest.mark.parametrize("bad", ["", "0", "-1K", "1T", "K", "8K:1K"])
def test_bad_sizes(bad):
    with pytest.raises(ValueError):
        sizes_between(bad)


def test_bus_factors_follow_nccl_tests():
    # nccl-tests PERFORMANCE.md: allreduce 2(n-1)/n, allgather (n-1)/n
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_gather", 8) == pytest.approx(0.875)
    assert bus_factor("all_reduce", 2) == 1.0 and bus_factor("all_gather", 2) == 0.5
    assert bus_factor("all_reduce", 1) == 0.0 == bus_factor("all_gather", 1)  # 2(n-1)/n


def test_transport_from_nccl_log():
    ib = "node1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0\n"
    sock = "NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\nNCCL INFO Using network Socket\n"
    local = "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
    assert transport_from_nccl_log(ib) == "IB"
    assert transport_from_nccl_log(sock) == "Socket"
    assert transport_from_nccl_log(local) == "P2P/SHM only"
    assert transport_from_nccl_log("") == "unknown"

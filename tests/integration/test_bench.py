"""`meshrun simulate --bench`: collectives across two simulated nodes, JSON on stdout."""

import json

import pytest
from helpers import meshrun

pytestmark = pytest.mark.slow


def test_simulate_bench_json(tmp_path):
    done = meshrun("simulate", "--nodes", "2", "--nproc-per-node", "1", "--bench", "--json",
                   "--sizes", "1K:64K", "--iters", "3", "--run-id", "b1", cwd=tmp_path,
                   check_rc=0)
    report = json.loads(done.stdout)                     # stdout holds only the JSON
    assert report["world_size"] == 2 and report["nnodes"] == 2 and report["backend"] == "gloo"
    rows = report["results"]
    assert [r["size_bytes"] for r in rows if r["collective"] == "all_reduce"] == [
        1024 << i for i in range(7)]
    for row in rows:
        assert row["time_us"] > 0
        factor = 1.0 if row["collective"] == "all_reduce" else 0.5   # n = 2
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * factor)
        assert row["algbw_GBps"] == pytest.approx(row["size_bytes"] / row["time_us"] / 1e3)
    assert json.loads((tmp_path / "logs" / "b1" / "bench.json").read_text()) == report
    assert "busbw GB/s" in done.stderr                   # the table went to stderr

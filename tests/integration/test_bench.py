"""`meshrun simulate --bench` (collectives across two simulated nodes, JSON on stdout), and
bench/recipe_overhead.py's GPU path rehearsed on the CPU."""

import json
import subprocess
import sys

import pytest
from helpers import ROOT, clean_env, meshrun

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


@pytest.mark.timeout(480)  # its own bound is 400 s
def test_gpu_recipe_benchmark_rehearsed_on_cpu(tmp_path):
    """bench/recipe_overhead.py --gpu's whole path (bf16 jobs, MFU of recipe and plain loop,
    the autoencoder's samples/s and MFU), on 2 CPU ranks against a stand-in peak."""
    out = tmp_path / "rehearsal.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "recipe_overhead.py"), "--gpu", "--rehearse",
         "--repeats", "1", "--warmup", "2", "--max-busy", "1", "--json", str(out)],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["device"].startswith("2 x CPU (rehearsal")
    row, = result["rows"]
    assert row["case"] == "gpu-mlp" and "parallel.mixed_precision=bf16" in row["sets"]
    recipe, = row["runs"]["recipe"]
    assert 0 < row["recipe_mfu"] == recipe["mfu"]
    assert row["plain_mfu"] == pytest.approx(
        recipe["mfu"] * row["mean"]["recipe_ms"] / row["mean"]["plain_ms"])
    recipe_loss, plain_loss = row["final_loss"]
    assert recipe_loss == plain_loss                  # same model, data and steps under bf16
    assert len(result["autoencoder"]) == 1             # a rehearsal runs it once (GPU: twice)
    for run in result["autoencoder"]:
        assert run["samples_per_s"] > 0 and run["mfu"] > 0
    assert "gpu-mlp: MFU recipe" in done.stdout

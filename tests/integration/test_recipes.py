"""The recipes through the real launch path (meshrun simulate, CPU, gloo), and init_distributed.

Multi-process runs are few: mlp-tp uninterrupted / stopped / resumed (dp 2 x tp 2),
one resume onto 2 ranks, and the autoencoder's defaults.
"""

import json
import math
import re
import shutil
import statistics
import subprocess
import sys

import pytest
from helpers import clean_env, free_port, meshrun

# the module's fixture runs three simulated jobs (each up to 240 s) before its first test
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MLP = ["--recipe", "mlp-tp", "--set", "train.steps=12", "--set", "train.log_every=1",
       "--set", "checkpoint.interval=4"]


def simulate(cwd, nodes, nproc, run_id, *args, timeout=240):
    return meshrun("simulate", "--nodes", str(nodes), "--nproc-per-node", str(nproc),
                   "--run-id", run_id, *args, cwd=cwd, timeout=timeout, check_rc=0)


def records(cwd, run_id) -> list[dict]:
    path = cwd / "logs" / run_id / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def losses(recs) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in recs]


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """12 steps uninterrupted ('full'), and as 6 + 6 with a stop and a resume ('part')."""
    cwd = tmp_path_factory.mktemp("mlp")
    full = simulate(cwd, 2, 2, "full", *MLP)
    stopped = simulate(cwd, 2, 2, "part", *MLP, "--set", "train.stop_after=6")
    resumed = simulate(cwd, 2, 2, "part", *MLP)  # the same command as 'full'
    return cwd, full.stdout, stopped.stdout, resumed.stdout


def test_mlp_tp_mesh_lines_metrics_and_falling_loss(mlp):
    cwd, out, _, _ = mlp
    for rank, dp, tp in ((0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)):
        assert f"[Rank {rank}] DP rank: {dp}, TP rank: {tp}" in out
    assert "world 4 = dp 2 x tp 2" in out
    recs = records(cwd, "full")
    assert [r["step"] for r in recs] == list(range(1, 13))
    assert recs[0]["first_step"] is True and all("first_step" not in r for r in recs[1:])
    for r in recs:
        assert {"step", "loss", "lr", "step_time_s", "samples_per_s"} <= set(r)
        assert r["step_time_s"] > 0
        assert r["samples_per_s"] == pytest.approx(64 / r["step_time_s"])  # 32 x dp 2
        assert "mfu" not in r                                               # CPU: no MFU
    assert recs[-1]["loss"] < 0.8 * recs[0]["loss"]
    assert "Step 12/12 | Loss: " in out


def test_report_reads_the_real_run(mlp):
    """meshrun report on the log folder a simulated 2 x 2 run left."""
    cwd, _, _, _ = mlp
    done = meshrun("report", "--json", "logs/full", cwd=cwd, check_rc=0)
    run, = json.loads(done.stdout)["runs"]
    recs = records(cwd, "full")
    steady = [r["samples_per_s"] for r in recs if not r.get("first_step")]
    assert (run["world_size"], run["nnodes"], run["nproc_per_node"]) == (4, 2, 2)
    assert run["recipe"] == "mlp-tp" and run["effective_batch"] == 64 and run["device"] == "cpu"
    assert run["samples_per_s"] == statistics.median(steady)
    assert run["loss"] == recs[-1]["loss"] and run["steps"] == [1, 12]


def test_stopped_and_resumed_run_matches_the_uninterrupted_one_exactly(mlp):
    cwd, _, stopped, resumed = mlp
    assert "stopped after step 6 of 12" in stopped
    assert "resumed from step 6 (checkpoints/part/step-6)" in resumed
    assert "Step 6/12" not in resumed and "Step 7/12" in resumed
    # Exact float equality, step by step (the LR schedule spans all 12 steps in both).
    assert losses(records(cwd, "part")) == losses(records(cwd, "full"))
    assert [r["lr"] for r in records(cwd, "part")] == [r["lr"] for r in records(cwd, "full")]


def test_checkpoint_layout_and_retention(mlp):
    cwd, full, _, _ = mlp
    ckpts = cwd / "checkpoints" / "full"
    # interval 4, keep 2 (the recipe's default): step-4 was removed after step-12 was saved
    assert sorted(p.name for p in ckpts.iterdir()) == ["step-12", "step-8"]
    assert all((p / ".metadata").is_file() for p in ckpts.iterdir())
    assert "removing checkpoint checkpoints/full/step-4: older than the newest 2" in full
    assert "no complete checkpoint in checkpoints/full: starting fresh" in full


def test_resume_onto_a_different_world_size(mlp):
    """Saved by 4 ranks (dp 2 x tp 2), resumed by 2 ranks (dp 2 x tp 1)."""
    cwd, _, _, _ = mlp
    target = cwd / "moved"
    target.mkdir()
    shutil.copytree(cwd / "checkpoints" / "part" / "step-8", target / "step-8")
    done = simulate(cwd, 2, 1, "moved", *MLP, "--set", "parallel.tp=1",
                    "--checkpoint-dir", str(target))
    assert "world 2 = dp 2 x tp 1" in done.stdout
    assert f"resumed from step 8 ({target / 'step-8'})" in done.stdout
    after = records(cwd, "moved")
    reference = dict(losses(records(cwd, "full")))
    assert [r["step"] for r in after] == [9, 10, 11, 12]
    # Same data and global batch, other sharding: the same losses up to rounding
    # (a fresh model would start near 2.1, far from these).
    for r in after:
        assert r["loss"] == pytest.approx(reference[r["step"]], rel=1e-4)
    assert sorted(p.name for p in target.iterdir()) == ["step-12", "step-8"]


def test_autoencoder_psnr_rises(tmp_path):
    """The defaults (ZeRO-3 over 4 ranks), cut to 40 of their 60 steps to save time."""
    done = simulate(tmp_path, 2, 2, "ae", "--recipe", "autoencoder", "--set", "train.steps=40",
                    timeout=300)
    assert "world 4 = dp 4 x tp 1" in done.stdout
    recs = records(tmp_path, "ae")
    assert [r["step"] for r in recs] == [1, 5, 10, 15, 20, 25, 30, 35, 40]
    first, last = recs[0], recs[-1]
    assert last["psnr"] > first["psnr"] + 5.0, (first, last)
    line = next(x for x in done.stdout.splitlines() if "Step 40/40 |" in x)
    assert f"Loss: {last['loss']:.6f} | PSNR: {last['psnr']:.2f} dB" in line
    assert sorted(p.name for p in (tmp_path / "checkpoints" / "ae").iterdir()) == [
        "step-20", "step-40"]


def test_bf16_autocast_and_mfu_on_cpu(tmp_path):
    """The GPU defaults' code path, on CPU: bf16 autocast under TP + FSDP2, and MFU
    against a peak given by MESHRUN_PEAK_FLOPS (no GPU name to look up here)."""
    env = clean_env(MESHRUN_PEAK_FLOPS="1e12")
    done = meshrun("simulate", "--nodes", "1", "--nproc-per-node", "2", "--run-id", "bf16",
                   "--recipe", "mlp-tp", "--set", "parallel.tp=2", "--set", "train.steps=8",
                   "--set", "train.log_every=1", "--set", "parallel.mixed_precision=bf16",
                   env=env, cwd=tmp_path, timeout=240, check_rc=0)
    out = done.stdout
    assert "FLOPs per sample (fwd+bwd), bf16 autocast" in out
    assert "MFU against MESHRUN_PEAK_FLOPS=1e12" in out
    flops = int(re.search(r"parameters, ([\d,]+) FLOPs per sample", out)[1].replace(",", ""))
    recs = records(tmp_path, "bf16")
    assert [r["step"] for r in recs] == list(range(1, 9))
    for r in recs:  # 32 samples a step (dp 1), 2 devices of 1 TFLOP/s
        assert r["mfu"] == pytest.approx(flops * 32 / r["step_time_s"] / 2e12)
        assert f"| MFU: {r['mfu']:.1%}" in out
    assert all(math.isfinite(r["loss"]) for r in recs)
    assert recs[-1]["loss"] < recs[0]["loss"]


def test_checkpoint_folder_not_shared_between_nodes_stops_the_run(tmp_path):
    """Two nodes, each in its own working directory: the default checkpoints/<run id> is
    two different folders. DCP would save there "successfully" and never load; the run
    stops before its first step, on both nodes, with one line naming the blind node."""
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        cwd = tmp_path / f"node{rank}"
        cwd.mkdir()
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "meshrun", "run", "--nnodes", "2", "--node-rank", str(rank),
             "--master-addr", "127.0.0.1", "--master-port", port, "--run-id", "local",
             "--recipe", "mlp-tp", "--set", "train.steps=4", "--set", "checkpoint.interval=2"],
            cwd=cwd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
    outs = [(p.wait(timeout=180), p.stdout.read()) for p in procs]
    for rc, out in outs:
        assert rc == 2, out
        assert "checkpoint.dir checkpoints/local is not one folder for all nodes: node 1 (" \
            in out, out
        assert "Step 1/" not in out
    assert not list((tmp_path / "node0" / "checkpoints" / "local").iterdir())  # marker removed


# --- init_distributed without a launcher ----------------------------------------------------

SCRIPT = """
import meshrun, torch, torch.distributed as dist
info = meshrun.init_distributed()
assert meshrun.init_distributed() is info                    # idempotent
t = torch.ones(1); dist.all_reduce(t)
timeout = dist.group.WORLD._get_backend(torch.device("cpu")).options._timeout
print(info, t.item(), timeout.total_seconds())
"""


def python(cwd, env, *args) -> subprocess.CompletedProcess:
    """One plain Python process, no launcher."""
    return subprocess.run([sys.executable, *args], check=False, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_init_distributed_single_process_honours_the_timeout(tmp_path):
    done = python(tmp_path, clean_env(MESHRUN_PG_TIMEOUT="123"), "-c", SCRIPT)
    assert done.returncode == 0, done.stderr
    assert ("RankInfo(rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0, "
            "nnodes=1, device=device(type='cpu'), backend='gloo', is_main=True) 1.0 123.0"
            ) in done.stdout


@pytest.mark.parametrize("env, words", [
    ({"RANK": "1", "WORLD_SIZE": "2"}, ["RANK, WORLD_SIZE are set but LOCAL_RANK"]),
    ({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, ["RANK=2 is not below WORLD_SIZE=2"]),
    ({"MESHRUN_PG_TIMEOUT": "soon"}, ["MESHRUN_PG_TIMEOUT='soon'"]),
    ({"OMPI_COMM_WORLD_SIZE": "4"}, ["1 of 4 MPI tasks", "each task would train alone"]),
])
def test_init_distributed_bad_env_is_one_line(tmp_path, env, words):
    done = python(tmp_path, clean_env(**env), "-c",
                  "import meshrun; meshrun.init_distributed()")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("meshrun: error: ") and "fix: " in lines[0]
    assert all(w in lines[0] for w in words), lines[0]


def test_recipe_refuses_a_bad_peak_in_one_line(tmp_path):
    done = python(tmp_path, clean_env(MESHRUN_PEAK_FLOPS="fast"), "-m", "meshrun.recipes.mlp_tp")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "meshrun: error: MESHRUN_PEAK_FLOPS='fast' is not a positive number"), lines
    assert "Step 1/" not in done.stdout


def test_recipe_refuses_a_bad_job_config_in_one_line(tmp_path):
    env = clean_env(MESHRUN_JOB_CONFIG=json.dumps({"recipe": "mlp-tp",
                                                   "model": {"hidden": 250},
                                                   "parallel": {"tp": 1},
                                                   "train": {"lr": -1}}))
    done = python(tmp_path, env, "-m", "meshrun.recipes.mlp_tp")
    assert done.returncode == 2
    # one job-config model (meshrun.job): the worker checks with the planner's own checks
    assert done.stderr.strip().splitlines() == [
        ("meshrun: error: train.lr = -1.0 in config MESHRUN_JOB_CONFIG is below 0; "
         "fix: write a number >= 0, e.g. lr = 0.001 [config-bad-value]")]

"""One step of the recipes' shared loop: its batches (made in the loop or ahead on a thread,
the same tensors either way), the loss that is not finite (one line, every rank, exit 1),
and what runs on a GPU by default (fused AdamW, bf16 parameters through FSDP2).

The two ``slow`` tests run the recipe itself: on two CPU ranks with an absurd lr (the run
ends at the first loss that is not finite, with the line and its code, and diagnose names
it), and in one process with ``train.prefetch`` on and off (bit-identical losses).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
import torch
from helpers import clean_env, meshrun

from meshrun.diagnose import diagnose_text
from meshrun.job import for_worker
from meshrun.job.schema import ParallelConfig, TrainConfig
from meshrun.recipes import _loop
from meshrun.recipes._step import Feed, Readback, not_finite
from meshrun.recipes.mlp_tp import inputs, sample_seed

CPU = torch.device("cpu")


# --- data -------------------------------------------------------------------------------------

def inputs_as_before(seed: int, step: int, indices: range, dim: int) -> torch.Tensor:
    """mlp_tp.inputs as it was: a tensor per sample, then a stack."""
    gen = torch.Generator()
    rows = []
    for i in indices:
        gen.manual_seed(sample_seed(seed, step, i))
        rows.append(torch.randn(dim, generator=gen))
    return torch.stack(rows)


@pytest.mark.parametrize("dim", [1, 8, 15, 16, 17, 64, 512, 1000])
def test_inputs_are_the_same_numbers_as_before(dim):
    """Each sample drawn into its row with normal_ (what randn runs) is bit for bit the
    sample randn made alone, for sizes below, at and above the vectorised path's 16."""
    for step, indices in ((1, range(0, 5)), (7, range(96, 131))):
        assert torch.equal(inputs(3, step, indices, dim),
                           inputs_as_before(3, step, indices, dim))


def make(step: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = inputs(0, step, range(micro * 4, micro * 4 + 4), 32)
    return x, x.square().sum(1)


@pytest.mark.parametrize("prefetch", [False, True])
def test_feed_gives_every_micro_batch_in_order(prefetch):
    feed = Feed(make, 3, 6, 2, CPU, prefetch)
    try:
        got = [feed.get(step, micro) for step in range(3, 7) for micro in range(2)]
    finally:
        feed.close()
    want = [make(step, micro) for step in range(3, 7) for micro in range(2)]
    assert all(torch.equal(a, b) for g, w in zip(got, want) for a, b in zip(g, w))
    assert len(got) == 8


def test_feed_makes_batches_ahead_on_its_own_thread():
    made: list[tuple[int, int, str]] = []

    def recording(step: int, micro: int) -> torch.Tensor:
        made.append((step, micro, threading.current_thread().name))
        return torch.full((2,), float(step))

    feed = Feed(recording, 1, 10, 1, CPU, prefetch=True, depth=2)
    try:
        assert torch.equal(feed.get(1, 0), torch.ones(2))
        deadline = time.monotonic() + 10
        while len(made) < 4 and time.monotonic() < deadline:   # 1 taken, 2 queued, 1 made
            time.sleep(0.01)
        assert [m[:2] for m in made[:4]] == [(1, 0), (2, 0), (3, 0), (4, 0)]
        assert len(made) == 4          # no further: the queue holds 2
        assert {m[2] for m in made} == {"meshrun-feed"}
    finally:
        feed.close()
    assert not any(t.name == "meshrun-feed" for t in threading.enumerate())


def test_feed_raises_the_threads_error_in_the_loop():
    def failing(step: int, micro: int) -> torch.Tensor:
        if step == 2:
            raise ValueError("no data for step 2")
        return torch.zeros(1)

    feed = Feed(failing, 1, 3, 1, CPU, prefetch=True)
    try:
        feed.get(1, 0)
        with pytest.raises(ValueError, match="no data for step 2"):
            feed.get(2, 0)
    finally:
        feed.close()


def test_feed_refuses_a_step_out_of_order():
    feed = Feed(make, 1, 3, 1, CPU, prefetch=True)
    try:
        with pytest.raises(RuntimeError, match="made step 1 micro-batch 0, the loop wanted "
                                               "step 2"):
            feed.get(2, 0)
    finally:
        feed.close()


# --- the loss check ---------------------------------------------------------------------------

def job():
    return for_worker("mlp-tp", {}, 2)     # the recipe's defaults: lr 3e-3, clip 1.0


def test_a_loss_that_is_not_finite_is_one_line_with_its_code():
    err = not_finite(job(), 10, 0.0029874, float("nan"), float("nan"), (9, 4.13), bf16=True)
    line = err.line()
    assert "\n" not in line and err.exit_code == 1 and err.code == "loss-not-finite"
    assert line.startswith("meshrun: error: the loss is nan at step 10 (lr 0.00299): training "
                           "diverged; the last finite loss was 4.13 at step 9; fix: ")
    assert line.endswith(" [loss-not-finite]")
    for words in ("lower train.lr (now 0.003: try --set train.lr=0.0003)",
                  "clip harder (train.grad_clip is 1)", "parallel.mixed_precision=fp32"):
        assert words in line


def test_a_gradient_norm_that_is_not_finite_names_the_norm():
    fp32 = for_worker("mlp-tp", {"MESHRUN_JOB_CONFIG": json.dumps(
        {"train": {"grad_clip": 0.0}, "parallel": {"tp": 1}})}, 1)
    line = not_finite(fp32, 3, 1e-3, 2.5, float("inf"), None, bf16=False).line()
    assert line.startswith("meshrun: error: the gradient norm is inf at step 3 (loss 2.5, "
                           "lr 0.001): training diverged; fix: ")
    assert "turn gradient clipping on (--set train.grad_clip=1.0)" in line
    assert "mixed_precision" not in line     # an fp32 run: nothing to compare with


def test_diagnose_names_the_workers_line_and_its_code():
    line = not_finite(job(), 10, 0.003, float("nan"), None, None, bf16=True).line()
    found = diagnose_text(f"[rank0]: {line}\n[rank1]: {line}\n", name="node0.log")
    assert found and found[0].code == "worker-bad-input"
    assert found[0].cause.endswith("training diverged [loss-not-finite]")
    assert found[0].fix.startswith("lower train.lr")


def test_readback_on_the_cpu():
    total, norm = torch.tensor(6.0), torch.tensor(2.0)
    assert Readback.start(4, 1e-3, total, norm).read() == (6.0, 2.0)
    assert Readback.start(4, 1e-3, total, None).read() == (6.0, None)


# --- what runs on a GPU by default ------------------------------------------------------------

def test_the_gpu_defaults_and_the_cpu_ones():
    train, parallel = TrainConfig(), ParallelConfig(mixed_precision="auto")
    assert (train.prefetching("cuda"), train.prefetching("cpu")) == (True, False)
    assert TrainConfig(prefetch="on").prefetching("cpu")
    assert not TrainConfig(prefetch="off").prefetching("cuda")
    assert (train.optimizer_kernels("cuda"), train.optimizer_kernels("cpu")) == (
        "fused", "default")
    assert TrainConfig(optimizer_impl="foreach").optimizer_kernels("cuda") == "foreach"
    assert (parallel.bf16_how("cuda"), parallel.bf16_how("cpu")) == ("params", None)
    bf16 = ParallelConfig(mixed_precision="bf16")
    assert (bf16.bf16_how("cuda"), bf16.bf16_how("cpu")) == ("params", "autocast")
    assert ParallelConfig(mixed_precision="bf16", bf16_mode="autocast").bf16_how("cuda") == \
        "autocast"
    assert ParallelConfig(mixed_precision="fp32", bf16_mode="params").bf16_how("cuda") is None


def with_sets(**sections) -> object:
    return for_worker("mlp-tp", {"MESHRUN_JOB_CONFIG": json.dumps(
        {"parallel": {"tp": 1}, **sections})}, 1)


@pytest.mark.parametrize("impl, defaults", [
    ("auto", {"fused": None, "foreach": None}),     # a CPU: torch's own choice, as before
    ("foreach", {"fused": None, "foreach": True}),
    ("for-loop", {"fused": None, "foreach": False}),
    ("fused", {"fused": True, "foreach": None}),
])
def test_optimizer_kernels(impl, defaults):
    params = [torch.nn.Parameter(torch.zeros(3))]
    opt = _loop.optimizer(params, with_sets(train={"optimizer_impl": impl}), CPU)
    assert isinstance(opt, torch.optim.AdamW)
    assert {k: opt.defaults[k] for k in defaults} == defaults


def test_bf16_parameters_through_fsdp2_on_a_gpu_autocast_on_a_cpu():
    auto = with_sets(parallel={"tp": 1, "mixed_precision": "bf16"})
    policy = _loop.mixed_precision_policy(auto, torch.device("cuda", 0))
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert _loop.mixed_precision_policy(auto, CPU) is None
    with _loop.autocast(auto, CPU):
        assert torch.is_autocast_enabled("cpu")
    assert _loop.precision_name(auto, CPU) == "bf16 autocast"
    assert _loop.precision_name(auto, torch.device("cuda", 0)).startswith("bf16 parameters")
    params = with_sets(parallel={"tp": 1, "mixed_precision": "bf16", "bf16_mode": "params"})
    assert _loop.mixed_precision_policy(params, CPU) is not None
    with _loop.autocast(params, CPU):
        assert not torch.is_autocast_enabled("cpu")


# --- the recipe itself (slow: processes) ------------------------------------------------------

@pytest.mark.slow
def test_a_diverging_run_stops_every_rank_at_the_first_loss_that_is_not_finite(tmp_path):
    began = time.monotonic()
    done = meshrun("simulate", "--nodes", "1", "--nproc-per-node", "2", "--run-id", "nan",
                   "--recipe", "mlp-tp", "--set", "train.lr=1e6", "--set",
                   "checkpoint.interval=0", "--set", "train.log_every=1",
                   cwd=tmp_path, timeout=240)
    took = time.monotonic() - began
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    said = [ln for ln in out.splitlines() if ln.startswith("[rank0]: meshrun: error: ")]
    assert len(said) == 1 and said[0].endswith(" [loss-not-finite]"), out[-3000:]
    step = int(said[0].split(" at step ")[1].split()[0])
    assert "training diverged" in said[0] and "fix: lower train.lr (now 1e+06" in said[0]
    records = [json.loads(x) for x in (tmp_path / "logs" / "nan" / "metrics.jsonl")
               .read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, step))   # nothing after it
    # both ranks stopped at that step on their own: the one that failed first is named,
    # the other "also failed" (either may be first: each records the moment it failed)
    first = int(out.split("meshrun: rank ")[1].split()[0])
    assert f"also failed: ranks {1 - first}" in out, out[-3000:]
    assert "diagnosis: rank 0 on " in out and "[loss-not-finite]; fix: lower train.lr" in out
    assert took < 200


@pytest.mark.slow
def test_prefetching_gives_the_same_losses_bit_for_bit(tmp_path):
    """The recipe in one process on the CPU with the batch thread on and off (dim 512: the
    teacher's matmul runs on that thread)."""
    losses = {}
    for prefetch in ("off", "on"):
        config = {"train": {"steps": 6, "log_every": 1, "prefetch": prefetch},
                  "parallel": {"tp": 1}, "checkpoint": {"interval": 0},
                  "model": {"dim": 512, "hidden": 128, "depth": 2}}
        env = clean_env(MESHRUN_JOB_CONFIG=json.dumps(config),
                        MESHRUN_LOG_DIR=str(tmp_path / prefetch))
        done = subprocess.run([sys.executable, "-m", "meshrun.recipes.mlp_tp"], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        made = "ahead, on a thread" if prefetch == "on" else "in the loop"
        assert f"batches made {made}" in done.stdout
        losses[prefetch] = [json.loads(x)["loss"] for x in
                            (tmp_path / prefetch / "metrics.jsonl").read_text().splitlines()]
    assert len(losses["on"]) == 6 and losses["on"] == losses["off"]

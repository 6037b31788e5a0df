"""Recipe step time against a plain hand-written loop (same model, mesh, data, optimizer).

    python bench/recipe_overhead.py                      # CPU: meshrun run, 4 ranks, case core
    python bench/recipe_overhead.py --case core --case checkpoints --case clip --repeats 5
    python bench/recipe_overhead.py --nodes 2 --nproc-per-node 2    # under meshrun simulate
    python bench/recipe_overhead.py --gpu                # on a GPU node: bf16 MFU, autoencoder
    python bench/recipe_overhead.py --gpu --rehearse     # --gpu's code path on 2 CPU ranks

What runs. Each repeat starts the ``mlp-tp`` recipe and ``bench/plain_mlp_tp.py`` under
the same launcher (default ``meshrun run --nproc-per-node 4``: dp 2 x tp 2; with
``--nodes N`` > 1, ``meshrun simulate --nodes N``) with the same resolved job config
(``--set recipe=mlp-tp`` plus the case's and ``--set``'s overrides), one after the other,
alternating which goes first. Each run gets its own run id, log folder and checkpoint
folder, so nothing resumes. A run that has not finished after ``--run-timeout`` seconds
is killed (its whole process group) and retried, up to 3 tries, and so is a run that
exits with an error; such runs are listed (``--keep-failed DIR`` keeps their logs).

The recipe side is the recipe itself (``meshrun.recipes.mlp_tp.main`` with the shared
loop ``_loop.train``), started as ``bench/recipe_overhead.py --worker``: the only change
is a tap on the loop's per-step ``meshrun.progress(step)`` call that records
``perf_counter`` before calling the real one. So it sees the end of every step at the
same place as the loop's own timer (after the loss is read back: on a CPU that step's, on a
GPU the previous step's, or that step's own at logged and saved steps), and everything the loop
does between steps (progress, metrics records, log lines, checkpoints) falls inside the
next step's interval.

Step time, the same definition on both sides, rank 0, no barriers:

* ``mean``: (end of step N - end of step W) / (N - W), W = ``--warmup`` (10): the
  steady-state cost of a step, everything included (a checkpoint every k steps too);
* ``median``: the median of the per-step intervals of steps W+1..N (robust to spikes
  from other processes; leaves out rare costs such as checkpoints).

Per case: the median over repeats of each side, the overhead of the medians, and the
median, min and max of the paired overheads (each recipe run against the plain run next
to it), which say how noisy the machine was. The recipe's own ``step_time_s`` from its
``metrics.jsonl`` (which times the step only, not progress/metrics/checkpoints) is shown
alongside, and the last step's loss of both sides is compared: with gradient clipping off
both compute the same thing and, on CPU, the same bits.

Cases (``--case``, repeatable; default ``core``):

* ``core``: checkpoints off, ``grad_clip`` 0: the loop's machinery only;
* ``checkpoints``: a DCP checkpoint every 20 steps (the plain loop saves none);
* ``clip``: ``grad_clip`` 1.0: the recipe's one-collective clip against
  ``torch.nn.utils.clip_grad_norm_`` in the plain loop.

Noise guard: before each run the busy share of all CPUs over 1 s is sampled from
``/proc/stat`` (our own runs are over by then); above ``--max-busy`` (0.25) it waits up to
120 s for the machine to calm down, and the value is recorded with the run either way.
``os.getloadavg()`` before and after the whole benchmark is printed.

``--gpu`` (one node with GPUs, ``meshrun run``, one process per GPU): the same paired
comparison for a large-hidden ``mlp-tp`` in bf16 (case ``gpu-mlp``; ``--gpu-set`` overrides
its config), with the recipe's MFU (metrics.jsonl) and the plain loop's MFU (the same
FLOPs over its time); the CPU time one rank spends making one step's synthetic batch
(measured here, in this process); and the ``autoencoder`` recipe's samples/s and MFU in
bf16 (``--ae-set``). These numbers have not been measured yet (no GPU was available when
this was written). ``--gpu --rehearse`` runs that whole path on this machine's CPU — two
ranks, tiny models (``REHEARSAL_*``), ``MESHRUN_PEAK_FLOPS=1e12`` standing in for a GPU's
peak — so that the script is known to work before GPU time is spent on it; its figures
mean nothing (tests/integration/test_bench.py runs it).

Output: a Markdown table, the exact commands of one repeat, and with ``--json FILE`` all
raw numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from meshrun.harness import clean_env

HERE = Path(__file__).resolve().parent
PLAIN = HERE / "plain_mlp_tp.py"
THIS = Path(__file__).resolve()

# The CPU comparison's job: the recipe's defaults (dim 64, depth 2, 32 per device, AdamW),
# a wider hidden layer and more steps. Per-step logging stays at the default (every 5).
CPU_SETS = ("model.hidden=1024", "train.steps=200")
CASES: dict[str, tuple[str, ...]] = {
    "core": ("checkpoint.interval=0", "train.grad_clip=0"),
    "checkpoints": ("checkpoint.interval=20", "train.grad_clip=0"),
    "clip": ("checkpoint.interval=0", "train.grad_clip=1.0"),
}
# GPU: large hidden, bf16; dim kept small because the synthetic batch is made on the CPU
# (per sample, ~2 x dim^2 teacher FLOPs), while the model costs 12 x dim x hidden x depth.
# lr 5e-5, not the recipe's 3e-3: a step can move this unnormalised stack's output by up to
# lr x hidden x depth (bench/gpu_check.py's docstring); 3e-3 diverges, and the recipe stops at
# the first loss that is not finite.
GPU_MLP_SETS = ("model.dim=512", "model.hidden=32768", "model.depth=16",
                "train.per_device_batch=1024", "train.steps=60", "train.log_every=10",
                "train.lr=5e-5", "parallel.mixed_precision=bf16", "checkpoint.interval=0",
                "train.grad_clip=0")
GPU_AE_SETS = ("model.frames=16", "model.size=64", "model.channels=64",
               "train.per_device_batch=16", "train.steps=60", "train.log_every=10",
               "parallel.mixed_precision=bf16", "checkpoint.interval=0")
# --rehearse: the GPU jobs shrunk to a few seconds on two CPU ranks (after the GPU sets).
REHEARSAL_MLP_SETS = ("model.dim=64", "model.hidden=256", "model.depth=2",
                      "train.per_device_batch=16", "train.steps=8", "train.log_every=2",
                      "train.lr=3e-3")
REHEARSAL_AE_SETS = ("model.frames=4", "model.size=16", "model.channels=8",
                     "train.per_device_batch=2", "train.steps=6", "train.log_every=2")
REHEARSAL_PEAK = "1e12"


# --- worker side: the recipe with a tap on its per-step progress call ----------------------

def worker() -> None:
    """Run ``meshrun.recipes.mlp_tp`` unchanged but for a clock on ``progress(step)``."""
    from meshrun.recipes import _loop, mlp_tp

    ends: list[float] = []
    start = time.perf_counter()
    real = _loop.progress

    def tap(step: int) -> None:
        ends.append(time.perf_counter() - start)
        real(step)

    _loop.progress = tap
    _loop.guard(mlp_tp.main)
    if os.environ.get("RANK", "0") == "0":
        out = os.path.join(os.environ.get("MESHRUN_LOG_DIR", "."), "bench_steps.json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"kind": "recipe", "step_end_s": ends}, f)


# --- measuring -------------------------------------------------------------------------------

def cpu_busy(seconds: float = 1.0) -> float:
    """Share of all CPUs busy over ``seconds`` (from /proc/stat; 0.0 where unreadable)."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        return sum(values), idle

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except OSError:
        return 0.0
    spent = total1 - total0
    return 1.0 - (idle1 - idle0) / spent if spent else 0.0


def cpu_seconds() -> tuple[float, float, float]:
    """(busy CPU seconds of the whole machine, its steal seconds, CPU seconds of this
    process's finished children and their descendants), since boot / this process's start.

    The difference of two readings around a run gives the CPU time other processes took
    from it ("foreign"): busy minus ours. Zeros where /proc/stat is unreadable."""
    ours = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        with open("/proc/stat", encoding="ascii") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0, 0.0, ours.ru_utime + ours.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    busy = v[0] + v[1] + v[2] + v[5] + v[6]
    return busy / tick, v[7] / tick, ours.ru_utime + ours.ru_stime


class SessionCpu:
    """CPU seconds used by the processes of one session (a run started with
    ``start_new_session``), from periodic samples of ``/proc/<pid>/stat``."""

    def __init__(self, sid: int) -> None:
        self.sid = sid
        self.seen: dict[int, float] = {}    # pid -> utime + stime at its last sample
        self.tick = os.sysconf("SC_CLK_TCK")

    def sample(self) -> None:
        from meshrun.harness import proc_stats

        for pid, fields in proc_stats().items():
            if int(fields[3]) == self.sid:          # state ppid pgrp session ...
                self.seen[pid] = (int(fields[11]) + int(fields[12])) / self.tick

    def total(self) -> float:
        return sum(self.seen.values())


def wait_quiet(limit: float, patience: float = 120.0) -> float:
    """Wait (up to ``patience`` s) until the CPUs are at most ``limit`` busy; the last sample."""
    deadline = time.monotonic() + patience
    busy = cpu_busy()
    while busy > limit and time.monotonic() < deadline:
        busy = cpu_busy(2.0)
    return busy


def step_times(ends: list[float], warmup: int) -> dict[str, float]:
    """``mean`` and ``median`` step time in ms over steps warmup+1..N (see the docstring).

    ``ends[k]`` is the end of step k+1 (seconds from any fixed origin)."""
    if warmup < 1 or len(ends) < warmup + 2:
        raise SystemExit(f"{len(ends)} steps recorded: need --warmup >= 1 and at least "
                         f"--warmup + 2 steps")
    intervals = [b - a for a, b in zip(ends[warmup - 1:], ends[warmup:])]
    return {"mean": (ends[-1] - ends[warmup - 1]) / (len(ends) - warmup) * 1000,
            "median": statistics.median(intervals) * 1000}


def metrics_summary(path: Path, warmup: int) -> dict[str, float | None]:
    """From a recipe's metrics.jsonl: step-weighted mean ``step_time_s`` (ms) of the records
    after ``warmup``, median MFU and samples/s of those records, the last loss."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out: dict[str, float | None] = {"metrics_ms": None, "mfu": None, "samples_per_s": None,
                                    "final_loss": records[-1]["loss"] if records else None}
    prev, weighted, steps, mfus, rates = None, 0.0, 0, [], []
    for r in records:
        if r.get("first_step"):
            prev = r["step"]
            continue
        window = r["step"] - (prev if prev is not None else 0)
        prev = r["step"]
        if r["step"] - window < warmup:   # the window reaches into the warm-up
            continue
        weighted += r["step_time_s"] * window
        steps += window
        rates.append(r["samples_per_s"])
        if "mfu" in r:
            mfus.append(r["mfu"])
    if steps:
        out["metrics_ms"] = weighted / steps * 1000
        out["samples_per_s"] = statistics.median(rates)
    if mfus:
        out["mfu"] = statistics.median(mfus)
    return out


class Runner:
    """Starts one run at a time in a scratch folder and reads what it left."""

    def __init__(self, launcher: list[str], scratch: Path, max_busy: float,
                 warmup: int, run_timeout: float = 150.0, attempts: int = 3,
                 keep_failed: str = "", max_foreign: float = 0.10) -> None:
        self.launcher = launcher
        self.run_timeout = run_timeout
        self.attempts = attempts
        self.failed: list[dict] = []    # runs that hung or failed, retried
        self.keep_failed = keep_failed
        self.max_foreign = max_foreign
        self.scratch = scratch
        self.max_busy = max_busy
        self.warmup = warmup
        # a neutral machine's, but for the devices and threads the user gave the benchmark
        self.env = clean_env(keep=("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"))
        self.count = 0
        self.commands: dict[str, str] = {}

    def argv(self, kind: str, sets: tuple[str, ...], run_id: str) -> list[str]:
        flags = [*self.launcher, "--log-dir", str(self.scratch / "logs"), "--run-id", run_id,
                 "--checkpoint-dir", str(self.scratch / "ckpt" / run_id)]
        if kind == "autoencoder":
            flags += ["--recipe", "autoencoder"]
        else:
            flags += ["--set", "recipe=mlp-tp"]
        for item in sets:
            flags += ["--set", item]
        if kind == "recipe":
            return [*flags, "--", str(THIS), "--worker"]
        if kind == "plain":
            return [*flags, "--", str(PLAIN), "--warmup", str(self.warmup)]
        return flags

    def run(self, case: str, kind: str, sets: tuple[str, ...]) -> dict:
        self.count += 1
        run_id = f"rb-{case}-{kind}-{self.count}"
        argv = self.argv(kind, sets, run_id)
        shown = [a.replace(str(self.scratch), "$TMP") for a in argv]
        self.commands.setdefault(f"{case}/{kind}", "meshrun " + shlex.join(shown[3:]))
        for attempt in range(1, self.attempts + 1):
            busy = wait_quiet(self.max_busy)
            cpu_before = cpu_seconds()
            began = time.perf_counter()
            # A session of its own, so that a stuck run's whole process tree can be ended.
            proc = subprocess.Popen(argv, env=self.env, cwd=self.scratch, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
            session = SessionCpu(proc.pid)
            while True:
                try:
                    stdout, stderr = proc.communicate(timeout=1.0)
                    why = f"exit status {proc.returncode}" if proc.returncode else ""
                    break
                except subprocess.TimeoutExpired:
                    session.sample()
                    if time.perf_counter() - began > self.run_timeout:
                        os.killpg(proc.pid, signal.SIGKILL)
                        stdout, stderr = proc.communicate()
                        why = f"no result after {self.run_timeout:.0f} s, killed"
                        break
            wall = time.perf_counter() - began
            cpu_after = cpu_seconds()
            if not why:
                break
            # Keep what the failed run left, say why, and try again under a new run id.
            tail = (stdout + stderr).strip().splitlines()[-3:]
            print(f"  {run_id}: {why} (attempt {attempt}): {' | '.join(tail)}", flush=True)
            if self.keep_failed and (self.scratch / "logs" / run_id).is_dir():
                shutil.copytree(self.scratch / "logs" / run_id,
                                Path(self.keep_failed) / run_id, dirs_exist_ok=True)
            self.failed.append({"run_id": run_id, "why": why, "tail": tail})
            run_id = f"{run_id}-retry{attempt}"
            argv = self.argv(kind, sets, run_id)
        else:
            raise SystemExit(f"{kind} run of case {case} failed {self.attempts} times: "
                             f"{self.failed[-1]}")
        logs = self.scratch / "logs" / run_id
        busy_s, steal_s, reaped_s = (b - a for a, b in zip(cpu_before, cpu_after))
        # Ours: what the kernel charged to reaped descendants, or what the samples of the
        # run's session saw, whichever is more (an orphaned worker escapes the first, the
        # last second of a process the second).
        ours_s = max(reaped_s, session.total())
        capacity = wall * (os.cpu_count() or 1)
        result: dict = {"run_id": run_id, "busy_before": busy, "wall_s": wall,
                        "attempt": attempt, "cpu_ours_s": ours_s, "cpu_reaped_s": reaped_s,
                        "cpu_session_s": session.total(), "cpu_busy_s": busy_s,
                        # other processes' share of the machine during the run, and steal
                        "foreign": max(0.0, busy_s - ours_s) / capacity,
                        "steal": steal_s / capacity}
        if kind in ("recipe", "plain"):
            steps = json.loads((logs / "bench_steps.json").read_text())
            result.update(step_times(steps["step_end_s"], self.warmup))
            result["final_loss"] = steps.get("final_loss")
        if kind in ("recipe", "autoencoder"):
            summary = metrics_summary(logs / "metrics.jsonl", self.warmup)
            result.update({k: v for k, v in summary.items() if v is not None})
        return result


def quartiles(values: list[float]) -> tuple[float, float]:
    """First and third quartile (the values themselves when fewer than 2)."""
    if len(values) < 2:
        return (values[0], values[0])
    q = statistics.quantiles(values, n=4, method="inclusive")
    return (q[0], q[2])


def compare(runner: Runner, case: str, sets: tuple[str, ...], repeats: int) -> dict:
    """``repeats`` alternating recipe/plain pairs of ``case``; the summary row."""
    runs: dict[str, list[dict]] = {"recipe": [], "plain": []}
    for i in range(repeats):
        order = ("recipe", "plain") if i % 2 == 0 else ("plain", "recipe")
        for kind in order:
            runs[kind].append(runner.run(case, kind, sets))
            r = runs[kind][-1]
            print(f"  {case:12s} {kind:6s} #{i + 1}: mean {r['mean']:7.2f} ms  "
                  f"median {r['median']:7.2f} ms  (CPU busy before {r['busy_before']:.0%}, "
                  f"others during {r['foreign']:.0%}, steal {r['steal']:.0%})", flush=True)
    return summarize(case, sets, runs, runner.max_foreign)


def summarize(case: str, sets: tuple[str, ...] | list[str], runs: dict[str, list[dict]],
              max_foreign: float) -> dict:
    """The summary row of one case from its paired runs (``runs[kind][i]``, pair i).

    For each definition (``mean``, ``median``): each side's median over repeats, the
    overhead of those medians, and the paired overheads over all pairs and over the
    quiet pairs only (both runs with other processes below ``max_foreign`` of the CPUs).
    """
    row: dict = {"case": case, "sets": list(sets), "repeats": len(runs["plain"]),
                 "runs": runs, "max_foreign": max_foreign}
    pairs = list(zip(runs["recipe"], runs["plain"]))
    quiet = [(a, b) for a, b in pairs if max(a["foreign"], b["foreign"]) <= max_foreign]
    for key in ("mean", "median"):
        rec = [a[key] for a, _ in pairs]
        pla = [b[key] for _, b in pairs]
        paired = [(a - b) / b * 100 for a, b in zip(rec, pla)]
        calm = [(a[key] - b[key]) / b[key] * 100 for a, b in quiet]
        row[key] = {"recipe_ms": statistics.median(rec), "plain_ms": statistics.median(pla),
                    "overhead_pct": (statistics.median(rec) - statistics.median(pla))
                    / statistics.median(pla) * 100,
                    "paired_pct": {"median": statistics.median(paired), "min": min(paired),
                                   "max": max(paired), "quartiles": quartiles(paired)},
                    "quiet_pairs": len(calm),
                    "quiet_paired_pct": ({"median": statistics.median(calm),
                                          "quartiles": quartiles(calm)} if calm else None),
                    "spread_pct": {side: (max(v) - min(v)) / statistics.median(v) * 100
                                   for side, v in (("recipe", rec), ("plain", pla))}}
    own = [r["metrics_ms"] for r in runs["recipe"] if "metrics_ms" in r]
    row["recipe_metrics_ms"] = statistics.median(own) if own else None
    losses = {(a.get("final_loss"), b.get("final_loss")) for a, b in pairs}
    row["final_losses"] = sorted(losses, key=str)
    row["final_loss"] = row["final_losses"][0]
    a, b = row["final_loss"]
    row["loss_rel_diff"] = abs(a - b) / abs(b) if a is not None and b else None
    mfu = [r["mfu"] for r in runs["recipe"] if "mfu" in r]
    if mfu:
        row["recipe_mfu"] = statistics.median(mfu)
        row["plain_mfu"] = row["recipe_mfu"] * row["mean"]["recipe_ms"] / row["mean"]["plain_ms"]
    return row


def data_cost_ms(sets: tuple[str, ...], samples_default: int = 1024) -> float:
    """CPU ms one rank spends making one step's mlp-tp batch (inputs + teacher), here."""
    from meshrun.recipes import MLP_TP_DEFAULTS
    from meshrun.recipes.mlp_tp import Teacher, inputs

    values = {k: v for k, _, v in (s.partition("=") for s in sets)}
    dim = int(values.get("model.dim", MLP_TP_DEFAULTS["model"]["dim"]))
    n = int(values.get("train.per_device_batch", samples_default))
    teacher = Teacher(0, dim)
    began = time.perf_counter()
    for step in (1, 2, 3):
        x = inputs(0, step, range(n), dim)
        teacher(x)
    return (time.perf_counter() - began) / 3 * 1000


# --- report ------------------------------------------------------------------------------------

def table(rows: list[dict], common: tuple[str, ...] = ()) -> str:
    """The Markdown table; ``common`` overrides (shared by every row) are left out of it."""
    lines = [("| case | config (`--set`) | recipe ms/step | plain ms/step | overhead of the "
              "medians | paired overhead: median (IQR) [min, max] | quiet pairs: median (IQR) "
              "| median step ms, recipe / plain | recipe's own `step_time_s` ms | last loss, "
              "recipe / plain |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m, md = r["mean"], r["median"]
        p, q = m["paired_pct"], m["quiet_paired_pct"]
        own = f"{r['recipe_metrics_ms']:.2f}" if r["recipe_metrics_ms"] else "-"
        a, b = r["final_loss"]
        if a is None or b is None:
            loss = "-"
        elif len(r["final_losses"]) == 1:
            loss = f"{a:.6f} / {b:.6f}" + (" (identical, every pair)" if a == b else
                                            f" (rel. diff {r['loss_rel_diff']:.1e})")
        else:
            loss = f"{len(r['final_losses'])} different pairs, e.g. {a:.6f} / {b:.6f}"
        quiet = (f"{q['median']:+.1f} % ({q['quartiles'][0]:+.1f}, {q['quartiles'][1]:+.1f}), "
                 f"n={m['quiet_pairs']}" if q else "none")
        config = " ".join(x for x in r["sets"] if x not in common)
        lines.append(
            f"| {r['case']} | {config} | {m['recipe_ms']:.2f} | {m['plain_ms']:.2f} | "
            f"{m['overhead_pct']:+.1f} % | {p['median']:+.1f} % ({p['quartiles'][0]:+.1f}, "
            f"{p['quartiles'][1]:+.1f}) [{p['min']:+.1f}, {p['max']:+.1f}], n={r['repeats']} | "
            f"{quiet} | {md['recipe_ms']:.2f} / {md['plain_ms']:.2f} | {own} | {loss} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--case", action="append", choices=sorted(CASES),
                        help="which comparison(s) to run (repeatable; default: core)")
    parser.add_argument("--repeats", type=int, default=5, help="pairs per case (default 5)")
    parser.add_argument("--warmup", type=int, default=10,
                        help="steps left out at the start (default 10)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="job config override for both sides (after the defaults here)")
    parser.add_argument("--nodes", type=int, default=1,
                        help="1 (default): meshrun run; more: meshrun simulate --nodes N")
    parser.add_argument("--nproc-per-node", type=int, default=4, help="default 4")
    parser.add_argument("--max-busy", type=float, default=0.25,
                        help="wait before a run while the CPUs are busier than this (0-1)")
    parser.add_argument("--max-foreign", type=float, default=0.10,
                        help="a pair is quiet when other processes took at most this share "
                             "of the CPUs during both runs (default 0.10)")
    parser.add_argument("--run-timeout", type=float, default=150.0,
                        help="seconds before a run counts as stuck: killed and retried, up to "
                             "3 tries (default 150)")
    parser.add_argument("--keep-failed", default="", metavar="DIR",
                        help="copy the log folder of every failed or stuck run here")
    parser.add_argument("--gpu", action="store_true", help="the GPU benchmark (meshrun run)")
    parser.add_argument("--rehearse", action="store_true",
                        help="--gpu: run its code path on 2 CPU ranks with tiny models (checks "
                             "the script; the figures mean nothing)")
    parser.add_argument("--gpu-set", action="append", default=[], metavar="KEY=VALUE",
                        help="--gpu: overrides for the large mlp-tp job")
    parser.add_argument("--ae-set", action="append", default=[], metavar="KEY=VALUE",
                        help="--gpu: overrides for the autoencoder job")
    parser.add_argument("--json", default="", help="write every number here")
    args, _ = parser.parse_known_args()
    if args.worker:
        worker()
        return

    load_before = os.getloadavg()
    result: dict = {"load_before": load_before, "cpus": os.cpu_count(), "rows": []}
    with tempfile.TemporaryDirectory(prefix="recipe-bench-") as tmp:
        scratch = Path(tmp)
        meshrun = [sys.executable, "-m", "meshrun"]
        if args.gpu:
            small_mlp, small_ae = (), ()
            if args.rehearse:
                gpus, result["device"] = 2, "2 x CPU (rehearsal: figures mean nothing)"
                small_mlp, small_ae = REHEARSAL_MLP_SETS, REHEARSAL_AE_SETS
            else:
                import torch

                gpus = torch.cuda.device_count()
                if not gpus:
                    raise SystemExit("--gpu: no CUDA device visible here (--rehearse runs "
                                     "this path on the CPU)")
                result["device"] = f"{gpus} x {torch.cuda.get_device_name(0)}"
            runner = Runner([*meshrun, "run", "--nproc-per-node", str(gpus)], scratch,
                            args.max_busy, args.warmup, args.run_timeout,
                            keep_failed=args.keep_failed, max_foreign=args.max_foreign)
            if args.rehearse:
                runner.env["MESHRUN_PEAK_FLOPS"] = REHEARSAL_PEAK
            tp = ("parallel.tp=2",) if gpus % 2 == 0 else ("parallel.tp=1",)
            sets = (*GPU_MLP_SETS, *tp, *small_mlp, *args.set, *args.gpu_set)
            print(f"gpu-mlp on {result['device']}: {' '.join(sets)}", flush=True)
            result["rows"].append(compare(runner, "gpu-mlp", sets, max(1, args.repeats // 2)))
            result["data_ms_per_step_per_rank"] = data_cost_ms(sets)
            ae = (*GPU_AE_SETS, *small_ae, *args.ae_set)
            # two runs on a GPU (their spread); one in a rehearsal (the path, not a figure)
            result["autoencoder"] = [runner.run("gpu-ae", "autoencoder", ae)
                                     for _ in range(1 if args.rehearse else 2)]
            result["autoencoder_sets"] = list(ae)
        else:
            launcher = ([*meshrun, "run"] if args.nodes == 1 else
                        [*meshrun, "simulate", "--nodes", str(args.nodes)])
            launcher += ["--nproc-per-node", str(args.nproc_per_node)]
            runner = Runner(launcher, scratch, args.max_busy, args.warmup, args.run_timeout,
                            keep_failed=args.keep_failed, max_foreign=args.max_foreign)
            for case in args.case or ["core"]:
                sets = (*CPU_SETS, *CASES[case], *args.set)
                print(f"case {case}: {' '.join(sets)}", flush=True)
                result["rows"].append(compare(runner, case, sets, args.repeats))
        result["commands"] = runner.commands
        result["failed_runs"] = runner.failed
    result["load_after"] = os.getloadavg()

    common = CPU_SETS if not args.gpu else ()
    print(f"\nevery CPU row also sets: {' '.join(common)}" if common else "")
    print(table(result["rows"], common))
    for row in result["rows"]:
        if "recipe_mfu" in row:
            print(f"\n{row['case']}: MFU recipe {row['recipe_mfu']:.1%}, plain "
                  f"{row['plain_mfu']:.1%} (bf16 dense peak); CPU data per step per rank "
                  f"{result['data_ms_per_step_per_rank']:.1f} ms")
    if "autoencoder" in result:
        rates = [r.get("samples_per_s") for r in result["autoencoder"]]
        mfus = [r.get("mfu") for r in result["autoencoder"]]
        print(f"\nautoencoder ({' '.join(result['autoencoder_sets'])}): samples/s {rates}, "
              f"MFU {mfus}")
    print("\ncommands (one repeat; $TMP is a scratch folder):")
    for name, command in result["commands"].items():
        print(f"  {name}: {command}")
    for failed in result["failed_runs"]:
        print(f"\nretried: {failed['run_id']}: {failed['why']}: {' | '.join(failed['tail'])}")
    print(f"\nload average before {tuple(round(x, 2) for x in load_before)}, after "
          f"{tuple(round(x, 2) for x in result['load_after'])}; {os.cpu_count()} CPUs")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

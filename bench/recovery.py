"""Effective training time when nodes die (issue 20): meshrun's spares against a job restart
and torchrun's elastic shrink, in one harness, on simulated nodes on this machine.

    python bench/recovery.py [--modes ff,today,spare,shrink,torchrun,torchrun-lc1] [--steps 3000]
                             [--kills 5] [--every 120] [--back 30] [--freeze 3] [--seed 1]
                             [--victims nonzero|node0] [--json out.json]
    python bench/recovery.py --markdown out.json        # the table of docs/benchmarks.md

The job (bench/recovery_job.py): 4 nodes x 1 worker, a step = an all-reduce of 1,024 floats
+ 200 ms of sleep standing in for GPU time, a checkpoint every 25 steps; the script resumes
from its own checkpoint. The failures, the same schedule in every mode (``--seed``): every
``--every`` seconds (+-10 %) after the first step a random non-zero training node's whole
process tree is SIGKILLed (failure ``--freeze`` is a SIGSTOP instead: a frozen node); the
harness starts it again ``--back`` seconds later, as a platform would (a frozen one is
SIGKILLed then). Modes:

* ``ff``: no failure; its wall time for ``--steps`` steps is its start-up plus ``--steps``
  times its mean step (it runs ``min(steps, 600)`` steps: the step is a fixed sleep);
* ``today``: `meshrun run` on 4 nodes as before spares: a lost node ends the job (exit 4
  on every node); the harness starts the whole job again once the node is back (a
  scheduler's restart), and it resumes from the checkpoint;
* ``spare``: `meshrun run --spares 1` on 5 nodes: the spare takes the lost node's seat and
  every node resumes from the checkpoint; the node, started again, waits as a spare;
* ``shrink``: `meshrun run --nnodes 3:4` on 4 nodes, no spare: the job goes on with 3 nodes
  from the checkpoint; the node, started again, is taken back at once (the script is not
  a recipe: meshrun cannot see its checkpoints) and every node resumes from the checkpoint
  in a world of 4 again;
* ``torchrun`` / ``torchrun-lc1``: ``torchrun --nnodes 3:4 --rdzv-backend c10d
  --max-restarts 100`` with its defaults / with ``last_call_timeout=1``: it goes on with 3
  nodes and takes the 4th back when it returns.

``--victims node0`` kills node 0 (the store's host) every time instead: its loss ends the
job in every mode (docs/elastic.md, "Node 0"); each failure also records how long the other
nodes took to exit (``others_end_s``: when a scheduler can act), and the harness starts the
whole job again once node 0 is back.

Reported per mode: the wall time to the last step, ETTR (the failure-free wall time over
it), R for each failure (the failure to the first step completed after it, beyond one in
flight), the steps trained again (lost work), and whether the final weights are bit for bit
those of a failure-free run (bench/recovery_job.expected: the job's gradients sum exactly,
so they are known without running it; a run whose world changed ends elsewhere).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from meshrun.harness import Nodes, clean_env, free_port, kill_tree, signal_tree, tree

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "bench" / "recovery_job.py"
NODES, CKPT, PAUSE = 4, 25, 0.2


def _steps(folder: Path) -> list[dict]:
    path = folder / "steps.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _hash(w) -> str:
    return hashlib.sha256(w.numpy().tobytes()).hexdigest()[:16]


def _weights_hash(folder: Path) -> str:
    import torch

    path = folder / "final.pt"
    return _hash(torch.load(path)["w"]) if path.exists() else ""


def reference_hash(steps: int) -> str:
    """The final weights of a failure-free run of ``steps`` steps on the 4 nodes
    (bench/recovery_job.expected: exact, no run needed)."""
    sys.path.insert(0, str(JOB.parent))
    from recovery_job import expected

    return _hash(expected(steps))


def samples_once(folder: Path, steps: int) -> bool | None:
    """From every rank's sample log: at each step, the ranks of the step's last run (a step
    trained again after a restart is superseded by its later run) trained each of the
    step's samples exactly once. None without a log."""
    sys.path.insert(0, str(JOB.parent))
    from recovery_job import SAMPLES

    path = folder / "samples.jsonl"
    if not path.exists():
        return None
    latest: dict[tuple[int, int], dict] = {}    # (step, rank) -> its last record
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        key = (r["step"], r["rank"])
        if key not in latest or r["t"] >= latest[key]["t"]:
            latest[key] = r
    for step in range(1, steps + 1):
        runs = [r for (s, _), r in latest.items() if s == step]
        if not runs:
            return False
        world = max(runs, key=lambda r: r["t"])["world"]    # the step's last run's world
        last = [r for r in runs if r["world"] == world and r["rank"] < world]
        got = sorted(i for r in last for i in r["samples"])
        if len(last) != world or got != list(range(SAMPLES)):
            return False
    return True


class Torchrun:
    """``NODES`` torchrun agents on loopback (agent 0 first: its c10d store is the job's)."""

    def __init__(self, folder: Path, env: dict, last_call: float | None) -> None:
        self.folder, self.env = folder, env
        port = free_port()
        conf = ["--rdzv-conf", f"last_call_timeout={last_call:g}"] if last_call else []
        self.argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes",
                     f"{NODES - 1}:{NODES}", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                     "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "recovery",
                     "--max-restarts", "100", *conf, str(JOB)]
        self.procs: list[subprocess.Popen] = []

    def _popen(self, node: int, mode: str) -> subprocess.Popen:
        with open(self.folder / f"node{node}.out", mode) as out:
            return subprocess.Popen(self.argv, cwd=self.folder, env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def start(self) -> Torchrun:
        self.procs = [self._popen(0, "w")]
        time.sleep(3.0)  # agent 0 binds the rendezvous store before the others look for it
        self.procs += [self._popen(n, "w") for n in range(1, NODES)]
        return self

    def crash(self, node: int) -> None:
        signal_tree(self.procs[node].pid, signal.SIGKILL)
        self.procs[node].wait()

    def restart(self, node: int) -> None:
        self.procs[node] = self._popen(node, "a")

    def kill(self) -> None:
        for proc in self.procs:
            kill_tree(proc)


def schedule(kills: int, every: float, seed: int) -> list[float]:
    """Seconds after the first step at which each failure comes (+-10 %)."""
    rng = random.Random(seed)
    return [every * (k + 1) + rng.uniform(-0.1, 0.1) * every for k in range(kills)]


def run_mode(mode: str, args: argparse.Namespace, out: Path) -> dict:
    folder = out / mode
    folder.mkdir(parents=True, exist_ok=True)
    steps = min(args.steps, 600) if mode == "ff" else args.steps
    env = clean_env(RECOVERY_DIR=str(folder), RECOVERY_STEPS=str(steps),
                    RECOVERY_CKPT=str(CKPT), RECOVERY_SLEEP_S=str(PAUSE))
    rng = random.Random(args.seed)
    when = [] if mode == "ff" else schedule(args.kills, args.every, args.seed)
    command = ["--", str(JOB)]
    spares = (["--spares", "1"] if mode == "spare" else
              ["--nnodes", f"{NODES - 1}:{NODES}"] if mode == "shrink" else [])
    nnodes = NODES + (1 if mode == "spare" else 0)

    def meshrun_job(attempt: int) -> Nodes:
        return Nodes(folder, command, nnodes=nnodes, nproc=1, run_id=f"rec-{mode}-{attempt}",
                     env=env, extra=spares, log_dir=folder / "logs").start()

    def new_job(attempt: int) -> Nodes | Torchrun:
        if mode.startswith("torchrun"):
            return Torchrun(folder, env, 1.0 if mode == "torchrun-lc1" else None).start()
        return meshrun_job(attempt)

    def whole_restart(job: Nodes | Torchrun, attempt: int) -> Nodes | Torchrun:
        """The job ended (every node exited): the scheduler starts it again."""
        for proc in job.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        job.kill()
        job_restarts.append(time.time())
        ending.clear()   # still running past the platform's restart: not measured
        return new_job(attempt)

    started = time.time()
    job = new_job(0)
    attempt = 0
    job_restarts: list[float] = []
    failures: list[dict] = []
    ending: list[dict] = []   # node 0's losses whose job's other nodes have not all exited
    pending: list[tuple[float, int, bool]] = []   # (restart at, node, frozen)
    first = None
    deadline = started + args.steps * PAUSE * 4 + 900
    try:
        while time.time() < deadline:
            time.sleep(0.05)
            log = _steps(folder)
            if first is None and log:
                first = log[0]["t"]
            if log and log[-1]["step"] >= steps:
                break
            now = time.time()
            if first is not None and when and now - first >= when[0]:
                when.pop(0)
                frozen = len(failures) + 1 == args.freeze
                victim = _victim(mode, job, rng, node0=args.victims == "node0")
                if victim is not None:
                    last = log[-1]["step"] if log else 0
                    if frozen:
                        signal_tree(job.procs[victim].pid, signal.SIGSTOP)
                    else:
                        job.crash(victim)
                    failures.append({"t": now, "node": victim, "frozen": frozen,
                                     "last_step": last, "others_end_s": None})
                    if args.victims == "node0":   # its loss ends the job: when did it?
                        ending.append(failures[-1])
                    pending.append((now + args.back, victim, frozen))
            for f in list(ending):   # when every other node of the job it hit had exited
                if all(p.poll() is not None for k, p in enumerate(job.procs) if k != f["node"]):
                    f["others_end_s"] = round(now - f["t"], 2)
                    ending.remove(f)
            for item in list(pending):
                at, node, frozen = item
                if now < at:
                    continue
                pending.remove(item)
                if frozen:
                    job.crash(node)
                others = [p for k, p in enumerate(job.procs) if k != node]
                if mode == "today" or all(p.poll() is not None for p in others):
                    # a lost node ended the job; the scheduler starts it again once the node
                    # is back (every node's exit is waited for: they stop within seconds)
                    attempt += 1
                    job = whole_restart(job, attempt)
                else:
                    job.restart(node)
            if not pending and all(p.poll() is not None for p in job.procs):
                final = _steps(folder)
                if final and final[-1]["step"] >= steps:
                    continue  # it finished: the loop's first check ends the mode
                attempt += 1  # the job ended by itself before its last step: restarted
                job = whole_restart(job, attempt)
        log = _steps(folder)
        done = bool(log) and log[-1]["step"] >= steps
        ended = time.time()
        for proc in job.procs:  # the job's own end (spares leave when node 0 says done)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
    finally:
        job.kill()
    for f in failures:
        after = [r for r in log if r["t"] > f["t"] + PAUSE + 0.1]
        f["recovery_s"] = round(after[0]["t"] - f["t"], 2) if after else None
        f["resumed_at"] = after[0]["step"] - 1 if after else None
        f["lost_steps"] = (f["last_step"] - f["resumed_at"]) if after else None
        f["world_after"] = after[0]["world"] if after else None
    wall = (log[-1]["t"] - started) if done else None
    step_times = [b["t"] - a["t"] for a, b in zip(log, log[1:]) if b["step"] == a["step"] + 1]
    return {"mode": mode, "steps": steps, "done": done, "wall_s": wall,
            "startup_s": round(first - started, 2) if first else None,
            "mean_step_s": statistics.mean(step_times) if step_times else None,
            "failures": failures, "weights": _weights_hash(folder),
            "samples_once": samples_once(folder, steps) if done else None,
            "job_restarts": [round(t - started, 1) for t in job_restarts],
            "codes": [p.returncode for p in job.procs], "ended_s": round(ended - started, 1)}


def _victim(mode: str, job, rng: random.Random, node0: bool = False) -> int | None:
    """A random non-zero node that is training now (has workers; a spare has none); with
    ``node0``, node 0 when it trains."""
    alive = [n for n in ((0,) if node0 else range(1, len(job.procs)))
             if job.procs[n].poll() is None and _training(job.procs[n].pid)]
    return rng.choice(alive) if alive else None


def _training(pid: int) -> bool:
    """A worker of the job runs under ``pid`` (meshrun's shim and torchrun's worker both
    carry the script's path)."""
    for each in tree(pid)[1:]:
        try:
            if JOB.name.encode() in open(f"/proc/{each}/cmdline", "rb").read():
                return True
        except OSError:
            continue
    return False


def summarise(results: list[dict], steps: int) -> list[dict]:
    ff = next((r for r in results if r["mode"] == "ff"), None)
    reference = {n: reference_hash(n) for n in {r["steps"] for r in results}}
    ff_wall = (ff["startup_s"] + steps * ff["mean_step_s"]) if ff and ff["mean_step_s"] else None
    rows = []
    for r in results:
        kills = [f["recovery_s"] for f in r["failures"] if not f["frozen"] and f["recovery_s"]]
        frozen = [f["recovery_s"] for f in r["failures"] if f["frozen"] and f["recovery_s"]]
        wall = ff_wall if r["mode"] == "ff" else r["wall_s"]
        rows.append({
            "mode": r["mode"], "wall_s": round(wall, 1) if wall else None,
            "ettr": round(ff_wall / wall, 3) if ff_wall and wall else None,
            "r_median_s": statistics.median(kills) if kills else None,
            "r_all_s": kills, "r_frozen_s": frozen,
            "lost_steps": sum(f["lost_steps"] or 0 for f in r["failures"]),
            "failures": len(r["failures"]), "done": r["done"],
            "job_restarts": len(r.get("job_restarts", [])),
            "same_weights_as_ff": r["weights"] == reference[r["steps"]],
            "samples_once": r.get("samples_once"),
            "worlds": sorted({f["world_after"] for f in r["failures"] if f["world_after"]}),
        })
    return rows


def markdown(data: dict) -> str:
    lines = ["| mode | wall for the steps (s) | ETTR | R median, killed (s) | R each (s) | "
             "R frozen (s) | steps trained again | whole-job restarts | weights = failure-free | "
             "each sample once a step |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in data["summary"]:
        lines.append(
            f"| {row['mode']} | {row['wall_s']} | {row['ettr']} | {row['r_median_s']} | "
            f"{', '.join(f'{x:.1f}' for x in row['r_all_s'])} | "
            f"{', '.join(f'{x:.1f}' for x in row['r_frozen_s'])} | {row['lost_steps']} | "
            f"{row['job_restarts']} | {'yes' if row['same_weights_as_ff'] else 'no'} | "
            f"{ {True: 'yes', False: 'no'}.get(row.get('samples_once'), '-') } |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="ff,today,spare,shrink,torchrun,torchrun-lc1")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--every", type=float, default=120.0)
    parser.add_argument("--back", type=float, default=30.0)
    parser.add_argument("--freeze", type=int, default=3,
                        help="which failure is a SIGSTOP (0: none)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--victims", choices=("nonzero", "node0"), default="nonzero",
                        help="whom the failures hit: a random non-zero training node, or node 0")
    parser.add_argument("--json")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return 0
    out = Path(tempfile.mkdtemp(prefix="recovery-"))
    results = []
    for mode in args.modes.split(","):
        print(f"mode {mode} ...", file=sys.stderr, flush=True)
        results.append(run_mode(mode, args, out))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    data = {"args": vars(args), "results": results,
            "summary": summarise(results, args.steps), "folder": str(out)}
    text = json.dumps(data, indent=2)
    if args.json:
        Path(args.json).write_text(text)
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`meshrun diagnose` on a large log: wall time and peak memory, whatever the log's size.

    python bench/diagnose_size.py [--mb 200] [--repeats 3] [--json out.json]

A rank log of ``--mb`` MB is written in a temporary folder: ordinary training lines (a
step, its loss, its rate), a rank's disk-full traceback a third of the way in (neither
the head nor the tail that are read whole), and 200 lines of NCCL-style timeout warnings
at the end, as the other ranks would print while they waited. Then `meshrun diagnose FILE`
runs as a child process, ``--repeats`` times; each run's wall time, the child's peak
resident memory (``ru_maxrss``) and the first diagnosis code are reported. The anchor, in
the same run: `wc -l FILE` (one read of the file, nothing kept), the least any reader pays.

Issue 21 measured the reader before (the whole file in memory, every line through the
catalog): 35 s and 1.26 GB for 200 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FILLER = "[rank1]: step {} loss 2.3125 lr 0.0001 samples/s 812.4 tokens 4096 grad_norm 0.93\n"
CAUSE = ["[rank1]: Traceback (most recent call last):",
         '[rank1]:   File "train.py", line 40, in <module>',
         "[rank1]:     torch.save(state, path)",
         "[rank1]: OSError: [Errno 28] No space left on device: '/ckpt/step-300.pt'"]
WAIT = ("[rank0]: [E ProcessGroupGloo.cpp:144] Rank 0 timed out waiting for rank 1 in "
        "allreduce after 1800000 ms\n")


def write_log(path: Path, megabytes: int) -> int:
    """The log; the line number of the cause's last line."""
    target = megabytes << 20
    lines = 0
    with open(path, "w") as handle:
        written, cause_at, step = 0, target // 3, 0
        while written < target:
            if cause_at is not None and written >= cause_at:
                for line in CAUSE:
                    handle.write(line + "\n")
                lines += len(CAUSE)
                cause_line, cause_at = lines, None
                continue
            text = FILLER.format(step)
            handle.write(text)
            written += len(text)
            step += 1
            lines += 1
        for _ in range(200):
            handle.write(WAIT)
    return cause_line


def timed(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds, the child's peak RSS in MB, its stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of the children is the largest of any child so far: run the big one last
    return wall, max(peak, before) / 1024, done.stdout + done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "rank1.log"
        cause_line = write_log(log, a.mb)
        size = log.stat().st_size
        runs = []
        for _ in range(a.repeats):
            anchor, _, _ = timed(["wc", "-l", str(log)])
            wall, peak, out = timed([sys.executable, "-m", "meshrun", "diagnose", "--json",
                                     str(log)])
            try:
                found = json.loads(out[out.index("{"):]).get("diagnoses", [])
            except ValueError:
                found = []
            first = found[0] if found else {}
            runs.append({"wall_s": round(wall, 2), "peak_rss_mb": round(peak, 1),
                         "anchor_wc_s": round(anchor, 2), "code": first.get("code"),
                         "line_no": first.get("line_no")})
            print(json.dumps(runs[-1]), flush=True)
    row = {"log_mb": round(size / 2**20, 1), "cause_line": cause_line, "runs": runs,
           "wall_s_median": statistics.median(r["wall_s"] for r in runs),
           "peak_rss_mb_max": max(r["peak_rss_mb"] for r in runs),
           "cpus": os.cpu_count()}
    print(json.dumps(row, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(row, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

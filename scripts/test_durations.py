#!/usr/bin/env python3
"""Write tests/durations.json, the suite's scheduling hint, from the per-test logs of runs.

    MESHRUN_TEST_CPU_LOG=/tmp/cpu.jsonl ./scripts/test.sh      # or CI's fresh-clone run
    python scripts/test_durations.py /tmp/cpu.jsonl [more.jsonl ...]

Each test of at least a second of wall time, by node id (its xdist group left out), with the
mean over the logs given. tests/conftest.py hands pytest-xdist the longest units of work
first (docs/testing.md, "Order"); a test missing from the file only runs later than ideal.
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "durations.json"


def main(logs: list[str]) -> int:
    if not logs:
        print(__doc__)
        return 2
    seen: dict[str, list[float]] = defaultdict(list)
    for log in logs:
        for line in Path(log).read_text().splitlines():
            row = json.loads(line)
            seen[row["test"].split("@")[0]].append(float(row["wall_s"]))
    means = {test: round(sum(v) / len(v), 1) for test, v in sorted(seen.items())}
    OUT.write_text(json.dumps({t: s for t, s in means.items() if s >= 1.0}, indent=0) + "\n")
    print(f"{OUT}: {sum(s >= 1.0 for s in means.values())} tests of {len(means)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

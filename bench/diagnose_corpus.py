"""meshrun diagnose against real failures from public threads (tests/corpus/).

    python bench/diagnose_corpus.py [--json out.json] [--show]

For every corpus file (its header gives the cause the thread settled on) the first, root-cause
diagnosis is compared with that cause: right; cause not named (nothing, ``unknown``, or only
an error class such as ``nccl-system-error``); or wrong (another cause named with confidence:
worse than naming none). Prints one row per file with ``--show`` and the totals always.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
HEADER_KEYS = ("source", "thread", "settled", "cause")


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    thread: str
    settled: str
    cause: str
    text: str


def load(path: Path) -> Case:
    """One corpus file: its header fields and the excerpt below ``# ---``."""
    head, sep, text = path.read_text(encoding="utf-8").partition("\n# ---\n")
    if not sep:
        raise ValueError(f"{path.name}: no '# ---' line between the header and the excerpt")
    fields: dict[str, str] = {}
    for line in head.splitlines():
        key, colon, value = line.removeprefix("# ").partition(":")
        if not line.startswith("# ") or not colon or key not in HEADER_KEYS:
            raise ValueError(f"{path.name}: header line {line!r} is not '# <key>: <value>'")
        fields[key] = value.strip()
    missing = [k for k in HEADER_KEYS if not fields.get(k)]
    if missing:
        raise ValueError(f"{path.name}: header lacks {', '.join(missing)}")
    return Case(path.name, text=text, **fields)


def cases(folder: Path = CORPUS) -> list[Case]:
    return [load(p) for p in sorted(folder.rglob("*.log"))]


OUTCOMES = ("right", "unnamed", "wrong")


def verdict(case: Case) -> tuple[str, str]:
    """(outcome, the code diagnose put first or "-"). The outcome of the first, root-cause
    diagnosis: ``right`` (the settled cause's code); ``unnamed`` (no diagnosis, ``unknown``, or a
    code that names no cause: NCCL's own error classes, a victim's timeout, advice); ``wrong``
    (another cause, named with confidence: worse than unnamed)."""
    sys.path.insert(0, str(ROOT / "src"))
    from meshrun.diagnose import diagnose_text

    found = diagnose_text(case.text, name=case.name)
    if not found:
        return "unnamed", "-"
    first = found[0]
    if not first.names_cause:  # an error class or a victim's view is never the cause
        return "unnamed", first.code
    return ("right" if first.code == case.cause else "wrong"), first.code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--show", action="store_true", help="one row per file")
    args = parser.parse_args()
    rows = []
    for case in cases():
        outcome, first = verdict(case)
        rows.append({"file": case.name, "cause": case.cause, "diagnosed": first,
                     "outcome": outcome, "source": case.source})
        if args.show:
            print(f"{outcome:8} {case.cause:28} {first:28} {case.name}")
    total = len(rows)
    counts = {k: sum(r["outcome"] == k for r in rows) for k in OUTCOMES}
    print(f"corpus: {total} real failures; right {counts['right']} "
          f"({100 * counts['right'] / max(total, 1):.0f} %), cause not named "
          f"{counts['unnamed']}, wrong {counts['wrong']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": counts, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

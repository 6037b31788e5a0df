"""meshrun diagnose against real failures from public threads (tests/corpus/).

    python bench/diagnose_corpus.py [--json out.json] [--show] [--classes] [--show-heldout]

Two sets: ``issues/``, the development set (the signatures were written reading it), and
``heldout/``, collected before the signatures of its classes were written and not read
while writing them: its figure is the honest one. A third folder, ``wordings/``, holds
other wordings of causes the development set already has (older torch, other frameworks,
Windows, SLURM's own words): signatures were written reading it too, and its line says how
many of them get their code. For every file (its header gives the
cause the thread settled on) the first, root-cause diagnosis is compared with that cause:
right; cause not named (nothing, ``unknown``, or only an error class such as
``nccl-system-error``); or wrong (another cause named with confidence: worse than naming
none). A diagnosis whose text names two possible causes (``port-in-use``: a port taken, or
a second node started as node 0) is right when the settled cause is one of them
(:attr:`Signature.also`). Prints the totals of each set always; ``--classes`` one row per
settled cause; ``--show`` one row per development file; ``--show-heldout`` the held-out
files too (look only once the signatures are frozen).
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


DEV, HELDOUT, WORDINGS = CORPUS / "issues", CORPUS / "heldout", CORPUS / "wordings"


def cases(folder: Path = DEV) -> list[Case]:
    return [load(p) for p in sorted(folder.glob("*.log"))]


def heldout() -> list[Case]:
    return cases(HELDOUT)


OUTCOMES = ("right", "unnamed", "wrong")


def verdict(case: Case) -> tuple[str, str]:
    """(outcome, the code diagnose put first or "-"). The outcome of the first, root-cause
    diagnosis: ``right`` (the settled cause's code); ``unnamed`` (no diagnosis, ``unknown``, or a
    code that names no cause: NCCL's own error classes, a victim's timeout, advice); ``wrong``
    (another cause, named with confidence: worse than unnamed)."""
    sys.path.insert(0, str(ROOT / "src"))
    from meshrun.diagnose import diagnose_text
    from meshrun.diagnose.catalog import CATALOG

    found = diagnose_text(case.text, name=case.name)
    if not found:
        return "unnamed", "-"
    first = found[0]
    if not first.names_cause:  # an error class or a victim's view is never the cause
        return "unnamed", first.code
    also = {c for s in CATALOG if s.code == first.code for c in s.also}
    return ("right" if case.cause in {first.code, *also} else "wrong"), first.code


def first_code(case: Case) -> str:
    """The code ``meshrun diagnose`` puts first for ``case`` ("-": none): the wordings set
    asks only that (a wording of an error class, such as a segfault, names its class)."""
    return verdict(case)[1]


def tally(rows: list[dict]) -> dict[str, int]:
    return {k: sum(r["outcome"] == k for r in rows) for k in OUTCOMES}


def by_class(rows: list[dict]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        out.setdefault(row["cause"], dict.fromkeys(OUTCOMES, 0))[row["outcome"]] += 1
    return dict(sorted(out.items()))


def split_line(rows: list[dict], dev_rows: list[dict]) -> str:
    """The held-out set in three parts: causes the development set already holds 5 excerpts
    of (the common ones: a sample that skipped them would see only the rare ones), causes it
    holds fewer of, and causes no code names (``new:`` labels: never right)."""
    held = {}
    for row in dev_rows:
        held[row["cause"]] = held.get(row["cause"], 0) + 1
    parts = {"common": [], "rarer": [], "no code": []}
    for row in rows:
        key = ("no code" if row["cause"].startswith("new:")
               else "common" if held.get(row["cause"], 0) >= 5 else "rarer")
        parts[key].append(row)
    return "held-out by cause: " + "; ".join(
        f"{key} {len(part)} (right {tally(part)['right']}, wrong {tally(part)['wrong']})"
        for key, part in parts.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--show", action="store_true", help="one row per development file")
    parser.add_argument("--show-heldout", action="store_true",
                        help="one row per held-out file as well")
    parser.add_argument("--classes", action="store_true", help="one row per settled cause")
    args = parser.parse_args()
    report = {}
    for name, folder, show in (("development", DEV, args.show),
                               ("held-out", HELDOUT, args.show_heldout)):
        rows = []
        for case in cases(folder):
            outcome, first = verdict(case)
            rows.append({"file": case.name, "cause": case.cause, "diagnosed": first,
                         "outcome": outcome, "source": case.source})
            if show:
                print(f"{outcome:8} {case.cause:28} {first:28} {case.name}")
        counts, total = tally(rows), len(rows)
        if args.classes:
            print(f"{name}: {'cause':30} right unnamed wrong")
            for cause, c in by_class(rows).items():
                print(f"{'':{len(name) + 2}}{cause:30} {c['right']:5} {c['unnamed']:7} "
                      f"{c['wrong']:5}")
        print(f"{name}: {total} real failures; right {counts['right']} "
              f"({100 * counts['right'] / max(total, 1):.0f} %), cause not named "
              f"{counts['unnamed']}, wrong {counts['wrong']}")
        report[name] = {"counts": counts, "classes": by_class(rows), "rows": rows}
        if name == "held-out":
            print(split_line(rows, report["development"]["rows"]))
    worded = cases(WORDINGS)
    named = [c for c in worded if first_code(c) == c.cause]
    print(f"wordings: {len(worded)} real failures in other words than the development set's "
          f"(other versions, frameworks, systems); named by their code {len(named)}")
    report["wordings"] = {"total": len(worded), "named": len(named),
                          "missed": [c.name for c in worded if c not in named]}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Rewrite the catalog table at the end of docs/diagnose.md from meshrun.diagnose.CATALOG.

    python scripts/catalog_table.py          # rewrite the table
    python scripts/catalog_table.py --check  # exit 1 when the docs are out of date

A cause or fix computed from the message is shown as the first fixture of
tests/unit/fixtures/failure_logs/ (in name order) that produces that code.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from meshrun.diagnose import catalog_table, diagnose_files  # noqa: E402

DOC = ROOT / "docs" / "diagnose.md"
HEAD = "| code | tier | matches | cause | fix |"


def table() -> str:
    examples = {}
    for path in sorted((ROOT / "tests" / "unit" / "fixtures" / "failure_logs").glob("*.log")):
        for found in diagnose_files([path]):
            examples.setdefault(found.code, found)
    return catalog_table(examples)


def main() -> int:
    text = DOC.read_text()
    before, sep, _ = text.partition(HEAD)
    if not sep:
        print(f"{DOC}: no catalog table (a line starting {HEAD!r})", file=sys.stderr)
        return 1
    new = before + table() + "\n"
    if "--check" in sys.argv[1:]:
        return 0 if new == text else 1
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())

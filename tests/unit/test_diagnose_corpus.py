"""meshrun diagnose on real failures from public threads (tests/corpus/, bench/diagnose_corpus.py).

Each excerpt is what a user posted; its header names the cause the thread settled on. The
line held here: no excerpt gets a confidently wrong cause (worse than naming none), and the
share of right causes does not fall below what it is today.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from diagnose_corpus import cases, verdict  # noqa: E402

from meshrun import diagnose  # noqa: E402

CASES = cases()
RIGHT_AT_LEAST = 0.83  # 52 of 62 on 2026-11-24 (docs/diagnose.md#how-good-is-it)


def test_the_corpus_is_big_enough_and_its_headers_are_sound():
    assert len(CASES) >= 60
    known = set(diagnose.codes())
    for case in CASES:
        assert re.match(r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+$", case.source), \
            case.name
        assert case.cause in known or case.cause.startswith("new:"), (case.name, case.cause)
        assert case.text.strip() and len(case.settled) > 20, case.name


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_no_excerpt_gets_a_confidently_wrong_cause(case):
    outcome, first = verdict(case)
    assert outcome != "wrong", (case.cause, first)


def test_most_excerpts_get_their_settled_cause():
    right = sum(verdict(case)[0] == "right" for case in CASES)
    assert right / len(CASES) >= RIGHT_AT_LEAST, f"{right} of {len(CASES)}"

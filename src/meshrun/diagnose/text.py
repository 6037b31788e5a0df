"""Diagnoses for people and machines: one sentence per cause (:func:`render_text`), the
``--json`` shape (:func:`to_json`) and the catalog table of docs/diagnose.md
(:func:`catalog_table`). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .catalog import BY_CODE, codes
from .records import TIERS, Diagnosis

# --- output -----------------------------------------------------------------------------------

def to_json(diagnoses: Sequence[Diagnosis]) -> dict:
    """``{"diagnoses": [{"code", "cause", "fix", "rank", "host", "line", ...}, ...]}``."""
    return {"diagnoses": [d.to_dict() for d in diagnoses]}


def _ranges(values: Sequence[int]) -> str:
    out: list[str] = []
    values = sorted(set(values))
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ", ".join(out)


def _who(group: Sequence[Diagnosis]) -> str:
    ranks = [d.rank for d in group if d.rank is not None]
    locals_ = [d.local_rank for d in group if d.rank is None and d.local_rank is not None]
    hosts = list(dict.fromkeys(d.host for d in group if d.host))
    if ranks:
        who = f"rank {ranks[0]}" if len(set(ranks)) == 1 else f"ranks {_ranges(ranks)}"
    elif locals_:
        who = (f"local rank {locals_[0]}" if len(set(locals_)) == 1
               else f"local ranks {_ranges(locals_)}")
    else:
        who = ""
    if hosts:
        where = ", ".join(hosts)
        return f"{who} on {where}" if who else where
    return who or "this run"


def render_text(diagnoses: Sequence[Diagnosis]) -> str:
    """One sentence per code, root cause first: ``rank 3 on host-b: CUDA out of memory — ...``."""
    if not diagnoses:
        return "no known failure found in these logs"
    groups: dict[str, list[Diagnosis]] = {}
    for d in diagnoses:
        groups.setdefault(d.code, []).append(d)
    lines = []
    for group in groups.values():
        first = group[0]
        summary = first.summary or first.code
        lines.append(f"{_who(group)}: {summary} — {first.cause}; fix: {first.fix}")
    return "\n".join(lines)


def catalog_table(examples: Mapping[str, Diagnosis] | None = None) -> str:
    """The catalog as a Markdown table (code, tier, what it matches, cause, fix), for the docs.

    A cause or fix computed from the message is shown as the one ``examples[code]`` (a
    diagnosis of that code) got, prefixed "e.g.", or as "(from the message)" without one.
    """
    examples = examples or {}
    rows = ["| code | tier | matches | cause | fix |", "|---|---|---|---|---|"]
    for code in codes():
        sig = BY_CODE[code]
        tier = (TIERS[sig.priority] if isinstance(sig.priority, int)
                else getattr(sig.priority, "label", "setup or effect"))
        shown = []
        for value, attr in ((sig.cause, "cause"), (sig.fix, "fix")):
            if isinstance(value, str):
                shown.append(value)
            elif code in examples:
                shown.append("e.g. " + getattr(examples[code], attr))
            else:
                shown.append("(from the message)")
        cells = [c.replace("|", "\\|").replace("\n", " ") for c in (sig.matches, *shown)]
        rows.append(f"| `{code}` | {tier} | {cells[0]} | {cells[1]} | {cells[2]} |")
    return "\n".join(rows)

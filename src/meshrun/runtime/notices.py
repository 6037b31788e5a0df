"""The notices every node prints once (a slow node named: :mod:`meshrun.runtime.stragglers`).

Node 0 numbers each notice (``seq``, from 1) and keeps the newest :data:`KEEP` for its
watch, which carries them every beat; every other node hands on only the ones newer than
the last it printed, so a notice is printed once on every node however many watches carry
it.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

KEEP = 8   # the newest notices node 0's watch carries


class Notices:
    """One node's notices: the newest numbered ones (node 0) and the last number made or
    printed."""

    def __init__(self) -> None:
        self.newest: tuple[dict, ...] = ()
        self.seq = 0

    def number(self, notice: Mapping) -> dict:
        """Node 0: ``notice`` with the next number, kept among the newest."""
        self.seq += 1
        record = {**notice, "seq": self.seq}
        self.newest = (*self.newest, record)[-KEEP:]
        return record

    def unseen(self, records: Iterable[Mapping]) -> list[dict]:
        """The others: the records (node 0's watch's) numbered after the last one printed."""
        out = []
        for record in records:
            if int(record.get("seq", 0)) > self.seq:
                self.seq = int(record["seq"])
                out.append(dict(record))
        return out

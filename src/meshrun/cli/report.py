"""``meshrun report [--json] [--baseline RUN-DIR] RUN-DIR ...``: what runs achieved
(samples/s, MFU, last loss) and how throughput scaled between them
(:mod:`meshrun.reports.report`)."""

from __future__ import annotations

import argparse
import json

from .base import Context, Verb


class ReportVerb(Verb):
    name = "report"
    help = "what runs achieved (samples/s, MFU) and how throughput scaled between them"
    takes_paths = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("paths", nargs="*", metavar="RUN_DIR", help="run log folders")
        parser.add_argument("--baseline", metavar="RUN_DIR",
                            help="the run the others are compared with (default: the smallest "
                                 "world)")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def run(self, ctx: Context) -> int:
        from ..reports.report import render_text, report

        found = report(ctx.words or [], baseline=ctx.args.baseline)
        print(json.dumps(found.to_json(), indent=2) if ctx.args.json else render_text(found))
        return 0


VERB = ReportVerb()

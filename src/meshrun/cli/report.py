"""``meshrun report [--json] [--html] [--baseline RUN-DIR] RUN-DIR ...``: what runs achieved
(samples/s, MFU, last loss, goodput) and how throughput scaled between them
(:mod:`meshrun.reports.report`); ``--html`` writes each run's page, ``RUN-DIR/report.html``
(:mod:`meshrun.reports.page`)."""

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
        parser.add_argument("--html", action="store_true",
                            help="write each run's page, RUN_DIR/report.html (offline, one "
                                 "file: goodput, loss, throughput, nodes, a timeline)")

    def run(self, ctx: Context) -> int:
        from ..reports.report import render_text, report

        found = report(ctx.words or [], baseline=ctx.args.baseline)
        if ctx.args.html:
            from ..reports.page import write

            for run in found.runs:
                base = ctx.args.baseline if ctx.args.baseline != run.path else None
                print(f"meshrun: wrote {write(run.path, baseline=base)}")
            return 0
        print(json.dumps(found.to_json(), indent=2) if ctx.args.json else render_text(found))
        return 0


VERB = ReportVerb()

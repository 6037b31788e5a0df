"""``meshrun diagnose [--json] LOG|RUN-DIR ...``: failures explained, root cause first
(:mod:`meshrun.diagnose`). A job config (``--config``/``--set``/``--recipe``) lets the
out-of-memory fix name the numbers."""

from __future__ import annotations

import argparse
import json

from ..errors import UsageError
from .base import Context, Verb
from .options import add_job_flags


class DiagnoseVerb(Verb):
    name = "diagnose"
    help = "explain failures in logs (files or run folders)"
    takes_paths = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("paths", nargs="*", metavar="LOG",
                            help="log files or run log folders")
        parser.add_argument("--json", action="store_true", help="print the diagnoses as JSON")
        add_job_flags(parser)

    def run(self, ctx: Context) -> int:
        from ..diagnose import diagnose_files, render_text, to_json

        a, paths = ctx.args, ctx.words
        if not paths:
            raise UsageError("'meshrun diagnose' needs log files or a run's log folder",
                             hint="meshrun diagnose logs/<run-id>  (or: meshrun diagnose a.log "
                                  "b.log)", code="no-log-paths")
        job = None
        if a.config or a.set or a.recipe:
            from .. import job as jobcfg
            from .. import recipes

            file_data = jobcfg.load_file(a.config) if a.config else None
            sets = jobcfg.parse_sets(a.set) if a.set else {}
            if a.recipe:
                sets["recipe"] = a.recipe
            name = jobcfg.recipe_name(file_data, sets)
            defaults = recipes.get(name).defaults if name else None
            world = int(ctx.env.get("MESHRUN_DIAGNOSE_WORLD_SIZE", "1"))
            job = jobcfg.resolve(recipe_defaults=defaults, file_data=file_data, sets=sets,
                                 world_size=world, nproc_per_node=world, nnodes=1,
                                 run_id="diagnose", config_path=a.config)
        found = diagnose_files(paths, job=job)
        if a.json:
            print(json.dumps(to_json(found), indent=2))
        else:
            print(render_text(found) if found else "meshrun diagnose: no known failure "
                  "signature and no error line found")
        return 0


VERB = DiagnoseVerb()
